"""Aspect-ratio grouping: each rank's draw reordered so that a batch holds images of one shape.

A variable-size batch (``AugmentSpec(pad_batch=k)``) is padded to its largest height and width: a
portrait image beside a landscape one pads both to nearly square. :class:`AspectGroupedSampler`
reorders each rank's draws, as torchvision's detection reference ``GroupedBatchSampler`` does, so
that consecutive runs of ``batch_size`` draws share an aspect-ratio group; only the last few batches
of a pass (the groups' leftovers, at most ``groups - 1`` batches) mix groups.

The trade-off: the reordering changes which draws share a batch and the order the model sees them,
never which draws an epoch has, their positions, or so their augmentation parameters. Each rank
reorders its own share of the global draw, so k batches are no longer a prefix of the global draw on
every rank: a state saved mid-epoch resumes exactly on the same ranks, not on another number of them.
Measured with ``python -m bench.padding`` (192 images, landscape 4:3 and 16:9, portrait 3:4 and 9:16,
square; ``Resize(192, max_size=320)``, ``pad_batch=32``, batches of 16), the share of the batches'
pixels that are padding: 51.1 % shuffled, 21.8 % grouped (``groups=2``), 12.7 % (``groups=3``), the
same on both backends; the throughput did not drop (see ``docs/guides/loader-options.md``).

:func:`padding_fraction` measures the waste from the sizes a padded loader yields.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from ..index import SampleIndex
from .sampler import WeightedSampler

# groups=k spreads its edges evenly in log(w / h) over [1/2, 2]: beyond that a ratio joins the extreme group
_RATIO_SPAN = 2.0


def aspect_edges(groups: int | Sequence[float]) -> NDArray[np.float64]:
    """The ``w / h`` ratios separating aspect groups: ``groups - 1`` edges, or the edges given.

    Args:
        groups: the number of groups (2: portrait ``w < h`` and the rest; ``k > 2``: edges evenly
            spaced in ``log(w / h)`` between 1/2 and 2, e.g. 3: 0.79 and 1.26), or the edges
            themselves, increasing positive ``w / h`` ratios (group ``g`` holds the ratios in
            ``[edges[g - 1], edges[g])``).

    Raises:
        ConfigError: not a positive integer, or edges that are not increasing positive numbers.
    """
    if isinstance(groups, (int, np.integer)) and not isinstance(groups, bool):
        if groups < 1:
            raise ConfigError(f"AspectGroupedSampler: groups={groups}; pass a number of groups >= 1 (2: portrait "
                              "and landscape) or the w/h ratios that separate them, e.g. groups=[0.8, 1.25]")
        if groups == 2:
            return np.array([1.0])
        span = math.log(_RATIO_SPAN)
        return np.exp(np.linspace(-span, span, int(groups) + 1)[1:-1])
    if np.ndim(groups) == 0:  # 2.0 from a config file: a count or one edge? refused rather than guessed
        raise ConfigError(f"AspectGroupedSampler: groups={groups!r}; pass a number of groups as an int (e.g. 2: "
                          "portrait and landscape), or the w/h ratios separating them as a list (e.g. [1.0])")
    try:
        edges = np.asarray(groups, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        edges = np.array([np.nan])
    if edges.size == 0 or not np.all(np.isfinite(edges)) or np.any(edges <= 0) or np.any(np.diff(edges) <= 0):
        raise ConfigError(f"AspectGroupedSampler: groups={groups!r}; pass a number of groups, or increasing positive "
                          "w/h ratios separating them, e.g. groups=[0.8, 1.25] (portrait, near-square, landscape)")
    return edges


def aspect_groups(widths: NDArray, heights: NDArray, edges: NDArray[np.float64]) -> NDArray[np.int64]:
    """The aspect group of each ``widths[i] x heights[i]`` image: ``g`` with ``edges[g - 1] <= w / h < edges[g]``."""
    ratio = np.asarray(widths, dtype=np.float64) / np.maximum(np.asarray(heights, dtype=np.float64), 1.0)
    return np.searchsorted(edges, ratio, side="right").astype(np.int64)


def grouped_order(groups: NDArray[np.int64], batch_size: int) -> NDArray[np.int64]:
    """The permutation of draws that batches them by group, as ``GroupedBatchSampler``. Pure.

    Draws go, in order, to their group's bucket; a bucket that reaches ``batch_size`` is emitted as
    the next batch. What is left in the buckets at the end comes last, group after group (each in
    draw order), so at most ``groups - 1`` batches (the last partial one included) mix groups.

    Args:
        groups: int64 ``[n]`` group of each draw, in draw order.
        batch_size: draws per batch.

    Returns:
        int64 ``[n]``: draw ``order[j]`` goes to place ``j``.
    """
    g = np.asarray(groups, dtype=np.int64).reshape(-1)
    n = len(g)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    by_group = np.argsort(g, kind="stable")  # each group's draws, in draw order
    sg = g[by_group]
    counts = np.bincount(g)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(n) - starts[sg]  # the draw's place in its group
    full = rank < (counts // batch_size * batch_size)[sg]
    # a full batch is emitted when its last draw arrives: order full batches by that draw
    last = by_group[(starts[sg] + rank // batch_size * batch_size + batch_size - 1)[full]]
    emit = np.lexsort((rank[full], last))
    return np.concatenate([by_group[full][emit], by_group[~full]]).astype(np.int64)


def padding_fraction(sizes: Iterable, multiple: int = 1) -> float:
    """The share of padded batches' pixels that are padding: ``1 - valid pixels / batch pixels``.

    Each batch is ``B x H x W`` with ``H`` and ``W`` its largest valid height and width rounded up to
    a multiple of ``multiple``, as ``AugmentSpec(pad_batch=multiple)`` pads it. Pure.

    Args:
        sizes: each batch's valid ``(height, width)`` per image, the third item a padded loader
            yields (int ``[B, 2]``, or ``[B, T, 2]`` for clips; tensors or arrays).
        multiple: the spec's ``pad_batch``.

    Returns:
        The fraction in [0, 1) (0.0 for no batches).

    Raises:
        ConfigError: ``multiple`` not a positive integer, or sizes that are not ``[..., 2]`` positive.
    """
    if not isinstance(multiple, (int, np.integer)) or isinstance(multiple, bool) or multiple < 1:
        raise ConfigError(f"padding_fraction: multiple={multiple!r}; pass the spec's pad_batch (a positive integer)")
    valid = total = 0
    for k, batch in enumerate(sizes):
        hw = np.asarray(batch, dtype=np.int64)
        if hw.ndim < 2 or hw.shape[-1] != 2 or hw.size == 0 or hw.min() < 1:
            raise ConfigError(f"padding_fraction: batch {k} has sizes of shape {hw.shape}; pass each batch's [B, 2] "
                              "valid (height, width), as the loader yields them")
        hw = hw.reshape(-1, 2)
        h, w = (-(-hw.max(axis=0) // multiple) * multiple).tolist()
        valid += int((hw[:, 0] * hw[:, 1]).sum())
        total += len(hw) * h * w
    return 0.0 if total == 0 else 1.0 - valid / total


def _shared(name: str) -> property:
    """An attribute of the wrapped sampler, read and written through."""
    return property(lambda self: getattr(self.sampler, name), lambda self, value: setattr(self.sampler, name, value),
                    doc=f"The wrapped sampler's ``{name}``.")


class AspectGroupedSampler(WeightedSampler):
    """A :class:`WeightedSampler` whose rank draws come in batches of one aspect-ratio group.

    A view of ``sampler``: the same draws of every epoch on every rank (the same ``(index,
    position)`` pairs, so the same augmentation parameters), the same length, data changes and
    epoch (``set_epoch`` on either is seen by both), reordered per rank by :func:`grouped_order` so
    that each run of ``batch_size`` draws shares a group (the last few batches of a pass excepted).
    The order is a pure function of (seed, epoch, rank, world size, data schedule), the same on
    both backends. Pass it to ``DaliLoader(dataset, batch_size=batch_size, sampler=grouped)`` with a
    spec that pads variable-size batches (``AugmentSpec(pad_batch=k)``).

    Shapes come from the index: the JPEG frame header's width and height, *before* EXIF rotation
    (the index does not record the orientation). A photo stored landscape and turned portrait by
    its EXIF tag is grouped as landscape: it costs padding, never correctness. Operations that
    change the aspect ratio at random (a random crop) make the grouping less effective.

    A state saved mid-epoch resumes exactly on the same ranks (``load_state_dict``); on another
    number of ranks only at an epoch boundary (the batches a rank yielded are no prefix of the
    global draw). ``exclude``/``update_index`` work as on ``sampler``; the groups of an epoch come
    from the index that epoch draws from.

    Args:
        sampler: the :class:`WeightedSampler` to reorder (its index a :class:`SampleIndex`).
        batch_size: the loader's batch size (each rank's).
        groups: the number of aspect groups (default 2: portrait ``w < h``, and landscape or
            square) or the ``w / h`` ratios separating them (:func:`aspect_edges`).

    Raises:
        ConfigError: a sampler that is not a :class:`WeightedSampler` over a :class:`SampleIndex`
            (a :class:`~dali_backend.sampling.clips.ClipSampler`, another sampler, one already grouped), a
            ``batch_size`` that is not a positive integer, or bad ``groups``.
    """

    consumes_prefix = False  # a rank's first k batches are not global positions [0, k * B * W)

    seed = _shared("seed")
    rank = _shared("rank")
    world_size = _shared("world_size")
    mode = _shared("mode")
    replacement = _shared("replacement")
    drop_last = _shared("drop_last")
    epoch = _shared("epoch")
    epoch_calls = _shared("epoch_calls")
    schedule = _shared("schedule")
    _weights = _shared("_weights")
    _num_samples_given = _shared("_num_samples_given")

    def __init__(self, sampler: WeightedSampler, batch_size: int, groups: int | Sequence[float] = 2):
        if isinstance(sampler, AspectGroupedSampler):
            raise ConfigError("AspectGroupedSampler: the sampler is already grouped; pass its .sampler (the "
                              "WeightedSampler inside) to group it another way")
        if hasattr(sampler, "clip_len") and hasattr(sampler, "frames"):
            raise ConfigError(f"AspectGroupedSampler: sampler is a {type(sampler).__name__}; clips are not grouped "
                              "(the frames of a sequence share one size already): pass the ClipSampler to the loader "
                              "as it is")
        if not isinstance(sampler, WeightedSampler):
            raise ConfigError(f"AspectGroupedSampler: sampler must be a WeightedSampler (a pure function of seed and "
                              f"epoch), got {type(sampler).__name__}; build WeightedSampler(index, ...) and wrap it")
        if not isinstance(sampler.schedule.generations[0].index, SampleIndex):
            raise ConfigError("AspectGroupedSampler: the WeightedSampler draws from items without image sizes; build "
                              "it on the SampleIndex of the dataset")
        if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"AspectGroupedSampler: batch_size={batch_size!r}; pass the loader's batch size (a "
                              "positive integer)")
        self.sampler, self.batch_size = sampler, int(batch_size)
        self.edges = aspect_edges(groups)
        self.edges.flags.writeable = False
        # what a saved state records of the grouping (load_state_dict compares it)
        self.grouping = f"aspect:{self.batch_size}:" + ",".join(f"{e:.6g}" for e in self.edges)

    @property
    def num_groups(self) -> int:
        """The number of aspect groups."""
        return len(self.edges) + 1

    def groups_of(self, indices: NDArray[np.int64], epoch: int | None = None) -> NDArray[np.int64]:
        """The aspect group of each sample of ``indices`` (positions in the index ``epoch`` draws from)."""
        index = self.index_at(self.epoch if epoch is None else epoch)
        idx = np.asarray(indices, dtype=np.int64)
        return aspect_groups(index.widths[idx], index.heights[idx], self.edges)

    def partition_draw(self, epoch: int, offset: int, rank: int, world_size: int
                       ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(indices, positions)`` of rank ``rank`` of ``world_size`` in ``epoch`` from global position
        ``offset`` on, batched by group (:func:`grouped_order`)."""
        idx, pos = self.sampler.partition_draw(epoch, offset, rank, world_size)
        order = grouped_order(self.groups_of(idx, epoch), self.batch_size)
        return idx[order], pos[order]

    def __repr__(self) -> str:
        edges = ", ".join(f"{e:.3g}" for e in self.edges)
        return f"AspectGroupedSampler({self.sampler!r}, batch_size={self.batch_size}, edges=[{edges}])"
