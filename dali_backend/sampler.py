"""Class-weighted, distributed-aware sampling as pure functions, and a torch ``Sampler`` over them.

One global draw per (seed, epoch) is computed identically on every rank, padded like
``DistributedSampler`` (by repeating its start) to a multiple of the world size, and sliced by rank
(``draw[rank::world_size]``). PyTorch has no weighted distributed sampler (pytorch/pytorch#77154):
this is one. Each yielded :class:`Draw` carries its epoch and its position in the global draw, so
a sample drawn twice gets its own augmentation parameters.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray
import torch
from torch.utils.data import Sampler

from .errors import ConfigError
from .index import SampleIndex

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


def plan_epoch(sampler, epoch: int) -> NDArray[np.int64]:
    """``[n, 3]`` rows ``(index, epoch, position)`` of this rank's draws in ``epoch``, by :func:`as_draw`.

    ``WeightedSampler`` is computed directly (pure); any other sampler is iterated once (select its
    epoch first, e.g. ``set_epoch``).
    """
    if isinstance(sampler, WeightedSampler):
        idx, pos = sampler.rank_draw(epoch)
        return np.stack([idx, np.full_like(idx, epoch), pos], axis=1)
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
    (a :class:`~dali_backend.clips.ClipSampler` draws clips this way).

    Args:
        labels: int64 ``[n]`` class ids.
        classes: class names; ids are positions in this tuple.
        what: what an item is, for messages (``"clips"``).
    """

    def __init__(self, labels: NDArray[np.int64], classes: Sequence[str], what: str = "items"):
        self.labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        self.labels.flags.writeable = False
        self.classes, self.what = tuple(classes), what

    def __len__(self) -> int:
        return len(self.labels)

    def class_counts(self) -> NDArray[np.int64]:
        return np.bincount(self.labels, minlength=len(self.classes)).astype(np.int64)


class WeightedSampler(Sampler[Draw]):
    """Class-balanced (by default), distributed-aware sampler yielding :class:`Draw` records.

    Args:
        index: the :class:`SampleIndex` to draw from.
        num_samples: global draws per epoch (default: ``len(index)``); each rank gets
            ``ceil(num_samples / world_size)`` (or floor with ``drop_last``).
        seed: base seed; every rank must pass the same one.
        rank: this process's rank; default from ``torch.distributed`` when initialised, else 0.
        world_size: the number of ranks; default from ``torch.distributed`` when initialised, else 1.
        mode: ``"balanced"`` (each class equally often in expectation), ``"uniform"`` (shuffle),
            ``"weights"`` (``weights`` per sample) or ``"sequential"``.
        replacement: draw with replacement (default: True for ``balanced``/``weights``, False otherwise).
        weights: per-sample weights for ``mode="weights"``.
        drop_last: trim the global draw to a multiple of ``world_size`` instead of padding.

    ``len(sampler)`` is the number of draws this rank yields per epoch, padding included.
    """

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
        num_samples = n if num_samples is None else int(num_samples)
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
        self.index, self.num_samples, self.seed = index, num_samples, int(seed)
        self.rank, self.world_size, self.mode, self.replacement = rank, world_size, mode, bool(replacement)
        self.drop_last, self.epoch = drop_last, 0
        self._weights = w
        if w is not None:
            w.flags.writeable = False

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose draw ``__iter__`` yields (as ``DistributedSampler.set_epoch``)."""
        self.epoch = check_epoch(epoch)
        self.epoch_calls = getattr(self, "epoch_calls", 0) + 1  # a loader tells "chosen again" from "untouched"

    def global_draw(self, epoch: int | None = None) -> NDArray[np.int64]:
        """The epoch's draw for all ranks together, before padding."""
        e = self.epoch if epoch is None else epoch
        return epoch_draw(len(self.index), self.num_samples, self.seed, e, self.mode, self.replacement, self._weights)

    def rank_draw(self, epoch: int | None = None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(indices, positions)`` this rank yields in ``epoch`` (default: the current one)."""
        return rank_slice(self.global_draw(epoch), self.rank, self.world_size, self.drop_last)

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
        if self.drop_last:
            return self.num_samples // self.world_size
        return math.ceil(self.num_samples / self.world_size)

    def __repr__(self) -> str:
        return (f"WeightedSampler(n={len(self.index)}, num_samples={self.num_samples}, mode={self.mode!r}, "
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
