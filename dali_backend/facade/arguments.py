"""What ``DaliLoader`` does with its arguments before it builds an executor: checks them (a
:class:`ConfigError` naming the argument, its value and the fix), chooses the backend, says why when it
is not what ``device`` asked for, and warns about arguments that mean nothing on the chosen backend."""

from __future__ import annotations

import logging
import warnings
from typing import Literal

import numpy as np

from ..dali.devices import dali_importable, local_device_id, cuda_device_count
from ..errors import ConfigError, FallbackWarning
from .executors import REGISTRY, Engine, executor_kind

log = logging.getLogger("dali_backend")
Backend = Literal["auto", "dali", "torch"] | str  # or the name of a registered executor (facade.executors)
TORCH, DALI_CPU, DALI_GPU = Engine.TORCH.value, Engine.DALI_CPU.value, Engine.DALI_GPU.value


def choose_backend(device: str, backend: Backend) -> tuple[str, int | None, str]:
    """``(backend name, device id, reason)`` for the requested device and backend (``"auto"``,
    ``"dali"``, or a registered executor's name: :mod:`dali_backend.facade.executors`)."""
    if backend not in ("auto", "dali") and backend not in REGISTRY:
        raise ConfigError(f"backend={backend!r}; use 'auto', 'dali' or a registered executor: {sorted(REGISTRY)}")
    if backend not in ("auto", "dali", TORCH) and not executor_kind(backend).dali:
        why_not = executor_kind(backend).unavailable()
        if why_not:
            raise ConfigError(f"backend={backend!r} cannot run here: {why_not}")
        return backend, None, f"backend={backend!r} was requested"
    dev = str(device)
    ordinal = dev.split(":", 1)[1] if dev.startswith("cuda:") else None
    if (dev not in ("auto", "cpu", "cuda", "gpu") and ordinal is None) or (ordinal is not None and not ordinal.isdigit()):
        raise ConfigError(f"device={device!r}; use 'auto', 'cpu', 'cuda' (or 'gpu') or 'cuda:N' with N a GPU number")
    explicit_id = int(ordinal) if ordinal is not None else None
    if backend == TORCH:
        return TORCH, None, "backend='torch' was requested"
    cuda = cuda_device_count() > 0
    if dev not in ("auto", "cpu") and not cuda:
        raise ConfigError(f"device={device!r} but CUDA is not available; pass device='auto' to fall back to the CPU")
    if dev == "cpu" and backend == "auto":
        return TORCH, None, "device='cpu' (pass backend='dali' for DALI's CPU graph)"
    why_not_dali = dali_importable()
    if why_not_dali:
        if backend == "dali":
            from ..dali.graph import import_dali

            import_dali()  # raises MissingDependencyError with the install command
        return TORCH, None, why_not_dali
    if dev == "cpu":
        return DALI_CPU, None, "device='cpu', backend='dali' was requested"
    if dev == "auto":
        if cuda:
            return DALI_GPU, local_device_id(), "CUDA is available and DALI imports"
        if backend == "dali":
            return DALI_CPU, None, "backend='dali' was requested and CUDA is not available"
        return TORCH, None, "CUDA is not available"
    if explicit_id is not None and explicit_id >= cuda_device_count():
        raise ConfigError(f"device={device!r} but this process sees {cuda_device_count()} GPU(s); use cuda:0 .. "
                          f"cuda:{cuda_device_count() - 1} (CUDA_VISIBLE_DEVICES renumbers them)")
    return DALI_GPU, explicit_id if explicit_id is not None else local_device_id(), f"device={device!r} was requested"


_ANNOUNCED: set = set()  # fallbacks already announced in this process


def announce_backend(device: str, backend: str, chosen: str, reason: str) -> None:
    """Say which backend runs and why. ``device="auto"`` means "the GPU if there is one", and
    ``device="cuda"`` asks for it: running anything else (DALI missing, no GPU) is said once per
    process and reason as a ``FallbackWarning`` (the library's logger
    has only a ``NullHandler`` until the application configures logging, so a plain script would show
    no log line), and logged at INFO; a choice that went as asked is an INFO line
    (``logging.basicConfig(level=logging.INFO)`` shows those)."""
    if str(device) != "cpu" and backend in ("auto", "dali") and not executor_kind(chosen).gpu:
        if (chosen, reason) not in _ANNOUNCED:
            _ANNOUNCED.add((chosen, reason))
            how = "backend='dali', device='cpu'" if executor_kind(chosen).dali else f"backend={chosen!r}"
            text = (f"DaliLoader: not on the GPU: running {chosen} because {reason}; pass {how} to choose it "
                    "explicitly (and silence this line)")
            if str(device) != "auto":
                text += f" (device={device!r} was asked for)"
            # the warning below, with its advice in the library's terms, is the one a person sees; a command
            # line silences it and says it in its own terms (flags), so the log line gives no advice
            log.info("DaliLoader: not on the GPU: running %s because %s", chosen, reason)
            warnings.warn(text, FallbackWarning, stacklevel=3)
        return
    log.info("DaliLoader: backend %s (%s)", chosen, reason)



def refuse_arguments(dataset, sampler, shuffle: bool, batch_sampler, collate_fn, worker_init_fn,
                      batch_transform) -> None:
    """``DataLoader`` arguments this loader cannot honour, or given as the wrong thing: one ConfigError each."""
    from .._own import own

    if not isinstance(dataset, own("fallback.dataset").ImageDataset):
        raise ConfigError(f"DaliLoader: dataset must be an ImageDataset, got {type(dataset).__name__}; "
                          "wrap your index: ImageDataset(SampleIndex.from_folder(root), AugmentSpec())")
    if batch_sampler is not None:
        raise ConfigError("DaliLoader: batch_sampler= is not supported: batches are planned from sampler= and "
                          "batch_size= (pass your sampler of indices as sampler= and the batch size)")
    if collate_fn is not None:
        raise ConfigError("DaliLoader: collate_fn= cannot apply: the loader assembles batches itself (uint8, then "
                          "normalised on the device); use batch_transform=fn(images, labels) -> (images, labels)")
    if batch_transform is not None and not callable(batch_transform):
        raise ConfigError(f"DaliLoader: batch_transform={batch_transform!r}; pass a function "
                          "fn(images, labels) -> (images, labels)")
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise ConfigError(f"DaliLoader: worker_init_fn={worker_init_fn!r}; pass a function fn(worker_id)")
    if sampler is not None and shuffle:
        raise ConfigError("DaliLoader: sampler and shuffle=True are mutually exclusive (as in DataLoader); drop one")


def check_numbers(*, batch_size, num_workers, prefetch_factor, prefetch_queue_depth, hw_decoder_load,
                   timeout) -> None:
    """The numeric arguments: a ConfigError naming the argument, its value and what it must be."""
    def integer(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if not integer(batch_size) or batch_size < 1:
        raise ConfigError(f"DaliLoader: batch_size={batch_size!r}; must be a positive integer")
    if num_workers != "auto" and (not integer(num_workers) or num_workers < 0):
        raise ConfigError(f"DaliLoader: num_workers={num_workers!r}; must be a non-negative integer, or 'auto' (a "
                          "short calibration on this data chooses it)")
    if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
        raise ConfigError(f"DaliLoader: prefetch_factor={prefetch_factor!r}; must be a positive integer or None")
    if not isinstance(prefetch_queue_depth, int) or prefetch_queue_depth < 1:
        raise ConfigError(f"DaliLoader: prefetch_queue_depth={prefetch_queue_depth!r}; must be >= 1")
    if not isinstance(hw_decoder_load, (int, float)) or not 0.0 <= hw_decoder_load <= 1.0:
        raise ConfigError(f"DaliLoader: hw_decoder_load={hw_decoder_load!r}; must be a number in [0, 1]")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout >= 0:  # NaN too
        raise ConfigError(f"DaliLoader: timeout={timeout!r}; must be a non-negative number of seconds (0: none)")


# argument: (its default, executors on which it means nothing (a predicate of the executor's kind and
# num_workers), why)
_UNUSED = {
    "pin_memory": (False, lambda k, w: k.dali, "DALI batches come from DALI's own pinned or device memory"),
    "pin_memory_device": ("", lambda k, w: k.dali, "DALI places batches itself"),
    "hw_decoder_load": (0.65, lambda k, w: not k.gpu, "only the GPU has a hardware JPEG decoder"),
    "prefetch_queue_depth": (2, lambda k, w: not k.dali, "use prefetch_factor="),
    "prefetch_factor": (None, lambda k, w: not k.dali and w == 0, "without worker processes batches are made on demand"),
    "py_start_method": (None, lambda k, w: not k.dali, "it starts DALI's reader workers"),
    "in_order": (True, lambda b, w: True, "batches always come in order"),
}


def warn_unused(backend: str, num_workers: int, **given) -> None:
    """Warn once per argument given a value that has no effect on ``backend`` (DataLoader's arguments
    are all accepted; silently ignoring one would hide a mistake)."""
    context = given.pop("multiprocessing_context")
    for name, value in given.items():
        default, unused, why = _UNUSED[name]
        if unused(executor_kind(backend), num_workers) and value != default:
            warnings.warn(f"DaliLoader: {name}={value!r} has no effect on the {backend} backend ({why})",
                          UserWarning, stacklevel=3)
    if executor_kind(backend).threads and context is not None:
        warnings.warn(f"DaliLoader: multiprocessing_context={context!r} has no effect on the {backend} backend "
                      "(its workers are threads of this process)", UserWarning, stacklevel=3)
    if executor_kind(backend).dali and context not in (None, "fork", "spawn"):
        warnings.warn(f"DaliLoader: multiprocessing_context={context!r} has no effect on the {backend} backend "
                      "(DALI starts its reader workers with fork or spawn)", UserWarning, stacklevel=3)
