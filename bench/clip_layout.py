"""``python -m bench.clip_layout``: clips on DALI as ``B * T`` samples or as ``B`` sequences: which is faster.

Issue 23 asked for clips "on DALI as sequences or as B*T samples regrouped — measure which is
faster". This times the same clip workload with two plain DALI pipelines (no ``DaliLoader`` around
them, so only the layout differs), on DALI's CPU operators and, when a GPU is present, on the mixed
decoder and GPU operators (skipped with one line otherwise):

* ``samples``: one external source gives the ``B * T`` encoded frames of a batch of clips and
  per-frame parameter arrays (each clip's parameters repeated ``T`` times); the frames are decoded
  and augmented as ``B * T`` independent samples (what ``DaliLoader`` does with a ``ClipSampler``,
  then regrouped to ``[B, T, ...]``).
* ``sequences``: ``T`` inputs give frame ``t`` of each of the ``B`` clips; each is decoded,
  ``fn.stack(..., axis=0, axis_name="F")`` makes one ``FHWC`` sequence per clip, and the operations
  run once per sequence with ``B`` parameter sets (DALI broadcasts a per-sample argument over the
  frames of a sequence; ``resize``, ``flip``, ``rotate`` and ``brightness_contrast`` all accept
  sequences on the CPU, DALI 2.4.0).

The operations: decode (RGB), resize to ``--size``, a horizontal flip, a rotation (keep size) and
brightness/contrast, each with per-clip random parameters. Both layouts must give the same pixels
(checked on the first batch; exit status 1 otherwise); then each runs ``--warmup`` batches, and
``--rounds`` rounds of ``--batches`` timed batches alternate between the layouts; frames/s is the
median round. Frames are synthetic JPEGs (:func:`dali_backend.core.synthetic.make_image`, quality 92)
encoded in memory: reading files is not what differs.

Measured (``python -m bench.clip_layout --devices cpu --rounds 5``: 640x480 -> 224x224, B = 8 clips of
T = 8 frames, DALI 2.4.0 CPU operators, 2 threads, a 2-core machine shared with other jobs): identical
pixels; B*T samples 284.5 frames/s and 6.67 CPU ms/frame, sequences 269.1 frames/s and 6.93 CPU
ms/frame: samples 1.06x the frames/s (1.04-1.09x in the calmer runs; 0.84-1.12x while other jobs
loaded the cores) and 4-5 % less CPU per frame in every run (6.67-6.71 against 6.93-7.06 ms); on the
idle machine (default 3 rounds) 294.2 against 270.1 frames/s, 1.09x, 6.67 against 7.07 ms. The
per-frame work (decode, resize) dominates and costs the same in both; the sequences' fewer operator
calls save nothing visible, and their extra CPU was not pinned down (stacking after the resize
rather than before left the gap as it was in two runs: not the full-size copy; the ``T`` decoder
calls of ``B`` frames each remain). So the loader keeps ``B * T`` samples, whose graph is the single
images' graph. GPU: not measured yet (no GPU here); the same graphs run with the mixed decoder.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Literal

import numpy as np
from numpy.typing import NDArray

Layout = Literal["samples", "sequences"]
Device = Literal["cpu", "gpu"]
LAYOUTS: tuple[Layout, ...] = ("samples", "sequences")
PARAMS = ("flip", "angle", "brightness", "contrast")


def encoded_frames(count: int, source_size: tuple[int, int], seed: int = 0) -> list[NDArray[np.uint8]]:
    """``count`` synthetic colour JPEGs of ``source_size`` ``(width, height)``, encoded in memory."""
    import cv2

    from dali_backend.core.synthetic import CLASSES, make_image

    out = []
    for k in range(count):
        img = make_image(seed, CLASSES[k % len(CLASSES)], k, source_size[0], source_size[1])
        ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 92])
        if not ok:
            raise RuntimeError(f"OpenCV failed to encode synthetic frame {k}")
        out.append(np.frombuffer(enc.tobytes(), np.uint8))
    return out


def clip_params(seed: int, iteration: int, clips: int) -> dict[str, NDArray]:
    """One batch's per-clip parameters, a pure function of ``(seed, iteration)``: ``flip`` (0/1, int32),
    ``angle`` (degrees in [-10, 10]), ``brightness`` and ``contrast`` (factors in [0.8, 1.2]), float32."""
    rng = np.random.default_rng([seed, iteration])
    return {"flip": rng.integers(0, 2, clips).astype(np.int32), "angle": rng.uniform(-10, 10, clips).astype(np.float32),
            "brightness": rng.uniform(0.8, 1.2, clips).astype(np.float32),
            "contrast": rng.uniform(0.8, 1.2, clips).astype(np.float32)}


class ClipFeed:
    """The batches of both layouts: batch ``i`` is clips ``i * B .. i * B + B - 1``, clip ``c``'s frame ``t``
    is JPEG ``(c * T + t) mod len(jpegs)``, its parameters :func:`clip_params` of ``(seed, i)``."""

    def __init__(self, jpegs: list[NDArray[np.uint8]], clips: int, clip_len: int, seed: int = 0):
        self.jpegs, self.clips, self.clip_len, self.seed = jpegs, clips, clip_len, seed

    def _frame(self, iteration: int, b: int, t: int) -> NDArray[np.uint8]:
        return self.jpegs[((iteration * self.clips + b) * self.clip_len + t) % len(self.jpegs)]

    def samples(self, info) -> tuple[list, ...]:
        """``B * T`` frames, clip by clip, and each parameter repeated ``T`` times (one per frame)."""
        i, B, T = info.iteration, self.clips, self.clip_len
        params = clip_params(self.seed, i, B)
        frames = [self._frame(i, b, t) for b in range(B) for t in range(T)]
        return (frames, *(list(np.repeat(params[k], T)) for k in PARAMS))

    def sequences(self, info) -> tuple[list, ...]:
        """``T`` batches of ``B`` frames (frame ``t`` of every clip), then one parameter per clip."""
        i, B, T = info.iteration, self.clips, self.clip_len
        params = clip_params(self.seed, i, B)
        frames = [[self._frame(i, b, t) for b in range(B)] for t in range(T)]
        return (*frames, *(list(params[k]) for k in PARAMS))


def build(layout: Layout, device: Device, feed: ClipFeed, size: tuple[int, int], threads: int):
    """The built pipeline of ``layout``; one output: ``B * T`` frames ``HWC`` (samples) or ``B``
    sequences ``FHWC`` (sequences), uint8, on ``device``."""
    from dali_backend.dali.graph import import_dali

    dali = import_dali()
    from nvidia.dali import fn, types

    B, T = feed.clips, feed.clip_len
    gpu = device == "gpu"
    param_types = [types.INT32, types.FLOAT, types.FLOAT, types.FLOAT]
    if layout == "samples":
        source, inputs, batch = feed.samples, 1, B * T
    else:
        source, inputs, batch = feed.sequences, T, B

    @dali.pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if gpu else None, exec_dynamic=True,
                       prefetch_queue_depth=2)
    def pipe():
        *jpegs, flip, angle, brightness, contrast = fn.external_source(
            source=source, batch_info=True, num_outputs=inputs + len(PARAMS),
            dtype=[types.UINT8] * inputs + param_types)
        frames = [fn.decoders.image(j, device="mixed" if gpu else "cpu", output_type=types.RGB) for j in jpegs]
        images = frames[0] if layout == "samples" else fn.stack(*frames, axis=0, axis_name="F")
        op_device = "gpu" if gpu else "cpu"
        images = fn.resize(images, resize_x=size[0], resize_y=size[1], device=op_device)
        images = fn.flip(images, horizontal=flip, vertical=0, device=op_device)
        images = fn.rotate(images, angle=angle, keep_size=True, fill_value=0, device=op_device)
        return fn.brightness_contrast(images, brightness=brightness, contrast=contrast, contrast_center=128.0,
                                      device=op_device)

    p = pipe()
    p.build()
    return p


def as_clips(output, layout: Layout, clips: int, clip_len: int) -> NDArray[np.uint8]:
    """One pipeline output as ``[B, T, H, W, C]`` uint8 on the host."""
    if hasattr(output, "as_cpu"):
        output = output.as_cpu()
    frames = np.stack([np.asarray(output[k]) for k in range(len(output))])
    return frames.reshape(clips, clip_len, *frames.shape[-3:]) if layout == "samples" else frames


def compare(device: Device = "cpu", source_size: tuple[int, int] = (640, 480), size: tuple[int, int] = (224, 224),
            clips: int = 8, clip_len: int = 8, batches: int = 8, warmup: int = 2, rounds: int = 3,
            threads: int | None = None, distinct: int = 128) -> dict:
    """Check that both layouts give the same pixels, then time them.

    Args:
        device: ``"cpu"`` (CPU decoder and operators) or ``"gpu"`` (mixed decoder, GPU operators).
        source_size: the JPEGs' ``(width, height)``.
        size: the output ``(width, height)``.
        clips: clips per batch (B).
        clip_len: frames per clip (T).
        batches: timed batches per round.
        warmup: untimed batches before the first round (after the pixel check's batch).
        rounds: timing rounds, alternating between the layouts; the median round counts.
        threads: DALI's CPU threads (default: all cores).
        distinct: distinct JPEGs, cycled.

    Returns:
        ``{"device", "clips", "clip_len", "frames_per_batch", "shape", "max_abs_diff", "equal",
        "samples_frames_per_s", "sequences_frames_per_s", "ratio", "samples_cpu_ms_per_frame",
        "sequences_cpu_ms_per_frame"}`` (ratio: samples / sequences frames/s; CPU: this process's, all
        of DALI's threads, median round).
    """
    from dali_backend.errors import ConfigError

    for name, value in (("clips", clips), ("clip_len", clip_len), ("batches", batches), ("rounds", rounds),
                        ("distinct", distinct)):
        if int(value) < 1:
            raise ConfigError(f"clip_layout: {name}={value}; must be at least 1")
    if warmup < 0:
        raise ConfigError(f"clip_layout: warmup={warmup}; must be 0 or more batches")
    if device not in ("cpu", "gpu"):
        raise ConfigError(f"clip_layout: device={device!r}; use 'cpu' or 'gpu'")
    threads = threads or os.cpu_count() or 1
    feed = ClipFeed(encoded_frames(distinct, source_size), clips, clip_len)
    pipes = {layout: build(layout, device, feed, size, threads) for layout in LAYOUTS}
    first = {layout: as_clips(p.run()[0], layout, clips, clip_len) for layout, p in pipes.items()}
    a, b = first["samples"].astype(np.int16), first["sequences"].astype(np.int16)
    diff = int(np.abs(a - b).max()) if a.shape == b.shape else None
    for p in pipes.values():
        for _ in range(warmup):
            p.run()
    seconds: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    cpu: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for _ in range(rounds):
        for layout, p in pipes.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(batches):
                out = p.run()
            if device == "gpu":
                out[0].as_cpu()  # the last batch is done on the GPU (the stream runs in order)
            seconds[layout].append(time.perf_counter() - t0)
            cpu[layout].append(time.process_time() - c0)
    frames = clips * clip_len * batches
    rate = {layout: frames / statistics.median(s) for layout, s in seconds.items()}
    cpu_ms = {layout: 1000 * statistics.median(c) / frames for layout, c in cpu.items()}
    del pipes
    return {"device": device, "clips": clips, "clip_len": clip_len, "frames_per_batch": clips * clip_len,
            "shape": list(first["samples"].shape), "max_abs_diff": diff, "equal": diff == 0,
            "samples_frames_per_s": rate["samples"], "sequences_frames_per_s": rate["sequences"],
            "ratio": rate["samples"] / rate["sequences"], "samples_cpu_ms_per_frame": cpu_ms["samples"],
            "sequences_cpu_ms_per_frame": cpu_ms["sequences"]}


def main(argv: list[str] | None = None) -> int:
    """Both layouts on the CPU (and the GPU when present); 0 when their pixels agree, 1 otherwise."""
    from dali_backend.cli.cliargs import positive_int, size_wxh
    from dali_backend.dali.devices import cuda_device_count

    p = argparse.ArgumentParser(prog="python -m bench.clip_layout",
                                description="Clips on DALI as B*T samples or as B sequences (FHWC): same pixels? "
                                            "which is faster?")
    p.add_argument("--source-size", type=size_wxh, default=(640, 480), help="JPEG size WxH (default 640x480)")
    p.add_argument("--size", type=size_wxh, default=(224, 224), help="output size WxH (default 224x224)")
    p.add_argument("--clips", type=positive_int, default=8, help="clips per batch, B (default 8)")
    p.add_argument("--clip-len", type=positive_int, default=8, help="frames per clip, T (default 8)")
    p.add_argument("--batches", type=positive_int, default=8, help="timed batches per round (default 8)")
    p.add_argument("--rounds", type=positive_int, default=3, help="timing rounds, layouts alternating (default 3)")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches first (default 2)")
    p.add_argument("--threads", type=positive_int, default=os.cpu_count() or 1, help="DALI threads (default: all cores)")
    p.add_argument("--devices", nargs="+", choices=("cpu", "gpu"), default=["cpu", "gpu"],
                   help="DALI's CPU operators, and the mixed decoder with GPU operators (default both; gpu is skipped "
                        "without a GPU)")
    args = p.parse_args(argv)
    if args.warmup < 0:
        p.error(f"--warmup {args.warmup}: must be 0 or more batches")
    devices = list(dict.fromkeys(args.devices))
    if "gpu" in devices and cuda_device_count() == 0:
        print("clip_layout: skipping gpu: no CUDA GPU on this machine (torch.cuda.device_count() == 0)")
        devices.remove("gpu")
    if not devices:
        return 2
    (sw, sh), (ow, oh) = args.source_size, args.size
    print(f"clips of {args.clip_len} frames, {args.clips} per batch ({args.clips * args.clip_len} frames), {sw}x{sh} "
          f"JPEG -> {ow}x{oh}, resize + flip + rotate + brightness/contrast, {args.threads} threads; "
          f"{args.rounds} rounds of {args.batches} batches (median)")
    ok = True
    for device in devices:
        r = compare(device, args.source_size, args.size, args.clips, args.clip_len, args.batches, args.warmup,
                    args.rounds, args.threads)
        ok = ok and r["equal"]
        print(f"  {device}: B*T samples {r['samples_frames_per_s']:.1f} frames/s ({r['samples_cpu_ms_per_frame']:.2f} "
              f"CPU ms/frame), sequences (FHWC) {r['sequences_frames_per_s']:.1f} frames/s "
              f"({r['sequences_cpu_ms_per_frame']:.2f} CPU ms/frame), samples / sequences {r['ratio']:.2f}x; "
              f"identical pixels: {r['equal']} (max |diff| {r['max_abs_diff']})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
