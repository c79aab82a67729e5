"""The GPU check's own steps (``bench/gpu_check.sh``): versions, one mixed-decoder JPEG, a
``hw_decoder_load`` sweep, the telemetry of a ``dali-gpu`` loader under a GPU-bound step, and the
hardware JPEG decoder's use read from ``nvidia-smi dmon``. Each step prints and writes its JSON as
soon as it has a result, so a step that fails or runs out of time never hides the ones before it.

    python -m bench.gpu_probe versions --out DIR
    python -m bench.gpu_probe decode --out DIR            # exit 3 with a clear message if it fails
    python -m bench.gpu_probe sweep --out DIR --data ROOT --loads 0.65,0.85,1.0
    python -m bench.gpu_probe telemetry --out DIR --data ROOT --step-ms 40
    python -m bench.gpu_probe hwjpeg --out DIR --dmon DIR/dmon.txt

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
        from nvidia.dali import backend

        # what this wheel registers for the GPU (tests/dali/test_gpu_graph.py checks the graphs against the
        # CPU machines' wheel; this list shows whether the GPU machine's wheel registers the same)
        ops = {"gpu": sorted(backend.RegisteredGPUOps()), "mixed": sorted(backend.RegisteredMixedOps())}
    except ImportError as e:
        info["dali"], ops = f"not importable: {e}", {}
    _write(args.out, "versions.json", {**info, "registered_ops": ops})
    print(" | ".join(f"{k} {v}" for k, v in info.items()) + " | registered ops: "
          + ", ".join(f"{len(v)} {k}" for k, v in ops.items()))
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


TELEMETRY_KEYS = ("data_wait_s", "data_wait_fraction", "wall_s", "batches", "images", "img_per_s")


def _gpu_step(step_ms: float, dry_run: bool):
    """A training step of ``step_ms`` queued on the GPU and never waited for by the host (a step
    without ``.item()``); on a dry run the host sleeps instead."""
    if dry_run or step_ms <= 0:
        return lambda: time.sleep(step_ms / 1000) if step_ms > 0 else None
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles = int(10_000_000 * step_ms / max(start.elapsed_time(end), 1e-3))
    return lambda: torch.cuda._sleep(cycles)


def cmd_telemetry(args) -> int:
    """What a ``dali-gpu`` loader's telemetry reports (``loader.metrics()``) beside the wait the loop
    measured around its own ``next()``: a pass with no step, then one with a GPU-bound step of
    ``--step-ms`` per batch. The data wait is host time: under the GPU step it must stay well below the
    steps' GPU time (it included it while ``next()`` synchronised)."""
    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
    from dali_backend._own import own

    ImageDataset = own("fallback.dataset").ImageDataset
    index = SampleIndex.from_folder(args.data, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=256), seed=0)
    sampler = WeightedSampler(index, num_samples=min(len(index), 8 * args.batch_size), seed=0)
    rows, ok = [], True
    with DaliLoader(ds, batch_size=args.batch_size, sampler=sampler, device="cpu" if args.dry_run else "cuda",
                    backend="dali") as loader:
        for epoch, (label, step_ms) in enumerate((("warm-up", 0.0), ("no step", 0.0), ("gpu step", args.step_ms))):
            step = _gpu_step(step_ms, args.dry_run)
            loader.set_epoch(epoch)
            it, waited, batches, t0 = iter(loader), 0.0, 0, time.perf_counter()
            while True:
                asked = time.perf_counter()
                try:
                    next(it)
                except StopIteration:
                    break
                waited += time.perf_counter() - asked
                batches += 1
                step()
            host_s = time.perf_counter() - t0
            if not args.dry_run:
                import torch

                torch.cuda.synchronize()
            m = loader.metrics()
            row = {"pass": label, "step_ms": step_ms, "loop_measured_wait_s": waited, "host_s": host_s,
                   "until_gpu_done_s": time.perf_counter() - t0, "backend": loader.backend,
                   **{k: m.get(k) for k in TELEMETRY_KEYS}, **{k: v for k, v in m.items() if k.startswith("stage_ms.")}}
            if label == "gpu step" and not args.dry_run:  # the host wait must not contain the steps' GPU time
                row["steps_gpu_s"] = batches * step_ms / 1000
                row["ok"] = m["data_wait_s"] < 0.5 * row["steps_gpu_s"]
                ok = ok and row["ok"]
            rows.append(row)
            _write(args.out, "telemetry.json", rows)
            print(json.dumps(row), flush=True)
    return 0 if ok else 1


def parse_dmon(text: str) -> dict:
    """The ``jpg`` column of ``nvidia-smi dmon -s u`` output (the NVJPG engines' utilisation, %):
    whether the driver reports it, its samples and their maximum."""
    names, samples = None, []
    for line in text.splitlines():
        if line.startswith("#"):
            if names is None:
                names = line.lstrip("#").split()
            continue
        values = line.split()
        if names and "jpg" in names and len(values) == len(names) and values[names.index("jpg")].isdigit():
            samples.append(int(values[names.index("jpg")]))
    return {"jpg_column": bool(names and "jpg" in names), "samples": len(samples),
            "max_jpg_util_pct": max(samples, default=None), "busy_samples": sum(v > 0 for v in samples)}


DMON_SAMPLE = """#Time        gpu     sm    mem    enc    dec    jpg    ofa     fb   bar1   ccpm
#HH:MM:SS    Idx      %      %      %      %      %      %     MB     MB     MB
 12:00:01      0      3      1      0      0      0      0    612      2      0
 12:00:02      0     41     12      0      0     37      0   2210      4      0
"""


def cmd_hwjpeg(args) -> int:
    """Evidence that the hardware JPEG decoder ran: the ``jpg`` column of the ``nvidia-smi dmon`` file the
    check recorded while the ``dali-gpu`` contenders and the ``hw_decoder_load`` sweep ran (a dry run
    parses a sample)."""
    text = DMON_SAMPLE if args.dry_run else Path(args.dmon).read_text(errors="replace")
    result = parse_dmon(text)
    result["used"] = bool(result["busy_samples"])
    _write(args.out, "hw_decoder.json", result)
    print(f"hardware JPEG decoder: {result}")
    if not result["jpg_column"]:
        print("gpu_probe: this driver's dmon has no jpg column; the hardware decoder's use is unknown",
              file=sys.stderr)
    return 0 if result["used"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_probe", description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["versions", "decode", "sweep", "telemetry", "hwjpeg"])
    p.add_argument("--out", type=Path, default=Path("out/gpu"))
    p.add_argument("--dry-run", action="store_true", help="DALI CPU operators instead of the GPU")
    p.add_argument("--data", help="sweep: data root")
    p.add_argument("--loads", default="0.65,0.85,1.0")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--step-ms", type=float, default=40.0, help="telemetry: the GPU step per batch (ms)")
    p.add_argument("--dmon", help="hwjpeg: the nvidia-smi dmon -s u output to read")
    args = p.parse_args(argv)
    if args.step in ("sweep", "telemetry") and not args.data:
        p.error(f"{args.step} needs --data ROOT (a folder of root/<class>/*.jpg)")
    if args.step == "hwjpeg" and not (args.dmon or args.dry_run):
        p.error("hwjpeg needs --dmon FILE (nvidia-smi dmon -s u output)")
    steps = {"versions": cmd_versions, "decode": cmd_decode, "sweep": cmd_sweep, "telemetry": cmd_telemetry,
             "hwjpeg": cmd_hwjpeg}
    return steps[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
