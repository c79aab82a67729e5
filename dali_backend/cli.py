"""Command line: ``python -m dali_backend {demo,index,split,preview,bench}`` (also installed as ``dali-backend``).

Every user error is one line on stderr naming the argument, the value and the fix, with exit
status 2 (see :mod:`dali_backend.cliargs`). Results go to stdout once; the library's own log lines
(index summaries, backend choice) go to stderr, ``-q`` hides them and ``-v`` adds debug lines.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from pathlib import Path

from .cliargs import (OneLineParser, operation_list, add_index_load_arguments, class_list, data_or_index, default_cache,
                      dir_or_url, existing_dir, fraction, index_file, int_range, keyword_rules, load_data, output_dir, output_file,
                      positive_int, run_command, size_wxh, text_encoding, verbosity_parent)
from .errors import FallbackWarning, OutputFileError
from .index import check_output_path, write_atomic

log = logging.getLogger("dali_backend.cli")

__all__ = ["build_parser", "default_cache", "main", "save_preview"]

MAX_PREVIEW_DRAWS = 64
DIFF_GAIN = 16  # the preview's difference column shows |fallback - DALI| multiplied by this


# Options of `index` that apply to one way of labelling only: (attribute, flag, the builders that take it).
_INDEX_ONLY_FOR = (
    ("split", "--split", ("folder", "manifest")),
    ("classes", "--classes", ("folder", "manifest")),
    ("path_column", "--path-column", ("manifest",)),
    ("label_column", "--label-column", ("manifest",)),
    ("split_column", "--split-column", ("manifest",)),
    ("encoding", "--encoding", ("manifest",)),
    ("allow_outside_symlinks", "--allow-outside-symlinks", ("folder", "keywords")),
)
_INDEX_HOW = {"folder": "class folders (the default)", "manifest": "--manifest",
              "keywords": "--keywords/--keyword-rules"}


def _check_index_flags(args) -> str:
    """Which builder the flags of ``index`` ask for; a ConfigError for a flag that builder does not take."""
    from .errors import ConfigError

    keywords = args.keywords or args.keyword_rules is not None
    if args.manifest and keywords:
        raise ConfigError(f"--manifest {args.manifest} labels the files already; drop --keywords/--keyword-rules")
    how = "manifest" if args.manifest else "keywords" if keywords else "folder"
    for attr, flag, takers in _INDEX_ONLY_FOR:
        value = getattr(args, attr)
        if value is None or value is False or how in takers:
            continue
        if how == "keywords" and attr == "classes":
            raise ConfigError(f"{flag} does not apply with {_INDEX_HOW[how]}: the classes are the keys of the keyword "
                              "rules (sorted); drop --classes, or name the classes in --keyword-rules")
        if how == "keywords" and attr == "split":
            raise ConfigError(f"{flag} {args.split} does not apply with {_INDEX_HOW[how]} (keyword labelling has no "
                              f"splits); drop it, or pass the split's folder as ROOT ({args.root}/{args.split})")
        if how == "manifest" and attr == "allow_outside_symlinks":
            raise ConfigError(f"{flag} does not apply with --manifest: every manifest entry must resolve inside ROOT; "
                              "drop it, or pass as ROOT a folder that contains the files")
        where = " or ".join(_INDEX_HOW[t] for t in takers)
        raise ConfigError(f"{flag} applies to {where} only; drop it, or pass --manifest FILE (a CSV)"
                          if takers == ("manifest",) else f"{flag} applies to {where} only; drop it")
    return how


def _index_from_args(args, how: str):
    from .index import SampleIndex

    common = {"verify": args.verify, "max_pixels": args.max_pixels, "workers": args.workers}
    if how == "manifest":
        return SampleIndex.from_manifest(args.manifest, root=args.root, split=args.split, classes=args.classes,
                                         path_column=args.path_column, label_column=args.label_column,
                                         split_column=args.split_column, encoding=args.encoding, **common)
    if how == "keywords":
        return SampleIndex.from_keywords(args.root, **({"rules": args.keyword_rules} if args.keyword_rules else {}),
                                         allow_outside_symlinks=args.allow_outside_symlinks, **common)
    return SampleIndex.from_folder(args.root, split=args.split, classes=args.classes,
                                   allow_outside_symlinks=args.allow_outside_symlinks, **common)


def cmd_index(args) -> int:
    from .index import INDEX_CLI_FLAGS, command_line

    how = _check_index_flags(args)
    report = Path(str(args.out) + ".rejected.csv")
    check_output_path(report, "rejected-files report")  # --out itself was checked by output_file
    t0 = time.perf_counter()
    with command_line(INDEX_CLI_FLAGS):  # library errors name this command's flags
        index = _index_from_args(args, how)  # the library logs the summary (stderr; hidden by -q)
    log.debug("index built in %.2f s", time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    index.save(args.out)
    print(_shown(f"index of {len(index)} files written to {args.out}"))
    if index.rejected or index.ignored_files:
        write_atomic(report, lambda f: f.write(_rejected_csv(index.rejected, index.ignored_files)),
                     "rejected-files report")
        listed = " and ".join(f"{n} {what} file{'s' if n != 1 else ''}" for n, what in
                              ((len(index.rejected), "rejected"), (len(index.ignored_files), "ignored")) if n)
        print(_shown(f"{listed} listed in {report}"))
    return 0


def _rejected_csv(rejected, ignored=()) -> bytes:
    """``path,reason`` CSV of rejected files, then ignored ones (reason ``ignored: <why>``, e.g.
    ``ignored: not .jpg/.jpeg``); a name that is not UTF-8 on disk keeps its bytes."""
    def cell(text: str) -> str:
        return '"' + text.replace('"', '""') + '"'

    lines = (["path,reason"] + [f"{cell(r.path)},{cell(r.reason)}" for r in rejected]
             + [f"{cell(r.path)},{cell('ignored: ' + r.reason)}" for r in ignored])
    return _encoded("\n".join(lines) + "\n")


def _encoded(text: str) -> bytes:
    """UTF-8 bytes of ``text``; a name that was not UTF-8 on disk gets its own bytes back."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte (a JSON "\\ud800")
        return text.encode("utf-8", "backslashreplace")


def _shown(text: str) -> str:
    """``text`` printable on any stdout: bytes of names that are not UTF-8 on disk shown as ``\\xff``."""
    return _encoded(text).decode("utf-8", "backslashreplace")


def cmd_pack(args) -> int:
    from .storage.pack import INDEX_NAME, pack

    index = load_data(args.data, args.root, args.no_check)
    packed = pack(index, args.out, shard_bytes=args.shard_mb << 20)
    print(_shown(f"{len(packed)} samples packed into {len(packed.shards.names)} shards in {args.out}; index: "
                 f"{args.out / INDEX_NAME}"))
    return 0


def cmd_split(args) -> int:
    index = load_data(args.index, args.root, args.no_check, arg="index")
    train, val = index.split(args.val_fraction, seed=args.seed, stratify=args.stratify)
    check_output_path(args.val_out, "--val-out")  # both refused before either is written
    for out, part in ((args.train_out, train), (args.val_out, val)):
        out.parent.mkdir(parents=True, exist_ok=True)
        part.save(out)
    for name, part in (("train", train), ("val", val)):
        counts = ", ".join(f"{c} {k}" for c, k in zip(part.classes, part.class_counts()))
        print(_shown(f"{name}: {len(part)} files ({counts})"))
    return 0


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


def cmd_preview(args) -> int:
    """Original (with each crop's window drawn on it), fallback output, DALI output and their
    amplified difference side by side for N draws, each with its file and parameters, plus the class
    histogram. ``--ops`` takes the list you train with: ``Normalize``/``ToDtype`` are left out of the
    picture (pixels are shown before normalisation), the rest runs as in training."""
    import cv2
    import numpy as np

    from ._own import own

    ImageDataset, ops = own("fallback.dataset").ImageDataset, own("fallback.ops")

    from .augment import AugmentSpec
    from .dali.devices import _dali_importable
    from .loader import DaliLoader
    from .sampler import WeightedSampler
    from .transforms.crop import _Crop as _CropOp

    index = load_data(args.data, args.root, args.no_check)
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
    dali_imgs = None
    why_not = _dali_importable() if args.backend != "torch" else "--backend torch"
    if why_not is None:
        with warnings.catch_warnings():  # the column header names the backend that ran
            warnings.simplefilter("ignore", FallbackWarning)
            loader = DaliLoader(ds, batch_size=len(draws), sampler=draws, device="auto", backend="dali")
        dali_imgs = next(iter(loader))[0].cpu().numpy()
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
        if dali_imgs is not None:
            diff = np.abs(fallback[k].astype(np.int16) - dali_imgs[k].astype(np.int16))
            tiles += [hwc(dali_imgs[k]), hwc(np.clip(diff * DIFF_GAIN, 0, 255).astype(np.uint8))]
            label += f"  max|diff| {int(diff.max())}"
        tiles = [cv2.cvtColor(x, cv2.COLOR_GRAY2BGR) if x.ndim == 2 else cv2.cvtColor(np.ascontiguousarray(x), cv2.COLOR_RGB2BGR)
                 for x in tiles]
        label += "  " + "  ".join(op.describe(p) for op, p in zip(spec.transforms, params) if p)
        bar = np.full((20, tw * len(tiles), 3), 255, np.uint8)
        _text(bar, label, 4, 14, tw * len(tiles) - 8, 0.42)
        rows.append(np.vstack([bar, np.hstack(tiles)]))
    width = rows[0].shape[1]
    recipe = np.full((18, width, 3), 255, np.uint8)
    _text(recipe, "ops: " + " > ".join(repr(op) if len(spec.transforms) < 3 else type(op).__name__
                                      for op in spec.transforms)
          + (f"  (not shown: {', '.join(not_shown)}; pixels before normalisation)" if not_shown else "")
          + ("  red: crop window on the original" if any(isinstance(op, _CropOp) for op in spec.transforms) else ""),
          4, 13, width - 8, 0.4)
    head = np.full((22, width, 3), 255, np.uint8)
    for c, name in enumerate(columns):
        _text(head, name, c * tw + 4, 16, tw - 8)
    parts = [recipe, head]
    if dali_imgs is not None:
        legend = np.full((18, width, 3), 255, np.uint8)
        _text(legend, f"last column: |fallback - DALI| per pixel x{DIFF_GAIN} (black: identical, white: "
                      f">= {256 // DIFF_GAIN} levels apart)", 4, 13, width - 8, 0.4)
        parts.append(legend)
    counts = np.bincount(index.labels[sampler.global_draw()], minlength=len(index.classes))
    grid = np.vstack([*parts, *rows, _histogram(index.classes, counts, width, max(120, th // 2))])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _write_image(args.out, grid)
    print(_shown(f"preview of {len(draws)} draws ({', '.join(columns)}) written to {args.out}"))
    return 0


def cmd_demo(args) -> int:
    import numpy as np

    from ._own import own

    ImageDataset = own("fallback.dataset").ImageDataset

    from .augment import AugmentSpec
    from .index import SampleIndex
    from .loader import DaliLoader, choose_backend
    from .sampler import WeightedSampler
    from .synthetic import generate_defect_dataset

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.data:
        root = args.data
    else:
        w, h = args.size
        root = Path(args.cache) / f"defects-{args.images}-{w}x{h}-q{args.quality}-s{args.seed}"
        t0 = time.perf_counter()
        generate_defect_dataset(root, n=args.images, size=args.size, quality=args.quality, seed=args.seed)
        print(f"data: {root} [{time.perf_counter() - t0:.1f} s]")  # the library logs what it generated
    t0 = time.perf_counter()
    index = SampleIndex.from_folder(root)  # the library logs the summary
    index.save(out / "index.npz")
    print(f"index: {out / 'index.npz'} [{time.perf_counter() - t0:.2f} s]")
    spec = AugmentSpec(size=args.out_size)
    ds = ImageDataset(index, spec, seed=args.seed)
    sampler = WeightedSampler(index, seed=args.seed)
    name, _, reason = choose_backend(args.device, args.backend)
    log.debug("backend choice for device=%s backend=%s: %s (%s)", args.device, args.backend, name, reason)
    with warnings.catch_warnings():  # said below in the command's own terms (--backend), not DaliLoader's
        warnings.simplefilter("ignore", FallbackWarning)
        loader = DaliLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                            device=args.device, backend=args.backend)
    print(f"loader: {loader.backend} ({reason}), {len(loader)} batches of {args.batch_size} per epoch")
    first = None
    counts = np.zeros(len(index.classes), np.int64)
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        t0 = time.perf_counter()
        n = 0
        for b, (images, labels) in enumerate(loader):
            if first is None:
                first = (images[:16], labels[:16], time.perf_counter() - t0)
            n += len(labels)
            counts += np.bincount(labels.cpu().numpy(), minlength=len(index.classes))
            log.debug("epoch %d batch %d: %d images after %.3f s", epoch, b, len(labels), time.perf_counter() - t0)
        dt = time.perf_counter() - t0
        print(f"epoch {epoch}: {n} images in {dt:.2f} s = {n / dt:.1f} img/s")
    share = ", ".join(f"{c} {k / counts.sum():.1%}" for c, k in zip(index.classes, counts))
    stored = ", ".join(f"{c} {k / len(index):.1%}" for c, k in zip(index.classes, index.class_counts()))
    print(f"class balance drawn: {share} (on disk: {stored})")
    print(f"first batch after {first[2]:.2f} s")
    preview = out / "preview.png"
    save_preview(first[0], first[1], index.classes, spec, preview)
    print(f"preview: {preview}")
    loader.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    from ._own import own

    add_bench_arguments = own("bench.__main__").add_arguments

    common = verbosity_parent()
    p = OneLineParser(prog="dali-backend", description="Fast, trustworthy JPEG loading for PyTorch (DALI + CPU fallback).",
                      epilog="-q/-v work before or after the subcommand.")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging: resolved arguments, backend choice, timings")
    sub = p.add_subparsers(dest="command", required=True, metavar="{demo,index,split,preview,bench}")

    def add(name: str, func, help: str, **kw) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help, description=help, parents=[common], **kw)
        s.set_defaults(func=func, prog=s.prog)
        return s

    d = add("demo", cmd_demo, "generate the synthetic defect set, index it, train-style epochs, print img/s, write a preview")
    d.add_argument("--out", type=output_dir, default=Path("out/demo"), help="folder for the index and preview.png (default out/demo)")
    d.add_argument("--data", type=existing_dir, help="use this folder (root/<class>/*.jpg) instead of synthetic data")
    d.add_argument("--cache", type=output_dir, default=default_cache(),
                   help="where synthetic data is generated (default ~/.cache/dali_backend)")
    d.add_argument("--images", type=positive_int, default=400, help="synthetic images (default 400)")
    d.add_argument("--size", type=size_wxh, default=(1024, 768), help="synthetic image size WxH (default 1024x768)")
    d.add_argument("--quality", type=int_range(1, 100), default=92, help="JPEG quality 1-100 (default 92)")
    d.add_argument("--out-size", type=positive_int, default=256, help="square output size in pixels (default 256)")
    d.add_argument("--epochs", type=positive_int, default=3, help="epochs to run (default 3)")
    d.add_argument("--batch-size", type=positive_int, default=32)
    d.add_argument("--workers", type=int_range(0), default=os.cpu_count() or 1, help="loader workers / DALI threads")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.add_argument("--backend", default="auto", choices=["auto", "dali", "torch"])
    d.add_argument("--seed", type=int, default=0)

    i = add("index", cmd_index, "index a folder, a manifest or keyword-labelled files; report rejects",
            epilog="Labels come from class folders (default), a --manifest, or --keywords in file and folder "
                   "names (default rules: ok/normal/good -> normal, scratch/scr -> scratch, dent/pit -> dent; "
                   "--keyword-rules replaces them). An ASCII keyword matches a whole word; any other keyword (e.g. "
                   "划痕) matches inside a name. Errors name these flags; rejected and ignored files are listed in "
                   "OUT.rejected.csv.")
    i.add_argument("root", type=dir_or_url, metavar="ROOT",
                   help="data root (ROOT/<class>/**/*.jpg, or the folder the manifest's paths are relative to): a "
                        "folder or an s3://bucket/prefix URL (credentials and endpoint from AWS_* variables or "
                        "an AWS profile)")
    i.add_argument("--out", type=output_file, required=True, help="index file to write (.npz)")
    i.add_argument("--split", help="split folder (ROOT/<split>/<class>/...) or value of the manifest's split column")
    i.add_argument("--classes", type=class_list, metavar="NAMES",
                   help="class names in id order, comma-separated (or a JSON list); class folders or manifest labels "
                        "not listed are an error (default: sorted names found)")
    i.add_argument("--manifest", help="JSON {path: class} or CSV path,label[,split] (header names are recognised)")
    i.add_argument("--path-column", metavar="NAME", help="CSV manifest: header name of the path column")
    i.add_argument("--label-column", metavar="NAME", help="CSV manifest: header name of the label column")
    i.add_argument("--split-column", metavar="NAME", help="CSV manifest: header name of the split column")
    i.add_argument("--encoding", type=text_encoding, help="manifest text encoding, e.g. gbk or cp1252 (default UTF-8)")
    i.add_argument("--keywords", action="store_true", help="label by keywords in file and folder names")
    i.add_argument("--keyword-rules", type=keyword_rules, metavar="JSON",
                   help="keyword rules as a JSON object {class: [word, ...]} (implies --keywords); "
                        "e.g. '{\"scratch\": [\"scratch\", \"划痕\"]}'")
    i.add_argument("--allow-outside-symlinks", action="store_true",
                   help="follow symlinks that leave ROOT (refused by default; not with --manifest)")
    i.add_argument("--verify", default="header", choices=["header", "decode", "none"],
                   help="header: check markers and sizes (default); decode: also decode every file; none: trust them")
    i.add_argument("--max-pixels", type=positive_int, default=100_000_000,
                   help="refuse files whose frame declares more pixels (default 100000000)")
    i.add_argument("--workers", type=positive_int, default=8, help="threads reading file headers (default 8)")

    k = add("pack", cmd_pack, "write a data set into tar shards (WebDataset layout) with an index of (shard, offset, "
                              "size): one range read per sample",
            epilog="Upload OUT and load OUT/index.npz with --root s3://bucket/prefix (SampleIndex.load(..., "
                   "root=...)) to read the shards from a bucket.")
    k.add_argument("data", type=data_or_index, help="data root (a folder or an s3:// URL) or an index file")
    k.add_argument("--out", type=output_dir, required=True, help="folder for the shards and index.npz")
    k.add_argument("--shard-mb", type=positive_int, default=256, help="close a shard at this many MB of samples "
                                                                      "(default 256)")
    add_index_load_arguments(k)

    s = add("split", cmd_split, "split an index into train/val, stable as the data grows")
    s.add_argument("index", type=index_file, help="index file written by `index`")
    s.add_argument("--val-fraction", type=fraction, default=0.2, help="share of files in val, in (0, 1) (default 0.2)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--stratify", action="store_true",
                   help="exactly the val fraction of every class (rounded), instead of a per-file hash threshold "
                        "(each class's share then varies; a file keeps its side as the data grows)")
    s.add_argument("--train-out", type=output_file, required=True)
    s.add_argument("--val-out", type=output_file, required=True)
    add_index_load_arguments(s)

    v = add("preview", cmd_preview, "PNG: original, fallback and DALI outputs and their difference side by side, with "
                                    "labels, parameters and the class histogram of one sampler epoch")
    v.add_argument("data", type=data_or_index, help="data root (root/<class>/*.jpg) or an index file")
    v.add_argument("--out", type=output_file, default=Path("preview.png"), help="PNG to write (default preview.png)")
    v.add_argument("--n", type=int_range(1, MAX_PREVIEW_DRAWS), default=6,
                   help=f"draws shown, 1 to {MAX_PREVIEW_DRAWS} (default 6)")
    v.add_argument("--size", type=positive_int, default=192, help="tile size in pixels (default 192)")
    v.add_argument("--color", default="gray", choices=["gray", "rgb"])
    v.add_argument("--fit", default="stretch", choices=["stretch", "letterbox"])
    v.add_argument("--backend", default="auto", choices=["auto", "torch"], help="torch: skip the DALI column")
    v.add_argument("--ops", type=operation_list, default=None, help="an operation list instead of the preset (then --size/--color/--fit are "
                                               "ignored): the list you train with, e.g. 'RandomResizedCrop(192), "
                                               "RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4), Normalize(...)' "
                                               "(shown before normalisation; crop windows drawn on the original)")
    v.add_argument("--seed", type=int, default=0)
    add_index_load_arguments(v)

    b = sub.add_parser("bench", help="the benchmark (same as python -m bench)", parents=[common],
                       description="DaliLoader against the CPU fallback, the tutorial-style loader and the ceiling.")
    add_bench_arguments(b)
    b.set_defaults(prog=b.prog)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, log)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
