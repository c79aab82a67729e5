"""How a data root is indexed, chosen once from its store (:func:`indexer_of`), never by testing for a URL.

A store that is a folder on this machine (:class:`~dali_backend.storage.local.LocalStore`: its ``folder``
is set) is walked by the index's own walk (:mod:`.walk`, :mod:`.build`: symlink, hidden and
special-file rules, every skipped file named) and its files checked with ``stat`` and header reads in
threads. Any other store (``s3://``, a registered scheme) is listed once and its objects checked
with byte-range reads (:mod:`.remote`). Both indexers answer the same calls, for a build and for an
update, so the builders in :mod:`.core` and :mod:`.update` hold no branch on the kind of root. The
trade-off: a listing cannot see symlinks or special files, a walk cannot see ETags; each indexer keeps
its own rules rather than one lowest common set.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

from ..errors import ConfigError
from ..storage import stores
from ..util.strings import StringTable
from . import build, remote
from .kinds import Kinds
from .parallel import map_in_chunks

LOCAL_ONLY = "storage_options apply to an s3:// URL root; this root is a local folder: drop them"


def indexer_of(root, storage_options: Mapping | None = None) -> Indexer:
    """The indexer of the data root ``root`` (None: a manifest's own folder), from its store."""
    store = stores.open_store(os.curdir if root is None else root, storage_options)
    if store.folder is None:
        return ListingIndexer(store, storage_options)
    if storage_options:
        raise ConfigError(LOCAL_ONLY)
    return FolderIndexer(root)


class Indexer:
    """What both indexers share: an update's candidates, found again the way the index was built."""

    def again(self, source: Mapping):
        """``(root, candidates, classes, listed objects or None)``: the build's walk or listing again, with the
        options ``source`` recorded."""
        builder = source["builder"]
        if builder == "folder":
            return self.folder(source.get("split"), source.get("classes"), bool(source.get("allow_outside_symlinks")))
        if builder == "keywords":
            return self.keywords(source["rules"], bool(source.get("allow_outside_symlinks")))
        return self.manifest(source["manifest"], source.get("split"), source.get("classes"), source.get("path_column"),
                             source.get("label_column"), source.get("split_column"), source.get("encoding"))


class FolderIndexer(Indexer):
    """A folder: the walk of :mod:`.build`; ``root`` as the caller wrote it (its messages name it so)."""

    def __init__(self, root):
        self.root = root

    def folder(self, split, classes, allow_outside_symlinks):
        return (*build.folder_candidates(self.root, split, classes, allow_outside_symlinks), None)

    def keywords(self, kw, allow_outside_symlinks):
        return (*build.keyword_candidates(self.root, kw, allow_outside_symlinks), None)

    def manifest(self, path, split, classes, path_column, label_column, split_column, encoding):
        return (*build.manifest_candidates(path, self.root, split, classes, path_column, label_column, split_column,
                                           encoding), None)

    def check(self, root, cand, classes, infos, verify, max_pixels, workers, progress):
        """``(positions kept, columns, rejected, extra fields of the index: formats and bit depths)``:
        :func:`.build.check_candidates`."""
        return build.check_candidates(root, cand, classes, verify, max_pixels, workers, progress)

    def recheck(self, index, root, cand, labels, classes, infos, old, same_label, verify, max_pixels, workers,
                progress):
        """``(cols, reasons, read, extra)`` of an update (``extra(kept)``: the index's extra fields for the
        samples kept): ``stat`` for all, headers only of the files new,
        changed (size or mtime) or refused before."""
        n = len(cand.paths)
        checks = build.FileChecks(root, cand.paths, verify, max_pixels)
        cols, reasons = checks.cols, checks.reasons
        read = np.zeros(n, dtype=bool)

        def check(i: int) -> None:
            st = checks.stat(i)
            if st is None:
                return
            j = old[i]
            if j >= 0 and same_label[i] and index.sizes[j] == cols[i, 0] and index.mtimes[j] == cols[i, 1]:
                cols[i, 2], cols[i, 3] = index.widths[j], index.heights[j]  # unchanged: not read
                checks.kinds.copy(i, index, j)
                return
            read[i] = True
            checks.check(i, st)

        map_in_chunks(check, n, workers, progress, "updating")
        checks.reject_same_file_twice(dataclasses.replace(cand, labels=labels.tolist()), classes)  # the update's ids
        return cols, reasons, read, checks.kinds.fields

    def no_source(self, index) -> str:
        return ("update: this index records no source (it was derived with subset()/split(), or saved by a release "
                "before updates existed); update the index it came from and split it again, or build it once with "
                "SampleIndex.from_folder / from_keywords / from_manifest")


class ListingIndexer(Indexer):
    """A store that lists objects: one listing and range reads (:mod:`.remote`)."""

    def __init__(self, store, storage_options: Mapping | None):
        self.store, self.storage_options = store, storage_options

    def folder(self, split, classes, allow_outside_symlinks):
        return remote.folder_candidates(self.store, split, classes)

    def keywords(self, kw, allow_outside_symlinks):
        return remote.keyword_candidates(self.store, kw)

    def manifest(self, path, split, classes, path_column, label_column, split_column, encoding):
        return remote.manifest_candidates(path, self.store, split, classes, path_column, label_column, split_column,
                                          encoding)

    def check(self, root, cand, classes, infos, verify, max_pixels, workers, progress):
        """``(positions kept, columns, rejected, extra fields of the index: ETags, storage_options)``."""
        keep, cols, etags, rejected, kinds = remote.check_candidates(root, self.store, cand, infos, verify, max_pixels,
                                                                     workers, progress)
        return keep, cols, rejected, {"etags": StringTable.from_strings(etags), "storage_options": self.storage_options,
                                      **kinds}

    def recheck(self, index, root, cand, labels, classes, infos, old, same_label, verify, max_pixels, workers,
                progress):
        """``(cols, reasons, read, extra)`` of an update: objects listed with the indexed size and ETag are
        kept without a request; the others are checked as a build checks them."""
        paths = cand.paths
        if not infos:  # a manifest: its entries were not listed; one listing says which changed
            infos = {o.rel: o for o in self.store.list()}
        n = len(paths)
        cols = np.zeros((n, 4), dtype=np.int64)
        reasons: list[str | None] = [None] * n
        etags = [""] * n
        read = np.zeros(n, dtype=bool)
        kinds = Kinds(n)
        for i, rel in enumerate(paths):
            j, info = old[i], infos.get(rel)
            if j >= 0 and same_label[i] and info is not None and index.etags is not None and index.etags[j] \
                    and info.etag == index.etags[j] and info.size == index.sizes[j]:
                cols[i] = index.sizes[j], index.mtimes[j], index.widths[j], index.heights[j]  # unchanged: not read
                kinds.copy(i, index, j)
                etags[i] = info.etag
            else:
                read[i] = True
        todo = np.flatnonzero(read).tolist()
        results = remote.check_objects(root, self.store, [paths[i] for i in todo], infos, verify, max_pixels, workers,
                                       progress, "updating")
        for i, (reason, info, w, h, kind) in zip(todo, results):
            reasons[i] = reason
            if reason is None:
                cols[i] = info.size, info.mtime_ns, w, h
                kinds.set(i, *kind)
                etags[i] = info.etag
        return cols, reasons, read, lambda kept: {"etags": StringTable.from_strings(etags[i] for i in kept),
                                                  "storage_options": self.storage_options, **kinds.fields(kept)}

    def no_source(self, index) -> str:
        return (f"update: this index of {index.root} records no source (it was built by a release that recorded none "
                f"for a bucket, or derived with subset()/split()); build it once again with "
                f"SampleIndex.from_folder({index.root!r}) / from_keywords / from_manifest (one listing and a range "
                "read per object): later updates then list the bucket and read only new and changed objects (ETags)")

