"""CLAHE as OpenCV computes it, as a DALI graph fragment that runs the same on CPU and GPU operators.

The DALI fragment of :class:`~dali_backend.transforms.Clahe` (part of the contract, like every
operation's fragment): built only inside a pipeline definition, so ``nvidia.dali`` is imported in
these functions, never with this module.
"""

from __future__ import annotations

import math


def _static(*values) -> bool:
    """Whether every value is a Python int (a size known when the graph is defined)."""
    return all(isinstance(v, int) for v in values)


def _min(a, b):
    """``min`` of two sizes: Python's when both are known ints, else DALI's per-sample ``math.min``
    (DALI refuses ``math.min`` of constants only: "expects from 1 to 64 inputs, but received 0")."""
    import nvidia.dali.math as dmath

    return min(a, b) if _static(a, b) else dmath.min(a, b)


def _max(a, b):
    """``max`` of two sizes, as :func:`_min`."""
    import nvidia.dali.math as dmath

    return max(a, b) if _static(a, b) else dmath.max(a, b)


def _reflect101_extend(images, n, pad, tiles: int, axis: int):
    """``images`` extended by ``pad`` rows (``axis=0``) or columns (``axis=1``) after its end, mirrored
    without repeating the edge (OpenCV's ``BORDER_REFLECT_101``; a single row or column is repeated).

    ``n`` is the per-sample length along ``axis`` and ``pad`` the per-sample count, ``1 <= pad <= tiles``:
    CPU scalar nodes, or Python ints after a fixed-size operation (then the arithmetic is Python's).
    Only a strip of the last ``tiles + 1`` rows is mirrored, repeatedly, so that images shorter than
    ``pad`` get OpenCV's periodic reflection; the image itself is copied once. Built from slices,
    flips and concatenation: the same graph runs on the CPU and the GPU.
    """
    from nvidia.dali import fn

    def cut(x, lo, hi):
        return x[lo:hi] if axis == 0 else x[:, lo:hi]

    r0 = _min(n, tiles + 1)
    strip, rows, need = cut(images, n - r0, n), r0, r0 + pad
    for _ in range(max(1, math.ceil(math.log2(tiles))) + 1):  # enough doublings for a 1-pixel image
        edge = _min(rows - 1, 1)  # 1: reflect-101 skips the edge row; 0: a single row repeats
        step = _min(_max(rows - 1, 1), _max(need - rows, 1))
        piece = cut(strip, rows - edge - step, rows - edge)
        piece = fn.flip(piece, vertical=1, horizontal=0) if axis == 0 else fn.flip(piece, horizontal=1, vertical=0)
        strip, rows = fn.cat(strip, piece, axis=axis), rows + step
    return fn.cat(images, cut(strip, r0, need), axis=axis)


def clahe_like_opencv(images, h, w, tiles: tuple[int, int], clip_limit: float, channels: int,
                      portable: bool | None = None):
    """OpenCV's CLAHE (``cv2.createCLAHE(clip_limit, tiles).apply``, per channel for RGB) as a DALI graph.

    Two differences of DALI's GPU operator are removed here by a graph that gives OpenCV's result
    on either device (``portable``; the default on the GPU):

    * RGB: ``fn.clahe`` on the GPU accepts 3 channels only with ``luma_only=True``
      (``dali/operators/image/clahe/clahe_op.cc``); each channel is equalised on its own instead.
    * Sizes that are not multiples of the tile counts: OpenCV pads the image at the bottom and right
      with reflect-101 to whole tiles (``tiles_y - h % tiles_y`` rows and ``tiles_x - w % tiles_x``
      columns, both sides as soon as either is uneven) and interpolates the padded image's tables;
      DALI's CUDA kernel (``clahe_op.cu``) instead sizes tiles by ceiling division and leaves trailing
      tiles empty. Padding exactly as OpenCV does, equalising, and cropping back gives OpenCV's
      result from either kernel (a conditional: images of whole tiles take the plain branch).

    ``h`` and ``w`` are the decoded size (CPU scalar nodes, e.g. from ``fn.peek_image_shape``).
    On CPU operators the default is ``fn.clahe`` as it is: DALI's CPU kernel runs OpenCV's own code,
    exact at every size and for 3 channels, and the split and conditional cost it 0.1-0.2 ms per
    640x480 image (measured). The tests run the portable graph on the CPU too (``portable=True``).
    """
    from nvidia.dali import fn

    tx, ty = tiles
    gpu = images.device == "gpu"
    if portable is None:
        portable = gpu
    if gpu and not portable:
        raise ValueError("clahe_like_opencv: portable=False is for CPU operators only (DALI's GPU kernel differs)")
    if not portable:
        return fn.clahe(images, tiles_x=tx, tiles_y=ty, clip_limit=clip_limit, luma_only=False)

    def equalise(x):
        if channels == 1:
            return fn.clahe(x, tiles_x=tx, tiles_y=ty, clip_limit=clip_limit, luma_only=False)
        planes = [fn.clahe(x[:, :, c:c + 1], tiles_x=tx, tiles_y=ty, clip_limit=clip_limit, luma_only=False)
                  for c in range(channels)]
        return fn.cat(*planes, axis=2)

    uneven = (h % ty != 0) | (w % tx != 0)
    if uneven:
        padded = _reflect101_extend(images, h, ty - h % ty, ty, axis=0)
        padded = _reflect101_extend(padded, w, tx - w % tx, tx, axis=1)
        out = equalise(padded)[0:h, 0:w]
    else:
        out = equalise(images)
    return out
