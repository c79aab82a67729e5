"""The last steps of the contract on torch tensors, shared by both backends (CPU or CUDA).

Both backends hand over uint8 ``[B, C, H, W]`` (C = 1 in gray mode); channel replication and
normalisation happen here, once per batch, on the batch's device. One function, so the two
backends' float outputs are bitwise equal whenever their uint8 pixels are.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from .augment import AugmentSpec


_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def normalize(batch: torch.Tensor, spec: AugmentSpec) -> torch.Tensor:
    """uint8 ``[..., C, H, W]`` (C = 1 or 3) -> the spec's output: ``spec.out_channels`` channels (gray
    replicated to 3 unless the spec keeps 1), normalised float (or uint8), channels-last if asked."""
    c = getattr(spec, "out_channels", 3)
    if batch.shape[-3] == 1 and c == 3:
        batch = batch.expand(*batch.shape[:-3], 3, *batch.shape[-2:])
    if spec.dtype == "uint8":
        out = batch.contiguous()
    else:
        scale, shift = spec.normalize_coefficients()
        out = _normalize_by_table(batch, scale, shift) if batch.device.type == "cpu" else None
        if out is None:
            scale_t = torch.from_numpy(scale).view(c, 1, 1).to(batch.device)
            shift_t = torch.from_numpy(shift).view(c, 1, 1).to(batch.device)
            out = torch.addcmul(shift_t, batch.to(torch.float32), scale_t)
        out = out if spec.dtype == "float32" else out.to(_DTYPES[spec.dtype])
    if batch.device.type == "cpu" and batch.is_pinned() and not out.is_pinned():
        out = out.pin_memory()  # pin_memory=True: the batch handed over is pinned, as DataLoader's are
    if getattr(spec, "channels_last", False) and out.dim() == 4:
        out = out.contiguous(memory_format=torch.channels_last)
    return out


@lru_cache(maxsize=16)
def _table(scale: bytes, shift: bytes) -> np.ndarray:
    """``[C, 256]`` float32: the value of every uint8 level per channel, computed by the same
    ``torch.addcmul`` as the elementwise path (the outputs are bitwise equal: tested at odd widths)."""
    sc, sh = np.frombuffer(scale, np.float32), np.frombuffer(shift, np.float32)
    levels = torch.arange(256, dtype=torch.float32).view(1, 256)
    return torch.addcmul(torch.from_numpy(sh.copy()).view(-1, 1), levels, torch.from_numpy(sc.copy()).view(-1, 1)).numpy()


def _normalize_by_table(batch: torch.Tensor, scale: np.ndarray, shift: np.ndarray) -> torch.Tensor | None:
    """CPU normalisation through a 256-entry table per channel (``cv2.LUT``): single-threaded, ~3x
    cheaper than float arithmetic at 224x224 and no OpenMP threads spinning beside the training step
    (measured: 0.09 vs 0.13-0.30 ms per image). None where it does not apply (then ``addcmul``)."""
    if batch.dtype != torch.uint8 or batch.dim() != 4 or batch.shape[-1] * batch.shape[-2] == 0:
        return None
    try:
        import cv2  # the fallback's dependency; DALI-only installs still have it (OpenCV is required)
    except ImportError:
        return None
    table = _table(scale.astype(np.float32).tobytes(), shift.astype(np.float32).tobytes())
    n, c, h, w = batch.shape
    src = batch.numpy() if batch.stride(1) != 0 else batch[:, :1].numpy()
    out = torch.empty((n, c, h, w), dtype=torch.float32)
    dst = out.numpy()
    for k in range(c):
        plane = np.ascontiguousarray(src[:, k if src.shape[1] > 1 else 0]).reshape(n * h, w)
        dst[:, k] = cv2.LUT(plane, table[k]).reshape(n, h, w)
    return out
