"""``DaliLoader``: a drop-in for ``torch.utils.data.DataLoader``, one facade over two executors.

The facade chooses a backend (DALI on the GPU, DALI on the CPU, or the OpenCV executor of
:mod:`fallback.executor`) and owns what both share: the arguments, passes and epochs, the plan of each
pass (:func:`~dali_backend.sampler.plan_epoch`), accounting, resumption, bad-file errors,
normalisation, ``return_meta`` and ``batch_transform``. An executor only turns planned batches into
uint8 pixels.

The DALI executor (``_DaliRunner``) never lets DALI see an epoch end (see :mod:`dali_backend.schedule`):
it schedules draws into an endless slot stream a few batches ahead, pads the last partial batch with
throw-away slots and trims them, and after a ``break`` drains the few batches already scheduled before
the next pass starts. That costs a few wasted decodes per early exit and buys exact epochs, any
``set_epoch`` order, and no pipeline rebuilds — except when the pipeline fails (a file DALI's decoder
refuses, a dead reader worker, an interruption at an unknown point): then the next batch or pass
builds a new one. DALI runs in a thread of its own, so whichever thread iterates waits with a timeout
and notices a dead worker.
"""
from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Literal

import numpy as np
import torch

from .epochs import EpochLoaderMixin
from .handoff import DeviceHandoff
from .errors import (BadImageError, ConfigError, FallbackWarning, LoaderClosedError, LoaderTimeoutError, LoaderWorkerError,
                     StaleIteratorError)
from .memory import EveryNth
from .sampler import WeightedSampler, default_sampler, default_seed, plan_epoch
from .reading import check_on_error
from .reading import SERVED_BAD
from .schedule import KIND_DRAW, KIND_PAD, ROW, Col, DrawSource, SlotRing
from .tensors import normalize, release_pooled_outputs
from .workers import WorkerInit, starting_workers

log = logging.getLogger("dali_backend")
Backend = Literal["auto", "dali", "torch"]

# A process forked while a DALI pipeline exists (a fallback DataLoader worker, or a user's os.fork())
# must never run the pipeline's destructor or DALI's exit hook: the pipeline's threads do not exist
# there, and both hang or abort (measured: a forked child's sys.exit() hung in Pipeline._shutdown or
# died of SIGABRT). The child forgets the parent's pipelines and worker processes and leaks them.
_LIVE_RUNNERS: weakref.WeakSet = weakref.WeakSet()
_CHILD_KEEPALIVE: list = []


def _forget_pipelines_in_child() -> None:
    dali_pipeline = sys.modules.get("nvidia.dali.pipeline")
    if dali_pipeline is None:
        return  # no DALI pipeline can exist in this process
    import ctypes

    keep = [obj for runner in list(_LIVE_RUNNERS) for obj in (runner, runner.pipe, runner.iterator) if obj is not None]
    # every DALI pipeline of the parent, also those of closed loaders the collector has not freed yet:
    # freeing one here (the collector runs in the child too) would run its destructor without its threads
    pipes = getattr(getattr(dali_pipeline, "Pipeline", None), "_pipes", set())
    keep += [p for p in (ref() for ref in list(pipes)) if p is not None]
    for obj in keep:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))  # never freed in this process
        _CHILD_KEEPALIVE.append(obj)
    ids = {id(obj) for obj in keep}
    pipes.clear()  # DALI's atexit hook would shut the parent's pipelines down from here
    # DALI closes a pipeline's worker pool in a weakref.finalize, which also runs at exit: from here it
    # would close the parent's shared task queues, and the parent's reader workers would stop.
    for fin in list(getattr(weakref.finalize, "_registry", {})):
        target = fin.peek()
        if target is not None and id(target[0]) in ids:
            fin.detach()


os.register_at_fork(after_in_child=_forget_pipelines_in_child)


def _close_runners_at_exit() -> None:
    """A script that never closes its loader still unlinks the schedule ring (no tracker warning)."""
    for runner in list(_LIVE_RUNNERS):
        try:
            runner.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


atexit.register(_close_runners_at_exit)


def _process_dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


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


def choose_backend(device: str, backend: Backend) -> tuple[str, int | None, str]:
    """``(backend name, device id, reason)`` for the requested device and backend."""
    if backend not in ("auto", "dali", "torch"):
        raise ConfigError(f"backend={backend!r}; use 'auto', 'dali' or 'torch'")
    dev = str(device)
    ordinal = dev.split(":", 1)[1] if dev.startswith("cuda:") else None
    if (dev not in ("auto", "cpu", "cuda", "gpu") and ordinal is None) or (ordinal is not None and not ordinal.isdigit()):
        raise ConfigError(f"device={device!r}; use 'auto', 'cpu', 'cuda' (or 'gpu') or 'cuda:N' with N a GPU number")
    explicit_id = int(ordinal) if ordinal is not None else None
    if backend == "torch":
        return "torch", None, "backend='torch' was requested"
    cuda = cuda_device_count() > 0
    if dev not in ("auto", "cpu") and not cuda:
        raise ConfigError(f"device={device!r} but CUDA is not available; pass device='auto' to fall back to the CPU")
    if dev == "cpu" and backend == "auto":
        return "torch", None, "device='cpu' (pass backend='dali' for DALI's CPU graph)"
    why_not_dali = _dali_importable()
    if why_not_dali:
        if backend == "dali":
            from .pipeline import import_dali

            import_dali()  # raises MissingDependencyError with the install command
        return "torch", None, why_not_dali
    if dev == "cpu":
        return "dali-cpu", None, "device='cpu', backend='dali' was requested"
    if dev == "auto":
        if cuda:
            return "dali-gpu", _local_device_id(), "CUDA is available and DALI imports"
        if backend == "dali":
            return "dali-cpu", None, "backend='dali' was requested and CUDA is not available"
        return "torch", None, "CUDA is not available"
    if explicit_id is not None and explicit_id >= cuda_device_count():
        raise ConfigError(f"device={device!r} but this process sees {cuda_device_count()} GPU(s); use cuda:0 .. "
                          f"cuda:{cuda_device_count() - 1} (CUDA_VISIBLE_DEVICES renumbers them)")
    return "dali-gpu", explicit_id if explicit_id is not None else _local_device_id(), f"device={device!r} was requested"


_ANNOUNCED: set = set()  # fallbacks already announced in this process


def announce_backend(device: str, backend: str, chosen: str, reason: str) -> None:
    """Say which backend runs and why. ``device="auto"`` means "the GPU if there is one": running
    anything else is said once per process and reason as a ``UserWarning`` (the library's logger has
    only a ``NullHandler`` until the application configures logging, so a plain script would show no
    log line), and logged at WARNING; a choice that went as asked is an INFO line
    (``logging.basicConfig(level=logging.INFO)`` shows those)."""
    if device == "auto" and backend != "torch" and chosen != "dali-gpu":
        if (chosen, reason) not in _ANNOUNCED:
            _ANNOUNCED.add((chosen, reason))
            how = "backend='dali', device='cpu'" if chosen == "dali-cpu" else "backend='torch'"
            text = (f"DaliLoader: not on the GPU: running {chosen} because {reason}; pass {how} to choose it "
                    "explicitly (and silence this line)")
            log.warning("%s", text)
            warnings.warn(text, FallbackWarning, stacklevel=3)
        return
    log.info("DaliLoader: backend %s (%s)", chosen, reason)


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


PLANNED = ROW - 1  # a planned row is a slot row without its slot: (index, epoch, position, kind)


def _padding(n: int) -> np.ndarray:
    pad = np.zeros((n, PLANNED), dtype=np.int64)
    pad[:, Col.KIND - 1] = KIND_PAD
    return pad


def batches_of(rows: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Cut planned rows ``[n, PLANNED]`` into batches; the last partial one is padded with throw-away slots."""
    out = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        if len(chunk) < batch_size:
            chunk = np.concatenate([chunk, _padding(batch_size - len(chunk))])
        out.append(chunk)
    return out


def plan_stream(key, rows: np.ndarray, plan_next, batch_size: int):
    """Batches of this pass, then the next epoch's speculatively (pure samplers only), else padding."""
    while True:
        for b, batch in enumerate(batches_of(rows, batch_size)):
            yield key, b, batch
        if key is None:
            break
        sid, epoch, _ = key
        key, rows = (sid, epoch + 1, 0), plan_next(epoch + 1)
    pad = _padding(batch_size)
    while True:
        yield "pad", 0, pad


class ExecutorFailed(Exception):
    """An executor's ``run`` failed in a way its ``recover`` can repair; then the facade resumes the pass."""


class _PipelineFailed(ExecutorFailed):
    """DALI's pipeline raised (its decoder refused a file, typically); the pipeline is unusable now."""

    def __init__(self, error: BaseException, in_flight: list[np.ndarray]):
        super().__init__(str(error))
        self.error, self.in_flight = error, in_flight


class _PipelineThread:
    """Runs DALI's iterator in a thread of its own; the iterating thread waits with a short timeout.

    DALI can block forever when a reader worker dies mid-batch (inside ``multiprocessing``'s
    ``Condition.notify``: the dead worker never wakes). Waiting here instead, in whatever thread
    iterates, lets that thread notice the death within ``POLL_S`` and raise; and a Ctrl-C during the
    wait leaves the request running to completion, so the loader stays consistent.
    """

    POLL_S = 0.1

    def __init__(self):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._last = 0
        self._thread = threading.Thread(target=self._serve, name="dali-backend-pipeline", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            if request is None:
                return
            rid, fn = request
            try:
                self._results.put((rid, True, fn()))
            except BaseException as e:  # handed to the waiting thread
                self._results.put((rid, False, e))
            # between requests this thread holds nothing: a request's function is a bound method of
            # the runner, and kept in this frame it would keep a dropped loader's pipeline, workers and
            # shared memory alive until exit
            request = fn = None

    def submit(self, fn) -> int:
        """Queue ``fn``; returns the request's number, which :meth:`wait` takes."""
        self._last += 1
        rid = self._last
        self._requests.put((rid, fn))
        return rid

    def wait(self, rid: int, poll, deadline: float | None = None):
        """The result of request ``rid`` (results of older requests, left by an interrupted wait, are
        dropped); ``poll()`` runs between timeouts (it raises to give up), and at ``deadline``
        (``time.monotonic()``) at the latest, so a timeout shorter than ``POLL_S`` is honoured."""
        while True:
            step = self.POLL_S if deadline is None else min(self.POLL_S, max(0.0, deadline - time.monotonic()))
            try:
                got, ok, value = self._results.get(timeout=step)
            except queue.Empty:
                poll()
                continue
            if got < rid:
                continue
            if ok:
                return value
            raise value

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread; False if it is stuck in DALI (then its pipeline must never be destroyed)."""
        self._requests.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


_STUCK: list = []  # pipelines whose thread never came back: destroying them would hang


class _DaliRunner:
    """Runs the DALI pipeline over an endless slot stream and cuts it into exact epochs.

    ``broken`` is set when the pipeline can no longer be trusted (DALI raised, a worker died, an
    interruption at an unknown point); the loader then builds a new runner for the next batch or pass.
    """

    def __init__(self, dataset, batch_size: int, backend: str, device_id: int | None, num_workers: int,
                 prefetch_queue_depth: int, hw_decoder_load: float, py_start_method: str | None, on_error: str,
                 timeout: float = 0.0, worker_init_fn=None):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        from . import pipeline

        self.dataset, self.batch_size = dataset, batch_size
        self.backend, self.on_error, self.timeout = backend, on_error, timeout
        self.gpu = gpu = backend == "dali-gpu"
        self.lookahead = prefetch_queue_depth + 4  # batches written ahead of consumption
        self.pipe = self.iterator = self._caller = self.ring = self._handoff = None
        self.broken: BaseException | None = None
        self.closed = False
        self._pid = os.getpid()
        py_start_method = choose_start_method(py_start_method)  # may refuse: before any shared memory exists
        self.ring = SlotRing(capacity=4 * self.lookahead * batch_size)
        source = DrawSource(dataset.reader, dataset.spec, on_error, self.ring)  # the dataset's reader: shares its cache
        # torchrun starts one process per GPU on a node: share the node's cores between them
        threads = num_workers if num_workers > 0 else max(1, len(os.sched_getaffinity(0)) // local_ranks()[1])
        # Python workers only read files (checked bytes); DALI's threads decode. One reader kept up
        # with 2 decoding threads (bench: 79.9 img/s with 1 reader, 78.6 with 2, +115 MB each).
        readers = min(8, max(1, threads // 4))
        if worker_init_fn is not None:
            source = WorkerInit(source, worker_init_fn, readers)
        try:
            self.pipe = pipeline.build_pipeline(dataset.spec, source, batch_size, device="gpu" if gpu else "cpu",
                                                device_id=device_id, num_threads=threads, py_num_workers=readers,
                                                py_start_method=py_start_method,
                                                prefetch_queue_depth=prefetch_queue_depth,
                                                hw_decoder_load=hw_decoder_load, seed=dataset.seed)
            with starting_workers():
                self.pipe.build()
        except BaseException:
            self.close()
            raise
        pool = getattr(self.pipe, "_py_pool", None)
        self._worker_pids = list(pool.pids()) if pool is not None and hasattr(pool, "pids") else []
        self.iterator = DALIGenericIterator([self.pipe], ["images", "labels", "slots"], auto_reset=False,
                                            prepare_first_batch=False)
        self.device = torch.device("cuda", device_id) if gpu else torch.device("cpu")
        self._queue: deque = deque()  # (key, batch_no, rows [B, 5]) written to the ring, not yet consumed
        self._stream = None
        self._next_slot = 0
        self._clean_interrupt = False  # set when a Ctrl-C arrives while waiting for DALI (a safe place)
        self._trim = EveryNth(8)  # a trim per batch also made every fresh output buffer fault in again
        self._caller = _PipelineThread()
        self._handoff = DeviceHandoff() if gpu else None  # DALI's GPU buffers never leave this runner
        _LIVE_RUNNERS.add(self)

    def check_workers(self) -> None:
        """Raise :class:`LoaderWorkerError` if one of this pipeline's reader workers has died."""
        if self.closed or os.getpid() != self._pid:
            return
        for pid in self._worker_pids:
            if _process_dead(pid):
                error = LoaderWorkerError(
                    f"DALI's Python reader worker (pid {pid}) died (killed by a signal, crashed or out of memory); "
                    "this pass over the data stops here, and the next one starts new workers (check the system log "
                    "for the OOM killer)")
                self.broken = self.broken or error
                raise error

    def _fill(self) -> None:
        ring = self.ring
        if ring is None:
            raise LoaderClosedError("the DaliLoader was closed while this iterator was open")
        while len(self._queue) < self.lookahead:
            key, b, rows = next(self._stream)
            slots = np.arange(self._next_slot, self._next_slot + len(rows), dtype=np.int64)
            for slot, r in zip(slots, rows):
                ring.write(int(slot), int(r[0]), int(r[1]), int(r[2]), int(r[3]))
            self._next_slot += len(rows)
            self._queue.append((key, b, np.concatenate([slots[:, None], rows], axis=1)))

    # ------------------------------------------------------------------ running
    def _produce(self):
        """In the pipeline thread: DALI's next batch (and, on the GPU, an event marking its copy done)."""
        out = next(self.iterator)[0]
        if not self.gpu:
            return out, None
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        return out, done

    def _call(self, keep: bool = True):
        """One batch from DALI, waited for in this thread (any thread) while watching the workers.

        On the GPU a kept batch is copied into torch-owned memory on the caller's stream (see
        :mod:`dali_backend.handoff`); a batch that is dropped (``keep=False``) is not.
        A Ctrl-C during the wait leaves DALI to finish the batch in its thread; the runner stays
        consistent (that batch was already taken off the schedule) and the next call drops its result.
        """
        caller = self._caller
        if caller is None:
            raise LoaderClosedError("the DaliLoader was closed while this iterator was open")
        rid = caller.submit(self._produce)
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None

        def poll():
            self.check_workers()
            if deadline is not None and time.monotonic() > deadline:
                error = LoaderTimeoutError(f"DALI delivered no batch within timeout={self.timeout:g} s (slow storage? "
                                           "raise timeout=, or 0 for none); the next pass starts a new pipeline")
                self.broken = self.broken or error
                raise error

        try:
            out, done = caller.wait(rid, poll, deadline)
        except KeyboardInterrupt:
            self._clean_interrupt = True
            raise
        if done is not None:  # the caller's stream (maybe not the default one) waits for DALI's work
            torch.cuda.current_stream(self.device).wait_event(done)
            if keep:
                out = self._handoff.take(out)
        return out

    def _run_one(self, expected: np.ndarray, keep: bool = True):
        self.check_workers()
        try:
            out = self._call(keep)
        except (KeyboardInterrupt, LoaderWorkerError, LoaderTimeoutError):
            raise
        except StopIteration as e:
            raise RuntimeError("DALI ended the stream unexpectedly; this is a bug in dali_backend, please report it") from e
        except Exception as e:  # DALI raised: its pipeline is invalid from now on
            self.check_workers()  # "Worker data receiving interrupted": say which worker died
            raise _PipelineFailed(e, [expected] + [rows for _, _, rows in self._queue]) from e
        meta = out["slots"].cpu().numpy().reshape(len(expected), -1)
        if not np.array_equal(meta[:, :ROW], expected):
            raise RuntimeError(f"DALI returned slots {meta[:, 0].tolist()} where {expected[:, 0].tolist()} were planned; "
                               "this is a bug in dali_backend, please report it")
        return out, meta[:, Col.SERVED]

    def _restart(self, stream) -> None:
        """Switch to ``stream``: batches already scheduled still run (DALI may be decoding them); drop them."""
        stale = len(self._queue)
        self._stream = stream
        for _ in range(stale):
            self._fill()  # DALI blocks on unwritten slots while it prefetches: stay ahead at all times
            _, _, rows = self._queue.popleft()
            self._run_one(rows, keep=False)  # the outputs of stale batches are dropped

    def _guarded(self, fn, *args):
        """Run a step; anything but a clean interruption or a bad file leaves the runner broken."""
        if self.closed:
            raise LoaderClosedError("the DaliLoader was closed while this iterator was open; start a new pass "
                                    "with a new DaliLoader")
        if self.broken is not None:
            raise LoaderWorkerError("the DALI pipeline of this pass failed earlier; iterate the loader again "
                                    "to start a new one") from self.broken
        self._clean_interrupt = False
        try:
            return fn(*args)
        except KeyboardInterrupt:
            if not self._clean_interrupt:  # interrupted outside the wait for DALI: state unknown
                self.broken = self.broken or KeyboardInterrupt()
            raise
        except BadImageError:
            raise
        except BaseException as e:
            self.broken = self.broken or e
            raise

    def _next_batch(self):
        self._fill()
        _, _, expected = self._queue.popleft()
        out, served = self._run_one(expected)
        return expected, out, served

    def run(self, key, rows: np.ndarray, plan_next):
        """Yield ``(uint8 images, labels, planned, served, positions, epochs)`` for planned ``rows [n, 4]``.

        ``key`` names the pass (``(plan id, epoch, first batch)``) when ``plan_next(epoch)`` can plan
        the next epoch ahead (pure samplers); the batches DALI already prefetched for it are used then.
        """
        n_batches = -(-len(rows) // self.batch_size)
        if key is None or not self._queue or self._queue[0][0] != key or self._queue[0][1] != 0:
            # leftovers of a break, a resumption or a wrong guess: run and drop them
            self._guarded(self._restart, plan_stream(key, rows, plan_next, self.batch_size))
        labels_all = self.dataset.index.labels
        for _ in range(n_batches):
            if not self.gpu:  # CPU batches churn the host heap; GPU batches live in DALI's device pools
                self._trim()  # earlier batches are gone by now: keep RSS flat
            expected, out, served = self._guarded(self._next_batch)
            keep = expected[:, Col.KIND] == KIND_DRAW
            bad = np.flatnonzero(keep & (served == SERVED_BAD))
            if bad.size:
                raise self.bad_image(expected[bad[0]])
            images, labels = out["images"], out["labels"].reshape(-1)
            served = served[keep]
            want = labels_all[served]
            if not np.array_equal(labels[torch.from_numpy(keep).to(labels.device)].cpu().numpy(), want):
                raise RuntimeError("labels from DALI do not match the index; this is a bug in dali_backend, please report it")
            if not keep.all():
                images = images[torch.from_numpy(keep).to(images.device)]
            yield images, torch.from_numpy(want.copy()).to(self.device), expected[keep, Col.INDEX], served, \
                expected[keep, Col.POSITION], expected[keep, Col.EPOCH]

    def bad_image(self, row: np.ndarray) -> BadImageError:
        """The error a reader worker met for the draw of slot ``row``, derived again here with its fields."""
        _, index, epoch, position, _ = (int(v) for v in row)
        reader = self.dataset.reader
        try:
            reader.serve(index, epoch, position, self.on_error, lambda j: reader.read(j, epoch))
        except BadImageError as e:
            return e
        return BadImageError(reader.path(index), index, int(reader.labels[index]), epoch,
                             "could not be read by the loader's reader process, though it reads now (did it change "
                             "while training?)")

    def close(self) -> None:
        if os.getpid() != self._pid:
            return  # a forked copy: the creator owns the pipeline and the shared memory
        self.closed = True
        _LIVE_RUNNERS.discard(self)
        if self._caller is not None and not self._caller.stop():
            _STUCK.append((self.pipe, self.iterator, self._caller))  # destroying them would hang this thread
        self._caller = None
        if self._handoff is not None:
            self._handoff.drain()  # DALI's buffers outlive the copies made from them
        self.iterator = None
        self.pipe = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None

    def __del__(self):  # the runner outlives its DaliLoader while an iteration still holds it
        try:
            self.close()
        except Exception:
            pass


class _DaliExecutor:
    """The DALI executor: planned batches in, uint8 batches out, through a :class:`_DaliRunner`.

    The runner is rebuilt when it fails (a dead worker, DALI's error, an interruption at an unknown
    point). When DALI raises, ``run`` raises :class:`ExecutorFailed`; ``recover`` finds the file
    DALI's decoder refused among the draws in flight and marks it refused for the reader (``on_error``
    then applies to it), and the facade resumes at the batch that failed.
    """

    def __init__(self, dataset, on_error: str, runner_args: tuple):
        self.dataset, self.on_error, self._runner_args = dataset, on_error, runner_args
        self.runner: _DaliRunner | None = _DaliRunner(*runner_args)
        self.device = self.runner.device

    def run(self, rows: np.ndarray, key, plan_next):
        """Batches of ``rows``; see :meth:`_DaliRunner.run`."""
        return self._live_runner().run(key, rows, plan_next)

    def recover(self, failure: ExecutorFailed) -> None:
        """Close the failed pipeline and mark the file its decoder refused (or raise DALI's error)."""
        if self.runner is not None:
            self.runner.close()
        self._refuse_files_dali_failed_on(failure)

    def _live_runner(self) -> _DaliRunner:
        runner = self.runner
        if runner is None or runner.broken is not None:
            if runner is not None:
                log.info("DaliLoader: starting a new DALI pipeline (the previous one failed: %s)",
                         str(runner.broken).splitlines()[0] if str(runner.broken) else type(runner.broken).__name__)
                runner.close()
            self.runner = runner = _DaliRunner(*self._runner_args)
        return runner

    def _refuse_files_dali_failed_on(self, failure: ExecutorFailed) -> None:
        """Find the file(s) DALI's decoder refused among the draws in flight and mark them refused.

        DALI's pipeline cannot skip a sample, and its error names only the position in some prefetched
        batch ("Failed to decode sample #3"). The draws in flight at that position (then all of them)
        are served again here as the worker served them and decoded with OpenCV, the fallback's decoder.
        If none is refused, the error is DALI's own, and it is raised.
        """
        import re

        import cv2

        reader, text = self.dataset.reader, str(failure.error)
        found = re.search(r"sample #(\d+)", text)
        if found is None and "decod" not in text.lower():  # not a decoder: a reader callback raised, say
            raise LoaderWorkerError(f"DALI's pipeline failed: {text.strip()[:3000]}; the next pass starts a new "
                                    "pipeline") from failure.error
        rows = np.concatenate(failure.in_flight)
        rows = rows[rows[:, Col.KIND] == KIND_DRAW]
        ordered = [np.concatenate([b[int(found.group(1)):int(found.group(1)) + 1] for b in failure.in_flight]), rows] \
            if found else [rows]
        flag = cv2.IMREAD_GRAYSCALE if self.dataset.spec.color == "gray" else cv2.IMREAD_COLOR
        noise = ("pipeline object is no longer valid", "critical error", "error in", "encountered", "file ")
        detail = next((line.strip() for line in reversed(text.splitlines())
                       if line.strip() and not any(n in line.lower() for n in noise) and "sample #" not in line), "")[:200]
        for candidates in ordered:
            refused = []
            for _, index, epoch, position, kind in candidates.tolist():
                if kind != KIND_DRAW:
                    continue
                try:
                    served, data = reader.serve(index, epoch, position, self.on_error, lambda j: reader.read(j, epoch))
                except BadImageError:
                    continue  # served as a marker; not what DALI decoded
                if served not in reader.refused and cv2.imdecode(data, flag) is None:
                    reader.refused[served] = f"the JPEG decoder refused it ({detail or 'corrupt JPEG data'})"
                    refused.append(reader.path(served))
            if refused:
                log.warning("DaliLoader: DALI's decoder refused %s; on_error=%r applies to it from now on, and the "
                            "pass resumes at the batch that failed with a new pipeline", ", ".join(refused), self.on_error)
                return
        raise LoaderWorkerError(f"DALI's pipeline failed and none of the {len(rows)} files in flight fails OpenCV's "
                                f"decoder, so the file cannot be named: {text.strip()[:1500]}. The next iteration "
                                "starts a new pipeline; backend='torch' decodes with OpenCV instead") from failure.error

    def abandon(self) -> None:
        """A pass ended with an error: nothing to stop (the runner keeps or rebuilds its pipeline)."""

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None


class DaliLoader(EpochLoaderMixin):
    """Drop-in for ``DataLoader`` over an :class:`ImageDataset`, on DALI when it can.

    One facade over two executors: DALI's graph (GPU or CPU operators) or OpenCV in DataLoader
    workers. The facade owns the arguments, the passes and epochs, the plan of each pass (which draws,
    in which batches: :func:`~dali_backend.sampler.plan_epoch`), accounting, resumption, bad-file
    errors and normalisation; an executor only turns planned batches into uint8 pixels.

    Passes and epochs (as ``DataLoader``): each ``iter()`` is a pass over one epoch. A pass after
    ``set_epoch(e)`` (or ``load_state_dict``, or the sampler's own ``set_epoch``) runs epoch ``e``;
    a pass without one runs the next epoch, so a loop that never calls ``set_epoch`` still gets a new
    order and new augmentation every pass, like ``DataLoader(shuffle=True)``. Starting a pass while
    another is open makes the older iterator raise :class:`StaleIteratorError` on its next batch:
    no sample is ever yielded twice or counted twice.

    Args (``DataLoader``'s, in its order; each is honoured where it has a meaning):
        dataset: an :class:`ImageDataset` (index, augmentation spec and seed).
        batch_size: samples per batch.
        shuffle: shuffle each epoch when no ``sampler`` is given (every sample once).
        sampler: a :class:`WeightedSampler` (recommended) or any sampler of indices (see
            :func:`~dali_backend.sampler.as_draw` for how an index becomes a draw).
        batch_sampler: not supported (batches are planned from ``sampler`` and ``batch_size``).
        num_workers: DALI threads (0: the cores of this process, shared between torchrun ranks;
            Python file readers: a quarter of that, 1 to 8), or the torch backend's workers.
        collate_fn: not supported (batches are assembled by the loader); use ``batch_transform``.
        pin_memory: the torch backend pins its batches (DALI: no effect, warns).
        drop_last: drop the last partial batch of each epoch.
        timeout: seconds to wait for one batch (0: no limit), on every backend: then
            :class:`LoaderTimeoutError` (a dead worker raises :class:`LoaderWorkerError` at once anyway).
        worker_init_fn: called with the worker id in each worker (DALI: each Python reader worker).
        multiprocessing_context: the torch backend's; on DALI a ``"fork"``/``"spawn"`` context sets
            ``py_start_method``.
        generator: seeds the default sampler (``generator.initial_seed()``) when no sampler is given.
        prefetch_factor: the torch backend's; on DALI it sets ``prefetch_queue_depth``.
        persistent_workers: the torch backend keeps its workers between passes (default: yes when
            ``num_workers > 0``, unlike DataLoader: re-forking them every epoch is slow); DALI's
            workers always persist.
        pin_memory_device: the torch backend's, with ``pin_memory``.
        in_order: batches always come in order (``False`` warns).
        device: ``"auto"`` (GPU when CUDA is available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        backend: ``"auto"``, ``"dali"`` (DALI even on the CPU; raises when DALI is missing) or ``"torch"``.
        seed: seed of the default sampler (``generator`` wins when both are given). Neither given: a
            shuffle follows ``torch.manual_seed`` as ``DataLoader`` does (one draw from torch's global
            RNG when the loader is made); in a distributed run (``torch.distributed`` initialised,
            world size > 1) it is 0, as ``DistributedSampler``'s, because ranks' global RNGs may differ
            and every rank must draw the same order: pass ``seed=`` (the same on every rank) to vary it.
        prefetch_queue_depth: DALI batches prepared ahead.
        hw_decoder_load: share of JPEG decoding sent to the hardware decoder (A100/H100/H200).
        py_start_method: ``"fork"`` or ``"spawn"`` for DALI's reader workers (default None: fork, or
            spawn once the CUDA driver is initialised in this process, where DALI cannot fork). Workers
            start in ``__init__``: create loaders before ``model.cuda()`` or
            ``torch.cuda.is_available()`` to keep fork; spawn re-imports the main script, which then
            needs an ``if __name__ == "__main__":`` guard.
        on_error: ``"raise"`` or ``"skip"`` (default: the dataset's); see :mod:`dali_backend.reading`.
        return_meta: also yield each batch's identity (see below).
        batch_transform: ``fn(images, labels) -> (images, labels)`` applied to every batch after
            normalisation, on the loader's device (the GPU for ``dali-gpu``), the same on both
            backends: MixUp, CutMix, tensor transforms of other libraries.

    Yields ``(images, labels)``: the spec's dtype ``[B, 3, H, W]`` (on the GPU for ``dali-gpu``) and int64
    ``[B]``; with ``return_meta=True``, ``(images, labels, meta)`` where ``meta`` is a dict of
    ``"index"`` (sample served, int64 ``[B]``), ``"planned"`` (sample drawn; differs where
    ``on_error="skip"`` replaced a bad file), ``"epoch"``, ``"position"`` (the draw's place in the
    epoch's global draw), ``"path"`` (list of absolute paths) and ``"params"`` (list of dicts: each
    draw's augmentation parameters). ``.backend`` is ``"dali-gpu"``, ``"dali-cpu"`` or ``"torch"``.
    Arguments that have no effect on the chosen backend warn once.
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor: int | None = None, persistent_workers: bool | None = None,
                 pin_memory_device: str = "", in_order: bool = True, device: str = "auto", backend: Backend = "auto",
                 seed: int | None = None, prefetch_queue_depth: int = 2, hw_decoder_load: float = 0.65,
                 py_start_method: str | None = None, on_error: str | None = None, return_meta: bool = False,
                 batch_transform=None):
        from ._own import own

        ImageDataset = own("fallback.dataset").ImageDataset
        shuffle = bool(shuffle)
        if not isinstance(dataset, ImageDataset):
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
        if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"DaliLoader: batch_size={batch_size!r}; must be a positive integer")
        if not isinstance(num_workers, (int, np.integer)) or isinstance(num_workers, bool) or num_workers < 0:
            raise ConfigError(f"DaliLoader: num_workers={num_workers!r}; must be a non-negative integer")
        if sampler is not None and shuffle:
            raise ConfigError("DaliLoader: sampler and shuffle=True are mutually exclusive (as in DataLoader); drop one")
        if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
            raise ConfigError(f"DaliLoader: prefetch_factor={prefetch_factor!r}; must be a positive integer or None")
        if not isinstance(prefetch_queue_depth, int) or prefetch_queue_depth < 1:
            raise ConfigError(f"DaliLoader: prefetch_queue_depth={prefetch_queue_depth!r}; must be >= 1")
        if not isinstance(hw_decoder_load, (int, float)) or not 0.0 <= hw_decoder_load <= 1.0:
            raise ConfigError(f"DaliLoader: hw_decoder_load={hw_decoder_load!r}; must be a number in [0, 1]")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout < 0:
            raise ConfigError(f"DaliLoader: timeout={timeout!r}; must be a non-negative number of seconds (0: none)")
        self.backend, device_id, reason = choose_backend(device, backend)
        announce_backend(device, backend, self.backend, reason)
        dali = self.backend != "torch"
        context = multiprocessing_context
        context_method = context if isinstance(context, str) or context is None else context.get_start_method()
        ignored = {"pin_memory": (pin_memory, False, dali, "DALI batches come from DALI's own pinned or device memory"),
                   "pin_memory_device": (pin_memory_device, "", dali, "DALI places batches itself"),
                   "hw_decoder_load": (hw_decoder_load, 0.65, self.backend != "dali-gpu",
                                       "only the GPU has a hardware JPEG decoder"),
                   "prefetch_queue_depth": (prefetch_queue_depth, 2, not dali, "use prefetch_factor="),
                   "prefetch_factor": (prefetch_factor, None, not dali and num_workers == 0,
                                       "without worker processes batches are made on demand"),
                   "py_start_method": (py_start_method, None, not dali, "it starts DALI's reader workers"),
                   "in_order": (in_order, True, True, "batches always come in order"),
                   "multiprocessing_context": (context_method, None, dali and context_method not in (None, "fork", "spawn"),
                                               "DALI starts its reader workers with fork or spawn")}
        for name, (value, default, unused, why) in ignored.items():
            if unused and value != default:
                warnings.warn(f"DaliLoader: {name}={value!r} has no effect on the {self.backend} backend ({why})",
                              UserWarning, stacklevel=2)
        if generator is not None and sampler is None:
            seed = int(generator.initial_seed()) % 2**63
        if seed is None and sampler is None:
            seed = default_seed(shuffle)
        self.dataset, self.batch_size, self.num_workers = dataset, int(batch_size), int(num_workers)
        self.drop_last, self.pin_memory, self.timeout, self.epoch = bool(drop_last), pin_memory, timeout, 0
        self.sampler = sampler if sampler is not None else default_sampler(dataset.index, shuffle, seed)
        self.on_error = check_on_error(on_error or dataset.on_error)
        self.return_meta, self.batch_transform = bool(return_meta), batch_transform
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        # DataLoader attributes that training frameworks read
        self.batch_sampler, self.collate_fn, self.worker_init_fn, self.generator = None, None, worker_init_fn, generator
        self.prefetch_factor, self.persistent_workers = prefetch_factor, bool(persistent_workers) or dali
        self.multiprocessing_context, self.pin_memory_device, self.in_order = context, pin_memory_device, True
        self._closed = False
        self._pass = 0  # passes started; an iterator of an older pass is stale
        self._epoch_chosen = False  # set_epoch/load_state_dict since the last pass began
        self._last_pass_epoch: tuple | None = None  # (epoch, the sampler's set_epoch count) of the last pass
        if not dali:
            self._executor = own("fallback.executor").TorchExecutor(
                dataset, self.batch_size, self.on_error, num_workers=self.num_workers, pin_memory=pin_memory,
                timeout=timeout, worker_init_fn=worker_init_fn, prefetch_factor=prefetch_factor,
                persistent_workers=persistent_workers, multiprocessing_context=context, pin_memory_device=pin_memory_device)
        else:
            if py_start_method is None and context_method in ("fork", "spawn"):
                py_start_method = context_method
            if prefetch_factor is not None and prefetch_queue_depth == 2:
                prefetch_queue_depth = prefetch_factor
            # workers start now, before the user's CUDA work
            self._executor = _DaliExecutor(dataset, self.on_error, (
                dataset, self.batch_size, self.backend, device_id, self.num_workers, prefetch_queue_depth,
                hw_decoder_load, py_start_method, self.on_error, float(timeout), worker_init_fn))
        self.device = self._executor.device

    # ------------------------------------------------------------------ epochs and passes
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass (forwarded to the sampler's and the dataset's ``set_epoch``)."""
        super().set_epoch(epoch)
        self._epoch_chosen = True

    def _begin_pass(self) -> int:
        """Choose this pass's epoch: the one selected since the last pass, else the next one.

        Selected means ``set_epoch`` on the loader, ``load_state_dict``, or the sampler's own
        ``set_epoch`` (a :class:`WeightedSampler` counts its calls; other samplers are compared by
        their ``epoch`` value).
        """
        current = (self._sampler_epoch(), getattr(self.sampler, "epoch_calls", None))
        if self._last_pass_epoch is not None and not self._epoch_chosen and current == self._last_pass_epoch:
            super().set_epoch(current[0] + 1)
            current = (self._sampler_epoch(), getattr(self.sampler, "epoch_calls", None))
        self._epoch_chosen = False
        self._last_pass_epoch = current
        return current[0]

    def _rows(self, epoch: int) -> np.ndarray:
        """This rank's planned draws of ``epoch`` as ``[n, 4]`` (index, epoch, position, kind), cut by ``drop_last``."""
        return self._cut(self._plan(epoch))

    def _cut(self, rows: np.ndarray) -> np.ndarray:
        return rows[:len(rows) // self.batch_size * self.batch_size] if self.drop_last else rows

    def _plan(self, epoch: int) -> np.ndarray:
        """All of this rank's draws of ``epoch`` as ``[n, 4]`` rows (before ``drop_last``), checked."""
        rows = plan_epoch(self.sampler, epoch)
        n = len(self.dataset.index)
        if rows.size and (rows[:, 0].min() < 0 or rows[:, 0].max() >= n):
            bad = int(rows[(rows[:, 0] < 0) | (rows[:, 0] >= n), 0][0])
            raise IndexError(f"the sampler yielded sample index {bad}, outside [0, {n}) for the {n} samples of the "
                             "dataset's index; build the sampler on this index")
        return np.concatenate([rows, np.full((len(rows), 1), KIND_DRAW, np.int64)], axis=1)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:
            raise LoaderClosedError("this DaliLoader was closed; create a new one to iterate again")
        self._pass += 1
        return self._iterate(self._pass)

    def _check_current(self, token: int) -> None:
        if self._closed:
            raise LoaderClosedError("the DaliLoader was closed while this iterator was open; start a new pass "
                                    "with a new DaliLoader")
        if token != self._pass:
            raise StaleIteratorError("a newer pass over this DaliLoader was started (iter() was called again) while "
                                     "this iterator was open; this iterator is finished (one pass at a time, as "
                                     "DataLoader with persistent workers)")

    def _iterate(self, token: int):
        self._check_current(token)  # an iterator started after a newer one began must not start an epoch
        epoch = self._begin_pass()
        full = self._plan(epoch)
        self._begin_epoch(len(full))
        plan = self._cut(full)
        self._check_resumable(epoch, plan)
        spec = self.dataset.spec
        try:
            while True:
                rows = plan[self._batches_done * self.batch_size:]
                try:
                    for images, labels, planned, served, positions, epochs in self._run(epoch, rows):
                        self._check_current(token)
                        images = normalize(images, spec)
                        if self.batch_transform is not None:
                            images, labels = self.batch_transform(images, labels)
                        meta = self._batch_meta(planned, served, epochs, positions) if self.return_meta else None
                        self._account(planned, served, positions)  # counted once nothing can fail before the yield
                        yield (images, labels) if meta is None else (images, labels, meta)
                        self._check_current(token)
                    break
                except ExecutorFailed as failure:
                    self._executor.recover(failure)  # DALI: a file its decoder refused; then resume at this batch
                except (Exception, KeyboardInterrupt):
                    # Stop this pass's workers now, not when the collector gets to the traceback's cycle; an
                    # abandoned (GeneratorExit) or stale iterator must leave a shared executor alone.
                    if token == self._pass:
                        self._executor.abandon()
                    raise
            self._end_epoch()
        finally:  # also when the pass is left early (break, an error): no output memory stays resident
            release_pooled_outputs()

    def _run(self, epoch: int, rows: np.ndarray):
        key = (id(self.sampler), epoch, self._batches_done) if isinstance(self.sampler, WeightedSampler) else None
        return self._executor.run(rows, key, self._rows)

    @property
    def _runner(self) -> _DaliRunner | None:
        """The DALI executor's current runner (None on the torch backend)."""
        return getattr(self._executor, "runner", None)

    def close(self) -> None:
        """Stop the workers and free shared memory now (also done once nothing uses them).

        Iterators still open raise :class:`LoaderClosedError` on their next batch."""
        self._closed = True
        self._executor.close()
        release_pooled_outputs()

    def __enter__(self) -> DaliLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"DaliLoader(backend={self.backend!r}, n={len(self.dataset)}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers}, drop_last={self.drop_last}, sampler={self.sampler!r})")


class FallbackLoader(DaliLoader):
    """DataLoader-compatible iterable yielding ``(images [B, 3, H, W], labels [B] int64)`` on the CPU.

    ``DaliLoader`` with ``backend="torch"``, kept for code that names the CPU path explicitly (also
    importable as ``fallback.FallbackLoader``). Args are ``DaliLoader``'s (``DataLoader``'s), without
    ``device``/``backend``; ``seed`` seeds the default sampler.
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool | None = None, sampler=None,
                 num_workers: int = 0, drop_last: bool = False, pin_memory: bool = False, seed: int | None = None,
                 **kwargs):
        for name in ("device", "backend"):
            if name in kwargs:
                raise ConfigError(f"FallbackLoader: {name}={kwargs[name]!r}; it runs on the CPU with the torch "
                                  "backend: drop it, or use DaliLoader, which chooses between backends")
        super().__init__(dataset, batch_size, shuffle, sampler, num_workers=num_workers, drop_last=drop_last,
                         pin_memory=pin_memory, seed=seed, device="cpu", backend="torch", **kwargs)
