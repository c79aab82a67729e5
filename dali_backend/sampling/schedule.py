"""Data changes between epochs: which index, and which of its samples, each epoch draws from.

A long run cleans its data while it trains (a mislabelled file is found, a camera's images are
withdrawn) and grows it (new images are indexed). Changing what a running epoch draws from would make
the epoch depend on *when* the change was made, which differs between ranks and between a run and its
resumption. So a change is scheduled **from an epoch on**, and what an epoch draws from is a pure
function of the epoch and the schedule:

* ``exclude(paths, from_epoch=F)``: from epoch ``F`` on these files are never drawn (their weight is
  zero; a balanced sampler re-balances over the samples left). Files are named by their path relative
  to the index root, the identity that survives an index update, so an excluded file stays excluded
  in a later index that still holds it.
* ``use_index(index, from_epoch=F)``: from epoch ``F`` on the draw is over ``index`` (typically
  ``old.update()``: unchanged files keep their place, new ones are appended, removed ones are gone).
  Class ids must keep their meaning: the new index's classes start with the old ones.

The schedule is recorded in the loader's state (paths and index fingerprints, JSON): a run resumed on
another machine rebuilds exactly the same epochs. An index the schedule names but that was not given
back (a state loaded by a loader built on a later index) is known by its fingerprint only: drawing an
epoch that needs it raises :class:`ConfigError` saying which index to pass. Everything here is numpy
and plain Python (no torch), so ``import dali_backend.index`` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from ..index import SampleIndex


@dataclass(frozen=True)
class Generation:
    """The index drawn from from ``from_epoch`` on (``index`` None: known by its fingerprint only)."""

    from_epoch: int
    fingerprint: str
    samples: int
    index: SampleIndex | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Exclusion:
    """Files (relative paths) never drawn from ``from_epoch`` on."""

    from_epoch: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class EpochData:
    """What one epoch draws from: the index, and its samples that may be drawn (None: all of them)."""

    index: SampleIndex
    active: NDArray[np.int64] | None

    @property
    def available(self) -> int:
        return len(self.index) if self.active is None else int(self.active.size)


def positions_of(index: SampleIndex, paths: Iterable[str]) -> NDArray[np.int64]:
    """Positions in ``index`` of the files at ``paths`` (relative to its root) that it holds; one scan."""
    wanted = set(paths)
    if not wanted:
        return np.zeros(0, np.int64)
    return np.fromiter((i for i, p in enumerate(index.paths) if p in wanted), dtype=np.int64)


def relative_paths(index: SampleIndex, samples, what: str) -> tuple[str, ...]:
    """``samples`` (positions in ``index``, or paths relative to its root or absolute under it) as
    relative paths; a :class:`ConfigError` names the first one the index does not hold."""
    if isinstance(samples, (str, bytes, os.PathLike)) or not hasattr(samples, "__iter__"):
        samples = [samples]
    items = list(np.asarray(samples).reshape(-1).tolist()) if isinstance(samples, np.ndarray) else list(samples)
    ids, names = [], []
    n = len(index)
    for item in items:
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not 0 <= int(item) < n:
                raise ConfigError(f"{what}: sample {int(item)} is not in the index (positions 0 to {n - 1}); pass "
                                  "positions of the loader's index or paths")
            ids.append(int(item))
        elif isinstance(item, (str, os.PathLike)):
            text = os.fspath(item)
            if os.path.isabs(text):
                rel = os.path.relpath(text, index.root)
                if rel.startswith(os.pardir):
                    raise ConfigError(f"{what}: {text!r} is not under the index root {index.root!r}; pass a path "
                                      "relative to the root or a sample position")
                text = rel
            names.append(text.replace(os.sep, "/"))
        else:
            raise ConfigError(f"{what}: {item!r} is neither a sample position (int) nor a path (str); pass "
                              "positions or paths of the index's files")
    out = {index.paths[i] for i in ids}
    if names:
        found = {index.paths[int(i)] for i in positions_of(index, names)}
        missing = sorted(set(names) - found)
        if missing:
            shown = ", ".join(repr(m) for m in missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise ConfigError(f"{what}: {shown} not in the index under {index.root!r}; pass paths relative to the "
                              "root as index.paths lists them (or sample positions)")
        out |= found
    return tuple(sorted(out))


class DataSchedule:
    """The indexes and exclusions of a sampler, each from an epoch on; :meth:`at` is a pure function."""

    def __init__(self, index: SampleIndex):
        self.generations: list[Generation] = [Generation(0, index.fingerprint, len(index), index)]
        self.exclusions: list[Exclusion] = []
        self.version = 0  # bumped at every change: a plan made ahead of time under an older schedule is stale
        self._cache: dict = {}

    # ------------------------------------------------------------------ reading
    @property
    def changed(self) -> bool:
        """Whether anything was ever scheduled (an exclusion or another index)."""
        return bool(self.exclusions) or len(self.generations) > 1

    def generation(self, epoch: int) -> int:
        """Position in :attr:`generations` of the index ``epoch`` draws from."""
        g = 0
        for i, gen in enumerate(self.generations):
            if gen.from_epoch <= epoch:
                g = i
        return g

    def index_at(self, epoch: int) -> SampleIndex:
        """The index ``epoch`` draws from; :class:`ConfigError` if it is known by its fingerprint only."""
        gen = self.generations[self.generation(epoch)]
        if gen.index is None:
            later = [g.from_epoch for g in self.generations if g.from_epoch > gen.from_epoch]
            until = f" to {later[0] - 1}" if later else " on"
            raise ConfigError(
                f"epoch {epoch} draws from the index with fingerprint {gen.fingerprint[:16]}... ({gen.samples} samples, "
                f"epochs {gen.from_epoch}{until}), recorded in the loaded state, which this loader was not given; "
                f"pass it before that epoch: loader.update_index(SampleIndex.load(...), from_epoch={gen.from_epoch})")
        return gen.index

    def at(self, epoch: int) -> EpochData:
        """The index and the drawable samples of ``epoch`` (cached per distinct schedule state)."""
        g = self.generation(epoch)
        k = sum(1 for x in self.exclusions if x.from_epoch <= epoch)
        key = (self.version, g, k)
        data = self._cache.get(key)
        if data is None:
            index = self.index_at(epoch)
            paths = set().union(*(x.paths for x in self.exclusions if x.from_epoch <= epoch))
            gone = positions_of(index, paths)
            active = None
            if gone.size:
                mask = np.ones(len(index), dtype=bool)
                mask[gone] = False
                active = np.flatnonzero(mask).astype(np.int64)
                active.flags.writeable = False
            data = EpochData(index, active)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = data
        return data

    def change_points(self) -> list[int]:
        """The epochs at which what is drawn may change (0 included)."""
        return sorted({0, *(g.from_epoch for g in self.generations), *(x.from_epoch for x in self.exclusions)})

    # ------------------------------------------------------------------ changing
    def exclude(self, paths: tuple[str, ...], from_epoch: int) -> None:
        self.exclusions.append(Exclusion(int(from_epoch), paths))
        self.exclusions.sort(key=lambda x: x.from_epoch)
        self._bump()

    def use_index(self, index: SampleIndex, from_epoch: int) -> None:
        """Draw from ``index`` from ``from_epoch`` on (replacing what was scheduled at that very epoch)."""
        before = self.generations[self.generation(max(from_epoch - 1, 0))]  # the index it follows
        if before.index is not None:
            old = before.index.classes
            if tuple(index.classes[:len(old)]) != tuple(old):
                raise ConfigError(f"update_index: the new index's classes {list(index.classes)} do not start with the "
                                  f"current ones {list(old)}; class ids would change meaning mid-training. Build the "
                                  f"new index with classes={list(old)} (new classes after them)")
        gens = [g for g in self.generations if g.from_epoch != from_epoch]
        gens.append(Generation(int(from_epoch), index.fingerprint, len(index), index))
        self.generations = sorted(gens, key=lambda g: g.from_epoch)
        self._bump()

    def _bump(self) -> None:
        self.version += 1
        self._cache.clear()

    # ------------------------------------------------------------------ state
    def state(self) -> dict:
        """JSON-able: every index (fingerprint, size) and exclusion (paths) with its first epoch."""
        return {"indexes": [{"from_epoch": g.from_epoch, "fingerprint": g.fingerprint, "samples": g.samples}
                            for g in self.generations],
                "exclude": [{"from_epoch": x.from_epoch, "paths": list(x.paths)} for x in self.exclusions]}

    def snapshot(self) -> tuple:
        return list(self.generations), list(self.exclusions)

    def restore(self, snap: tuple) -> None:
        self.generations, self.exclusions = list(snap[0]), list(snap[1])
        self._bump()

    def load(self, state: dict, known: Iterable[SampleIndex]) -> None:
        """Replace the schedule by a saved one; indexes are matched by fingerprint among ``known``
        (those it names that are not there are kept by fingerprint: drawing their epochs raises)."""
        def bad(why: str) -> ConfigError:
            return ConfigError(f"load_state_dict: the state's 'data' schedule {why}; pass the dict state_dict() "
                               "returned, whole")

        if not isinstance(state, dict) or not isinstance(state.get("indexes"), list) or \
                not isinstance(state.get("exclude"), list):
            raise bad("must hold the lists 'indexes' and 'exclude'")
        by_fp = {i.fingerprint: i for i in known if i is not None}
        gens = []
        for entry in state["indexes"]:
            if not (isinstance(entry, dict) and _epoch_ok(entry.get("from_epoch")) and isinstance(entry.get("fingerprint"), str)
                    and isinstance(entry.get("samples"), int)):
                raise bad(f"has an index entry {str(entry)[:80]!r}; expected from_epoch, fingerprint and samples")
            gens.append(Generation(entry["from_epoch"], entry["fingerprint"], entry["samples"],
                                   by_fp.get(entry["fingerprint"])))
        gens.sort(key=lambda g: g.from_epoch)
        if not gens or gens[0].from_epoch != 0 or len({g.from_epoch for g in gens}) != len(gens):
            raise bad("must name one index from epoch 0 and at most one per epoch")
        excl = []
        for entry in state["exclude"]:
            if not (isinstance(entry, dict) and _epoch_ok(entry.get("from_epoch")) and isinstance(entry.get("paths"), list)
                    and all(isinstance(p, str) for p in entry["paths"])):
                raise bad(f"has an exclusion {str(entry)[:80]!r}; expected from_epoch and a list of paths")
            excl.append(Exclusion(entry["from_epoch"], tuple(entry["paths"])))
        self.generations, self.exclusions = gens, sorted(excl, key=lambda x: x.from_epoch)
        self._bump()


def _epoch_ok(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
