"""The last steps of the contract on torch tensors, shared by both backends (CPU or CUDA).

Both backends hand over uint8 ``[B, C, H, W]`` (C = 1 in gray mode); channel replication and
normalisation happen here, once per batch, on the batch's device. One function, so the two
backends' float outputs are bitwise equal whenever their uint8 pixels are.
"""

from __future__ import annotations

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
        scale_t = torch.from_numpy(scale).view(c, 1, 1).to(batch.device)
        shift_t = torch.from_numpy(shift).view(c, 1, 1).to(batch.device)
        out = torch.addcmul(shift_t, batch.to(torch.float32), scale_t)
        out = out if spec.dtype == "float32" else out.to(_DTYPES[spec.dtype])
    if getattr(spec, "channels_last", False) and out.dim() == 4:
        out = out.contiguous(memory_format=torch.channels_last)
    return out
