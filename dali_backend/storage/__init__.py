"""Data beyond one disk: object-storage URLs (``s3://bucket/prefix``) wherever a data root is accepted,
and a local disk cache of the objects read.

:mod:`.stores` (one store class per URL scheme, chosen there and nowhere else: ``s3`` is the
:class:`~.client.Bucket`, a path is a :class:`~.local.LocalStore`; :func:`~.stores.register_store` adds one),
:mod:`.objects` (what object stores share: object records, errors, the staleness check from one listing),
:mod:`.local` (the local folder as a store), :mod:`.urls` (which strings are URLs,
their normal form), :mod:`.client` (one bucket through botocore:
listing, range reads, conditional GETs, bounded retries, one client per process), :mod:`.cache` (the
size-bounded, crash-safe local cache), :mod:`.pack` (tar shards and their index). Part of the contract
layer: imports no executor, and nothing heavy until a URL is used (boto3 is imported on the first request).
"""

from __future__ import annotations

from .urls import is_url, normalize

__all__ = ["is_url", "normalize"]
