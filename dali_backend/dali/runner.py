"""The DALI runner: a pipeline over an endless slot stream, cut into exact epochs, run in a thread of its
own; and what a forked process must do with the parent's pipelines.

The runner never lets DALI see an epoch end (see :mod:`dali_backend.dali.wire`):
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
import dataclasses
import functools
import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections import deque

import numpy as np
import torch

from ..core.boundary import Batch, Kind, SampleSet, padding_rows
from ..errors import BadImageError, ExecutorFailed, LoaderClosedError, LoaderTimeoutError, LoaderWorkerError
from ..util.memory import BATCHES_PER_TRIM, EveryNth
from ..core.reading import SERVED_BAD
from ..core.transfer import to_device
from .devices import choose_start_method, local_ranks
from .handoff import DeviceHandoff, as_uint16
from .targetgraph import batch_targets
from ..transforms.targets import BoxPolicy
from .wire import ROW, Col, DrawSource, SlotRing, note_bytes, read_bad_draw, read_params, reader_ops
from .workers import WorkerInit, starting_workers

log = logging.getLogger("dali_backend")


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




def _hold_second_run(pipe, held: list) -> None:
    """Make ``pipe``'s second ``schedule_run`` (the one DALI's iterator makes before it returns the first
    batch) return at once, leaving the run in ``held`` to be made before the next batch is asked for; the
    pipeline's own method serves every other call. The pipeline is held weakly (no cycle through itself)."""
    ref, calls, own = weakref.ref(pipe), [0], type(pipe).schedule_run

    def schedule_run():
        calls[0] += 1
        target = ref()
        if calls[0] == 2:
            del target.schedule_run  # the class's method from now on
            held.append(functools.partial(_run_as_iterator, target, own))
            return
        own(target)

    pipe.schedule_run = schedule_run


def _run_as_iterator(pipe, schedule_run) -> None:
    """``schedule_run(pipe)`` as DALI's iterator makes it (under its API type, which a pipeline checks)."""
    from nvidia.dali import types

    with pipe._check_api_type_scope(types.PipelineAPIType.ITERATOR):
        schedule_run(pipe)


def batches_of(rows: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Cut planned rows into batches; the last partial one is padded with throw-away rows."""
    out = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        if len(chunk) < batch_size:
            chunk = np.concatenate([chunk, padding_rows(batch_size - len(chunk))])
        out.append(chunk)
    return out


def plan_stream(key, rows: np.ndarray, plan_next, batch_size: int):
    """Batches of this pass, then the next epoch's speculatively (pure samplers only), else padding
    (``plan_next`` returning None or no rows: nothing to plan ahead)."""
    while True:
        for b, batch in enumerate(batches_of(rows, batch_size)):
            yield key, b, batch
        if key is None:
            break
        sid, epoch, _ = key
        key, rows = (sid, epoch + 1, 0), plan_next(epoch + 1)
        if rows is None or not len(rows):  # nothing to plan ahead (another index next, or an empty epoch)
            break
    pad = padding_rows(batch_size)
    while True:
        yield "pad", 0, pad




class _PipelineFailed(ExecutorFailed):
    """DALI's pipeline raised (its decoder refused a file, typically); the pipeline is unusable now."""

    def __init__(self, error: BaseException, in_flight: list[np.ndarray]):
        super().__init__(str(error))
        self.error, self.in_flight = error, in_flight


class ClipChanged(ExecutorFailed):
    """A frame of a clip went bad after the clip's replacement was chosen (it changed, or a read failed,
    between two reader processes' reads): some frames of the clip were served, this one not. The batch
    runs again on a new pipeline, whose readers choose again (``on_error="skip"``, clips)."""

    def __init__(self, bad):
        super().__init__(f"{bad.path}: changed while its clip was being read ({bad.reason})")
        self.bad = bad


class PipelineThread:
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


class DaliRunner:
    """Runs the DALI pipeline over an endless slot stream and cuts it into exact epochs.

    ``broken`` is set when the pipeline can no longer be trusted (DALI raised, a worker died, an
    interruption at an unknown point); the loader then builds a new runner for the next batch or pass.
    """

    kinds: tuple[str, ...] = ()  # the index's targets the batches carry ("masks", "boxes"; dali.targetgraph)

    def __init__(self, samples: SampleSet, batch_size: int, gpu: bool, device_id: int | None, num_workers: int,
                 prefetch_queue_depth: int, hw_decoder_load: float, py_start_method: str | None, on_error: str,
                 timeout: float = 0.0, worker_init_fn=None, with_params: bool = False, clips=None):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        from . import graph

        self.samples, self.batch_size = samples, batch_size
        self.on_error, self.timeout, self.with_params = on_error, timeout, with_params
        self.gpu = gpu
        self.lookahead = prefetch_queue_depth + 4  # batches written ahead of consumption
        self.pipe = self.iterator = self._caller = self.ring = self._handoff = None
        self._held_runs: list = []  # a run of the pipeline held back (_hold_second_run); close() drops it
        self._first_alone = False
        self.broken: BaseException | None = None
        self.closed = False
        self._pid = os.getpid()
        py_start_method = choose_start_method(py_start_method)  # may refuse: before any shared memory exists
        index = samples.index
        longest = len(os.fsencode(index.root)) + 1 + int(np.diff(index.paths.offsets).max(initial=0))
        # clips under skip: the first reader of a clip chooses its replacement for all (SlotRing.decide)
        self.clip_len = clips.clip_len if clips is not None and on_error == "skip" else None
        targets = index.annotations  # an index with targets: masks through the graph, boxes in the notes
        self.ring = SlotRing(4 * self.lookahead * batch_size, note_bytes(samples.spec, longest, with_params, targets))
        # the dataset's reader: shares its cache
        # a CPU graph: the readers decode and run the leading operations whose kernel is DALI's (wire.reader_ops)
        self.reader_ops = reader_ops(samples.spec, gpu)
        source = DrawSource(samples.reader, samples.spec, on_error, self.ring, with_params, clips, targets,
                            samples.box_policy or BoxPolicy(), self.reader_ops)
        self.kinds = () if targets is None else targets.kinds
        # torchrun starts one process per GPU on a node: share the node's cores between them
        threads = num_workers if num_workers > 0 else max(1, len(os.sched_getaffinity(0)) // local_ranks()[1])
        # Python workers read files (checked bytes) and DALI's threads decode: one reader kept up with 2
        # decoding threads (bench: 79.9 img/s with 1 reader, 78.6 with 2, +115 MB each). When the readers
        # decode and run the first operations too (reader_ops), one per thread: 2 threads, 640x480 ->
        # 256x256, 279-285 img/s with 2 readers against 190-203 with 1 and 228 decoding in DALI (one run).
        readers = min(8, threads) if self.reader_ops else min(8, max(1, threads // 4))
        if worker_init_fn is not None:
            source = WorkerInit(source, worker_init_fn, readers)
        try:
            self.pipe = graph.build_pipeline(samples.spec, source, batch_size, device="gpu" if gpu else "cpu",
                                                device_id=device_id, num_threads=threads, py_num_workers=readers,
                                                py_start_method=py_start_method,
                                                prefetch_queue_depth=prefetch_queue_depth,
                                                hw_decoder_load=hw_decoder_load, seed=samples.seed,
                                                masks="masks" in self.kinds, fill_mask=samples.fill_mask,
                                                reader_ops=self.reader_ops)
            with starting_workers():
                self.pipe.build()
        except BaseException:
            self.close()
            raise
        pool = getattr(self.pipe, "_py_pool", None)
        self.worker_pids = list(pool.pids()) if pool is not None and hasattr(pool, "pids") else []
        outputs = ["images", "labels", "slots"] + (["sizes"] if samples.spec.pad_batch is not None else []) \
            + (["masks"] if "masks" in self.kinds else [])
        self.iterator = DALIGenericIterator([self.pipe], outputs, auto_reset=False,
                                            prepare_first_batch=False)
        self.device = torch.device("cuda", device_id) if gpu else torch.device("cpu")
        self._queue: deque = deque()  # (key, batch_no, rows [B, 5]) written to the ring, not yet consumed
        self._stream = None
        self._next_slot = 0
        # With the readers decoding (reader_ops), the pipeline's first batch comes out alone: DALI's iterator
        # returns a batch only after its next run has received the next batch's input (``schedule_run``
        # inside ``__next__``), so the first waited for the readers' second batch, and the readers on it took
        # half the cores from the graph's work on the first (2048x1536, 2 threads: 0.82-0.87 s after the
        # build, against 0.58-0.63 decoding in DALI). That run is held to the next call (_hold_second_run),
        # and the readers get the next batches' rows once the first is out.
        self._first_alone = bool(self.reader_ops)
        if self._first_alone:
            _hold_second_run(self.pipe, self._held_runs)
        self._clean_interrupt = False  # set when a Ctrl-C arrives while waiting for DALI (a safe place)
        self._trim = EveryNth(BATCHES_PER_TRIM)
        self._caller = PipelineThread()
        self._handoff = DeviceHandoff() if gpu else None  # DALI's GPU buffers never leave this runner
        _LIVE_RUNNERS.add(self)

    def check_workers(self) -> None:
        """Raise :class:`LoaderWorkerError` if one of this pipeline's reader workers has died."""
        if self.closed or os.getpid() != self._pid:
            return
        for pid in self.worker_pids:
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
        while len(self._queue) < (1 if self._first_alone else self.lookahead):
            key, b, rows = next(self._stream)
            slots = np.arange(self._next_slot, self._next_slot + len(rows), dtype=np.int64)
            for slot, r in zip(slots, rows):
                ring.write(int(slot), int(r[0]), int(r[1]), int(r[2]), int(r[3]))
            self._next_slot += len(rows)
            self._queue.append((key, b, np.concatenate([slots[:, None], rows], axis=1)))

    # ------------------------------------------------------------------ running
    def _produce(self):
        """In the pipeline thread: DALI's next batch (and, on the GPU, an event marking its copy done).

        On the GPU the thread works on the loader's device (a new thread's current device is GPU 0:
        torch work there, DALI's iterator's included, would otherwise initialise CUDA on GPU 0)."""
        if self._held_runs:
            self._held_runs.pop()()  # the pipeline's second run, held back so that the first batch came out alone
        if not self.gpu:
            return next(self.iterator)[0], None
        with torch.cuda.device(self.device):
            out = next(self.iterator)[0]
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
        return out, done

    def _call(self, keep: bool = True):
        """One batch from DALI, waited for in this thread (any thread) while watching the workers.

        On the GPU a kept batch is copied into torch-owned memory on the caller's stream (see
        :mod:`dali_backend.dali.handoff`); a batch that is dropped (``keep=False``) is not.
        A Ctrl-C during the wait leaves DALI to finish the batch in its thread; the runner stays
        consistent (that batch was already taken off the schedule) and the next call drops its result.
        """
        caller = self._caller
        if caller is None:
            raise LoaderClosedError("the DaliLoader was closed while this iterator was open")
        rid = caller.submit(self._produce)
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None

        def poll():
            if self.closed:  # close() from another thread: stop waiting, even for a pipeline thread that is stuck
                raise LoaderClosedError("the DaliLoader was closed while this iterator was waiting for a batch; "
                                        "start a new pass with a new DaliLoader")
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
        if done is not None:  # GPU: waited for on the caller's stream; a kept batch copied into torch's memory
            out = self._handoff.receive(out, done, keep)
        return out

    def _run_one(self, expected: np.ndarray, keep: bool = True):
        self.check_workers()
        # cleared whatever the call does: after a Ctrl-C the pipeline thread still finishes the first batch
        # and holds the second run, which then needs the next batch's rows (the next _fill writes them all)
        first, self._first_alone = self._first_alone, False
        try:
            out = self._call(keep)
        except (KeyboardInterrupt, LoaderWorkerError, LoaderTimeoutError, LoaderClosedError):
            raise
        except StopIteration as e:
            raise RuntimeError("DALI ended the stream unexpectedly; this is a bug in dali_backend, please report it") from e
        except Exception as e:  # DALI raised: its pipeline is invalid from now on
            self.check_workers()  # "Worker data receiving interrupted": say which worker died
            raise _PipelineFailed(e, [expected] + [rows for _, _, rows in self._queue]) from e
        if first:  # the pipeline's first batch is out: the readers may go ahead now
            self._fill()
        meta = out["slots"].cpu().numpy().reshape(len(expected), -1)
        if not np.array_equal(meta[:, :ROW], expected):
            raise RuntimeError(f"DALI returned slots {meta[:, 0].tolist()} where {expected[:, 0].tolist()} were planned; "
                               "this is a bug in dali_backend, please report it")
        return out, meta[:, Col.SERVED:]

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
        out, returned = self._run_one(expected)
        return expected, out, returned

    def run(self, key, rows: np.ndarray, plan_next):
        """Yield a :class:`~dali_backend.core.boundary.Batch` per batch of planned ``rows``.

        ``key`` names the pass (``(plan id, epoch, first batch)``) when ``plan_next(epoch)`` can plan
        the next epoch ahead (pure samplers); the batches DALI already prefetched for it are used then.
        """
        n_batches = -(-len(rows) // self.batch_size)
        if key is None or not self._queue or self._queue[0][0] != key or self._queue[0][1] != 0:
            # leftovers of a break, a resumption or a wrong guess: run and drop them
            self._guarded(self._restart, plan_stream(key, rows, plan_next, self.batch_size))
        for _ in range(n_batches):
            if not self.gpu:  # CPU batches churn the host heap; GPU batches live in DALI's device pools
                self._trim()  # earlier batches are gone by now: keep RSS flat
            expected, out, returned = self._guarded(self._next_batch)
            yield self._batch(expected, out, returned)

    def _batch(self, expected: np.ndarray, out: dict, returned: np.ndarray) -> Batch:
        """DALI's output for the slots ``expected``, padding removed, with the notes the workers left;
        ``returned``: the columns the workers appended to each slot row (``Col.SERVED`` on)."""
        keep = expected[:, Col.KIND] == Kind.DRAW
        rows, served = expected[keep], returned[keep, 0]
        read_s = float(returned[keep, Col.READ_NS - Col.SERVED].sum()) / 1e9
        # the readers' decoding and operations (wire.reader_ops): counted with DALI's threads' CPU
        work_s = float(returned[keep, Col.WORK_NS - Col.SERVED].sum()) / 1e9
        images, labels = out["images"], out["labels"].reshape(-1)
        if not keep.all():  # images may be on the GPU while labels (a CPU output) are not: a mask for each
            rows_kept = np.flatnonzero(keep)  # indices, not a boolean mask: a mask on the GPU syncs (nonzero)
            images = images.index_select(0, to_device(rows_kept, images.device))
            labels = labels.index_select(0, to_device(rows_kept, labels.device))
        good = served != SERVED_BAD
        want = self.samples.index.labels[served[good]]
        if not np.array_equal(labels.cpu().numpy()[good], want):
            raise RuntimeError("labels from DALI do not match the index; this is a bug in dali_backend, please report it")
        bad = tuple(self._bad_draw(int(slot)) for slot in rows[~good, Col.SLOT])
        if bad and self.clip_len is not None:  # whole clips, from the batch's first row on
            per_clip = good[:len(good) // self.clip_len * self.clip_len].reshape(-1, self.clip_len)
            mixed = np.flatnonzero(per_clip.any(axis=1) & ~per_clip.all(axis=1))
            if len(mixed):  # part of a clip served: a frame changed; name a bad frame of that clip
                k = mixed[0] * self.clip_len + int(np.flatnonzero(~per_clip[mixed[0]])[0])
                self.broken = error = ClipChanged(self._bad_draw(int(rows[k, Col.SLOT])))
                raise error
        params = None
        if self.with_params:
            params = [read_params(self.ring, int(r[Col.SLOT])) if ok else None for r, ok in zip(rows, good)]
        # pinned and non-blocking on the consumer's stream: a pageable copy would wait for the training step
        labels = to_device(np.where(good, self.samples.index.labels[np.maximum(served, 0)], -1), self.device)
        sizes = None
        if "sizes" in out:  # variable-size outputs: DALI padded to the largest of the batch, padding rows included
            sizes = out["sizes"].cpu().numpy().reshape(len(expected), -1)[keep, :2].astype(np.int64)
            m = self.samples.spec.pad_batch
            h, w = (-(-sizes[good].max(axis=0, initial=1) // m) * m).tolist() if good.any() else (m, m)
            images = images[:, :, :h, :w]
        targets = batch_targets(self.ring, self.kinds, out, keep, rows, good, None if sizes is None else (h, w)) \
            if self.kinds else {}
        return Batch(images=as_uint16(images), labels=labels, planned=rows[:, Col.INDEX], served=served,
                     positions=rows[:, Col.POSITION], epochs=rows[:, Col.EPOCH], params=params, bad=bad,
                     stages={"read": read_s, **({"decode+augment": work_s} if self.reader_ops else {})}, in_flight=len(self._queue), sizes=sizes, **targets)

    def _bad_draw(self, slot: int):
        """The bad draw a reader worker met in ``slot`` (its note; the path from the index if it did not fit)."""
        bad = read_bad_draw(self.ring, slot)
        if not bad.path:
            bad = dataclasses.replace(bad, path=self.samples.reader.path(bad.index))
        return bad

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
        self._held_runs.clear()  # it holds the pipeline, which must go now (its reader processes with it)
        self.pipe = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None

    def __del__(self):  # the runner outlives its DaliLoader while an iteration still holds it
        try:
            self.close()
        except Exception:
            pass


