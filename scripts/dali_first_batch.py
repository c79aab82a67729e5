"""The first batch of ``DaliLoader(backend="dali", device="cpu")`` and its passes, with the readers decoding
and with DALI decoding (``DALI_BACKEND_CPU_GRAPH_DECODE=1``), alternated in fresh processes (issue 37).

    PYTHONPATH=. python scripts/dali_first_batch.py [--size 2048 1536] [--images 256] [--runs 3] [--epochs 3]

Synthetic JPEGs (``generate_defect_dataset``, kept under the temporary folder between runs) through the
benchmark's default contract to 256x256, batch 32, 2 DALI threads. Each run prints the loader's
construction, its first batch (from after the construction) and ``--epochs`` whole passes (the first
one's rest included). A short measurement: on a shared machine compare the two heads within one call.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HEADS = {"readers": {}, "graph": {"DALI_BACKEND_CPU_GRAPH_DECODE": "1"}}


def one(root: Path, epochs: int) -> str:
    """One loader's construction, first batch and passes over ``root``, as a line."""
    from bench.contenders import preset_spec
    from dali_backend import DaliLoader, SampleIndex, WeightedSampler
    from fallback import ImageDataset

    warnings.simplefilter("ignore")
    index = SampleIndex.from_folder(root, progress=False)
    t0 = time.perf_counter()
    loader = DaliLoader(ImageDataset(index, preset_spec((256, 256))), batch_size=32, num_workers=2, device="cpu",
                        backend="dali", sampler=WeightedSampler(index, seed=0))
    t1 = time.perf_counter()
    it = iter(loader)
    next(it)
    t2 = time.perf_counter()
    for _ in it:
        pass
    for _ in range(epochs - 1):
        for _ in loader:
            pass
    t3 = time.perf_counter()
    loader.close()
    return f"construction {t1 - t0:.3f} s, first batch {t2 - t1:.3f} s, {epochs} passes {t3 - t1:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, nargs=2, default=(2048, 1536), metavar=("W", "H"))
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3, help="alternated runs of each head")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child process: one run over this folder
    args = ap.parse_args()
    if args.one is not None:
        print(one(args.one, args.epochs), flush=True)
        return
    from dali_backend.core.synthetic import generate_defect_dataset

    w, h = args.size
    root = generate_defect_dataset(Path(tempfile.gettempdir()) / f"dali-first-batch-{w}x{h}-{args.images}",
                                   n=args.images, size=(w, h), progress=False)
    for run in range(args.runs):
        for head, env in HEADS.items():
            out = subprocess.run([sys.executable, __file__, "--one", str(root), "--epochs", str(args.epochs)],
                                 env={**os.environ, **env}, capture_output=True, text=True, check=True)
            print(f"run {run + 1}, {head}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
