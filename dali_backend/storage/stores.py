"""Stores: one class per URL scheme, chosen here and nowhere else (MosaicML streaming's one downloader
class per scheme). A data root that is a ``scheme://...`` URL is read through the store registered
for its scheme: ``s3`` is :class:`~.client.Bucket`; a module that calls :func:`register_store` adds
another (a test's in-memory ``mem://`` store is one file, a subclass of :class:`~.objects.ObjectStore`).
Anything else (a path, no scheme) is a local folder: a :class:`~.local.LocalStore`, which the index
walks with its own rules (symlinks, special files: :mod:`dali_backend.index.walk`). ``file://`` is
not a scheme of its own: pass the path (a second spelling of one root would be a second fingerprint).

A store answers the :class:`Store` protocol: listing, HEAD, GET (whole or a byte range, conditional
on the indexed ETag), its normal root, whether the root is there, and the staleness check (which
samples changed since indexing: size and ETag for an object, size and mtime for a file). Code outside
this package asks the store; none of it tests whether a root is a URL. Imports nothing heavy (boto3
comes with the first request).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from . import urls
from .client import Bucket, ObjectInfo
from .local import LocalStore


class Store(Protocol):
    """What the index and the reader ask of a store (:class:`~.client.Bucket`, :class:`~.local.LocalStore`;
    a new object store subclasses :class:`~.objects.ObjectStore`, which answers ``folder``, ``exists``
    and ``changed`` from ``list``)."""

    root: str  # the normal URL of the root (a folder: its absolute path)
    folder: Path | None  # the folder the index walks itself (a LocalStore), or None: the index lists the store

    def url(self, rel: str) -> str: ...

    def list(self, sub: str = "") -> Iterator[ObjectInfo]: ...

    def head(self, rel: str) -> ObjectInfo: ...

    def get(self, rel: str, etag: str | None = None, start: int | None = None,
            end: int | None = None) -> tuple[bytes, ObjectInfo]: ...

    def patient(self, factor: int) -> Store: ...

    def exists(self) -> bool: ...

    def changed(self, paths: Sequence[str], sizes: NDArray[np.int64], mtimes: NDArray[np.int64],
                etags: Sequence[str] | None, positions: Iterable[int]) -> list[tuple[str, str]]: ...


# scheme -> (store class built as cls(url, storage_options), its URL normaliser)
STORES: dict[str, tuple[Callable[..., Store], Callable[[str], str]]] = {"s3": (Bucket, urls.normalize)}


def register_store(scheme: str, cls: Callable[..., Store], normalize: Callable[[str], str] | None = None) -> None:
    """Serve ``scheme://...`` roots with ``cls(url, storage_options)``; ``normalize(url)`` gives the
    normal root (default: no trailing slash).

    Raises:
        ConfigError: the scheme is taken.
    """
    scheme = scheme.lower()
    if scheme in STORES:
        raise ConfigError(f"a store for {scheme}:// is registered already ({STORES[scheme][0]!r})")
    STORES[scheme] = (cls, normalize or (lambda url: url.rstrip("/")))


def unregister_store(scheme: str) -> None:
    """Remove a store (tests that plug one in take it out again); ``s3`` stays."""
    if scheme != "s3":
        STORES.pop(scheme, None)


def is_remote(root: object) -> bool:
    """Whether ``root`` names a store (a ``scheme://...`` URL), not a local folder."""
    return urls.is_url(root)


def url_scheme(text: object) -> str | None:
    """The scheme of a ``scheme://...`` root (``"s3"``), or None for a path (a local folder)."""
    return str(text).split("://", 1)[0] if is_remote(text) else None


def url_root(text: str) -> str | None:
    """``text`` in normal form when it is a store's URL (``s3://bucket/prefix``), None for a path.

    Raises:
        ConfigError: a URL of no registered scheme (the message names the supported ones).
    """
    return normal_root(text) if is_remote(text) else None


def join(root: str, rel: str) -> str:
    """The path (or URL) of ``rel`` (``/``-separated) under the data root ``root``: a folder or a store's URL."""
    return urls.join(root, rel) if is_remote(root) else os.path.join(root, rel)


def relative(path: str, start: str) -> str | None:
    """``path`` relative to ``start`` (``/``-separated; ``../`` where it lies above it), both folders or both
    URLs of one store and bucket; None where they are not (a URL and a folder, two buckets)."""
    if not (is_remote(path) or is_remote(start)):
        return os.path.relpath(path, start).replace(os.sep, "/")
    if not (is_remote(path) and is_remote(start)):
        return None
    (sa, pa), (sb, pb) = path.split("://", 1), start.split("://", 1)
    if sa.lower() != sb.lower() or pa.split("/", 1)[0] != pb.split("/", 1)[0]:
        return None
    return posixpath.relpath(pa, pb)


def parent(root: str) -> str:
    """The folder (or URL) that holds the data root ``root``.

    Raises:
        ConfigError: ``root`` is a bucket's top (``s3://bucket``), which has no parent.
    """
    return urls.parent(normal_root(root)) if is_remote(root) else os.path.dirname(os.path.abspath(root))


def resolve(store: Store, rel: str) -> tuple[Store, str]:
    """``(store, path)`` that hold ``rel``, a path relative to ``store``'s root that may climb above it
    (``../masks/x.png``: masks in a folder beside the images'): a folder's store as it is (the file system
    reads ``..``), an object store's :meth:`~.objects.ObjectStore.above` for each ``../``, and the rest.

    Raises:
        ConfigError: ``rel`` climbs above a bucket's top.
    """
    if store.folder is not None:
        return store, rel
    parts = posixpath.normpath(rel).split("/")
    up = next((k for k, p in enumerate(parts) if p != ".."), len(parts))
    return (store.above(up) if up else store), "/".join(parts[up:])


def _entry(url: str):
    scheme = url.split("://", 1)[0].lower()
    if scheme not in STORES:
        return None, urls.normalize  # s3's normaliser names the supported schemes and the fix
    return STORES[scheme]


def normal_root(root: str | os.PathLike) -> str:
    """A data root in normal form: a store's URL as its store writes it, a folder as an absolute path."""
    if not is_remote(root):
        return str(Path(root).absolute())
    return _entry(str(root))[1](str(root))


def open_store(root: str | os.PathLike, storage_options: Mapping | None = None) -> Store:
    """The store of the data root ``root``: a URL's scheme chooses the class; a path is a :class:`LocalStore`.

    Raises:
        ConfigError: no store is registered for the scheme (the message names the supported ones).
    """
    if not is_remote(root):
        return LocalStore(root, storage_options)
    root = str(root)
    cls, normalize = _entry(root)
    if cls is None:
        normalize(root)  # raises, naming the scheme and the fix
        raise ConfigError(f"{root!r}: no store for this scheme; registered: {', '.join(STORES)}")
    return cls(normalize(root), storage_options)
