"""The sample index: which files exist, their labels, and which files were refused and why.

Built once, immutable, fixed length. Everything is held in numpy arrays (paths as one UTF-8 buffer
plus offsets), so an index of a million files costs tens of MB and forked DataLoader workers do not
copy it page by page. Validation at build time reads only JPEG headers and the last bytes of each
file (``verify="header"``); ``verify="decode"`` also decodes every file, in colour and in gray, 4-20x
slower. Nothing is dropped silently: refused files land in :attr:`SampleIndex.rejected` with a reason,
are summarised in one log line, and are saved with the index.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import errno
import hashlib
import io
import itertools
import json
import logging
import os
import secrets
import shlex
import unicodedata
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
from numpy.typing import NDArray

from .errors import (ConfigError, IndexBuildError, IndexFileError, ManifestError, MissingDependencyError,
                     OutputFileError, StaleIndexError)
from .jpeg import DEFAULT_MAX_PIXELS, check_jpeg, file_kind, not_regular_reason, open_regular
from .labelling import DEFAULT_KEYWORDS, KeywordRules
from .progress import track
from .strings import StringTable

log = logging.getLogger("dali_backend")

JPEG_EXTENSIONS = (".jpg", ".jpeg")
NOT_JPEG = "not .jpg/.jpeg"  # why a file with another extension is ignored
# Files this package writes into data folders (dali_backend/synthetic.py's cache marker): never
# reported as ignored user files.
PACKAGE_FILES = frozenset({".synthetic.json"})
FORMAT_NAME = "dali_backend.SampleIndex"
FORMAT_VERSION = 1
Verify = Literal["header", "decode", "none"]


# ------------------------------------------------------------------------------ naming options in messages
# The options of the library's builders and the flag of `dali-backend index` for each; ROOT is its positional
# data root. Error messages name both forms in library use; a command line names its own flags instead
# (see command_line), and never a flag it lacks.
INDEX_CLI_FLAGS: Mapping[str, str] = {
    "root": "ROOT", "split": "--split", "classes": "--classes", "path_column": "--path-column",
    "label_column": "--label-column", "split_column": "--split-column", "encoding": "--encoding",
    "allow_outside_symlinks": "--allow-outside-symlinks", "verify": "--verify", "max_pixels": "--max-pixels",
    "workers": "--workers",
}
_BARE = object()  # an option named without a value ("pass classes=")


# The flags of the command line running the library (see command_line); None in library use.
_CALLER: ContextVar[Mapping[str, str] | None] = ContextVar("dali_backend_caller", default=None)


@contextlib.contextmanager
def command_line(flags: Mapping[str, str]) -> Iterator[None]:
    """While active, error messages of this module name options as a command line spells them.

    ``flags`` maps a builder keyword (``"split"``) to the command's flag (``"--split"``), or to the
    metavar of a positional argument (``"root": "DATA"``). An option the command lacks is never
    suggested as a flag of it: the message says to build an index with ``dali-backend index`` instead.
    """
    token = _CALLER.set(dict(flags))
    try:
        yield
    finally:
        _CALLER.reset(token)


def _cli_form(flag: str, value: object) -> str:
    """``flag`` with ``value`` as typed on a command line (lists comma-separated, shell-quoted)."""
    if value is _BARE or value is True:
        return flag
    if isinstance(value, (list, tuple)):  # --classes: comma-separated, or a JSON list when a name holds a comma
        items = [str(v) for v in value]
        text = ",".join(items) if not any("," in v for v in items) else json.dumps(items, ensure_ascii=False)
    else:
        text = str(value)
    if not flag.startswith("-"):  # a positional argument
        return f"{shlex.quote(text)} as {flag}"
    return f"{flag} {shlex.quote(text)}"


def _opt(keyword: str, value: object = _BARE) -> str | None:
    """How to pass option ``keyword`` (with ``value``) in an error message, for whoever called.

    Library use: ``split='train' (CLI: --split train)``. Under :func:`command_line`: the command's
    own form (``--split train``), or None when the command has no such option.
    """
    caller = _CALLER.get()
    if caller is None:
        py = f"{keyword}=" if value is _BARE else f"{keyword}={value!r}"
        flag = INDEX_CLI_FLAGS.get(keyword)
        return py if flag is None or flag == "ROOT" else f"{py} (CLI: {_cli_form(flag, value)})"
    flag = caller.get(keyword)
    return None if flag is None else _cli_form(flag, value)


def _name(keyword: str, value: object) -> str:
    """Option ``keyword=value`` restated (as the caller passed it) in an error message."""
    caller = _CALLER.get()
    flag = caller.get(keyword) if caller is not None else None
    return f"{keyword}={value!r}" if flag is None else _cli_form(flag, value)


def _index_first(root: str | os.PathLike, keyword: str, value: object = _BARE) -> str:
    """For a command without option ``keyword``: build the index with ``dali-backend index`` using it."""
    caller = _CALLER.get()
    data = caller.get("root") if caller is not None else "DATA"
    command = (f"index it with `dali-backend index {shlex.quote(os.fspath(root))} "
               f"{_cli_form(INDEX_CLI_FLAGS[keyword], value)} --out index.npz`")
    return command + (f" and pass that file as {data}" if data else "")


@dataclass(frozen=True)
class Rejected:
    """A file that is not in the index, and why. ``path`` is relative to the index root."""

    path: str
    reason: str


@dataclass
class _Candidates:
    """Files proposed for the index before validation."""

    paths: list[str]
    labels: list[int]
    rejected: list[Rejected]
    ignored: Counter
    extensions: Counter = field(default_factory=Counter)  # non-JPEG files by extension, for error messages
    ignored_files: list[Rejected] = field(default_factory=list)  # (path, kind) of every ignored entry

    def ignore(self, name: str, rel: str) -> None:
        """Count and record a non-sample entry ``name`` at ``rel`` (hidden, ``._*``, other extension);
        package files are skipped."""
        if name in PACKAGE_FILES:
            return
        if name.startswith("._"):
            kind = "macOS ._ file"
        elif name.startswith("."):
            kind = "hidden"
        else:
            kind = NOT_JPEG
            self.extensions[os.path.splitext(name)[1].lower()] += 1
        self.skip(rel, kind)

    def skip(self, rel: str, kind: str) -> None:
        """Record ``rel`` as ignored for reason ``kind``."""
        self.ignored[kind] += 1
        self.ignored_files.append(Rejected(rel, kind))


def _count(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1: ``1 file``, ``2 files``, ``3 entries``."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _norm_rel(rel: str) -> str:
    return rel.replace(os.sep, "/")


def _is_inside(path: str, root_real: str) -> bool:
    return path == root_real or path.startswith(root_real.rstrip(os.sep) + os.sep)


def _sorted_entries(folder: str, root: str, cand: _Candidates) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as e:
        cand.rejected.append(Rejected(_norm_rel(os.path.relpath(folder, root)), f"unreadable folder ({e.strerror or e})"))
        return []


def _walk_jpegs(top: str, root: str, root_real: str, allow_outside_symlinks: bool, cand: _Candidates, label: int,
                visited: set[str]) -> None:
    """Append every JPEG below ``top`` (sorted, depth first) to ``cand`` with ``label``.

    Paths are made relative to ``root`` (as the user gave it); containment is checked on ``root_real``.
    Iterative (an explicit stack of folder listings), so folder depth is not bounded by Python's
    recursion limit. Nothing is opened here: entries are classified by ``stat`` only.
    """
    # (listing, real path of the folder listed): a plain sub-folder's real path is its parent's plus
    # its name, so only symlinks pay for realpath() (which is O(depth) per call).
    stack = [(iter(_sorted_entries(top, root, cand)), os.path.realpath(top))]
    while stack:
        listing, folder_real = stack[-1]
        entry = next(listing, None)
        if entry is None:
            stack.pop()
            continue
        name = entry.name
        rel = _norm_rel(os.path.relpath(entry.path, root))
        if name.startswith("."):
            cand.ignore(name, rel)
            continue
        target = os.path.join(folder_real, name)
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            if not os.path.exists(target):
                cand.rejected.append(Rejected(rel, f"broken symlink (-> {os.readlink(entry.path)})"))
                continue
            if not allow_outside_symlinks and not _is_inside(target, root_real):
                cand.rejected.append(Rejected(rel, f"symlink leaves the data root (-> {target}); "
                                                   f"{_follow_symlinks_hint(root)}"))
                continue
        if entry.is_dir(follow_symlinks=True):
            if target in visited:
                cand.skip(rel, "symlink loop")
                continue
            visited.add(target)
            stack.append((iter(_sorted_entries(entry.path, root, cand)), target))
        elif name.lower().endswith(JPEG_EXTENSIONS):
            cand.paths.append(rel)
            cand.labels.append(label)
        else:
            cand.ignore(name, rel)


def _follow_symlinks_hint(root: str | os.PathLike) -> str:
    """How to follow a symlink that leaves the data root, for whoever called."""
    flag = _opt("allow_outside_symlinks", True)
    return f"pass {flag} to follow it" if flag else f"to follow it, {_index_first(root, 'allow_outside_symlinks', True)}"


def _subdirs(path: str) -> list[str]:
    return sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))


SPLIT_FOLDERS = frozenset({"train", "training", "val", "valid", "validation", "test", "testing"})


def _refuse_split_layout(root: Path, found: Sequence[str]) -> None:
    """Raise IndexBuildError if ``root`` holds split folders (``train/<class>/``) instead of classes."""
    splits = {name: _subdirs(str(root / name)) for name in found if name.lower() in SPLIT_FOLDERS}
    splits = {name: sub for name, sub in splits.items() if sub}
    if not splits:
        return
    first = sorted(splits)[0] if "train" not in splits else "train"
    shown = "; ".join(f"{name}/ holds {_capped(sub, 3, ', ')}" for name, sub in sorted(splits.items()))
    split, as_root, classes = _opt("split", first), _opt("root", str(root / first)), _opt("classes", sorted(found))
    if split:
        fix = f"Pass {split} to index one split" + (f", or pass {as_root}" if as_root else "")
    else:
        fix = "To index one split, " + (f"pass {as_root}, or " if as_root else "") + _index_first(root, "split", first)
    fix += (f". If these really are classes, pass {classes}" if classes else
            f". If these really are classes, {_index_first(root, 'classes', sorted(found))}")
    raise IndexBuildError(
        f"{str(root)!r} looks like a split layout, not one folder per class ({shown}); indexing it would take "
        f"{', '.join(repr(n) for n in sorted(splits))} as class names. {fix}")


def _caseless(name: str) -> str:
    """``name`` folded for comparison regardless of case and Unicode normalisation (canonical caseless)."""
    return unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())


def _spelling(name: str) -> str:
    """``name`` quoted, with its code points spelled out when it is not ASCII (NFC and NFD look alike)."""
    return repr(name) if name.isascii() else f"{name!r} = {ascii(name)}"


def _refuse_lookalikes(names: Sequence[str], error: Callable[[str], Exception]) -> None:
    """Raise ``error(pairs)`` if two of ``names`` differ only in case or Unicode normalisation.

    ``café`` written precomposed (NFC) and decomposed (NFD, as macOS and some tools write it), or
    ``Dent`` and ``dent``, are one class to a person but two to a program; silently splitting a class
    in two skews every class balance, so it is refused and the user decides.
    """
    first: dict[str, str] = {}
    pairs = []
    for name in names:
        other = first.setdefault(_caseless(name), name)
        if other != name:
            same_form = unicodedata.normalize("NFC", other) == unicodedata.normalize("NFC", name)
            what = "Unicode normalisation" if same_form else "case" if other.casefold() == name.casefold() else \
                "case and Unicode normalisation"
            pairs.append(f"{_spelling(other)} and {_spelling(name)} (differ only in {what})")
    if pairs:
        raise error(_capped(pairs))


def _resolve_classes(found: Sequence[str], classes: Sequence[str] | None, error) -> list[str]:
    """``classes`` as given (every found name must be in it), or the sorted found names."""
    if classes is None:
        return list(found)
    classes = list(classes)
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise error(unknown, classes)
    return classes


class SampleIndex:
    """An immutable list of (file, label) samples under one root folder.

    Build it with :meth:`from_folder`, :meth:`from_manifest` or :meth:`from_keywords`; save it with
    :meth:`save` and reload it with :meth:`load` (no pickle: a ``.npz`` of plain arrays and JSON).

    Attributes:
        root: absolute data root; paths are relative to it.
        paths: relative paths (``/``-separated), a read-only sequence of ``str``.
        labels: int64 class ids, ``labels[i]`` indexes ``classes``.
        classes: class names; ids are positions in this tuple.
        sizes, mtimes: file size in bytes and mtime in ns at indexing time (int64).
        widths, heights: image size declared by the JPEG frame header (before EXIF rotation).
        rejected: files that were refused, each with a reason.
        ignored: counts of files skipped on purpose, by reason (``hidden``, ``macOS ._ file``,
            ``not .jpg/.jpeg``, ``symlink loop``).
        ignored_files: every skipped file or folder as ``Rejected(path, reason)``, the reason one of
            those of :attr:`ignored` (empty for an index saved before they were recorded).
        fingerprint: SHA-256 over classes, paths, labels, sizes and mtimes.
    """

    __slots__ = ("root", "_paths", "labels", "classes", "sizes", "mtimes", "widths", "heights", "rejected",
                 "ignored", "ignored_files", "fingerprint", "__weakref__")

    def __init__(self, root: str | os.PathLike, paths: StringTable, labels: NDArray[np.int64],
                 classes: Sequence[str], sizes: NDArray[np.int64], mtimes: NDArray[np.int64],
                 widths: NDArray[np.int32], heights: NDArray[np.int32],
                 rejected: Iterable[Rejected] = (), ignored: Mapping[str, int] | None = None,
                 ignored_files: Iterable[Rejected] = ()):
        n = len(paths)
        arrays = {"labels": (labels, np.int64), "sizes": (sizes, np.int64), "mtimes": (mtimes, np.int64),
                  "widths": (widths, np.int32), "heights": (heights, np.int32)}
        fixed = {}
        for name, (arr, dtype) in arrays.items():
            a = np.array(arr, dtype=dtype, copy=True).reshape(-1)
            if a.size != n:
                raise ConfigError(f"SampleIndex: {name} has {_count(a.size, 'entry', 'entries')} for "
                                  f"{_count(n, 'path')}")
            a.flags.writeable = False
            fixed[name] = a
        classes = tuple(str(c) for c in classes)
        if len(set(classes)) != len(classes):
            raise ConfigError(f"SampleIndex: class names must be unique, got {classes}")
        if n and (fixed["labels"].min() < 0 or fixed["labels"].max() >= len(classes)):
            raise ConfigError(f"SampleIndex: labels must lie in [0, {len(classes) - 1}] for classes {classes}")
        sa = object.__setattr__
        sa(self, "root", str(Path(root).absolute()))
        sa(self, "_paths", paths)
        sa(self, "classes", classes)
        for name, a in fixed.items():
            sa(self, name, a)
        sa(self, "rejected", tuple(rejected))
        sa(self, "ignored", dict(ignored or {}))
        sa(self, "ignored_files", tuple(ignored_files))
        sa(self, "fingerprint", self._compute_fingerprint())

    def __setattr__(self, name, value):
        raise AttributeError(f"SampleIndex is immutable; cannot set {name!r} (build a new index instead)")

    def __reduce__(self):  # pickling (spawned workers, deepcopy): the slots as they are, no re-validation
        return _restore_index, (tuple(getattr(self, name) for name in _STATE_SLOTS),)

    # ----------------------------------------------------------------------------------- accessors
    @property
    def paths(self) -> StringTable:
        return self._paths

    def __len__(self) -> int:
        return len(self._paths)

    @property
    def class_to_idx(self) -> dict[str, int]:
        """``{class name: class id}``, as torchvision's ``ImageFolder.class_to_idx``."""
        return {c: i for i, c in enumerate(self.classes)}

    @property
    def targets(self) -> NDArray[np.int64]:
        """The class id of every sample, as torchvision's ``ImageFolder.targets``.

        A read-only int64 numpy array (the same as :attr:`labels`), not a list: it works wherever
        torchvision code reads ``targets`` (``len``, indexing, ``np.bincount``, ``torch.as_tensor``,
        ``Counter``) without creating a Python object per sample.
        """
        return self.labels

    @property
    def samples(self) -> list[tuple[str, int]]:
        """``[(absolute path, class id), ...]``, as torchvision's ``ImageFolder.samples``.

        Built on each access (one Python tuple per sample): fine for inspection, avoid it in
        DataLoader workers, where :meth:`abspath` and :attr:`labels` cost nothing.
        """
        return [(os.path.join(self.root, p), int(lab)) for p, lab in zip(self._paths, self.labels.tolist())]

    def abspath(self, i: int) -> str:
        """Absolute path of sample ``i``."""
        return os.path.join(self.root, self._paths[i])

    def class_counts(self) -> NDArray[np.int64]:
        """Number of samples per class, in the order of :attr:`classes`."""
        return np.bincount(self.labels, minlength=len(self.classes)).astype(np.int64)

    def summary(self) -> str:
        """Counts per class, then every rejected file with its reason and every ignored file, grouped by reason.

        The first line is the one logged when the index is built (counts and a few examples); the
        lines after it list every rejected file under its kind of reason (a file rejected several
        times, such as a path listed on many manifest lines, once, with the count) and every
        ignored file or folder (hidden, ``._*``, not ``.jpg``/``.jpeg``, symlink loops).
        """
        lines = [self._headline(listed_below=True)]
        if self.rejected:
            lines.append(f"rejected files ({len(self.rejected)}):")
            lines += _grouped(self.rejected, _reason_kind, detail=True)
        if self.ignored_files:
            lines.append(f"ignored files ({len(self.ignored_files)}):")
            lines += _grouped(self.ignored_files, lambda reason: reason, detail=False)
        return "\n".join(lines)

    def _headline(self, listed_below: bool = False) -> str:
        """One line: counts per class, rejected files by kind with a few examples, ignored files by kind."""
        counts = ", ".join(f"{c} {k}" for c, k in zip(self.classes, self.class_counts()))
        text = (f"indexed {_count(len(self), 'file')} in {_count(len(self.classes), 'class', 'classes')} ({counts}) "
                f"under {self.root}")
        if self.rejected:
            text += f"; rejected {_rejected_digest(self.rejected, listed_below)}"
        if self.ignored:
            text += f"; ignored {sum(self.ignored.values())} (" + ", ".join(f"{k}: {v}" for k, v in sorted(self.ignored.items())) + ")"
        return text

    def __repr__(self) -> str:
        return f"<SampleIndex n={len(self)} classes={list(self.classes)} rejected={len(self.rejected)} root={self.root!r}>"

    def _compute_fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(list(self.classes)).encode())
        for a in (self._paths.offsets, self._paths.data, self.labels, self.sizes, self.mtimes):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    # ----------------------------------------------------------------------------------- builders
    @classmethod
    def from_folder(cls, root: str | os.PathLike, split: str | None = None, *, classes: Sequence[str] | None = None,
                    verify: Verify = "header", max_pixels: int = DEFAULT_MAX_PIXELS,
                    allow_outside_symlinks: bool = False, workers: int = 8, progress: bool | None = None) -> SampleIndex:
        """Index ``root/<class>/**/*.jpg`` (or ``root/<split>/<class>/**`` when ``split`` is given).

        Args:
            root: data folder.
            split: name of a split folder (``"train"``, ``"val"``); classes are then the union of the
                class folders of every split, so the ids agree between splits. Without it, a root
                whose sub-folders are split names (train, val, valid, validation, test, testing)
                holding folders is refused rather than indexed with the splits as classes.
            classes: explicit class names in id order (default: sorted folder names). A class folder
                not in this list is an error; a listed class without a folder has no samples. Giving
                it also turns off the split-layout check (for classes really named ``test``) and the
                look-alike check below.
            verify: ``"header"`` (markers, frame type and size, EXIF orientations; default),
                ``"decode"`` (also decode every file, in colour and in gray, with libjpeg-turbo in
                strict mode), or ``"none"`` (trust the files). Only
                ``"decode"`` catches a scan cut short and re-terminated with an end-of-image marker
                (it would decode with its bottom rows flat grey) or corrupt entropy data.
            max_pixels: refuse files whose frame header declares more pixels than this.
            allow_outside_symlinks: follow symlinks that point outside ``root`` (refused by default).
            workers: threads used to read headers (I/O bound).
            progress: show a progress bar (None: when stderr is a terminal).

        Class folders whose names differ only in case or Unicode normalisation (``Dent`` and
        ``dent``; ``café`` precomposed and decomposed, e.g. one copied from macOS) are refused, not
        silently made two classes, nor silently merged: rename one folder (or move its files into the
        other), or pass ``classes=`` naming both to keep them as two classes.

        Raises:
            IndexBuildError: no folder, a split layout without ``split=``, look-alike class folder
                names, or no usable JPEG at all (the message says what was found instead).
        """
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
        if classes is None:
            keep = _opt("classes", found)
            keep = (f"pass {keep} to keep them apart" if keep else
                    f"to keep them apart, {_index_first(root, 'classes', found)}")
            _refuse_lookalikes(found, lambda pairs: IndexBuildError(
                f"class folders {pairs} under {str(root)!r} would become separate classes. Rename one folder of each "
                f"pair (or move its files into the other), or {keep}"))
        classes = _resolve_classes(found, classes, lambda unknown, cl: IndexBuildError(
            f"class folders [{_capped([repr(u) for u in unknown], sep=', ')}] under {str(base)!r} are not in "
            f"{_name('classes', cl)}; add them to it or move them out of the root"))
        if not classes:
            raise IndexBuildError(f"no class folders under {str(base)!r}; expected {str(base)}/<class>/*.jpg")
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
        return cls._validated(root_path, cand, classes, verify, max_pixels, workers, progress)

    @classmethod
    def from_keywords(cls, root: str | os.PathLike, rules: Mapping[str, Sequence[str]] | KeywordRules = DEFAULT_KEYWORDS,
                      *, verify: Verify = "header", max_pixels: int = DEFAULT_MAX_PIXELS,
                      allow_outside_symlinks: bool = False, workers: int = 8, progress: bool | None = None) -> SampleIndex:
        """Index every JPEG below ``root`` and label it by keywords in its name or folders.

        Default rules (the tutorial's): ok/normal/good -> normal, scratch/scr -> scratch, dent/pit ->
        dent. Keywords may be in any script: an ASCII keyword matches a whole word of a file or folder
        name, any other keyword (``{"scratch": ["划痕"]}``) matches inside a name (``划痕_2024``),
        both after NFKC normalisation and case folding; see :mod:`dali_backend.labelling` for the
        exact rule. Files that match no class or several are put in :attr:`rejected`, never guessed.
        """
        kw = rules if isinstance(rules, KeywordRules) else KeywordRules(rules)
        root_path = Path(root)
        if not root_path.is_dir():
            raise IndexBuildError(f"data root {str(root)!r} is not a folder")
        root_real = os.path.realpath(root_path)
        found = _Candidates([], [], [], Counter())
        _walk_jpegs(str(root_path), str(root_path), root_real, allow_outside_symlinks, found, 0, {root_real})
        cand = _Candidates([], [], found.rejected, found.ignored, found.extensions, found.ignored_files)
        class_id = {c: i for i, c in enumerate(kw.classes)}
        for rel in found.paths:
            name, reason = kw.label(rel)
            if name is None:
                cand.rejected.append(Rejected(rel, reason or "unlabelled"))
            else:
                cand.paths.append(rel)
                cand.labels.append(class_id[name])
        return cls._validated(root_path, cand, kw.classes, verify, max_pixels, workers, progress)

    @classmethod
    def from_manifest(cls, path: str | os.PathLike, root: str | os.PathLike | None = None, split: str | None = None, *,
                      classes: Sequence[str] | None = None, verify: Verify = "header",
                      max_pixels: int = DEFAULT_MAX_PIXELS, workers: int = 8, progress: bool | None = None,
                      path_column: str | None = None, label_column: str | None = None,
                      split_column: str | None = None, encoding: str | None = None) -> SampleIndex:
        """Index the files listed in a manifest.

        Args:
            path: a JSON object ``{"relative/path.jpg": "class", ...}`` (``.json``; a key given twice
                is an error), or a CSV file. A CSV without a header row has the columns
                ``path,label[,split]``. A header row is read by name: the path column may be called
                any of :data:`PATH_COLUMNS` (``path``, ``file``, ``filename``, ``image``,
                ``image_path``, ``filepath``, ``img``, ...), the label column any of
                :data:`LABEL_COLUMNS` (``label``, ``class``, ``class_name``, ``target``,
                ``category``, ...) and the optional split column any of :data:`SPLIT_COLUMNS`
                (``split``, ``subset``, ``set``, ``fold``, ...); other columns are ignored. A first
                row that looks like a header (no cell names a ``.jpg``/``.jpeg`` or an existing
                file) but has none of these names is an error: pass ``path_column=`` and
                ``label_column=``.
            root: folder the manifest paths are relative to (default: the manifest's folder). An
                entry resolving outside it (``../``, absolute paths elsewhere, symlinks) is refused.
            split: keep only CSV rows whose split column equals this.
            classes: explicit class names in id order (default: sorted labels found). A label not in
                this list is an error. An empty label is always an error (file and line named).
            path_column, label_column, split_column: CSV header names of the columns to use, for
                headers with other names such as ``文件名,类别`` (the CSV must then have a header row).
            encoding: the manifest's text encoding (default UTF-8, with or without a byte-order
                mark), e.g. ``"gbk"`` or ``"cp1252"`` for a CSV saved by Excel on Windows. A manifest
                that does not decode is a :class:`ManifestError` naming the line and byte offset.

        Files written on Windows read as they are: a byte-order mark and CRLF line ends are fine,
        and a path written with backslashes (``scratch\\img1.jpg``) names ``scratch/img1.jpg`` when
        no file is named with the backslash itself (on POSIX, where ``\\`` may be part of a name).
        A path with spaces around it is used exactly as written when that file exists (a file may
        really be named `` lead.jpg``), else without them (``a.jpg, ok``). Labels are stripped;
        labels that differ only in case or Unicode normalisation (``Dent`` and ``dent``) are an
        error unless ``classes=`` names both. A CSV error (an unclosed quote) names its line.
        """
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
        labels_found = sorted({lab for _, lab in entries})
        if classes is None:
            _refuse_lookalikes(labels_found, lambda pairs: ManifestError(
                f"{mpath}: labels {pairs} would become separate classes. Spell each class one way in the manifest, "
                f"or pass {_opt('classes', labels_found)} to keep them apart"))
        classes = _resolve_classes(labels_found, classes, lambda unknown, cl: ManifestError(
            f"{mpath}: labels {_capped([repr(u) for u in unknown], sep=', ')} are not in {_name('classes', cl)}; add "
            "them or fix the manifest"))
        class_id = {c: i for i, c in enumerate(classes)}
        for rel, lab in entries:
            cand.paths.append(rel)
            cand.labels.append(class_id[lab])
        if not classes:
            raise ManifestError(f"{mpath}: no entries" + (f" for split {split!r}" if split else ""))
        return cls._validated(root_path, cand, classes, verify, max_pixels, workers, progress)

    @classmethod
    def _validated(cls, root: Path, cand: _Candidates, classes: Sequence[str], verify: Verify, max_pixels: int,
                   workers: int, progress: bool | None) -> SampleIndex:
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

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            results = list(track(pool.map(check, cand.paths), total=n, desc="indexing", enabled=progress))
        reasons = [r[0] for r in results]
        _reject_same_file_twice(cand, classes, reasons, [r[5] for r in results])
        keep = [i for i, r in enumerate(reasons) if r is None]
        rejected = list(cand.rejected) + [Rejected(cand.paths[i], r) for i, r in enumerate(reasons) if r is not None]
        rejected.sort(key=lambda r: r.path)
        if not keep:
            raise IndexBuildError(_nothing_indexed(root, cand, rejected))
        cols = np.array([r[1:5] for r in results], dtype=np.int64).reshape(-1, 4)[keep]
        index = cls(root, StringTable.from_strings(cand.paths[i] for i in keep), np.asarray(cand.labels, np.int64)[keep],
                    classes, cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], rejected, cand.ignored,
                    sorted(cand.ignored_files, key=lambda r: r.path))
        log.info("%s", index._headline())
        empty = [c for c, k in zip(index.classes, index.class_counts()) if k == 0]
        if empty:
            log.warning("classes with no samples: %s", empty)
        return index

    # ----------------------------------------------------------------------------------- derived
    def subset(self, positions: Sequence[int] | NDArray[np.int64]) -> SampleIndex:
        """A new index holding the samples at ``positions`` (same root and classes; rejects kept)."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        if pos.size and (pos.min() < 0 or pos.max() >= len(self)):
            raise ConfigError(f"subset positions must lie in [0, {len(self) - 1}]")
        return SampleIndex(self.root, self._paths.take(pos), self.labels[pos], self.classes, self.sizes[pos],
                           self.mtimes[pos], self.widths[pos], self.heights[pos], self.rejected, self.ignored,
                           self.ignored_files)

    def split(self, val_fraction: float, seed: int = 0, *, stratify: bool = False) -> tuple[SampleIndex, SampleIndex]:
        """Split into ``(train, val)`` deterministically.

        Every file gets a key, a hash of (seed, relative path) uniform in [0, 1).

        * ``stratify=False`` (default): a file is in val when its key is below ``val_fraction``. Its
          side depends on nothing else, so a file keeps its side when others are added or removed;
          but each file is an independent draw, so a class gets ``val_fraction`` of its files only in
          expectation: the count is binomial (a class of 20 files at 0.2 gets 4 on average, and 6 or
          more, 30 %, about one time in five).
        * ``stratify=True``: each class gets exactly ``val_fraction`` of its files in val, rounded to
          the nearest count (half up): the files with the smallest keys. Deterministic for a seed;
          when a class grows, only files near its boundary can change sides.

        Raises:
            ConfigError: ``val_fraction`` outside [0, 1].
        """
        if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float, np.floating)) or \
                not 0.0 <= val_fraction <= 1.0:
            raise ConfigError(f"val_fraction={val_fraction!r}; must be a number in [0, 1], e.g. 0.2")
        u = split_keys(self._paths, seed)
        if stratify:
            val = np.zeros(len(self), dtype=bool)
            for c in range(len(self.classes)):
                members = np.flatnonzero(self.labels == c)
                k = int(np.floor(members.size * float(val_fraction) + 0.5))
                # smallest keys; ties (never in practice) broken by position, so the result is deterministic
                val[members[np.lexsort((members, u[members]))[:k]]] = True
        else:
            val = u < val_fraction
        return self.subset(np.flatnonzero(~val)), self.subset(np.flatnonzero(val))

    # ----------------------------------------------------------------------------------- checks
    def changed_files(self, positions: Iterable[int] | None = None) -> list[tuple[str, str]]:
        """``(path, what changed)`` for files whose size or mtime differ from indexing time, or are gone."""
        out = []
        for i in range(len(self)) if positions is None else positions:
            full = self.abspath(i)
            try:
                st = os.stat(full)  # never opens the file
            except OSError:
                out.append((self._paths[i], "missing"))
                continue
            size, mtime = st.st_size, st.st_mtime_ns
            reason = not_regular_reason(st.st_mode)
            if reason:
                out.append((self._paths[i], reason))
            elif size != self.sizes[i]:
                out.append((self._paths[i], f"size {self.sizes[i]} -> {size} bytes"))
            elif mtime != self.mtimes[i]:
                out.append((self._paths[i], "modified (mtime changed)"))
        return out

    # ----------------------------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the index to ``path`` (a ``.npz`` of plain arrays; no pickle). Atomic.

        The file is written under a new temporary name next to ``path`` and renamed over it, so a
        reader sees the old index or the new one, never a part (see :func:`write_atomic`). A ``path``
        that exists and is not a regular file (a folder, FIFO, socket, or a device such as
        ``/dev/null``) is refused and left as it is; a symlink to a file has that file replaced.
        Names that are not UTF-8 on disk round-trip: paths keep their bytes, and the metadata is
        ASCII JSON (lone surrogates escaped).

        Raises:
            OutputFileError: ``path`` is not a regular file, or writing failed (disk full,
                permissions); the message names ``path``, and no temporary file is left behind.
        """
        meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "root": self.root, "classes": list(self.classes),
                "rejected": [[r.path, r.reason] for r in self.rejected], "ignored": self.ignored,
                "ignored_files": [[r.path, r.reason] for r in self.ignored_files], "fingerprint": self.fingerprint}
        arrays = {"path_data": self._paths.data, "path_offsets": self._paths.offsets, "labels": self.labels,
                  "sizes": self.sizes, "mtimes": self.mtimes, "widths": self.widths, "heights": self.heights,
                  "meta": np.frombuffer(json.dumps(meta).encode("ascii"), dtype=np.uint8)}
        write_atomic(path, lambda f: np.savez(f, **arrays), what="index file")

    @classmethod
    def load(cls, path: str | os.PathLike, root: str | os.PathLike | None = None,
             check: Literal["stat", "none"] = "stat") -> SampleIndex:
        """Read an index written by :meth:`save`.

        Args:
            path: the index file.
            root: data root to use instead of the saved one (the data moved; CLI ``--root``).
            check: ``"stat"`` compares every file's size and mtime with indexing time and raises
                :class:`StaleIndexError` listing the changed files; ``"none"`` skips that (CLI
                ``--no-check``).

        Raises:
            IndexFileError: the file is missing, not an index, or damaged (rebuild it).
            StaleIndexError: ``check="stat"`` found changed or missing files; when most are
                missing, the message says to pass ``root=`` (the data moved).
        """
        if check not in ("stat", "none"):
            raise ConfigError(f"check={check!r}; use 'stat' (default) or 'none'")
        arrays = _read_index_arrays(path)
        try:
            meta = json.loads(arrays["meta"].tobytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise _damaged(path, f"its metadata is not JSON ({type(e).__name__})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME or meta.get("version") != FORMAT_VERSION:
            got = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else (None, None)
            raise IndexFileError(f"{path}: format {got[0]!r} version {got[1]!r}; "
                                 f"this library reads {FORMAT_NAME!r} version {FORMAT_VERSION}. Rebuild the index")
        _check_meta(path, meta)
        n = arrays["labels"].size  # every per-sample array has n entries (checked before reading)
        offsets, data = arrays["path_offsets"], arrays["path_data"]
        if offsets.size != n + 1 or offsets[0] != 0 or offsets[-1] != data.size or np.any(np.diff(offsets) < 0):
            raise _damaged(path, f"path offsets are inconsistent ({offsets.size} offsets for {n} samples and "
                                 f"{data.size} bytes of path data)")
        try:
            index = cls(root if root is not None else meta["root"], StringTable(data, offsets), arrays["labels"],
                        meta["classes"], arrays["sizes"], arrays["mtimes"], arrays["widths"], arrays["heights"],
                        [Rejected(p, r) for p, r in meta["rejected"]], meta["ignored"],
                        [Rejected(p, r) for p, r in meta.get("ignored_files", [])])
        except ValueError as e:  # ConfigError: labels out of range, duplicate class names
            raise _damaged(path, str(e)) from None
        if index.fingerprint != meta["fingerprint"]:
            raise IndexFileError(f"{path}: contents do not match the saved fingerprint (file edited or corrupt); rebuild it")
        if check == "stat":
            changed = index.changed_files()
            if changed:
                shown = _capped([f"{p}: {w}" for p, w in changed])
                text = f"{path}: {len(changed)} of {len(index)} files changed since indexing ({shown}). "
                missing = sum(w == "missing" for _, w in changed)
                if missing * 2 > len(index) or not os.path.isdir(index.root):
                    text += (f"{missing} of {len(index)} files are missing under {index.root!r}: if the data moved, "
                             "pass root='NEW/LOCATION' to SampleIndex.load (CLI: --root NEW/LOCATION). Otherwise ")
                fix = "rebuild the index, or pass check='none' to SampleIndex.load (CLI: --no-check) to use it anyway"
                raise StaleIndexError(text + (fix if text.endswith("Otherwise ") else fix[0].upper() + fix[1:]))
        return index


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


def _damaged(path: str | os.PathLike, what: str) -> IndexFileError:
    return IndexFileError(f"{os.fspath(path)}: not a readable index file ({what}); rebuild it with "
                          "SampleIndex.from_folder(...).save(...) (CLI: dali-backend index ROOT --out FILE)")


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


def _read_index_arrays(path: str | os.PathLike) -> dict[str, NDArray]:
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
            _check_declared(path, declared, file_size)
            return {name: _read_array(path, zf, members[f"{name}.npy"], d).astype(_INDEX_ARRAYS[name])
                    for name, d in declared.items()}
    except IndexFileError:
        raise
    except FileNotFoundError:
        raise IndexFileError(f"{os.fspath(path)}: no such index file; build one with "
                             "SampleIndex.from_folder(...).save(path) (CLI: dali-backend index ROOT --out FILE)") from None
    except (OSError, EOFError, ValueError, KeyError, NotImplementedError, RuntimeError, zipfile.BadZipFile,
            zlib.error) as e:  # NotRegularFileError is an OSError
        raise _damaged(path, f"{type(e).__name__}: {e}") from None


def _read_header(path: str | os.PathLike, zf: zipfile.ZipFile, members: Mapping[str, zipfile.ZipInfo], name: str,
                 dtype: type) -> _Declared:
    """The ``.npy`` header of array ``name``: a 1-D integer array of ``dtype``'s width, filling its member."""
    info = members.get(f"{name}.npy")
    if info is None:
        raise _damaged(path, f"no {name!r} array; not a SampleIndex file (members: {_capped(sorted(members), sep=', ')})")
    with zf.open(info) as m:
        version = np.lib.format.read_magic(m)
        if version == (1, 0):
            shape, _, dt = np.lib.format.read_array_header_1_0(m)
        elif version == (2, 0):
            shape, _, dt = np.lib.format.read_array_header_2_0(m)
        else:
            raise _damaged(path, f"array {name!r} has .npy format version {version}")
        offset = m.tell()
    if len(shape) != 1 or shape[0] < 0 or dt.kind not in "iu" or dt.itemsize != np.dtype(dtype).itemsize:
        raise _damaged(path, f"array {name!r} is {dt} of shape {shape}; expected a 1-D {np.dtype(dtype)} array")
    declared = _Declared(int(shape[0]), dt, offset)
    held = info.file_size - offset
    if declared.nbytes != held:
        raise _damaged(path, f"array {name!r} declares {declared.count} entries ({declared.nbytes} bytes) but its "
                             f"member holds {held} bytes")
    return declared


def _check_declared(path: str | os.PathLike, declared: Mapping[str, _Declared], file_size: int) -> None:
    """Raise IndexFileError unless the declared lengths agree and their total is plausible for the file."""
    n = declared["labels"].count
    for name in _PER_SAMPLE:
        if declared[name].count != n:
            raise _damaged(path, f"array {name!r} declares {declared[name].count} entries for {n} labels")
    if declared["path_offsets"].count != n + 1:
        raise _damaged(path, f"array 'path_offsets' declares {declared['path_offsets'].count} entries for {n} labels "
                             f"(expected {n + 1})")
    total = sum(d.nbytes for d in declared.values())
    allowed = max(file_size * MAX_INDEX_EXPANSION, MIN_INDEX_ALLOWANCE)
    if total > allowed:
        raise _damaged(path, f"its arrays declare {total} bytes ({n} samples) in a {file_size}-byte file, more than "
                             f"{MAX_INDEX_EXPANSION}x its size; refused before inflating")


def _read_array(path: str | os.PathLike, zf: zipfile.ZipFile, info: zipfile.ZipInfo, declared: _Declared) -> NDArray:
    """The data of a member whose header :func:`_read_header` checked."""
    with zf.open(info) as m:
        m.read(declared.offset)
        raw = m.read(declared.nbytes)
    if len(raw) != declared.nbytes:
        raise _damaged(path, f"array {info.filename!r} is cut short ({len(raw)} of {declared.nbytes} bytes)")
    return np.frombuffer(raw, dtype=declared.dtype)


def _check_meta(path: str | os.PathLike, meta: dict) -> None:
    """Raise IndexFileError unless ``meta`` has the fields and types :meth:`SampleIndex.save` writes."""
    def bad(field_name: str, want: str) -> IndexFileError:
        return _damaged(path, f"metadata field {field_name!r} is {type(meta.get(field_name)).__name__} "
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


MAX_EXAMPLES = 5


def _capped(items: Sequence[str], k: int = MAX_EXAMPLES, sep: str = "; ") -> str:
    """At most ``k`` of ``items`` joined, then ``and N more``: error and log lines stay short."""
    shown = sep.join(items[:k])
    return shown + (f"{sep}and {len(items) - k} more" if len(items) > k else "")


def _reason_kind(reason: str) -> str:
    """The kind of a rejection reason, without its per-file details (for summaries)."""
    for prefix, kind in (("same file as", "same file under two labels"), ("duplicate", "duplicate"),
                         ("conflicting label", "conflicting label")):
        if reason.startswith(prefix):
            return kind
    return reason.split(" (")[0].split(";")[0].split(":")[0]


def _short(reason: str) -> str:
    return reason if len(reason) <= 120 else reason[:117] + "..."


def _rejected_digest(rejected: Sequence[Rejected], listed_below: bool = False) -> str:
    """``N (kind: count, ...; e.g. path: reason, ...)`` with a handful of kinds and examples."""
    kinds = Counter(_reason_kind(r.reason) for r in rejected).most_common()
    text = _capped([f"{k}: {v}" for k, v in kinds], sep=", ")
    examples = _capped([f"{r.path}: {_short(r.reason)}" for r in rejected[:3]] + [""] * max(0, len(rejected) - 3), 3)
    if listed_below and len(rejected) > 3:
        examples += ", all listed below"
    return f"{len(rejected)} ({text}; e.g. {examples})"


def _grouped(entries: Sequence[Rejected], kind_of: Callable[[str], str], detail: bool) -> list[str]:
    """Lines listing every distinct path of ``entries`` under its kind of reason (kinds by count).

    A path that appears several times in one kind (a file listed on many manifest lines) is listed
    once with its first reason and the count. ``detail``: show the reason after the path when it
    says more than the kind.
    """
    groups: dict[str, dict[str, list[str]]] = {}
    for r in entries:
        groups.setdefault(kind_of(r.reason), {}).setdefault(r.path, []).append(r.reason)
    lines = []
    for kind, paths in sorted(groups.items(), key=lambda kv: (-sum(map(len, kv[1].values())), kv[0])):
        lines.append(f"  {kind} ({sum(map(len, paths.values()))}):")
        for path, reasons in paths.items():
            line = f"    {path}"
            if detail and reasons[0] != kind:
                line += f": {_short(reasons[0])}"
            if len(reasons) > 1:
                line += f" (and {len(reasons) - 1} more time{'s' if len(reasons) > 2 else ''})"
            lines.append(line)
    return lines


def _reject_same_file_twice(cand: _Candidates, classes: Sequence[str], reasons: list[str | None],
                            identities: list[tuple]) -> None:
    """Set a reason on candidates that are one file reached by two paths (symlinks, hard links).

    Under two labels, every path to the file is rejected (one image cannot have two labels); in one
    class, the first path (in candidate order) is kept and the others are reported as duplicates.
    """
    groups: dict[tuple, list[int]] = {}
    for i, (reason, ident) in enumerate(zip(reasons, identities)):
        if reason is None and ident:
            groups.setdefault(ident, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        if len({cand.labels[i] for i in members}) > 1:
            for i in members:
                others = [j for j in members if cand.labels[j] != cand.labels[i]]
                j = others[0]
                more = f" and {len(others) - 1} more" if len(others) > 1 else ""
                reasons[i] = (f"same file as {cand.paths[j]} (class {classes[cand.labels[j]]}){more}: one image cannot "
                              "have two labels; remove one link")
        else:
            first = members[0]
            for i in members[1:]:
                reasons[i] = (f"duplicate: same file as {cand.paths[first]} (class {classes[cand.labels[first]]}), "
                              "indexed once; remove the extra link")


def _nothing_indexed(root: Path, cand: _Candidates, rejected: Sequence[Rejected]) -> str:
    """The error text for an index with no samples: what was found instead."""
    where = f"under {str(root)!r}"
    if rejected:
        n = len(rejected)
        text = f"no usable JPEG files {where}: {n} file{'s' if n != 1 else ''} rejected ({_rejected_digest(rejected).split(' (', 1)[1]}"
    else:
        text = f"no JPEG files {where}"
        if cand.extensions:
            top = cand.extensions.most_common(3)
            parts = [f"{k} {ext[1:].upper() if ext else 'extension-less'} file{'s' if k != 1 else ''}" for ext, k in top]
            other = sum(cand.extensions.values()) - sum(k for _, k in top)
            if other:
                parts.append(f"{other} other file{'s' if other != 1 else ''}")
            text += ": " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])
            text += " ignored (only .jpg/.jpeg is supported)"
    hidden = {k: v for k, v in cand.ignored.items() if k != NOT_JPEG}
    if hidden:
        text += "; also skipped: " + ", ".join(f"{k}: {v}" for k, v in sorted(hidden.items()))
    if rejected and all(r.reason == "missing file" for r in rejected):
        how = _opt("root")
        return text + (f". No listed file exists under {str(root)!r}: the manifest's paths must be relative to it"
                       + (f" (pass {how} the folder they are relative to)" if how else ""))
    return text + (". Fix or remove the rejected files" if rejected else ". Check the path, or convert the images to JPEG")


_STATE_SLOTS = ("root", "_paths", "labels", "classes", "sizes", "mtimes", "widths", "heights", "rejected", "ignored",
                "ignored_files", "fingerprint")


def _restore_index(values: tuple) -> SampleIndex:
    index = SampleIndex.__new__(SampleIndex)
    for name, value in zip(_STATE_SLOTS, values):
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        object.__setattr__(index, name, value)
    return index


def split_keys(paths: Iterable[str], seed: int) -> NDArray[np.float64]:
    """A uniform number in [0, 1) per path, a pure function of (seed, path)."""
    prefix = f"{int(seed)}\0".encode()
    return np.array([int.from_bytes(hashlib.blake2b(prefix + p.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "little")
                     for p in paths], dtype=np.float64) / 2.0**64


# The colour modes verify="decode" decodes every file in: (simplejpeg colorspace, OpenCV imread flag name).
# Both, because the index does not know which mode its loaders will decode in, and a file can decode in
# one mode only: lossless JPEG (1 component: gray only, 3: RGB only). The header check refuses those,
# the one such layout the experiments of issue 18 found, but the check is meant to run every decode a
# loader will. The cost, one worker, 50 colour files: 160x120 takes 6.0 ms gray only (before issue 18),
# 7.0 ms RGB only, 10.4 ms both (header check alone 2.4 ms); 640x480 takes 50.7 / 63.7 / 110.6 ms
# (header 4.9 ms). RGB first: it reconstructs every component, so it reports corrupt scan data first.
_DECODE_CHECK_MODES = (("RGB", "IMREAD_COLOR"), ("GRAY", "IMREAD_GRAYSCALE"))


def _decode_check(path: str) -> str | None:
    """Decode ``path`` fully, in colour and in gray (:data:`_DECODE_CHECK_MODES`); ``None`` if it decodes
    cleanly in both, else the reason.
    """
    try:
        import simplejpeg
    except ImportError as e:  # a declared dependency; only verify="decode" needs it
        raise MissingDependencyError("verify='decode' needs the simplejpeg package: pip install 'simplejpeg>=1.7'") from e
    try:
        with open_regular(path) as f:
            data = f.read()
    except OSError as e:  # not a regular file any more, vanished, unreadable
        return str(e) if e.strerror is None else f"unreadable ({type(e).__name__}: {e.strerror})"
    if not data:
        return "empty file (0 bytes)"
    for colorspace, flag in _DECODE_CHECK_MODES:
        reason = _decode_reason(simplejpeg, data, colorspace, flag)
        if reason:
            return reason
    return None


def _decode_reason(simplejpeg, data: bytes, colorspace: str, flag: str) -> str | None:
    """Why ``data`` does not decode cleanly in ``colorspace`` (``"RGB"`` or ``"GRAY"``), or None.

    libjpeg-turbo (through ``simplejpeg``, strict mode) turns its recoverable-error warnings into
    errors: a scan cut short and re-terminated with an end-of-image marker decodes in OpenCV with
    only a warning on stderr (the missing rows come out flat grey), so OpenCV alone cannot see it.
    Files that TurboJPEG's API refuses outright (exotic sampling layouts) get a second opinion from
    OpenCV's libjpeg, with imread flag ``flag``: accepted if it decodes them.
    """
    try:
        simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True)
        return None
    except ValueError as strict_error:
        message = str(strict_error).strip()
    try:
        simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=False)
    except ValueError:
        pass  # a hard error, not a warning: let OpenCV decide below
    else:
        return f"corrupt or truncated scan data: {message}"
    import cv2  # only for verify="decode"

    if cv2.imdecode(np.frombuffer(data, dtype=np.uint8), getattr(cv2, flag)) is None:
        mode = "colour" if colorspace == "RGB" else "gray"
        return (f"decoder refused the file in {mode} (corrupt entropy data or unsupported JPEG; "
                f"libjpeg-turbo: {message})")
    return None


PATH_COLUMNS = ("path", "file", "filename", "file_name", "filepath", "file_path", "image", "image_path",
                "image_file", "image_name", "img", "img_path", "relative_path", "relpath", "fname")
LABEL_COLUMNS = ("label", "class", "class_name", "classname", "target", "category", "label_name", "y")
SPLIT_COLUMNS = ("split", "subset", "set", "fold", "partition", "phase")


def _column_name(cell: str) -> str:
    return cell.strip().lower().replace(" ", "_").replace("-", "_")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# Encodings spreadsheet programs on Windows save CSV files in, tried (in this order) to show the user how an
# undecodable manifest line reads in each: Chinese (GBK, Excel's "CSV" on a Chinese Windows) and Western European.
LEGACY_ENCODINGS = ("gbk", "cp1252")


def _manifest_text(path: Path, encoding: str | None = None) -> str:
    """The manifest's text, decoded as UTF-8 (a byte-order mark is skipped) or as ``encoding``.

    A byte that does not decode is a ManifestError naming the file, the line, the byte offset and the
    fix (re-save as UTF-8, or pass ``encoding=``: the message shows how the line reads in
    :data:`LEGACY_ENCODINGS`); so is a NUL byte (binary data).
    """
    if encoding is not None:
        try:
            codecs.lookup(encoding)
        except (LookupError, TypeError):
            raise ConfigError(f"{_name('encoding', encoding)} is not a text encoding Python knows; pass e.g. 'utf-8', "
                              "'gbk' or 'cp1252'") from None
    try:
        with open_regular(path) as f:  # a FIFO named labels.csv must not block
            data = f.read()
    except OSError as e:
        raise ManifestError(f"manifest {str(path)!r} is unreadable ({e.strerror or e}); pass the path of a CSV or JSON "
                            "file") from e
    try:
        text = data.decode(encoding or "utf-8-sig")
    except UnicodeDecodeError as e:
        raise ManifestError(_undecodable(path, data, e, encoding)) from None
    text = text.removeprefix("\ufeff")  # a byte-order mark, also when encoding='utf-8' or 'utf-16' was given
    nul = text.find("\0")
    if nul >= 0:
        raise ManifestError(f"{path}: line {_line_of(text, nul)} contains a NUL byte (binary data?); a manifest is a "
                            "UTF-8 CSV or JSON text file")
    return text


def _undecodable(path: Path, data: bytes, e: UnicodeDecodeError, encoding: str | None) -> str:
    """The error text for a manifest that does not decode: where, which byte, and how to fix it."""
    start = data.rfind(b"\n", 0, e.start) + 1
    end = data.find(b"\n", e.start)
    line_bytes = data[start:end if end >= 0 else len(data)].rstrip(b"\r")
    line = data[:e.start].count(b"\n") + 1
    what = "UTF-8" if encoding is None else repr(encoding)
    text = f"{path}: line {line} is not {what} (byte 0x{data[e.start]:02x} at offset {e.start})"
    readings = []
    for enc in LEGACY_ENCODINGS:
        if encoding is not None and codecs.lookup(enc).name == codecs.lookup(encoding).name:
            continue
        try:
            data.decode(enc)
        except UnicodeDecodeError:
            continue  # the file is not in this encoding either
        shown = line_bytes.decode(enc)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        readings.append(f"as {_opt('encoding', enc)} it reads {shown!r}")
    fix = "save the manifest as UTF-8 (Excel: Save As > 'CSV UTF-8')"
    how = _opt("encoding")
    if how is not None:
        fix += f", or pass {how} naming the encoding it was saved in"
        if readings:
            fix += " (" + "; ".join(readings) + ")"
    return f"{text}; {fix}"


def _read_manifest(path: Path, split: str | None, root: Path | None = None, path_column: str | None = None,
                   label_column: str | None = None, split_column: str | None = None,
                   encoding: str | None = None) -> list[tuple[str, str, str]]:
    """``(where, path, label)`` rows of a JSON or CSV manifest; ``where`` is ``"line N"``."""
    text = _manifest_text(path, encoding)
    if path.suffix.lower() == ".json":
        if path_column or label_column or split_column:
            given = ", ".join(o for o in (_opt(k) for k, v in (("path_column", path_column), ("label_column", label_column),
                                                                ("split_column", split_column)) if v) if o)
            raise ManifestError(f"manifest {str(path)!r}: {given} apply to CSV manifests; a JSON manifest is "
                                "{\"relative/path.jpg\": \"class\"}: drop them")

        def no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
            out: dict = {}
            for k, v in pairs:
                if k in out:
                    raise ManifestError(f"{path}: key {k!r} appears more than once (line "
                                        f"{_json_key_line(text, k, 2)}); give each file one label")
                out[k] = v
            return out

        try:
            data = json.loads(text, object_pairs_hook=no_duplicate_keys)
        except json.JSONDecodeError as e:
            raise ManifestError(f"manifest {str(path)!r} is not valid JSON ({e})") from e
        except RecursionError:
            raise ManifestError(f"manifest {str(path)!r}: JSON nested too deeply; expected one flat object") from None
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise ManifestError(f"manifest {str(path)!r} must be a JSON object {{\"relative/path.jpg\": \"class\"}}")
        if split is not None:
            raise ManifestError(f"manifest {str(path)!r}: {_name('split', split)} needs a CSV manifest with a split "
                                "column; a JSON manifest has none: drop it")
        rows = []
        for i, (k, v) in enumerate(data.items()):
            if not k.strip() or not v.strip():
                what = "empty path" if not k.strip() else f"empty label for {k!r}"
                raise ManifestError(f"{path}: line {_json_key_line(text, k)}: {what}; give every file a class name or "
                                    "remove the entry (an empty label would become a class '')")
            rows.append((f"entry {i + 1}", k, v.strip()))  # the path as written: see _path_as_written
        return rows
    return _read_csv_manifest(path, text, split, root, path_column, label_column, split_column)


def _json_key_line(text: str, key: str, occurrence: int = 1) -> int | str:
    """Line of the ``occurrence``-th appearance of ``key`` as a JSON string in ``text`` (for messages)."""
    pos = -1
    for encoded in (json.dumps(key, ensure_ascii=False), json.dumps(key)):
        pos, start = -1, 0
        for _ in range(occurrence):
            pos = text.find(encoded, start)
            if pos < 0:
                break
            start = pos + 1
        if pos >= 0:
            return _line_of(text, pos)
    return "?"


def _csv_records(path: Path, text: str) -> Iterator[tuple[int, list[str]]]:
    """``(line, row)`` for every CSV record with a non-blank cell; ``line`` is where the record starts.

    A CSV error (most often a quote opened and never closed, which swallows the rest of the file
    into one field until it passes ``csv.field_size_limit()``) is a ManifestError naming the line.
    """
    reader = csv.reader(io.StringIO(text))
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            fix = ("a quote opened there is probably never closed (or a cell holds more than "
                   f"{csv.field_size_limit()} characters); fix the quoting" if "field limit" in str(e)
                   else "fix the CSV quoting there")
            raise ManifestError(f"{path}: the record starting on line {start} is not valid CSV ({e}); {fix}") from None
        if row and any(c.strip() for c in row):
            yield start, row
        start = reader.line_num + 1


def _path_as_written(root: Path, rel: str) -> str:
    """The file a manifest path names: as written if that file exists, else the first that exists of:
    surrounding whitespace stripped, then (where ``/`` is the separator) backslashes read as ``/``.

    Spaces after the commas of a CSV (``a.jpg, ok``) are formatting, but a file may really be named
    `` lead.jpg``: the exact name wins when it exists, the stripped one otherwise. A manifest written
    on Windows separates folders with ``\\`` (``scratch\\img1.jpg``), an ordinary character in a
    POSIX file name: a file really named so wins, else ``scratch/img1.jpg``. A path found under none
    of these forms is reported missing under the stripped one, with ``/`` for ``\\``.
    """
    def exists(p: str) -> bool:
        return os.path.lexists(p if os.path.isabs(p) else os.path.join(root, p))

    stripped = rel.strip()
    forms = [rel] if stripped == rel else [rel, stripped]
    if os.sep == "/" and "\\" in stripped:
        forms.append(stripped.replace("\\", "/"))
    if len(forms) == 1:
        return rel
    return next((p for p in forms if exists(p)), forms[-1])


def _read_csv_manifest(path: Path, text: str, split: str | None, root: Path | None, path_column: str | None,
                       label_column: str | None, split_column: str | None) -> list[tuple[str, str, str]]:
    reader = _csv_records(path, text)
    first = next(reader, None)
    if first is None:
        return []
    line1, head = first
    second = next(reader, None)
    reader = itertools.chain([second] if second is not None else [], reader)
    names = [_column_name(c) for c in head]
    asked = {k: v for k, v in (("path_column", path_column), ("label_column", label_column),
                               ("split_column", split_column)) if v is not None}

    def find(wanted: str | None, synonyms: tuple[str, ...], arg: str) -> int | None:
        if wanted is not None:
            if _column_name(wanted) not in names:
                raise ManifestError(f"{path}: {_name(arg, wanted)} is not a column of the header on line {line1} "
                                    f"(columns: {', '.join(repr(c) for c in head)})")
            return names.index(_column_name(wanted))
        return next((names.index(n) for n in synonyms if n in names), None)

    def is_file_cell(cell: str) -> bool:
        cell = cell.strip()
        return _column_name(cell).endswith(JPEG_EXTENSIONS) or (
            root is not None and bool(cell) and os.path.exists(os.path.join(root, cell)))

    p_i, l_i, s_i = (find(path_column, PATH_COLUMNS, "path_column"), find(label_column, LABEL_COLUMNS, "label_column"),
                     find(split_column, SPLIT_COLUMNS, "split_column"))
    looks_like_data = any(_column_name(c).endswith(JPEG_EXTENSIONS) for c in head) or (
        root is not None and bool(head[0].strip()) and os.path.exists(os.path.join(root, head[0].strip())))
    header = bool(asked) or (not looks_like_data and (p_i is not None or l_i is not None))
    # the columns to name: the data row under the header shows which column holds file names
    guess_p = p_i if p_i is not None else next(
        (i for i, c in enumerate(second[1] if second else []) if i < len(head) and is_file_cell(c)), None)
    others = [i for i in range(len(head)) if i != guess_p and i != s_i]
    guess_l = l_i if l_i is not None else others[0] if guess_p is not None and len(others) == 1 else None
    if guess_p is not None and guess_l is not None:
        columns = f"{_opt('path_column', head[guess_p].strip())} and {_opt('label_column', head[guess_l].strip())}"
    else:
        columns = f"{_opt('path_column')} and {_opt('label_column')} naming them"
    accepted = (f"a header needs a path column ({', '.join(PATH_COLUMNS)}) and a label column "
                f"({', '.join(LABEL_COLUMNS)}), optionally a split column ({', '.join(SPLIT_COLUMNS)}); for other "
                f"names pass {columns}")
    if header:
        if p_i is None or l_i is None:
            missing = "path" if p_i is None else "label"
            raise ManifestError(f"{path}: the header on line {line1} ({', '.join(repr(c) for c in head)}) has no "
                                f"{missing} column; {accepted}")
        if split is not None and s_i is None:
            raise ManifestError(f"{path}: {_name('split', split)} was asked but the header on line {line1} has no split "
                                f"column ({', '.join(SPLIT_COLUMNS)}); pass {_opt('split_column')} naming it")
        body, width = reader, len(head)
    else:
        if not looks_like_data:
            raise ManifestError(f"{path}: line {line1} ({', '.join(repr(c) for c in head)}) looks like a header but "
                                f"names no known column; {accepted}")
        body, width = [first, *reader], None
        p_i, l_i, s_i = 0, 1, 2
    rows = []
    for line, row in body:
        if width is None and len(row) not in (2, 3):
            raise ManifestError(f"{path}: line {line} has {len(row)} columns ({row!r}); expected path,label[,split]")
        if width is not None and len(row) != width:
            raise ManifestError(f"{path}: line {line} has {len(row)} columns, the header on line {line1} has {width}")
        rel, label = row[p_i], row[l_i].strip()  # the path as written: see _path_as_written
        if not rel.strip() or not label:
            what = "empty path" if not rel.strip() else f"empty label for {rel.strip()!r}"
            raise ManifestError(f"{path}: line {line}: {what}; give every file a class name or remove the line (an "
                                "empty label would become a class '')")
        if split is not None:
            if s_i >= len(row):
                raise ManifestError(f"{path}: line {line} has no split column but {_name('split', split)} was asked")
            if row[s_i].strip() != split:
                continue
        rows.append((f"line {line}", rel, label))
    return rows
