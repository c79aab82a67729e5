"""A numpy model of DALI's GPU CLAHE for one channel: the test oracle for GPU behaviour on CPU machines.

Written from DALI's CUDA source, ``dali/operators/image/clahe/clahe_op.cu`` (NVIDIA/DALI, 2025):

* ``hist_per_tile_256_kernel``: tile size ``div_ceil(W, tiles_x)`` x ``div_ceil(H, tiles_y)``; tile
  ``(tx, ty)`` covers ``[tx * tile_w, min(x0 + tile_w, W))``; trailing tiles can be empty;
* ``clip_redistribute_cdf``: ``limit = max(int(clip * area / bins), 1)`` with the tile's real area
  (at least 1), excess spread evenly, the residual every ``max(bins / residual, 1)`` bins (OpenCV's
  rule), ``lut = uint8(clamp(cdf * (bins - 1) / area + 0.5))`` (rounds half up);
* ``get_tile_indices_and_weights`` + ``apply_lut_bilinear_gray_kernel``: ``g = x * tiles / W - 0.5``
  in float32, neighbours clamped to the tile grid with weight 0 at the borders, ``lrintf`` (ties to
  even).

Never checked against a GPU (none available when written); it is what the source says. OpenCV pads
to whole tiles instead, which is why ``clahe_like_opencv`` pads before calling DALI's operator.
"""

from __future__ import annotations

import numpy as np

f32 = np.float32


def dali_gpu_clahe(img: np.ndarray, tiles_x: int = 8, tiles_y: int = 8, clip_limit: float = 2.0) -> np.ndarray:
    """DALI's GPU CLAHE of a uint8 ``H x W`` image, as its CUDA kernels compute it."""
    bins = 256
    h, w = img.shape
    tw, th = -(-w // tiles_x), -(-h // tiles_y)
    luts = np.zeros((tiles_y, tiles_x, bins), np.uint8)
    for ty in range(tiles_y):
        for tx in range(tiles_x):
            x0, y0 = tx * tw, ty * th
            x1, y1 = min(x0 + tw, w), min(y0 + th, h)
            hist = np.zeros(bins, np.int64)
            if x1 > x0 and y1 > y0:
                hist = np.bincount(img[y0:y1, x0:x1].ravel(), minlength=bins).astype(np.int64)
            area = max(1, (x1 - x0) * (y1 - y0))
            limit = max(int(f32(clip_limit) * f32(area) / f32(bins)), 1)
            excess = int(np.maximum(hist - limit, 0).sum())
            hist = np.minimum(hist, limit) + excess // bins
            residual = excess % bins
            if residual:
                step = max(bins // residual, 1)
                for i in range(0, bins, step):
                    if residual == 0:
                        break
                    hist[i] += 1
                    residual -= 1
            cdf = np.cumsum(hist).astype(f32)
            luts[ty, tx] = np.clip(cdf * (f32(bins - 1) / f32(area)) + f32(0.5), 0, 255).astype(np.uint8)

    def axis(n: int, tiles: int):
        g = np.arange(n, dtype=f32) * (f32(tiles) / f32(n)) - f32(0.5)
        t = np.floor(g).astype(np.int64)
        frac = (g - t).astype(f32)
        low, high = np.clip(t, 0, tiles - 1), np.clip(t + 1, 0, tiles - 1)
        edge = (t < 0) | (t >= tiles - 1)
        high = np.where(edge, low, high)
        return low, high, np.where(edge, f32(0), np.clip(frac, 0, 1)).astype(f32)

    x0i, x1i, fx = axis(w, tiles_x)
    y0i, y1i, fy = axis(h, tiles_y)
    fx, fy = fx[None, :], fy[:, None]
    tl = luts[y0i[:, None], x0i[None, :], img].astype(f32)
    tr = luts[y0i[:, None], x1i[None, :], img].astype(f32)
    bl = luts[y1i[:, None], x0i[None, :], img].astype(f32)
    br = luts[y1i[:, None], x1i[None, :], img].astype(f32)
    top = tl * (f32(1) - fx) + tr * fx
    bottom = bl * (f32(1) - fx) + br * fx
    out = top * (f32(1) - fy) + bottom * fy
    return np.rint(np.clip(out, 0, 255)).astype(np.uint8)


def opencv_padding(h: int, w: int, tiles_x: int, tiles_y: int) -> tuple[int, int]:
    """``(rows, columns)`` OpenCV's CLAHE adds at the bottom and right (``modules/imgproc/src/clahe.cpp``)."""
    if h % tiles_y == 0 and w % tiles_x == 0:
        return 0, 0
    return tiles_y - h % tiles_y, tiles_x - w % tiles_x
