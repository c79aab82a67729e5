"""Saving and loading an index file (and any output file): atomic writes, refused special files, declared sizes checked before inflating."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import zipfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from numpy.typing import NDArray

from ..errors import IndexFileError, OutputFileError
from ..formats.jpeg import file_kind, open_regular

from .options import capped





def check_output_path(path: str | os.PathLike, what: str = "output file") -> str:
    """The path to write for ``path``: ``path`` itself, or the file a symlink at ``path`` names.

    Only a regular file is ever replaced: an existing folder, FIFO, socket or device (``/dev/null``)
    at ``path`` (or behind a symlink there) is refused without being opened.

    Raises:
        OutputFileError: ``path`` exists and is not a regular file (the message says what it is).
    """
    target = os.path.realpath(path) if os.path.islink(path) else os.fspath(path)
    try:
        mode = os.stat(target).st_mode
    except OSError:  # absent (it will be created) or unreachable (opening it will say why)
        return target
    kind = file_kind(mode)
    if kind != "regular":
        via = f" (a symlink to {target!r})" if target != os.fspath(path) else ""
        raise OutputFileError(f"{what} {os.fspath(path)!r}{via} is a {kind}, not a regular file; refusing to write or "
                              "replace it. Pass the path of a file to create or overwrite")
    return target


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], None], what: str = "output file") -> None:
    """Create or replace the file ``path`` with what ``write(f)`` writes into a binary file ``f``.

    ``write`` fills a new temporary file next to the target (created exclusively: never an existing
    file, FIFO or link), which is flushed to disk and renamed over the target, so readers see the old
    file or the new one. Whatever fails, the temporary file is removed and ``path`` is unchanged.

    Raises:
        OutputFileError: ``path`` is not a regular file (:func:`check_output_path`), or writing
            failed (disk full, permissions, missing folder); the message names ``path`` and ``what``.
    """
    target = check_output_path(path, what)
    tmp = None
    try:
        fd, tmp = _create_temp(target)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # a disk-full error surfaces here at the latest, before the rename
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise OutputFileError(f"{what} {os.fspath(path)!r}: could not write it ({e.strerror or e}); nothing was "
                              f"changed there. {_write_fix(e)}") from e
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _create_temp(target: str) -> tuple[int, str]:
    """A new file next to ``target``, opened for writing: ``(descriptor, path)``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(8):
        tmp = f"{target}.tmp{os.getpid()}-{secrets.token_hex(4)}"
        with contextlib.suppress(FileExistsError):
            return os.open(tmp, flags, 0o666), tmp  # 0o666 & ~umask, as open(path, "wb") would give
    raise FileExistsError(errno.EEXIST, "could not create a temporary file next to it", target)


def _write_fix(e: OSError) -> str:
    """What to do about a failed write, by its errno."""
    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "Free disk space (or quota), or write to another disk"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "Choose a folder you can write to"
    if e.errno == errno.ENOENT:
        return "Create the folder first, or choose another path"
    return "Check the path, free space and permissions, or choose another path"


# Arrays of a saved index and the integer kind each must have.
_INDEX_ARRAYS = {"path_data": np.uint8, "path_offsets": np.int64, "labels": np.int64, "sizes": np.int64,
                 "mtimes": np.int64, "widths": np.int32, "heights": np.int32, "meta": np.uint8}


def damaged(path: str | os.PathLike, what: str) -> IndexFileError:
    return IndexFileError(f"{os.fspath(path)}: not a readable index file ({what}); rebuild it with "
                          "SampleIndex.from_folder(...).save(...) (CLI: dali-backend index ROOT --out FILE)")


# Arrays an index file may hold or not: each object's ETag (a URL root), a string table like the paths;
# shard places; each sample's format code and bit depth (.kinds); targets (masks and boxes, .targets,
# checked against each other when read). Files written before they existed load without them.
_OPTIONAL_ARRAYS = {"etag_data": np.uint8, "etag_offsets": np.int64, "shard_ids": np.int64, "shard_offsets": np.int64,
                    "format_ids": np.uint8, "bit_depths": np.uint8,
                    "target_mask_data": np.uint8, "target_mask_offsets": np.int64, "target_mask_sizes": np.int64,
                    "target_mask_mtimes": np.int64, "target_box_offsets": np.int64, "target_boxes": np.float32,
                    "target_box_labels": np.int64, "target_mask_etag_data": np.uint8,
                    "target_mask_etag_offsets": np.int64, "target_mask_members": np.int64}


# Inflated, a saved index's arrays together may hold at most this many times the file's size (save()
# stores them uncompressed; np.savez_compressed of a real index inflates ~3-6x, deflate at most ~1000x),
# or MIN_INDEX_ALLOWANCE bytes for a small file.
MAX_INDEX_EXPANSION = 64
MIN_INDEX_ALLOWANCE = 16 << 20
# Arrays with one entry per sample (path_offsets has one more).
_PER_SAMPLE = ("labels", "sizes", "mtimes", "widths", "heights")


@dataclass(frozen=True)
class _Declared:
    """What a member's ``.npy`` header declares: entries, dtype, and where the data starts."""

    count: int
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def read_index_arrays(path: str | os.PathLike) -> dict[str, NDArray]:
    """The arrays of a saved index, each checked against the file before anything is allocated.

    ``np.load`` trusts the shape in each member's ``.npy`` header and allocates it first, so a
    damaged header declaring 1e12 entries asks for terabytes, and a small file of deflated zeros can
    inflate a thousandfold. Here every header is read first (a few hundred bytes each) and checked
    before any array is inflated (:func:`_check_declared`).
    """
    try:
        file_size = os.stat(path).st_size
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            members = {info.filename: info for info in zf.infolist()}
            declared = {name: _read_header(path, zf, members, name, dtype) for name, dtype in _INDEX_ARRAYS.items()}
            declared.update({name: _read_header(path, zf, members, name, dtype) for name, dtype in
                             _OPTIONAL_ARRAYS.items() if f"{name}.npy" in members})
            _check_declared(path, declared, file_size)
            kinds = {**_INDEX_ARRAYS, **_OPTIONAL_ARRAYS}
            return {name: _read_array(path, zf, members[f"{name}.npy"], d).astype(kinds[name])
                    for name, d in declared.items()}
    except IndexFileError:
        raise
    except FileNotFoundError:
        raise IndexFileError(f"{os.fspath(path)}: no such index file; build one with "
                             "SampleIndex.from_folder(...).save(path) (CLI: dali-backend index ROOT --out FILE)") from None
    except (OSError, EOFError, ValueError, KeyError, NotImplementedError, RuntimeError, zipfile.BadZipFile,
            zlib.error) as e:  # NotRegularFileError is an OSError
        raise damaged(path, f"{type(e).__name__}: {e}") from None


def _read_header(path: str | os.PathLike, zf: zipfile.ZipFile, members: Mapping[str, zipfile.ZipInfo], name: str,
                 dtype: type) -> _Declared:
    """The ``.npy`` header of array ``name``: a 1-D array of ``dtype``'s kind and width, filling its member."""
    info = members.get(f"{name}.npy")
    if info is None:
        raise damaged(path, f"no {name!r} array; not a SampleIndex file (members: {capped(sorted(members), sep=', ')})")
    with zf.open(info) as m:
        version = np.lib.format.read_magic(m)
        if version == (1, 0):
            shape, _, dt = np.lib.format.read_array_header_1_0(m)
        elif version == (2, 0):
            shape, _, dt = np.lib.format.read_array_header_2_0(m)
        else:
            raise damaged(path, f"array {name!r} has .npy format version {version}")
        offset = m.tell()
    kinds = "f" if np.dtype(dtype).kind == "f" else "iu"  # box coordinates are the one float array
    if len(shape) != 1 or shape[0] < 0 or dt.kind not in kinds or dt.itemsize != np.dtype(dtype).itemsize:
        raise damaged(path, f"array {name!r} is {dt} of shape {shape}; expected a 1-D {np.dtype(dtype)} array")
    declared = _Declared(int(shape[0]), dt, offset)
    held = info.file_size - offset
    if declared.nbytes != held:
        raise damaged(path, f"array {name!r} declares {declared.count} entries ({declared.nbytes} bytes) but its "
                             f"member holds {held} bytes")
    return declared


def _check_declared(path: str | os.PathLike, declared: Mapping[str, _Declared], file_size: int) -> None:
    """Raise IndexFileError unless the declared lengths agree and their total is plausible for the file."""
    n = declared["labels"].count
    for name in _PER_SAMPLE + ("shard_ids", "shard_offsets", "format_ids", "bit_depths"):
        if name in declared and declared[name].count != n:
            raise damaged(path, f"array {name!r} declares {declared[name].count} entries for {n} labels")
    for name in ("path_offsets", "etag_offsets"):
        if name in declared and declared[name].count != n + 1:
            raise damaged(path, f"array {name!r} declares {declared[name].count} entries for {n} labels "
                                 f"(expected {n + 1})")
    if ("etag_data" in declared) != ("etag_offsets" in declared):
        raise damaged(path, "it holds one of the arrays 'etag_data' and 'etag_offsets' without the other")
    total = sum(d.nbytes for d in declared.values())
    allowed = max(file_size * MAX_INDEX_EXPANSION, MIN_INDEX_ALLOWANCE)
    if total > allowed:
        raise damaged(path, f"its arrays declare {total} bytes ({n} samples) in a {file_size}-byte file, more than "
                             f"{MAX_INDEX_EXPANSION}x its size; refused before inflating")


def _read_array(path: str | os.PathLike, zf: zipfile.ZipFile, info: zipfile.ZipInfo, declared: _Declared) -> NDArray:
    """The data of a member whose header :func:`_read_header` checked."""
    with zf.open(info) as m:
        m.read(declared.offset)
        raw = m.read(declared.nbytes)
    if len(raw) != declared.nbytes:
        raise damaged(path, f"array {info.filename!r} is cut short ({len(raw)} of {declared.nbytes} bytes)")
    return np.frombuffer(raw, dtype=declared.dtype)


def check_meta(path: str | os.PathLike, meta: dict) -> None:
    """Raise IndexFileError unless ``meta`` has the fields and types :meth:`SampleIndex.save` writes."""
    def bad(field_name: str, want: str) -> IndexFileError:
        return damaged(path, f"metadata field {field_name!r} is {type(meta.get(field_name)).__name__} "
                              f"{str(meta.get(field_name))[:40]!r}; expected {want}")

    for name in ("root", "fingerprint"):
        if not isinstance(meta.get(name), str):
            raise bad(name, "a string")
    classes = meta.get("classes")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        raise bad("classes", "a list of class names")
    for name in ("rejected", "ignored_files"):
        pairs = meta.get(name, [])
        if not isinstance(pairs, list) or not all(
                isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r) for r in pairs):
            raise bad(name, "a list of [path, reason] pairs")
    if "rejected" not in meta:
        raise bad("rejected", "a list of [path, reason] pairs")
    ignored = meta.get("ignored")
    if not isinstance(ignored, dict) or not all(type(v) is int for v in ignored.values()):
        raise bad("ignored", "an object of counts")


