"""The CPU executor: planned draws in, uint8 batches out, through a torch ``DataLoader``.

The loader facade (:class:`dali_backend.facade.loader.DaliLoader`) plans each pass (which draws, in which
batches) and owns epochs, accounting, normalisation and errors; this executor only turns planned
batches into pixels with OpenCV in DataLoader worker processes. Workers return augmented
single-channel (gray) or RGB uint8 images: a gray float32 3x256x256 sample is 786 KB, its uint8
single channel 64 KB, 12x less to pickle, copy through shared memory and collate.
"""

from __future__ import annotations

import functools
import os
import time
import weakref
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from dali_backend.core.boundary import Plan
from dali_backend.errors import LoaderClosedError, LoaderTimeoutError, LoaderWorkerError
from dali_backend.util.memory import BATCHES_PER_TRIM, EveryNth
from dali_backend.core.reading import ClipTable
from dali_backend.sampling.sampler import Draw

from .dataset import ImageDataset
from .samples import Uint8Samples, batch_of, collate_uint8


# The DataLoader waits for a batch at most this long at a time (its own `timeout`), so that the waiting
# thread sees close() from another thread and the user's timeout= to this precision: a DataLoader
# without a timeout waits forever once its workers were shut down under it (torch stops watching
# workers it shut down itself).
WAIT_POLL_S = 0.05


class _PlannedBatches(Sampler[list[Draw]]):
    """The DataLoader's batch sampler: the batches the executor was told to run this pass."""

    def __init__(self, executor: TorchExecutor):
        # a weak reference: a cycle would leave the DataLoader's workers to the garbage collector,
        # whose teardown order makes their shutdown wait 5 s per worker (measured: 10 s for 2)
        self.executor = weakref.proxy(executor)

    def __iter__(self) -> Iterator[list[Draw]]:
        rows, size = self.executor.rows, self.executor.batch_size
        for start in range(0, len(rows), size):
            chunk = rows[start:start + size]
            yield [Draw(int(i), int(e), int(p)) for i, e, p in
                   chunk[:, [Plan.INDEX, Plan.EPOCH, Plan.POSITION]].tolist()]

    def __len__(self) -> int:
        return -(-len(self.executor.rows) // self.executor.batch_size)


_EXECUTORS: weakref.WeakSet = weakref.WeakSet()  # every live executor of this process


def _forget_inherited_workers() -> None:
    """In a process just forked from this one (a DataLoader or DALI worker of a later loader): the
    DataLoader iterators of the executors it inherited belong to the parent, and so do their workers.
    They are marked shut down, so that collecting them here (a loader dropped without close() in a
    reference cycle) does not try to stop processes this one does not own: torch's
    "AssertionError: can only test a child process", printed as "Exception ignored in ...". A plain
    DataLoader's iterator has no cycle and is gone before the fork."""
    for executor in list(_EXECUTORS):
        running = executor._pass_batches() if executor._pass_batches is not None else None
        for it in (getattr(getattr(executor, "_loader", None), "_iterator", None), running):
            if it is not None and hasattr(it, "_shutdown"):
                it._shutdown = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_workers)


class TorchExecutor:
    """Runs planned batches through a ``DataLoader`` of OpenCV workers (the ``torch`` backend).

    Args are ``DataLoader``'s (``worker_init_fn``, ``prefetch_factor``, ``persistent_workers``,
    ``multiprocessing_context``, ``pin_memory``/``pin_memory_device`` and ``timeout`` as there);
    ``clips``: the sampler's :class:`~dali_backend.core.reading.ClipTable` when the rows are clips (runs of
    ``clip_len`` frames): under ``on_error="skip"`` a clip with a bad frame is replaced whole.
    """

    device = torch.device("cpu")

    def __init__(self, dataset: ImageDataset, batch_size: int, on_error: str, num_workers: int = 0,
                 pin_memory: bool = False, timeout: float = 0, worker_init_fn=None, prefetch_factor: int | None = None,
                 persistent_workers: bool = False, multiprocessing_context=None, pin_memory_device: str = "",
                 with_params: bool = False, timed: bool = True, clips: ClipTable | None = None):
        self.batch_size, self.timeout, self.with_params = batch_size, timeout, with_params
        self.rows = np.zeros((0, len(Plan)), np.int64)
        self._trim = EveryNth(BATCHES_PER_TRIM)
        self._closed = False
        self._pass_batches: weakref.ref | None = None  # the running pass's DataLoader iterator
        _EXECUTORS.add(self)
        workers = num_workers > 0
        extra = {"pin_memory_device": pin_memory_device} if pin_memory and pin_memory_device else {}
        self._loader = DataLoader(
            Uint8Samples(dataset, on_error, with_params, timed, clips), batch_sampler=_PlannedBatches(self),
            num_workers=num_workers,
            collate_fn=functools.partial(collate_uint8, pad=dataset.spec.pad_batch, fill_mask=dataset.fill_mask),
            pin_memory=pin_memory, worker_init_fn=worker_init_fn,
            # torch draws each pass's worker seed from this generator: never from the user's global RNG
            # (DALI does not touch it either, so a training script's random numbers are the same on both)
            generator=torch.Generator().manual_seed(0),
            prefetch_factor=prefetch_factor if workers else None, persistent_workers=persistent_workers and workers,
            multiprocessing_context=multiprocessing_context if workers else None, **extra)

    def run(self, rows: np.ndarray, key=None, plan_next=None):
        """Yield a :class:`~dali_backend.core.boundary.Batch` per batch of planned ``rows``.

        ``key`` and ``plan_next`` (planning ahead) are the DALI executor's; this one plans per pass."""
        self.rows = rows
        batches = None
        while True:
            try:
                if batches is None:  # inside the try: the start of a pass can meet a worker that died before
                    batches = self._start_pass()
                    self._pass_batches = weakref.ref(batches)  # weak: a pass left by `break` stops its workers
                    if self._closed:  # close() landed while the workers were starting: they must not outlive it
                        self.stop_workers()
                        raise LoaderClosedError("the DaliLoader was closed while this iterator was starting a pass; "
                                                "start a new pass with a new DaliLoader")
                collated = self._next_batch(batches)
            except StopIteration:
                if self._closed:  # close() from another thread: torch ends the pass it shut down, short
                    raise LoaderClosedError("the DaliLoader was closed while this iterator was waiting for a batch; "
                                            "start a new pass with a new DaliLoader") from None
                return
            except (LoaderTimeoutError, LoaderClosedError):
                raise
            except Exception as e:
                if self._closed:  # close() from another thread shut the workers down under this wait
                    raise LoaderClosedError("the DaliLoader was closed while this iterator was waiting for a batch; "
                                            "start a new pass with a new DaliLoader") from e
                if isinstance(e, (ConnectionError, EOFError)):  # a worker died while its pipe was being read
                    raise self._worker_died(e) from e
                if isinstance(e, RuntimeError) and ("exited unexpectedly" in str(e) or "killed by signal" in str(e)):
                    raise self._worker_died(e) from e
                raise
            self._trim()  # earlier batches are gone by now: keep RSS flat
            yield batch_of(collated, self.with_params, self._in_flight())

    def _in_flight(self) -> int:
        """Batches the DataLoader's workers hold or have finished ahead of this one (0 without workers)."""
        return int(getattr(self._running(), "_tasks_outstanding", 0) or 0)

    def _running(self):
        """The DataLoader iterator of the running pass: the DataLoader's own (persistent workers), else
        the one this pass started (held weakly), else None."""
        it = getattr(self._loader, "_iterator", None)  # not `or`: an iterator's truth is its len()
        if it is None and self._pass_batches is not None:
            it = self._pass_batches()
        return it

    def worker_pids(self) -> list[int]:
        """The pids of the DataLoader's live worker processes (empty without workers or between passes)."""
        it = self._running()
        return [w.pid for w in getattr(it, "_workers", None) or [] if w.pid is not None and w.is_alive()]

    def _start_pass(self):
        """``iter()`` of the DataLoader. Persistent workers are resumed first, which torch waits for with
        its iterator's timeout: no timeout there (a busy worker answers late), the polling step after."""
        previous = getattr(self._loader, "_iterator", None)
        if previous is not None and hasattr(previous, "_timeout"):
            previous._timeout = 0
        return iter(self._loader)

    def _next_batch(self, batches):
        """The DataLoader's next batch, waited for in steps of at most ``WAIT_POLL_S`` (see there; set as
        torch's iterator's own timeout, step by step): between steps the wait stops for ``close()``, and
        at the user's ``timeout`` (also below a step). A step that times out leaves torch's iterator as
        it was (its batch is still awaited), so waiting again is exact."""
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        steps = hasattr(batches, "_timeout")  # worker processes (torch's single-process iterator never waits)
        while True:
            if self._closed:
                raise LoaderClosedError("the DaliLoader was closed while this iterator was open; start a new pass "
                                        "with a new DaliLoader")
            step = WAIT_POLL_S if deadline is None else min(WAIT_POLL_S, max(deadline - time.monotonic(), 1e-6))
            if steps:
                batches._timeout = step
            try:
                return next(batches)
            except RuntimeError as e:
                # torch's own text for its timeout, exactly: a worker's error that merely mentions a
                # timeout (storage, a user's code) is re-raised, never taken for a poll step
                if not steps or str(e) != f"DataLoader timed out after {step} seconds":
                    raise
            if deadline is not None and time.monotonic() >= deadline:
                raise LoaderTimeoutError(f"no batch within timeout={self.timeout:g} s (slow storage or workers? raise "
                                         "timeout=, or 0 for none)")

    def _worker_died(self, error: BaseException) -> LoaderWorkerError:
        """The clear error for a DataLoader worker that died, whichever way torch noticed it."""
        it = self._running()
        workers = list(getattr(it, "_workers", []) or [])
        deadline = time.monotonic() + 2.0
        dead = []
        while not dead and time.monotonic() < deadline:  # the pipe can break before the process is reaped
            dead = [w.pid for w in workers if not w.is_alive()]
            if not dead:
                time.sleep(0.05)
        who = f"pid {', '.join(map(str, dead))}" if dead else "a worker"
        return LoaderWorkerError(f"DataLoader worker ({who}) died (killed by a signal, crashed or out of memory: "
                                 f"{type(error).__name__}: {str(error)[:200]}); this pass stops here and the next one "
                                 "starts new workers (check the system log for the OOM killer)")

    def stop_workers(self) -> None:
        """Stop the worker processes now (a traceback's reference cycle would leave them to the collector,
        whose teardown stalls 5 s per worker); the next pass starts fresh ones."""
        # the DataLoader keeps a persistent iterator itself; a pass without persistent workers has only
        # its own (held here from its start, so that close() from another thread reaches its workers)
        running = self._pass_batches() if self._pass_batches is not None else None
        for it in {id(x): x for x in (getattr(self._loader, "_iterator", None), running)}.values():
            if it is not None and hasattr(it, "_shutdown_workers"):
                it._shutdown_workers()
        self._loader._iterator = self._pass_batches = None

    abandon = stop_workers

    def close(self) -> None:
        """Stop the workers for good; a thread waiting for a batch raises :class:`LoaderClosedError`."""
        self._closed = True
        self.stop_workers()

    def recover(self, failure: BaseException) -> None:
        """Nothing this executor raises can be repaired in place."""
        raise failure
