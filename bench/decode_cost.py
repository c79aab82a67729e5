"""Decode cost per format and bit depth, both CPU backends: ``python -m bench.decode_cost``.

One synthetic defect scene (the benchmark's data, :mod:`dali_backend.core.synthetic`) encoded as JPEG
(quality 92), 8-bit PNG and 16-bit PNG (or ``--formats``); each decoded ``--repeats`` times, one at a
time on one thread: DALI's CPU ``decoders.image`` (a batch of one per run, ``num_threads=1``; 16-bit:
``dtype=UINT16``) and the fallback's decode (``fallback.ops.decode``, 16-bit: ``bits=16``). Prints
milliseconds per image (median) and the ratio to JPEG. A short measurement, not the benchmark.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dali_backend.cli.cliargs import positive_int, size_wxh
from dali_backend.core.synthetic import encode, make_image

CASES = {"jpeg": ("jpeg", 8), "png": ("png", 8), "png16": ("png", 16), "tiff": ("tiff", 8), "tiff16": ("tiff", 16)}


def dali_ms(data: bytes, color: str, bits: int, repeats: int) -> float:
    from nvidia.dali import fn, pipeline_def, types

    buf = np.frombuffer(data, np.uint8)

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipe():
        x = fn.external_source(source=lambda: [buf], batch=True, dtype=types.UINT8)
        args = {"dtype": types.UINT16} if bits == 16 else {}
        return fn.decoders.image(x, device="cpu", output_type=types.GRAY if color == "gray" else types.RGB, **args)

    p = pipe()
    p.build()
    p.run()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        p.run()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def opencv_ms(data: bytes, color: str, bits: int, repeats: int) -> float:
    from fallback import ops

    buf = np.frombuffer(data, np.uint8)
    ops.decode(buf, color, bits)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ops.decode(buf, color, bits)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.decode_cost", description=__doc__.splitlines()[0])
    p.add_argument("--size", type=size_wxh, default=(2048, 1536), help="image size WxH (default 2048x1536)")
    p.add_argument("--repeats", type=positive_int, default=24, help="decodes per case (default 24)")
    p.add_argument("--color", choices=["gray", "rgb"], default="rgb", help="files and decode in colour or gray")
    p.add_argument("--formats", nargs="*", choices=list(CASES), default=["jpeg", "png", "png16"])
    args = p.parse_args(argv)
    import cv2

    cv2.setNumThreads(1)
    w, h = args.size
    rows, base = [], {}
    for case in args.formats:
        fmt, bits = CASES[case]
        img = make_image(0, "scratch", 0, w, h, color=args.color == "rgb", bit_depth=bits)
        data = encode(img, fmt, 92)
        d, o = dali_ms(data, args.color, bits, args.repeats), opencv_ms(data, args.color, bits, args.repeats)
        base.setdefault("dali", d)
        base.setdefault("opencv", o)
        rows.append(f"| {fmt.upper()} {bits}-bit | {len(data) / 1e6:.2f} MB | {d:.1f} ({d / base['dali']:.1f}x) | "
                    f"{o:.1f} ({o / base['opencv']:.1f}x) |")
    print(f"{w}x{h} {args.color}, median of {args.repeats} decodes, one thread; ms per image (ratio to the first row)")
    print("| file | size | DALI CPU `decoders.image` | OpenCV (fallback) |\n| --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
