"""What every loader of this library shares: epochs, accounting, and exact resumption.

Accounting: for each epoch ``yielded + padded + dropped + skipped + resumed == draws``, where
``draws`` is what the sampler gives this rank (padding included), ``padded`` the distributed padding
draws that were yielded, ``dropped`` those cut by ``drop_last``, ``skipped`` bad files replaced under
``on_error="skip"``, and ``resumed`` draws delivered before a ``load_state_dict`` resumption.

Resumption follows torchdata's ``StatefulDataLoader`` convention: ``state_dict()`` records the epoch
and the batches yielded so far; after ``load_state_dict(sd)`` the next iteration of that epoch yields
exactly the remaining batches (any ``num_workers``, either backend). ``set_epoch`` with the same
epoch keeps the pending resumption, another epoch cancels it.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from .errors import ConfigError
from .sampler import check_epoch

log = logging.getLogger("dali_backend")
STATE_VERSION = 2
STATE_KEYS = ("version", "epoch", "batches_done", "batches_per_epoch", "batch_size", "index_fingerprint", "sampler")


def sampler_identity(sampler, dataset) -> dict:
    """What must not change between saving and resuming: the draw and the augmentation seed."""
    ident = {"type": type(sampler).__name__, "len": len(sampler), "augment_seed": int(getattr(dataset, "seed", 0))}
    for name in ("seed", "mode", "num_samples", "replacement", "rank", "world_size", "drop_last", "clip_len", "step",
                 "stride", "label"):
        if hasattr(sampler, name) and isinstance(getattr(sampler, name), (bool, int, str)):
            ident[name] = getattr(sampler, name)
    return ident


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


class EpochLoaderMixin:
    """``set_epoch``, ``len()``, ``stats()``, ``state_dict()`` and ``load_state_dict()`` for a loader
    with ``sampler``, ``dataset``, ``batch_size`` and ``drop_last``."""

    epoch: int = 0
    _resume: tuple[int, int, str | None] | None = None  # (epoch, batches already yielded, plan digest)
    _batches_done: int = 0
    _progress_epoch: int | None = None  # the epoch _batches_done counts
    _plan_digest: tuple[int, str] | None = None  # (epoch, digest of the running pass's plan)
    _resume_digest: str | None = None
    _stats: EpochStats | None = None

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (forwarded to the sampler's and the dataset's ``set_epoch``)."""
        self.epoch = check_epoch(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)
        self.dataset.set_epoch(self.epoch)
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    # ------------------------------------------------------------------ epochs and accounting
    def _sampler_epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", self.epoch))

    def _begin_epoch(self, draws: int | None = None) -> int:
        """Start accounting an epoch of ``draws`` planned draws (default ``len(sampler)``; the plan's own
        count wins, so a sampler whose ``len()`` is wrong cannot skew the accounting); returns the first
        batch to produce (non-zero when resuming)."""
        epoch = self._sampler_epoch()
        start, self._resume_digest = 0, None
        if self._resume is not None and self._resume[0] == epoch:
            start, self._resume_digest = self._resume[1], self._resume[2]
        self._resume = None
        draws = len(self.sampler) if draws is None else int(draws)
        used = draws // self.batch_size * self.batch_size if self.drop_last else draws
        self._stats = EpochStats(epoch, draws, dropped=draws - used, resumed=min(start * self.batch_size, used))
        self._batches_done, self._progress_epoch = start, epoch
        return start

    def _account(self, planned: np.ndarray, served: np.ndarray, positions: np.ndarray) -> None:
        """Count one yielded batch: planned and served sample indices and draw positions."""
        st = self._stats
        from .clips import ClipSampler
        from .sampler import WeightedSampler

        # only WeightedSampler (and ClipSampler, over it) pads (its positions >= num_samples); others'
        # num_samples mean something else
        pads = isinstance(self.sampler, (WeightedSampler, ClipSampler))
        num_samples = self.sampler.num_samples if pads else None
        skipped = served != planned
        padded = (positions >= num_samples) & ~skipped if num_samples is not None else np.zeros_like(skipped)
        st.skipped += int(skipped.sum())
        st.padded += int(padded.sum())
        st.yielded += int(len(planned) - skipped.sum() - padded.sum())
        index = self.dataset.index
        for p, s in zip(planned[skipped], served[skipped]):
            st.skipped_files.append((index.abspath(int(p)), index.abspath(int(s))))
        self._batches_done += 1

    def _batch_meta(self, batch, batch_params: list | None) -> dict:
        """What produced each sample of a batch (``return_meta=True``): indices, draw, path, and the
        parameters the executor augmented each draw with (and the batch operations' own)."""
        ds = self.dataset
        per_draw = batch_params if batch_params is not None else [None] * len(batch.served)
        params = [ds.spec.describe_params(p, b) for p, b in zip(batch.params, per_draw)]
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
        return {"index": as_tensor(batch.served), "planned": as_tensor(batch.planned), "epoch": as_tensor(batch.epochs),
                "position": as_tensor(batch.positions), "path": [ds.index.abspath(int(i)) for i in batch.served],
                "params": params}

    def _end_epoch(self) -> None:
        st = self._stats
        if st is not None and st.skipped:
            shown = "; ".join(f"{a} -> {b}" for a, b in st.skipped_files[:5])
            log.warning("epoch %d: %d bad files skipped and replaced by samples of their class (%s%s)", st.epoch,
                        st.skipped, shown, "; ..." if st.skipped > 5 else "")

    def stats(self) -> dict:
        """Accounting of the current (or last) epoch; see the module docstring."""
        if self._stats is None:
            return {}
        d = asdict(self._stats)
        d["accounted"] = self._stats.accounted
        return d

    # ------------------------------------------------------------------ resumption
    def state_dict(self) -> dict:
        """Where this loader stands: the selected epoch and the batches of it already yielded.

        Taken after ``set_epoch(e)`` and before ``e``'s first batch, it says epoch ``e``, 0 batches done
        (not the previous epoch's count). Taken after a finished pass, it says that epoch, all batches
        done: resuming it yields an empty pass (the training loop's own ``set_epoch(e + 1)`` moves on).
        A pending resumption not yet iterated is kept as it is. ``plan`` is a digest of the pass's
        draws: resuming checks the sampler plans the same ones (a random sampler that does not repeat
        its order is refused rather than silently resumed wrong).
        """
        epoch = self._sampler_epoch()
        digest = None
        if self._resume is not None and self._resume[0] == epoch:
            done, digest = self._resume[1], self._resume[2]
        else:
            done = self._batches_done if self._progress_epoch == epoch else 0
            if done and self._plan_digest is not None and self._plan_digest[0] == epoch:
                digest = self._plan_digest[1]
        return {"version": STATE_VERSION, "epoch": epoch, "batches_done": done, "batches_per_epoch": len(self),
                "batch_size": self.batch_size, "index_fingerprint": self.dataset.index.fingerprint,
                "sampler": sampler_identity(self.sampler, self.dataset), "plan": digest}

    def _check_resumable(self, epoch: int, plan: np.ndarray) -> None:
        """Record this pass's plan; when it resumes a saved state, the plan must be the saved one."""
        digest = hashlib.blake2b(np.ascontiguousarray(plan[:, :3]).tobytes(), digest_size=16).hexdigest()
        self._plan_digest = (epoch, digest)
        if self._resume_digest is not None and self._resume_digest != digest:
            saved = self._resume_digest
            self._resume_digest = None
            raise ConfigError(f"load_state_dict: the sampler plans another order for epoch {epoch} than when the state "
                              f"was saved (plan {saved[:8]}... now {digest[:8]}...); resuming would repeat or skip "
                              "samples. Resume with a WeightedSampler (a pure function of seed and epoch) or a "
                              "sampler that yields the same order again")

    def load_state_dict(self, state: dict) -> None:
        """Resume: the next iteration of ``state["epoch"]`` yields only the batches not yet yielded.

        Refuses (:class:`ConfigError`) a state of another format, with missing keys or values out of
        range, or saved with another index, batch size, sampler (type, seed, length, rank...) or
        augmentation seed: resuming it would silently repeat or skip samples.
        """
        if not isinstance(state, dict):
            raise ConfigError(f"load_state_dict: expected the dict state_dict() returned, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise ConfigError(f"load_state_dict: state version {state.get('version')!r}; this loader reads version "
                              f"{STATE_VERSION} (saved by another release of dali_backend: restart the epoch instead)")
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise ConfigError(f"load_state_dict: the state lacks {missing}; pass the dict state_dict() returned, whole")
        if state["index_fingerprint"] != self.dataset.index.fingerprint:
            raise ConfigError("load_state_dict: the state was saved with another sample index (fingerprints differ); "
                              "resume with the same index file")
        if state["batch_size"] != self.batch_size or state["batches_per_epoch"] != len(self):
            raise ConfigError(f"load_state_dict: saved with batch_size={state['batch_size']} and "
                              f"{state['batches_per_epoch']} batches per epoch; this loader has {self.batch_size} and "
                              f"{len(self)}. Use the same batch_size, sampler and drop_last")
        mine = sampler_identity(self.sampler, self.dataset)
        theirs = state["sampler"] if isinstance(state["sampler"], dict) else {}
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if differ:
            shown = ", ".join(f"{k} {theirs.get(k)!r} -> {mine.get(k)!r}" for k in differ)
            raise ConfigError(f"load_state_dict: the sampler or augmentation differs from the saved one ({shown}); "
                              "resume with the same sampler arguments and dataset seed")
        epoch, done = state["epoch"], state["batches_done"]
        if not isinstance(epoch, (int, np.integer)) or isinstance(epoch, bool) or epoch < 0:
            raise ConfigError(f"load_state_dict: epoch={epoch!r}; must be a non-negative integer")
        if not isinstance(done, (int, np.integer)) or isinstance(done, bool) or not 0 <= done <= len(self):
            raise ConfigError(f"load_state_dict: batches_done={done!r}; must lie in [0, {len(self)}] "
                              "(the batches per epoch)")
        plan = state.get("plan")
        if plan is not None and not isinstance(plan, str):
            raise ConfigError(f"load_state_dict: plan={plan!r}; must be the digest string state_dict() wrote")
        self.set_epoch(int(epoch))
        self._resume = (int(epoch), int(done), plan)
        self._batches_done, self._progress_epoch = int(done), int(epoch)
