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
the data grows). An index with targets has its readers run again: a sample whose mask file is gone
under a rule that reads a missing mask as background is kept, named in the report
(``UpdateReport.masks_lost``) and logged as a warning, never counted silently as unchanged.
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
from .indexers import indexer_of
from .report import headline, nothing_indexed
from .targetbuild import again as targets_again
from .walk import Rejected

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
    masks_lost: tuple[str, ...] = ()  # samples kept whose mask file is gone: their pairing rule now reads background

    def __str__(self) -> str:
        text = (f"{self.unchanged} unchanged (not re-read), {self.added} added, {self.rechecked} changed and "
                f"re-checked, {self.removed} removed")
        text += f"; new classes {list(self.new_classes)} appended" if self.new_classes else ""
        if self.masks_lost:
            shown = ", ".join(self.masks_lost[:5]) + (", ..." if len(self.masks_lost) > 5 else "")
            n = len(self.masks_lost)
            text += f"; {n} {'sample' if n == 1 else 'samples'} lost {'its' if n == 1 else 'their'} mask file (now all " \
                    f"background: {shown})"
        return text


def check_source(source, where: str = "index") -> dict | None:
    """``source`` as recorded by a builder (a dict naming the builder and its options), or None."""
    if source is None:
        return None
    if not isinstance(source, Mapping) or source.get("builder") not in BUILDERS:
        raise ConfigError(f"{where}: source={str(source)[:80]!r}; expected the dict a builder records, with "
                          f"'builder' one of {list(BUILDERS)}")
    return dict(source)


def update_index(index, *, workers: int = 8, progress: bool | None = None) -> tuple:
    """``(updated index, UpdateReport)`` for a :class:`~dali_backend.index.SampleIndex`: see the module docstring.

    Raises:
        ConfigError: the index has no recorded source (derived by ``subset``/``split``, or saved by an
            older release): rebuild it once with a builder.
        IndexBuildError: what a fresh build would raise (e.g. no usable file left).
    """
    source = index.source
    how = indexer_of(index.root, index.storage_options)
    if source is None and index.annotations is not None:  # from_annotations: the table is the index
        raise ConfigError("update: this index was made by SampleIndex.from_annotations (the images its annotations "
                          "name), which records no walk to repeat; build it again from the annotations: "
                          "SampleIndex.from_annotations(root, read_coco(...)) (or read_yolo / read_voc / read_box_csv)")
    if source is None:
        raise ConfigError(how.no_source(index))
    root, cand, found, infos = how.again(source)
    old_classes = list(index.classes)
    classes = old_classes + [c for c in found if c not in old_classes]  # old ids keep their meaning
    to_new = np.array([classes.index(c) for c in found], dtype=np.int64)
    labels = to_new[np.asarray(cand.labels, dtype=np.int64)] if cand.labels else np.zeros(0, np.int64)
    n = len(cand.paths)
    old = old_positions(index, cand.paths)  # -1: not in the index
    same_label = np.zeros(n, dtype=bool)
    same_label[old >= 0] = index.labels[old[old >= 0]] == labels[old >= 0]
    verify, max_pixels = source.get("verify", "header"), int(source.get("max_pixels", DEFAULT_MAX_PIXELS))
    cols, reasons, read, extra = how.recheck(index, root, cand, labels, classes, infos, old, same_label, verify,
                                             max_pixels, workers, progress)
    good = np.array([r is None for r in reasons], dtype=bool)
    rejected = sorted(list(cand.rejected) + [Rejected(cand.paths[i], r) for i, r in enumerate(reasons) if r is not None],
                      key=lambda r: r.path)
    if not good.any():
        raise IndexBuildError(nothing_indexed(root, cand, rejected))
    kept = np.flatnonzero(good)
    # samples still present in their old order, then the new files in walk order
    kept = kept[np.argsort(np.where(old[kept] >= 0, old[kept], len(index) + kept), kind="stable")]
    new = type(index)(root, StringTable.from_strings(cand.paths[i] for i in kept.tolist()), labels[kept], classes,
                      cols[kept, 0], cols[kept, 1], cols[kept, 2], cols[kept, 3], rejected, cand.ignored,
                      sorted(cand.ignored_files, key=lambda r: r.path), source=source, **extra(kept.tolist()))
    lost: tuple[str, ...] = ()
    if index.annotations is not None:  # the targets' readers again: new images get theirs, changed masks re-checked
        new = targets_again(new, index.annotations)
        lost = lost_masks(index.annotations, new, old[kept])
    present = int((old[kept] >= 0).sum())
    rechecked = int((read[kept] & (old[kept] >= 0)).sum())
    report = UpdateReport(unchanged=present - rechecked, added=len(kept) - present, rechecked=rechecked,
                          removed=len(index) - present, new_classes=tuple(classes[len(old_classes):]), masks_lost=lost)
    log.info("%s", headline(new))
    log.info("index updated: %s", report)
    return new, report


def lost_masks(before, new, old_at: np.ndarray) -> tuple[str, ...]:
    """The paths of ``new``'s samples that had a mask file in the targets ``before`` (``old_at``: each new
    sample's position there, -1: added) and have none now (a pairing rule reading a missing mask as
    background), each logged as a warning with the mask it had."""
    lost = []
    for j in np.flatnonzero(old_at >= 0).tolist():
        had = before.mask_path(int(old_at[j]))
        if had is not None and new.annotations.mask_path(j) is None:
            lost.append(new.paths[j])
            log.warning("update: %s had the mask %s, now gone: the sample reads as all background (restore the mask, "
                        "or rebuild with missing='error' to refuse images without one)", new.paths[j], had)
    return tuple(lost)


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
