"""Index files: what :meth:`SampleIndex.save` writes and :meth:`SampleIndex.load` reads and checks (a
``.npz`` of plain arrays and ASCII JSON metadata; no pickle). The file-level safety (atomic writes,
refusing special files, damaged archives) is in :mod:`.store`."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping

import numpy as np

from ..errors import ConfigError, IndexFileError, StaleIndexError
from ..util.strings import StringTable
from .options import FORMAT_NAME, FORMAT_VERSION, capped
from .shards import check_meta_shards, shards_from_arrays
from .store import check_meta, damaged, read_index_arrays, write_atomic
from .targets import ARRAYS, IndexTargets
from .walk import Rejected


def targets_from_saved(path, arrays, meta: dict, n: int) -> IndexTargets | None:
    """The saved targets of an index file of ``n`` samples, or None; a damaged part is an IndexFileError."""
    names = [f"target_{k}" for k in ARRAYS]
    if ("targets" in meta) != (names[0] in arrays) or any((k in arrays) != (names[0] in arrays) for k in names):
        raise damaged(path, "its target arrays and target metadata do not come together")
    if "targets" not in meta:
        return None
    try:
        targets = IndexTargets.from_saved(arrays, meta["targets"])
    except (KeyError, TypeError, ValueError) as e:
        raise damaged(path, f"its targets are inconsistent ({e})") from None
    if len(targets) != n:
        raise damaged(path, f"targets for {len(targets)} samples, the index has {n}")
    return targets


def save_index(index, path: str | os.PathLike) -> None:
    """Write ``index`` to ``path`` atomically; see :meth:`SampleIndex.save`."""
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "root": index.root, "classes": list(index.classes),
            "rejected": [[r.path, r.reason] for r in index.rejected], "ignored": index.ignored,
            "ignored_files": [[r.path, r.reason] for r in index.ignored_files], "fingerprint": index.fingerprint,
            "format_names": list(index.format_names)}  # the names of the codes in format_ids (older readers ignore both)
    if index.source is not None:  # optional: older readers ignore it
        meta["source"] = index.source
    arrays = {"path_data": index.paths.data, "path_offsets": index.paths.offsets, "labels": index.labels,
              "sizes": index.sizes, "mtimes": index.mtimes, "widths": index.widths, "heights": index.heights,
              "format_ids": index.format_ids, "bit_depths": index.bit_depths,
              "meta": np.frombuffer(json.dumps(meta).encode("ascii"), dtype=np.uint8)}
    if index.etags is not None:  # storage_options are never saved: credentials stay out of index files
        arrays.update(etag_data=index.etags.data, etag_offsets=index.etags.offsets)
    if index.annotations is not None:  # optional: an index without targets keeps its format
        arrays.update(index.annotations.arrays())
        meta["targets"] = index.annotations.meta()
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode("ascii"), dtype=np.uint8)
    if index.shards is not None:
        arrays.update(shard_ids=index.shards.ids, shard_offsets=index.shards.offsets)
        meta["shards"] = index.shards.meta()
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode("ascii"), dtype=np.uint8)
    write_atomic(path, lambda f: np.savez(f, **arrays), what="index file")


def load_index(cls, path: str | os.PathLike, root, check: str, storage_options: Mapping | None):
    """Read, verify and (``check="stat"``) compare with the files an index written by :func:`save_index`;
    ``cls``: :class:`SampleIndex`. See :meth:`SampleIndex.load`."""
    if check not in ("stat", "none"):
        raise ConfigError(f"check={check!r}; use 'stat' (default) or 'none'")
    arrays = read_index_arrays(path)
    try:
        meta = json.loads(arrays["meta"].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise damaged(path, f"its metadata is not JSON ({type(e).__name__})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME or meta.get("version") != FORMAT_VERSION:
        got = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else (None, None)
        raise IndexFileError(f"{path}: format {got[0]!r} version {got[1]!r}; "
                             f"this library reads {FORMAT_NAME!r} version {FORMAT_VERSION}. Rebuild the index")
    check_meta(path, meta)
    n = arrays["labels"].size  # every per-sample array has n entries (checked before reading)
    offsets, data = arrays["path_offsets"], arrays["path_data"]
    if offsets.size != n + 1 or offsets[0] != 0 or offsets[-1] != data.size or np.any(np.diff(offsets) < 0):
        raise damaged(path, f"path offsets are inconsistent ({offsets.size} offsets for {n} samples and "
                             f"{data.size} bytes of path data)")
    try:
        etags = None
        if "etag_offsets" in arrays:
            e_off, e_data = arrays["etag_offsets"], arrays["etag_data"]
            if e_off[0] != 0 or e_off[-1] != e_data.size or np.any(np.diff(e_off) < 0):
                raise damaged(path, f"ETag offsets are inconsistent ({e_off.size} offsets for {n} samples and "
                                     f"{e_data.size} bytes of ETags)")
            etags = StringTable(e_data, e_off)
        shards = None
        if ("shard_ids" in arrays) != ("shards" in meta) or ("shard_ids" in arrays) != ("shard_offsets" in arrays):
            raise damaged(path, "its shard arrays and shard list do not come together")
        if "shards" in meta:
            if not check_meta_shards(meta["shards"]):
                raise damaged(path, "metadata field 'shards' is not a list of [name, size(, mtime, md5)] rows")
            shards = shards_from_arrays(meta["shards"], arrays["shard_ids"], arrays["shard_offsets"])
        annotations = targets_from_saved(path, arrays, meta, n)
        index = cls(root if root is not None else meta["root"], StringTable(data, offsets), arrays["labels"],
                    meta["classes"], arrays["sizes"], arrays["mtimes"], arrays["widths"], arrays["heights"],
                    [Rejected(p, r) for p, r in meta["rejected"]], meta["ignored"],
                    [Rejected(p, r) for p, r in meta.get("ignored_files", [])], etags, storage_options, shards,
                    meta.get("source"), **_kinds(path, arrays, meta), annotations=annotations)
    except ValueError as e:  # ConfigError: labels out of range, duplicate class names
        raise damaged(path, str(e)) from None
    if index.fingerprint != meta["fingerprint"]:
        raise IndexFileError(f"{path}: contents do not match the saved fingerprint (file edited or corrupt); rebuild it")
    if check == "stat":
        changed = index.changed_files()
        if changed:
            shown = capped([f"{p}: {w}" for p, w in changed])
            text = f"{path}: {len(changed)} of {len(index)} files changed since indexing ({shown}). "
            missing = sum(w == "missing" for _, w in changed)
            if missing * 2 > len(index) or not index.store.exists():
                text += (f"{missing} of {len(index)} files are missing under {index.root!r}: if the data moved, "
                         "pass root='NEW/LOCATION' to SampleIndex.load (CLI: --root NEW/LOCATION). Otherwise ")
            fix = "rebuild the index, or pass check='none' to SampleIndex.load (CLI: --no-check) to use it anyway"
            raise StaleIndexError(text + (fix if text.endswith("Otherwise ") else fix[0].upper() + fix[1:]))
    return index


def _kinds(path, arrays: Mapping, meta: dict) -> dict:
    """The format and bit-depth fields of a loaded index: none in a file saved before they were recorded, which
    then loads as JPEG at 8 bits (:data:`.kinds.BEFORE`: only JPEG files were indexed then)."""
    held = [name in arrays for name in ("format_ids", "bit_depths")] + ["format_names" in meta]
    if not any(held):
        return {}
    names = meta.get("format_names")
    if not all(held) or not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        raise damaged(path, "its arrays 'format_ids' and 'bit_depths' and metadata field 'format_names' (a list of "
                            "names) do not come together")
    return {"format_ids": arrays["format_ids"], "format_names": names, "bit_depths": arrays["bit_depths"]}


def fingerprint_of(index) -> str:
    """SHA-256 over classes, paths, labels, sizes and mtimes (and ETags and shard places when recorded)."""
    h = hashlib.sha256()
    h.update(json.dumps(list(index.classes)).encode())
    for a in (index.paths.offsets, index.paths.data, index.labels, index.sizes, index.mtimes):
        h.update(np.ascontiguousarray(a).tobytes())
    if index.etags is not None:  # indexes without ETags keep the fingerprint they always had
        h.update(b"etags")
        for a in (index.etags.offsets, index.etags.data):
            h.update(np.ascontiguousarray(a).tobytes())
    if index.annotations is not None:  # indexes without targets keep the fingerprint they always had
        index.annotations.digest(h)
    if index.shards is not None:
        h.update(json.dumps(index.shards.meta()).encode())
        for a in (index.shards.ids, index.shards.offsets):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
