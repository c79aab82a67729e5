"""The builders' work as free functions: a data root, keyword rules or a manifest -> candidate files
(:class:`~.walk.Candidates`), and the candidates -> the checked files (sizes, mtimes, frame sizes) and
the refused ones. :class:`~.core.SampleIndex`'s class methods are these plus the index's construction."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError, IndexBuildError, ManifestError
from ..formats import registry
from ..formats.jpeg import DEFAULT_MAX_PIXELS, not_regular_reason
from ..core.labelling import KeywordRules
from .kinds import Kinds
from .manifest import path_as_written, read_manifest
from .parallel import map_in_chunks
from .options import Verify, capped, option_phrase
from .report import nothing_indexed, reject_duplicate_files, shared_identities
from .verify import decode_check
from .walk import (Rejected, Candidates, count_text, follow_symlinks_hint, is_inside, norm_rel, refuse_split_layout,
                   subfolders, walk_images, class_folders, keyword_labelled, manifest_classes)

Built = tuple[Path, Candidates, Sequence[str]]  # (root, candidate files with labels, class names in id order)


def folder_candidates(root: str | os.PathLike, split: str | None, classes: Sequence[str] | None,
                      allow_outside_symlinks: bool) -> Built:
    """``root/<class>/**`` (or ``root/<split>/<class>/**``): see :meth:`SampleIndex.from_folder`."""
    root_path = Path(root)
    if not root_path.is_dir():
        raise IndexBuildError(f"data root {str(root)!r} is not a folder; pass the folder holding one sub-folder per class")
    root_real = os.path.realpath(root_path)
    base = root_path
    if split is not None:
        split_dirs = subfolders(str(root_path))
        if split not in split_dirs:
            raise IndexBuildError(f"split {split!r} not found under {str(root)!r} (found: {split_dirs or 'no folders'})")
        found = sorted(set().union(*(subfolders(str(root_path / s)) for s in split_dirs)))
        base = root_path / split
    else:
        found = subfolders(str(root_path))
        if classes is None:
            refuse_split_layout(root_path, found)
    classes = class_folders(found, classes, root, str(base))
    cand = Candidates([], [], [], Counter())
    visited = {root_real}
    for entry in sorted(os.scandir(base), key=lambda e: e.name):
        if not entry.is_dir():
            rel = norm_rel(os.path.relpath(entry.path, root_path))
            if registry.is_image_name(entry.name) and not entry.name.startswith("."):
                cand.rejected.append(Rejected(rel, "not inside a class folder; move it into <root>/<class>/"))
            else:
                cand.ignore(entry.name, rel)
    for label, name in enumerate(classes):
        folder = base / name
        if not folder.is_dir():
            continue
        real = os.path.realpath(folder)
        if not allow_outside_symlinks and not is_inside(real, root_real):
            cand.rejected.append(Rejected(norm_rel(os.path.relpath(folder, root_path)),
                                          f"class folder is a symlink leaving the data root (-> {real}); "
                                          f"{follow_symlinks_hint(root_path)}"))
            continue
        visited.add(real)
        walk_images(str(folder), str(root_path), root_real, allow_outside_symlinks, cand, label, visited)
    return root_path, cand, classes


def keyword_candidates(root: str | os.PathLike, rules: Mapping[str, Sequence[str]] | KeywordRules,
                       allow_outside_symlinks: bool) -> Built:
    """Every JPEG below ``root``, labelled by keywords: see :meth:`SampleIndex.from_keywords`."""
    kw = rules if isinstance(rules, KeywordRules) else KeywordRules(rules)
    root_path = Path(root)
    if not root_path.is_dir():
        raise IndexBuildError(f"data root {str(root)!r} is not a folder")
    root_real = os.path.realpath(root_path)
    found = Candidates([], [], [], Counter())
    walk_images(str(root_path), str(root_path), root_real, allow_outside_symlinks, found, 0, {root_real})
    cand = keyword_labelled(found, kw)
    return root_path, cand, kw.classes


def manifest_candidates(path: str | os.PathLike, root: str | os.PathLike | None, split: str | None,
                        classes: Sequence[str] | None, path_column: str | None, label_column: str | None,
                        split_column: str | None, encoding: str | None) -> Built:
    """The files a manifest lists: see :meth:`SampleIndex.from_manifest`."""
    mpath = Path(path)
    root_path = Path(root) if root is not None else mpath.parent
    if not root_path.is_dir():
        raise ManifestError(f"manifest root {str(root_path)!r} is not a folder; pass {option_phrase('root')} the folder the "
                            "paths are relative to")
    rows = read_manifest(mpath, split, root_path, path_column, label_column, split_column, encoding)
    root_real = os.path.realpath(root_path)
    outside = []
    cand = Candidates([], [], [], Counter())
    seen: dict[str, tuple[str, str]] = {}
    entries = []
    normalised: dict[str, str] = {}  # rel as written -> rel_norm: a repeated line costs no realpath()
    root_abs = os.path.abspath(root_path)
    for where, written, label in rows:
        rel_norm = normalised.get(written)
        if rel_norm is None:
            rel = path_as_written(root_path, written)
            full = rel if os.path.isabs(rel) else os.path.join(root_path, rel)
            real = os.path.realpath(full)
            if not is_inside(real, root_real):
                outside.append(f"{where}: {rel!r} -> {real}")
                continue
            rel_norm = normalised[written] = norm_rel(os.path.relpath(os.path.abspath(full), root_abs))
        cand.listed(seen, entries, rel_norm, label, where)
    if outside:
        shown = capped(outside)
        raise ManifestError(f"{mpath}: {count_text(len(outside), 'entry resolves', 'entries resolve')} outside the root "
                            f"{root_real!r} ({shown}). "
                            f"Remove {'it' if len(outside) == 1 else 'them'} or pass {option_phrase('root')} a folder that "
                            f"contains {'it' if len(outside) == 1 else 'them'}")
    classes = manifest_classes(mpath, entries, classes, cand)
    if not classes:
        raise ManifestError(f"{mpath}: no entries" + (f" for split {split!r}" if split else ""))
    return root_path, cand, classes


class FileChecks:
    """The checks of candidate files, filled by threads into numpy columns rather than a tuple per file
    (1M files: ~64 MB instead of ~350 MB): ``cols`` size, mtime, width, height; ``inode`` (device,
    inode), by which one file reached by two paths is found; ``reasons`` why each file is refused
    (None: accepted); ``kinds`` the format and bit depth of each accepted file (:mod:`.kinds`). Shared by building (:func:`check_candidates`) and updating an index."""

    def __init__(self, root: Path | str, paths: Sequence[str], verify: Verify, max_pixels: int):
        n = len(paths)
        self.root, self.paths, self.verify, self.max_pixels = str(root), paths, verify, max_pixels
        self.cols = np.zeros((n, 4), dtype=np.int64)
        self.inode = np.zeros((n, 2), dtype=np.uint64)
        self.reasons: list[str | None] = [None] * n
        self.kinds = Kinds(n)
        self.no_inode: dict[int, str] = {}  # file systems without inode numbers: identity by real path

    def stat(self, i: int) -> os.stat_result | None:
        """Stat candidate ``i`` (following symlinks; nothing is opened) and record its size, mtime and
        identity; None, with its reason set, when it cannot be."""
        full = os.path.join(self.root, self.paths[i])
        try:
            st = os.stat(full)
        except FileNotFoundError:
            self.reasons[i] = "missing file"
            return None
        except OSError as e:
            self.reasons[i] = f"unreadable ({type(e).__name__}: {e.strerror or e})"
            return None
        self.cols[i, 0], self.cols[i, 1] = st.st_size, st.st_mtime_ns
        self.inode[i] = st.st_dev, st.st_ino
        if not st.st_ino:
            self.no_inode[i] = os.path.realpath(full)
        return st

    def check(self, i: int, st: os.stat_result) -> None:
        """Check candidate ``i`` once stat'ed: a regular file (a FIFO would block the first open()
        forever), its image headers (the format its bytes name), and a decode for ``verify="decode"``."""
        reason = not_regular_reason(st.st_mode)
        if reason or self.verify == "none":
            self.reasons[i] = reason
            return
        full = os.path.join(self.root, self.paths[i])
        res = registry.check_file(full, self.max_pixels)
        self.cols[i, 2], self.cols[i, 3] = res.width, res.height
        self.kinds.set(i, res.format, res.bit_depth)
        self.reasons[i] = decode_check(full) if res.reason is None and self.verify == "decode" else res.reason

    def __call__(self, i: int) -> None:
        st = self.stat(i)
        if st is not None:
            self.check(i, st)

    def reject_same_file_twice(self, cand: Candidates, classes: Sequence[str]) -> None:
        """Refuse accepted candidates that are one file reached by two paths (see
        :func:`~.report.reject_duplicate_files`)."""
        good = np.array([r is None for r in self.reasons], dtype=bool)
        reject_duplicate_files(cand, classes, self.reasons, shared_identities(self.inode, good, self.no_inode))


def check_candidates(root: Path, cand: Candidates, classes: Sequence[str], verify: Verify, max_pixels: int,
                     workers: int, progress: bool | None) -> tuple[list[int], NDArray[np.int64], list[Rejected], dict]:
    """Check every candidate (stat, then its image headers, then a decode for ``verify="decode"``), in
    ``workers`` threads: ``(positions kept, [kept, 4] sizes/mtimes/widths/heights, every refused file, the
    index's format and bit-depth fields of the kept files)``.

    Raises:
        IndexBuildError: nothing is left (the message says what was found instead).
    """
    if verify not in ("header", "decode", "none"):
        raise ConfigError(f"verify={verify!r}; use 'header' (default), 'decode' or 'none'")
    if max_pixels <= 0:
        raise ConfigError(f"max_pixels={max_pixels}; must be a positive pixel count (default {DEFAULT_MAX_PIXELS})")
    checks = FileChecks(root, cand.paths, verify, max_pixels)
    map_in_chunks(checks, len(cand.paths), workers, progress, "indexing")  # few futures alive
    checks.reject_same_file_twice(cand, classes)
    reasons = checks.reasons
    keep = [i for i, r in enumerate(reasons) if r is None]
    rejected = list(cand.rejected) + [Rejected(cand.paths[i], r) for i, r in enumerate(reasons) if r is not None]
    rejected.sort(key=lambda r: r.path)
    if not keep:
        raise IndexBuildError(nothing_indexed(root, cand, rejected))
    return keep, checks.cols[keep], rejected, checks.kinds.fields(keep)
