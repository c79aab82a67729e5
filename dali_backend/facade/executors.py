"""Executors by name: the one place the facade learns which executors exist and builds one.

A registry of :class:`ExecutorKind` (name -> factory, what its arguments mean, whether it can run
here), as torchvision registers one kernel per input type: a new executor is one module that calls
:func:`register`, and ``DaliLoader(..., backend=name)`` runs on it. The built-in kinds are
:class:`Engine`'s: DALI on the GPU, DALI on CPU operators, the OpenCV executor of
:mod:`fallback.executor` (DataLoader worker processes) and the same work on a thread pool of the training
process (:mod:`fallback.threads`). Elsewhere the tree asks the chosen kind what it is (``kind.dali``,
``kind.gpu``, ``kind.worker_processes``) instead of comparing backend names as strings: the command
line's ``--backend`` choices are :func:`backend_choices`, the telemetry's GPU rule :func:`on_gpu`.

Importing this module imports neither torch nor DALI (the command line reads it through
:mod:`dali_backend.facade.autotune`): each factory imports its executor when it builds one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..core.boundary import Executor
from ..dali import workers as _fork_hygiene  # noqa: F401 - its at-fork hook (a forked child forgets its parent's
# worker processes, so its exit does not try to join them) serves every executor, torch's too
from ..errors import ConfigError


class Engine(str, Enum):
    """The names of the built-in executors (``DaliLoader.backend`` is one of these values)."""

    DALI_GPU = "dali-gpu"
    DALI_CPU = "dali-cpu"
    TORCH = "torch"
    TORCH_THREADS = "torch-threads"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class ExecutorSettings:
    """What the facade gives any executor it builds: the loader's settings, named once.

    Attributes:
        name: the executor's registered name (the loader's ``backend``).
        frames_per_batch: planned rows per batch (``batch_size * clip_len``).
        on_error: ``"raise"`` or ``"skip"``.
        with_params: return each draw's parameters (``return_meta``).
        timed: measure stages for the telemetry.
        clips: the clip sampler's table under clips (whole clips replaced under ``skip``), else None.
        The others are ``DaliLoader``'s arguments of the same names (``device_id``: the GPU, or None).
    """

    name: str
    frames_per_batch: int
    on_error: str
    num_workers: int
    device_id: int | None = None
    timeout: float = 0.0
    worker_init_fn: Callable | None = None
    with_params: bool = False
    timed: bool = True
    clips: Any = None
    pin_memory: bool = False
    pin_memory_device: str = ""
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    multiprocessing_context: Any = None
    prefetch_queue_depth: int = 2
    hw_decoder_load: float = 0.65
    py_start_method: str | None = None


@dataclass(frozen=True, kw_only=True)
class ExecutorKind:
    """One executor: its name, its factory and what the loader's arguments mean on it.

    Attributes:
        name: what ``DaliLoader(backend=...)`` names it by, and the loader's ``.backend``.
        build: ``build(dataset, settings)`` -> an :class:`~dali_backend.core.boundary.Executor`
            (``dataset``: the user's ``ImageDataset``; ``dataset.samples`` is the contract's record).
        unavailable: ``unavailable()`` -> why it cannot run in this process, or None.
        dali: DALI's arguments (``prefetch_queue_depth``, ``py_start_method``, ...) mean something on it.
        gpu: its batches are on a GPU (``hw_decoder_load`` means something).
        worker_processes: ``num_workers`` counts worker processes, 0 meaning the training process.
        threads: ``num_workers`` counts threads of the training process, 0 meaning the calling thread
            (its stages are timed there, as in a worker process).
    """

    name: str
    build: Callable[[Any, ExecutorSettings], Executor]
    unavailable: Callable[[], str | None] = lambda: None
    dali: bool = False
    gpu: bool = False
    worker_processes: bool = False
    threads: bool = False


REGISTRY: dict[str, ExecutorKind] = {}
REQUESTS = ("auto", "dali")  # the request words of DaliLoader's backend argument (they choose an executor)


def register(kind: ExecutorKind) -> ExecutorKind:
    """Make ``kind`` choosable as ``DaliLoader(backend=kind.name)``; returns it."""
    if kind.name in REQUESTS:
        raise ConfigError(f"register: an executor cannot be named {kind.name!r} (a request word of DaliLoader's "
                          "backend argument); choose another name")
    REGISTRY[kind.name] = kind
    return kind


def backend_choices() -> list[str]:
    """What ``DaliLoader(backend=...)`` accepts now: the request words, then every registered executor
    (the command line's ``--backend`` choices)."""
    return [*REQUESTS, *REGISTRY]


def on_gpu(name: str) -> bool:
    """Whether the executor named ``name`` yields its batches on a GPU (False for a name not registered
    in this process: a metrics dict of another run's executor)."""
    kind = REGISTRY.get(str(name))
    return kind is not None and kind.gpu


def executor_kind(name: str) -> ExecutorKind:
    """The registered executor ``name`` (a :class:`ConfigError` listing the registered ones if none)."""
    try:
        return REGISTRY[str(name)]
    except KeyError:
        raise ConfigError(f"backend={name!r}: no such executor; the registered ones are {sorted(REGISTRY)} "
                          "(or pass 'auto' or 'dali')") from None


def _build_torch(dataset, s: ExecutorSettings) -> Executor:
    from .._own import own

    return own("fallback.executor").TorchExecutor(
        dataset, s.frames_per_batch, s.on_error, num_workers=s.num_workers, pin_memory=s.pin_memory,
        timeout=s.timeout, worker_init_fn=s.worker_init_fn, prefetch_factor=s.prefetch_factor,
        persistent_workers=s.persistent_workers, multiprocessing_context=s.multiprocessing_context,
        pin_memory_device=s.pin_memory_device, with_params=s.with_params, timed=s.timed, clips=s.clips)


def _build_threads(dataset, s: ExecutorSettings) -> Executor:
    from .._own import own

    return own("fallback.threads").ThreadExecutor(
        dataset, s.frames_per_batch, s.on_error, num_workers=s.num_workers, pin_memory=s.pin_memory,
        timeout=s.timeout, worker_init_fn=s.worker_init_fn, prefetch_factor=s.prefetch_factor,
        with_params=s.with_params, timed=s.timed, clips=s.clips)


def _build_dali(dataset, s: ExecutorSettings) -> Executor:
    from ..dali.executor import DaliExecutor

    runner = dict(batch_size=s.frames_per_batch, gpu=executor_kind(s.name).gpu, device_id=s.device_id,
                  num_workers=s.num_workers, prefetch_queue_depth=s.prefetch_queue_depth,
                  hw_decoder_load=s.hw_decoder_load, py_start_method=s.py_start_method, on_error=s.on_error,
                  timeout=float(s.timeout), worker_init_fn=s.worker_init_fn, with_params=s.with_params, clips=s.clips)
    return DaliExecutor(dataset.samples, s.on_error, runner, s.clips)


def _dali_unavailable() -> str | None:
    from ..dali.devices import dali_importable

    return dali_importable() or None


register(ExecutorKind(name=Engine.TORCH.value, build=_build_torch, worker_processes=True))
register(ExecutorKind(name=Engine.TORCH_THREADS.value, build=_build_threads, threads=True))
register(ExecutorKind(name=Engine.DALI_CPU.value, build=_build_dali, unavailable=_dali_unavailable, dali=True))
register(ExecutorKind(name=Engine.DALI_GPU.value, build=_build_dali, unavailable=_dali_unavailable, dali=True,
                      gpu=True))
