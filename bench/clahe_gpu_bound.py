"""``python -m bench.clahe_gpu_bound``: the preset's end-to-end GPU-versus-CPU bound, estimated on a CPU.

The preset runs CLAHE directly on the decoder's output, and CLAHE amplifies small input differences
(a level moved across a histogram bin shifts a tile's table). On a GPU the decoder is nvJPEG, which
differs from libjpeg-turbo by about one level on some pixels. Without a GPU this script estimates
what that costs at the output: each image is decoded by OpenCV (the CPU path's decoder), a fraction
of its pixels moved by +-1 level (a stand-in for nvJPEG's differences; the GPU check measures the real
fraction, ``decode`` row of ``bench.equivalence --device gpu``), equalised by the numpy model of
DALI's GPU CLAHE (``tests/helpers/clahe_gpu_model.py``) inside OpenCV's reflect-101 padding (what the GPU graph
does), then resized, rotated and jittered by the CPU operations with the same parameters. The CPU
path runs the preset unchanged. Printed per source size and perturbed fraction: mean / 99.9th
percentile / max of |GPU estimate - CPU| on the uint8 scale, after CLAHE and at the output.

It is an estimate: the GPU's resize, rotation and jitter (at most 1 level each, ties rounded to even)
are not modelled, and the model of the CLAHE kernel was written from DALI's source, not measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from dali_backend._own import own

ops = own("fallback.ops")
MODEL = Path(__file__).resolve().parents[1] / "tests" / "helpers" / "clahe_gpu_model.py"


def load_model():
    """The numpy model of DALI's GPU CLAHE (``tests/helpers/clahe_gpu_model.py``: ``dali_gpu_clahe``, ``opencv_padding``)."""
    spec = importlib.util.spec_from_file_location("clahe_gpu_model", MODEL)
    if spec is None or not MODEL.exists():
        raise FileNotFoundError(f"{MODEL}: the CLAHE kernel's model is not there; run from a source checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_clahe(img: np.ndarray, clahe, model) -> np.ndarray:
    """What the GPU graph computes: pad as OpenCV does (reflect-101, bottom and right), the kernel's
    model, crop back."""
    import cv2

    tx, ty = clahe.tiles
    py, px = model.opencv_padding(*img.shape, tx, ty)
    padded = cv2.copyMakeBorder(img, 0, py, 0, px, cv2.BORDER_REFLECT_101) if py or px else img
    return model.dali_gpu_clahe(padded, tx, ty, float(clahe.clip_limit))[:img.shape[0], :img.shape[1]]


def perturb(img: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """``img`` with ``fraction`` of its pixels moved by +-1 level (clipped to 0..255)."""
    moved = rng.random(img.shape) < fraction
    step = np.where(rng.random(img.shape) < 0.5, -1, 1)
    return np.clip(img.astype(np.int16) + moved * step, 0, 255).astype(np.uint8)


def _stats(d: np.ndarray) -> dict:
    return {"mean": float(d.mean()), "p999": float(np.percentile(d, 99.9)), "max": int(d.max())}


def estimate(files: list[Path], fractions: list[float], seed: int = 0) -> list[dict]:
    """One row per perturbed fraction over ``files`` (JPEGs): the preset's differences after CLAHE and at
    the output, GPU estimate against the CPU path."""
    from dali_backend import AugmentSpec
    from dali_backend.transforms import Clahe

    spec = AugmentSpec()  # the preset: gray, CLAHE first, then resize, rotation and jitter
    first = spec.transforms[0]
    if not isinstance(first, Clahe):
        raise RuntimeError(f"the preset starts with {first!r}, not Clahe: this estimate no longer applies")
    model = load_model()
    rows = []
    for fraction in fractions:
        after_clahe, output = [], []
        for k, path in enumerate(files):
            decoded = ops.decode(path.read_bytes(), spec.color)
            params = spec.make_params(seed, 0, k, decoded.shape[:2])
            cpu_clahe = first.apply(decoded, params[0])
            gpu = gpu_clahe(perturb(decoded, fraction, np.random.default_rng([seed, k])), first, model)
            after_clahe.append(np.abs(gpu.astype(np.int16) - cpu_clahe).ravel())
            cpu, est = cpu_clahe, gpu
            for op, p in zip(spec.transforms[1:], params[1:], strict=True):
                if not op.is_identity:
                    cpu, est = op.apply(cpu, p), op.apply(est, p)
            output.append(np.abs(est.astype(np.int16) - cpu).ravel())
        size = ops.decode(files[0].read_bytes(), spec.color).shape[:2]
        rows.append({"source": f"{size[1]}x{size[0]}", "images": len(files), "perturbed_fraction": fraction,
                     "after_clahe": _stats(np.concatenate(after_clahe)), "output": _stats(np.concatenate(output))})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.clahe_gpu_bound", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="2048x1536,640x480", help="synthetic source sizes WxH, comma-separated")
    p.add_argument("--images", type=int, default=6, help="images per size (default 6)")
    p.add_argument("--fractions", default="0,0.01,0.05,0.25",
                   help="fractions of decoded pixels moved by +-1 level (default 0,0.01,0.05,0.25)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    from dali_backend.core.synthetic import generate_defect_dataset

    fractions = [float(f) for f in args.fractions.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            w, h = (int(v) for v in size.lower().split("x"))
            root = generate_defect_dataset(Path(tmp) / size, n=args.images, size=(w, h), quality=92, seed=0,
                                           progress=False)
            rows += estimate(sorted(Path(root).rglob("*.jpg")), fractions)
    print(f"{'source':>10s} {'perturbed':>9s} | {'after CLAHE: mean':>17s} {'p99.9':>6s} {'max':>4s} | "
          f"{'output: mean':>12s} {'p99.9':>6s} {'max':>4s}")
    for r in rows:
        a, o = r["after_clahe"], r["output"]
        print(f"{r['source']:>10s} {r['perturbed_fraction']:9.2f} | {a['mean']:17.3f} {a['p999']:6.1f} {a['max']:4d} | "
              f"{o['mean']:12.3f} {o['p999']:6.1f} {o['max']:4d}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
