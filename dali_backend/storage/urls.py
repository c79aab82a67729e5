"""Object-storage URLs: which strings are URLs, their normal form, and keys relative to a root.

A data root may be ``s3://bucket`` or ``s3://bucket/prefix`` wherever a folder is accepted. The normal
form has no trailing slash (``s3://bucket/data``), so ``os.path.join``-style joining of a relative path
(``root + "/" + rel``) gives the object's URL, the same rule as for folders. Credentials never belong in
a URL (it is logged, printed and saved with an index): a URL carrying ``user:secret@`` is refused
without repeating the secret.
"""

from __future__ import annotations

import os
import posixpath
import re

from ..errors import ConfigError

SCHEMES = ("s3",)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.S)
# S3 bucket names: 3-63 of lower-case letters, digits, dots and hyphens (the rule AWS enforces).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def is_url(path: object) -> bool:
    """Whether ``path`` is a ``scheme://...`` string (an object-storage URL), not a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def normalize(url: str) -> str:
    """``url`` in normal form: ``s3://bucket`` or ``s3://bucket/prefix`` (no trailing slash, no ``//``).

    Raises:
        ConfigError: another scheme, no bucket, an invalid bucket name, credentials in the URL, or a
            ``..``/``.`` component (the message names the URL, credentials removed, and the fix).
    """
    m = _URL.match(url)
    if m is None:
        raise ConfigError(f"{url!r} is not a URL; pass s3://bucket/prefix (or a local folder)")
    scheme, rest = m.group(1).lower(), m.group(2)
    netloc, _, path = rest.partition("/")
    if "@" in netloc:
        shown = f"{scheme}://***@{netloc.rsplit('@', 1)[1]}/{path}".rstrip("/")
        raise ConfigError(f"{shown}: credentials in a URL are refused (URLs are logged and saved with an index); "
                          "remove them from the URL and pass them in storage_options= or the AWS_* environment "
                          "variables / an AWS profile")
    if scheme not in SCHEMES:
        raise ConfigError(f"{url!r}: scheme {scheme!r} is not supported; use s3:// (any S3-compatible store: set "
                          "AWS_ENDPOINT_URL or storage_options={'endpoint_url': ...} for MinIO, Ceph, R2...)")
    if not _BUCKET.match(netloc):
        raise ConfigError(f"{url!r}: {netloc!r} is not an S3 bucket name (3-63 lower-case letters, digits, '.' "
                          "or '-'); write s3://bucket/prefix")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ConfigError(f"{url!r}: '.' and '..' are not allowed in an object-storage URL; write the prefix "
                          "as it is stored")
    return f"{scheme}://{netloc}" + ("/" + "/".join(parts) if parts else "")


def split(url: str) -> tuple[str, str]:
    """``(bucket, key prefix)`` of a normalised URL: ``s3://b/x/y`` -> ``("b", "x/y")``."""
    rest = url.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix


def join(root: str, rel: str) -> str:
    """The URL of ``rel`` (``/``-separated, relative) under the URL ``root``."""
    return root + "/" + rel if rel else root


def parent(url: str) -> str:
    """The URL of the folder holding the URL root ``url`` (``s3://b/x/y`` -> ``s3://b/x``).

    Raises:
        ConfigError: ``url`` is a bucket's top (``s3://bucket``), which has no parent.
    """
    scheme, rest = url.rstrip("/").split("://", 1)
    if "/" not in rest:
        raise ConfigError(f"{url!r} is the top of its bucket: there is no folder above it; put the images and the "
                          "masks in two folders under one prefix (s3://bucket/data/images, s3://bucket/data/masks)")
    return f"{scheme}://{rest.rsplit('/', 1)[0]}"


def key(prefix: str, rel: str) -> str:
    """The object key of ``rel`` under the key ``prefix``."""
    return f"{prefix}/{rel}" if prefix and rel else prefix or rel


def relative_inside(rel: str) -> str | None:
    """``rel`` (a manifest path) normalised under a URL root, or None when it leaves the root
    (``..`` above it, or an absolute path)."""
    rel = rel.replace(os.sep, "/") if os.sep != "/" else rel
    if rel.startswith("/") or is_url(rel):
        return None
    norm = posixpath.normpath(rel)
    if norm == "." or norm == ".." or norm.startswith("../"):
        return None
    return norm
