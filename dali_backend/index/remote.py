"""Indexing a bucket without downloading it: the builders' work for a URL root (``s3://bucket/prefix``).

One listing gives every object's name, size and ETag (1000 per request). The folder, split and keyword
rules are those of a local root, applied to the listed names: a "folder" is a key prefix ending in
``/``, names starting with ``.`` are hidden, only ``.jpg``/``.jpeg`` are samples. The header check
(``verify="header"``) reads byte ranges, not objects: the first :data:`HEAD_RANGE` bytes, more only when
a header segment the check reads runs past them (large EXIF), and the last 2 bytes (the end-of-image
marker), in ``max(workers, REMOTE_MIN_WORKERS)`` threads; every range request is conditional on the
listed ETag, so an object overwritten during indexing is refused, not half-read. ``verify="decode"``
downloads each object; ``verify="none"`` reads nothing (a manifest's entries get one HEAD each).
The trade-off: two requests per object for the header check (head and tail), where reading 64 KB in
one would cost the whole of a small object.

An object that answers only transient failures (throttling, 5xx, timeouts) for the whole retry budget
is not a bad file: it is never filed among the rejected ones. Such objects are checked again with a
longer budget (:data:`PATIENT_FACTOR` times the retries and the backoff cap); any still unreachable
then make the build fail with a :class:`StorageError` naming them, so no sample is lost silently.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError, IndexBuildError, ManifestError, StorageError
from ..formats import registry
from ..formats.registry import DEFAULT_MAX_PIXELS
from ..core.labelling import KeywordRules
from ..util.progress import track
from ..storage import urls
from ..storage import stores
from ..storage.objects import ObjectChanged, ObjectInfo, ObjectMissing, Unreachable
from ..storage.stores import Store
from .kinds import UNREAD, Kinds
from .manifest import read_manifest
from .options import PACKAGE_FILES, Verify, capped, option_phrase
from .report import nothing_indexed
from .verify import decode_check_bytes
from .walk import (Rejected, Candidates, count_text, refuse_split_layout, class_folders, keyword_labelled,
                   manifest_classes)

HEAD_RANGE = 16384  # bytes read first for the header check (JPEG headers without EXIF are < 2 KB)
REMOTE_MIN_WORKERS = 32  # threads for a bucket's header checks: requests wait on the network, not the CPU
PATIENT_FACTOR = 3  # objects unreachable at indexing are checked again with this many times the retries and backoff cap

NOT_READ = (UNREAD, 0)  # the (format, bit depth) of an object whose headers were not read
log = logging.getLogger("dali_backend")
# (root URL, candidates, class names, listed objects by relative path)
RemoteBuilt = tuple[str, Candidates, Sequence[str], dict[str, ObjectInfo]]


class _Listing:
    """The objects below a URL root, by relative path, with folder views of their names."""

    def __init__(self, bucket: Store):
        self.bucket = bucket
        self.objects: dict[str, ObjectInfo] = {}
        for info in bucket.list():
            if info.rel and not info.rel.endswith("/"):  # "folder/" marker objects hold nothing
                self.objects[info.rel] = info
        if not self.objects:
            raise IndexBuildError(f"data root {bucket.root!r}: no objects under it; check the bucket and prefix (and "
                                  "the endpoint: AWS_ENDPOINT_URL or storage_options={'endpoint_url': ...})")

    def subdirs(self, folder: str) -> list[str]:
        """Sorted names of the non-hidden folders directly inside ``folder`` ("" for the root)."""
        base = folder + "/" if folder else ""
        names = {rel[len(base):].split("/", 1)[0] for rel in self.objects
                 if rel.startswith(base) and "/" in rel[len(base):]}
        return sorted(n for n in names if n and not n.startswith("."))

    def files_in(self, folder: str) -> list[str]:
        """Relative paths of the objects directly inside ``folder``."""
        base = folder + "/" if folder else ""
        return [rel for rel in self.objects if rel.startswith(base) and "/" not in rel[len(base):]]

    def walk(self, folder: str, cand: Candidates, label: int) -> None:
        """Every JPEG below ``folder`` into ``cand`` with ``label`` (sorted); hidden names and other
        extensions recorded as ignored, as :func:`~.walk.walk_images` does on disk."""
        base = folder + "/" if folder else ""
        hidden_seen: set[str] = set()
        for rel in sorted(r for r in self.objects if r.startswith(base)):
            parts = rel[len(base):].split("/")
            hidden = next((k for k, p in enumerate(parts) if p.startswith(".")), None)
            if hidden is not None:
                at = base + "/".join(parts[:hidden + 1])
                if at not in hidden_seen:
                    hidden_seen.add(at)
                    cand.ignore(parts[hidden], at)
                continue
            name = parts[-1]
            if registry.is_image_name(name):
                cand.paths.append(rel)
                cand.labels.append(label)
            else:
                cand.ignore(name, rel)


def folder_candidates(bucket: Store, split: str | None, classes: Sequence[str] | None) -> RemoteBuilt:
    """``root/<class>/**`` (or ``root/<split>/<class>/**``): :func:`.build.folder_candidates` for a bucket."""
    root = bucket.root
    listing = _Listing(bucket)
    base = ""
    if split is not None:
        split_dirs = listing.subdirs("")
        if split not in split_dirs:
            raise IndexBuildError(f"split {split!r} not found under {root!r} (found: {split_dirs or 'no folders'})")
        found = sorted(set().union(*(listing.subdirs(s) for s in split_dirs)))
        base = split
    else:
        found = listing.subdirs("")
        if classes is None:
            refuse_split_layout(root, found, listing.subdirs)
    base_url = urls.join(root, base)
    classes = class_folders(found, classes, root, base_url, items="objects")
    cand = Candidates([], [], [], Counter())
    for rel in sorted(listing.files_in(base)):
        name = rel.rsplit("/", 1)[-1]
        if registry.is_image_name(name) and not name.startswith("."):
            cand.rejected.append(Rejected(rel, "not inside a class folder; move it into <root>/<class>/"))
        elif name not in PACKAGE_FILES:
            cand.ignore(name, rel)
    present = set(listing.subdirs(base))
    for label, name in enumerate(classes):
        if name in present:
            listing.walk(f"{base}/{name}" if base else name, cand, label)
    return root, cand, classes, listing.objects


def keyword_candidates(bucket: Store, rules: Mapping[str, Sequence[str]] | KeywordRules) -> RemoteBuilt:
    """Every JPEG below the root, labelled by keywords: :func:`.build.keyword_candidates` for a bucket."""
    kw = rules if isinstance(rules, KeywordRules) else KeywordRules(rules)
    listing = _Listing(bucket)
    found = Candidates([], [], [], Counter())
    listing.walk("", found, 0)
    cand = keyword_labelled(found, kw)
    return bucket.root, cand, kw.classes, listing.objects


def manifest_candidates(path: str | Path, bucket: Store, split: str | None, classes: Sequence[str] | None,
                        path_column: str | None, label_column: str | None, split_column: str | None,
                        encoding: str | None) -> RemoteBuilt:
    """The objects a (local) manifest lists, relative to the store's root: see
    :meth:`SampleIndex.from_manifest`. Nothing is listed: each entry is checked on its own."""
    if stores.url_scheme(path) is not None:
        raise ManifestError(f"manifest {str(path)!r}: a manifest is read from a local file; download it first "
                            f"(the paths in it may be relative to a URL root: pass {option_phrase('root')} the s3:// URL)")
    mpath = Path(path)
    rows = read_manifest(mpath, split, None, path_column, label_column, split_column, encoding)
    outside, entries = [], []
    seen: dict[str, tuple[str, str]] = {}
    cand = Candidates([], [], [], Counter())
    for where, written, label in rows:
        rel = urls.relative_inside(written.strip())
        if rel is None:
            outside.append(f"{where}: {written!r}")
            continue
        cand.listed(seen, entries, rel, label, where)
    if outside:
        raise ManifestError(f"{mpath}: {count_text(len(outside), 'entry leaves', 'entries leave')} the root {bucket.root!r} "
                            f"({capped(outside)}); paths must be relative to it, without '..' above it. Remove "
                            f"{'it' if len(outside) == 1 else 'them'} or pass {option_phrase('root')} a URL that contains "
                            f"{'it' if len(outside) == 1 else 'them'}")
    classes = manifest_classes(mpath, entries, classes, cand)
    return bucket.root, cand, classes, {}


def check_object(bucket: Store, rel: str, info: ObjectInfo | None, verify: Verify,
                 max_pixels: int) -> tuple[str | None, ObjectInfo | None, int, int, tuple[str, int]]:
    """``(reason or None, the object's info, width, height, (format, bit depth))`` for one object, reading byte ranges only
    for ``verify="header"`` (see the module docstring)."""
    try:
        if info is None:
            info = bucket.head(rel)
        if verify == "none":
            return None, info, 0, 0, NOT_READ
        if info.size == 0:
            return "empty file (0 bytes)", info, 0, 0, NOT_READ
        etag = info.etag or None
        if verify == "decode":
            data, got = bucket.get(rel, etag)
            res = registry.check_bytes(data, max_pixels, rel)
            reason = res.reason or decode_check_bytes(data)
            return reason, got, res.width, res.height, (res.format, res.bit_depth)
        head, got = bucket.get(rel, etag, 0, min(HEAD_RANGE, info.size))
        info = got
        if len(head) >= info.size:
            tail = head[-2:]
        else:
            tail, _ = bucket.get(rel, etag, info.size - 2, info.size)

        def load(end: int | None) -> bytes:
            nonlocal head
            if end is None:
                return bucket.get(rel, etag)[0]
            want = min(info.size, max(end + HEAD_RANGE, 2 * len(head)))  # the next segments too, in one request
            more, _ = bucket.get(rel, etag, len(head), want)
            head = head + more
            return head

        res = registry.check_head(head, info.size, max_pixels, load, tail, rel)
        return res.reason, info, res.width, res.height, (res.format, res.bit_depth)
    except ObjectMissing:
        return "missing file", info, 0, 0, NOT_READ
    except ObjectChanged:
        return "object changed while it was being indexed (its ETag differs); index again", info, 0, 0, NOT_READ
    except Unreachable as e:  # the store did not answer: no verdict on the object
        return _Transient(str(e).split(": ", 1)[1] if ": " in str(e) else str(e)), info, 0, 0, NOT_READ
    except StorageError as e:
        text = str(e).split(": ", 1)[1] if ": " in str(e) else str(e)
        return f"unreadable ({text})", info, 0, 0, NOT_READ


def check_objects(root: str, bucket: Store, paths: Sequence[str], infos: Mapping[str, ObjectInfo], verify: Verify,
                  max_pixels: int, workers: int, progress: bool | None, desc: str = "indexing") -> list[tuple]:
    """:func:`check_object` of every one of ``paths`` in threads; objects unreachable (only transient
    failures) are checked again with a longer budget, then a :class:`StorageError` names those still
    unreachable (see the module docstring). Never returns an unreachable object's result."""
    if verify not in ("header", "decode", "none"):
        raise ConfigError(f"verify={verify!r}; use 'header' (default), 'decode' or 'none'")
    if max_pixels <= 0:
        raise ConfigError(f"max_pixels={max_pixels}; must be a positive pixel count (default {DEFAULT_MAX_PIXELS})")

    def check(rel: str):
        return check_object(bucket, rel, infos.get(rel), verify, max_pixels)

    with ThreadPoolExecutor(max_workers=max(1, workers, REMOTE_MIN_WORKERS)) as pool:
        results = list(track(pool.map(check, paths), total=len(paths), desc=desc, enabled=progress))
        again = [k for k, r in enumerate(results) if isinstance(r[0], _Transient)]
        if again:
            patient = bucket.patient(PATIENT_FACTOR)
            log.warning("%s: %d objects answered only transient failures while indexing (e.g. %s: %s); checking them "
                        "again with %d retries", root, len(again), paths[again[0]], results[again[0]][0],
                        patient.retries)
            for k, r in zip(again, pool.map(lambda k: check_object(patient, paths[k], infos.get(paths[k]), verify,
                                                                   max_pixels), again)):
                results[k] = r
    unreachable = [f"{paths[k]} ({r[0]})" for k, r in enumerate(results) if isinstance(r[0], _Transient)]
    if unreachable:
        raise StorageError(f"{root}: {count_text(len(unreachable), 'object')} could not be read while indexing, only "
                           f"transient failures after the retries and a longer second round ({capped(unreachable)}); "
                           "they are not bad files, so nothing was built without them. Check the store (throttling, "
                           "an overloaded gateway) and index again, or raise storage_options={'retries': ...}")
    return results


def check_candidates(root: str, bucket: Store, cand: Candidates, infos: Mapping[str, ObjectInfo],
                     verify: Verify, max_pixels: int, workers: int,
                     progress: bool | None) -> tuple[list[int], NDArray[np.int64], list[str], list[Rejected], dict]:
    """:func:`.build.check_candidates` for a bucket: ``(positions kept, [kept, 4] sizes/mtimes/widths/heights,
    ETags of the kept objects, every refused object, the index's format and bit-depth fields of the kept ones)``."""
    results = check_objects(root, bucket, cand.paths, infos, verify, max_pixels, workers, progress)
    keep = [i for i, r in enumerate(results) if r[0] is None]
    rejected = list(cand.rejected) + [Rejected(cand.paths[i], r[0]) for i, r in enumerate(results) if r[0] is not None]
    rejected.sort(key=lambda r: r.path)
    if not keep:
        raise IndexBuildError(nothing_indexed(root, cand, rejected))
    cols = np.array([(r[1].size, r[1].mtime_ns, r[2], r[3]) for r in (results[i] for i in keep)],
                    dtype=np.int64).reshape(-1, 4)
    etags = [results[i][1].etag for i in keep]
    kinds = Kinds(len(keep))
    for k, i in enumerate(keep):
        kinds.set(k, *results[i][4])
    return keep, cols, etags, rejected, kinds.fields(range(len(keep)))


class _Transient(str):
    """The reason of :func:`check_object` for an object the store did not answer (:class:`Unreachable`)."""

