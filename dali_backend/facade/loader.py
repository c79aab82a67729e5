"""``DaliLoader``: a drop-in for ``torch.utils.data.DataLoader``, one facade over two executors.

The facade chooses a backend (DALI on the GPU, DALI on the CPU, or the OpenCV executor of
:mod:`fallback.executor`) and owns what both share: the arguments, passes and epochs, the plan of each
pass (:func:`~dali_backend.sampling.sampler.plan_epoch`), accounting, resumption, bad-file errors,
normalisation, ``return_meta`` and ``batch_transform``. An executor only turns planned batches into
uint8 pixels.

The executors live below the facade: :mod:`dali_backend.dali` (DALI's graph on the GPU or on CPU
operators) and :mod:`fallback.executor` (OpenCV in ``DataLoader`` workers). The facade knows them by
their protocol and records (:mod:`dali_backend.core.boundary`): ``run(rows, key, plan_next)`` yields a
:class:`~dali_backend.core.boundary.Batch` per batch, ``recover(failure)`` repairs an
:class:`~dali_backend.errors.ExecutorFailed`, ``abandon()`` and ``close()``.
"""

from __future__ import annotations

import logging
import sys
import time
import weakref
from collections.abc import Iterator
from typing import Literal

import numpy as np
import torch

from . import accelerate_state
from .arguments import Backend, check_numbers, refuse_arguments, warn_unused, announce_backend, choose_backend
from ..core.boundary import Batch, Executor
from .executors import ExecutorSettings, executor_kind
from .changes import DataChanges
from .clipbatches import batches_of
from .epochs import Passes
from ..errors import ConfigError, ExecutorFailed, LoaderClosedError, StaleIteratorError
from ..core.reading import check_on_error
from ..sampling.sampler import default_sampler, default_seed
from .plans import make_plan
from .. import telemetry as _telemetry_api
from ..telemetry import LoaderTelemetry
from ..core.tensors import apply_batch_ops, batch_params, normalize, release_pooled_outputs

log = logging.getLogger("dali_backend")
__all__ = ["DaliLoader", "FallbackLoader", "choose_backend"]


class DaliLoader:
    """Drop-in for ``DataLoader`` over an :class:`ImageDataset`, on DALI when it can.

    One facade over two executors: DALI's graph (GPU or CPU operators) or OpenCV in DataLoader
    workers. The facade owns the arguments, the passes and epochs, the plan of each pass (which draws,
    in which batches: :func:`~dali_backend.sampling.sampler.plan_epoch`), accounting, resumption, bad-file
    errors and normalisation; an executor only turns planned batches into uint8 pixels.

    Passes and epochs (as ``DataLoader``): each ``iter()`` is a pass over one epoch. A pass after
    ``set_epoch(e)`` (or ``load_state_dict``, or the sampler's own ``set_epoch``) runs epoch ``e``;
    a pass without one runs the next epoch, so a loop that never calls ``set_epoch`` still gets a new
    order and new augmentation every pass, like ``DataLoader(shuffle=True)``. Starting a pass while
    another is open makes the older iterator raise :class:`StaleIteratorError` on its next batch:
    no sample is ever yielded twice or counted twice.

    The arguments are ``DataLoader``'s, in its order; each is honoured where it has a meaning.

    Args:
        dataset: an :class:`ImageDataset` (index, augmentation spec and seed).
        batch_size: samples per batch.
        shuffle: shuffle each epoch when no ``sampler`` is given (every sample once).
        sampler: a :class:`WeightedSampler` (recommended) or any sampler of indices (see
            :func:`~dali_backend.sampling.sampler.as_draw` for how an index becomes a draw); or a
            :class:`~dali_backend.sampling.clips.ClipSampler`: each draw is then a clip of ``T = clip_len`` frames,
            run as ``batch_size * T`` samples sharing the clip's position (so its augmentation
            parameters) and regrouped, and ``batch_size`` counts clips (see below); or an
            :class:`~dali_backend.sampling.grouping.AspectGroupedSampler` (batches of one aspect-ratio group,
            with a spec that pads variable-size batches and its own ``batch_size``).
        batch_sampler: not supported (batches are planned from ``sampler`` and ``batch_size``).
        num_workers: DALI threads (0: the cores of this process, shared between torchrun ranks;
            Python file readers: a quarter of that, 1 to 8), or the torch backend's workers.
            ``"auto"``: chosen by a short calibration on this data set, spec and batch size (the
            smallest setting within 5 % of the best; cached per machine and data set; see
            :mod:`dali_backend.facade.autotune`); the measurements are in ``loader.autotune``.
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
        backend: ``"auto"``, ``"dali"`` (DALI even on the CPU; raises when DALI is missing), ``"torch"``,
            ``"torch-threads"`` (the torch backend's work on ``num_workers`` threads of this process: no
            worker processes; :mod:`fallback.threads`), or the name of an executor registered in
            :mod:`dali_backend.facade.executors`.
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
        on_error: ``"raise"`` or ``"skip"`` (default: the dataset's); see :mod:`dali_backend.core.reading`.
        return_meta: also yield each batch's identity (see below).
        batch_transform: ``fn(images, labels) -> (images, labels)`` applied to every batch after
            normalisation, on the loader's device (the GPU for ``dali-gpu``), the same on both
            backends: MixUp, CutMix, tensor transforms of other libraries.
        telemetry: measure what :meth:`metrics` and :meth:`report` say (default; it costs a few
            clock reads per batch and per image). False: they raise, and the workers time nothing.

    Yields ``(images, labels)``: the spec's dtype ``[B, 3, H, W]`` (on the GPU for ``dali-gpu``) and int64
    ``[B]``; where the spec pads variable-size batches (``AugmentSpec(pad_batch=m)``),
    ``(images, labels, sizes)``: each batch padded with 0 to its largest height and width rounded up
    to a multiple of ``m``, and ``sizes`` int64 ``[B, 2]`` (on the CPU) the valid ``(height, width)`` of each
    image at its top left; with ``return_meta=True``, ``(images, labels, meta)`` where ``meta`` is a dict of
    ``"index"`` (sample served, int64 ``[B]``), ``"planned"`` (sample drawn; differs where
    ``on_error="skip"`` replaced a bad file), ``"epoch"``, ``"position"`` (the draw's place in the
    epoch's global draw), ``"padding"`` (bool ``[B]``: a draw that pads the ranks' shares to equal
    length, repeating a sample of the epoch; drop these rows before counting validation samples), ``"path"`` (list of absolute paths) and ``"params"`` (list of dicts: each
    draw's augmentation parameters). ``.backend`` is ``"dali-gpu"``, ``"dali-cpu"``, ``"torch"`` or ``"torch-threads"``.

    With a :class:`~dali_backend.sampling.clips.ClipSampler`, images are ``[B, T, 3, H, W]`` and labels the
    clips' ``[B]``; ``len()``, ``stats()`` and ``state_dict()`` count clips and batches of clips (not
    frames); ``meta`` holds ``"clip"``, ``"sequence"``, ``"epoch"`` and ``"position"`` per clip,
    ``"index"`` and ``"planned"`` ``[B, T]``, and ``"path"`` and ``"params"`` as B lists of T.
    ``on_error="skip"`` replaces a clip with a bad frame by a whole clip of its class (never one frame:
    that would put a foreign frame in the clip).
    Arguments that have no effect on the chosen backend warn once.

    Under Hugging Face Accelerate (an ``Accelerator`` in the process) a pass joins Accelerate's
    gradient state as its own loaders do: ``end_of_dataloader`` is True while the last batch is out and
    ``remainder`` holds the real rows of the last batch gathered from all processes, so that
    ``accelerator.gather_for_metrics`` counts each sample once (:mod:`dali_backend.facade.accelerate_state`).
    """

    # Accelerate's loader protocol (gather_for_metrics; see dali_backend.facade.accelerate_state): set during a pass
    end_of_dataloader: bool = False  # the pass's last batch is out
    remainder: int = -1  # real rows of the last batch gathered from every process (0: no padding; -1: unknown)

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int | Literal["auto"] = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor: int | None = None, persistent_workers: bool | None = None,
                 pin_memory_device: str = "", in_order: bool = True, device: str = "auto", backend: Backend = "auto",
                 seed: int | None = None, prefetch_queue_depth: int = 2, hw_decoder_load: float = 0.65,
                 py_start_method: str | None = None, on_error: str | None = None, return_meta: bool = False,
                 batch_transform=None, telemetry: bool = True):
        shuffle = bool(shuffle)
        refuse_arguments(dataset, sampler, shuffle, batch_sampler, collate_fn, worker_init_fn, batch_transform)
        check_numbers(batch_size=batch_size, num_workers=num_workers, prefetch_factor=prefetch_factor,
                       prefetch_queue_depth=prefetch_queue_depth, hw_decoder_load=hw_decoder_load, timeout=timeout)
        # the traversal, one object per sampler kind (facade.plans); checked before any worker starts
        plan = make_plan(sampler, dataset, int(batch_size)) if sampler is not None else None
        # clips: each draw is clip_len frames, run as that many ordinary samples and regrouped here
        self.clip_len = plan.clip_len if plan is not None else 1
        frames_per_batch = int(batch_size) * self.clip_len
        self.backend, device_id, reason = choose_backend(device, backend)
        announce_backend(device, backend, self.backend, reason)
        self.autotune: dict | None = None  # num_workers="auto": the calibration's measurements
        if num_workers == "auto":
            from .autotune import tune_workers

            num_workers, self.autotune = tune_workers(DaliLoader, dataset, frames_per_batch, self.backend, device=device,
                                                      backend=backend, prefetch_factor=prefetch_factor,
                                                      hw_decoder_load=hw_decoder_load, py_start_method=py_start_method,
                                                      on_error=on_error, timeout=timeout)
        kind = executor_kind(self.backend)  # the one place the executor is chosen (facade.executors)
        context = multiprocessing_context
        context_method = context if isinstance(context, str) or context is None else context.get_start_method()
        warn_unused(self.backend, num_workers, pin_memory=pin_memory, pin_memory_device=pin_memory_device,
                     hw_decoder_load=hw_decoder_load, prefetch_queue_depth=prefetch_queue_depth,
                     prefetch_factor=prefetch_factor, py_start_method=py_start_method, in_order=in_order,
                     multiprocessing_context=context_method)
        if generator is not None and sampler is None:
            seed = int(generator.initial_seed()) % 2**63
        if seed is None and sampler is None:
            seed = default_seed(shuffle)
        self.batch_size, self.num_workers = int(batch_size), int(num_workers)
        self.drop_last, self.pin_memory, self.timeout = bool(drop_last), pin_memory, timeout
        self.sampler = sampler if sampler is not None else default_sampler(dataset.index, shuffle, seed)
        self._plan = plan if plan is not None else make_plan(self.sampler, dataset, self.batch_size)
        self._passes = Passes(self._plan, self.batch_size, self.drop_last)  # epochs, accounting, resumption
        self.on_error = check_on_error(on_error or dataset.on_error)
        self.return_meta, self.batch_transform = bool(return_meta), batch_transform
        # what the user gets per batch (frames, or clips regrouped [B, T, ...]); under on_error="skip" with clips
        # the readers replace a clip with a bad frame by a whole clip of its class (its table)
        self._batches = batches_of(self._plan, self._passes, self.batch_size, on_error=self.on_error,
                                   return_meta=self.return_meta)
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        # DataLoader attributes that training frameworks read
        self.collate_fn, self.worker_init_fn, self.generator = None, worker_init_fn, generator
        self.prefetch_factor, self.persistent_workers = prefetch_factor, bool(persistent_workers) or kind.dali
        self.multiprocessing_context, self.pin_memory_device, self.in_order = context, pin_memory_device, True
        self._closed = False
        self._pass = 0  # passes started; an iterator of an older pass is stale
        self._joined = 0  # the pass that last joined Accelerate's gradient state (accelerate_state.begin)
        if kind.dali:
            if py_start_method is None and context_method in ("fork", "spawn"):
                py_start_method = context_method
            if prefetch_factor is not None and prefetch_queue_depth == 2:
                prefetch_queue_depth = prefetch_factor
        settings = ExecutorSettings(
            name=self.backend, frames_per_batch=frames_per_batch, on_error=self.on_error, num_workers=self.num_workers,
            device_id=device_id, timeout=timeout, worker_init_fn=worker_init_fn, with_params=self.return_meta,
            timed=bool(telemetry), clips=self._batches.table, pin_memory=pin_memory, pin_memory_device=pin_memory_device,
            prefetch_factor=prefetch_factor, persistent_workers=persistent_workers, multiprocessing_context=context,
            prefetch_queue_depth=prefetch_queue_depth, hw_decoder_load=hw_decoder_load, py_start_method=py_start_method)
        make_executor = lambda ds: kind.build(ds, settings)  # noqa: E731 - again after an update_index
        self._executor: Executor = make_executor(dataset)  # DALI's workers start now, before the user's CUDA work
        self.device = self._executor.device
        self._telemetry = LoaderTelemetry(self.backend, self._executor) if telemetry else None
        # exclude / update_index; a new executor (make_executor) when an epoch draws from another index
        self._changes = DataChanges(self._plan, self._passes, make_executor, self._telemetry)

    @property
    def dataset(self):
        """The :class:`ImageDataset` of the running index (the one given, or after :meth:`update_index` one
        over the index the running epoch draws from)."""
        return self._plan.dataset

    # ------------------------------------------------------------------ epochs and passes
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass (forwarded to the sampler's and the dataset's ``set_epoch``)."""
        self._passes.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        """The selected epoch."""
        return self._passes.epoch

    def __len__(self) -> int:
        return len(self._passes)

    def stats(self) -> dict:
        """Accounting of the current (or last) epoch (:mod:`dali_backend.facade.epochs`)."""
        return self._passes.stats()

    def state_dict(self) -> dict:
        """Where this loader stands: the selected epoch and the batches of it already yielded.

        Taken after ``set_epoch(e)`` and before ``e``'s first batch, it says epoch ``e``, 0 batches done
        (not the previous epoch's count). Taken after a finished pass, it says that epoch, all batches
        done: resuming it yields an empty pass (the training loop's own ``set_epoch(e + 1)`` moves on).
        A pending resumption not yet iterated is kept as it is. ``plan`` is a digest of the pass's
        draws: resuming checks the sampler plans the same ones (a random sampler that does not repeat
        its order is refused rather than silently resumed wrong).

        With a :class:`WeightedSampler` (or a :class:`~dali_backend.sampling.clips.ClipSampler`, counting clips) the
        state also holds ``global`` (the global draws of the epoch consumed by all ranks together, for a
        resumption on another rank or number of ranks: see :mod:`dali_backend.facade.epochs`); with a
        :class:`WeightedSampler`, ``data`` (the scheduled data changes: indexes by fingerprint, excluded files
        by path). All of it is JSON.
        """
        return self._passes.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume: the next iteration of ``state["epoch"]`` yields only the batches not yet yielded.

        Refuses (:class:`ConfigError`) a state of another format, with missing keys or values out of
        range, or saved with another index, batch size, sampler (type, seed, length, rank...) or
        augmentation seed: resuming it would silently repeat or skip samples.

        A :class:`WeightedSampler` (or :class:`~dali_backend.sampling.clips.ClipSampler`) state may be loaded by a
        loader whose sampler has another world size or rank (an elastic resumption): the draws of the
        epoch not yet consumed by the old ranks together are dealt out over the new ones, each exactly once (padding aside); only the
        rank and world size may differ, and the state of any one old rank will do (see
        :mod:`dali_backend.facade.epochs` for what is assumed and checked). The state's data schedule (``exclude`` /
        ``update_index``) replaces this loader's.
        """
        self._passes.load_state_dict(state)

    # ------------------------------------------------------------------ data changes (held: self._changes)
    def exclude(self, samples, from_epoch: int | None = None) -> int:
        """Stop drawing ``samples`` from the next epoch on (or from ``from_epoch``); returns that epoch.

        Args:
            samples: sample positions in the index, or file paths (relative to the index root, or
                absolute under it): one, or an iterable of them. A file excluded stays excluded in a
                later index (:meth:`update_index`) that still holds it.
            from_epoch: the first epoch without them. Default: the epoch after the selected one (the
                running one mid-epoch, the one just finished between passes). Every rank must make
                the same change from the same epoch: pass it explicitly in distributed runs.

        Why at an epoch boundary: an epoch's draw is a pure function of (seed, epoch, data
        schedule), the same on every rank and in a resumed run. A change inside a running epoch
        would make it depend on when the change was made, which differs between ranks and between
        a run and its resumption. So the running epoch is never changed; ``len(loader)`` changes at
        ``from_epoch`` only; a balanced sampler re-balances the classes over the samples left; the
        change is recorded in :meth:`state_dict` (by path) and replayed by :meth:`load_state_dict`.

        Raises:
            ConfigError: a sampler other than :class:`WeightedSampler` (the default one is), a
                ``from_epoch`` whose pass has begun, a sample not in the index, or too few left.
        """
        return self._changes.exclude(samples, from_epoch)

    def update_index(self, index, from_epoch: int | None = None) -> int:
        """Draw from ``index`` from the next epoch on (or from ``from_epoch``); returns that epoch.

        ``index`` is typically ``loader.dataset.index.update()``: files added since are appended and
        can be drawn from then on, removed ones are gone, unchanged ones keep their order. Its classes
        must start with the current ones (class ids keep their meaning). At that epoch the loader
        switches to a dataset over ``index`` (the same augmentation, seed and ``on_error``) and starts
        its workers again (once per index change: DALI's and torch's workers hold the index).
        The same rules as :meth:`exclude`: from an epoch boundary on, recorded in the state (by the
        index's fingerprint: a resumed run passes the same index again with this method, before that
        epoch).

        Raises:
            ConfigError: as :meth:`exclude`; classes that do not extend the current ones;
                ``mode="weights"`` (per-sample weights cannot follow another index).
        """
        return self._changes.update_index(index, from_epoch)

    def _rows(self, epoch: int) -> np.ndarray | None:
        """This rank's planned draws of ``epoch`` as ``[n, 4]`` (index, epoch, position, kind), cut by
        ``drop_last``; None (nothing can be planned ahead) when ``epoch`` draws from another index than
        the running executor's, or from one this loader was not given."""
        if self._plan.draws_elsewhere(epoch):
            return None
        return self._passes.cut(self._plan.rows(epoch))

    @property
    def batch_sampler(self) -> None:
        """None, as a ``DataLoader`` given a sampler has none of its own (frameworks read it); read by
        Accelerate's ``skip_first_batches``, a :class:`ConfigError` naming ``load_state`` instead."""
        accelerate_state.refuse_skip_first_batches(sys._getframe(1))
        return None

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
        asked = time.perf_counter()  # the training loop's first next() runs this generator's body
        self._check_current(token)  # an iterator started after a newer one began must not start an epoch
        passes = self._passes
        epoch = passes.begin_pass()
        self._executor = self._changes.executor_for(epoch, self._executor)
        offset = passes.pending_offset(epoch)
        full = self._plan.rows(epoch, offset)
        passes.epoch_planned = True
        passes.begin_epoch(len(full) // self.clip_len)  # draws: clips when the sampler draws clips
        plan = passes.cut(full)
        passes.check_resumable(epoch, plan)
        self._batches.begin_pass(epoch, len(plan) // self.clip_len)
        telemetry = self._telemetry
        if telemetry is not None:
            telemetry.begin_pass(asked)
        last_batch = -(-len(plan) // passes.frames_per_batch)
        accelerate = accelerate_state.begin(self, epoch, offset, self._plan.weighted)  # None unless an Accelerator exists
        self._joined = token
        try:
            while True:
                rows = plan[passes.batches_done * passes.frames_per_batch:]
                try:
                    for batch in self._run(epoch, rows):
                        self._check_current(token)
                        if batch.bad:  # a file failed its checks under on_error="raise", in whichever process read it
                            raise batch.bad[0].error()
                        out = self._output(batch)
                        self.end_of_dataloader = passes.batches_done == last_batch
                        if telemetry is not None:
                            telemetry.batch(len(batch.served), time.perf_counter() - asked, batch.stages,
                                            batch.in_flight)
                        yield out
                        asked = time.perf_counter()
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
            passes.end_epoch()
        finally:  # also when the pass is left early (break, an error): no output memory stays resident
            accelerate_state.end(self, accelerate, current=token == self._joined and not self._closed)
            if telemetry is not None:
                telemetry.end_pass()
            release_pooled_outputs()

    def _output(self, batch: Batch) -> tuple:
        """What the user gets for one executor batch: normalised, batch operations and ``batch_transform``
        applied, with its meta; counted once nothing can fail before the yield."""
        spec, seed = self.dataset.spec, self.dataset.seed
        t0 = time.perf_counter()
        per_draw = batch_params(spec, seed, batch.epochs, batch.positions) if spec.batch_ops else None
        images = apply_batch_ops(normalize(batch.images, spec), spec, per_draw)
        if self._telemetry is not None:
            batch.stages["normalize"] = batch.stages.get("normalize", 0.0) + time.perf_counter() - t0
        return self._batches.output(batch, images, per_draw, self.batch_transform)

    def _run(self, epoch: int, rows: np.ndarray):
        # the key names the plan so that batches DALI prepared ahead are used only for that very plan: the
        # sampler and its data schedule's version (a change since makes them stale); none after an elastic
        # resumption (a plan of its own)
        passes = self._passes
        key = None if passes.pass_offset else self._plan.prefetch_key(epoch, passes.batches_done)
        planner = weakref.WeakMethod(self._rows)  # the DALI runner keeps it to plan ahead: no cycle through it

        def plan_next(epoch: int) -> np.ndarray | None:
            rows_of = planner()
            return None if rows_of is None else rows_of(epoch)

        return self._executor.run(rows, key, plan_next)

    # ------------------------------------------------------------------ telemetry (held: self._telemetry)
    def metrics(self) -> dict:
        """Live telemetry of this loader, JSON-able: is the training loop waiting for data
        (``data_wait_fraction``), the throughput, and what each stage costs per image, with how it
        was measured. Names, units and meanings: :data:`dali_backend.telemetry.METRICS`."""
        return _telemetry_api.live(self._telemetry).snapshot()

    def on_metrics(self, callback, every_s: float = 10.0) -> None:
        """Call ``callback(loader.metrics())`` after a batch, at most every ``every_s`` seconds (an exporter:
        TensorBoard, a logger, anything). A callback that raises is logged with its traceback and
        removed: an exporter never ends a training run."""
        _telemetry_api.check_hook(callback, every_s)
        _telemetry_api.live(self._telemetry).every(every_s, callback)

    def report(self, metrics: dict | None = None) -> str:
        """What limits this loader's throughput, in plain words, with the numbers and what to change: the
        training loop, storage, or the loader's CPU (which stage). Call it after some training batches;
        ``metrics``: a :meth:`metrics` result to judge (default: now)."""
        return _telemetry_api.report(self.metrics() if metrics is None else metrics)

    def log_metrics(self, every_s: float = 30.0, level: int = logging.INFO) -> None:
        """Log one line of the headline metrics (logger ``dali_backend.metrics``) at most every ``every_s`` s."""
        self.on_metrics(_telemetry_api.log_line(level), every_s)

    @property
    def _runner(self):
        """The DALI executor's current runner (None on the torch backend)."""
        return getattr(self._executor, "runner", None)

    def close(self) -> None:
        """Stop the workers and free shared memory now (also done once nothing uses them).

        Iterators still open raise :class:`LoaderClosedError` on their next batch."""
        self._closed = True
        accelerate_state.leave(self)  # an open pass's place in Accelerate's gradient state, if it has one
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
