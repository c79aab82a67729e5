"""``python -m bench.padding``: the padding of variable-size batches with and without aspect grouping.

Synthetic defect images of mixed shapes (landscape 4:3 and 16:9, portrait 3:4 and 9:16, square: the
same generator as the benchmark's data, :func:`dali_backend.core.synthetic.make_image`), resized with the
aspect ratio kept (``Resize(short, max_size=long)``) and padded per batch (``pad_batch``); each
backend runs the same draws ungrouped (a shuffled :class:`~dali_backend.WeightedSampler`) and
grouped (:class:`~dali_backend.AspectGroupedSampler` over it). Reported: the padding fraction
(padded pixels / all pixels of the batches, from the batches themselves) and images per second
over the timed epochs after one warm-up. ``python -m bench --padding`` prints the same table after
its comparison.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

log = logging.getLogger("bench")

# (width, height) of the mix, one of each in turn
MIX = ((640, 480), (480, 640), (640, 360), (512, 512), (360, 640))


def generate_mixed(out: Path, n: int, seed: int = 0) -> Path:
    """``n`` synthetic defect JPEGs cycling through the shapes of :data:`MIX` in ``out/<class>/``;
    reuses a complete earlier run. Deterministic in its arguments."""
    import cv2

    from dali_backend.core.synthetic import CLASSES, DEFAULT_FRACTIONS, class_counts, make_image

    marker = out / ".mixed.json"
    params = {"n": n, "seed": seed, "mix": [list(s) for s in MIX], "version": 1}
    if marker.is_file() and json.loads(marker.read_text()) == params:
        return out
    k = 0
    for cls, count in zip(CLASSES, class_counts(n, DEFAULT_FRACTIONS)):
        (out / cls).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            w, h = MIX[k % len(MIX)]
            ok, enc = cv2.imencode(".jpg", make_image(seed, cls, i, w, h), [cv2.IMWRITE_JPEG_QUALITY, 92])
            if not ok:
                raise RuntimeError(f"OpenCV failed to encode synthetic image {cls}/{i}")
            enc.tofile(str(out / cls / f"{cls}_{i:05d}_{w}x{h}.jpg"))
            k += 1
    marker.write_text(json.dumps(params))
    return out


def measure(index, backend: str, grouped: bool, *, batch_size: int, short: int, long: int, pad: int, groups: int,
            workers: int, epochs: int) -> dict:
    """One loader's padding fraction and throughput over ``epochs`` timed epochs after a warm-up."""
    from dali_backend import AspectGroupedSampler, AugmentSpec, DaliLoader, WeightedSampler, padding_fraction
    from dali_backend.transforms import Resize
    from fallback import ImageDataset

    spec = AugmentSpec(ops=[Resize(short, max_size=long)], color="rgb", pad_batch=pad, dtype="uint8")
    sampler = WeightedSampler(index, seed=0, mode="uniform", replacement=False)
    if grouped:
        sampler = AspectGroupedSampler(sampler, batch_size, groups=groups)
    device = {"torch": dict(device="cpu", backend="torch"), "dali-cpu": dict(device="cpu", backend="dali"),
              "dali-gpu": dict(device="cuda", backend="dali")}[backend]
    sizes, valid, total, images, seconds = [], 0, 0, 0, 0.0
    with DaliLoader(ImageDataset(index, spec, seed=0), batch_size=batch_size, sampler=sampler, num_workers=workers,
                    telemetry=False, **device) as loader:
        for epoch in range(epochs + 1):
            t0 = time.perf_counter()
            for x, _, hw in loader:
                if epoch:
                    sizes.append(hw)
                    valid += int((hw[:, 0] * hw[:, 1]).sum())
                    total += x.shape[0] * x.shape[-2] * x.shape[-1]
                    images += len(hw)
            if loader.device.type == "cuda":  # the last batch's work finished before the clock stops
                import torch

                torch.cuda.synchronize()
            if epoch:
                seconds += time.perf_counter() - t0
    fraction = padding_fraction(sizes, pad)
    if abs(fraction - (1 - valid / total)) > 1e-9:  # the batches' own pixels against the pure function
        raise RuntimeError(f"{backend}: the batches' padding {1 - valid / total:.6f} differs from padding_fraction's "
                           f"{fraction:.6f}; this is a bug in dali_backend, please report it")
    return {"backend": backend, "sampler": "grouped" if grouped else "plain", "padding_fraction": fraction,
            "images_per_s": images / seconds, "batches": len(sizes)}


def available_backends() -> list[str]:
    """The loaders this machine runs: the fallback, DALI's CPU graph when DALI imports, its GPU one with CUDA."""
    import torch

    from dali_backend.dali.devices import dali_importable

    names = ["torch"]
    if not dali_importable():
        names.append("dali-cpu")
        if torch.cuda.device_count():
            names.append("dali-gpu")
    return names


def run_padding(root: Path, *, images: int, batch_size: int, workers: int, epochs: int = 1, short: int = 192,
                long: int = 320, pad: int = 32, groups: int = 2, backends: list[str] | None = None) -> dict:
    """Generate the mixed data under ``root``, measure every backend plain and grouped, print the table;
    returns ``{"data": ..., "results": [...]}``."""
    from dali_backend import SampleIndex

    index = SampleIndex.from_folder(generate_mixed(root, images), progress=False)
    results = [measure(index, b, g, batch_size=batch_size, short=short, long=long, pad=pad, groups=groups,
                       workers=workers, epochs=epochs) for b in (backends or available_backends()) for g in (False, True)]
    shapes, counts = np.unique(np.stack([index.widths, index.heights], axis=1), axis=0, return_counts=True)
    mix = {"source_sizes": [[int(w), int(h), int(c)] for (w, h), c in zip(shapes, counts)]}
    label = ", ".join(f"{w}x{h} x{c}" for w, h, c in mix["source_sizes"])
    print(f"\npadding of variable-size batches: {len(index)} images ({label}) -> "
          f"Resize({short}, max_size={long}), pad_batch={pad}, batches of {batch_size}, "
          f"AspectGroupedSampler(groups={groups})")
    print(f"{'backend':10s} {'sampler':8s} {'padding %':>9s} {'img/s':>8s}")
    for r in results:
        print(f"{r['backend']:10s} {r['sampler']:8s} {100 * r['padding_fraction']:9.1f} {r['images_per_s']:8.1f}")
    return {"data": {"root": str(root), "images": len(index), **mix, "resize": [short, long], "pad_batch": pad,
                     "batch_size": batch_size, "groups": groups}, "results": results}


def main(argv: list[str] | None = None) -> int:
    import os

    from dali_backend.cli.cliargs import default_cache, positive_int

    p = argparse.ArgumentParser(prog="python -m bench.padding", description=__doc__.split("\n")[0])
    p.add_argument("--images", type=positive_int, default=192, help="synthetic images (default 192)")
    p.add_argument("--batch-size", type=positive_int, default=16)
    p.add_argument("--short", type=positive_int, default=192, help="Resize's shorter side (default 192)")
    p.add_argument("--max-size", type=positive_int, default=320, help="Resize's longest side (default 320)")
    p.add_argument("--pad", type=positive_int, default=32, help="pad_batch multiple (default 32)")
    p.add_argument("--groups", type=positive_int, default=2, help="aspect groups (default 2: portrait, landscape)")
    p.add_argument("--epochs", type=positive_int, default=1, help="timed epochs after one warm-up (default 1)")
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1)
    p.add_argument("--backends", nargs="*", choices=("torch", "dali-cpu", "dali-gpu"),
                   help="default: those this machine runs")
    p.add_argument("--cache", type=Path, default=None, help="where the synthetic data is generated")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    root = Path(args.cache or default_cache()) / f"padding-{args.images}-mixed"
    doc = run_padding(root, images=args.images, batch_size=args.batch_size, workers=args.workers, epochs=args.epochs,
                      short=args.short, long=args.max_size, pad=args.pad, groups=args.groups, backends=args.backends)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
