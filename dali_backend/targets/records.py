"""The per-image target record, the box checks every reader shares, and the rule for combining sources."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import TargetError
from ..storage import stores

Size = tuple[int, int]  # (height, width)
EPS = 1e-3  # pixels: a coordinate written as 640.0004 by a float round trip is on the edge, not outside


@dataclass(frozen=True)
class ImageTargets:
    """The targets of one image: ``boxes`` ``[N, 4]`` float32 XYXY in absolute pixels (``[0, 0]`` the
    corner of the first pixel, torchvision v2's convention), ``labels`` ``[N]`` int64 class ids,
    ``mask`` the mask file's path relative to the data root (None: no mask file; a segmentation
    sample without one is all background), ``source`` the annotation file it came from."""

    boxes: NDArray[np.float32] = field(default_factory=lambda: np.zeros((0, 4), np.float32))
    labels: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    mask: str | None = None
    source: str = ""

    def __post_init__(self):
        boxes = np.asarray(self.boxes, np.float32).reshape(-1, 4)
        labels = np.asarray(self.labels, np.int64).reshape(-1)
        if len(boxes) != len(labels):
            raise TargetError(f"{self.source or 'ImageTargets'}: {len(boxes)} boxes but {len(labels)} labels; "
                              "give one class id per box")
        object.__setattr__(self, "boxes", boxes)
        object.__setattr__(self, "labels", labels)

    def same_as(self, other: ImageTargets) -> bool:
        return (self.mask == other.mask and np.array_equal(self.boxes, other.boxes)
                and np.array_equal(self.labels, other.labels))


class TargetTable(dict):
    """A reader's table (relative image path -> :class:`ImageTargets`) that remembers where its keys are
    relative to (``base``, an absolute folder; None: the data root of the index it joins) and how it
    was read (``recipe``: the readers and their arguments, JSON), so that an index built with it can
    read it again on ``update`` (``dali-backend index --update``). A plain dict works too, without the
    update."""

    def __init__(self, entries=(), base: str | None = None, recipe: list | None = None):
        super().__init__(entries)
        self.base, self.recipe = base, recipe


def _plain(value):
    """An argument as JSON: paths absolute (a recipe is read again from another working folder)."""
    if isinstance(value, (str, Path)) and value != "" and os.path.exists(value):
        return os.path.abspath(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return _NOT_JSON


_NOT_JSON = object()


def recorded(base_argument: str | None):
    """A reader's decorator: its table as a :class:`TargetTable`, keys relative to the argument named
    ``base_argument`` (None: the index's root), with the call as its recipe (none when an argument
    is not plain JSON, e.g. a function for ``image_sizes``)."""

    def wrap(reader):
        signature = inspect.signature(reader)

        @functools.wraps(reader)
        def read(*args, **kwargs):
            table = reader(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            plain = {k: _plain(v) for k, v in bound.arguments.items() if k != "storage_options"}  # never saved
            recipe = None if any(v is _NOT_JSON for v in plain.values()) else [{"reader": reader.__name__,
                                                                                "args": plain}]
            base = getattr(table, "base", None)
            if base is None and base_argument is not None and bound.arguments.get(base_argument) is not None:
                base = root_of(bound.arguments[base_argument])
            return TargetTable(table, base, recipe)
        return read
    return wrap


def root_of(path: str | os.PathLike) -> str:
    """A folder's absolute path, or an object-storage URL (``s3://bucket/prefix``) in normal form: what a
    table's keys are relative to."""
    return stores.url_root(str(path)) or os.path.abspath(path)


def check_boxes(boxes: NDArray[np.float32], size: Size | None, where: str) -> None:
    """Refuse boxes with ``x2 < x1`` or ``y2 < y1``, non-finite coordinates, or (``size`` given, (h, w))
    corners outside the image. ``where(k)`` names the k-th box's file and line or field.

    Raises:
        TargetError: naming the first bad box, its values and the fix.
    """
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    for k, (x1, y1, x2, y2) in enumerate(boxes):
        place = where.format(k=k) if "{k}" in where else where
        shown = f"[x1, y1, x2, y2] = [{x1:g}, {y1:g}, {x2:g}, {y2:g}]"
        if not np.all(np.isfinite((x1, y1, x2, y2))):
            raise TargetError(f"{place}: box {shown} has a coordinate that is not a finite number; fix the annotation")
        if x2 < x1 or y2 < y1:
            raise TargetError(f"{place}: box {shown} has {'x2 < x1' if x2 < x1 else 'y2 < y1'}; corners must be "
                              "(left, top, right, bottom): swap them or fix the annotation")
        if size is not None:
            h, w = size
            if x1 < -EPS or y1 < -EPS or x2 > w + EPS or y2 > h + EPS:
                raise TargetError(f"{place}: box {shown} lies outside its {w}x{h} (width x height) image; clip it to "
                                  "the image or fix the annotation (is it for another image or size?)")


def existing(root: str | Path | None, storage_options: Mapping | None = None) -> Callable[[str, str], None]:
    """``check(rel, where)``: refuse an annotation naming an image that is not a file under ``root`` (a folder,
    or an ``s3://`` URL: one listing, made on the first check); no check without a root."""
    if root is None:
        return lambda rel, where: None
    store = stores.open_store(root, storage_options)
    listed: list[set] = []

    def check(rel: str, where: str) -> None:
        if store.folder is not None:
            there = (Path(root) / rel).is_file()
        else:
            if not listed:
                listed.append({o.rel for o in store.list()})
            there = rel in listed[0]
        if not there:
            raise TargetError(f"{where}: names {rel!r}, which is not a file under {root}; fix the path in the "
                              "annotation or pass the data root the paths are relative to")
    return check


def read_text(path: str | Path, storage_options: Mapping | None = None, errors: str = "strict") -> str:
    """The UTF-8 text of the annotation file ``path``, read through the store of its folder: a local file, or
    an object (``s3://bucket/key``: one GET).

    Raises:
        TargetError: the object or file cannot be read (named). UnicodeDecodeError: not UTF-8 (``errors``).
    """
    folder, name = stores.parent(str(path)), os.fspath(path).replace(os.sep, "/").rsplit("/", 1)[-1]
    try:
        data, _ = stores.open_store(folder, storage_options).get(name)
    except OSError as e:  # a missing object, a store's errors after its retries
        raise TargetError(f"{path}: the annotation file cannot be read ({e}); check the URL") from None
    return data.decode("utf-8", errors)


def merge_sources(*tables: dict[str, ImageTargets]) -> TargetTable:
    """One table from several sources (e.g. the boxes of a COCO file and masks by a pairing rule): an
    image's boxes from one source and its mask from another combine; the same image given boxes (or
    masks) by two sources is refused, unless both say exactly the same.

    Raises:
        TargetError: two conflicting annotation sources for one image, naming both.
    """
    out: dict[str, ImageTargets] = {}
    bases = {getattr(t, "base", None) for t in tables}
    if len(bases) > 1:
        raise TargetError(f"merge_sources: the tables' keys are relative to different folders {sorted(map(str, bases))}; "
                          "read every source relative to one data root (their root= argument)")
    recipes = [getattr(t, "recipe", None) for t in tables]
    for table in tables:
        for rel, t in table.items():
            have = out.get(rel)
            if have is None:
                out[rel] = t
                continue
            boxes_clash = len(have.labels) and len(t.labels) and not (
                np.array_equal(have.boxes, t.boxes) and np.array_equal(have.labels, t.labels))
            mask_clash = have.mask is not None and t.mask is not None and have.mask != t.mask
            if boxes_clash or mask_clash:
                what = "boxes" if boxes_clash else f"masks ({have.mask!r} and {t.mask!r})"
                raise TargetError(f"{rel!r}: two annotation sources give different {what}: {have.source or '?'} and "
                                  f"{t.source or '?'}; keep one source per image (remove it from the other)")
            take = t if len(t.labels) else have
            out[rel] = ImageTargets(take.boxes, take.labels, have.mask if have.mask is not None else t.mask,
                                    " + ".join(s for s in (have.source, t.source) if s))
    recipe = None if any(r is None for r in recipes) else [step for r in recipes for step in r]
    return TargetTable(out, bases.pop() if bases else None, recipe)
