"""CPU milliseconds per image of each stage of the fallback, per source size (issue 37's breakdown).

    python scripts/fallback_stages.py [--sizes 320x240,640x480,2048x1536] [--images 12] [--repeats 5]
    python scripts/fallback_stages.py --in-process    (the loader with num_workers=0, 200x200 JPEGs -> 128x128)

Synthetic colour JPEGs of each size (``dali_backend.core.synthetic``), decoded and augmented as the
fallback does it (``fallback.ops.decode``, ``spec.make_params``, each operation's ``apply``) on one torch
intra-op thread, for the default contract (``AugmentSpec(size=(256, 256))``, gray) and the torchvision
ImageNet recipe (``bench.contenders.recipe_spec``, RGB). Each stage is timed with ``time.process_time``
(the process's CPU, every thread), the median of ``--repeats`` passes over ``--images`` files; run it
pinned to one core (``taskset -c 0``) on a quiet machine: a loaded one inflates every figure.

``--in-process``: ``DaliLoader(backend="torch", num_workers=0)`` on 96 generated 200x200 JPEGs, torch left
at its default threads: wall and CPU ms per image, medians of 5 passes (issue 37 measured 20-31 ms
in-process against 2.3-4.5 in a worker before the loader's own work ran on one intra-op thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.contenders import recipe_spec  # noqa: E402
from dali_backend import AugmentSpec  # noqa: E402
from dali_backend._own import own  # noqa: E402
from dali_backend.core.synthetic import CLASSES, encode, make_image  # noqa: E402


def stages(spec, color: str, files: list[bytes], repeats: int) -> dict[str, float]:
    """Median CPU ms per image of the draw, the decode and each pixel operation of ``spec``."""
    decode = own("fallback.ops").decode
    names = ["draw", "decode"] + [type(op).__name__ for op in spec.transforms if op.KIND not in ("output", "batch")]
    per: dict[str, list[float]] = {k: [] for k in names}
    clock = time.process_time
    for r in range(repeats):
        t = dict.fromkeys(names, 0.0)
        for i, data in enumerate(files):
            t0 = clock()
            img = decode(np.frombuffer(data, np.uint8), color)
            t1 = clock()
            params = spec.make_params(0, 0, i + 1000 * r, img.shape[:2])
            t["decode"] += t1 - t0
            t["draw"] += clock() - t1
            for op, p in zip(spec.transforms, params):
                if op.is_identity or op.KIND in ("output", "batch"):
                    continue
                t0 = clock()
                img = op.apply(img, p)
                t[type(op).__name__] += clock() - t0
        for k in names:
            per[k].append(1000 * t[k] / len(files))
    return {k: statistics.median(v) for k, v in per.items()}


def in_process(root: str, passes: int = 5) -> tuple[float, float]:
    """Median (wall, CPU) ms per image of the in-process loader (``num_workers=0``) on ``root``'s images."""
    import warnings

    from dali_backend import DaliLoader, SampleIndex, WeightedSampler
    from dali_backend.core.synthetic import generate_defect_dataset
    from fallback import ImageDataset

    if not Path(root).exists():
        generate_defect_dataset(root, n=96, size=(200, 200))
    index = SampleIndex.from_folder(root)
    ds = ImageDataset(index, AugmentSpec(size=(128, 128), color="gray"))
    wall, cpu = [], []
    for r in range(passes):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = DaliLoader(ds, batch_size=16, sampler=WeightedSampler(index, num_samples=96, seed=r),
                                num_workers=0, backend="torch")
        with loader:
            t, c = time.perf_counter(), time.process_time()
            n = sum(len(batch[0]) for batch in loader)
            wall.append((time.perf_counter() - t) / n * 1e3)
            cpu.append((time.process_time() - c) / n * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="320x240,640x480,2048x1536", help="source sizes WxH, comma-separated")
    p.add_argument("--images", type=int, default=12)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--in-process", action="store_true", help="time the in-process loader instead (num_workers=0)")
    p.add_argument("--root", default="/tmp/fallback_stages_200", help="where --in-process generates its images")
    args = p.parse_args(argv)
    if args.in_process:
        wall, cpu = in_process(args.root)
        print(f"in-process (num_workers=0, torch threads {torch.get_num_threads()}): {wall:.2f} ms/img wall, "
              f"{cpu:.2f} ms/img CPU")
        return 0
    torch.set_num_threads(1)
    for size in args.sizes.split(","):
        w, h = (int(v) for v in size.lower().split("x"))
        files = [encode(make_image(0, CLASSES[i % len(CLASSES)], i, w, h, color=True), "jpeg") for i in range(args.images)]
        for name, spec, color in (("default", AugmentSpec(size=(256, 256), color="gray"), "gray"),
                                  ("recipe", recipe_spec((256, 256)), "rgb")):
            ms = stages(spec, color, files, args.repeats)
            print(f"{w}x{h} {name:8s} total={sum(ms.values()):.3f}  " + "  ".join(f"{k}={v:.3f}" for k, v in ms.items()),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
