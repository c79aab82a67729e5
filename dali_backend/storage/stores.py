"""Stores: one class per URL scheme, chosen here and nowhere else (MosaicML streaming's one downloader
class per scheme). A data root that is a ``scheme://...`` URL is read through the store registered
for its scheme: ``s3`` is :class:`~.client.Bucket`; a module that calls :func:`register_store` adds
another (a test's in-memory ``mem://`` store is one file). Anything else is a local folder, which
the index walks itself (symlink and special-file rules: :mod:`dali_backend.index.walk`).

A store answers the :class:`Store` protocol: listing, HEAD, GET (whole or a byte range, conditional
on the indexed ETag), and its normal root. Imports nothing heavy (boto3 comes with the first request).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from ..errors import ConfigError
from . import urls
from .client import Bucket, ObjectInfo


class Store(Protocol):
    """What the index and the reader ask of an object store (see :class:`~.client.Bucket`)."""

    root: str  # the normal URL of the root

    def url(self, rel: str) -> str: ...

    def list(self, sub: str = "") -> Iterator[ObjectInfo]: ...

    def head(self, rel: str) -> ObjectInfo: ...

    def get(self, rel: str, etag: str | None = None, start: int | None = None,
            end: int | None = None) -> tuple[bytes, ObjectInfo]: ...

    def patient(self, factor: int) -> Store: ...


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


def open_store(root: str, storage_options: Mapping | None = None) -> Store:
    """The store of the URL ``root`` (its scheme chooses the class).

    Raises:
        ConfigError: no store is registered for the scheme (the message names the supported ones).
    """
    cls, normalize = _entry(root)
    if cls is None:
        normalize(root)  # raises, naming the scheme and the fix
        raise ConfigError(f"{root!r}: no store for this scheme; registered: {', '.join(STORES)}")
    return cls(normalize(root), storage_options)
