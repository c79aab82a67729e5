"""``python -m bench``: DaliLoader against the CPU fallback, the tutorial-style loader and the ceiling.

Each contender runs in a fresh process on the same data, one after the other; the table, a JSON file
and a PNG bar chart come out. Compare ratios from one run: the machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from .contenders import CONTENDERS


def _size(text: str) -> tuple[int, int]:
    w, h = (int(v) for v in text.lower().split("x"))
    return w, h


def machine_info() -> dict:
    import cv2
    import numpy as np
    import torch

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "opencv": cv2.__version__, "numpy": np.__version__, "gpu": None}
    try:
        import nvidia.dali as dali

        info["dali"] = dali.__version__
    except ImportError:
        info["dali"] = None
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def chart(results: list[dict], path: Path, title: str) -> None:
    """A horizontal bar chart of images/s (OpenCV drawing: no plotting dependency)."""
    import cv2
    import numpy as np

    bar_h, left, width = 34, 150, 760
    img = np.full((60 + bar_h * len(results) + 20, left + width + 40, 3), 255, np.uint8)
    cv2.putText(img, title, (10, 28), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 1, cv2.LINE_AA)
    top = max(r["images_per_s"] for r in results) or 1.0
    for i, r in enumerate(results):
        y = 50 + i * bar_h
        w = int(width * r["images_per_s"] / top)
        color = (60, 140, 40) if r["name"].startswith("dali") else (150, 110, 60)
        cv2.rectangle(img, (left, y), (left + w, y + bar_h - 8), color, -1)
        cv2.putText(img, r["name"], (10, y + 19), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.putText(img, f"{r['images_per_s']:.0f} img/s ({r['ratio_to_ceiling']:.2f}x)", (left + 6, y + 19),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), img)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--data", help="folder root/<class>/*.jpg (default: synthetic 2048x1536 defect JPEGs)")
    p.add_argument("--images", type=int, default=256, help="synthetic images (default 256)")
    p.add_argument("--source-size", type=_size, default=(2048, 1536), help="synthetic image size WxH")
    p.add_argument("--size", type=_size, default=(256, 256), help="output size WxH (default 256x256)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs after one warm-up (default 3)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="workers / threads (default: all cores)")
    p.add_argument("--only", nargs="*", choices=CONTENDERS, help="run only these contenders")
    p.add_argument("--json", help="write results here")
    p.add_argument("--png", help="bar chart (default: next to --json, or bench-results/bench.png)")
    p.add_argument("--cache", default=None, help="where synthetic data is generated")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--index", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out_w, out_h = args.size
    if args.one:  # child process: one contender, JSON on the last stdout line
        import warnings

        warnings.filterwarnings("ignore", module="nvidia")
        from .contenders import run_contender

        res = run_contender(args.one, args.index, (out_h, out_w), args.epochs, args.batch_size, args.workers)
        print(json.dumps(res))
        return 0

    import torch

    from dali_backend import SampleIndex
    from dali_backend.cli import default_cache
    from dali_backend.synthetic import generate_defect_dataset

    if args.data:
        root = Path(args.data)
    else:
        w, h = args.source_size
        root = Path(args.cache or default_cache()) / f"bench-{args.images}-{w}x{h}"
        t0 = time.perf_counter()
        generate_defect_dataset(root, n=args.images, size=(w, h), quality=92, seed=0)
        print(f"data: {args.images} synthetic {w}x{h} JPEGs in {root} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    index = SampleIndex.from_folder(root, progress=False)
    if len(index) == 0:
        print(f"no usable images under {root}", file=sys.stderr)
        return 2
    out_json = Path(args.json) if args.json else Path("bench-results/bench.json")
    out_json.parent.mkdir(parents=True, exist_ok=True)
    index_path = out_json.with_suffix(".index.npz")
    index.save(index_path)
    names = args.only or [c for c in CONTENDERS if c != "dali-gpu" or torch.cuda.is_available()]
    if "ceiling" not in names:
        names = ["ceiling", *names]
    results = []
    from dali_backend.progress import track

    for name in track(names, total=len(names), desc="bench", unit="contender"):
        cmd = [sys.executable, "-m", "bench", "--one", name, "--index", str(index_path), "--size", f"{out_w}x{out_h}",
               "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--workers", str(args.workers)]
        print(f"running {name} ...", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    ceiling = results[0]["images_per_s"]
    for r in results:
        r["ratio_to_ceiling"] = r["images_per_s"] / ceiling
    sizes = index.sizes
    machine = machine_info()
    machine["data"] = {"root": str(root), "images": len(index), "mean_file_kb": float(sizes.mean() / 1024),
                       "source_size": [int(index.widths[0]), int(index.heights[0])], "output_size": [out_w, out_h]}
    tut = next((r["images_per_s"] for r in results if r["name"] == "tutorial"), None)
    print(f"\n{len(index)} images {machine['data']['source_size'][0]}x{machine['data']['source_size'][1]} "
          f"(~{machine['data']['mean_file_kb']:.0f} KB) -> {out_w}x{out_h}; {machine['cores']} cores ({machine['cpu']}); "
          f"GPU: {machine['gpu'] or 'none'}")
    print(f"{'name':10s} {'img/s':>8s} {'x ceiling':>9s} {'x tutorial':>10s} {'cpu s/img':>9s} {'peak RSS MB':>11s} "
          f"{'first batch s':>13s} {'RSS growth %':>12s}")
    for r in results:
        fb = "-" if r["first_batch_s"] is None else f"{r['first_batch_s']:.2f}"
        vs_tut = f"{r['images_per_s'] / tut:.1f}" if tut else "-"
        print(f"{r['name']:10s} {r['images_per_s']:8.1f} {r['ratio_to_ceiling']:9.2f} {vs_tut:>10s} "
              f"{r['cpu_s_per_image']:9.4f} {r['peak_rss_mb']:11.0f} {fb:>13s} {r['rss_growth_pct']:12.1f}")
    with open(out_json, "w") as f:
        json.dump({"machine": machine, "results": results}, f, indent=2)
    png = Path(args.png) if args.png else out_json.with_suffix(".png")
    chart(results, png, f"{len(index)} x {machine['data']['source_size'][0]}x{machine['data']['source_size'][1]} "
                        f"JPEG -> {out_w}x{out_h}, {machine['cores']} cores, GPU: {machine['gpu'] or 'none'}")
    print(f"\nresults: {out_json}  chart: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
