"""The builders' work as free functions: a data root, keyword rules or a manifest -> candidate files
(:class:`~.walk._Candidates`), and the candidates -> the checked files (sizes, mtimes, frame sizes) and
the refused ones. :class:`~.core.SampleIndex`'s class methods are these plus the index's construction."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError, IndexBuildError, ManifestError
from ..jpeg import DEFAULT_MAX_PIXELS, check_jpeg, not_regular_reason
from ..labelling import KeywordRules
from .manifest import _path_as_written, _read_manifest
from .parallel import map_in_chunks
from .options import JPEG_EXTENSIONS, Verify, _capped, _opt
from .report import _nothing_indexed, _reject_same_file_twice
from .verify import _decode_check
from .walk import (Rejected, _Candidates, _count, _follow_symlinks_hint, _is_inside, _norm_rel, _refuse_split_layout,
                   _subdirs, _walk_jpegs, class_folders, keyword_labelled, manifest_classes)

Built = tuple[Path, _Candidates, Sequence[str]]  # (root, candidate files with labels, class names in id order)


def folder_candidates(root: str | os.PathLike, split: str | None, classes: Sequence[str] | None,
                      allow_outside_symlinks: bool) -> Built:
    """``root/<class>/**`` (or ``root/<split>/<class>/**``): see :meth:`SampleIndex.from_folder`."""
    root_path = Path(root)
    if not root_path.is_dir():
        raise IndexBuildError(f"data root {str(root)!r} is not a folder; pass the folder holding one sub-folder per class")
    root_real = os.path.realpath(root_path)
    base = root_path
    if split is not None:
        split_dirs = _subdirs(str(root_path))
        if split not in split_dirs:
            raise IndexBuildError(f"split {split!r} not found under {str(root)!r} (found: {split_dirs or 'no folders'})")
        found = sorted(set().union(*(_subdirs(str(root_path / s)) for s in split_dirs)))
        base = root_path / split
    else:
        found = _subdirs(str(root_path))
        if classes is None:
            _refuse_split_layout(root_path, found)
    classes = class_folders(found, classes, root, str(base))
    cand = _Candidates([], [], [], Counter())
    visited = {root_real}
    for entry in sorted(os.scandir(base), key=lambda e: e.name):
        if not entry.is_dir():
            rel = _norm_rel(os.path.relpath(entry.path, root_path))
            if entry.name.lower().endswith(JPEG_EXTENSIONS) and not entry.name.startswith("."):
                cand.rejected.append(Rejected(rel, "not inside a class folder; move it into <root>/<class>/"))
            else:
                cand.ignore(entry.name, rel)
    for label, name in enumerate(classes):
        folder = base / name
        if not folder.is_dir():
            continue
        real = os.path.realpath(folder)
        if not allow_outside_symlinks and not _is_inside(real, root_real):
            cand.rejected.append(Rejected(_norm_rel(os.path.relpath(folder, root_path)),
                                          f"class folder is a symlink leaving the data root (-> {real}); "
                                          f"{_follow_symlinks_hint(root_path)}"))
            continue
        visited.add(real)
        _walk_jpegs(str(folder), str(root_path), root_real, allow_outside_symlinks, cand, label, visited)
    return root_path, cand, classes


def keyword_candidates(root: str | os.PathLike, rules: Mapping[str, Sequence[str]] | KeywordRules,
                       allow_outside_symlinks: bool) -> Built:
    """Every JPEG below ``root``, labelled by keywords: see :meth:`SampleIndex.from_keywords`."""
    kw = rules if isinstance(rules, KeywordRules) else KeywordRules(rules)
    root_path = Path(root)
    if not root_path.is_dir():
        raise IndexBuildError(f"data root {str(root)!r} is not a folder")
    root_real = os.path.realpath(root_path)
    found = _Candidates([], [], [], Counter())
    _walk_jpegs(str(root_path), str(root_path), root_real, allow_outside_symlinks, found, 0, {root_real})
    cand = keyword_labelled(found, kw)
    return root_path, cand, kw.classes


def manifest_candidates(path: str | os.PathLike, root: str | os.PathLike | None, split: str | None,
                        classes: Sequence[str] | None, path_column: str | None, label_column: str | None,
                        split_column: str | None, encoding: str | None) -> Built:
    """The files a manifest lists: see :meth:`SampleIndex.from_manifest`."""
    mpath = Path(path)
    root_path = Path(root) if root is not None else mpath.parent
    if not root_path.is_dir():
        raise ManifestError(f"manifest root {str(root_path)!r} is not a folder; pass {_opt('root')} the folder the "
                            "paths are relative to")
    rows = _read_manifest(mpath, split, root_path, path_column, label_column, split_column, encoding)
    root_real = os.path.realpath(root_path)
    outside = []
    cand = _Candidates([], [], [], Counter())
    seen: dict[str, tuple[str, str]] = {}
    entries = []
    normalised: dict[str, str] = {}  # rel as written -> rel_norm: a repeated line costs no realpath()
    root_abs = os.path.abspath(root_path)
    for where, written, label in rows:
        rel_norm = normalised.get(written)
        if rel_norm is None:
            rel = _path_as_written(root_path, written)
            full = rel if os.path.isabs(rel) else os.path.join(root_path, rel)
            real = os.path.realpath(full)
            if not _is_inside(real, root_real):
                outside.append(f"{where}: {rel!r} -> {real}")
                continue
            rel_norm = normalised[written] = _norm_rel(os.path.relpath(os.path.abspath(full), root_abs))
        if rel_norm in seen:
            first_where, first_label = seen[rel_norm]
            what = "conflicting label " + repr(label) + " vs " + repr(first_label) if label != first_label else "duplicate"
            cand.rejected.append(Rejected(rel_norm, f"{what}: listed again at {where} (first at {first_where})"))
            continue
        seen[rel_norm] = (where, label)
        entries.append((rel_norm, label))
    if outside:
        shown = _capped(outside)
        raise ManifestError(f"{mpath}: {_count(len(outside), 'entry resolves', 'entries resolve')} outside the root "
                            f"{root_real!r} ({shown}). "
                            f"Remove {'it' if len(outside) == 1 else 'them'} or pass {_opt('root')} a folder that "
                            f"contains {'it' if len(outside) == 1 else 'them'}")
    classes = manifest_classes(mpath, entries, classes, cand)
    if not classes:
        raise ManifestError(f"{mpath}: no entries" + (f" for split {split!r}" if split else ""))
    return root_path, cand, classes


def check_candidates(root: Path, cand: _Candidates, classes: Sequence[str], verify: Verify, max_pixels: int,
                     workers: int, progress: bool | None) -> tuple[list[int], NDArray[np.int64], list[Rejected]]:
    """Check every candidate (stat, then its JPEG headers, then a decode for ``verify="decode"``), in
    ``workers`` threads: ``(positions kept, [kept, 4] sizes/mtimes/widths/heights, every refused file)``.

    Raises:
        IndexBuildError: nothing is left (the message says what was found instead).
    """
    if verify not in ("header", "decode", "none"):
        raise ConfigError(f"verify={verify!r}; use 'header' (default), 'decode' or 'none'")
    if max_pixels <= 0:
        raise ConfigError(f"max_pixels={max_pixels}; must be a positive pixel count (default {DEFAULT_MAX_PIXELS})")
    root_s = str(root)
    n = len(cand.paths)
    decode = verify == "decode"

    def check(rel: str) -> tuple[str | None, int, int, int, int, tuple]:
        full = os.path.join(root_s, rel)
        try:
            st = os.stat(full)  # follows symlinks; opens nothing
        except FileNotFoundError:
            return "missing file", 0, 0, 0, 0, ()
        except OSError as e:
            return f"unreadable ({type(e).__name__}: {e.strerror or e})", 0, 0, 0, 0, ()
        size, mtime = st.st_size, st.st_mtime_ns
        identity = (st.st_dev, st.st_ino) if st.st_ino else (os.path.realpath(full),)
        reason = not_regular_reason(st.st_mode)  # a FIFO would block the first open() forever
        if reason or verify == "none":
            return reason, size, mtime, 0, 0, identity
        res = check_jpeg(full, max_pixels)
        if res.reason is None and decode:
            reason = _decode_check(full)
            if reason:
                return reason, size, mtime, res.width, res.height, identity
        return res.reason, size, mtime, res.width, res.height, identity

    results = map_in_chunks(lambda i: check(cand.paths[i]), n, workers, progress, "indexing")  # few futures alive
    reasons = [r[0] for r in results]
    _reject_same_file_twice(cand, classes, reasons, [r[5] for r in results])
    keep = [i for i, r in enumerate(reasons) if r is None]
    rejected = list(cand.rejected) + [Rejected(cand.paths[i], r) for i, r in enumerate(reasons) if r is not None]
    rejected.sort(key=lambda r: r.path)
    if not keep:
        raise IndexBuildError(_nothing_indexed(root, cand, rejected))
    cols = np.array([r[1:5] for r in results], dtype=np.int64).reshape(-1, 4)[keep]
    return keep, cols, rejected
