"""The GPU check's own steps (``bench/gpu_check.sh``): versions, one mixed-decoder JPEG, and a
``hw_decoder_load`` sweep. Each step prints and writes its JSON as soon as it has a result, so a
step that fails or runs out of time never hides the ones before it.

    python -m bench.gpu_probe versions --out DIR
    python -m bench.gpu_probe decode --out DIR            # exit 3 with a clear message if it fails
    python -m bench.gpu_probe sweep --out DIR --data ROOT --loads 0.65,0.85,1.0

``--dry-run`` runs the same code with DALI's CPU operators (how CI and CPU machines rehearse it).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
import time
from pathlib import Path


def _write(out: Path, name: str, data) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(data, indent=2))


def nvjpeg_version() -> str | None:
    """libnvjpeg's version via ``nvjpegGetProperty`` (None where the library is absent)."""
    candidates = ["libnvjpeg.so", "libnvjpeg.so.12", "libnvjpeg.so.13"]
    for site in sys.path:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "**", "libnvjpeg.so*"), recursive=True))
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        parts = []
        for prop in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            v = ctypes.c_int(-1)
            if lib.nvjpegGetProperty(prop, ctypes.byref(v)) != 0:
                break
            parts.append(str(v.value))
        if len(parts) == 3:
            return ".".join(parts) + f" ({name})"
    return None


def cmd_versions(args) -> int:
    import cv2
    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "opencv": cv2.__version__, "gpus": torch.cuda.device_count(), "nvjpeg": nvjpeg_version()}
    try:
        import nvidia.dali as dali

        info["dali"] = dali.__version__
    except ImportError as e:
        info["dali"] = f"not importable: {e}"
    _write(args.out, "versions.json", info)
    print(" | ".join(f"{k} {v}" for k, v in info.items()))
    return 0 if not str(info["dali"]).startswith("not importable") else 3


def cmd_decode(args) -> int:
    """One JPEG through ``decoders.image`` (mixed on the GPU): the first thing that must work."""
    import cv2
    import numpy as np

    device = "cpu" if args.dry_run else "mixed"
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur(rng.integers(0, 256, (480, 640, 3)).astype(np.uint8), (0, 0), 2)
    data = np.frombuffer(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes(), np.uint8)
    result = {"device": device}
    try:
        import nvidia.dali as dali
        from nvidia.dali import fn, types

        @dali.pipeline_def(batch_size=1, num_threads=2, device_id=None if args.dry_run else 0)
        def pipe():
            enc = fn.external_source(source=lambda: [data], batch=True)
            extra = {} if args.dry_run else {"jpeg_fancy_upsampling": True}
            return fn.decoders.image(enc, device=device, output_type=types.RGB, **extra)

        p = pipe()
        p.build()
        (out,) = p.run()
        got = np.array(out.as_cpu()[0] if hasattr(out, "as_cpu") else out[0])
        ref = cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        d = np.abs(got.astype(int) - ref.astype(int))
        result.update(ok=True, shape=list(got.shape), mean_diff=float(d.mean()), max_diff=int(d.max()))
    except Exception as e:  # report, never hide: the rest of the check depends on this
        result.update(ok=False, error=f"{type(e).__name__}: {e}"[:2000])
    _write(args.out, "decode.json", result)
    if not result["ok"]:
        print(f"gpu_probe: the {device} JPEG decoder failed on one 640x480 image: {result['error'][:500]}\n"
              "Stop here: check the DALI wheel (cuda130 for a CUDA 13 driver), nvidia-nvjpeg and nvimgcodec "
              "on PYTHONPATH.", file=sys.stderr)
        return 3
    print(f"decode ({device}): {result['shape']} mean |diff| vs OpenCV {result['mean_diff']:.3f} max {result['max_diff']}")
    return 0


def cmd_sweep(args) -> int:
    """Throughput of DaliLoader for each ``hw_decoder_load`` on the same data (one process, warm-up first)."""
    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
    from dali_backend._own import own

    ImageDataset = own("fallback.dataset").ImageDataset

    index = SampleIndex.from_folder(args.data, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=256), seed=0)
    sampler = WeightedSampler(index, seed=0)
    rows = []
    for load in [float(v) for v in args.loads.split(",")]:
        row = {"hw_decoder_load": load}
        try:
            with DaliLoader(ds, batch_size=args.batch_size, sampler=sampler, device="cpu" if args.dry_run else "cuda",
                            backend="dali", hw_decoder_load=load) as loader:
                loader.set_epoch(0)
                for _ in loader:  # warm-up: allocations, nvJPEG/hardware decoder start-up
                    pass
                t0, n = time.perf_counter(), 0
                for epoch in range(1, 1 + args.epochs):
                    loader.set_epoch(epoch)
                    for x, _ in loader:
                        n += len(x)
                    if not args.dry_run:
                        import torch

                        torch.cuda.synchronize()
                row.update(images_per_s=n / (time.perf_counter() - t0), images=n, backend=loader.backend)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:1000]
        rows.append(row)
        _write(args.out, "hw_decoder_load.json", rows)
        print(json.dumps(row), flush=True)
    return 0 if all("error" not in r for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_probe", description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["versions", "decode", "sweep"])
    p.add_argument("--out", type=Path, default=Path("out/gpu"))
    p.add_argument("--dry-run", action="store_true", help="DALI CPU operators instead of the GPU")
    p.add_argument("--data", help="sweep: data root")
    p.add_argument("--loads", default="0.65,0.85,1.0")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)
    if args.step == "sweep" and not args.data:
        p.error("sweep needs --data ROOT (a folder of root/<class>/*.jpg)")
    return {"versions": cmd_versions, "decode": cmd_decode, "sweep": cmd_sweep}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
