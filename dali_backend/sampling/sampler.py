"""Class-weighted, distributed-aware sampling as pure functions, and a torch ``Sampler`` over them.

One global draw per (seed, epoch) is computed identically on every rank, padded like
``DistributedSampler`` (by repeating its start) to a multiple of the world size, and sliced by rank
(``draw[rank::world_size]``). PyTorch has no weighted distributed sampler (pytorch/pytorch#77154):
this is one. Each yielded :class:`Draw` carries its epoch and its position in the global draw, so
a sample drawn twice gets its own augmentation parameters.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray
import torch
from torch.utils.data import Sampler

from ..errors import ConfigError
from ..index import SampleIndex
from .schedule import DataSchedule, relative_paths

log = logging.getLogger("dali_backend")
Mode = Literal["balanced", "uniform", "weights", "sequential"]
_SAMPLER_STREAM = 0x5A17


MAX_EPOCH = 2**62  # epochs travel in int64 columns and a pass may run epoch + 1: far below the int64 limit


def check_epoch(epoch) -> int:
    """``epoch`` as an int, or :class:`ConfigError` unless it is an integer in ``[0, MAX_EPOCH)``."""
    if not isinstance(epoch, (int, np.integer)) or isinstance(epoch, bool) or not 0 <= epoch < MAX_EPOCH:
        raise ConfigError(f"set_epoch({epoch!r}): epoch must be an integer in [0, 2**62)")
    return int(epoch)

class Draw(NamedTuple):
    """One draw of an epoch.

    Attributes:
        index: position of the sample in the :class:`SampleIndex`.
        epoch: the epoch it was drawn in.
        position: its position in the epoch's global draw (padding positions are >= ``num_samples``).
    """

    index: int
    epoch: int
    position: int

    def __index__(self) -> int:  # lets a Draw index plain datasets and lists
        return self.index


def as_draw(item, epoch: int) -> Draw:
    """The one rule turning a sampler item into a draw, for every loader and a plain ``DataLoader``.

    A :class:`Draw` (from :class:`WeightedSampler`) is taken as it is. A plain integer ``i`` becomes
    ``Draw(i, epoch, position=i)``: its augmentation parameters come from the epoch and the sample
    index, because a ``Dataset`` behind a plain ``DataLoader`` sees only ``i``, never its place in
    the epoch. So ``DataLoader(ImageDataset, sampler=s)``, ``DaliLoader(..., sampler=s)`` on either
    backend give the same pixels for the same sampler items and epoch; an integer sampler that
    repeats a sample within an epoch repeats its parameters too (``WeightedSampler`` does not).
    """
    if isinstance(item, Draw):
        return item
    if hasattr(item, "frames") and hasattr(item, "clip"):  # a ClipSampler's Clip: T frames, not one sample
        raise ConfigError(f"sampler item {type(item).__name__}(clip={item.clip}, ...): a ClipSampler yields clips "
                          "of several frames, which a Dataset indexed by one sample cannot load; pass it to "
                          "DaliLoader(dataset, batch_size=B, sampler=clip_sampler), which yields [B, T, C, H, W]")
    if hasattr(item, "index") and hasattr(item, "epoch") and hasattr(item, "position"):
        return Draw(int(item.index), int(item.epoch), int(item.position))
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        return Draw(int(item), int(epoch), int(item))
    if isinstance(item, torch.Tensor) and item.dim() == 0 and not item.is_floating_point():
        return Draw(int(item), int(epoch), int(item))
    raise ConfigError(f"sampler item {item!r}: a sampler must yield sample indices (int) or Draw records "
                      "(WeightedSampler); batch samplers go in batch_sampler=, which this library does not take")


def plan_epoch(sampler, epoch: int, offset: int = 0) -> NDArray[np.int64]:
    """``[n, 3]`` rows ``(index, epoch, position)`` of this rank's draws in ``epoch``, by :func:`as_draw`.

    ``WeightedSampler`` is computed directly (pure); any other sampler is iterated once (select its
    epoch first, e.g. ``set_epoch``). ``offset`` (``WeightedSampler`` only): plan only the global
    draws from that position on, split over the sampler's ranks (:func:`remainder_slice`; an elastic
    resumption).
    """
    if isinstance(sampler, WeightedSampler):
        idx, pos = sampler.rank_draw(epoch, offset=offset)
        return np.stack([idx, np.full_like(idx, epoch), pos], axis=1)
    if offset:
        raise ConfigError(f"plan_epoch: offset={offset} needs a WeightedSampler (a pure function of seed and epoch), "
                          f"not {type(sampler).__name__}")
    rows = [tuple(as_draw(item, epoch)) for item in sampler]
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def sample_weights(labels: NDArray[np.int64], num_classes: int) -> NDArray[np.float64]:
    """Per-sample weights giving every non-empty class the same total weight."""
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    with np.errstate(divide="ignore"):
        per_class = np.where(counts > 0, 1.0 / counts, 0.0)
    return per_class[labels]


def epoch_draw(n: int, num_samples: int, seed: int, epoch: int, mode: Mode, replacement: bool,
               weights: NDArray[np.float64] | None = None) -> NDArray[np.int64]:
    """The global draw of one epoch: ``num_samples`` sample indices in [0, n). Pure.

    Args:
        n: number of samples in the index.
        num_samples: draws in the epoch (before padding).
        seed, epoch: the draw is a function of these (and the other arguments) only.
        mode: ``sequential`` (0..n-1, same every epoch), ``uniform`` (shuffle), or ``balanced`` /
            ``weights`` (proportional to ``weights``).
        replacement: draw with replacement (a sample may repeat within the epoch).
        weights: per-sample non-negative weights (required for ``balanced`` / ``weights``).
    """
    if mode == "sequential":
        return np.arange(num_samples, dtype=np.int64)
    rng = np.random.default_rng([_SAMPLER_STREAM, int(seed), int(epoch)])
    if mode == "uniform":
        if replacement:
            return rng.integers(0, n, size=num_samples, dtype=np.int64)
        return rng.permutation(n)[:num_samples].astype(np.int64)
    if weights is None:
        raise ConfigError(f"mode={mode!r} needs per-sample weights")
    w = np.asarray(weights, dtype=np.float64)
    if replacement:
        p = w / w.sum()
        return rng.choice(n, size=num_samples, replace=True, p=p).astype(np.int64)
    # Without replacement: Efraimidis-Spirakis keys u^(1/w); the largest num_samples win. O(n log n).
    with np.errstate(divide="ignore"):
        keys = np.where(w > 0, np.log(rng.random(n)) / w, -np.inf)
    order = np.argsort(-keys, kind="stable")
    return order[:num_samples].astype(np.int64)


def rank_slice(global_draw: NDArray[np.int64], rank: int, world_size: int, drop_last: bool = False
               ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Pad (or trim) the global draw to a multiple of ``world_size`` and take rank's share.

    Returns:
        ``(indices, positions)`` for this rank; positions index the padded global draw, so a
        position >= ``len(global_draw)`` marks padding.
    """
    total = len(global_draw)
    if drop_last:
        per_rank = total // world_size
    else:
        per_rank = math.ceil(total / world_size) if total else 0
    padded_len = per_rank * world_size
    positions = np.arange(padded_len, dtype=np.int64)
    if padded_len > total:
        reps = math.ceil(padded_len / max(total, 1))
        padded = np.tile(global_draw, reps)[:padded_len]
    else:
        padded = global_draw[:padded_len]
    return padded[rank::world_size].astype(np.int64), positions[rank::world_size]


def remainder_slice(global_draw: NDArray[np.int64], offset: int, rank: int, world_size: int, drop_last: bool = False
                    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Rank's share of the global draw's positions from ``offset`` on, padded or trimmed as :func:`rank_slice`.

    The positions ``offset, offset + 1, ...`` are padded to a multiple of ``world_size`` (padding
    position ``p >= len(global_draw)`` repeats the draw's start: sample ``global_draw[p % n]``, as
    :func:`rank_slice`) or trimmed (``drop_last``), and dealt out strided: rank ``r`` gets the
    ``r``-th, ``r + world_size``-th, ... of them. With ``offset=0`` this is :func:`rank_slice`.

    This is how a resumption on another number of ranks splits what is left of an epoch: every rank
    advancing together through strided shares consumes a prefix of the global draw, so what is left
    is the draw from some position on.
    """
    total = len(global_draw)
    offset = min(max(int(offset), 0), total)
    rest = total - offset
    per_rank = rest // world_size if drop_last else -(-rest // world_size)
    positions = offset + np.arange(per_rank * world_size, dtype=np.int64)
    indices = np.asarray(global_draw, dtype=np.int64)[positions % max(total, 1)] if total else positions
    return indices[rank::world_size].astype(np.int64), positions[rank::world_size]


def _dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None or world_size is None:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world_size = dist.get_world_size() if world_size is None else world_size
        except ImportError:  # torch without distributed support
            pass
    return (0 if rank is None else int(rank)), (1 if world_size is None else int(world_size))


class LabelledItems:
    """What :class:`WeightedSampler` draws from besides a :class:`SampleIndex`: items with a class each
    (a :class:`~dali_backend.sampling.clips.ClipSampler` draws clips this way).

    Args:
        labels: int64 ``[n]`` class ids.
        classes: class names; ids are positions in this tuple.
        what: what an item is, for messages (``"clips"``).
    """

    def __init__(self, labels: NDArray[np.int64], classes: Sequence[str], what: str = "items"):
        self.labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        self.labels.flags.writeable = False
        self.classes, self.what = tuple(classes), what
        digest = hashlib.sha256(json.dumps([what, list(self.classes)]).encode())
        digest.update(self.labels.tobytes())
        self.fingerprint = digest.hexdigest()  # what a data schedule records of the items drawn from

    def __len__(self) -> int:
        return len(self.labels)

    def class_counts(self) -> NDArray[np.int64]:
        return np.bincount(self.labels, minlength=len(self.classes)).astype(np.int64)


class WeightedSampler(Sampler[Draw]):
    """Class-balanced (by default), distributed-aware sampler yielding :class:`Draw` records.

    Args:
        index: the :class:`SampleIndex` to draw from.
        num_samples: global draws per epoch (default: ``len(index)``, or the samples left to draw
            after :meth:`exclude` / :meth:`update_index`); each rank gets ``ceil(num_samples / world_size)``
            (or floor with ``drop_last``).
        seed: base seed; every rank must pass the same one.
        rank: this process's rank; default from ``torch.distributed`` when initialised, else 0.
        world_size: the number of ranks; default from ``torch.distributed`` when initialised, else 1.
        mode: ``"balanced"`` (each class equally often in expectation), ``"uniform"`` (shuffle),
            ``"weights"`` (``weights`` per sample) or ``"sequential"``.
        replacement: draw with replacement (default: True for ``balanced``/``weights``, False otherwise).
        weights: per-sample weights for ``mode="weights"``.
        drop_last: trim the global draw to a multiple of ``world_size`` instead of padding.

    ``len(sampler)`` is the number of draws this rank yields per epoch, padding included (of the
    selected epoch: it changes only at the epoch a data change takes effect).
    """

    # a rank's first k batches of B are the global positions r, r + W, ... < k * B * W, so every rank at
    # batch k has consumed a prefix of the global draw (what a resumption on other ranks relies on)
    consumes_prefix = True

    def __init__(self, index: SampleIndex, num_samples: int | None = None, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None, *, mode: Mode = "balanced", replacement: bool | None = None,
                 weights: Sequence[float] | NDArray[np.float64] | None = None, drop_last: bool = False):
        if not isinstance(index, (SampleIndex, LabelledItems)):
            raise ConfigError(f"WeightedSampler: index must be a SampleIndex, got {type(index).__name__}")
        n = len(index)
        if n == 0:
            raise ConfigError("WeightedSampler: the index is empty; check index.rejected and the data root")
        if mode not in ("balanced", "uniform", "weights", "sequential"):
            raise ConfigError(f"WeightedSampler: mode={mode!r}; use 'balanced', 'uniform', 'weights' or 'sequential'")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ConfigError(f"WeightedSampler: seed={seed!r}; must be a non-negative integer")
        rank, world_size = _dist_defaults(rank, world_size)
        if world_size < 1:
            raise ConfigError(f"WeightedSampler: world_size={world_size}; must be >= 1")
        if not 0 <= rank < world_size:
            raise ConfigError(f"WeightedSampler: invalid rank {rank}, rank should be in the interval [0, {world_size - 1}]")
        if replacement is None:
            replacement = mode in ("balanced", "weights")
        given = None if num_samples is None else int(num_samples)
        num_samples = n if given is None else given
        if num_samples < 1:
            raise ConfigError(f"WeightedSampler: num_samples={num_samples}; must be >= 1")
        w = None
        if mode == "balanced":
            w = sample_weights(index.labels, len(index.classes))
            empty = [c for c, k in zip(index.classes, index.class_counts()) if k == 0]
            if empty:
                log.warning("WeightedSampler: classes %s have no %s and are never drawn", empty,
                            getattr(index, "what", "samples"))
        elif mode == "weights":
            if weights is None:
                raise ConfigError("WeightedSampler: mode='weights' needs weights=[one per sample]")
            w = np.asarray(weights, dtype=np.float64).reshape(-1)
            if w.size != n or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise ConfigError(f"WeightedSampler: weights must be {n} finite non-negative numbers, not all zero "
                                  f"(got {w.size} values)")
        elif weights is not None:
            raise ConfigError(f"WeightedSampler: weights= is only used with mode='weights' (mode={mode!r})")
        if not replacement:
            available = n if w is None else int(np.count_nonzero(w))
            if num_samples > available:
                raise ConfigError(f"WeightedSampler: num_samples={num_samples} exceeds the {available} samples that can be "
                                  "drawn without replacement; pass replacement=True or a smaller num_samples")
        if mode == "sequential" and replacement:
            raise ConfigError("WeightedSampler: mode='sequential' cannot draw with replacement")
        self.seed, self._num_samples_given = int(seed), given
        self.rank, self.world_size, self.mode, self.replacement = rank, world_size, mode, bool(replacement)
        self.drop_last, self.epoch = drop_last, 0
        self._weights = w
        if w is not None:
            w.flags.writeable = False
        self.schedule = DataSchedule(index)

    # ------------------------------------------------------------------ what an epoch draws from
    @property
    def index(self) -> SampleIndex:
        """The index the selected epoch draws from (the constructor's until :meth:`update_index`)."""
        return self.schedule.index_at(self.epoch)

    def index_at(self, epoch: int) -> SampleIndex:
        """The index ``epoch`` draws from."""
        return self.schedule.index_at(epoch)

    @property
    def num_samples(self) -> int:
        """Global draws per epoch (of the selected epoch)."""
        return self.num_samples_at(self.epoch)

    def num_samples_at(self, epoch: int) -> int:
        """Global draws of ``epoch``: ``num_samples`` as given, else the samples it may draw from."""
        if self._num_samples_given is not None:
            return self._num_samples_given
        return self.schedule.at(epoch).available if self.schedule.changed else len(self.schedule.generations[0].index)

    def _epoch_weights(self, data) -> NDArray[np.float64] | None:
        """Per-sample weights over the drawable samples of an epoch (``data``: its :class:`EpochData`)."""
        index, active = data.index, data.active
        if self.mode == "balanced":
            labels = index.labels if active is None else index.labels[active]
            return sample_weights(labels, len(index.classes))
        if self.mode == "weights":
            return self._weights if active is None else self._weights[active]
        return None

    def _check_epoch_data(self, epoch: int, what: str) -> None:
        """A ConfigError if ``epoch``'s samples cannot give ``num_samples`` draws (checked when scheduling)."""
        data = self.schedule.at(epoch)
        available = data.available
        if available == 0:
            raise ConfigError(f"{what}: from epoch {epoch} no sample would be left to draw; exclude fewer samples")
        w = self._epoch_weights(data)
        drawable = available if w is None else int(np.count_nonzero(w))
        if drawable == 0:
            raise ConfigError(f"{what}: from epoch {epoch} every sample left has weight 0; exclude fewer samples")
        k = self.num_samples_at(epoch)
        if not self.replacement and k > drawable:
            raise ConfigError(f"{what}: num_samples={k} exceeds the {drawable} samples left to draw without "
                              f"replacement from epoch {epoch}; exclude fewer samples, or build the sampler with "
                              "num_samples=None (follows the samples left) or replacement=True")

    # ------------------------------------------------------------------ data changes
    def exclude(self, samples, from_epoch: int | None = None) -> None:
        """Never draw ``samples`` from epoch ``from_epoch`` on (default: the next epoch).

        Args:
            samples: positions in the index of that epoch, or file paths (relative to its root, or
                absolute under it); one or an iterable of them.
            from_epoch: first epoch without them (default ``self.epoch + 1``). Every rank must
                schedule the same change from the same epoch; pass it explicitly in distributed runs.

        The draw of an epoch is a pure function of (seed, epoch, the schedule): a balanced sampler
        re-balances the classes over the samples left, ``num_samples=None`` follows their count, and
        ``len(sampler)`` changes at ``from_epoch`` only. Excluded files are recorded by path, so they
        stay excluded after :meth:`update_index`.

        Raises:
            ConfigError: a sample not in the index, or too few samples left to draw.
        """
        from_epoch = self.epoch + 1 if from_epoch is None else check_epoch(from_epoch)
        paths = relative_paths(self.schedule.index_at(from_epoch), samples, "exclude")
        snap = self.schedule.snapshot()
        self.schedule.exclude(paths, from_epoch)
        self._validate_schedule(from_epoch, "exclude", snap)

    def update_index(self, index: SampleIndex, from_epoch: int | None = None) -> None:
        """Draw from ``index`` from epoch ``from_epoch`` on (default: the next epoch).

        ``index`` is typically ``old.update()`` (new files appended, removed ones gone; unchanged
        files keep their relative order). Its classes must start with the current ones (class ids
        keep their meaning). Exclusions stay in force by path. ``mode="weights"`` cannot follow a
        new index (its weights are per sample of the old one): build a new sampler instead.

        Raises:
            ConfigError: not a ``SampleIndex``, classes that do not extend the current ones, ``mode="weights"``.
        """
        if not isinstance(index, SampleIndex):
            raise ConfigError(f"update_index: index must be a SampleIndex, got {type(index).__name__}")
        if self.mode == "weights" and index.fingerprint != self.schedule.generations[0].fingerprint:
            raise ConfigError("update_index: a sampler with mode='weights' has one weight per sample of its index and "
                              "cannot follow another index; build a new WeightedSampler(index, mode='weights', "
                              "weights=...) for it")
        if len(index) == 0:
            raise ConfigError("update_index: the index is empty; check index.rejected and the data root")
        from_epoch = self.epoch + 1 if from_epoch is None else check_epoch(from_epoch)
        snap = self.schedule.snapshot()
        self.schedule.use_index(index, from_epoch)
        self._validate_schedule(from_epoch, "update_index", snap)

    def _validate_schedule(self, from_epoch: int, what: str, snap) -> None:
        try:
            for epoch in self.schedule.change_points():
                if epoch >= from_epoch and self.schedule.generations[self.schedule.generation(epoch)].index is not None:
                    self._check_epoch_data(epoch, what)
        except ConfigError:
            self.schedule.restore(snap)
            raise

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose draw ``__iter__`` yields (as ``DistributedSampler.set_epoch``)."""
        self.epoch = check_epoch(epoch)
        self.epoch_calls = getattr(self, "epoch_calls", 0) + 1  # a loader tells "chosen again" from "untouched"

    def global_draw(self, epoch: int | None = None) -> NDArray[np.int64]:
        """The epoch's draw for all ranks together, before padding."""
        e = self.epoch if epoch is None else epoch
        if not self.schedule.changed:
            n = len(self.schedule.generations[0].index)
            return epoch_draw(n, self.num_samples_at(e), self.seed, e, self.mode, self.replacement, self._weights)
        data = self.schedule.at(e)
        draw = epoch_draw(data.available, self.num_samples_at(e), self.seed, e, self.mode, self.replacement,
                          self._epoch_weights(data))
        return draw if data.active is None else data.active[draw]

    def rank_draw(self, epoch: int | None = None, offset: int = 0) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(indices, positions)`` this rank yields in ``epoch`` (default: the current one); from
        global position ``offset`` on (:func:`remainder_slice`) when given."""
        return self.partition_draw(self.epoch if epoch is None else epoch, offset, self.rank, self.world_size)

    def partition_draw(self, epoch: int, offset: int, rank: int, world_size: int
                       ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(indices, positions)`` rank ``rank`` of ``world_size`` yields in ``epoch`` from global position
        ``offset`` on: :meth:`rank_draw` of any partition (a resumption checks the saved one's plan)."""
        if offset:
            return remainder_slice(self.global_draw(epoch), offset, rank, world_size, self.drop_last)
        return rank_slice(self.global_draw(epoch), rank, world_size, self.drop_last)

    @property
    def num_padded(self) -> int:
        """Padding draws added to the global draw per epoch (all ranks together)."""
        return len(self) * self.world_size - self.num_samples if not self.drop_last else 0

    def draws(self, epoch: int | None = None) -> list[Draw]:
        e = self.epoch if epoch is None else epoch
        idx, pos = self.rank_draw(e)
        return [Draw(int(i), e, int(p)) for i, p in zip(idx, pos)]

    def __iter__(self) -> Iterator[Draw]:
        return iter(self.draws())

    def __len__(self) -> int:
        return self.rank_len(self.num_samples)

    def rank_len(self, num_samples: int, world_size: int | None = None) -> int:
        """Draws a rank yields from ``num_samples`` global draws (padding included) over ``world_size`` ranks."""
        world = self.world_size if world_size is None else world_size
        return num_samples // world if self.drop_last else math.ceil(num_samples / world)

    def __repr__(self) -> str:
        gen = self.schedule.generations[self.schedule.generation(self.epoch)]  # never raises (a known-by-fingerprint index too)
        drawn = self.num_samples_at(self.epoch) if gen.index is not None else self._num_samples_given
        return (f"WeightedSampler(n={gen.samples}, num_samples={drawn}, mode={self.mode!r}, "
                f"replacement={self.replacement}, seed={self.seed}, rank={self.rank}/{self.world_size}, epoch={self.epoch})")


def default_seed(shuffle: bool) -> int:
    """The default sampler's seed when none is given: for a shuffle, one draw from torch's global RNG
    (so ``torch.manual_seed(s)`` picks the order, as ``DataLoader(shuffle=True)``), except in a
    distributed run, where it is 0 like ``DistributedSampler``'s (ranks' global RNGs may differ, and a
    broadcast at construction could deadlock a rank that makes a loader alone); the order without a
    shuffle depends on no seed."""
    if not shuffle or _dist_defaults(None, None)[1] > 1:
        return 0
    return int(torch.empty((), dtype=torch.int64).random_().item()) % 2**63


def default_sampler(index: SampleIndex, shuffle: bool, seed: int) -> WeightedSampler:
    """DataLoader's defaults in our terms: a shuffle or the index order, every sample once."""
    return WeightedSampler(index, seed=seed, mode="uniform" if shuffle else "sequential", replacement=False)
