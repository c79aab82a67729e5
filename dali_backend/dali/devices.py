"""Which GPU, how many ranks share the node, and how DALI starts its reader workers, all decided without
initialising CUDA (DALI refuses to fork its workers once the driver is initialised)."""

from __future__ import annotations

import logging
import os

import torch

from ..errors import ConfigError


log = logging.getLogger("dali_backend")


def _dali_importable() -> str | None:
    """None when DALI imports, else why not."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError as e:
        return f"DALI is not importable ({e})"
    return None


def cuda_device_count() -> int:
    """GPUs visible to this process, counted without initialising the CUDA driver.

    ``torch.cuda.device_count()`` asks NVML first (``torch.cuda.is_available()`` calls ``cuInit``
    unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``), and DALI refuses to fork its reader workers once the
    driver is initialised, so probing must not initialise it.
    """
    try:
        return int(torch.cuda.device_count())
    except Exception:  # a broken driver install: no usable GPU
        return 0


def cuda_driver_initialized() -> bool:
    """What DALI checks before forking its Python workers (``_multiproc/pool.py``)."""
    from nvidia.dali import backend as dali_backend_lib

    return bool(dali_backend_lib.IsDriverInitialized())


def local_ranks() -> tuple[int, int]:
    """``(local rank, processes on this node)`` from torchrun's environment (``(0, 1)`` otherwise)."""
    def env_int(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    world = max(1, env_int("LOCAL_WORLD_SIZE", 1))
    rank = env_int("LOCAL_RANK", -1)
    if rank < 0:
        dist = torch.distributed
        rank = dist.get_rank() % world if dist.is_available() and dist.is_initialized() else 0
    return rank, world


def _local_device_id() -> int:
    """This process's GPU: the current device once torch initialised CUDA (``set_device`` respected),
    else ``LOCAL_RANK`` modulo the GPU count. Never creates a CUDA context (``current_device()``
    before ``set_device`` would put every torchrun rank on GPU 0)."""
    if torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return local_ranks()[0] % max(1, cuda_device_count())




def choose_start_method(requested: str | None) -> str:
    """How DALI starts its reader workers: ``fork`` (fast, works anywhere before CUDA starts) unless the
    CUDA driver is already initialised in this process, where DALI refuses to fork; then ``spawn``."""
    if requested not in (None, "fork", "spawn"):
        raise ConfigError(f"py_start_method={requested!r}; use None (automatic), 'fork' or 'spawn'")
    initialised = cuda_driver_initialized()
    if requested == "fork" and initialised:
        raise ConfigError("py_start_method='fork', but the CUDA driver is already initialised in this process (by "
                          "torch.cuda.is_available(), a CUDA tensor or another DALI pipeline) and DALI cannot fork "
                          "then; pass py_start_method=None or 'spawn', or create the DaliLoader before any CUDA work")
    if requested is None:
        return "spawn" if initialised else "fork"
    return requested


