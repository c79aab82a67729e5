"""Targets in the index: per sample an optional mask file and a list of boxes with class ids, held in
numpy columns beside the images' (:class:`IndexTargets`), saved, fingerprinted and checked like them.

A reader's table (:mod:`dali_backend.targets`: relative image path -> ``ImageTargets``) joins an index
once (:func:`with_targets`): each sample's entry is looked up by its path, its boxes are checked
against the image's size (from the index), its mask file is ``stat``-ed (size and mtime, so that a
changed mask is caught as a changed image is: ``StaleIndexError`` on ``load(check="stat")``) and its
PNG header read (a mask of another size than its image is refused here, not at the first epoch). A
sample without an entry or without a mask file is all background; its mask is made at its size
when it is read. Mask values are checked when a mask is read (decoding every mask at build time
would cost what decoding the images costs).

The trade-off: the columns are flat (boxes of all samples in one ``[M, 4]`` array with offsets, mask
paths in a :class:`~dali_backend.util.strings.StringTable`), as the images' are, so forked workers do
not copy them page by page; a sample's boxes are a slice. Masks are read from a local folder only:
an ``s3://`` index, or one packed into shards, with targets is refused (not yet supported).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from .. import targets as readers
from ..errors import ConfigError, TargetError
from ..formats.jpeg import DEFAULT_MAX_PIXELS
from ..targets import mvtec_masks
from ..targets.records import check_boxes
from ..util.strings import StringTable
from .indexers import indexer_of
from .walk import Candidates

log = logging.getLogger("dali_backend")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ARRAYS = ("mask_data", "mask_offsets", "mask_sizes", "mask_mtimes", "box_offsets", "boxes", "box_labels")


class IndexTargets:
    """The targets of every sample of an index, as numpy columns (read-only).

    Attributes:
        masks: each sample's mask path relative to the index root (``""``: none, all background).
        mask_sizes, mask_mtimes: int64 size in bytes and mtime in ns of each mask file (-1: none).
        box_offsets: int64 ``[n + 1]``: sample ``i``'s boxes are ``boxes[box_offsets[i]:box_offsets[i + 1]]``.
        boxes: float32 ``[M, 4]`` XYXY absolute pixels; box_labels: int64 ``[M]`` class ids.
        num_classes: mask class ids lie in ``[0, num_classes)``.
        binary: mask files hold 0 and one foreground value (MVTec AD's 255): read as 0/1.
        recipe: the readers (names and arguments) that made the table, read again by ``update``
            (None: a table given by hand, which ``update`` cannot read again).
        kinds: what the batches carry: ``"masks"`` (the table pairs masks, or ``binary``: every
            sample gets one, all background where it has no file) and/or ``"boxes"`` (the table has
            boxes: every sample gets a list, maybe empty).
    """

    __slots__ = ("masks", "mask_sizes", "mask_mtimes", "box_offsets", "boxes", "box_labels", "num_classes",
                 "binary", "recipe", "kinds")

    def __init__(self, masks: StringTable, mask_sizes, mask_mtimes, box_offsets, boxes, box_labels,
                 num_classes: int = 2, binary: bool = False, recipe: list | None = None,
                 kinds: tuple[str, ...] = ("masks", "boxes")):
        n = len(masks)
        cols = {"mask_sizes": (mask_sizes, np.int64, (n,)), "mask_mtimes": (mask_mtimes, np.int64, (n,)),
                "box_offsets": (box_offsets, np.int64, (n + 1,)), "boxes": (boxes, np.float32, (-1, 4)),
                "box_labels": (box_labels, np.int64, (-1,))}
        for name, (a, dtype, shape) in cols.items():
            a = np.array(a, dtype=dtype, copy=True).reshape(shape)
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        if self.box_offsets[0] != 0 or self.box_offsets[-1] != len(self.boxes) or len(self.boxes) != len(self.box_labels) \
                or np.any(np.diff(self.box_offsets) < 0):
            raise ConfigError(f"IndexTargets: box offsets {self.box_offsets[:3]}... do not cover {len(self.boxes)} boxes "
                              f"and {len(self.box_labels)} labels")
        if not (isinstance(num_classes, (int, np.integer)) and 1 <= num_classes <= 256):
            raise ConfigError(f"num_classes={num_classes!r}; masks hold uint8 class ids, give 1..256 classes")
        object.__setattr__(self, "masks", masks)
        object.__setattr__(self, "num_classes", int(num_classes))
        object.__setattr__(self, "binary", bool(binary))
        object.__setattr__(self, "recipe", recipe)
        if not set(kinds) <= {"masks", "boxes"}:
            raise ConfigError(f"IndexTargets: kinds={kinds!r}; 'masks' and/or 'boxes'")
        object.__setattr__(self, "kinds", tuple(kinds))

    def __setattr__(self, name, value):
        raise AttributeError(f"IndexTargets is immutable; cannot set {name!r}")

    def __len__(self) -> int:
        return len(self.masks)

    def __reduce__(self):
        return IndexTargets, (self.masks, self.mask_sizes, self.mask_mtimes, self.box_offsets, self.boxes,
                              self.box_labels, self.num_classes, self.binary, self.recipe, self.kinds)

    def mask_path(self, i: int) -> str | None:
        """Sample ``i``'s mask path relative to the index root, or None (all background)."""
        rel = self.masks[i]
        return rel or None

    def boxes_of(self, i: int) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Sample ``i``'s boxes ``[N, 4]`` (XYXY pixels) and labels ``[N]``."""
        a, b = int(self.box_offsets[i]), int(self.box_offsets[i + 1])
        return self.boxes[a:b], self.box_labels[a:b]

    def read_mask(self, folder: str, i: int, size: tuple[int, int]) -> NDArray[np.uint8]:
        """Sample ``i``'s mask, ``size`` (h, w) uint8 class ids: its file read and checked (values, size),
        or all background (0) without one."""
        rel = self.mask_path(i)
        if rel is None:
            return np.zeros(size, np.uint8)
        import cv2

        path = os.path.normpath(os.path.join(folder, rel))  # a mask folder beside the root: ../masks/...
        mask = cv2.imread(path, cv2.IMREAD_UNCHANGED)
        if mask is None:
            raise TargetError(f"{path}: the mask cannot be read (missing, truncated or not an image); fix the file "
                              "or rebuild the index")
        if self.binary:
            mask = (mask > 0).astype(np.uint8)
        return readers.check_mask(mask, size, self.num_classes, path)

    def take(self, positions: NDArray[np.int64]) -> IndexTargets:
        """The targets of the samples at ``positions``, in that order."""
        pos = np.asarray(positions, np.int64).reshape(-1)
        counts = np.diff(self.box_offsets)[pos]
        rows = np.concatenate([np.arange(self.box_offsets[p], self.box_offsets[p + 1]) for p in pos]) if pos.size \
            else np.zeros(0, np.int64)
        rows = rows.astype(np.int64)
        return IndexTargets(self.masks.take(pos), self.mask_sizes[pos], self.mask_mtimes[pos],
                            np.concatenate([[0], np.cumsum(counts)]), self.boxes[rows], self.box_labels[rows],
                            self.num_classes, self.binary, self.recipe, self.kinds)

    # ------------------------------------------------------------------ persistence and checks
    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as the index file stores them (``target_`` prefixed; 1-D: boxes flattened)."""
        return {f"target_{k}": v for k, v in zip(ARRAYS, (self.masks.data, self.masks.offsets, self.mask_sizes,
                                                          self.mask_mtimes, self.box_offsets,
                                                          self.boxes.reshape(-1), self.box_labels))}

    def meta(self) -> dict:
        return {"num_classes": self.num_classes, "binary": self.binary, "recipe": self.recipe, "kinds": list(self.kinds)}

    @classmethod
    def from_saved(cls, arrays: Mapping[str, np.ndarray], meta: Mapping) -> IndexTargets:
        a = {k: arrays[f"target_{k}"] for k in ARRAYS}
        return cls(StringTable(a["mask_data"], a["mask_offsets"]), a["mask_sizes"], a["mask_mtimes"], a["box_offsets"],
                   a["boxes"], a["box_labels"], int(meta["num_classes"]), bool(meta["binary"]), meta.get("recipe"),
                   tuple(meta["kinds"]))

    def digest(self, h) -> None:
        """Add the columns to the index's fingerprint ``h`` (hashlib)."""
        h.update(b"targets")
        h.update(repr((self.num_classes, self.binary, self.kinds)).encode())
        for a in self.arrays().values():
            h.update(np.ascontiguousarray(a).tobytes())

    def changed(self, folder: str) -> list[tuple[str, str]]:
        """``(mask path, what changed)`` for mask files whose size or mtime differ from indexing time."""
        out = []
        for i in np.flatnonzero(self.mask_sizes >= 0).tolist():
            rel = self.masks[i]
            try:
                st = os.stat(os.path.join(folder, rel))
            except OSError:
                out.append((rel, "missing"))
                continue
            if st.st_size != self.mask_sizes[i]:
                out.append((rel, f"size {self.mask_sizes[i]} -> {st.st_size}"))
            elif st.st_mtime_ns != self.mask_mtimes[i]:
                out.append((rel, "mtime changed"))
        return out


def png_size(path: str) -> tuple[int, int]:
    """``(height, width)`` from a PNG file's IHDR chunk (24 bytes read)."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError as e:
        raise TargetError(f"{path}: the mask cannot be read ({e.strerror}); fix the path or the file") from None
    if len(head) < 24 or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise TargetError(f"{path}: not a PNG file; masks are single-channel PNGs of class ids (save it as PNG: "
                          "JPEG would change the ids)")
    return int.from_bytes(head[20:24], "big"), int.from_bytes(head[16:20], "big")


def join_targets(index, table: Mapping, num_classes: int = 2, binary: bool = False) -> IndexTargets:
    """The :class:`IndexTargets` of ``index``'s samples from a reader's ``table`` (keys relative to its
    ``base``, default the index root): boxes checked against each image's size, mask files
    ``stat``-ed and their PNG headers checked against the image's size.

    Raises:
        TargetError: a box outside its image, a mask that is not a PNG of its image's size or is missing.
        ConfigError: an ``s3://`` or packed (sharded) index (targets there are not supported yet).
    """
    folder = index.store.folder
    if folder is None or index.shards is not None:
        where = "an s3:// (object store) index" if folder is None else "an index packed into shards"
        raise ConfigError(f"targets= on {where} ({index.root}) are not supported yet: masks and boxes are read "
                          "from a local folder; index a local copy of the data (loose files) with its targets")
    root = str(folder)
    base = getattr(table, "base", None) or root
    n = len(index)
    masks, sizes, mtimes, counts, boxes, labels = [], np.full(n, -1, np.int64), np.full(n, -1, np.int64), [], [], []
    used = 0
    values = list(table.values())
    kinds = tuple(k for k, has in (("masks", binary or any(t.mask is not None for t in values)),
                                   ("boxes", any(len(t.labels) for t in values))) if has)
    if not kinds:
        raise TargetError("targets: the table pairs no mask and gives no box (is it the right annotation or "
                          "folder?); pass binary=True for a segmentation set whose images are all background")
    for i, rel in enumerate(index.paths):
        key = os.path.relpath(os.path.join(root, rel), base).replace(os.sep, "/")
        t = table.get(key)
        hw = (int(index.heights[i]), int(index.widths[i]))
        if t is None:
            masks.append("")
            counts.append(0)
            continue
        used += 1
        if len(t.labels):
            check_boxes(t.boxes, hw, f"{t.source or 'targets'}: box {{k}} of {key!r}")
        boxes.append(t.boxes)
        labels.append(t.labels)
        counts.append(len(t.labels))
        if t.mask is None:
            masks.append("")
            continue
        mask_abs = os.path.join(base, t.mask)
        got = png_size(mask_abs)
        if got != hw:
            raise TargetError(f"{mask_abs}: the mask is {got[1]}x{got[0]} (width x height), its image {key!r} "
                              f"{hw[1]}x{hw[0]}; masks must be the size of their image (resize it by nearest "
                              "neighbour, or pair it with the right image)")
        st = os.stat(mask_abs)
        sizes[i], mtimes[i] = st.st_size, st.st_mtime_ns
        masks.append(os.path.relpath(mask_abs, root).replace(os.sep, "/"))
    if len(table) > used:
        log.info("targets: %d of %d annotated images are not samples of this index (another split, or refused: "
                 "see index.rejected)", len(table) - used, len(table))
    return IndexTargets(StringTable.from_strings(masks), sizes, mtimes, np.concatenate([[0], np.cumsum(counts)]),
                        np.concatenate(boxes) if boxes else np.zeros((0, 4), np.float32),
                        np.concatenate(labels) if labels else np.zeros(0, np.int64), num_classes, binary,
                        getattr(table, "recipe", None), kinds)


def read_recipe(recipe: list):
    """The table a recipe (:attr:`IndexTargets.recipe`) describes, read again: the readers called in turn
    with their recorded arguments, their tables merged."""
    tables = []
    for step in recipe:
        reader = getattr(readers, step["reader"], None)
        if reader is None or step["reader"] not in readers.__all__:
            raise ConfigError(f"the index's targets recipe names {step['reader']!r}, not a reader of "
                              "dali_backend.targets; rebuild the index with its targets")
        tables.append(reader(**step["args"]))
    return tables[0] if len(tables) == 1 else readers.merge_sources(*tables)


def again(index, old: IndexTargets):
    """``index`` (an update of an index whose targets were ``old``) with its targets read again."""
    if old.recipe is None:
        raise ConfigError("this index's targets were given as a plain table (not by a reader of dali_backend.targets), "
                          "which update cannot read again: rebuild it with SampleIndex.from_folder(..., targets=table)")
    return index.with_targets(read_recipe(old.recipe), num_classes=old.num_classes, binary=old.binary)


def from_mvtec(cls, root, category: str, split: str = "test", **options):
    """One MVTec AD category (``<root>/<category>/{train,test,ground_truth}``) as an index with masks:
    ``split`` ``"train"`` (all ``good``) or ``"test"`` (``good`` and each defect kind, each defect
    image with its ``ground_truth/<defect>/<name>_mask.png``, read as class ids 0/1). Classes are
    ``good`` and the defect kinds, sorted, the same ids in both splits; paths are relative to
    ``<root>/<category>``. ``options``: :meth:`SampleIndex.from_folder`'s.

    Raises:
        IndexBuildError: no such category or split folder.
        TargetError: a defect image without its mask, a mask without its image or of another size.
    """
    folder = os.path.join(os.fspath(root), category)
    index = cls.from_folder(folder, split=split, **options)
    return index.with_targets(mvtec_masks(root), num_classes=2, binary=True)


def from_annotations(cls, root, targets: Mapping, *, classes_name: str = "image", **options):
    """An index of exactly the images ``targets`` names (a box table: ``read_coco``, ``read_yolo``,
    ``read_voc``, ``read_box_csv``; keys relative to its base, default ``root``), with their boxes:
    detection data needs no class folders. Every image gets label 0 of the one class
    ``classes_name`` (image-level labels are optional: the boxes carry the classes). ``options``:
    ``verify``, ``max_pixels``, ``workers``, ``progress`` as :meth:`SampleIndex.from_folder`. Such an
    index has no recorded walk: ``update`` refuses it (build it again from the annotations).

    Raises:
        TargetError: a key outside ``root``, or the targets' own checks (see :func:`join_targets`).
        IndexBuildError: no image named could be indexed.
    """
    if not targets:
        raise TargetError(f"from_annotations({os.fspath(root)!r}): the table names no image; read the annotations "
                          "first (e.g. read_coco(path, root))")
    folder = os.path.abspath(os.fspath(root))
    base = getattr(targets, "base", None) or folder
    paths = []
    for key in sorted(targets):
        rel = os.path.relpath(os.path.join(base, key), folder).replace(os.sep, "/")
        if rel.startswith("../") or os.path.isabs(rel):
            raise TargetError(f"{key!r} (of {base}) lies outside the data root {folder}; pass the root the "
                              "annotation's paths are relative to")
        paths.append(rel)
    how = indexer_of(root, options.pop("storage_options", None))
    cand = Candidates(paths, [0] * len(paths), [], Counter())
    verify, max_pixels = options.pop("verify", "header"), options.pop("max_pixels", None)
    index = cls._checked(how, (root, cand, [classes_name], None), verify, max_pixels or DEFAULT_MAX_PIXELS,
                         options.pop("workers", 8), options.pop("progress", None), None)
    if options:
        raise ConfigError(f"from_annotations got unexpected arguments {sorted(options)}; it takes verify, "
                          "max_pixels, workers, progress, storage_options")
    return index.with_targets(targets)


class TargetsMixin:
    """:class:`~dali_backend.index.SampleIndex`'s builders and method for targets (kept here, beside the
    columns they make)."""

    __slots__ = ()

    @classmethod
    def from_mvtec(cls, root, category: str, split: str = "test", **options):
        """One MVTec AD category's split with its masks: :func:`from_mvtec`."""
        return from_mvtec(cls, root, category, split, **options)

    @classmethod
    def from_annotations(cls, root, targets: Mapping, **options):
        """The images a box table names, with their boxes, no class folders: :func:`from_annotations`."""
        return from_annotations(cls, root, targets, **options)

    def with_targets(self, targets: Mapping, num_classes: int = 2, binary: bool = False):
        """This index with each sample's mask file and boxes from a reader's table (saved, fingerprinted,
        checked and updated like the images): :func:`join_targets`. ``num_classes``: mask ids lie in
        ``[0, num_classes)``; ``binary``: mask files hold 0 and one foreground value (read as 1).

        Raises:
            TargetError: a box outside its image, a mask missing, not a PNG, or not its image's size.
            ConfigError: an ``s3://`` or packed index (not supported yet).
        """
        fields = {name: getattr(self, name) for name in self.__slots__
                  if name not in ("__weakref__", "fingerprint", "root", "_paths")}  # the constructor's keywords
        fields["annotations"] = join_targets(self, targets, num_classes, binary)
        return type(self)(self.root, self._paths, **fields)
