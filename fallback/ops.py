"""The reference operations on the CPU (OpenCV, numpy, torch), one function per step.

Each step reproduces what the DALI operator computes, so the two backends agree pixel for pixel:

* decode: ``cv2.imdecode`` (libjpeg-turbo, EXIF orientation applied), as DALI's CPU decoder;
* CLAHE: ``cv2.createCLAHE``, which DALI's ``fn.clahe`` matches exactly;
* resize: DALI's CPU ``fn.resize`` (linear, antialias) bit for bit: a triangle filter whose half-width
  is the scale factor when shrinking (1 when enlarging), normalised, with edge pixels *replicated*
  beyond the border (``torch``'s antialiased bilinear renormalises there instead), DALI's float32
  arithmetic, pass order and tie rounding (see the notes above :func:`resize`);
* rotation: ``cv2.warpAffine`` about ``((w - 1) / 2, (h - 1) / 2)``, bilinear, fill 0;
* jitter: a 256-entry lookup table of ``b * (128 + c * (x - 128))`` rounded half up, clipped to [0, 255].
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np
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
# The kernel is the Resize operation's, in the contract (dali_backend/transforms/resample.py): re-exported.
from dali_backend.transforms.resample import (_axis, _owned, pass_order, resample_matrix,  # noqa: E402,F401
                                              resample_weights, resize, resize_exact)


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


def augment(decoded: Image, spec: AugmentSpec, params: AugParams) -> NDArray[np.uint8]:
    """Steps 2-5 of the preset's reference semantics with the preset's three numbers (kept as the
    independent reference :func:`apply_spec` is tested against); returns uint8 ``[C, H, W]``."""
    img = clahe(decoded, spec)
    img = letterbox(img, spec) if spec.fit == "letterbox" else resize(img, spec.height, spec.width)
    img = rotate(img, params.angle)
    img = jitter(img, params.brightness, params.contrast)
    return img[None] if img.ndim == 2 else np.ascontiguousarray(img.transpose(2, 0, 1))
