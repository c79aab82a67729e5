"""Samples packed into tar shards: where each one's bytes lie (shard, offset, size), so reading a sample is
one range read of one file or object.

An index of packed samples keeps the samples' original relative paths (they name the samples in
messages and decide :meth:`SampleIndex.split` as before) and adds :class:`Shards`: the shard files
(relative to the index root) with their sizes at packing, and per sample the shard and the offset of
its data in it. The shards are plain tar files in WebDataset's layout (see
:mod:`dali_backend.storage.pack`), readable by any tar tool or WebDataset loader.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError


@dataclass(frozen=True, eq=False)
class Shards:
    """Where packed samples lie: ``names[ids[i]]`` holds sample ``i``'s bytes at ``offsets[i]``.

    Attributes:
        names: shard files, relative to the index root (``shard-000000.tar``, ...).
        sizes: each shard's size in bytes when it was written (a changed shard is found by it).
        ids: int64 shard of each sample.
        offsets: int64 byte offset of each sample's data in its shard.
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    ids: NDArray[np.int64]
    offsets: NDArray[np.int64]

    def __post_init__(self):
        ids = np.array(self.ids, dtype=np.int64, copy=True).reshape(-1)
        offsets = np.array(self.offsets, dtype=np.int64, copy=True).reshape(-1)
        if ids.size != offsets.size:
            raise ConfigError(f"Shards: {ids.size} shard ids for {offsets.size} offsets")
        if len(self.names) != len(self.sizes):
            raise ConfigError(f"Shards: {len(self.names)} names for {len(self.sizes)} sizes")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.names) or offsets.min() < 0):
            raise ConfigError(f"Shards: shard ids must lie in [0, {len(self.names) - 1}] and offsets be >= 0")
        for a in (ids, offsets):
            a.flags.writeable = False
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))

    def __len__(self) -> int:
        return int(self.ids.size)

    def take(self, positions: NDArray[np.int64]) -> Shards:
        return Shards(self.names, self.sizes, self.ids[positions], self.offsets[positions])

    def meta(self) -> list[list]:
        """``[[name, size], ...]`` for the index file's metadata."""
        return [[n, s] for n, s in zip(self.names, self.sizes)]

    def changed(self, root: str, listed: dict[str, int] | None) -> list[tuple[str, str]]:
        """``(shard, what changed)`` for shards whose size differs from packing time, or are gone:
        ``listed`` maps a bucket's shard names to sizes (from one listing); None stats files under ``root``."""
        out = []
        for name, size in zip(self.names, self.sizes):
            if listed is None:
                try:
                    now = os.stat(os.path.join(root, name)).st_size
                except OSError:
                    now = None
            else:
                now = listed.get(name)
            if now is None:
                out.append((name, "missing"))
            elif now != size:
                out.append((name, f"shard size {size} -> {now} bytes"))
        return out


def shards_from_arrays(meta_shards: Sequence, ids: NDArray, offsets: NDArray) -> Shards:
    names = [str(n) for n, _ in meta_shards]
    sizes = [int(s) for _, s in meta_shards]
    return Shards(tuple(names), tuple(sizes), ids, offsets)


def check_meta_shards(value: object) -> bool:
    """Whether ``value`` is the ``[[name, size], ...]`` list :meth:`Shards.meta` writes."""
    return isinstance(value, list) and all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and type(r[1]) is int for r in value)

