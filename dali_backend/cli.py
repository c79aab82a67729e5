"""Command line: ``python -m dali_backend {demo,index,split,preview,bench}`` (also installed as ``dali-backend``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

log = logging.getLogger("dali_backend")


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: use WIDTHxHEIGHT, e.g. 640x480") from None
    if w < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"size {text!r}: both sides must be >= 1")
    return w, h


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dali_backend"


def _index_from_args(args):
    from .index import SampleIndex

    common = {"verify": args.verify, "max_pixels": args.max_pixels}
    if args.manifest:
        return SampleIndex.from_manifest(args.manifest, root=args.root, split=args.split, **common)
    if args.keywords is not None:
        rules = json.loads(args.keywords) if args.keywords else None
        return SampleIndex.from_keywords(args.root, **({"rules": rules} if rules else {}), **common)
    return SampleIndex.from_folder(args.root, split=args.split, **common)


def cmd_index(args) -> int:
    index = _index_from_args(args)
    index.save(args.out)
    print(index.summary())
    print(f"index written to {args.out}")
    if index.rejected:
        report = Path(str(args.out) + ".rejected.csv")
        with open(report, "w", encoding="utf-8") as f:
            f.write("path,reason\n")
            for r in index.rejected:
                f.write(f"\"{r.path.replace(chr(34), chr(34) * 2)}\",\"{r.reason.replace(chr(34), chr(34) * 2)}\"\n")
        print(f"{len(index.rejected)} rejected files listed in {report}")
    return 0


def cmd_split(args) -> int:
    from .index import SampleIndex

    index = SampleIndex.load(args.index)
    train, val = index.split(args.val_fraction, seed=args.seed)
    train.save(args.train_out)
    val.save(args.val_out)
    for name, part in (("train", train), ("val", val)):
        counts = ", ".join(f"{c} {k}" for c, k in zip(part.classes, part.class_counts()))
        print(f"{name}: {len(part)} files ({counts})")
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
    cv2.imwrite(str(path), grid)


def _load_or_index(path: str):
    from .index import SampleIndex

    return SampleIndex.load(path) if os.path.isfile(path) else SampleIndex.from_folder(path)


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
        cv2.putText(img, f"{c} {k / max(1, counts.sum()):.0%}", (x + 4, height - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                    (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(img, "classes drawn in one sampler epoch", (10, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1,
                cv2.LINE_AA)
    return img


def cmd_preview(args) -> int:
    """Original, fallback output and DALI output side by side for N draws, plus the class histogram."""
    import cv2
    import numpy as np

    from fallback import ImageDataset, ops

    from .augment import AugmentSpec
    from .loader import DaliLoader, _dali_importable
    from .sampler import WeightedSampler

    index = _load_or_index(args.data)
    spec = AugmentSpec(size=args.size, color=args.color, fit=args.fit, dtype="uint8")
    ds = ImageDataset(index, spec, seed=args.seed)
    sampler = WeightedSampler(index, seed=args.seed)
    draws = sampler.draws()[: args.n]
    fallback = [ds.load_uint8(d)[0] for d in draws]
    columns = ["original", "fallback"]
    dali_imgs = None
    if _dali_importable() is None and args.backend != "torch":
        loader = DaliLoader(ds, batch_size=len(draws), sampler=draws, device="auto", backend="dali")
        dali_imgs = next(iter(loader))[0].cpu().numpy()
        columns.append(loader.backend)
        loader.close()
    t = spec.height
    rows = []
    for k, d in enumerate(draws):
        orig = ops.decode(ds.reader.read(d.index), spec.color)
        tiles = [cv2.resize(orig, (spec.width, spec.height), interpolation=cv2.INTER_AREA), fallback[k][0]
                 if spec.color == "gray" else fallback[k].transpose(1, 2, 0)]
        if dali_imgs is not None:
            tiles.append(dali_imgs[k][0] if spec.color == "gray" else dali_imgs[k].transpose(1, 2, 0))
        tiles = [cv2.cvtColor(x, cv2.COLOR_GRAY2BGR) if x.ndim == 2 else cv2.cvtColor(np.ascontiguousarray(x), cv2.COLOR_RGB2BGR)
                 for x in tiles]
        p = ds.params(d)
        label = f"{index.classes[index.labels[d.index]]}  angle {p.angle:+.1f}  b {p.brightness:.2f}  c {p.contrast:.2f}"
        bar = np.full((20, spec.width * len(tiles), 3), 255, np.uint8)
        cv2.putText(bar, label, (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
        rows.append(np.vstack([bar, np.hstack(tiles)]))
    head = np.full((22, rows[0].shape[1], 3), 255, np.uint8)
    for c, name in enumerate(columns):
        cv2.putText(head, name, (c * spec.width + 4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    counts = np.bincount(index.labels[sampler.global_draw()], minlength=len(index.classes))
    grid = np.vstack([head, *rows, _histogram(index.classes, counts, rows[0].shape[1], max(120, t // 2))])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out), grid)
    print(f"preview of {len(draws)} draws ({', '.join(columns)}) written to {out}")
    return 0


def cmd_demo(args) -> int:
    import numpy as np

    from fallback import ImageDataset

    from .augment import AugmentSpec
    from .index import SampleIndex
    from .loader import DaliLoader
    from .sampler import WeightedSampler
    from .synthetic import generate_defect_dataset

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.data:
        root = Path(args.data)
    else:
        w, h = args.size
        root = Path(args.cache) / f"defects-{args.images}-{w}x{h}-q{args.quality}-s{args.seed}"
        t0 = time.perf_counter()
        generate_defect_dataset(root, n=args.images, size=args.size, quality=args.quality, seed=args.seed)
        print(f"data: {args.images} synthetic defect images ({w}x{h}) in {root} [{time.perf_counter() - t0:.1f} s]")
    t0 = time.perf_counter()
    index = SampleIndex.from_folder(root)
    index.save(out / "index.npz")
    print(f"index: {index.summary()} [{time.perf_counter() - t0:.2f} s]")
    spec = AugmentSpec(size=args.out_size)
    ds = ImageDataset(index, spec, seed=args.seed)
    sampler = WeightedSampler(index, seed=args.seed)
    loader = DaliLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        device=args.device, backend=args.backend)
    print(f"loader: backend {loader.backend}, {len(loader)} batches of {args.batch_size} per epoch")
    first = None
    counts = np.zeros(len(index.classes), np.int64)
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        t0 = time.perf_counter()
        n = 0
        for images, labels in loader:
            if first is None:
                first = (images[:16], labels[:16], time.perf_counter() - t0)
            n += len(labels)
            counts += np.bincount(labels.cpu().numpy(), minlength=len(index.classes))
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
    p = argparse.ArgumentParser(prog="dali-backend", description="Fast, trustworthy JPEG loading for PyTorch (DALI + CPU fallback).")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="generate the synthetic defect set, index it, train-style epochs, print img/s, write a preview")
    d.add_argument("--out", default="out/demo", help="folder for the index and preview.png (default out/demo)")
    d.add_argument("--data", help="use this folder (root/<class>/*.jpg) instead of synthetic data")
    d.add_argument("--cache", default=str(default_cache()), help="where synthetic data is generated (default ~/.cache/dali_backend)")
    d.add_argument("--images", type=int, default=400, help="synthetic images (default 400)")
    d.add_argument("--size", type=_size, default=(1024, 768), help="synthetic image size WxH (default 1024x768)")
    d.add_argument("--quality", type=int, default=92, help="JPEG quality (default 92)")
    d.add_argument("--out-size", type=int, default=256, help="square output size (default 256)")
    d.add_argument("--epochs", type=int, default=3)
    d.add_argument("--batch-size", type=int, default=32)
    d.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="loader workers / DALI threads")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.add_argument("--backend", default="auto", choices=["auto", "dali", "torch"])
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_demo)

    i = sub.add_parser("index", help="index a folder, a manifest or keyword-labelled files; report rejects")
    i.add_argument("root", help="data root (root/<class>/**/*.jpg, or the manifest's root)")
    i.add_argument("--out", required=True, help="index file to write")
    i.add_argument("--split", help="split folder (root/<split>/<class>/...) or CSV split column")
    i.add_argument("--manifest", help="JSON {path: class} or CSV path,label[,split]")
    i.add_argument("--keywords", nargs="?", const="", help="label by keywords in names; optional JSON {class: [words]}")
    i.add_argument("--verify", default="header", choices=["header", "decode", "none"])
    i.add_argument("--max-pixels", type=int, default=100_000_000)
    i.set_defaults(func=cmd_index)

    s = sub.add_parser("split", help="split an index into train/val, stable as the data grows")
    s.add_argument("index", help="index file written by `index`")
    s.add_argument("--val-fraction", type=float, default=0.2)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--train-out", required=True)
    s.add_argument("--val-out", required=True)
    s.set_defaults(func=cmd_split)

    v = sub.add_parser("preview", help="PNG: original, fallback and DALI outputs side by side, with labels, parameters "
                                       "and the class histogram of one sampler epoch")
    v.add_argument("data", help="data root (root/<class>/*.jpg) or an index file")
    v.add_argument("--out", default="preview.png")
    v.add_argument("--n", type=int, default=6, help="draws shown (default 6)")
    v.add_argument("--size", type=int, default=192)
    v.add_argument("--color", default="gray", choices=["gray", "rgb"])
    v.add_argument("--fit", default="stretch", choices=["stretch", "letterbox"])
    v.add_argument("--backend", default="auto", choices=["auto", "torch"], help="torch: skip the DALI column")
    v.add_argument("--seed", type=int, default=0)
    v.set_defaults(func=cmd_preview)

    sub.add_parser("bench", help="the benchmark (same as python -m bench); see `bench --help`", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in argv if not a.startswith("-")]
    if words and words[0] == "bench":  # everything after `bench` belongs to the benchmark's own parser
        from bench.__main__ import main as bench_main

        return bench_main(argv[argv.index("bench") + 1:])
    args = build_parser().parse_args(argv)
    level = logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    from .errors import DaliBackendError

    try:
        return args.func(args)
    except DaliBackendError as e:
        log.error("%s", e)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
