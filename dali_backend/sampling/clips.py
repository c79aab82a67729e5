"""Clips: windows of frames cut from sequences, drawn per epoch like single samples.

A clip is ``clip_len`` frames of one sequence (:mod:`dali_backend.sampling.sequences`), ``stride`` frames
apart; clip starts are ``step`` frames apart, and a window is a clip only if it fits inside its
sequence (9 frames, ``clip_len=4``, ``step=2``: starts 0, 2, 4). The clips of a data set are a few
numpy arrays (each clip's sequence and first frame), computed once; which clips an epoch draws is
:class:`~dali_backend.sampling.sampler.WeightedSampler`'s draw over them (their labels and their count): the
same modes, the same purity in (seed, epoch), the same distributed padding. So the trade-off is
WeightedSampler's: one global draw per epoch, computed on every rank.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray
from torch.utils.data import Sampler

from ..errors import ConfigError
from ..core.reading import ClipTable
from .sampler import LabelledItems, Mode, WeightedSampler, check_epoch
from .sequences import SHOWN, Sequences, shown_text

log = logging.getLogger("dali_backend")
ClipLabel = Literal["sequence", "majority"]
__all__ = ["Clip", "ClipSampler"]


class Clip(NamedTuple):
    """One clip drawn in an epoch.

    Attributes:
        clip: the clip's number in :attr:`ClipSampler.starts` (all clips of the data set).
        frames: its ``clip_len`` sample indices, in frame order.
        epoch: the epoch it was drawn in.
        position: its position in the epoch's global draw (every frame is augmented with this
            position, so the frames share their parameters).
        label: the clip's class id.
    """

    clip: int
    frames: tuple[int, ...]
    epoch: int
    position: int
    label: int


def _positive(name: str, value) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"ClipSampler: {name}={value!r}; must be a positive integer (frames)")
    return int(value)


class ClipSampler(Sampler[Clip]):
    """Class-balanced (by default), distributed-aware sampler of clips: windows of frames of sequences.

    Windows: ``clip_len`` frames, ``stride`` frames apart (a clip spans ``(clip_len - 1) * stride + 1``
    frames), starting every ``step`` frames from each sequence's first; a window is a clip only if it
    fits inside its sequence, so a 9-frame sequence with ``clip_len=4, step=2`` gives clips starting at
    frames 0, 2 and 4. Sequences shorter than a clip's span give none: they are logged and listed in
    :attr:`skipped`.

    Labels: with ``label="sequence"`` (default), a clip's label is its sequence's class, and a
    sequence whose frames carry different labels is refused (:class:`ConfigError` naming it). With
    ``label="majority"``, a clip's label is the most frequent label among the clip's own frames,
    ties going to the smaller class id.

    Draws: which clips an epoch yields is :class:`WeightedSampler`'s draw over the clips (a pure
    function of seed and epoch; ``balanced`` weights each class of clips equally, ``uniform``
    shuffles, ``weights`` takes one weight per clip, ``sequential`` runs the clips in order),
    padded and sliced by rank like it.

    ``len(sampler)`` is the number of clips this rank yields per epoch (padding included): a
    ``DaliLoader`` over it has ``len(sampler) / batch_size`` batches, each ``clip_len`` times as many
    frames; with overlapping windows (``step < clip_len``) that is not the number of frames.

    Args:
        index_or_sequences: a :class:`~dali_backend.sampling.sequences.Sequences`, or a
            :class:`~dali_backend.index.SampleIndex` (grouped by folder:
            :meth:`Sequences.from_index`).
        clip_len: frames per clip (T).
        step: frames between the starts of consecutive clips of a sequence.
        stride: frames between consecutive frames of a clip (1: adjacent frames).
        mode: ``"balanced"``, ``"uniform"``, ``"weights"`` or ``"sequential"`` (as WeightedSampler's).
        num_samples: clips drawn per epoch, all ranks together (default: the number of clips).
        seed: base seed; every rank must pass the same one.
        rank: this process's rank, as WeightedSampler's (default from ``torch.distributed``, else 0).
        world_size: the number of ranks, as WeightedSampler's (default from ``torch.distributed``, else 1).
        replacement: as WeightedSampler's (default: True for balanced/weights).
        weights: one weight per clip for ``mode="weights"``.
        drop_last: trim the global draw to a multiple of ``world_size`` instead of padding.
        label: ``"sequence"`` or ``"majority"`` (see above).
    """

    def __init__(self, index_or_sequences, clip_len: int, step: int, stride: int = 1, *, mode: Mode = "balanced",
                 num_samples: int | None = None, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None, replacement: bool | None = None,
                 weights: Sequence[float] | NDArray[np.float64] | None = None, drop_last: bool = False,
                 label: ClipLabel = "sequence"):
        from ..index import SampleIndex

        if isinstance(index_or_sequences, SampleIndex):
            index_or_sequences = Sequences.from_index(index_or_sequences)
        if not isinstance(index_or_sequences, Sequences):
            raise ConfigError(f"ClipSampler: expected a Sequences or a SampleIndex, got "
                              f"{type(index_or_sequences).__name__}; build Sequences.from_index(index) or "
                              "Sequences.from_manifest(index, csv, sequence_column, frame_column)")
        if label not in ("sequence", "majority"):
            raise ConfigError(f"ClipSampler: label={label!r}; use 'sequence' (every frame of a sequence must agree) "
                              "or 'majority' (the most frequent label of the clip's frames, ties to the smaller id)")
        self.sequences = seqs = index_or_sequences
        self.index = seqs.index
        self.clip_len, self.step, self.stride = _positive("clip_len", clip_len), _positive("step", step), \
            _positive("stride", stride)
        self.label = label
        span = (self.clip_len - 1) * self.stride + 1
        lengths = seqs.lengths
        counts = np.where(lengths >= span, (lengths - span) // self.step + 1, 0).astype(np.int64)
        self.skipped: NDArray[np.int64] = np.flatnonzero(counts == 0).astype(np.int64)
        if len(self.skipped):
            shown = [f"{seqs.names[int(s)]!r} ({int(lengths[s])} frames)" for s in self.skipped[:SHOWN]]
            log.warning("ClipSampler: %d sequence(s) shorter than a clip (%d frames: clip_len=%d, stride=%d) give no "
                        "clip: %s", len(self.skipped), span, self.clip_len, self.stride,
                        shown_text(shown, len(self.skipped)))
        total = int(counts.sum())
        if total == 0:
            raise ConfigError(f"ClipSampler: no sequence holds a clip of {span} frames (clip_len={self.clip_len}, "
                              f"stride={self.stride}); the longest has {int(lengths.max(initial=0))} frames: use a "
                              "smaller clip_len or stride")
        self.clip_sequence = np.repeat(np.arange(len(seqs), dtype=np.int64), counts)
        first_clip = np.repeat(np.cumsum(counts) - counts, counts)
        self.starts = seqs.offsets[self.clip_sequence] + (np.arange(total, dtype=np.int64) - first_clip) * self.step
        for a in (self.skipped, self.clip_sequence, self.starts):
            a.flags.writeable = False
        self.labels = self._clip_labels(counts)
        self.labels.flags.writeable = False
        self._sampler = WeightedSampler(LabelledItems(self.labels, self.index.classes, "clips"), num_samples, seed, rank,
                                        world_size, mode=mode, replacement=replacement, weights=weights,
                                        drop_last=drop_last)
        inner = self._sampler
        self.num_samples, self.seed, self.rank, self.world_size = inner.num_samples, inner.seed, inner.rank, \
            inner.world_size
        self.mode, self.replacement, self.drop_last = inner.mode, inner.replacement, inner.drop_last

    def _clip_labels(self, counts: NDArray[np.int64]) -> NDArray[np.int64]:
        seqs, labels = self.sequences, self.index.labels
        frame_labels = labels[seqs.frames]
        starts = seqs.offsets[:-1]
        nonempty = seqs.lengths > 0
        low = np.full(len(seqs), -1, np.int64)
        high = np.full(len(seqs), -1, np.int64)
        low[nonempty] = np.minimum.reduceat(frame_labels, starts[nonempty])
        high[nonempty] = np.maximum.reduceat(frame_labels, starts[nonempty])
        mixed = np.flatnonzero(low != high)
        if self.label == "sequence":
            if len(mixed):
                shown = []
                for s in mixed[:SHOWN]:
                    found = np.bincount(frame_labels[seqs.offsets[s]:seqs.offsets[s + 1]],
                                        minlength=len(self.index.classes))
                    shown.append(f"{seqs.names[int(s)]!r} (" + ", ".join(
                        f"{self.index.classes[c]} {int(k)}" for c, k in enumerate(found) if k) + ")")
                raise ConfigError(f"ClipSampler: {len(mixed)} sequence(s) hold frames of different classes: "
                                  f"{shown_text(shown, len(mixed))}; a clip's label would be a guess. Fix the labels, "
                                  "or pass label='majority' (each clip takes the most frequent label of its frames, "
                                  "ties to the smaller class id)")
            return low[self.clip_sequence].astype(np.int64)
        out = low[self.clip_sequence].astype(np.int64)
        todo = np.flatnonzero(np.isin(self.clip_sequence, mixed))
        for chunk in range(0, len(todo), 65536):  # [chunk, T] labels at a time
            ids = todo[chunk:chunk + 65536]
            lab = labels[self.frames(ids)]
            votes = np.stack([(lab == c).sum(axis=1) for c in range(len(self.index.classes))], axis=1)
            out[ids] = np.argmax(votes, axis=1)  # the first (smallest) class id among the largest counts
        return out

    # ----------------------------------------------------------------------------------- clips
    @property
    def num_clips(self) -> int:
        """Clips of the data set (windows that fit in their sequences), before any draw."""
        return len(self.starts)

    def frames(self, clips: NDArray[np.int64] | Sequence[int]) -> NDArray[np.int64]:
        """``[n, clip_len]`` sample indices of ``clips`` (clip numbers), each row in frame order."""
        clips = np.asarray(clips, dtype=np.int64).reshape(-1)
        offsets = self.starts[clips][:, None] + np.arange(self.clip_len, dtype=np.int64)[None, :] * self.stride
        return self.sequences.frames[offsets]

    def table(self) -> ClipTable:
        """The clips as plain arrays for the readers (``on_error="skip"`` replaces whole clips)."""
        return ClipTable(self.sequences.frames, self.starts, self.labels, self.clip_len, self.stride)

    # ----------------------------------------------------------------------------------- draws
    @property
    def epoch(self) -> int:
        return self._sampler.epoch

    @property
    def epoch_calls(self) -> int | None:
        return getattr(self._sampler, "epoch_calls", None)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose draw ``__iter__`` yields (as ``DistributedSampler.set_epoch``)."""
        self._sampler.set_epoch(check_epoch(epoch))

    def global_draw(self, epoch: int | None = None) -> NDArray[np.int64]:
        """The epoch's clip numbers for all ranks together, before padding."""
        return self._sampler.global_draw(epoch)

    def rank_draw(self, epoch: int | None = None, offset: int = 0) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(clip numbers, positions)`` this rank yields in ``epoch`` (default: the current one); from
        global position ``offset`` on when given (an elastic resumption, as WeightedSampler's)."""
        return self._sampler.rank_draw(epoch, offset=offset)

    # a resumption on another rank or number of ranks: the same partition rule as WeightedSampler's
    consumes_prefix = True  # every rank's batches are strided shares of one global draw

    def partition_draw(self, epoch: int, offset: int, rank: int, world_size: int
                       ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(clip numbers, positions)`` rank ``rank`` of ``world_size`` yields in ``epoch`` from global
        position ``offset`` on (:meth:`WeightedSampler.partition_draw` over the clips)."""
        return self._sampler.partition_draw(epoch, offset, rank, world_size)

    def num_samples_at(self, epoch: int) -> int:
        """Global clip draws of ``epoch`` (the clips do not change between epochs: ``num_samples``)."""
        return self._sampler.num_samples_at(epoch)

    def rank_len(self, num_samples: int, world_size: int | None = None) -> int:
        """Clips a rank yields from ``num_samples`` global draws over ``world_size`` ranks (padding included)."""
        return self._sampler.rank_len(num_samples, world_size)

    @property
    def num_padded(self) -> int:
        """Padding clips added to the global draw per epoch (all ranks together)."""
        return self._sampler.num_padded

    def clips(self, epoch: int | None = None) -> list[Clip]:
        """This rank's clips of ``epoch`` (default: the current one) as :class:`Clip` records."""
        e = self.epoch if epoch is None else check_epoch(epoch)
        ids, pos = self.rank_draw(e)
        frames = self.frames(ids)
        return [Clip(int(c), tuple(int(f) for f in fr), e, int(p), int(self.labels[c]))
                for c, fr, p in zip(ids, frames, pos)]

    def __iter__(self) -> Iterator[Clip]:
        return iter(self.clips())

    def __len__(self) -> int:
        return len(self._sampler)

    def report(self) -> str:
        """The clips per class, the sequences skipped as shorter than a clip, and the sequences' report."""
        span = (self.clip_len - 1) * self.stride + 1
        counts = np.bincount(self.labels, minlength=len(self.index.classes))
        lines = [f"{self.num_clips} clip(s) of {self.clip_len} frames (stride {self.stride}, step {self.step}, span "
                 f"{span}) in {len(self.sequences) - len(self.skipped)} sequence(s): " + ", ".join(
                     f"{c} {int(k)}" for c, k in zip(self.index.classes, counts)),
                 f"{len(self.skipped)} sequence(s) shorter than {span} frames give no clip"]
        lines += [f"  skipped: {self.sequences.names[int(s)]!r} ({int(self.sequences.lengths[s])} frames)"
                  for s in self.skipped]
        return "\n".join(lines + [self.sequences.report()])

    def __repr__(self) -> str:
        return (f"ClipSampler(clips={self.num_clips}, clip_len={self.clip_len}, step={self.step}, stride={self.stride}, "
                f"num_samples={self.num_samples}, mode={self.mode!r}, seed={self.seed}, "
                f"rank={self.rank}/{self.world_size}, epoch={self.epoch})")

