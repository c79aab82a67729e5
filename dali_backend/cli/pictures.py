"""The pictures the CLI draws: ``demo``'s batch grid, and the ``preview`` command (original, fallback
and DALI outputs and their difference, tiles and class histogram): OpenCV drawing and atomic image
writing, imported by :mod:`dali_backend.cli` only."""

from __future__ import annotations

from pathlib import Path

import logging
import warnings

from .cliargs import printable
from .targetflags import load_data_with_targets
from ..errors import FallbackWarning, OutputFileError
from ..index import write_atomic

log = logging.getLogger("dali_backend.cli")

MAX_PREVIEW_DRAWS = 64
DIFF_GAIN = 16  # the preview's difference column shows |fallback - DALI| multiplied by this


def save_preview(images, labels, classes, spec, path: Path, columns: int = 8) -> None:
    """Write a PNG grid of a batch (denormalised), each tile labelled with its class."""
    import numpy as np

    x = images.detach().cpu().float().numpy()
    if spec.dtype != "uint8":
        x = x * np.asarray(spec.std)[None, :, None, None] + np.asarray(spec.mean)[None, :, None, None]
        x = x * 255.0
    x = np.clip(x, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)[..., ::-1]  # RGB -> BGR for OpenCV
    n = len(x)
    rows = -(-n // columns)
    h, w = x.shape[1:3]
    grid = np.zeros((rows * (h + 18), columns * w, 3), np.uint8)
    for i in range(n):
        r, c = divmod(i, columns)
        tile = np.ascontiguousarray(x[i])
        grid[r * (h + 18) + 18:(r + 1) * (h + 18), c * w:(c + 1) * w] = tile
        draw_text(grid, classes[int(labels[i])], c * w + 3, r * (h + 18) + 13, w - 6, 0.45, (255, 255, 255))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_image(path, grid)


def _write_image(path: Path, img) -> None:
    """Encode ``img`` in the format ``path``'s suffix names (default PNG) and write it atomically
    (:func:`~dali_backend.index.write_atomic`: a folder, FIFO or device at ``path`` is refused, never opened)."""
    import cv2

    suffix = path.suffix.lower() or ".png"
    try:
        ok, data = cv2.imencode(suffix, img)
    except cv2.error:
        ok = False
    if not ok:
        raise OutputFileError(f"OpenCV could not write {path} (no {suffix} encoder); give a .png file name")
    write_atomic(path, lambda f: f.write(data.tobytes()), "preview image")


def draw_text(img, text: str, x: int, y: int, max_width: int, scale: float = 0.5, color=(0, 0, 0)) -> None:
    """Text at (x, y), shrunk until it fits in ``max_width`` pixels, then cut (ending in ``.``) if it
    still does not: a caption never runs into its neighbour's."""
    import cv2

    def width(t: str) -> int:
        return cv2.getTextSize(t, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][0]

    while scale > 0.3 and width(text) > max_width:
        scale -= 0.05
    while len(text) > 1 and width(text) > max_width:
        text = text[:-2] + "." if len(text) > 2 else text[:1]
    cv2.putText(img, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1, cv2.LINE_AA)


def _histogram(classes, counts, width: int, height: int):
    import cv2
    import numpy as np

    img = np.full((height, width, 3), 255, np.uint8)
    top = max(int(counts.max()), 1)
    bar_w = max(4, (width - 20) // max(1, len(classes)))
    for i, (c, k) in enumerate(zip(classes, counts)):
        h = int((height - 45) * k / top)
        x = 10 + i * bar_w
        cv2.rectangle(img, (x + 4, height - 25 - h), (x + bar_w - 4, height - 25), (150, 110, 60), -1)
        draw_text(img, f"{c} {k / max(1, counts.sum()):.0%}", x + 4, height - 8, bar_w - 6, 0.4)
    draw_text(img, "classes drawn in one sampler epoch", 10, 15, width - 20, 0.45)
    return img


def letterbox_tile(img, width: int, height: int, fill: int = 48):
    """``img`` resized to fit ``width`` x ``height`` at its own aspect ratio, centred on a ``fill`` background."""
    import cv2
    import numpy as np

    h, w = img.shape[:2]
    scale = min(width / w, height / h)
    nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
    small = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_AREA)
    tile = np.full((height, width, *img.shape[2:]), fill, img.dtype)
    top, left = (height - nh) // 2, (width - nw) // 2
    tile[top:top + nh, left:left + nw] = small
    return tile


def is_crop(op) -> bool:
    """Whether ``op`` crops a window of its input (the crops of :mod:`dali_backend.transforms.crop` say
    which: ``window(params)``)."""
    return callable(getattr(op, "window", None))


def crop_windows(spec, params: list[dict], size: tuple[int, int]) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Each crop's window of one draw in the *original* image's pixels: ``[(op name, (top, left, h, w))]``.

    Windows are traced back through the operations before them while those only resize (exact or
    shorter side) or change values; after a flip, turn, rotation or letterbox the trace stops (a
    rectangle would no longer be a rectangle of the original), and later crops are not drawn."""
    from ..transforms.resize import Resize

    out = []
    top, left, sy, sx = 0.0, 0.0, 1.0, 1.0  # the current frame's pixel (y, x) = (top + sy*y, left + sx*x)
    h, w = size
    for op, p in zip(spec.transforms, params, strict=True):
        if is_crop(op):
            t, l, ch, cw = op.window(p)
            out.append((type(op).__name__, (top + sy * t, left + sx * l, sy * ch, sx * cw)))
            nh, nw = op.output_size((h, w), p)
            # the crop's output frame: its window stretched to the output size
            top, left, sy, sx = top + sy * t, left + sx * l, sy * ch / nh, sx * cw / nw
            h, w = nh, nw
        elif isinstance(op, Resize) and not op.letterbox:
            nh, nw = op.output_size((h, w), p)
            sy, sx, h, w = sy * h / nh, sx * w / nw, nh, nw
        elif op.KIND == "geometric" and not op.is_identity:
            break
    return out


def overlay_targets(rgb, mask=None, boxes=None, thick: int = 1):
    """A copy of the RGB tile ``rgb`` (H x W x 3 uint8, or gray H x W) with the mask's foreground tinted
    green and each box (XYXY pixels) drawn in yellow: what the preview shows of a draw's targets."""
    import cv2
    import numpy as np

    out = cv2.cvtColor(rgb, cv2.COLOR_GRAY2RGB) if rgb.ndim == 2 else np.ascontiguousarray(rgb).copy()
    if mask is not None:
        fg = np.asarray(mask) > 0
        out[fg] = out[fg] // 3 + np.array([0, 170, 0], np.uint8)
    for x1, y1, x2, y2 in np.zeros((0, 4)) if boxes is None else np.asarray(boxes, np.float64).reshape(-1, 4):
        cv2.rectangle(out, (int(round(x1)), int(round(y1))), (max(int(round(x2)) - 1, 0), max(int(round(y2)) - 1, 0)),
                      (255, 220, 0), thick)
    return out


def cmd_preview(args) -> int:
    """Original (with each crop's window drawn on it), fallback output, DALI output and their
    amplified difference side by side for N draws, each with its file and parameters, plus the class
    histogram. ``--ops`` takes the list you train with: ``Normalize``/``ToDtype`` are left out of the
    picture (pixels are shown before normalisation), the rest runs as in training."""
    import cv2
    import numpy as np

    from .._own import own

    ImageDataset, ops = own("fallback.dataset").ImageDataset, own("fallback.ops")

    from ..core.augment import AugmentSpec
    from ..dali.devices import dali_importable
    from ..facade.executors import Engine
    from ..facade.loader import DaliLoader
    from ..sampling.sampler import WeightedSampler

    index = load_data_with_targets(args)
    targets = index.annotations  # masks tinted green and boxes in yellow on every tile
    not_shown = []
    if args.ops:
        not_shown = [type(op).__name__ for op in args.ops if op.KIND == "output"]
        spec = AugmentSpec(ops=[op for op in args.ops if op.KIND != "output"], dtype="uint8")
    else:
        spec = AugmentSpec(size=args.size, color=args.color, fit=args.fit, dtype="uint8")
    ds = ImageDataset(index, spec, seed=args.seed)
    sampler = WeightedSampler(index, seed=args.seed)
    draws = sampler.draws()[: args.n]
    fallback = [ds.load_uint8(d)[0] for d in draws]
    columns = ["original", "fallback"]
    dali_imgs = dali_targets = None
    why_not = dali_importable() if args.backend != Engine.TORCH else "--backend torch"
    if why_not is None:
        with warnings.catch_warnings():  # the column header names the backend that ran
            warnings.simplefilter("ignore", FallbackWarning)
            loader = DaliLoader(ds, batch_size=len(draws), sampler=draws, device="auto", backend="dali")
        batch = next(iter(loader))
        dali_imgs = (batch["image"] if targets is not None else batch[0]).cpu().numpy()
        dali_targets = batch if targets is not None else None
        columns += [loader.backend, f"|fallback - dali| x{DIFF_GAIN}"]
        loader.close()
    else:
        log.debug("preview: no DALI column (%s)", why_not)
    tw, th = spec.width, spec.height

    def hwc(chw):
        return chw[0] if spec.color == "gray" else chw.transpose(1, 2, 0)

    rows = []
    for k, d in enumerate(draws):
        orig = ops.decode(ds.reader.read(d.index), spec.color)
        params = spec.make_params(ds.seed, d.epoch, d.position, orig.shape[:2])
        shown = orig if orig.ndim == 3 else cv2.cvtColor(orig, cv2.COLOR_GRAY2RGB)
        shown = shown.copy()
        thick = max(2, round(max(orig.shape[:2]) / max(tw, th)) * 2)
        for _, (t, l, ch, cw) in crop_windows(spec, params, orig.shape[:2]):
            cv2.rectangle(shown, (int(l), int(t)), (int(l + cw) - 1, int(t + ch) - 1), (255, 40, 40), thick)
        tiles = [letterbox_tile(shown, tw, th), hwc(fallback[k])]
        label = f"{index.classes[index.labels[d.index]]}  {index.paths[d.index]}"
        if targets is not None:  # the file's targets on the original, the moved ones on each output
            moved = ds.move_targets(d.index, params, orig.shape[:2])
            mask = targets.read_mask(ds.reader, d.index, orig.shape[:2]) if "masks" in targets.kinds else None
            tiles = [letterbox_tile(overlay_targets(shown, mask, targets.boxes_of(d.index)[0], thick), tw, th),
                     overlay_targets(tiles[1], None if mask is None else moved["mask"][0], moved["boxes"])]
            if moved["boxes"] is not None:
                label += f"  boxes {len(moved['boxes'])}"
        if dali_imgs is not None:
            diff = np.abs(fallback[k].astype(np.int16) - dali_imgs[k].astype(np.int16))
            dali_tile = hwc(dali_imgs[k])
            if dali_targets is not None:
                dali_mask = dali_targets["mask"][k, 0].cpu().numpy() if "mask" in dali_targets else None
                dali_tile = overlay_targets(dali_tile, dali_mask, dali_targets["boxes"][k] if "boxes" in dali_targets else None)
                if dali_mask is not None:
                    label += f"  mask pixels differing {int((dali_mask != moved['mask'][0]).sum())}"
            tiles += [dali_tile, hwc(np.clip(diff * DIFF_GAIN, 0, 255).astype(np.uint8))]
            label += f"  max|diff| {int(diff.max())}"
        tiles = [cv2.cvtColor(x, cv2.COLOR_GRAY2BGR) if x.ndim == 2 else cv2.cvtColor(np.ascontiguousarray(x), cv2.COLOR_RGB2BGR)
                 for x in tiles]
        label += "  " + "  ".join(op.describe(p) for op, p in zip(spec.transforms, params) if p)
        bar = np.full((20, tw * len(tiles), 3), 255, np.uint8)
        draw_text(bar, label, 4, 14, tw * len(tiles) - 8, 0.42)
        rows.append(np.vstack([bar, np.hstack(tiles)]))
    width = rows[0].shape[1]
    recipe = np.full((18, width, 3), 255, np.uint8)
    draw_text(recipe, "ops: " + " > ".join(repr(op) if len(spec.transforms) < 3 else type(op).__name__
                                      for op in spec.transforms)
          + (f"  (not shown: {', '.join(not_shown)}; pixels before normalisation)" if not_shown else "")
          + ("  red: crop window on the original" if any(is_crop(op) for op in spec.transforms) else "")
          + ("  tinted green: mask; yellow: boxes" if targets is not None else ""),
          4, 13, width - 8, 0.4)
    head = np.full((22, width, 3), 255, np.uint8)
    for c, name in enumerate(columns):
        draw_text(head, name, c * tw + 4, 16, tw - 8)
    parts = [recipe, head]
    if dali_imgs is not None:
        legend = np.full((18, width, 3), 255, np.uint8)
        draw_text(legend, f"last column: |fallback - DALI| per pixel x{DIFF_GAIN} (black: identical, white: "
                      f">= {256 // DIFF_GAIN} levels apart)", 4, 13, width - 8, 0.4)
        parts.append(legend)
    counts = np.bincount(index.labels[sampler.global_draw()], minlength=len(index.classes))
    grid = np.vstack([*parts, *rows, _histogram(index.classes, counts, width, max(120, th // 2))])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _write_image(args.out, grid)
    print(printable(f"preview of {len(draws)} draws ({', '.join(columns)}) written to {args.out}"))
    return 0
