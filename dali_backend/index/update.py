"""Updating an index in place of rebuilding it: walk the root again, check only what changed.

A data set of a million files takes minutes to index, nearly all of it reading every file's headers.
Between two builds most files are unchanged, and a file's size and modification time say so without
opening it. So :func:`update_index` walks the root again the way the index was built (its recorded
*source*: builder and options), calls ``stat`` on every file (threads), and reads headers only of files that
are new, changed (size or mtime differ) or were refused before; files gone or now refused leave the
index. The result has the same samples, labels, sizes and rejects as a fresh build of the folder
(the tests compare them); only the order differs:

* samples still present keep their relative order, so their positions are unchanged when nothing
  was removed (removing a sample moves those after it down by one);
* new files are appended, in the order the walk finds them (sorted);
* class ids keep their meaning: classes found for the first time are appended to ``classes``, and a
  class whose folder is gone stays (with no samples).

A bucket (``s3://``) is listed again (one request per 1000 objects, as a build lists it): objects
listed with the indexed size and ETag are kept without a request, the others are checked as a build
checks them.

Trusting size and mtime is what ``make`` and ``rsync`` do, and what :meth:`SampleIndex.load` checks:
a file rewritten with the same size within the file system's timestamp resolution is not re-read
(pass ``verify`` again through a fresh build for that). An index derived with ``subset`` or ``split``
has no source and is refused: update the index it came from, then split again (``split`` is stable as
the data grows).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
import numpy as np

from ..errors import ConfigError, IndexBuildError
from ..formats.jpeg import DEFAULT_MAX_PIXELS
from ..util.strings import StringTable
from .build import FileChecks, folder_candidates, keyword_candidates, manifest_candidates
from .parallel import map_in_chunks
from .report import _nothing_indexed
from .walk import Rejected, _Candidates

log = logging.getLogger("dali_backend")

BUILDERS = ("folder", "keywords", "manifest")


@dataclass(frozen=True)
class UpdateReport:
    """What an update did: files kept without reading them, added, re-checked (changed or refused
    before), removed (gone or now refused), and classes appended."""

    unchanged: int
    added: int
    rechecked: int
    removed: int
    new_classes: tuple[str, ...]

    def __str__(self) -> str:
        text = (f"{self.unchanged} unchanged (not re-read), {self.added} added, {self.rechecked} changed and "
                f"re-checked, {self.removed} removed")
        return text + (f"; new classes {list(self.new_classes)} appended" if self.new_classes else "")


def check_source(source, where: str = "index") -> dict | None:
    """``source`` as recorded by a builder (a dict naming the builder and its options), or None."""
    if source is None:
        return None
    if not isinstance(source, Mapping) or source.get("builder") not in BUILDERS:
        raise ConfigError(f"{where}: source={str(source)[:80]!r}; expected the dict a builder records, with "
                          f"'builder' one of {list(BUILDERS)}")
    return dict(source)


def _candidates(source: dict, root: str):
    """The builder's walk (or manifest reading) again, with the recorded options."""
    builder = source["builder"]
    if builder == "folder":
        return folder_candidates(root, source.get("split"), source.get("classes"),
                                 bool(source.get("allow_outside_symlinks")))
    if builder == "keywords":
        return keyword_candidates(root, source["rules"], bool(source.get("allow_outside_symlinks")))
    return manifest_candidates(source["manifest"], root, source.get("split"), source.get("classes"),
                               source.get("path_column"), source.get("label_column"), source.get("split_column"),
                               source.get("encoding"))


def update_index(index, *, workers: int = 8, progress: bool | None = None) -> tuple:
    """``(updated index, UpdateReport)`` for a :class:`~dali_backend.index.SampleIndex`: see the module docstring.

    Raises:
        ConfigError: the index has no recorded source (derived by ``subset``/``split``, or saved by an
            older release): rebuild it once with a builder.
        IndexBuildError: what a fresh build would raise (e.g. no usable file left).
    """
    source = index.source
    if source is None:
        if index.is_remote:
            raise ConfigError(f"update: this index of {index.root} records no source (it was built by a release that "
                              "recorded none for a bucket, or derived with subset()/split()); build it once again with "
                              f"SampleIndex.from_folder({index.root!r}) / from_keywords / from_manifest (one listing and "
                              "a range read per object): later updates then list the bucket and read only new and "
                              "changed objects (ETags)")
        raise ConfigError("update: this index records no source (it was derived with subset()/split(), or saved by "
                          "a release before updates existed); update the index it came from and split it again, or "
                          "build it once with SampleIndex.from_folder / from_keywords / from_manifest")
    if index.is_remote:
        from . import remote

        root, cand, found, infos, bucket = remote.candidates_again(source, index.root, index.storage_options)
        if not infos:  # a manifest: its entries were not listed; one listing says which changed
            infos = {o.rel: o for o in bucket.list()}
    else:
        (root, cand, found), infos = _candidates(source, index.root), None
    old_classes = list(index.classes)
    classes = old_classes + [c for c in found if c not in old_classes]  # old ids keep their meaning
    to_new = np.array([classes.index(c) for c in found], dtype=np.int64)
    labels = to_new[np.asarray(cand.labels, dtype=np.int64)] if cand.labels else np.zeros(0, np.int64)
    n = len(cand.paths)
    old = old_positions(index, cand.paths)  # -1: not in the index
    same_label = np.zeros(n, dtype=bool)
    same_label[old >= 0] = index.labels[old[old >= 0]] == labels[old >= 0]
    verify, max_pixels = source.get("verify", "header"), int(source.get("max_pixels", DEFAULT_MAX_PIXELS))
    if infos is not None:
        cols, reasons, read, etags = _check_objects(index, root, bucket, cand.paths, infos, old, same_label, verify,
                                                    max_pixels, workers, progress)
    else:
        cols, reasons, read = _check_files(index, root, cand, labels, classes, old, same_label, verify, max_pixels,
                                           workers, progress)
    good = np.array([r is None for r in reasons], dtype=bool)
    rejected = sorted(list(cand.rejected) + [Rejected(cand.paths[i], r) for i, r in enumerate(reasons) if r is not None],
                      key=lambda r: r.path)
    if not good.any():
        raise IndexBuildError(_nothing_indexed(root, cand, rejected))
    kept = np.flatnonzero(good)
    # samples still present in their old order, then the new files in walk order
    kept = kept[np.argsort(np.where(old[kept] >= 0, old[kept], len(index) + kept), kind="stable")]
    remote_extra = {} if infos is None else dict(
        etags=StringTable.from_strings(etags[i] for i in kept.tolist()), storage_options=index.storage_options)
    new = type(index)(root, StringTable.from_strings(cand.paths[i] for i in kept.tolist()), labels[kept], classes,
                      cols[kept, 0], cols[kept, 1], cols[kept, 2], cols[kept, 3], rejected, cand.ignored,
                      sorted(cand.ignored_files, key=lambda r: r.path), source=source, **remote_extra)
    present = int((old[kept] >= 0).sum())
    rechecked = int((read[kept] & (old[kept] >= 0)).sum())
    report = UpdateReport(unchanged=present - rechecked, added=len(kept) - present, rechecked=rechecked,
                          removed=len(index) - present, new_classes=tuple(classes[len(old_classes):]))
    log.info("%s", new._headline())
    log.info("index updated: %s", report)
    return new, report


def _check_files(index, root, cand, labels, classes, old, same_label, verify, max_pixels, workers, progress):
    """``(cols, reasons, read)`` of a folder's candidates: ``stat`` for all, headers only of the files new,
    changed (size or mtime) or refused before."""
    n = len(cand.paths)
    checks = FileChecks(root, cand.paths, verify, max_pixels)
    cols, reasons = checks.cols, checks.reasons
    read = np.zeros(n, dtype=bool)

    def check(i: int) -> None:
        st = checks.stat(i)
        if st is None:
            return
        j = old[i]
        if j >= 0 and same_label[i] and index.sizes[j] == cols[i, 0] and index.mtimes[j] == cols[i, 1]:
            cols[i, 2], cols[i, 3] = index.widths[j], index.heights[j]  # unchanged: not read
            return
        read[i] = True
        checks.check(i, st)

    map_in_chunks(check, n, workers, progress, "updating")
    checks.reject_same_file_twice(_Candidates(cand.paths, labels.tolist(), [], cand.ignored), classes)
    return cols, reasons, read


def _check_objects(index, root, bucket, paths, infos, old, same_label, verify, max_pixels, workers, progress):
    """``(cols, reasons, read, etags)`` of a bucket's candidates: objects listed with the indexed size and
    ETag are kept without a request; the others are checked as a build checks them."""
    from .remote import check_objects

    n = len(paths)
    cols = np.zeros((n, 4), dtype=np.int64)
    reasons: list[str | None] = [None] * n
    etags = [""] * n
    read = np.zeros(n, dtype=bool)
    for i, rel in enumerate(paths):
        j, info = old[i], infos.get(rel)
        if j >= 0 and same_label[i] and info is not None and index.etags is not None and index.etags[j] \
                and info.etag == index.etags[j] and info.size == index.sizes[j]:
            cols[i] = index.sizes[j], index.mtimes[j], index.widths[j], index.heights[j]  # unchanged: not read
            etags[i] = info.etag
        else:
            read[i] = True
    todo = np.flatnonzero(read).tolist()
    results = check_objects(root, bucket, [paths[i] for i in todo], infos, verify, max_pixels, workers, progress,
                            "updating")
    for i, (reason, info, w, h) in zip(todo, results):
        reasons[i] = reason
        if reason is None:
            cols[i] = info.size, info.mtime_ns, w, h
            etags[i] = info.etag
    return cols, reasons, read, etags


def old_positions(index, paths: list[str]) -> np.ndarray:
    """Position in ``index`` of each of ``paths`` (-1: not there), matched by 64-bit string hashes (two
    int64 arrays instead of a dict of a million strings) and confirmed by comparing the strings."""
    n_old = len(index)
    old_hash = np.fromiter((hash(p) for p in index.paths), dtype=np.int64, count=n_old)
    order = np.argsort(old_hash, kind="stable")
    ranked = old_hash[order]
    want = np.fromiter((hash(p) for p in paths), dtype=np.int64, count=len(paths))
    lo = np.searchsorted(ranked, want, side="left")
    hi = np.searchsorted(ranked, want, side="right")
    out = np.full(len(paths), -1, dtype=np.int64)
    for i in np.flatnonzero(hi > lo).tolist():
        for k in range(lo[i], hi[i]):  # nearly always one; more only for equal hashes of different strings
            j = int(order[k])
            if index.paths[j] == paths[i]:
                out[i] = j
                break
    return out


def source_of(builder: str, **options) -> dict:
    """The source a builder records: its name and the options that shape the index (JSON)."""
    out = {"builder": builder}
    for key, value in options.items():
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, (tuple, list)):
            value = list(value)
        out[key] = value
    return out
