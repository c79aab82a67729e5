"""Which GPU, how many ranks share the node, and how DALI starts its reader workers, all decided without
initialising CUDA (DALI refuses to fork its workers once the driver is initialised)."""

from __future__ import annotations

import logging
import os

import torch

from ..errors import ConfigError


log = logging.getLogger("dali_backend")


def dali_importable() -> str | None:
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


def _env_int(name: str) -> int | None:
    """An integer environment variable, or None when unset or not an integer."""
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _tasks_per_node() -> int | None:
    """srun's tasks on this node: ``SLURM_NTASKS_PER_NODE``, else the first count of
    ``SLURM_STEP_TASKS_PER_NODE`` / ``SLURM_TASKS_PER_NODE`` (``"4(x2)"``: 4 on each of 2 nodes)."""
    n = _env_int("SLURM_NTASKS_PER_NODE")
    if n is not None:
        return n
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        head = os.environ.get(name, "").split(",")[0].split("(")[0]
        if head.isdigit():
            return int(head)
    return None


def _distributed_rank() -> int | None:
    """This process's global rank when ``torch.distributed`` is initialised, else None."""
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def local_ranks() -> tuple[int, int]:
    """``(local rank, processes on this node)``: torchrun's ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``, else
    srun's ``SLURM_LOCALID`` / tasks per node, else the distributed rank modulo the processes on the node
    (as many as GPUs visible, at most the world size); ``(0, 1)`` for a single process."""
    world = _env_int("LOCAL_WORLD_SIZE") or _tasks_per_node()
    rank = _env_int("LOCAL_RANK")
    rank = _env_int("SLURM_LOCALID") if rank is None else rank
    dist_rank = _distributed_rank()
    if world is None:
        world = min(torch.distributed.get_world_size(), max(1, cuda_device_count())) if dist_rank is not None else 1
    world = max(1, world)
    if rank is None or rank < 0:
        rank = dist_rank % world if dist_rank is not None else 0
    return rank, world


def local_device_id() -> int:
    """This process's GPU: ``LOCAL_RANK`` (torchrun), else ``SLURM_LOCALID`` (srun), else the distributed
    rank, modulo the visible GPU count; only a single process outside those launchers follows torch's
    current device (its ``set_device``), and only once torch initialised CUDA.

    The launcher's variables come first: torch's current device is GPU 0 on every rank that never
    called ``set_device`` (``model.to("cuda:3")`` does not), and ``current_device()`` before CUDA is
    initialised would create a context on GPU 0. Pass ``device="cuda:N"`` to choose another.
    """
    gpus = max(1, cuda_device_count())
    for rank in (_env_int("LOCAL_RANK"), _env_int("SLURM_LOCALID"), _distributed_rank()):
        if rank is not None and rank >= 0:
            return rank % gpus
    if torch.cuda.is_initialized():
        return torch.cuda.current_device() % gpus
    return 0


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


