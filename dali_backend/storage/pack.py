"""``dali-backend pack``: an index's samples written into tar shards, with an index of (shard, offset, size).

Many small objects cost a request each, and listing and header checks per object; a shard of a few
hundred MB is one object, and a sample in it is one range read at a known offset (the packed index
records it). The shards follow WebDataset's layout: ``shard-000000.tar``, ... holding, per sample in
index order, ``<key>.<ext>`` (the file's bytes, unchanged; ``ext`` the first extension of the format its bytes name:
``jpg``, ``png``, ``tif``, ``bmp``, ``webp``) and ``<key>.cls`` (its class id as text), with
``key`` the sample's position in the source index (8 digits), so WebDataset and DALI's
``readers.webdataset`` read them as they are. The packed index keeps every sample's original relative
path, label, size, frame size, format and bit depth, so :meth:`SampleIndex.split`, ``on_error`` replacements and error
messages behave as before, and decoding a packed sample gives the same pixels as the loose file.

An index with targets travels whole: each sample's mask file follows its image in the same shard as
``<key>.mask.png`` (its bytes unchanged; the packed index records its offset, and a read checks the tar
header before it, so a shard without that member is a :class:`TargetError` naming it), and where the
index has boxes, ``<key>.json`` (``{"boxes": [[x1, y1, x2, y2], ...], "labels": [...]}``, XYXY pixels).
The boxes stay in the index's columns, which the loaders read (no member is parsed at run time); the
JSON member is there so that WebDataset tools and DALI's ``readers.webdataset(ext=["jpg", "json"])``
see them too, at a few dozen bytes per sample.

Every sample is read through the checked reader first: a file that changed since indexing is a
:class:`BadImageError` naming it, never packed. Each shard is written atomically (temporary file and
rename), then the index (``DIR/index.npz``) last: a pack interrupted leaves no index pointing at
missing shards. Each shard's mtime and MD5 are recorded, so a shard rewritten since (even at the same
size: small shards are all 10 KiB) is found (:meth:`~dali_backend.index.shards.Shards.changed`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..index import SampleIndex, write_atomic
from ..index.shards import Shards
from ..index.targets import MASK_MEMBER, IndexTargets
from ..core.reading import SampleReader
from ..formats.registry import sniff
from ..util.strings import StringTable

DEFAULT_SHARD_BYTES = 256 << 20
INDEX_NAME = "index.npz"


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0  # no time stamps: the same input packs to the same bytes
    return info


def _add_targets(tar: tarfile.TarFile, key: str, targets: IndexTargets, reader: SampleReader, i: int,
                 size: tuple[int, int]) -> int:
    """Sample ``i``'s targets as members after its image: its mask file's bytes as ``<key>.mask.png`` (read
    and checked as at run time) and, where the index has boxes, ``<key>.json``; the mask's offset (-1: none)."""
    at = -1
    if targets.mask_path(i) is not None:
        data, where = targets.mask_bytes(reader, i)
        targets.decoded_mask(data, where, size)  # a bad mask is refused here, never packed
        tar.addfile(_member(key + MASK_MEMBER, len(data)), io.BytesIO(data))
        at = tar.offset - -(-len(data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    if "boxes" in targets.kinds:
        xyxy, labels = targets.boxes_of(i)
        note = json.dumps({"boxes": xyxy.tolist(), "labels": labels.tolist()}).encode()
        tar.addfile(_member(f"{key}.json", len(note)), io.BytesIO(note))
    return at


def packed_targets(targets: IndexTargets, members: np.ndarray) -> IndexTargets:
    """The targets of a packed index: the same columns, each mask found at ``members`` in its sample's shard."""
    return IndexTargets(StringTable(targets.masks.data, targets.masks.offsets), targets.mask_sizes, targets.mask_mtimes,
                        targets.box_offsets, targets.boxes, targets.box_labels, targets.num_classes, targets.binary,
                        None, targets.kinds, None, members)


def pack(index: SampleIndex, out: str | os.PathLike, shard_bytes: int = DEFAULT_SHARD_BYTES) -> SampleIndex:
    """Write ``index``'s samples into tar shards under the folder ``out`` and save the packed index as
    ``out/index.npz``; returns it (its root is ``out``; upload the folder and load the index with
    ``root="s3://..."`` to read the shards from a bucket).

    Args:
        index: the samples (a folder, a bucket or a packed index).
        out: folder to write (created; existing shards of the same names are replaced).
        shard_bytes: a shard is closed once it holds at least this many bytes of samples.

    Raises:
        BadImageError: a sample cannot be read or fails the run-time checks (named).
        ConfigError: ``shard_bytes`` is not positive.
        TargetError: a mask is missing, changed since indexing or fails its checks (named).
        OutputFileError: a shard or the index cannot be written.
    """
    if isinstance(shard_bytes, bool) or not isinstance(shard_bytes, int) or shard_bytes <= 0:
        raise ConfigError(f"shard_bytes={shard_bytes!r}; must be a positive number of bytes (default "
                          f"{DEFAULT_SHARD_BYTES})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    reader = SampleReader.for_index(index, seed=0)
    n = len(index)
    ids = np.zeros(n, np.int64)
    offsets = np.zeros(n, np.int64)
    names: list[str] = []
    sizes: list[int] = []
    mtimes: list[int] = []
    digests: list[str] = []
    targets = index.annotations
    members = np.full(n, -1, np.int64)  # each packed mask's offset in its sample's shard
    start = 0
    while start < n:
        sid = len(names)
        name = f"shard-{sid:06d}.tar"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            held, i = 0, start
            while i < n and (held < shard_bytes or i == start):
                data = bytes(reader.read(i))
                key = f"{i:08d}"
                info = _member(key + sniff(data[:16]).extensions[0], len(data))  # read checked: a format claims it
                tar.addfile(info, io.BytesIO(data))  # header, then the data padded to 512-byte blocks
                ids[i], offsets[i] = sid, tar.offset - -(-len(data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
                label = str(int(index.labels[i])).encode()
                tar.addfile(_member(f"{key}.cls", len(label)), io.BytesIO(label))
                if targets is not None:
                    members[i] = _add_targets(tar, key, targets, reader, i, (int(index.heights[i]), int(index.widths[i])))
                held += len(data)
                i += 1
        blob = buf.getvalue()
        write_atomic(out / name, lambda f, b=blob: f.write(b), "shard")
        names.append(name)
        sizes.append(len(blob))
        mtimes.append(os.stat(out / name).st_mtime_ns)  # with the MD5: how a shard changed since is found
        digests.append(hashlib.md5(blob, usedforsecurity=False).hexdigest())
        start = i
    packed = SampleIndex(out, StringTable(index.paths.data, index.paths.offsets), index.labels, index.classes,
                         index.sizes, index.mtimes, index.widths, index.heights, index.rejected, index.ignored,
                         index.ignored_files, shards=Shards(tuple(names), tuple(sizes), ids, offsets, tuple(mtimes),
                                                               tuple(digests)),
                         format_ids=index.format_ids, format_names=index.format_names, bit_depths=index.bit_depths,
                         annotations=None if targets is None else packed_targets(targets, members))
    packed.save(out / INDEX_NAME)
    return packed
