"""Building an index's targets: a reader's table (:mod:`dali_backend.targets`: relative image path ->
``ImageTargets``) joined with an index once (:func:`join_targets`), and the builders
:meth:`SampleIndex.from_mvtec <dali_backend.index.SampleIndex.from_mvtec>`,
:meth:`~dali_backend.index.SampleIndex.from_annotations` and
:meth:`~dali_backend.index.SampleIndex.with_targets` delegate to (functions here, taking the class or
the index: the columns they make are :class:`~.targets.IndexTargets`, kept out of :mod:`.core`).

Each sample's entry is looked up by its path, its boxes are checked against the image's size (from the
index), and its mask file's first :data:`~.targets.PNG_HEAD` bytes are read through the index's store
(one range read: a file's ``pread``, an object's ranged GET, in threads), which also answers its
version: size and mtime, or size and ETag. A mask of another size than its image is refused here,
not at the first epoch. Keys of an ``s3://`` index are relative to the table's base URL (default the
index root) as a folder's are to its base folder; masks in a folder beside the images' (``../masks/...``)
are read through the store of the prefix above (:func:`~dali_backend.storage.stores.resolve`).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import targets as readers
from ..errors import ConfigError, StorageError, TargetError
from ..formats.jpeg import DEFAULT_MAX_PIXELS
from ..storage import stores
from ..targets import mvtec_masks
from ..targets.records import check_boxes
from ..util.strings import StringTable
from .indexers import indexer_of
from .remote import REMOTE_MIN_WORKERS
from .targets import PNG_HEAD, IndexTargets, png_size
from .walk import Candidates

log = logging.getLogger("dali_backend")


def relative(path: str, start: str) -> str:
    """``path`` relative to ``start`` (``/``-separated, ``../`` where it lies outside), both folders or both
    URLs of one store (:func:`~dali_backend.storage.stores.relative`).

    Raises:
        TargetError: one is a URL and the other a folder, or they are URLs of two buckets.
    """
    rel = stores.relative(path, start)
    if rel is None:
        raise TargetError(f"{path}: not under {start} (another store or bucket); read the annotations relative "
                          "to the index's root (their root= argument)")
    return rel


def _mask_head(store, rel: str, where: str):
    """``((height, width), the mask's ObjectInfo)`` from one range read of its first bytes."""
    try:
        head, info = store.get(rel, None, 0, PNG_HEAD)
    except (OSError, StorageError) as e:  # ObjectMissing, a store's errors after its retries
        text = str(e).split(": ", 1)[1] if ": " in str(e) else str(e)
        raise TargetError(f"{where}: the mask cannot be read ({text}); fix the path or the file") from None
    return png_size(head, where), info


def join_targets(index, table: Mapping, num_classes: int = 2, binary: bool = False) -> IndexTargets:
    """The :class:`IndexTargets` of ``index``'s samples from a reader's ``table`` (keys relative to its
    ``base``, default the index root): boxes checked against each image's size, each mask's PNG header
    read through the index's store and checked against its image's size, its version recorded.

    Raises:
        TargetError: a box outside its image, a mask that is not a PNG of its image's size or is missing, or
            a table none of whose keys is a sample of the index (keys relative to another folder).
        ConfigError: a packed (sharded) index: join the targets on the loose index, then pack it.
    """
    if index.shards is not None:
        raise ConfigError(f"targets= on an index packed into shards ({index.root}): join the targets on the loose "
                          "index (its masks are read from their files), then pack it: dali-backend pack / "
                          "dali_backend.storage.pack.pack(index, out) writes each mask beside its image")
    store, root = index.store, index.root
    remote = store.folder is None
    base = getattr(table, "base", None) or root
    n = len(index)
    masks, sizes, mtimes, etags = [""] * n, np.full(n, -1, np.int64), np.full(n, -1, np.int64), [""] * n
    counts, boxes, labels, wanted = [], [], [], []
    used = 0
    values = list(table.values())
    kinds = tuple(k for k, has in (("masks", binary or any(t.mask is not None for t in values)),
                                   ("boxes", any(len(t.labels) for t in values))) if has)
    if not kinds:
        raise TargetError("targets: the table pairs no mask and gives no box (is it the right annotation or "
                          "folder?); pass binary=True for a segmentation set whose images are all background")
    for i, rel in enumerate(index.paths):
        key = relative(stores.join(root, rel), base)
        t = table.get(key)
        hw = (int(index.heights[i]), int(index.widths[i]))
        if t is None:
            counts.append(0)
            continue
        used += 1
        if len(t.labels):
            check_boxes(t.boxes, hw, f"{t.source or 'targets'}: box {{k}} of {key!r}")
        boxes.append(t.boxes)
        labels.append(t.labels)
        counts.append(len(t.labels))
        if t.mask is not None:
            wanted.append((i, relative(stores.join(base, t.mask), root), key, hw))
    if not used and n:  # keys relative to another folder: joined, every sample would read "no target"
        first = relative(stores.join(root, index.paths[0]), base)
        raise TargetError(f"targets: none of the {len(table)} annotated images is a sample of this index (the key "
                          f"{min(table)!r} looked up under {base}, where the first sample is {first!r}); give the "
                          "reader the folder its paths are relative to (root=), or index that folder")

    def head(item):
        held, rel = stores.resolve(store, item[1])  # a folder beside the root's: the store of the prefix above
        where = held.url(rel) if remote else os.path.normpath(held.url(rel))
        return _mask_head(held, rel, where) + (where,)

    with ThreadPoolExecutor(REMOTE_MIN_WORKERS if remote else 4) as pool:
        for (i, mask_rel, key, hw), (got, info, where) in zip(wanted, pool.map(head, wanted)):
            if got != hw:
                raise TargetError(f"{where}: the mask is {got[1]}x{got[0]} (width x height), its image {key!r} "
                                  f"{hw[1]}x{hw[0]}; masks must be the size of their image (resize it by nearest "
                                  "neighbour, or pair it with the right image)")
            masks[i], sizes[i], mtimes[i], etags[i] = mask_rel, info.size, info.mtime_ns, info.etag
    if len(table) > used:
        log.info("targets: %d of %d annotated images are not samples of this index (another split, or refused: "
                 "see index.rejected)", len(table) - used, len(table))
    return IndexTargets(StringTable.from_strings(masks), sizes, mtimes, np.concatenate([[0], np.cumsum(counts)]),
                        np.concatenate(boxes) if boxes else np.zeros((0, 4), np.float32),
                        np.concatenate(labels) if labels else np.zeros(0, np.int64), num_classes, binary,
                        getattr(table, "recipe", None), kinds, StringTable.from_strings(etags) if remote else None)


def with_targets(index, table: Mapping, num_classes: int = 2, binary: bool = False):
    """``index`` with its targets from ``table`` (:func:`join_targets`): the same fields, a new index."""
    fields = {name: getattr(index, name) for name in type(index).__slots__
              if name not in ("__weakref__", "fingerprint", "root", "_paths")}  # the constructor's keywords
    fields["annotations"] = join_targets(index, table, num_classes, binary)
    return type(index)(index.root, index.paths, **fields)


def read_recipe(recipe: list, storage_options: Mapping | None = None):
    """The table a recipe (:attr:`IndexTargets.recipe`) describes, read again: the readers called in turn
    with their recorded arguments (and ``storage_options`` where a reader takes them: never recorded),
    their tables merged."""
    tables = []
    for step in recipe:
        reader = getattr(readers, step["reader"], None)
        if reader is None or step["reader"] not in readers.__all__:
            raise ConfigError(f"the index's targets recipe names {step['reader']!r}, not a reader of "
                              "dali_backend.targets; rebuild the index with its targets")
        takes = "storage_options" in inspect.signature(reader).parameters
        extra = {"storage_options": storage_options} if storage_options and takes else {}
        tables.append(reader(**step["args"], **extra))
    return tables[0] if len(tables) == 1 else readers.merge_sources(*tables)


def again(index, old: IndexTargets):
    """``index`` (an update of an index whose targets were ``old``) with its targets read again."""
    if old.recipe is None:
        raise ConfigError("this index's targets were given as a plain table (not by a reader of dali_backend.targets), "
                          "which update cannot read again: rebuild it with SampleIndex.from_folder(..., targets=table)")
    return with_targets(index, read_recipe(old.recipe, index.storage_options), old.num_classes, old.binary)


def from_mvtec(cls, root, category: str, split: str = "test", **options):
    """One MVTec AD category (``<root>/<category>/{train,test,ground_truth}``, a folder or an ``s3://`` URL)
    as an index with masks: ``split`` ``"train"`` (all ``good``) or ``"test"`` (``good`` and each defect
    kind, each defect image with its ``ground_truth/<defect>/<name>_mask.png``, read as class ids 0/1).
    Classes are ``good`` and the defect kinds, sorted, the same ids in both splits; paths are relative
    to ``<root>/<category>``. ``options``: :meth:`SampleIndex.from_folder`'s.

    Raises:
        IndexBuildError: no such category or split folder.
        TargetError: a defect image without its mask, a mask without its image or of another size.
    """
    index = cls.from_folder(stores.join(os.fspath(root), category), split=split, **options)
    return with_targets(index, mvtec_masks(root, storage_options=options.get("storage_options")), 2, True)


def from_annotations(cls, root, targets: Mapping, *, classes_name: str = "image", **options):
    """An index of exactly the images ``targets`` names (a box table: ``read_coco``, ``read_yolo``,
    ``read_voc``, ``read_box_csv``; keys relative to its base, default ``root``), with their boxes:
    detection data needs no class folders. Every image gets label 0 of the one class
    ``classes_name`` (image-level labels are optional: the boxes carry the classes). ``options``:
    ``verify``, ``max_pixels``, ``workers``, ``progress``, ``storage_options`` as
    :meth:`SampleIndex.from_folder`. Such an index has no recorded walk: ``update`` refuses it (build it
    again from the annotations).

    Raises:
        TargetError: a key outside ``root``, or the targets' own checks (see :func:`join_targets`).
        IndexBuildError: no image named could be indexed.
    """
    if not targets:
        raise TargetError(f"from_annotations({os.fspath(root)!r}): the table names no image; read the annotations "
                          "first (e.g. read_coco(path, root))")
    folder = stores.normal_root(root)
    base = getattr(targets, "base", None) or folder
    paths = []
    for key in sorted(targets):
        rel = relative(stores.join(base, key), folder)
        if rel.startswith("../") or os.path.isabs(rel):
            raise TargetError(f"{key!r} (of {base}) lies outside the data root {folder}; pass the root the "
                              "annotation's paths are relative to")
        paths.append(rel)
    how = indexer_of(root, options.pop("storage_options", None))
    cand = Candidates(paths, [0] * len(paths), [], Counter())
    verify, max_pixels = options.pop("verify", "header"), options.pop("max_pixels", None)
    index = cls._checked(how, (root, cand, [classes_name], {}), verify, max_pixels or DEFAULT_MAX_PIXELS,
                         options.pop("workers", 8), options.pop("progress", None), None)
    if options:
        raise ConfigError(f"from_annotations got unexpected arguments {sorted(options)}; it takes verify, "
                          "max_pixels, workers, progress, storage_options")
    return with_targets(index, targets)
