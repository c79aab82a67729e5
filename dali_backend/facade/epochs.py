"""What every loader of this library shares: epochs, accounting, and exact resumption.

Accounting: for each epoch ``yielded + padded + dropped + skipped + resumed == draws``, where
``draws`` is what the sampler gives this rank (padding included), ``padded`` the distributed padding
draws that were yielded, ``dropped`` those cut by ``drop_last``, ``skipped`` bad files replaced under
``on_error="skip"``, and ``resumed`` draws delivered before a ``load_state_dict`` resumption.

Resumption follows torchdata's ``StatefulDataLoader`` convention: ``state_dict()`` records the epoch
and the batches yielded so far; after ``load_state_dict(sd)`` the next iteration of that epoch yields
exactly the remaining batches (any ``num_workers``, either backend). ``set_epoch`` with the same
epoch keeps the pending resumption, another epoch cancels it.

Elastic resumption (a :class:`~dali_backend.sampling.sampler.WeightedSampler` state, or a
:class:`~dali_backend.sampling.clips.ClipSampler` one, loaded by a loader whose sampler has another world size or
rank): in data-parallel training every rank yields its k-th batch
together (one optimiser step is one batch on every rank), and rank ``r`` of ``W`` holds the global
draw's positions ``r, r + W, r + 2W, ...`` (:func:`~dali_backend.sampling.sampler.rank_slice`), so after ``k``
batches of ``B`` on every rank exactly the global positions ``[0, k * B * W)`` were delivered: a
prefix. The state records that prefix (``global.consumed``), so one rank's state is enough; the
resuming loader deals the rest of the epoch's global draw out over its own ranks
(:func:`~dali_backend.sampling.sampler.remainder_slice`) and the epoch after it is a normal epoch. The
assumption (every rank at the same batch when the state was taken) is what data-parallel training
does; it cannot be checked from one rank's state, and a state taken on one rank only while the others
ran ahead or behind would repeat or skip their extra batches. What can be checked is: the state's
numbers agree with each other and with this partition, and the old rank's plan (its digest) is the one
this sampler computes for it. A sampler whose rank batches are no prefix (an
:class:`~dali_backend.sampling.grouping.AspectGroupedSampler`: ``consumes_prefix`` False) resumes on other
ranks only from an epoch boundary.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..errors import ConfigError
from ..sampling.sampler import check_epoch

log = logging.getLogger("dali_backend")
STATE_VERSION = 2
STATE_KEYS = ("version", "epoch", "batches_done", "batches_per_epoch", "batch_size", "index_fingerprint", "sampler")


def sampler_identity(sampler, dataset, epoch: int | None = None) -> dict:
    """What must not change between saving and resuming: the draw and the augmentation seed (a
    :class:`WeightedSampler`'s length and draws per epoch are those of ``epoch``, default its own)."""
    weighted = epoch is not None  # the caller's plan says: a WeightedSampler's epoch
    ident = {"type": type(sampler).__name__, "len": sampler.rank_len(sampler.num_samples_at(epoch)) if weighted
             else len(sampler), "augment_seed": int(getattr(dataset, "seed", 0))}
    for name in ("seed", "mode", "num_samples", "replacement", "rank", "world_size", "drop_last", "clip_len", "step",
                 "stride", "label", "grouping"):
        if weighted and name == "num_samples":
            ident[name] = sampler.num_samples_at(epoch)
        elif hasattr(sampler, name) and isinstance(getattr(sampler, name), (bool, int, str)):
            ident[name] = getattr(sampler, name)
    return ident


# What differs legitimately when a state is resumed on another number of ranks (elastic resumption)
PARTITION_KEYS = ("rank", "world_size", "len")


@dataclass
class EpochStats:
    epoch: int
    draws: int
    yielded: int = 0
    padded: int = 0
    dropped: int = 0
    skipped: int = 0
    resumed: int = 0
    skipped_files: list = field(default_factory=list)  # (bad path, replacement path)

    @property
    def accounted(self) -> int:
        return self.yielded + self.padded + self.dropped + self.skipped + self.resumed


class Passes:
    """A loader's passes and epochs, their accounting and resumption: ``set_epoch``, ``len()``,
    ``stats()``, ``state_dict()`` and ``load_state_dict()``, for the plan of a sampler
    (:mod:`dali_backend.facade.plans`), a batch size and ``drop_last``. The facade holds one; a test can
    build one without a loader (``Passes(make_plan(sampler, dataset, b), b, drop_last)``)."""

    epoch: int = 0
    epoch_planned = False  # a pass of the selected epoch was planned (its data can no longer change)
    _epoch_chosen = False  # set_epoch/load_state_dict since the last pass began
    _last_pass_epoch: tuple | None = None  # (epoch, the sampler's set_epoch count) of the last pass
    _resume: tuple[int, int, str | None] | None = None  # (epoch, batches already yielded, plan digest)
    _elastic: tuple[int, int] | None = None  # (epoch, global draws consumed): the pass deals out the rest
    _batches_done: int = 0
    _progress_epoch: int | None = None  # the epoch _batches_done counts
    _pass_offset: int = 0  # where the global draw of the pass _batches_done counts starts (elastic: > 0)
    _pass_num_samples: int | None = None  # global draws (before padding) of the running pass's epoch
    _plan_digest: tuple[int, str] | None = None  # (epoch, digest of the running pass's plan)
    _resume_digest: str | None = None
    _stats: EpochStats | None = None

    def __init__(self, plan, batch_size: int, drop_last: bool):
        self.plan, self.sampler, self.batch_size, self.drop_last = plan, plan.sampler, int(batch_size), bool(drop_last)

    @property
    def dataset(self):
        """The running index's dataset (the plan's: a data change replaces it)."""
        return self.plan.dataset

    @property
    def batches_done(self) -> int:
        """Batches of the running pass yielded (or resumed) so far."""
        return self._batches_done

    @property
    def pass_offset(self) -> int:
        """Where the running pass's global draw starts (> 0 after an elastic resumption)."""
        return self._pass_offset

    @property
    def frames_per_batch(self) -> int:
        """Planned rows per batch: ``batch_size`` draws of the plan's ``clip_len`` frames (1 without clips)."""
        return self.batch_size * self.plan.clip_len

    def cut(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` (planned, ``frames_per_batch`` a batch) without the last partial batch under ``drop_last``."""
        size = self.frames_per_batch
        return rows[:len(rows) // size * size] if self.drop_last else rows

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass (forwarded to the sampler's and the dataset's ``set_epoch``)."""
        self._select(epoch)
        self._epoch_chosen = True
        self.epoch_planned = False

    def begin_pass(self) -> int:
        """Choose a new pass's epoch: the one selected since the last pass, else the next one.

        Selected means ``set_epoch``, ``load_state_dict``, or the sampler's own ``set_epoch`` (a
        :class:`~dali_backend.sampling.sampler.WeightedSampler` counts its calls; other samplers are
        compared by their ``epoch`` value).
        """
        current = (self.sampler_epoch(), getattr(self.sampler, "epoch_calls", None))
        if self._last_pass_epoch is not None and not self._epoch_chosen and current == self._last_pass_epoch:
            self._select(current[0] + 1)
            current = (self.sampler_epoch(), getattr(self.sampler, "epoch_calls", None))
        self._epoch_chosen = False
        self._last_pass_epoch = current
        return current[0]

    def begun(self, epoch: int) -> bool:
        """Whether a pass of ``epoch`` has begun: planned, batches yielded, or a resumption into it pending."""
        return self.epoch_planned or (self._progress_epoch == epoch and self._batches_done > 0) or \
            (self._resume is not None and self._resume[0] == epoch and self._resume[1] > 0) or \
            self.pending_offset(epoch) > 0

    def _select(self, epoch: int) -> None:
        self.epoch = check_epoch(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)
        self.dataset.set_epoch(self.epoch)
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None
        if self._elastic is not None and self._elastic[0] != self.epoch:
            self._elastic = None

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    # ------------------------------------------------------------------ epochs and accounting
    def sampler_epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", self.epoch))

    def pending_offset(self, epoch: int) -> int:
        """Global draws of ``epoch`` an elastic resumption says were consumed (0: a whole or same-world pass)."""
        return self._elastic[1] if self._elastic is not None and self._elastic[0] == epoch else 0

    def begin_epoch(self, draws: int | None = None) -> int:
        """Start accounting an epoch of ``draws`` planned draws (default ``len(sampler)``; the plan's own
        count wins, so a sampler whose ``len()`` is wrong cannot skew the accounting); returns the first
        batch to produce (non-zero when resuming).

        After an elastic resumption the plan is this rank's share of the draws left; the draws
        consumed before it count as ``resumed`` on the rank their position falls to under this
        world's partition (positions ``p < consumed`` with ``p % world_size == rank``), so the ranks'
        ``resumed`` add up to the consumed draws and each rank's accounting still closes."""
        epoch = self.sampler_epoch()
        start, self._resume_digest = 0, None
        if self._resume is not None and self._resume[0] == epoch:
            start, self._resume_digest = self._resume[1], self._resume[2]
        offset = self.pending_offset(epoch)
        self._resume, self._elastic = None, None
        draws = len(self.sampler) if draws is None else int(draws)
        used = draws // self.batch_size * self.batch_size if self.drop_last else draws
        if offset:
            rank, world = self.sampler.rank, self.sampler.world_size
            before = max(0, -(-(offset - rank) // world))
            self._stats = EpochStats(epoch, draws + before, dropped=draws - used, resumed=before)
        else:
            self._stats = EpochStats(epoch, draws, dropped=draws - used, resumed=min(start * self.batch_size, used))
        self._batches_done, self._progress_epoch, self._pass_offset = start, epoch, offset
        self._pass_num_samples = self.plan.num_samples(epoch)
        return start

    def account(self, planned: np.ndarray, served: np.ndarray, positions: np.ndarray, names=None) -> None:
        """Count one yielded batch: planned and served sample indices (or clip numbers, ``names(planned,
        served)`` then giving the ``skipped_files`` entry of a replaced one) and draw positions."""
        st = self._stats
        # only WeightedSampler (and ClipSampler, over it) pads (its positions >= num_samples); others'
        # num_samples mean something else
        num_samples = self._pass_num_samples
        skipped = served != planned
        padded = (positions >= num_samples) & ~skipped if num_samples is not None else np.zeros_like(skipped)
        st.skipped += int(skipped.sum())
        st.padded += int(padded.sum())
        st.yielded += int(len(planned) - skipped.sum() - padded.sum())
        path = self.dataset.index.abspath
        for p, s in zip(planned[skipped], served[skipped]):
            st.skipped_files.append(names(int(p), int(s)) if names else (path(int(p)), path(int(s))))
        self._batches_done += 1

    def batch_meta(self, batch, batch_params: list | None) -> dict:
        """What produced each sample of a batch (``return_meta=True``): indices, draw, path, and the
        parameters the executor augmented each draw with (and the batch operations' own)."""
        ds = self.dataset
        per_draw = batch_params if batch_params is not None else [None] * len(batch.served)
        params = [ds.spec.describe_params(p, b) for p, b in zip(batch.params, per_draw)]
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
        # a padding draw (WeightedSampler: position >= the epoch's num_samples) repeats a sample of the epoch
        num_samples = self._pass_num_samples
        padding = np.asarray(batch.positions) >= num_samples if num_samples is not None else \
            np.zeros(len(batch.served), bool)
        return {"index": as_tensor(batch.served), "planned": as_tensor(batch.planned), "epoch": as_tensor(batch.epochs),
                "position": as_tensor(batch.positions), "padding": torch.from_numpy(padding),
                "path": [ds.index.abspath(int(i)) for i in batch.served], "params": params}

    def end_epoch(self) -> None:
        st = self._stats
        if st is not None and st.skipped:
            shown = "; ".join(f"{a} -> {b}" for a, b in st.skipped_files[:5])
            what = ("clips with a bad frame skipped and replaced by whole clips of their class (bad frame -> its "
                    "place in the replacement: "
                    if self.plan.clip_len > 1 else "bad files skipped and replaced by samples of their class (")
            log.warning("epoch %d: %d %s%s%s)", st.epoch, st.skipped, what, shown, "; ..." if st.skipped > 5 else "")

    def stats(self) -> dict:
        """Accounting of the current (or last) epoch; see the module docstring."""
        if self._stats is None:
            return {}
        d = asdict(self._stats)
        d["accounted"] = self._stats.accounted
        return d

    # ------------------------------------------------------------------ resumption
    def _index_at(self, epoch: int):
        """The index ``epoch`` draws from (a WeightedSampler's schedule; else the dataset's)."""
        return self.plan.index_at(epoch)

    def _pass_batches(self, num_samples: int, offset: int, world_size: int, drop_last: bool) -> int:
        """Batches a rank's pass has from global position ``offset`` on, with ``world_size`` ranks."""
        per_rank = self.sampler.rank_len(max(num_samples - offset, 0), world_size)
        return per_rank // self.batch_size if drop_last else -(-per_rank // self.batch_size)

    def _global_state(self, epoch: int, offset: int, done: int) -> dict:
        """The ``global`` part of a WeightedSampler state: where the pass began in the global draw, the
        global draws consumed (a prefix, assuming every rank at the same batch) and this partition."""
        s = self.sampler
        n, world = s.num_samples_at(epoch), s.world_size
        complete = done >= self._pass_batches(n, offset, world, self.drop_last)
        consumed = n if complete else min(offset + done * self.batch_size * world, n)
        return {"offset": offset, "consumed": consumed, "rank": s.rank, "world_size": world, "num_samples": n,
                "drop_last": self.drop_last}

    def state_dict(self) -> dict:
        """Where the loader stands (documented on :meth:`DaliLoader.state_dict`)."""
        epoch = self.sampler_epoch()
        digest, offset = None, 0
        if self._elastic is not None and self._elastic[0] == epoch:
            done, offset = 0, self._elastic[1]
        elif self._resume is not None and self._resume[0] == epoch:
            done, digest = self._resume[1], self._resume[2]
        else:
            done = self._batches_done if self._progress_epoch == epoch else 0
            offset = self._pass_offset if self._progress_epoch == epoch else 0
            if done and self._plan_digest is not None and self._plan_digest[0] == epoch:
                digest = self._plan_digest[1]
        state = {"version": STATE_VERSION, "epoch": epoch, "batches_done": done, "batches_per_epoch": len(self),
                 "batch_size": self.batch_size, "index_fingerprint": self._index_at(epoch).fingerprint,
                 "sampler": sampler_identity(self.sampler, self.dataset, self.plan.identity_epoch(epoch)),
                 "plan": digest}
        if self.plan.partitioned:
            state["global"] = self._global_state(epoch, offset, done)
        if self.plan.schedule() is not None:
            state["data"] = self.plan.schedule().state()
        return state

    def check_resumable(self, epoch: int, plan: np.ndarray) -> None:
        """Record this pass's plan; when it resumes a saved state, the plan must be the saved one."""
        digest = plan_digest(plan)
        self._plan_digest = (epoch, digest)
        if self._resume_digest is not None and self._resume_digest != digest:
            saved = self._resume_digest
            self._resume_digest = None
            raise ConfigError(f"load_state_dict: the sampler plans another order for epoch {epoch} than when the state "
                              f"was saved (plan {saved[:8]}... now {digest[:8]}...); resuming would repeat or skip "
                              "samples. Resume with a WeightedSampler (a pure function of seed and epoch) or a "
                              "sampler that yields the same order again")

    def _known_indexes(self) -> list:
        """Indexes this loader holds (for matching a loaded schedule's fingerprints)."""
        known = [g.index for g in self.sampler.schedule.generations] + [self.dataset.index]
        return known

    def load_state_dict(self, state: dict) -> None:
        """Resume a state (documented on :meth:`DaliLoader.load_state_dict`)."""
        if not isinstance(state, dict):
            raise ConfigError(f"load_state_dict: expected the dict state_dict() returned, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise ConfigError(f"load_state_dict: state version {state.get('version')!r}; this loader reads version "
                              f"{STATE_VERSION} (saved by another release of dali_backend: restart the epoch instead)")
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise ConfigError(f"load_state_dict: the state lacks {missing}; pass the dict state_dict() returned, whole")
        epoch = state["epoch"]
        if not isinstance(epoch, (int, np.integer)) or isinstance(epoch, bool) or epoch < 0:
            raise ConfigError(f"load_state_dict: epoch={epoch!r}; must be a non-negative integer")
        schedule = self.plan.schedule()
        snap = schedule.snapshot() if schedule is not None else None
        try:
            if schedule is not None and "data" in state:
                schedule.load(state["data"], self._known_indexes())
            self._load_checked(state, int(epoch))
        except Exception:
            if snap is not None:
                schedule.restore(snap)
            raise

    def _load_checked(self, state: dict, epoch: int) -> None:
        try:
            index = self._index_at(epoch)
        except ConfigError as e:
            raise ConfigError(f"load_state_dict: the state was saved with another sample index: {e}") from None
        if state["index_fingerprint"] != index.fingerprint:
            raise ConfigError("load_state_dict: the state was saved with another sample index (fingerprints differ); "
                              "resume with the same index file")
        glob = state.get("global")
        if self.plan.partitioned and isinstance(glob, dict) and (glob.get("offset") or glob.get("rank") != self.sampler.rank
                                                    or glob.get("world_size") != self.sampler.world_size):
            return self._load_elastic(state, epoch, glob)
        if state["batch_size"] != self.batch_size or state["batches_per_epoch"] != self._len_at(epoch):
            raise ConfigError(f"load_state_dict: saved with batch_size={state['batch_size']} and "
                              f"{state['batches_per_epoch']} batches per epoch; this loader has {self.batch_size} and "
                              f"{self._len_at(epoch)}. Use the same batch_size, sampler and drop_last")
        self._check_identity(state, epoch, ())
        done = state["batches_done"]
        if not isinstance(done, (int, np.integer)) or isinstance(done, bool) or not 0 <= done <= self._len_at(epoch):
            raise ConfigError(f"load_state_dict: batches_done={done!r}; must lie in [0, {self._len_at(epoch)}] "
                              "(the batches per epoch)")
        plan = state.get("plan")
        if plan is not None and not isinstance(plan, str):
            raise ConfigError(f"load_state_dict: plan={plan!r}; must be the digest string state_dict() wrote")
        self.set_epoch(epoch)
        self._resume = (epoch, int(done), plan)
        self._batches_done, self._progress_epoch, self._pass_offset = int(done), epoch, 0

    def _len_at(self, epoch: int) -> int:
        """``len(self)`` at ``epoch`` (a WeightedSampler's length follows the data schedule)."""
        if not self.plan.weighted:
            return len(self)
        n = self.sampler.rank_len(self.sampler.num_samples_at(epoch))
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _check_identity(self, state: dict, epoch: int, ignore: tuple[str, ...]) -> None:
        mine = sampler_identity(self.sampler, self.dataset, self.plan.identity_epoch(epoch))
        theirs = state["sampler"] if isinstance(state["sampler"], dict) else {}
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k) and k not in ignore)
        if differ:
            shown = ", ".join(f"{k} {theirs.get(k)!r} -> {mine.get(k)!r}" for k in differ)
            raise ConfigError(f"load_state_dict: the sampler or augmentation differs from the saved one ({shown}); "
                              "resume with the same sampler arguments and dataset seed")

    def _load_elastic(self, state: dict, epoch: int, glob: dict) -> None:
        """Resume ``epoch`` on this loader's ranks from a state saved with another partition."""
        s = self.sampler
        if state["batch_size"] != self.batch_size:
            raise ConfigError(f"load_state_dict: saved with batch_size={state['batch_size']}; this loader has "
                              f"{self.batch_size}. Resuming on another number of ranks keeps the batch size per "
                              "rank: use the same batch_size")
        self._check_identity(state, epoch, PARTITION_KEYS)
        fields = ("offset", "consumed", "rank", "world_size", "num_samples", "drop_last")
        bad = [k for k in fields if not isinstance(glob.get(k), (int, np.integer)) or
               (isinstance(glob.get(k), bool) and k != "drop_last")]
        if bad:
            raise ConfigError(f"load_state_dict: the state's 'global' lacks or mangles {bad}; pass the dict "
                              "state_dict() returned, whole")
        n, world, rank = s.num_samples_at(epoch), int(glob["world_size"]), int(glob["rank"])
        offset, consumed, done = int(glob["offset"]), int(glob["consumed"]), state["batches_done"]
        if glob["num_samples"] != n or world < 1 or not 0 <= rank < world or not 0 <= offset <= n:
            raise ConfigError(f"load_state_dict: the state's partition (rank {rank} of {world}, offset {offset}, "
                              f"{glob['num_samples']} draws) does not fit epoch {epoch}'s {n} draws; pass the dict "
                              "state_dict() returned, whole")
        old_drop = bool(glob["drop_last"])
        batches = self._pass_batches(n, offset, world, old_drop)
        if not isinstance(done, (int, np.integer)) or isinstance(done, bool) or not 0 <= done <= batches:
            raise ConfigError(f"load_state_dict: batches_done={done!r}; must lie in [0, {batches}] (the batches of "
                              f"rank {rank} of {world} in that pass)")
        if not s.consumes_prefix and 0 < done < batches:
            raise ConfigError(f"load_state_dict: the state was saved mid-epoch (batch {done} of {batches}) by rank {rank} "
                              f"of {world}; this loader is rank {s.rank} of {s.world_size}. With a "
                              f"{type(s).__name__} a rank's batches are not a prefix of the global draw, so the rest "
                              f"of the epoch cannot be dealt out over other ranks: resume on {world} ranks, or from "
                              "a state saved at an epoch boundary (before the first batch or after the last)")
        want = n if done >= batches else min(offset + done * self.batch_size * world, n)
        if consumed != want:
            raise ConfigError(f"load_state_dict: the state says {consumed} global draws consumed, but {done} batches "
                              f"of {self.batch_size} on each of {world} ranks from position {offset} make {want}; "
                              "the state was edited or written by another partition rule")
        plan = state.get("plan")
        if plan is not None:
            if not isinstance(plan, str):
                raise ConfigError(f"load_state_dict: plan={plan!r}; must be the digest string state_dict() wrote")
            idx, pos = s.partition_draw(epoch, offset, rank, world)
            if old_drop:
                keep = len(idx) // self.batch_size * self.batch_size
                idx, pos = idx[:keep], pos[:keep]
            rows = self.plan.partition_rows(epoch, idx, pos)  # a ClipSampler's: each clip's frames
            if plan_digest(rows) != plan:
                raise ConfigError(f"load_state_dict: this sampler plans another order for rank {rank} of {world} in "
                                  f"epoch {epoch} than the one the state was saved from (plan {plan[:8]}... now "
                                  f"{plan_digest(rows)[:8]}...); resuming would repeat or skip samples. Use the "
                                  "same sampler arguments, index and data changes")
        self.set_epoch(epoch)
        self._resume, self._elastic = None, (epoch, consumed)
        self._batches_done, self._progress_epoch, self._pass_offset = 0, epoch, consumed


def plan_digest(plan: np.ndarray) -> str:
    """Digest of a pass's planned draws (their index, epoch and position columns)."""
    return hashlib.blake2b(np.ascontiguousarray(np.asarray(plan, dtype=np.int64)[:, :3]).tobytes(),
                           digest_size=16).hexdigest()
