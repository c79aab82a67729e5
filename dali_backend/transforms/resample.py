"""The Resize operation's reference CPU kernel: DALI 2.4's CPU ``fn.resize`` (linear, antialias) to the bit.

Part of the contract (the operation's meaning, executed by the fallback and checked against DALI):
:class:`~dali_backend.transforms.Resize` and ``RandomResizedCrop`` call :func:`resize` in their
``apply``. Imported lazily by them (it needs OpenCV and torch's sparse matrices), so importing the
contract stays light.
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import NamedTuple

import cv2
import numpy as np
import torch
from numpy.typing import NDArray

from ..errors import ConfigError

Image = NDArray[np.uint8] | NDArray[np.uint16]  # HxW (gray) or HxWxC, 8 or 16 bits per value


def owned(img: Image) -> Image:
    """``img`` with positive strides: ``np.ascontiguousarray`` keeps a negative stride on an axis of
    length 1 (a flipped 1-pixel-wide image), which torch and OpenCV refuse."""
    return img.copy() if any(st < 0 for st in img.strides) else img


# DALI 2.4's CPU ``fn.resize`` (linear, antialias), read from its kernels
# (dali/kernels/imgproc/resample/{resampling_filters.cu, resampling_impl_cpu.{h,cc}, resampling_setup.cc,
# separable_cpu.h}, dali/kernels/common/simd.h) and reproduced to the bit:
#
# * filter: a 3-entry table [0, 1, 0] read with linear interpolation, stretched to ``max(1, 2 r)``
#   source pixels (``r = in / out`` when shrinking with antialias, else 1); ``f(t) = t`` on [0, 1) and
#   ``1 - (t - 1)`` on [1, 2), all in float32; taps from ``ceil(x * scale + 0.5 scale - 0.5 - anchor)``,
#   each row of weights divided by its float32 sum;
# * each pass: ``acc = 0; acc += w_k * src[clamp(i + k)]`` for k = 0, 1, ... in float32, a product and
#   an add each rounded (SSE ``mulps``/``addps``, no FMA), taps clamped to the edge kept apart;
# * the intermediate image stays float32; the axis done first is the cheaper one by DALI's cost model
#   (:func:`pass_order`), which changes the last bits;
# * the last pass converts to uint8 rounding half to EVEN where its SSE loop stores (``cvtps2dq``:
#   16 outputs at a time) and half AWAY from zero (``std::round``) in its scalar tails, so an exact
#   tie x.5 rounds by position (:func:`_scalar_tail`); to uint16 the same, its SSE loop storing 8 outputs
#   at a time (16 bytes: measured against DALI's operator, tests/transforms/test_resize16.py).
#
# :func:`resize_exact` is that arithmetic in plain numpy (slow); :func:`resize_passes` the same on gathered
# rows (fast when the taps are few). :func:`resize` otherwise gets the same bits fast:
# two sparse matrix products (any summation order, FMA or not) give every output within a proven bound
# of DALI's value, and only the outputs that close to a rounding boundary (x.5) are recomputed with
# DALI's arithmetic.

_F32 = np.float32


class _Axis(NamedTuple):
    """One axis of DALI's resampling: taps per output, first tap (unclamped), clamped indices, weights."""

    support: int
    first: NDArray[np.int64]   # [out]
    idx: NDArray[np.int64]     # [out, support], clamped to the image (DALI replicates the edge)
    w: NDArray[np.float32]     # [out, support]
    bits: int                  # every weight is a multiple of 2**-bits (25: none up to 24)


def _filter(in_size: int, out_size: int, antialias: bool = True) -> tuple[int, np.float32, np.float32]:
    """``(support, scale, anchor)`` of DALI's triangular filter (``ResamplingFilters::Triangular``)."""
    radius = _F32(_F32(in_size) / _F32(out_size)) if antialias and out_size < in_size else _F32(1.0)
    length = max(_F32(1.0), _F32(_F32(2.0) * radius))      # rescale(max(1, 2 r))
    scale = _F32(_F32(2.0) / length)                         # (num_coeffs - 1) / support
    anchor = _F32(_F32(1.0) / scale)                         # anchor * old_scale / scale
    support = math.ceil(_F32(_F32(2.0) / scale))
    if support > 8192:  # kMaxGPUFilterSupport (resampling_setup.cc), on the CPU too: rescale(8192)
        scale, anchor = _F32(_F32(2.0) / _F32(8192.0)), _F32(_F32(anchor * scale) / _F32(_F32(2.0) / _F32(8192.0)))
        support = math.ceil(_F32(_F32(2.0) / scale))
    return support, scale, anchor


def _triangle(t: NDArray[np.float32]) -> NDArray[np.float32]:
    """DALI's table lookup ``f0 + d * (f1 - f0)`` on [0, 1, 0]: t on [0, 1), 1 - (t - 1) on [1, 2), else 0."""
    x0 = np.floor(t)
    d = (t - x0).astype(np.float32)
    rising = (x0 == 0) & (t > -1)
    falling = x0 == 1
    return np.where(rising, d, np.where(falling, _F32(1.0) - d, _F32(0.0))).astype(np.float32)


@lru_cache(maxsize=128)
def _axis(in_size: int, out_size: int, antialias: bool = True) -> _Axis:
    support, fscale, anchor = _filter(in_size, out_size, antialias)
    scale = _F32(_F32(in_size) / _F32(out_size))
    origin = _F32(_F32(_F32(_F32(0.5) * scale) - _F32(0.5)) - anchor)
    sx0f = (np.arange(out_size, dtype=np.float32) * scale + origin).astype(np.float32)
    first = np.ceil(sx0f).astype(np.int64)
    f0 = (first.astype(np.float32) - sx0f).astype(np.float32)
    t = ((f0[:, None] + np.arange(support, dtype=np.float32)[None, :]).astype(np.float32) * fscale).astype(np.float32)
    w = _triangle(t)
    total = np.add.accumulate(w, axis=1)[:, -1]              # float32, in tap order, as DALI sums
    w = np.where(total[:, None] != 0, w / np.where(total != 0, total, 1)[:, None], w).astype(np.float32)
    idx = np.clip(first[:, None] + np.arange(support)[None, :], 0, in_size - 1)
    # fraction bits of the weights: w = m * 2**e with m = M / 2**24, M an integer whose trailing zeros
    # are not needed
    m, e = np.frexp(w[w != 0])
    mant = (m * 2.0 ** 24).astype(np.int64)
    bits = int(np.max(24 - e - np.log2(mant & -mant).astype(np.int64), initial=0))
    for a in (first, idx, w):
        a.flags.writeable = False
    return _Axis(support, first, idx, w, bits)


def resample_weights(in_size: int, out_size: int, antialias: bool = True) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """Source indices (clamped to the image: DALI replicates the edge) and DALI's float32 weights, one
    row of ``support`` taps per output pixel (zero weights and repeated edge indices included)."""
    a = _axis(in_size, out_size, antialias)
    return a.idx, a.w


@lru_cache(maxsize=256)
def pass_order(in_hw: tuple[int, int], out_hw: tuple[int, int], antialias: bool = True) -> str:
    """The axis DALI resamples first: ``"x"`` (horizontal, then vertical) or ``"y"``.

    DALI's ``ProcessingOrderCalculator``: each pass costs ``(m * support + 3) * volume of its output``
    with ``m`` 1.4 for the horizontal pass and 1.0 for the vertical one, in float32; the cheaper order
    wins, ``x`` first on a tie."""
    (h, w), (oh, ow) = in_hw, out_hw
    sx, sy = _filter(w, ow, antialias)[0], _filter(h, oh, antialias)[0]

    def cost(mul: float, support: int, vol: int):
        return _F32(_F32(_F32(mul) * _F32(support * vol)) + _F32(_F32(vol) * _F32(3.0)))

    x_first = _F32(cost(1.4, sx, ow * h) + cost(1.0, sy, ow * oh))
    y_first = _F32(cost(1.0, sy, w * oh) + cost(1.4, sx, ow * oh))
    return "y" if y_first < x_first else "x"


def _block(dtype) -> int:
    """Outputs DALI's SSE loop stores at a time: 16 bytes, so 16 uint8 or 8 uint16 values."""
    return 16 // np.dtype(dtype).itemsize


@lru_cache(maxsize=128)
def _horizontal_tails(in_size: int, out_size: int, antialias: bool = True, block: int = 16) -> NDArray[np.bool_]:
    """Output columns a last horizontal pass computes in its scalar code (``std::round``): DALI splits
    each row at the first and last columns whose taps need no clamping and runs its SSE loop over
    ``block`` columns at a time (:func:`_block`) from the start of each part; the rest of each part is scalar."""
    a = _axis(in_size, out_size, antialias)
    first_regular = int(np.argmax(a.first >= 0)) if (a.first >= 0).any() else out_size
    regular_end = a.first + a.support <= in_size
    last_regular = int(out_size - 1 - np.argmax(regular_end[::-1])) if regular_end.any() else -1
    tails = np.zeros(out_size, bool)
    x = 0
    for end in (min(first_regular, last_regular + 1), first_regular, last_regular + 1, out_size):
        if end > x:
            x += (end - x) // block * block
            tails[x:end] = True
            x = end
    tails.flags.writeable = False
    return tails


def _scalar_tail(order: str, width: int, channels: int, x: NDArray[np.int64], c: NDArray[np.int64],
                 in_width: int, antialias: bool, block: int = 16) -> NDArray[np.bool_]:
    """Whether output (x, c) is rounded by DALI's scalar code (half away) rather than SSE (half even).

    The last pass is the other axis than :func:`pass_order`'s. Vertical: each row is one flat run of
    ``width * channels`` values, SSE over ``block`` at a time (:func:`_block`), the last
    ``(width * channels) % block`` scalar."""
    if order == "x":
        flat = width * channels
        return x * channels + c >= flat - flat % block
    return _horizontal_tails(in_width, width, antialias, block)[x]


def _round_dali(v: NDArray[np.float32], scalar: NDArray[np.bool_], dtype=np.uint8) -> Image:
    """``dtype`` (uint8 or uint16) as DALI converts: half to even (SSE) or, where ``scalar``, half away
    from zero (exact: float64)."""
    r = np.where(scalar, np.floor(v.astype(np.float64) + 0.5), np.rint(v))
    return np.clip(r, 0, np.iinfo(dtype).max).astype(dtype)


def running_sum(values: NDArray, w: NDArray[np.float32]) -> NDArray[np.float32]:
    """``sum_k w[..., k] * values[..., k]`` over the last axis, each product and each add rounded to
    float32, k in order (DALI's loop)."""
    products = values * w                   # uint8, uint16 or float32 times float32: float32
    acc = products[..., 0].copy()
    for k in range(1, products.shape[-1]):  # a running sum: each add rounded, in order (what
        acc += products[..., k]             # np.add.accumulate does, without its per-row inner loops)
    return acc


def _as_hwc(img: Image) -> Image:
    return img if img.ndim == 3 else img[:, :, None]


def resize_exact(img: Image, height: int, width: int, antialias: bool = True) -> Image:
    """DALI's ``fn.resize`` (CPU, linear, ``antialias``) in plain numpy, bit for bit: the reference for
    :func:`resize` (slow: use that)."""
    src = _as_hwc(img)
    h0, w0, channels = src.shape
    ay, ax = _axis(h0, height, antialias), _axis(w0, width, antialias)
    order = pass_order((h0, w0), (height, width), antialias)
    cur = src
    for axis in (order, "y" if order == "x" else "x"):
        a, dim = (ax, 1) if axis == "x" else (ay, 0)
        shape = [1, 1, 1]
        shape[dim] = a.idx.shape[0]
        acc = None
        for k in range(a.support):
            term = (np.take(cur, a.idx[:, k], axis=dim) * a.w[:, k].reshape(shape)).astype(np.float32)
            acc = term if acc is None else (acc + term).astype(np.float32)
        cur = acc
    x = np.arange(width)[None, :, None]
    c = np.arange(channels)[None, None, :]
    tail = _scalar_tail(order, width, channels, x, c, w0, antialias, _block(img.dtype))
    out = _round_dali(cur, np.broadcast_to(tail, cur.shape), img.dtype)
    return out.reshape((height, width) + img.shape[2:])


def _exact_at(src: Image, ys, xs, cs, height: int, width: int, antialias: bool) -> Image:
    """DALI's output (``src``'s dtype) at the pixels (ys, xs, cs) of ``src`` (HxWxC, contiguous) resized to height x
    width, computed alone: the intermediate values each needs, then its final sum, in DALI's order."""
    h0, w0, channels = src.shape
    ay, ax = _axis(h0, height, antialias), _axis(w0, width, antialias)
    order = pass_order((h0, w0), (height, width), antialias)
    ry, wy = ay.idx[ys] * (w0 * channels), ay.w[ys]       # [K, Sy] (row offsets)
    rx, wx = ax.idx[xs] * channels + cs[:, None], ax.w[xs]  # [K, Sx] (column offsets)
    flat = src.reshape(-1)
    if order == "x":   # horizontal first: intermediate at (row ry[k], column x), then down the rows
        inter = running_sum(flat[ry[:, :, None] + rx[:, None, :]], wx[:, None, :])      # [K, Sy]
        v = running_sum(inter, wy)
    else:              # vertical first: intermediate at (row y, column rx[j]), then along the row
        inter = running_sum(flat[ry[:, None, :] + rx[:, :, None]], wy[:, None, :])      # [K, Sx]
        v = running_sum(inter, wx)
    return _round_dali(v, _scalar_tail(order, width, channels, xs, cs, w0, antialias, _block(src.dtype)), src.dtype)


@lru_cache(maxsize=64)
def resample_matrix(in_size: int, out_size: int, antialias: bool = True) -> torch.Tensor:
    """:func:`resample_weights` as a sparse ``out_size x in_size`` CSR matrix (float32).

    Taps clamped to the same edge pixel are added up (``w0 * p + w1 * p == (w0 + w1) * p`` within float
    rounding: :func:`resize` allows for it), zero weights are dropped. Built without sorting (the taps
    are already in row-major order): ~0.1 ms for a new size, which crops of random size pay per image.
    """
    idx, w = resample_weights(in_size, out_size, antialias)
    keys = (np.arange(out_size, dtype=np.int64)[:, None] * in_size + idx).ravel()  # non-decreasing
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])                    # first tap of each column
    keys, vals = keys[starts], np.add.reduceat(w.ravel(), starts)
    keep = vals != 0
    keys, vals = keys[keep], vals[keep]
    crow = np.zeros(out_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // in_size, minlength=out_size), out=crow[1:])
    return torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(keys % in_size),
                                   torch.from_numpy(vals.astype(np.float32)), size=(out_size, in_size))


with warnings.catch_warnings():  # torch warns once per process that sparse CSR tensors are in beta: take
    warnings.simplefilter("ignore", UserWarning)  # that warning here (mm is all we use of them)
    torch.sparse_csr_tensor(torch.tensor([0, 0]), torch.tensor([], dtype=torch.int64), torch.tensor([]), size=(1, 1))


def _transpose(a: NDArray) -> NDArray:
    """Swap the first two axes of an HxW or HxWxC array into a new contiguous array (OpenCV's blocked
    transpose is 2-4x faster than numpy's copy)."""
    if a.ndim == 2 or a.shape[2] in (1, 2, 3, 4):
        out = cv2.transpose(a if a.ndim == 2 or a.shape[2] > 1 else a[:, :, 0])
        return out.reshape((a.shape[1], a.shape[0]) + a.shape[2:])
    return np.ascontiguousarray(a.swapaxes(0, 1))


PASSES_MAX_TAPS = 6
"""Taps per output (both axes) up to which :func:`resize` runs :func:`resize_passes` (DALI's own arithmetic,
no margin check) rather than its sparse products: e.g. 320x240 -> 256x256 (3 + 2 taps) and enlargements;
640x480 -> 256 (5 + 4) was slower that way (0.80 against 0.69 ms, CLAHE'd JPEGs, loaded machine)."""


def _rows(a: _Axis, cur: NDArray) -> NDArray[np.float32]:
    """One of DALI's passes along the first axis of ``cur`` (``[n, m]``): ``[out, m]`` float32, ``sum_k
    w[:, k] * cur[idx[:, k]]`` with each product and each add rounded, k in order (whole rows gathered)."""
    acc = cur[a.idx[:, 0]] * a.w[:, 0, None]
    for k in range(1, a.support):
        acc += cur[a.idx[:, k]] * a.w[:, k, None]
    return acc


def resize_passes(img: Image, height: int, width: int, antialias: bool = True) -> Image:
    """:func:`resize_exact`'s values computed on contiguous rows: each pass gathers whole rows (the
    horizontal one on the transposed image), in DALI's pass order and order of operations, so every
    float32 value is DALI's and only its rounding rule (by position) is applied; no margin check. The
    cheaper kernel when the taps are few (:func:`resize` chooses): 0.22 against 0.36 ms at 320x240 -> 256,
    0.58 against 0.77 at 640x480, 5.8 against 4.3 at 2048x1536 (loaded 2-core machine, one thread)."""
    src = _as_hwc(np.ascontiguousarray(owned(img)))
    h0, w0, channels = src.shape
    ay, ax = _axis(h0, height, antialias), _axis(w0, width, antialias)
    order = pass_order((h0, w0), (height, width), antialias)
    if order == "x":  # horizontal first (on the transposed image), then vertical: upright at the end
        mid = _rows(ax, _transpose(src).reshape(w0, h0 * channels)).reshape(width, h0, channels)
        v = _rows(ay, _transpose(mid).reshape(h0, width * channels)).reshape(height, width, channels)
    else:
        mid = _rows(ay, src.reshape(h0, w0 * channels)).reshape(height, w0, channels)
        v = _transpose(_rows(ax, _transpose(mid).reshape(w0, height * channels)).reshape(width, height, channels))
    tail = np.broadcast_to(_scalar_tail(order, width, channels, np.arange(width)[:, None], np.arange(channels)[None, :],
                                        w0, antialias, _block(img.dtype)), (width, channels))
    out = np.rint(v)
    xs, cs = np.nonzero(tail)
    if xs.size:  # DALI's scalar code: half away from zero
        out[:, xs, cs] = np.floor(v[:, xs, cs].astype(np.float64) + 0.5)
    out = np.clip(out, 0, np.iinfo(img.dtype).max, out=out).astype(img.dtype)
    return out.reshape((height, width) + img.shape[2:])


def resize(img: Image, height: int, width: int, antialias: bool = True) -> Image:
    """DALI's ``fn.resize`` (CPU operator, linear, ``antialias``), bit for bit (see the notes above).

    Few taps (at most :data:`PASSES_MAX_TAPS` over both axes: mild shrinks, enlargements): DALI's own
    arithmetic on gathered rows (:func:`resize_passes`). Otherwise the two separable passes as sparse
    matrix products (:func:`resample_matrix`), rows
    first on the float image, then columns on its transpose, so both run along contiguous memory.
    Their sums may be in any order and use FMA; each value ``v`` then differs from DALI's by at most
    ``255 * (n_y + n_x + 4) * 2**-23`` levels (``n`` the taps per axis: both are float32 sums of
    nonnegative products whose weights sum to 1, each within ``255 * (n + 1) * 2**-24`` of the same
    real sum, plus one rounding of a merged edge weight), so rounding ``v`` half up gives DALI's level
    wherever ``v`` is farther than that from a tie x.5 (twice the bound is used). The few outputs that
    close (about 0.2% when shrinking) are recomputed with DALI's own order of operations and
    rounding rule (:func:`_exact_at`). When every weight is a multiple of ``2**-b`` with ``b_y + b_x
    <= 15`` (2x and 4x enlargements, halving, one axis unchanged) every sum is exact in float32 in
    any order: only the tie rule is applied, by position.

    16 bits (uint16 in, uint16 out, as DALI's operator keeps its input's type): the same arithmetic
    with 65535 for 255 in the bounds (257 times the margin: larger shrinks take :func:`resize_exact`)
    and ``b_y + b_x <= 7`` for the exact shortcut (a 16-bit value times both weights within float32's 24 bits).
    """
    if img.dtype not in (np.uint8, np.uint16):
        raise ConfigError(f"resize: got a {img.dtype} image; the resize kernel takes uint8 or uint16 images (DALI's "
                          "fn.resize is reproduced for those): resize before converting to float")
    dtype = img.dtype.type
    scale16 = 1 if dtype is np.uint8 else 257  # 65535 / 255: the bounds grow with the largest value
    h0, w0 = img.shape[:2]
    if (h0, w0) == (height, width):
        return img.copy()
    shape = img.shape[2:]
    channels = math.prod(shape)
    img = np.ascontiguousarray(owned(img))
    ay, ax = _axis(h0, height, antialias), _axis(w0, width, antialias)
    if ay.support + ax.support <= PASSES_MAX_TAPS:
        return resize_passes(img, height, width, antialias)
    # the cheaper way round (measured costs: a multiply-add 1, transposing a float 4.4, a byte 3.3 or
    # 2.7): columns first on the transposed image, which leaves the result upright, or rows first
    cols_first = (3.3 * h0 * w0 + (ax.support + 4.4) * width * h0 + ay.support * height * width
                  < (ay.support + 4.4) * height * w0 + (ax.support + 2.7) * width * height)
    with torch.no_grad():
        if cols_first:
            src = _transpose(img).reshape(w0, h0 * channels).astype(np.float32)
            first = torch.mm(resample_matrix(w0, width, antialias), torch.from_numpy(src)).numpy()
            mid = _transpose(first.reshape((width, h0) + shape)).reshape(h0, width * channels)
            out = torch.mm(resample_matrix(h0, height, antialias), torch.from_numpy(mid)).numpy()
        else:
            src = img.reshape(h0, w0 * channels).astype(np.float32)
            first = torch.mm(resample_matrix(h0, height, antialias), torch.from_numpy(src)).numpy()
            mid = _transpose(first.reshape((height, w0) + shape)).reshape(w0, height * channels)
            out = torch.mm(resample_matrix(w0, width, antialias), torch.from_numpy(mid)).numpy()
    # out: [height, width * C] (cols_first) or [width, height * C]
    planes = out.reshape((height, width, channels) if cols_first else (width, height, channels))

    def upright(res: Image) -> Image:
        res = res.reshape((height, width) + shape if cols_first else (width, height) + shape)
        return res if cols_first else _transpose(res)

    if ay.bits + ax.bits <= (15 if dtype is np.uint8 else 7):
        # every value is DALI's exactly: round half to even, then half away where DALI's code is scalar
        order = pass_order((h0, w0), (height, width), antialias)
        xs, cs = np.nonzero(np.broadcast_to(_scalar_tail(order, width, channels, np.arange(width)[:, None],
                                                         np.arange(channels)[None, :], w0, antialias, _block(dtype)),
                                             (width, channels)))
        at = (slice(None), xs, cs) if cols_first else (xs, slice(None), cs)
        tails = np.floor(planes[at].astype(np.float64) + 0.5)
        np.rint(out, out=out)
        planes[at] = tails
        return upright(out.astype(dtype))  # values in [0, max + 1e-4 max/255]: rounded within [0, max]
    # Values lie in [-1e-4, 255 + 1e-4] (weights >= 0 summing to 1; 257 times that at 16 bits), so
    # truncating v + 0.5 -/+ m to the integer type is floor(v + 0.5 -/+ m): the two agree (and are DALI's
    # level) unless v is within m of a tie. m: twice the bound above, plus 2**-14 (4 float32 steps at 255;
    # times 257 at 16 bits) for rounding v + 0.5 -/+ m itself.
    m = (255.0 * (ay.support + ax.support + 4) * 2.0 ** -22 + 2.0 ** -14) * scale16
    if m > 0.25:  # shrinking thousands of pixels into one: the margin would take every pixel
        return resize_exact(img, height, width, antialias)
    m = _F32(m)
    out += _F32(0.5) - m
    low = out.astype(dtype)
    out += _F32(2.0) * m
    res = out.astype(dtype)
    flat = np.flatnonzero(low != res)
    if flat.size * ay.support * ax.support > out.size * (ay.support + ax.support) * 4:
        return resize_exact(img, height, width, antialias)  # cheaper than pixel by pixel
    if flat.size:
        a, rest = np.divmod(flat, planes.shape[1] * channels)
        b, cs = np.divmod(rest, channels)
        ys, xs = (a, b) if cols_first else (b, a)
        res.ravel()[flat] = _exact_at(img.reshape(h0, w0, channels), ys, xs, cs, height, width, antialias)
    return upright(res)


