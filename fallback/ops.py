"""The reference operations on the CPU (OpenCV, numpy, torch), one function per step.

Each step reproduces what the DALI operator computes, so the two backends agree pixel for pixel:

* decode: ``cv2.imdecode`` (libjpeg-turbo, EXIF orientation applied), as DALI's CPU decoder;
* CLAHE: ``cv2.createCLAHE``, which DALI's ``fn.clahe`` matches exactly;
* resize: DALI's antialiased linear resampling, i.e. a triangle filter whose half-width is the
  scale factor when shrinking (1 when enlarging), normalised, with edge pixels *replicated* beyond the
  border (``torch``'s antialiased bilinear renormalises there instead), as two sparse matrix products;
* rotation: ``cv2.warpAffine`` about ``((w - 1) / 2, (h - 1) / 2)``, bilinear, fill 0;
* jitter: a 256-entry lookup table of ``b * (128 + c * (x - 128))`` rounded half up, clipped to [0, 255].
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import cv2
import numpy as np
import torch
from numpy.typing import NDArray

from dali_backend.augment import AugmentSpec, AugParams
from dali_backend.tensors import normalize  # noqa: F401  (re-exported: one normalisation for both backends)

Image = NDArray[np.uint8]  # HxW (gray) or HxWx3 (RGB)


def decode(data: NDArray[np.uint8] | bytes, color: str) -> Image | None:
    """Decode JPEG bytes to gray (HxW) or RGB (HxWx3) uint8; None when OpenCV refuses the data."""
    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    if color == "gray":
        return cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    return None if bgr is None else cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


@lru_cache(maxsize=8)
def _clahe(clip_limit: float, tiles: tuple[int, int]):
    return cv2.createCLAHE(clipLimit=clip_limit, tileGridSize=tiles)


def clahe(img: Image, spec: AugmentSpec) -> Image:
    """CLAHE at native resolution; RGB images are equalised channel by channel."""
    if spec.clahe is None:
        return img
    op = _clahe(float(spec.clahe.clip_limit), spec.clahe.tiles)
    if img.ndim == 2:
        return op.apply(img)
    return np.dstack([op.apply(np.ascontiguousarray(img[:, :, c])) for c in range(img.shape[2])])


# ----------------------------------------------------------------------------------------- resize
@lru_cache(maxsize=64)
def resample_weights(in_size: int, out_size: int) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """Source indices (clamped to the image: DALI replicates the edge) and normalised weights, one row
    per output pixel.

    The triangle filter of DALI's linear resampling: half-width ``s = in/out`` when shrinking (1 when
    enlarging), centred on ``(x + 0.5) * s - 0.5``, taps starting at the first source pixel at or after
    the left end, weights normalised to sum 1, all in float32 like DALI.
    """
    f32 = np.float32
    scale = f32(in_size / out_size)
    radius = max(f32(1.0), scale)
    support = max(f32(1.0), f32(2.0) * radius)
    fscale = f32(2.0) / support           # filter coordinates per source pixel
    anchor = support / f32(2.0)
    taps = math.ceil(f32(2.0) / fscale)
    start = f32(f32(0.5) * scale - f32(0.5) - anchor)
    x = np.arange(out_size, dtype=np.float32)
    sx0f = (x * scale + start).astype(np.float32)
    sx0 = np.ceil(sx0f).astype(np.int64)
    f0 = (sx0 - sx0f).astype(np.float32)
    t = ((f0[:, None] + np.arange(taps, dtype=np.float32)[None, :]) * fscale).astype(np.float32)
    w = np.clip(f32(1.0) - np.abs(t - f32(1.0)), 0.0, None).astype(np.float32)
    sums = w.sum(axis=1, keepdims=True)
    w = np.where(sums > 0, w / np.where(sums > 0, sums, 1), w).astype(np.float32)
    idx = np.clip(sx0[:, None] + np.arange(taps)[None, :], 0, in_size - 1)
    idx.flags.writeable = False
    w.flags.writeable = False
    return idx, w


def _resample_axis(a: NDArray[np.float32], idx: NDArray[np.int64], w: NDArray[np.float32], axis: int) -> NDArray[np.float32]:
    """Weighted gather along ``axis`` (0 rows, 1 columns) of a float image (HxW or HxWxC)."""
    shape = [1] * a.ndim
    shape[axis] = idx.shape[0]
    out = None
    for k in range(idx.shape[1]):
        term = np.take(a, idx[:, k], axis=axis) * w[:, k].reshape(shape)
        out = term if out is None else out + term
    return out


def resize_exact(img: Image, height: int, width: int) -> Image:
    """DALI-equivalent antialiased resize in plain numpy (slow; the reference for :func:`resize`)."""
    iy, wy = resample_weights(img.shape[0], height)
    ix, wx = resample_weights(img.shape[1], width)
    tmp = _resample_axis(img.astype(np.float32), iy, wy, 0)
    out = _resample_axis(tmp, ix, wx, 1)
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


@lru_cache(maxsize=64)
def resample_matrix(in_size: int, out_size: int) -> torch.Tensor:
    """:func:`resample_weights` as a sparse ``out_size x in_size`` CSR matrix (float32).

    Taps clamped to the same edge pixel are added up (``w0 * p + w1 * p == (w0 + w1) * p`` within float
    rounding), which is DALI's edge replication; zero weights are dropped. Built without sorting (the
    taps are already in row-major order): ~0.1 ms for a new size, which crops of random size pay per image.
    """
    idx, w = resample_weights(in_size, out_size)
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


def resize(img: Image, height: int, width: int) -> Image:
    """Antialiased resize equal to DALI's ``fn.resize`` (linear, antialias on) within float rounding.

    The two separable passes are sparse matrix products (:func:`resample_matrix`): rows first on the
    float image, then columns on its transpose, so both products run along contiguous memory. This is
    :func:`resize_exact`'s arithmetic in another summation order, 2-3x faster than torch's
    antialiased ``interpolate`` (which also renormalises at the border, where DALI replicates).
    """
    h0, w0 = img.shape[:2]
    if (h0, w0) == (height, width):
        return img.copy()
    shape = img.shape[2:]
    channels = math.prod(shape)
    src = torch.from_numpy(np.ascontiguousarray(_owned(img)).reshape(h0, w0 * channels).astype(np.float32))
    with torch.no_grad():
        rows = torch.mm(resample_matrix(h0, height), src).numpy()              # height x (w0 * C)
        cols = _transpose(rows.reshape((height, w0) + shape))                  # w0 x height (x C)
        out = torch.mm(resample_matrix(w0, width), torch.from_numpy(cols.reshape(w0, height * channels))).numpy()
    # round half up: the weights are >= 0 and sum to 1 (within float rounding), so every value lies in
    # [-1e-4, 255 + 1e-4] and truncating value + 0.5 is floor(value + 0.5), clipped (tested at 0 and 255)
    out += np.float32(0.5)
    return _transpose(out.astype(np.uint8).reshape((width, height) + shape))


def letterbox(img: Image, spec: AugmentSpec) -> Image:
    """Resize keeping the aspect ratio (see :meth:`AugmentSpec.letterbox_size`), pad with 0, centred."""
    nh, nw = spec.letterbox_size(img.shape[0], img.shape[1])
    out = np.zeros((spec.height, spec.width) + img.shape[2:], dtype=np.uint8)
    top, left = (spec.height - nh + 1) // 2, (spec.width - nw + 1) // 2
    out[top:top + nh, left:left + nw] = resize(img, nh, nw)
    return out


# ----------------------------------------------------------------------------------------- rotate, jitter
def rotate(img: Image, angle: float) -> Image:
    """Rotate ``angle`` degrees counter-clockwise about the centre; bilinear, fill 0, same size."""
    if angle == 0.0:
        return img
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), float(angle), 1.0)
    return cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def jitter_lut(brightness: float, contrast: float) -> NDArray[np.uint8]:
    """``b * (128 + c * (x - 128))`` for every x in 0..255, rounded half up and clipped to [0, 255].

    Evaluated the way DALI's ``brightness_contrast`` kernel does, in float32, rearranged as
    ``x * (b * c) + b * (128 - c * 128)``, so that ties (x.5) round the same way.
    """
    f32 = np.float32
    b = f32(f32(f32(brightness) * f32(255.0)) / f32(255.0))
    c = f32(contrast)
    addend = b * (f32(128.0) - c * f32(128.0))
    x = np.arange(256, dtype=np.float32)
    y = x * (b * c) + addend
    return np.clip(np.floor(y + f32(0.5)), 0, 255).astype(np.uint8)


def jitter(img: Image, brightness: float, contrast: float) -> Image:
    if brightness == 1.0 and contrast == 1.0:
        return img
    return cv2.LUT(img, jitter_lut(brightness, contrast))


# ----------------------------------------------------------------------------------------- composition
def apply_spec(decoded: Image, spec: AugmentSpec, params: list[dict]) -> NDArray[np.uint8]:
    """Every operation of ``spec.transforms`` with its drawn ``params`` (:meth:`AugmentSpec.make_params`);
    returns channel-first uint8 ``[C, H, W]`` (C = 1 or 3)."""
    img = decoded
    for op, p in zip(spec.transforms, params, strict=True):
        if not op.is_identity:
            img = _owned(op.apply(img, p))
    return img[None] if img.ndim == 2 else np.ascontiguousarray(img.transpose(2, 0, 1))


def _owned(img: Image) -> Image:
    """``img`` with positive strides: ``np.ascontiguousarray`` keeps a negative stride on an axis of
    length 1 (a flipped 1-pixel-wide image), which torch and OpenCV refuse."""
    return img.copy() if any(st < 0 for st in img.strides) else img


def augment(decoded: Image, spec: AugmentSpec, params: AugParams) -> NDArray[np.uint8]:
    """Steps 2-5 of the preset's reference semantics with the preset's three numbers (kept as the
    independent reference :func:`apply_spec` is tested against); returns uint8 ``[C, H, W]``."""
    img = clahe(decoded, spec)
    img = letterbox(img, spec) if spec.fit == "letterbox" else resize(img, spec.height, spec.width)
    img = rotate(img, params.angle)
    img = jitter(img, params.brightness, params.contrast)
    return img[None] if img.ndim == 2 else np.ascontiguousarray(img.transpose(2, 0, 1))
