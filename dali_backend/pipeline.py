"""The DALI graph of the contract: one graph, two placements.

``device="gpu"``: nvJPEG decoding (``decoders.image``, device ``mixed``) and every following operator
on the GPU. ``device="cpu"``: the same operators on the CPU with ``device_id=None`` (how CI tests the
graph). Per-draw parameters arrive from the external source as per-sample operator arguments, so DALI
itself draws no random numbers. This module imports ``nvidia.dali``; only the loader imports it, and
only when a DALI pipeline is built.
"""

from __future__ import annotations

from typing import Literal

from .augment import AugmentSpec
from .errors import MissingDependencyError
from .schedule import DrawSource

DALI_INSTALL_HINT = ("pip install nvidia-dali-cuda120 (CUDA 12 drivers) or nvidia-dali-cuda130 (CUDA 13); "
                     "or use backend='torch' for the CPU fallback")


def import_dali():
    """Import DALI or raise :class:`MissingDependencyError` with the install command."""
    try:
        import nvidia.dali as dali  # noqa: F401
        import nvidia.dali.fn  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError(f"NVIDIA DALI is not importable ({e}); install it: {DALI_INSTALL_HINT}") from e
    return dali


def build_pipeline(spec: AugmentSpec, source: DrawSource, batch_size: int, *, device: Literal["cpu", "gpu"],
                   device_id: int | None, num_threads: int, py_num_workers: int, py_start_method: str = "fork",
                   prefetch_queue_depth: int = 2, hw_decoder_load: float = 0.65, seed: int = 0):
    """Build (not yet run) the pipeline for ``spec``; outputs ``(images uint8 [B, C, H, W], labels, slots)``."""
    dali = import_dali()
    from nvidia.dali import fn, types

    gpu = device == "gpu"

    @dali.pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id if gpu else None,
                       py_num_workers=py_num_workers, py_start_method=py_start_method,
                       prefetch_queue_depth=prefetch_queue_depth, seed=seed, exec_dynamic=True)
    def graph():
        n_params = int(spec.rotates) + 2 * int(spec.jitters)
        jpegs, labels, slots, *params = fn.external_source(
            source=source, num_outputs=3 + n_params, batch=False, parallel=True,
            dtype=[types.UINT8, types.INT64, types.INT64] + [types.FLOAT] * n_params)
        decode_args = {"hw_decoder_load": hw_decoder_load} if gpu else {}
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu",
                                   output_type=types.GRAY if spec.color == "gray" else types.RGB, **decode_args)
        if spec.clahe is not None:
            tiles_x, tiles_y = spec.clahe.tiles
            images = fn.clahe(images, tiles_x=tiles_x, tiles_y=tiles_y, clip_limit=float(spec.clahe.clip_limit),
                              luma_only=False)
        if spec.fit == "letterbox":
            import nvidia.dali.math as dmath

            shape = fn.peek_image_shape(jpegs, dtype=types.FLOAT)  # after EXIF orientation, like the decoder
            h, w = shape[0], shape[1]
            s = dmath.min(float(spec.width) / w, float(spec.height) / h)
            new_h = dmath.max(dmath.floor(h * s + 0.5), 1.0)
            new_w = dmath.max(dmath.floor(w * s + 0.5), 1.0)
            images = fn.resize(images, resize_x=new_w, resize_y=new_h, antialias=True, interp_type=types.INTERP_LINEAR)
            images = fn.crop(images, crop_h=spec.height, crop_w=spec.width, out_of_bounds_policy="pad", fill_values=0)
        else:
            images = fn.resize(images, resize_x=spec.width, resize_y=spec.height, antialias=True,
                               interp_type=types.INTERP_LINEAR)
        if spec.rotates:
            images = fn.rotate(images, angle=params[0], keep_size=True, fill_value=0, interp_type=types.INTERP_LINEAR)
        if spec.jitters:
            brightness, contrast = params[-2:]
            images = fn.brightness_contrast(images, brightness=brightness, contrast=contrast, contrast_center=128.0)
        images = fn.transpose(images, perm=[2, 0, 1])
        return images, labels, slots

    return graph()
