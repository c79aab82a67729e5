"""Walking a data root: candidate files, what is ignored or refused, split layouts and class names."""

from __future__ import annotations

import os
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import IndexBuildError

from ..formats import registry
from .options import NOT_JPEG, PACKAGE_FILES

from .options import index_first, option_name, option_phrase

from .options import capped





@dataclass(frozen=True)
class Rejected:
    """A file that is not in the index, and why. ``path`` is relative to the index root."""

    path: str
    reason: str


@dataclass
class Candidates:
    """Files proposed for the index before validation."""

    paths: list[str]
    labels: list[int]
    rejected: list[Rejected]
    ignored: Counter
    extensions: Counter = field(default_factory=Counter)  # non-JPEG files by extension, for error messages
    ignored_files: list[Rejected] = field(default_factory=list)  # (path, kind) of every ignored entry

    def listed(self, seen: dict, entries: list, rel: str, label, where: str) -> None:
        """A manifest row naming ``rel`` with ``label`` at ``where``: kept in ``entries`` the first time
        (``seen`` remembers where), rejected as a duplicate or a conflicting label after that."""
        if rel in seen:
            first_where, first_label = seen[rel]
            what = "conflicting label " + repr(label) + " vs " + repr(first_label) if label != first_label else "duplicate"
            self.rejected.append(Rejected(rel, f"{what}: listed again at {where} (first at {first_where})"))
            return
        seen[rel] = (where, label)
        entries.append((rel, label))

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


def count_text(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1: ``1 file``, ``2 files``, ``3 entries``."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def norm_rel(rel: str) -> str:
    return rel.replace(os.sep, "/")


def is_inside(path: str, root_real: str) -> bool:
    return path == root_real or path.startswith(root_real.rstrip(os.sep) + os.sep)


def _sorted_entries(folder: str, root: str, cand: Candidates) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as e:
        cand.rejected.append(Rejected(norm_rel(os.path.relpath(folder, root)), f"unreadable folder ({e.strerror or e})"))
        return []


def walk_images(top: str, root: str, root_real: str, allow_outside_symlinks: bool, cand: Candidates, label: int,
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
        rel = norm_rel(os.path.relpath(entry.path, root))
        if name.startswith("."):
            cand.ignore(name, rel)
            continue
        target = os.path.join(folder_real, name)
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            if not os.path.exists(target):
                cand.rejected.append(Rejected(rel, f"broken symlink (-> {os.readlink(entry.path)})"))
                continue
            if not allow_outside_symlinks and not is_inside(target, root_real):
                cand.rejected.append(Rejected(rel, f"symlink leaves the data root (-> {target}); "
                                                   f"{follow_symlinks_hint(root)}"))
                continue
        if entry.is_dir(follow_symlinks=True):
            if target in visited:
                cand.skip(rel, "symlink loop")
                continue
            visited.add(target)
            stack.append((iter(_sorted_entries(entry.path, root, cand)), target))
        elif registry.is_image_name(name):
            cand.paths.append(rel)
            cand.labels.append(label)
        else:
            cand.ignore(name, rel)


def follow_symlinks_hint(root: str | os.PathLike) -> str:
    """How to follow a symlink that leaves the data root, for whoever called."""
    flag = option_phrase("allow_outside_symlinks", True)
    return f"pass {flag} to follow it" if flag else f"to follow it, {index_first(root, 'allow_outside_symlinks', True)}"


def subfolders(path: str) -> list[str]:
    return sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))


SPLIT_FOLDERS = frozenset({"train", "training", "val", "valid", "validation", "test", "testing"})


def refuse_split_layout(root: Path | str, found: Sequence[str],
                         subdirs: Callable[[str], list[str]] | None = None) -> None:
    """Raise IndexBuildError if ``root`` holds split folders (``train/<class>/``) instead of classes.

    ``subdirs(name)`` lists the folders inside ``root``'s folder ``name`` (default: on disk; a bucket's
    listing for a URL root, given as a string)."""
    if subdirs is None:
        subdirs = lambda name: subfolders(str(Path(root) / name))  # noqa: E731
    splits = {name: subdirs(name) for name in found if name.lower() in SPLIT_FOLDERS}
    splits = {name: sub for name, sub in splits.items() if sub}
    if not splits:
        return
    first = sorted(splits)[0] if "train" not in splits else "train"
    shown = "; ".join(f"{name}/ holds {capped(sub, 3, ', ')}" for name, sub in sorted(splits.items()))
    as_root_text = f"{root}/{first}" if isinstance(root, str) else str(root / first)
    split, as_root, classes = option_phrase("split", first), option_phrase("root", as_root_text), option_phrase("classes", sorted(found))
    if split:
        fix = f"Pass {split} to index one split" + (f", or pass {as_root}" if as_root else "")
    else:
        fix = "To index one split, " + (f"pass {as_root}, or " if as_root else "") + index_first(root, "split", first)
    fix += (f". If these really are classes, pass {classes}" if classes else
            f". If these really are classes, {index_first(root, 'classes', sorted(found))}")
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
        raise error(capped(pairs))


def _resolve_classes(found: Sequence[str], classes: Sequence[str] | None, error) -> list[str]:
    """``classes`` as given (every found name must be in it), or the sorted found names."""
    if classes is None:
        return list(found)
    classes = list(classes)
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise error(unknown, classes)
    return classes


def class_folders(found: Sequence[str], classes: Sequence[str] | None, root, base: str,
                  items: str = "files") -> list[str]:
    """The classes of a folder layout: ``classes`` checked against the class folders ``found`` under
    ``base`` (or ``found`` itself, refusing look-alike names), for the builders of a local root and of
    a bucket (``items``: what a class folder holds, for the messages).

    Raises:
        IndexBuildError: look-alike folder names, folders not in ``classes``, or no class folder.
    """
    if classes is None:
        keep = option_phrase("classes", found)
        keep = (f"pass {keep} to keep them apart" if keep else
                f"to keep them apart, {index_first(root, 'classes', found)}")
        _refuse_lookalikes(found, lambda pairs: IndexBuildError(
            f"class folders {pairs} under {str(root)!r} would become separate classes. Rename one folder of each "
            f"pair (or move its {items} into the other), or {keep}"))
    classes = _resolve_classes(found, classes, lambda unknown, cl: IndexBuildError(
        f"class folders [{capped([repr(u) for u in unknown], sep=', ')}] under {base!r} are not in "
        f"{option_name('classes', cl)}; add them to it or move them out of the root"))
    if not classes:
        raise IndexBuildError(f"no class folders under {base!r}; expected {base}/<class>/*.jpg")
    return classes


def manifest_classes(mpath, entries: Sequence[tuple[str, str]], classes: Sequence[str] | None,
                     cand: Candidates) -> list[str]:
    """The classes of a manifest's ``(path, label)`` entries (``classes`` checked against the labels, or
    the labels found, refusing look-alikes), the entries added to ``cand`` with their class ids.

    Raises:
        ManifestError: look-alike labels, or labels not in ``classes``.
    """
    from ..errors import ManifestError

    labels_found = sorted({lab for _, lab in entries})
    if classes is None:
        _refuse_lookalikes(labels_found, lambda pairs: ManifestError(
            f"{mpath}: labels {pairs} would become separate classes. Spell each class one way in the manifest, "
            f"or pass {option_phrase('classes', labels_found)} to keep them apart"))
    classes = _resolve_classes(labels_found, classes, lambda unknown, cl: ManifestError(
        f"{mpath}: labels {capped([repr(u) for u in unknown], sep=', ')} are not in {option_name('classes', cl)}; add "
        "them or fix the manifest"))
    class_id = {c: i for i, c in enumerate(classes)}
    for rel, lab in entries:
        cand.paths.append(rel)
        cand.labels.append(class_id[lab])
    return classes


def keyword_labelled(found: Candidates, kw) -> Candidates:
    """``found`` (every JPEG under a root, label 0) labelled by keyword rules ``kw``: a file matching no
    class or several goes to the rejected files with the rule's reason, never guessed."""
    cand = Candidates([], [], found.rejected, found.ignored, found.extensions, found.ignored_files)
    class_id = {c: i for i, c in enumerate(kw.classes)}
    for rel in found.paths:
        name, reason = kw.label(rel)
        if name is None:
            cand.rejected.append(Rejected(rel, reason or "unlabelled"))
        else:
            cand.paths.append(rel)
            cand.labels.append(class_id[name])
    return cand
