"""The traversal of a pass as an object, one class per sampler kind, chosen in ONE place (:func:`make_plan`).

As FFCV's ``TraversalOrder``: the loader asks its plan, never the sampler's type, what a pass draws
(:meth:`PassPlan.rows`), which key names batches prepared ahead (:meth:`PassPlan.prefetch_key`), how
many draws an epoch has before padding (:meth:`PassPlan.num_samples`), which index an epoch draws
from, and whether the sampler deals one global draw over ranks (elastic resumption) or carries a
data schedule (``exclude`` / ``update_index``). The kinds:

- :class:`IndexPlan`: any sampler of indices (``as_draw`` makes a draw of each).
- :class:`WeightedPlan`: a :class:`~dali_backend.sampling.sampler.WeightedSampler`: pure, partitioned,
  padded, with a data schedule.
- :class:`GroupedPlan`: an :class:`~dali_backend.sampling.grouping.AspectGroupedSampler`: batches of
  one aspect group (checked against the loader's batch size and spec).
- :class:`ClipPlan`: a :class:`~dali_backend.sampling.clips.ClipSampler`: each draw is ``clip_len``
  frames run as ordinary rows sharing the clip's position, regrouped by the facade.

Each is built from a sampler and a dataset alone (no loader), so a test can build one.
"""

from __future__ import annotations

import numpy as np

from ..core.boundary import planned_rows
from ..errors import ConfigError
from ..sampling.sampler import WeightedSampler, plan_epoch


class IndexPlan:
    """A sampler of indices: its rows through :func:`~dali_backend.sampling.sampler.plan_epoch`."""

    clips = False  # a draw is a clip of clip_len frames, regrouped [B, T, ...] by the facade
    clip_len = 1  # planned rows per draw
    partitioned = False  # one global draw dealt out over ranks (a state resumes on other ranks)
    weighted = False  # a WeightedSampler: padding known, data schedule, length per epoch

    def __init__(self, sampler, dataset):
        self.sampler, self.dataset = sampler, dataset

    def check(self, batch_size: int) -> None:
        """Refuse (:class:`ConfigError`) a loader this sampler does not fit."""

    def draws(self, epoch: int, offset: int = 0) -> np.ndarray:
        """``[n, 3]`` (index, epoch, position) draws of ``epoch`` on this rank, from global ``offset`` on."""
        rows = plan_epoch(self.sampler, epoch, offset)
        n = len(self.dataset.index)
        if rows.size and (rows[:, 0].min() < 0 or rows[:, 0].max() >= n):
            bad = int(rows[(rows[:, 0] < 0) | (rows[:, 0] >= n), 0][0])
            raise IndexError(f"the sampler yielded sample index {bad}, outside [0, {n}) for the {n} samples of the "
                             "dataset's index; build the sampler on this index")
        return rows

    def rows(self, epoch: int, offset: int = 0) -> np.ndarray:
        """This rank's planned rows of ``epoch`` (``[n * clip_len, PLAN_WIDTH]``, before ``drop_last``)."""
        return planned_rows(self.draws(epoch, offset))

    def prefetch_key(self, epoch: int, done: int) -> tuple | None:
        """What names a pass whose next epoch can be planned ahead (None: this sampler is not pure)."""
        return None

    def num_samples(self, epoch: int) -> int | None:
        """Global draws of ``epoch`` before padding (positions past it pad); None: this sampler pads nothing."""
        return None

    def index_at(self, epoch: int):
        """The index ``epoch`` draws from."""
        return self.dataset.index

    def draws_elsewhere(self, epoch: int) -> bool:
        """Whether ``epoch`` draws from another index than the dataset's (or one the loader was not given)."""
        return False

    def identity_epoch(self, epoch: int) -> int | None:
        """The epoch whose length and draws name the sampler in a state (None: the sampler's own)."""
        return None

    def schedule(self):
        """The sampler's data schedule, or None (no data changes on this kind)."""
        return None

    def changes(self, what: str) -> WeightedSampler:
        """The sampler a data change (``exclude``, ``update_index``) applies to; this kind has none."""
        raise ConfigError(f"{what}: needs a WeightedSampler (the loader's default sampler is one), not "
                          f"{type(self.sampler).__name__}: data changes are part of its pure draw")

    def clip_draws(self, epoch: int, offset: int, n: int) -> np.ndarray | None:
        """``[n, 2]`` (clip number, position) of a pass's clip draws (None: no clips)."""
        return None

    def partition_rows(self, epoch: int, idx: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """``[n, 3]`` rows of another rank's draws ``idx`` at ``pos`` (checking an elastic state's plan)."""
        return np.stack([idx, np.full_like(idx, epoch), pos], axis=1)


class WeightedPlan(IndexPlan):
    """A :class:`WeightedSampler`: pure in (seed, epoch, schedule), partitioned, padded."""

    partitioned = True
    weighted = True

    def prefetch_key(self, epoch: int, done: int) -> tuple:
        return (id(self.sampler), self.sampler.schedule.version), epoch, done

    def num_samples(self, epoch: int) -> int:
        return self.sampler.num_samples_at(epoch)

    def index_at(self, epoch: int):
        return self.sampler.index_at(epoch)

    def draws_elsewhere(self, epoch: int) -> bool:
        if not self.sampler.schedule.changed:
            return False
        try:
            return self.sampler.index_at(epoch).fingerprint != self.dataset.index.fingerprint
        except ConfigError:
            return True

    def identity_epoch(self, epoch: int) -> int:
        return epoch

    def schedule(self):
        return self.sampler.schedule

    def changes(self, what: str) -> WeightedSampler:
        return self.sampler


class GroupedPlan(WeightedPlan):
    """An :class:`~dali_backend.sampling.grouping.AspectGroupedSampler`: batches of one aspect group."""

    def check(self, batch_size: int) -> None:
        sampler, dataset = self.sampler, self.dataset
        if sampler.batch_size != batch_size:
            raise ConfigError(f"DaliLoader: batch_size={batch_size} but the AspectGroupedSampler groups batches of "
                              f"{sampler.batch_size}; its batches would straddle groups: build it with "
                              f"AspectGroupedSampler(sampler, batch_size={batch_size})")
        if dataset.spec.pad_batch is None:
            raise ConfigError("DaliLoader: sampler=AspectGroupedSampler(...) with a spec of one output size: every "
                              "batch has that size, so grouping by aspect ratio saves nothing and only reorders the "
                              "draws; use AugmentSpec(ops=[Resize(n, max_size=m), ...], pad_batch=k) (variable-size "
                              "batches), or pass the WeightedSampler inside (sampler.sampler)")
        if sampler.schedule.generations[0].fingerprint != dataset.index.fingerprint:
            raise ConfigError("DaliLoader: the AspectGroupedSampler was built on another index than the dataset's; its "
                              "groups come from that index's image sizes: build both on the same SampleIndex")


class ClipPlan(IndexPlan):
    """A :class:`~dali_backend.sampling.clips.ClipSampler`: a draw is ``clip_len`` frames in order, each
    with the clip's epoch and position (so every frame gets the clip's augmentation parameters)."""

    partitioned = True
    clips = True

    def __init__(self, sampler, dataset):
        super().__init__(sampler, dataset)
        self.clip_len = sampler.clip_len

    def check(self, batch_size: int) -> None:
        if self.sampler.index.fingerprint != self.dataset.index.fingerprint:
            raise ConfigError("DaliLoader: the ClipSampler was built on another index than the dataset's; build both "
                              "on the same SampleIndex (Sequences.from_index(dataset.index))")

    def draws(self, epoch: int, offset: int = 0) -> np.ndarray:
        return self.partition_rows(epoch, *self.sampler.rank_draw(epoch, offset=offset))

    def prefetch_key(self, epoch: int, done: int) -> tuple:
        return id(self.sampler), epoch, done

    def num_samples(self, epoch: int) -> int:
        return self.sampler.num_samples

    def clip_draws(self, epoch: int, offset: int, n: int) -> np.ndarray:
        clips, positions = self.sampler.rank_draw(epoch, offset=offset)
        return np.stack([clips, positions], axis=1)[:n]

    def partition_rows(self, epoch: int, clips: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``[n * T, 3]`` rows (sample index, epoch, position) of clip draws: each clip's frames in order."""
        frames = self.sampler.frames(clips)
        return np.stack([frames.reshape(-1), np.full(frames.size, epoch, np.int64),
                         np.repeat(np.asarray(positions, np.int64), self.clip_len)], axis=1)


def make_plan(sampler, dataset, batch_size: int) -> IndexPlan:
    """The plan of ``sampler``'s kind over ``dataset`` (checked against ``batch_size``): the one place the
    facade examines the sampler's type."""
    from ..sampling.clips import ClipSampler
    from ..sampling.grouping import AspectGroupedSampler

    kind = (ClipPlan if isinstance(sampler, ClipSampler) else GroupedPlan if isinstance(sampler, AspectGroupedSampler)
            else WeightedPlan if isinstance(sampler, WeightedSampler) else IndexPlan)
    plan = kind(sampler, dataset)
    plan.check(batch_size)
    return plan
