"""The pictures the CLI draws (``demo``'s batch grid, ``preview``'s tiles and class histogram): OpenCV
drawing and atomic image writing, imported by :mod:`dali_backend.cli` only."""

from __future__ import annotations

from pathlib import Path

from .errors import OutputFileError
from .index import write_atomic


def save_preview(images, labels, classes, spec, path: Path, columns: int = 8) -> None:
    """Write a PNG grid of a batch (denormalised), each tile labelled with its class."""
    import cv2
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
        cv2.putText(grid, classes[int(labels[i])], (c * w + 3, r * (h + 18) + 13), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                    (255, 255, 255), 1, cv2.LINE_AA)
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


def _text(img, text: str, x: int, y: int, max_width: int, scale: float = 0.5) -> None:
    """Black text at (x, y), shrunk until it fits in ``max_width`` pixels."""
    import cv2

    while scale > 0.3 and cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][0] > max_width:
        scale -= 0.05
    cv2.putText(img, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 1, cv2.LINE_AA)


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
        _text(img, f"{c} {k / max(1, counts.sum()):.0%}", x + 4, height - 8, bar_w - 6, 0.4)
    _text(img, "classes drawn in one sampler epoch", 10, 15, width - 20, 0.45)
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


def crop_windows(spec, params: list[dict], size: tuple[int, int]) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Each crop's window of one draw in the *original* image's pixels: ``[(op name, (top, left, h, w))]``.

    Windows are traced back through the operations before them while those only resize (exact or
    shorter side) or change values; after a flip, turn, rotation or letterbox the trace stops (a
    rectangle would no longer be a rectangle of the original), and later crops are not drawn."""
    from .transforms.crop import _Crop
    from .transforms.resize import Resize

    out = []
    top, left, sy, sx = 0.0, 0.0, 1.0, 1.0  # the current frame's pixel (y, x) = (top + sy*y, left + sx*x)
    h, w = size
    for op, p in zip(spec.transforms, params, strict=True):
        if isinstance(op, _Crop):
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
