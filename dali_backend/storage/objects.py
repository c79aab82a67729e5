"""What every store that *lists objects* shares (S3's :class:`~.client.Bucket`, a test's ``mem://``): the
staleness check from one listing: an object's version is its size and ETag. A store class subclasses
:class:`ObjectStore` and answers ``list``/``head``/``get``; the local folder
(:class:`~.local.LocalStore`) answers the same questions from ``stat`` instead.

The trade-off: one listing (1000 objects per request) says which of a million objects changed without
a request per object, but only by size and ETag: an object rewritten with the same bytes keeps its
ETag, and is the same sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..errors import StorageError
from . import urls


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or a response says about one object: ``rel`` (the key relative to the root),
    ``size`` in bytes, ``etag`` (as the server writes it, quotes included) and ``mtime_ns``."""

    rel: str
    size: int
    etag: str
    mtime_ns: int


class ObjectMissing(StorageError):
    """The object does not exist (HTTP 404)."""


class ObjectChanged(StorageError):
    """The object's ETag differs from the one asked for (HTTP 412, or the response's ETag): it was overwritten."""


class Unreachable(StorageError):
    """Only transient failures (throttling, 5xx, timeouts, lost connections) for the whole retry budget: the
    object may be fine, the store did not answer. Never a verdict on its content."""


class ObjectStore:
    """Base of the stores that list objects; see the module docstring and :class:`~.stores.Store`."""

    root: str
    folder = None  # not a folder on this machine: the index lists it (a LocalStore names the folder it walks)

    def list(self, sub: str = "") -> Iterator[ObjectInfo]:  # pragma: no cover - each store lists its objects
        raise NotImplementedError

    def above(self, levels: int) -> ObjectStore:
        """The store of the prefix ``levels`` folders above this root, with the same settings (built as
        ``type(self)(url, options)``, once per level: a bucket's client is made once): what reads a mask
        kept in a folder beside the images' (:func:`~.stores.resolve`).

        Raises:
            ConfigError: there are not that many folders above the root (a bucket's top).
        """
        held = vars(self).setdefault("_above", {})
        if levels not in held:
            url = self.root
            for _ in range(levels):
                url = urls.parent(url)
            held[levels] = type(self)(url, getattr(self, "options", None))
        return held[levels]

    def exists(self) -> bool:
        """Whether the root is there: not asked of the store (a listing of a missing prefix is empty)."""
        return True

    def changed(self, paths: Sequence[str], sizes: NDArray[np.int64], mtimes: NDArray[np.int64],
                etags: Sequence[str] | None, positions: Iterable[int]) -> list[tuple[str, str]]:
        """``(path, what changed)`` for the objects at ``positions`` whose size or ETag differ from
        indexing time, or that are gone: one listing of the root, no object read (``mtimes`` unused: a
        copy or a restore gives an object a new time, not new bytes)."""
        listed = {info.rel: info for info in self.list()}
        out = []
        for i in positions:
            rel = paths[i]
            info = listed.get(rel)
            if info is None:
                out.append((rel, "missing"))
            elif info.size != sizes[i]:
                out.append((rel, f"size {sizes[i]} -> {info.size} bytes"))
            elif etags is not None and etags[i] and info.etag != etags[i]:
                out.append((rel, f"overwritten (ETag {etags[i]} -> {info.etag})"))
        return out
