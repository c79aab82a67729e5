"""Cutting a pixel window out of an image, padding with ``fill`` where it leaves the image: the one
rule the crops and the letterbox use, on the CPU (:func:`crop`) and in DALI's graph (:func:`dali_slice`)."""

from __future__ import annotations

import numpy as np


def crop(img: np.ndarray, top: int, left: int, h: int, w: int, fill: float = 0) -> np.ndarray:
    """The ``h`` x ``w`` window at (``top``, ``left``); outside the image filled with ``fill``."""
    H, W = img.shape[:2]
    if 0 <= top and 0 <= left and top + h <= H and left + w <= W:
        return np.ascontiguousarray(img[top:top + h, left:left + w])
    out = np.full((h, w) + img.shape[2:], fill, dtype=img.dtype)
    y0, y1, x0, x1 = max(top, 0), min(top + h, H), max(left, 0), min(left + w, W)
    if y0 < y1 and x0 < x1:
        out[y0 - top:y1 - top, x0 - left:x1 - left] = img[y0:y1, x0:x1]
    return out


def dali_slice(images, start, shape, fill: float = 0.0):
    from nvidia.dali import fn

    return fn.slice(images, start=start, shape=shape, axis_names="HW", out_of_bounds_policy="pad",
                    fill_values=float(fill))
