"""Targets in the index: per sample an optional mask file and a list of boxes with class ids, held in
numpy columns beside the images' (:class:`IndexTargets`), saved, fingerprinted and checked like them.
Building them (a reader's table joined with an index) is :mod:`.targetbuild`.

A mask is a file like an image: it lies where the images do (a folder, or an ``s3://`` root: its path
relative to the index root), or, once packed (``dali-backend pack``), in its image's shard as the member
``<key>.mask.png`` (:attr:`IndexTargets.mask_members`: its offset). Its version is recorded as an
image's is (size and mtime of a file, size and ETag of an object), so a changed mask is a
``StaleIndexError`` on ``load(check="stat")``, and every read at run time goes through the sample
reader's store and disk cache (:meth:`IndexTargets.mask_bytes`: conditional on the indexed ETag,
its size checked, kept in ``cache_dir`` keyed by its version like an image). A sample without a mask
file is all background; its mask is made at its size when it is read. Mask values are checked when
a mask is read (decoding every mask at build time would cost what decoding the images costs).

The trade-off: the columns are flat (boxes of all samples in one ``[M, 4]`` array with offsets, mask
paths in a :class:`~dali_backend.util.strings.StringTable`), as the images' are, so forked workers do
not copy them page by page; a sample's boxes are a slice. On an object store a mask in a folder beside
the images' (``../masks/...``) is read and listed through the store of the prefix above the root.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from .. import targets as readers
from ..errors import ConfigError, StorageError, TargetError
from ..storage import stores
from ..storage.local import LocalStore
from ..storage.objects import ObjectChanged
from ..util.strings import StringTable

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_HEAD = 24  # bytes of a PNG that hold its size: the signature and the IHDR chunk's width and height
ARRAYS = ("mask_data", "mask_offsets", "mask_sizes", "mask_mtimes", "box_offsets", "boxes", "box_labels")
# saved only where they apply: masks of an object store (ETags), masks packed into shards (member offsets)
OPTIONAL_ARRAYS = ("mask_etag_data", "mask_etag_offsets", "mask_members")
MASK_MEMBER = ".mask.png"  # a packed mask's member name: <key>.mask.png beside <key>.<ext> (WebDataset)


class IndexTargets:
    """The targets of every sample of an index, as numpy columns (read-only).

    Attributes:
        masks: each sample's mask path relative to the index root (``""``: none, all background).
        mask_sizes, mask_mtimes: int64 size in bytes and mtime in ns of each mask file (-1: none).
        box_offsets: int64 ``[n + 1]``: sample ``i``'s boxes are ``boxes[box_offsets[i]:box_offsets[i + 1]]``.
        boxes: float32 ``[M, 4]`` XYXY absolute pixels; box_labels: int64 ``[M]`` class ids.
        num_classes: mask class ids lie in ``[0, num_classes)``.
        binary: mask files hold 0 and one foreground value (MVTec AD's 255): read as 0/1 (a mask with two
            foreground values is refused when read: classes would merge).
        recipe: the readers (names and arguments) that made the table, read again by ``update``
            (None: a table given by hand, which ``update`` cannot read again).
        kinds: what the batches carry: ``"masks"`` (the table pairs masks, or ``binary``: every
            sample gets one, all background where it has no file) and/or ``"boxes"`` (the table has
            boxes: every sample gets a list, maybe empty).
        mask_etags: each mask object's ETag at indexing time (an object store), or None (a folder).
        mask_members: int64 offset of each mask's bytes in its sample's shard (-1: none), or None (loose
            files): the index was packed with its masks.
    """

    __slots__ = ("masks", "mask_sizes", "mask_mtimes", "box_offsets", "boxes", "box_labels", "num_classes",
                 "binary", "recipe", "kinds", "mask_etags", "mask_members")

    def __init__(self, masks: StringTable, mask_sizes, mask_mtimes, box_offsets, boxes, box_labels,
                 num_classes: int = 2, binary: bool = False, recipe: list | None = None,
                 kinds: tuple[str, ...] = ("masks", "boxes"), mask_etags: StringTable | None = None,
                 mask_members=None):
        n = len(masks)
        cols = {"mask_sizes": (mask_sizes, np.int64, (n,)), "mask_mtimes": (mask_mtimes, np.int64, (n,)),
                "box_offsets": (box_offsets, np.int64, (n + 1,)), "boxes": (boxes, np.float32, (-1, 4)),
                "box_labels": (box_labels, np.int64, (-1,))}
        if mask_members is not None:
            cols["mask_members"] = (mask_members, np.int64, (n,))
        for name, (a, dtype, shape) in cols.items():
            a = np.array(a, dtype=dtype, copy=True).reshape(shape)
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        if mask_members is None:
            object.__setattr__(self, "mask_members", None)
        if self.box_offsets[0] != 0 or self.box_offsets[-1] != len(self.boxes) or len(self.boxes) != len(self.box_labels) \
                or np.any(np.diff(self.box_offsets) < 0):
            raise ConfigError(f"IndexTargets: box offsets {self.box_offsets[:3]}... do not cover {len(self.boxes)} boxes "
                              f"and {len(self.box_labels)} labels")
        if mask_etags is not None and len(mask_etags) != n:
            raise ConfigError(f"IndexTargets: {len(mask_etags)} mask ETags for {n} samples")
        if not (isinstance(num_classes, (int, np.integer)) and 1 <= num_classes <= 256):
            raise ConfigError(f"num_classes={num_classes!r}; masks hold uint8 class ids, give 1..256 classes")
        object.__setattr__(self, "masks", masks)
        object.__setattr__(self, "mask_etags", mask_etags)
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
                              self.box_labels, self.num_classes, self.binary, self.recipe, self.kinds,
                              self.mask_etags, self.mask_members)

    def mask_path(self, i: int) -> str | None:
        """Sample ``i``'s mask path relative to the index root, or None (all background)."""
        rel = self.masks[i]
        return rel or None

    def boxes_of(self, i: int) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Sample ``i``'s boxes ``[N, 4]`` (XYXY pixels) and labels ``[N]``."""
        a, b = int(self.box_offsets[i]), int(self.box_offsets[i + 1])
        return self.boxes[a:b], self.box_labels[a:b]

    # ------------------------------------------------------------------ reading
    def mask_bytes(self, reader, i: int) -> tuple[bytes, str]:
        """``(bytes, where)`` of sample ``i``'s mask file as indexed, read as its image is: ``reader`` (the
        :class:`~dali_backend.core.reading.SampleReader` of the index) gives the store (its bucket, else the
        folder), the shards and the disk cache; ``where`` names the file, object or shard member.

        Raises:
            TargetError: the mask is missing, changed since indexing (its size, or an object's ETag), or
                a packed shard holds no mask member where the index says (all named, with the fix).
        """
        rel, size = self.masks[i], int(self.mask_sizes[i])
        if self.mask_members is not None:
            return self._packed_bytes(reader, i, rel, size)
        if reader.bucket is not None:
            etag = (self.mask_etags[i] if self.mask_etags is not None else "") or None
            store, rel = stores.resolve(reader.bucket, rel)  # ../masks/...: the store of the prefix above
            where, version = store.url(rel), etag or f"size:{size}"
        else:
            store, etag = LocalStore(reader.root), None
            where, version = os.path.normpath(os.path.join(reader.root, rel)), f"mtime:{int(self.mask_mtimes[i])}"
        data = None if reader.disk is None else reader.disk.get(where, version, size)
        if data is None:
            data = _served(where, lambda: store.get(rel, etag)[0])
            if len(data) != size:
                raise TargetError(f"{where}: the mask changed since indexing (size {size} -> {len(data)} bytes); "
                                  "update the index (dali-backend index --update) or rebuild it")
            if reader.disk is not None:
                reader.disk.put(where, version, bytes(data))
        return bytes(data), where

    def _packed_bytes(self, reader, i: int, rel: str, size: int) -> tuple[bytes, str]:
        """:meth:`mask_bytes` of a packed index: one range of the sample's shard, from the tar header before
        the member (its name and size checked: ``<key>.mask.png``) to the member's end."""
        shards, start = reader.shards, int(self.mask_members[i])
        if shards is None:
            raise ConfigError("IndexTargets: packed masks (mask_members) on an index without shards; load the packed "
                              "index (DIR/index.npz) as it was saved")
        sid = int(shards.ids[i])
        shard = shards.names[sid]
        where = f"{os.path.join(reader.root, shard)}:{rel}"
        version = f"shard:{shards.version(sid)}:{start}"
        data = None if reader.disk is None else reader.disk.get(where, version, size)
        if data is not None:
            return bytes(data), where
        head = start - tarfile.BLOCKSIZE
        if reader.bucket is not None:
            got = _served(where, lambda: reader.shard_range(sid, head, size + tarfile.BLOCKSIZE))
        else:
            got = _served(where, lambda: LocalStore(reader.root).get(shard, None, head, start + size)[0])
        name, held = _tar_member(got[:tarfile.BLOCKSIZE])
        if not name.endswith(MASK_MEMBER) or held != size or len(got) != size + tarfile.BLOCKSIZE:
            found = f"member {name!r} of {held} bytes" if name else "no tar member header"
            raise TargetError(f"{os.path.join(reader.root, shard)}: no mask member <key>{MASK_MEMBER} of {size} bytes at "
                              f"byte {start} for {rel!r} ({found}); the shard is not the one packed with this "
                              "index's masks: pack the index again (dali-backend pack)")
        data = got[tarfile.BLOCKSIZE:]
        if reader.disk is not None:
            reader.disk.put(where, version, bytes(data))
        return bytes(data), where

    def read_mask(self, reader, i: int, size: tuple[int, int]) -> NDArray[np.uint8]:
        """Sample ``i``'s mask, ``size`` (h, w) uint8 class ids: its file read through ``reader``
        (:meth:`mask_bytes`) and checked (values, size), or all background (0) without one."""
        if self.mask_path(i) is None:
            return np.zeros(size, np.uint8)
        data, where = reader.fetched_with(i, lambda: self.mask_bytes(reader, i))
        return self.decoded_mask(data, where, size)

    def mask_ahead(self, reader, i: int) -> tuple[bytes, str] | None:
        """:meth:`mask_bytes` where sample ``i`` has a mask file, else None: what the reader fetches ahead
        with the sample's image (``SampleReader.fetch_with``: on an object store a mask's request rides with
        its image's, so a batch waits for the network about once)."""
        return None if self.mask_path(i) is None else self.mask_bytes(reader, i)

    def decoded_mask(self, data: bytes, where: str, size: tuple[int, int]) -> NDArray[np.uint8]:
        """A mask file's bytes (named ``where``) decoded unchanged (binary: as 0/1) and checked against its
        image's ``size`` (h, w) and the declared classes.

        Raises:
            TargetError: bytes that do not decode, a mask of another size, values outside the classes, a
                binary mask with more than one foreground value.
        """
        import cv2

        mask = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        if mask is None:
            raise TargetError(f"{where}: the mask cannot be decoded (truncated or not an image); fix the file and "
                              "rebuild the index")
        if self.binary:  # 0/1 as a view of one comparison: 0.02 ms at 320 x 256, where > 0 then astype took 0.06
            top = int(mask.max()) if mask.size else 0
            fg = mask == top
            if top > 0 and np.count_nonzero(fg) != np.count_nonzero(mask):  # foreground values other than top
                values, counts = np.unique(mask[mask > 0], return_counts=True)
                shown = ", ".join(f"{int(v)} ({int(c)} pixels)" for v, c in zip(values[:5], counts[:5]))
                raise TargetError(f"{where}: a binary mask (0 and one foreground value, read as 0/1) holds the "
                                  f"foreground values {shown}{', ...' if len(values) > 5 else ''}; a multi-class mask "
                                  f"needs its classes declared (binary=False, num_classes={top + 1}; CLI --mask-classes "
                                  f"{top + 1}), else save it with one foreground value")
            mask = fg.view(np.uint8) if top > 0 else np.zeros(mask.shape, np.uint8)
        return readers.check_mask(mask, size, self.num_classes, where)

    def take(self, positions: NDArray[np.int64]) -> IndexTargets:
        """The targets of the samples at ``positions``, in that order."""
        pos = np.asarray(positions, np.int64).reshape(-1)
        counts = np.diff(self.box_offsets)[pos]
        rows = np.concatenate([np.arange(self.box_offsets[p], self.box_offsets[p + 1]) for p in pos]) if pos.size \
            else np.zeros(0, np.int64)
        rows = rows.astype(np.int64)
        return IndexTargets(self.masks.take(pos), self.mask_sizes[pos], self.mask_mtimes[pos],
                            np.concatenate([[0], np.cumsum(counts)]), self.boxes[rows], self.box_labels[rows],
                            self.num_classes, self.binary, self.recipe, self.kinds,
                            None if self.mask_etags is None else self.mask_etags.take(pos),
                            None if self.mask_members is None else self.mask_members[pos])

    # ------------------------------------------------------------------ persistence and checks
    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as the index file stores them (``target_`` prefixed; 1-D: boxes flattened; the
        optional ones only where they apply, so an index of before keeps its file and fingerprint)."""
        out = {f"target_{k}": v for k, v in zip(ARRAYS, (self.masks.data, self.masks.offsets, self.mask_sizes,
                                                         self.mask_mtimes, self.box_offsets,
                                                         self.boxes.reshape(-1), self.box_labels))}
        if self.mask_etags is not None:
            out.update(target_mask_etag_data=self.mask_etags.data, target_mask_etag_offsets=self.mask_etags.offsets)
        if self.mask_members is not None:
            out["target_mask_members"] = self.mask_members
        return out

    def meta(self) -> dict:
        return {"num_classes": self.num_classes, "binary": self.binary, "recipe": self.recipe, "kinds": list(self.kinds)}

    @classmethod
    def from_saved(cls, arrays: Mapping[str, np.ndarray], meta: Mapping) -> IndexTargets:
        a = {k: arrays[f"target_{k}"] for k in ARRAYS}
        etags = None
        if "target_mask_etag_offsets" in arrays:
            etags = StringTable(arrays["target_mask_etag_data"], arrays["target_mask_etag_offsets"])
        return cls(StringTable(a["mask_data"], a["mask_offsets"]), a["mask_sizes"], a["mask_mtimes"], a["box_offsets"],
                   a["boxes"], a["box_labels"], int(meta["num_classes"]), bool(meta["binary"]), meta.get("recipe"),
                   tuple(meta["kinds"]), etags, arrays.get("target_mask_members"))

    def digest(self, h) -> None:
        """Add the columns to the index's fingerprint ``h`` (hashlib)."""
        h.update(b"targets")
        h.update(repr((self.num_classes, self.binary, self.kinds)).encode())
        for a in self.arrays().values():
            h.update(np.ascontiguousarray(a).tobytes())

    def changed(self, store) -> list[tuple[str, str]]:
        """``(mask path, what changed)`` for mask files whose version differs from indexing time, or that are
        gone, asked of the index's ``store`` as its images are (a file's size and mtime, an object's size and
        ETag from one listing); none for packed masks (their shards are checked as the images')."""
        if self.mask_members is not None:
            return []
        by_store: dict[int, tuple] = {}  # masks beside the images' folder are asked of the store above its root
        for i in np.flatnonzero(self.mask_sizes >= 0).tolist():
            held, rel = stores.resolve(store, self.masks[i])
            _, rows, rels = by_store.setdefault(id(held), (held, [], []))
            rows.append(i)
            rels.append(rel)
        out = []
        for held, rows, rels in by_store.values():
            etags = None if self.mask_etags is None else [self.mask_etags[i] for i in rows]
            named = dict(zip(rels, (self.masks[i] for i in rows)))
            out += [(named[rel], what) for rel, what in held.changed(rels, self.mask_sizes[rows], self.mask_mtimes[rows],
                                                                      etags, range(len(rows)))]
        return out


def png_size(head: bytes, where: str) -> tuple[int, int]:
    """``(height, width)`` from the first :data:`PNG_HEAD` bytes of a PNG (its IHDR chunk)."""
    if len(head) < PNG_HEAD or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise TargetError(f"{where}: not a PNG file; masks are single-channel PNGs of class ids (save it as PNG: "
                          "JPEG would change the ids)")
    return int.from_bytes(head[20:24], "big"), int.from_bytes(head[16:20], "big")


def _served(where: str, fetch) -> bytes:
    """``fetch()``'s bytes; a mask gone, overwritten or unreadable is a TargetError naming ``where``."""
    try:
        return fetch()
    except ObjectChanged:
        raise TargetError(f"{where}: the mask changed since indexing (overwritten: its ETag differs); update the index "
                          "(dali-backend index --update) or rebuild it") from None
    except (OSError, StorageError) as e:  # ObjectMissing, and a store's errors after its retries
        text = str(e).split(": ", 1)[1] if ": " in str(e) else str(e)
        raise TargetError(f"{where}: the mask cannot be read ({text}); restore it, or update the index") from None


def _tar_member(header: bytes) -> tuple[str, int]:
    """``(name, size)`` of a USTAR member header (``("", -1)``: not one)."""
    if len(header) < tarfile.BLOCKSIZE or header[257:262] != b"ustar":
        return "", -1
    try:
        return header[:100].rstrip(b"\0").decode("utf-8", "replace"), int(header[124:136].strip(b"\0 ") or b"0", 8)
    except ValueError:
        return "", -1
