"""Data changes between epochs, on the loader: ``exclude`` and ``update_index`` (a mixin of
:class:`~dali_backend.facade.loader.DaliLoader`). The draw of an epoch is a pure function of (seed, epoch,
data schedule: :mod:`dali_backend.sampling.schedule`); the loader switches to a dataset over another index, and
restarts its workers, at the epoch that draws from it."""

from __future__ import annotations

import logging

from ..errors import ConfigError
from ..sampling.sampler import WeightedSampler, check_epoch

log = logging.getLogger("dali_backend")


class DataChangesMixin:
    """``exclude``/``update_index`` for a loader with ``sampler``, ``dataset``, ``_executor``,
    ``_make_executor``, ``_datasets`` and ``_telemetry``."""

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
        sampler = self._weighted_sampler("exclude")
        start = self._change_epoch(from_epoch, "exclude")
        sampler.exclude(samples, from_epoch=start)
        return start

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
        sampler = self._weighted_sampler("update_index")
        start = self._change_epoch(from_epoch, "update_index")
        sampler.update_index(index, from_epoch=start)
        return start

    def _weighted_sampler(self, what: str) -> WeightedSampler:
        return self._plan.changes(what)

    def _change_epoch(self, from_epoch, what: str) -> int:
        """The first epoch a data change applies to: ``from_epoch``, or the one after the selected epoch;
        never an epoch a pass has begun (its draws are planned, maybe partly yielded)."""
        current = self._passes.sampler_epoch()
        if from_epoch is None:
            return current + 1
        start = check_epoch(from_epoch)
        if start < current or (start == current and self._passes.begun(current)):
            raise ConfigError(f"{what}(from_epoch={start}): epoch {current} has begun; a data change takes effect at an "
                              f"epoch boundary: pass from_epoch={current + 1} or later (or leave it out)")
        return start

    def _use_dataset_of(self, epoch: int) -> None:
        """Switch to a dataset over the index ``epoch`` draws from (after an ``update_index``), restarting
        the executor's workers, which hold the dataset.

        The new dataset is the old one's arguments over the other index (:meth:`ImageDataset.with_index`:
        every argument kept, ``cache_dir`` and ``cache`` among them). Only the running index's dataset is
        kept: the one left gives its RAM cache (``cache=True``) back before the new one fills its own, so
        the shared memory holds about one copy of the data however many updates there were; an epoch
        that draws from an older index again gets a dataset rebuilt over it."""
        schedule = self._plan.schedule()
        if schedule is None or len(schedule.generations) == 1:
            return
        index = self.sampler.index_at(epoch)
        if index.fingerprint == self.dataset.index.fingerprint:
            return
        if self._telemetry is not None:
            self._telemetry.switch_executor(None)  # the old engine's time, read before it stops
        self._executor.close()
        old = self.dataset
        release_cache(old)
        ds = old.with_index(index)
        self._datasets = {index.fingerprint: ds}
        ds.set_epoch(epoch)
        self.dataset = self._plan.dataset = ds
        self._executor = self._make_executor(ds)
        if self._telemetry is not None:
            self._telemetry.switch_executor(self._executor)
        log.info("DaliLoader: epoch %d draws from another index (%d samples): workers restarted", epoch, len(index))


def release_cache(dataset) -> None:
    """Give ``dataset``'s RAM cache back (its reads go to the files from then on)."""
    reader = getattr(dataset, "reader", None)
    cache = getattr(reader, "cache", None)
    if cache is not None:
        reader.cache = None
        cache.release()
