"""Data changes between epochs: ``exclude`` and ``update_index``, as an object the loader holds
(:class:`DataChanges`; :class:`~dali_backend.facade.loader.DaliLoader` delegates its methods of the same
names to it). The draw of an epoch is a pure function of (seed, epoch, data schedule:
:mod:`dali_backend.sampling.schedule`); at the epoch that draws from another index, the plan's dataset is
replaced by one over that index and the executor, whose workers hold the dataset, by a new one.

Built from the plan, the passes, an executor factory and the telemetry alone, so a test can build one
without a loader.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..core.boundary import Executor
from ..errors import ConfigError
from ..sampling.sampler import check_epoch

log = logging.getLogger("dali_backend")


class DataChanges:
    """``exclude``/``update_index`` over a plan (:mod:`dali_backend.facade.plans`, which says whether its
    sampler takes data changes) and its passes (:class:`~dali_backend.facade.epochs.Passes`, which say
    which epoch is selected and begun).

    Args:
        plan: the loader's plan; its ``dataset`` is the running index's dataset, replaced here.
        passes: the loader's passes over ``plan``.
        make_executor: ``make_executor(dataset)`` -> a new executor over another index's dataset.
        telemetry: the loader's :class:`~dali_backend.telemetry.LoaderTelemetry`, or None: told when
            the executor is replaced.
    """

    def __init__(self, plan, passes, make_executor: Callable[[object], Executor], telemetry=None):
        self.plan, self.passes, self.make_executor, self.telemetry = plan, passes, make_executor, telemetry

    def exclude(self, samples, from_epoch: int | None = None) -> int:
        """:meth:`DaliLoader.exclude <dali_backend.facade.loader.DaliLoader.exclude>`: stop drawing ``samples``
        from ``from_epoch`` (default: the epoch after the selected one) on; returns that epoch."""
        sampler = self.plan.changes("exclude")
        start = self.change_epoch(from_epoch, "exclude")
        sampler.exclude(samples, from_epoch=start)
        return start

    def update_index(self, index, from_epoch: int | None = None) -> int:
        """:meth:`DaliLoader.update_index <dali_backend.facade.loader.DaliLoader.update_index>`: draw from
        ``index`` from ``from_epoch`` (default: the epoch after the selected one) on; returns that epoch."""
        sampler = self.plan.changes("update_index")
        start = self.change_epoch(from_epoch, "update_index")
        sampler.update_index(index, from_epoch=start)
        return start

    def change_epoch(self, from_epoch, what: str) -> int:
        """The first epoch a data change applies to: ``from_epoch``, or the one after the selected epoch;
        never an epoch a pass has begun (its draws are planned, maybe partly yielded)."""
        current = self.passes.sampler_epoch()
        if from_epoch is None:
            return current + 1
        start = check_epoch(from_epoch)
        if start < current or (start == current and self.passes.begun(current)):
            raise ConfigError(f"{what}(from_epoch={start}): epoch {current} has begun; a data change takes effect at an "
                              f"epoch boundary: pass from_epoch={current + 1} or later (or leave it out)")
        return start

    def executor_for(self, epoch: int, executor: Executor) -> Executor:
        """The executor to run ``epoch`` on: ``executor``, or after an ``update_index`` whose index ``epoch``
        draws from, a new one over a dataset of that index (``executor`` closed, the plan's dataset
        replaced).

        The new dataset is the old one's arguments over the other index (:meth:`ImageDataset.with_index`:
        every argument kept, ``cache_dir`` and ``cache`` among them). Only the running index's dataset is
        kept: the one left gives its RAM cache (``cache=True``) back before the new one fills its own, so
        the shared memory holds about one copy of the data however many updates there were; an epoch
        that draws from an older index again gets a dataset rebuilt over it."""
        schedule = self.plan.schedule()
        if schedule is None or len(schedule.generations) == 1:
            return executor
        index = self.plan.index_at(epoch)
        old = self.plan.dataset
        if index.fingerprint == old.index.fingerprint:
            return executor
        if self.telemetry is not None:
            self.telemetry.switch_executor(None)  # the old engine's time, read before it stops
        executor.close()
        release_cache(old)
        ds = old.with_index(index)
        ds.set_epoch(epoch)
        self.plan.dataset = ds
        executor = self.make_executor(ds)
        if self.telemetry is not None:
            self.telemetry.switch_executor(executor)
        log.info("DaliLoader: epoch %d draws from another index (%d samples): workers restarted", epoch, len(index))
        return executor


def release_cache(dataset) -> None:
    """Give ``dataset``'s RAM cache back (its reads go to the files from then on)."""
    reader = getattr(dataset, "reader", None)
    cache = getattr(reader, "cache", None)
    if cache is not None:
        reader.cache = None
        cache.release()
