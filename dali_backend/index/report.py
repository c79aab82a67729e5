"""What an index tells a person: rejected and ignored files grouped by reason."""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..errors import FilesNotIndexedWarning
from ..formats import registry
from .kinds import formats_text
from .options import NOT_JPEG, option_phrase
from .walk import Rejected, Candidates, count_text

from .options import capped

log = logging.getLogger("dali_backend")





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
    text = capped([f"{k}: {v}" for k, v in kinds], sep=", ")
    examples = capped([f"{r.path}: {_short(r.reason)}" for r in rejected[:3]] + [""] * max(0, len(rejected) - 3), 3)
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


def reject_duplicate_files(cand: Candidates, classes: Sequence[str], reasons: list[str | None],
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


def shared_identities(inode: np.ndarray, good: np.ndarray, no_inode: dict[int, str]) -> list[tuple]:
    """Per candidate, its file identity where another accepted candidate may be the same file, else ``()``
    (what :func:`reject_duplicate_files` groups; a million distinct tuples would cost ~100 MB)."""
    ids: list[tuple] = [()] * len(inode)
    accepted = np.flatnonzero(good & (inode[:, 1] != 0))
    if accepted.size:
        _, inverse, counts = np.unique(inode[accepted], axis=0, return_inverse=True, return_counts=True)
        for i in accepted[counts[inverse.reshape(-1)] > 1].tolist():
            ids[i] = (int(inode[i, 0]), int(inode[i, 1]))
    for i, real in no_inode.items():
        if good[i]:
            ids[i] = (real,)
    return ids


def nothing_indexed(root: Path, cand: Candidates, rejected: Sequence[Rejected]) -> str:
    """The error text for an index with no samples: what was found instead."""
    where = f"under {str(root)!r}"
    if rejected:
        n = len(rejected)
        text = f"no usable image files {where}: {n} file{'s' if n != 1 else ''} rejected ({_rejected_digest(rejected).split(' (', 1)[1]}"
    else:
        text = f"no image files {where}"
        if cand.extensions:
            top = cand.extensions.most_common(3)
            parts = [f"{k} {ext[1:].upper() if ext else 'extension-less'} file{'s' if k != 1 else ''}" for ext, k in top]
            other = sum(cand.extensions.values()) - sum(k for _, k in top)
            if other:
                parts.append(f"{other} other file{'s' if other != 1 else ''}")
            text += ": " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])
            text += f" ignored (the index takes {', '.join(registry.extensions())})"
    hidden = {k: v for k, v in cand.ignored.items() if k != NOT_JPEG}
    if hidden:
        text += "; also skipped: " + ", ".join(f"{k}: {v}" for k, v in sorted(hidden.items()))
    if rejected and all(r.reason == "missing file" for r in rejected):
        how = option_phrase("root")
        return text + (f". No listed file exists under {str(root)!r}: the manifest's paths must be relative to it"
                       + (f" (pass {how} the folder they are relative to)" if how else ""))
    return text + (". Fix or remove the rejected files" if rejected else ". Check the path, or convert the images to a "
                                                               "supported format (PNG keeps every level)")


def losses(index) -> dict[str, Counter]:
    """Files a person would expect in the index and that are not there, per class: rejected (for their
    content; a manifest's duplicate line is no lost file) and ignored for their extension (:data:`NOT_JPEG`), counted by reason kind under the first
    class name among each path's folders (``""``: under no class folder). Hidden files are not counted."""
    classes = set(index.classes)
    out: dict[str, Counter] = {}
    lost = [(r.path, "rejected") for r in index.rejected if _reason_kind(r.reason) != "duplicate"]  # a line again
    lost += [(r.path, NOT_JPEG) for r in index.ignored_files if r.reason == NOT_JPEG]
    for path, why in lost:
        owner = next((part for part in path.split("/")[:-1] if part in classes), "")
        out.setdefault(owner, Counter())[why] += 1
    return out


def losses_text(index) -> str | None:
    """One sentence: how many files each class lost and why (:func:`losses`), or None when none did."""
    lost = losses(index)
    if not lost:
        return None
    counts = dict(zip(index.classes, index.class_counts()))
    parts = []
    for owner, why in sorted(lost.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        n = sum(why.values())
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(why.items()))
        where = (f"class {owner!r} lost {n} of {n + int(counts[owner])}" if owner
                 else f"{count_text(n, 'file')} outside the classes")
        parts.append(f"{where} ({reasons})")
    total = sum(sum(c.values()) for c in lost.values())
    return (f"{count_text(total, 'file')} under {index.root} left out of the index: " + "; ".join(parts)
            + ". index.summary() lists each file with its reason")


def warn_losses(index) -> None:
    """Say :func:`losses_text` at build time: a WARNING on the ``dali_backend`` logger and a
    :class:`~dali_backend.errors.FilesNotIndexedWarning` (the logger has only a ``NullHandler`` until the
    application configures logging, so the warning is what a plain script shows)."""
    text = losses_text(index)
    if text:
        log.warning("%s", text)
        warnings.warn(FilesNotIndexedWarning(text), stacklevel=5)  # the caller of from_folder/...


def summary_text(index) -> str:
    """:meth:`SampleIndex.summary`: the headline, what each class lost, then every rejected and ignored
    file grouped by reason."""
    lines = [headline(index, listed_below=True)]
    targets = targets_text(index)
    if targets:
        lines.append(targets)
    lost = losses_text(index)
    if lost:
        lines.append(lost)
    if index.rejected:
        lines.append(f"rejected files ({len(index.rejected)}):")
        lines += _grouped(index.rejected, _reason_kind, detail=True)
    if index.ignored_files:
        lines.append(f"ignored files ({len(index.ignored_files)}):")
        lines += _grouped(index.ignored_files, lambda reason: reason, detail=False)
    return "\n".join(lines)


def targets_text(index) -> str | None:
    """One line on an index's masks and boxes (:attr:`~dali_backend.index.SampleIndex.annotations`), or None
    without targets: how many images have a mask file and the class ids, how many boxes on how many
    images and per box class."""
    t = getattr(index, "annotations", None)
    if t is None:
        return None
    parts = []
    if "masks" in t.kinds:
        files = sum(t.mask_path(i) is not None for i in range(len(index)))
        parts.append(f"masks: {files} of {count_text(len(index), 'image')} with a mask file (the others all background), "
                     f"class ids 0..{t.num_classes - 1}{' (mask files 0 and one value, read as 0/1)' if t.binary else ''}")
    if "boxes" in t.kinds:
        counts = np.diff(t.box_offsets)
        ids, per = np.unique(t.box_labels, return_counts=True)
        parts.append(f"boxes: {int(counts.sum())} on {int((counts > 0).sum())} of {count_text(len(index), 'image')} "
                     "(per box class: " + ", ".join(f"{int(c)}: {int(k)}" for c, k in zip(ids, per)) + ")")
    return "targets: " + "; ".join(parts)


def headline(index, listed_below: bool = False) -> str:
    """One line: counts per class, per format and bit depth (:func:`.kinds.formats_text`), rejected files by kind
    with a few examples, ignored files by kind."""
    counts = ", ".join(f"{c} {k}" for c, k in zip(index.classes, index.class_counts()))
    text = (f"indexed {count_text(len(index), 'file')} in {count_text(len(index.classes), 'class', 'classes')} ({counts}) "
            f"under {index.root}; {formats_text(index.format_ids, index.format_names, index.bit_depths)}")
    if index.rejected:
        text += f"; rejected {_rejected_digest(index.rejected, listed_below)}"
    if index.ignored:
        text += f"; ignored {sum(index.ignored.values())} (" + ", ".join(f"{k}: {v}" for k, v in sorted(index.ignored.items())) + ")"
    return text
