"""The last steps of the contract on torch tensors, shared by both backends (CPU or CUDA).

Both backends hand over uint8 ``[B, C, H, W]`` (C = 1 in gray mode); channel replication and
normalisation happen here, once per batch, on the batch's device. One function, so the two
backends' float outputs are bitwise equal whenever their uint8 pixels are.
"""

from __future__ import annotations

import torch

from .augment import AugmentSpec


def normalize(batch: torch.Tensor, spec: AugmentSpec) -> torch.Tensor:
    """uint8 ``[..., C, H, W]`` (C = 1 or 3) -> the spec's output: 3 channels, normalised float (or uint8)."""
    if batch.shape[-3] == 1:
        batch = batch.expand(*batch.shape[:-3], 3, *batch.shape[-2:])
    if spec.dtype == "uint8":
        return batch.contiguous()
    scale, shift = spec.normalize_coefficients()
    scale_t = torch.from_numpy(scale).view(3, 1, 1).to(batch.device)
    shift_t = torch.from_numpy(shift).view(3, 1, 1).to(batch.device)
    out = torch.addcmul(shift_t, batch.to(torch.float32), scale_t)
    return out if spec.dtype == "float32" else out.to(torch.float16)
