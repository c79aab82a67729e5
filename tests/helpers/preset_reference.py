"""The preset's reference semantics written out step by step (docs/concepts/contract.md, "AugmentSpec"), independently of the
operation classes the loaders run (except resize, the product's own kernel here: it is held separately to
resize_exact and to DALI): the oracle ``test_preset_through_ops_equals_the_reference_augment``
holds them to. Test code only: the library has one implementation of each step, the operation's."""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np
from numpy.typing import NDArray

from dali_backend.core.augment import AugmentSpec, AugParams
from dali_backend.transforms.resample import resize

Image = NDArray[np.uint8]


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


def letterbox(img: Image, spec: AugmentSpec) -> Image:
    """Resize keeping the aspect ratio (see :meth:`AugmentSpec.letterbox_size`), pad with 0, centred."""
    nh, nw = spec.letterbox_size(img.shape[0], img.shape[1])
    out = np.zeros((spec.height, spec.width) + img.shape[2:], dtype=np.uint8)
    top, left = (spec.height - nh + 1) // 2, (spec.width - nw + 1) // 2
    out[top:top + nh, left:left + nw] = resize(img, nh, nw)
    return out


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


def augment(decoded: Image, spec: AugmentSpec, params: AugParams) -> NDArray[np.uint8]:
    """Steps 2-5 of the preset's reference semantics with the preset's three numbers (kept as the
    independent reference :func:`apply_spec` is tested against); returns uint8 ``[C, H, W]``."""
    img = clahe(decoded, spec)
    img = letterbox(img, spec) if spec.fit == "letterbox" else resize(img, spec.height, spec.width)
    img = rotate(img, params.angle)
    img = jitter(img, params.brightness, params.contrast)
    return img[None] if img.ndim == 2 else np.ascontiguousarray(img.transpose(2, 0, 1))
