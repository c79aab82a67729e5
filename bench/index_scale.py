"""``python -m bench.index_scale --files 100000``: indexing at scale: time, peak memory, file size, load time.

Generates ``--files`` tiny JPEGs (16x16, copies of a few distinct images: each file its own inode, so
nothing is refused as "the same file twice") in ``<root>/<class>/<folder of 1000>/``, then measures,
each phase in a fresh process (so that its peak RSS is its own, ``ru_maxrss``):

* ``walk``: listing the candidate files only (what a parallel directory walk could speed up);
* ``build``: ``SampleIndex.from_folder`` (``stat`` + header check of every file, ``--workers`` threads);
* ``save`` size of the index file; ``load``: ``SampleIndex.load`` with ``check="stat"`` (every file's
  size and mtime compared) and ``check="none"``;
* ``update``: ``index.update()`` with nothing changed, then after adding 1 % new files.

``--keep DIR`` keeps (and reuses) the generated files there; by default they go to a temporary folder
that is removed at the end. Prints one table (Markdown).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dali_backend.cli.cliargs import OneLineParser, positive_int

CLASSES = ("dent", "normal", "scratch")
PER_FOLDER = 1000


def tiny_jpegs(k: int = 8) -> list[bytes]:
    """``k`` distinct 16x16 JPEGs (a few hundred bytes each)."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    return [cv2.imencode(".jpg", rng.integers(0, 256, (16, 16), dtype=np.uint8))[1].tobytes() for _ in range(k)]


def generate(root: Path, files: int, start: int = 0) -> None:
    """Files ``start .. start + files - 1``, spread over the classes, 1000 per folder."""
    blobs = tiny_jpegs()
    made = set()
    for i in range(start, start + files):
        cls = CLASSES[i % len(CLASSES)]
        folder = root / cls / f"{i // (PER_FOLDER * len(CLASSES)):05d}"
        if folder not in made:
            folder.mkdir(parents=True, exist_ok=True)
            made.add(folder)
        (folder / f"{i:08d}.jpg").write_bytes(blobs[i % len(blobs)])


def phase(name: str, root: str, index_file: str, workers: int) -> dict:
    """One measured phase in this process: ``{"s": seconds, "rss_mb": peak RSS, ...}``."""
    import resource

    from dali_backend import SampleIndex

    out: dict = {}
    t0 = time.perf_counter()
    if name == "walk":
        from dali_backend.index.build import folder_candidates

        out["files"] = len(folder_candidates(root, None, None, False)[1].paths)
    elif name == "build":
        index = SampleIndex.from_folder(root, workers=workers, progress=False)
        out["files"] = len(index)
        out["s"] = time.perf_counter() - t0
        index.save(index_file)
    elif name in ("load-stat", "load-none"):
        out["files"] = len(SampleIndex.load(index_file, check=name.split("-")[1]))
    elif name == "update":
        old = SampleIndex.load(index_file, check="none")
        from dali_backend.index.update import update_index

        new, report = update_index(old, workers=workers, progress=False)
        out["files"], out["report"] = len(new), str(report)
        out["s"] = time.perf_counter() - t0
        new.save(index_file)
    out.setdefault("s", time.perf_counter() - t0)
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def measure(name: str, root: Path, index_file: Path, workers: int) -> dict:
    """``phase`` in a fresh interpreter (its own peak RSS)."""
    cmd = [sys.executable, "-m", "bench.index_scale", "--phase", name, "--root", str(root), "--index", str(index_file),
           "--workers", str(workers)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if proc.returncode:
        raise RuntimeError(f"phase {name} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m bench.index_scale", description=__doc__.splitlines()[0])
    p.add_argument("--files", type=positive_int, default=100_000)
    p.add_argument("--workers", type=positive_int, default=8, help="threads of the header check (default 8)")
    p.add_argument("--keep", help="generate the files here and keep them (reused when they are there)")
    p.add_argument("--phase", help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    p.add_argument("--index", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        print(json.dumps(phase(args.phase, args.root, args.index, args.workers)))
        return 0
    tmp = None if args.keep else tempfile.mkdtemp(prefix="index_scale_")
    base = Path(args.keep or tmp)
    try:
        root, index_file = base / "data", base / "index.npz"
        t0 = time.perf_counter()
        marker = base / f"generated-{args.files}"
        if not marker.exists():
            shutil.rmtree(root, ignore_errors=True)
            generate(root, args.files)
            marker.touch()
        generated = time.perf_counter() - t0
        empty = measure("imports", root, index_file, args.workers)  # the interpreter and its imports alone
        rows = [("walk (list candidates)", measure("walk", root, index_file, args.workers)),
                ("build (stat + header check)", measure("build", root, index_file, args.workers))]
        size_mb = index_file.stat().st_size / 1e6
        rows += [("load, check='stat'", measure("load-stat", root, index_file, args.workers)),
                 ("load, check='none'", measure("load-none", root, index_file, args.workers)),
                 ("update, nothing changed", measure("update", root, index_file, args.workers))]
        generate(root, max(1, args.files // 100), start=args.files)
        rows.append((f"update, {max(1, args.files // 100)} files added", measure("update", root, index_file, args.workers)))
        print(f"{args.files} files generated in {generated:.1f} s under {root}; index file {size_mb:.2f} MB; "
              f"interpreter alone {empty['rss_mb']:.0f} MB; {args.workers} threads; {os.cpu_count()} cores")
        print("| phase | files | time s | files/s | peak RSS MB |")
        print("| --- | --- | --- | --- | --- |")
        for name, r in rows:
            print(f"| {name} | {r['files']} | {r['s']:.2f} | {r['files'] / max(r['s'], 1e-9):,.0f} | {r['rss_mb']:.0f} |")
            if "report" in r:
                print(f"|  ({r['report']}) | | | | |")
        if args.keep:  # leave the kept folder as generated
            for i in range(args.files, args.files + max(1, args.files // 100)):
                (root / CLASSES[i % len(CLASSES)] / f"{i // (PER_FOLDER * len(CLASSES)):05d}" / f"{i:08d}.jpg").unlink()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
