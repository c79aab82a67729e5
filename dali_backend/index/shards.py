"""Samples packed into tar shards: where each one's bytes lie (shard, offset, size), so reading a sample is
one range read of one file or object.

An index of packed samples keeps the samples' original relative paths (they name the samples in
messages and decide :meth:`SampleIndex.split` as before) and adds :class:`Shards`: the shard files
(relative to the index root) with their sizes at packing, and per sample the shard and the offset of
its data in it. The shards are plain tar files in WebDataset's layout (see
:mod:`dali_backend.storage.pack`), readable by any tar tool or WebDataset loader.

A shard is a file like any other, and a changed one is caught like a changed file. Small shards all
have the same size (tar pads to 10 KiB), so the size alone says little: each shard's modification
time and MD5 are recorded at packing. :meth:`Shards.changed` (``SampleIndex.load(check="stat")``)
compares a local shard's size and mtime, and a bucket's shard's size and ETag (against the MD5 where
the ETag is one: a single-part upload); the ETags listed then are kept (:attr:`Shards.etags`) and every
range read of a shard is conditional on its ETag (``If-Match``, the response's ETag compared too). The
reader's checks then compare each served member's size and frame header with the index.
"""

from __future__ import annotations

import os
import re
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
        sizes: each shard's size in bytes when it was written.
        ids: int64 shard of each sample.
        offsets: int64 byte offset of each sample's data in its shard.
        mtimes: each shard's modification time (ns) when it was written (empty: not recorded, an index
            packed by an older release).
        digests: each shard's MD5 (hex) when it was written (empty: not recorded).
        etags: each shard's ETag as last listed (a URL root, :meth:`changed`), what its range reads are
            conditional on; not saved (empty: none listed yet; the reader then keeps the first it is served).
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    ids: NDArray[np.int64]
    offsets: NDArray[np.int64]
    mtimes: tuple[int, ...] = ()
    digests: tuple[str, ...] = ()
    etags: tuple[str, ...] = ()

    def __post_init__(self):
        ids = np.array(self.ids, dtype=np.int64, copy=True).reshape(-1)
        offsets = np.array(self.offsets, dtype=np.int64, copy=True).reshape(-1)
        if ids.size != offsets.size:
            raise ConfigError(f"Shards: {ids.size} shard ids for {offsets.size} offsets")
        if len(self.names) != len(self.sizes):
            raise ConfigError(f"Shards: {len(self.names)} names for {len(self.sizes)} sizes")
        for field in ("mtimes", "digests", "etags"):
            if len(getattr(self, field)) not in (0, len(self.names)):
                raise ConfigError(f"Shards: {len(getattr(self, field))} {field} for {len(self.names)} shards")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.names) or offsets.min() < 0):
            raise ConfigError(f"Shards: shard ids must lie in [0, {len(self.names) - 1}] and offsets be >= 0")
        for a in (ids, offsets):
            a.flags.writeable = False
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))
        object.__setattr__(self, "mtimes", tuple(int(t) for t in self.mtimes))
        object.__setattr__(self, "digests", tuple(str(d) for d in self.digests))
        object.__setattr__(self, "etags", tuple(str(e) for e in self.etags))

    def __len__(self) -> int:
        return int(self.ids.size)

    def take(self, positions: NDArray[np.int64]) -> Shards:
        return Shards(self.names, self.sizes, self.ids[positions], self.offsets[positions], self.mtimes, self.digests,
                      self.etags)

    def meta(self) -> list[list]:
        """``[[name, size, mtime_ns, md5], ...]`` for the index file's metadata (``[[name, size], ...]`` for
        an index packed without them, so its fingerprint stays what it was)."""
        if not self.mtimes:
            return [[n, s] for n, s in zip(self.names, self.sizes)]
        return [[n, s, t, d] for n, s, t, d in zip(self.names, self.sizes, self.mtimes, self.digests)]

    def version(self, sid: int) -> str:
        """What identifies shard ``sid`` as packed (for the disk cache's keys): its MD5, else its size."""
        return self.digests[sid] if self.digests else str(self.sizes[sid])

    def changed(self, root: str, bucket=None) -> list[tuple[str, str]]:
        """``(shard, what changed)`` for shards that differ from packing time, or are gone: a local shard's
        size or mtime (``stat``), a bucket's shard's size or ETag from one listing of ``bucket`` (the
        ETags listed are kept in :attr:`etags`)."""
        listed = None if bucket is None else {o.rel: o for o in bucket.list()}
        out, etags = [], []
        for k, (name, size) in enumerate(zip(self.names, self.sizes)):
            if listed is None:
                try:
                    st = os.stat(os.path.join(root, name))
                    now, touched = st.st_size, bool(self.mtimes) and st.st_mtime_ns != self.mtimes[k]
                except OSError:
                    now, touched = None, False
                what = "modified since packing (mtime changed)" if touched else None
            else:
                info = listed.get(name)
                now = None if info is None else info.size
                etags.append("" if info is None else info.etag)
                plain = info is not None and _MD5_ETAG.match(info.etag)
                what = (f"content differs from packing (ETag {info.etag}, packed MD5 {self.digests[k]})"
                        if plain and self.digests and plain.group(1) != self.digests[k] else None)
            if now is None:
                out.append((name, "missing"))
            elif now != size:
                out.append((name, f"shard size {size} -> {now} bytes"))
            elif what:
                out.append((name, what))
        if listed is not None:
            object.__setattr__(self, "etags", tuple(etags))
        return out


_MD5_ETAG = re.compile(r'^"?([0-9a-f]{32})"?$')  # a single-part upload's ETag: the object's MD5


def shards_from_arrays(meta_shards: Sequence, ids: NDArray, offsets: NDArray) -> Shards:
    rows = [list(r) for r in meta_shards]
    full = bool(rows) and all(len(r) == 4 for r in rows)
    return Shards(tuple(str(r[0]) for r in rows), tuple(int(r[1]) for r in rows), ids, offsets,
                  tuple(int(r[2]) for r in rows) if full else (), tuple(str(r[3]) for r in rows) if full else ())


def check_meta_shards(value: object) -> bool:
    """Whether ``value`` is the list :meth:`Shards.meta` writes: ``[[name, size], ...]`` or
    ``[[name, size, mtime_ns, md5], ...]``."""
    return isinstance(value, list) and (all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) and type(r[1]) is int for r in value) or all(
        isinstance(r, list) and len(r) == 4 and isinstance(r[0], str) and type(r[1]) is int and type(r[2]) is int
        and isinstance(r[3], str) for r in value))
