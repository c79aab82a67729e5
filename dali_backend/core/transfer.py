"""Small host tensors onto the batch's device without a host sync.

A host-to-device copy from ordinary (pageable) memory, or ``non_blocking=False``, makes torch's CUDA
copy synchronise the stream: the host then waits for every kernel the training step queued before the
copy, and a GPU loader can no longer run ahead of the step. Per-batch tensors (labels, clip labels,
row masks) are therefore staged in pinned memory and copied with ``non_blocking=True`` on the
consumer's current stream (torch's pinned-memory allocator keeps the staging buffer until the copy
ran). Constants (normalisation's scale and shift, RandomErasing's fill) are made once per device and
reused: that first copy is synchronous on purpose (once per process, so a constant is complete before
any stream reads it, whichever stream the consumer uses later). On the CPU nothing moves. The cost is one pinned staging buffer per copy,
a few bytes per sample; the gain is a ``next()`` that returns without waiting for the GPU.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch


def to_device(data: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """``data`` (a host array or tensor) on ``device``; on a GPU an asynchronous copy from pinned memory
    queued on the current stream, so the host never waits for the GPU (the CPU: ``data`` as a tensor)."""
    host = torch.from_numpy(np.ascontiguousarray(data)) if isinstance(data, np.ndarray) else data
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def device_constant(values: tuple[float, ...], dtype: torch.dtype, device: torch.device,
                    shape: tuple[int, ...] = (-1,)) -> torch.Tensor:
    """A constant tensor on ``device``, made once per ``(values, dtype, device, shape)`` and reused for
    every batch (never written: callers only read it). Its one copy is synchronous: ready for any stream."""
    return _constant(tuple(float(v) for v in values), dtype, str(torch.device(device)), tuple(shape))


@lru_cache(maxsize=64)
def _constant(values: tuple[float, ...], dtype: torch.dtype, device: str, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype).view(shape).to(device)  # once: a blocking copy, complete on return
