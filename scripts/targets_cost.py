"""The cost of carrying masks and boxes against images alone, on both backends (issue 35).

    PYTHONPATH=. python scripts/targets_cost.py [--images 96] [--size 320 256] [--workers 2] [--epochs 3]

One synthetic MVTec AD category (``test``: good and defect images with masks) and one COCO-annotated
folder of the same size; each loader runs ``--epochs`` passes of the same recipe (RandomResizedCrop,
flip, rotation, affine, colour) after one warm-up pass, and the best pass's img/s is reported for:
images alone (the same index without targets), with masks, with boxes. A short measurement: rerun on
a quiet machine for numbers to quote.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path


def arguments(description: str) -> argparse.ArgumentParser:
    """The options both cost scripts take (this one and ``targets_remote_cost.py``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--images", type=int, default=96, help="images per set (default 96)")
    ap.add_argument("--size", type=int, nargs=2, default=(320, 256), metavar=("W", "H"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--backends", nargs="+", default=["torch", "dali"])
    return ap


def mvtec_set(folder: Path, images: int, size) -> Path:
    """One synthetic MVTec AD category under ``folder``: ``images`` test images, a third good, and its masks."""
    from dali_backend.core.defects import generate_mvtec

    per_kind = max(1, images // 3)
    return generate_mvtec(folder, n_train=1, n_good=images - 2 * per_kind, n_defect=per_kind, size=tuple(size))


def main() -> None:
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset, SampleIndex
    from dali_backend import transforms as T
    from dali_backend.core.defects import generate_detection
    from dali_backend.targets import read_coco

    args = arguments(__doc__.splitlines()[0]).parse_args()
    warnings.simplefilter("ignore")
    tmp = Path(tempfile.mkdtemp(prefix="targets-cost-"))
    root = mvtec_set(tmp / "mvtec", args.images, args.size)
    masks = SampleIndex.from_mvtec(root, "plate", "test")
    det = tmp / "det"
    boxes = SampleIndex.from_annotations(det, read_coco(generate_detection(det, n=args.images, size=tuple(args.size)), det))
    plain_masks = SampleIndex.from_folder(root / "plate", split="test")
    plain_boxes = SampleIndex(boxes.root, boxes.paths, boxes.labels, boxes.classes, boxes.sizes, boxes.mtimes,
                              boxes.widths, boxes.heights)  # the same files, without targets
    spec = AugmentSpec(ops=[T.RandomResizedCrop(224, scale=(0.5, 1.0)), T.RandomHorizontalFlip(), T.RandomRotation(15),
                            T.RandomAffine(10, translate=(0.05, 0.05), scale=(0.9, 1.1), shear=5),
                            T.ColorJitter(0.3, 0.3)], color="rgb")
    rows = []
    for backend in args.backends:
        for name, index in (("images (MVTec set)", plain_masks), ("+ masks", masks),
                            ("images (COCO set)", plain_boxes), ("+ boxes", boxes)):
            loader = DaliLoader(ImageDataset(index, spec), batch_size=args.batch_size, shuffle=True, seed=0,
                                num_workers=args.workers, backend=backend, telemetry=False)
            best = 0.0
            for epoch in range(args.epochs + 1):
                loader.set_epoch(epoch)
                t0, n = time.perf_counter(), 0
                for batch in loader:
                    n += len(batch["image"] if isinstance(batch, dict) else batch[0])
                if epoch:  # the first pass warms up (workers, caches)
                    best = max(best, n / (time.perf_counter() - t0))
            loader.close()
            rows.append((backend, name, best))
            print(f"{backend:6s} {name:20s} {best:8.1f} img/s", flush=True)
    print("\ncost against images alone (best pass of each):")
    for k in range(0, len(rows), 2):
        (backend, _, base), (_, what, with_t) = rows[k], rows[k + 1]
        print(f"{backend:6s} {what:8s} {100 * (1 - with_t / base):6.1f} % of the throughput lost")


if __name__ == "__main__":
    main()
