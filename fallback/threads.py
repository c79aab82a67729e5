"""The thread executor (``backend="torch-threads"``): the fallback's per-sample work on a thread pool
of the training process.

The same work as :mod:`fallback.executor` (:class:`~fallback.samples.Uint8Samples`: read, decode,
augment with the same drawn parameters, so the same pixels) without worker processes: OpenCV's
decoder and kernels and numpy's copies release the GIL, so ``num_workers`` threads keep that many
cores busy, and a batch crosses no process boundary (no pickling, no shared-memory copy, no worker
start). The trade-off: the Python parts of each sample (parameter draws, the operations' glue) hold
the GIL, so on many cores with small images the threads wait for each other where processes would
not; and a user's ``worker_init_fn`` runs in a thread of this process, not in a fresh process.
Measured on a loaded 2-core machine: see ``docs/benchmarks.md``.

Each pool thread runs its work on one torch intra-op thread (torch's setting is per thread, so the
training process's own setting is untouched), as a DataLoader worker does; OpenCV's setting is the
process's, so its own thread pool is off while a pool of these threads runs (:class:`_OpenCVPoolOff`:
the setting found before comes back when the last one closes). ``num_workers=0`` makes
each batch in the calling thread, on demand. ``prefetch_factor`` keeps its DataLoader meaning: at most
``num_workers * prefetch_factor`` batches in flight (default 2 per thread).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import cv2
import numpy as np
import torch

from dali_backend.core.boundary import Plan
from dali_backend.core.reading import ClipTable
from dali_backend.errors import LoaderClosedError, LoaderTimeoutError
from dali_backend.sampling.sampler import Draw
from dali_backend.util.memory import BATCHES_PER_TRIM, EveryNth

from .dataset import ImageDataset
from .samples import Uint8Samples, batch_of, collate_uint8, pin_targets

# a wait for a batch looks at close() and the user's timeout this often (seconds)
WAIT_POLL_S = 0.05
THREAD_PREFIX = "dali_backend-threads"  # the pool threads' names (threading.enumerate() shows them)


class _OpenCVPoolOff:
    """OpenCV's own thread pool off in this process while any thread executor's pool runs, then the
    setting found before restored: the executor's threads are the parallelism, as a DataLoader worker's
    process is (each sets ``cv2.setNumThreads(0)``). Left on, each operation also fanned out to
    OpenCV's pool, whose threads fought the executor's for the cores (measured on the loaded 2-core
    machine: the contract's operations 8.6 ms per 640x480 image in one thread with OpenCV's 2 threads,
    4.9 ms without). Only the process that turned it off turns it back (``0`` is the value that is safe
    in a forked child: the FACTS)."""

    def __init__(self):
        self.lock, self.users, self.before, self.pid = threading.Lock(), 0, None, None

    def acquire(self) -> None:
        with self.lock:
            if self.users == 0 or self.pid != os.getpid():
                self.users, self.before, self.pid = 0, cv2.getNumThreads(), os.getpid()
                cv2.setNumThreads(0)
            self.users += 1

    def release(self) -> None:
        with self.lock:
            if self.pid != os.getpid() or self.users == 0:
                return
            self.users -= 1
            if self.users == 0:
                cv2.setNumThreads(self.before)


OPENCV_POOL = _OpenCVPoolOff()


def _start_thread(worker_init_fn: Callable | None, numbers: itertools.count) -> None:
    """In each pool thread, once: one torch intra-op thread (a per-thread setting: the training process's
    own threads keep theirs), then the user's ``worker_init_fn`` with the thread's number."""
    torch.set_num_threads(1)
    number = next(numbers)
    if worker_init_fn is not None:
        worker_init_fn(number)


class ThreadExecutor:
    """Runs planned batches on ``num_workers`` threads of this process (the ``torch-threads`` backend).

    Args:
        dataset: the user's :class:`~fallback.dataset.ImageDataset`.
        batch_size: planned rows per batch.
        on_error: ``"raise"`` or ``"skip"``.
        num_workers: threads making batches (0: each batch is made in the calling thread when asked for).
        pin_memory: batches in page-locked memory (where CUDA is available).
        timeout: seconds to wait for one batch (0: no limit); past it :class:`LoaderTimeoutError`.
        worker_init_fn: called once in each pool thread with its number (0 .. num_workers - 1).
        prefetch_factor: batches in flight per thread (default 2), as DataLoader's.
        with_params, timed, clips: as :class:`~fallback.samples.Uint8Samples`'s.
    """

    device = torch.device("cpu")

    def __init__(self, dataset: ImageDataset, batch_size: int, on_error: str, num_workers: int = 0,
                 pin_memory: bool = False, timeout: float = 0, worker_init_fn: Callable | None = None,
                 prefetch_factor: int | None = None, with_params: bool = False, timed: bool = True,
                 clips: ClipTable | None = None):
        self.batch_size, self.timeout, self.with_params = int(batch_size), float(timeout), with_params
        self.num_workers = int(num_workers)
        self.depth = self.num_workers * (prefetch_factor or 2)  # batches in flight (0: made on demand)
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self._samples = Uint8Samples(dataset, on_error, with_params, timed, clips)
        self._frames = clips.clip_len if clips is not None else 1  # a clip's frames stay in one share
        self._pad = dataset.spec.pad_batch
        self._fill_mask = dataset.fill_mask
        self._worker_init_fn = worker_init_fn
        self._trim = EveryNth(BATCHES_PER_TRIM)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # the pool: started and shut down by one thread at a time
        self._closed = False
        self._pending: deque[list[Future]] = deque()  # the running pass's batches in flight (their shares), in order

    # ------------------------------------------------------------------ the pool
    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise LoaderClosedError("the DaliLoader was closed; start a new pass with a new DaliLoader")
            if self._pool is None:  # the initializer holds no reference to self: a dropped loader's pool goes too
                OPENCV_POOL.acquire()
                self._pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix=THREAD_PREFIX,
                                                initializer=_start_thread,
                                                initargs=(self._worker_init_fn, itertools.count()))
            return self._pool

    def _collate(self, samples: list) -> tuple:
        """A batch's samples collated (in the loader's thread), pinned when asked."""
        collated = collate_uint8(samples, self._pad, self._fill_mask)
        if self.pin_memory:
            collated = (collated[0].pin_memory(), collated[1].pin_memory(), *collated[2:6], pin_targets(collated[6]))
        return collated

    def _submit(self, pool: ThreadPoolExecutor, draws: list[Draw]) -> list[Future]:
        """A batch cut into one share per thread (whole clips each), each share made by a pool thread:
        the batch is ready when its slowest share is, so the first batch of a pass comes ``num_workers``
        times sooner than if one thread made it (throughput is the same: every thread stays busy)."""
        step = -(-len(draws) // (self.num_workers * self._frames)) * self._frames
        return [pool.submit(self._samples.__getitems__, draws[k:k + step]) for k in range(0, len(draws), step)]

    # ------------------------------------------------------------------ the executor protocol
    def run(self, rows: np.ndarray, key=None, plan_next=None):
        """Yield a :class:`~dali_backend.core.boundary.Batch` per batch of planned ``rows``, in order.

        ``key`` and ``plan_next`` (planning ahead) are the DALI executor's; this one plans per pass."""
        cols = rows[:, [Plan.INDEX, Plan.EPOCH, Plan.POSITION]].tolist()
        batches = ([Draw(*c) for c in cols[s:s + self.batch_size]] for s in range(0, len(cols), self.batch_size))
        if self.depth == 0:
            for draws in batches:
                self._check_open()
                collated = self._collate(self._samples.__getitems__(draws))
                self._trim()
                yield batch_of(collated, self.with_params, 0)
            return
        pool, pending = self._threads(), deque()
        self._pending = pending
        try:
            for draws in itertools.islice(batches, self.depth):
                pending.append(self._submit(pool, draws))
            while pending:
                samples = self._wait(pending[0])
                pending.popleft()
                for draws in itertools.islice(batches, 1):  # keep `depth` batches in flight
                    pending.append(self._submit(pool, draws))
                collated = self._collate(samples)
                self._trim()  # earlier batches are gone by now: keep RSS flat
                yield batch_of(collated, self.with_params, len(pending))
        finally:  # the pass ended, was left (break, an error) or its iterator deleted: drop what is ahead
            self._drop(pending)

    def _check_open(self) -> None:
        if self._closed:
            raise LoaderClosedError("the DaliLoader was closed while this iterator was open; start a new pass "
                                    "with a new DaliLoader")

    def _wait(self, shares: list[Future]) -> list:
        """The samples of a batch's ``shares``, in order, waited for in steps of ``WAIT_POLL_S``: between
        steps the wait stops for ``close()`` and at the user's ``timeout`` (for the whole batch)."""
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        samples: list = []
        for future in shares:
            while True:
                self._check_open()
                step = WAIT_POLL_S if deadline is None else min(WAIT_POLL_S, max(deadline - time.monotonic(), 1e-6))
                try:
                    samples += future.result(timeout=step)
                    break
                except FutureTimeout:
                    pass
                if deadline is not None and time.monotonic() >= deadline:
                    raise LoaderTimeoutError(f"no batch within timeout={self.timeout:g} s (slow storage or threads? "
                                             "raise timeout=, or 0 for none)")
        return samples

    def worker_pids(self) -> list[int]:
        """No worker processes: the threads' CPU is the training process's own."""
        return []

    def pool_threads(self) -> int:
        """The threads making batches (telemetry: ``threads``; report() names more than the cores)."""
        return self.num_workers

    @staticmethod
    def _drop(pending: deque) -> None:
        for shares in list(pending):
            for future in shares:
                future.cancel()
        pending.clear()

    def abandon(self) -> None:
        """A pass ended early with an error: its batches ahead are dropped (the threads stay for the next)."""
        self._drop(self._pending)

    def close(self) -> None:
        """Stop the threads for good: queued batches are dropped, a thread making one ends when it is made
        (not waited for: a slow read does not hold close() up); a thread waiting for a batch raises
        :class:`LoaderClosedError`."""
        self._closed = True
        self.abandon()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
            OPENCV_POOL.release()

    def recover(self, failure: BaseException) -> None:
        """Nothing this executor raises can be repaired in place."""
        raise failure

    def __del__(self):
        pool = self.__dict__.get("_pool")
        if pool is not None and not sys.is_finalizing():  # at exit: concurrent.futures joins the threads itself
            pool.shutdown(wait=False, cancel_futures=True)
            OPENCV_POOL.release()
