"""Frames grouped into sequences: which files form a line camera's recording, and in which order.

A pure function of a :class:`~dali_backend.index.SampleIndex` (and, for :meth:`Sequences.from_manifest`,
a CSV file): by default a sequence is the folder holding its frames, ordered by a natural sort of
their file names (``frame2`` before ``frame10``); a manifest can name each frame's sequence and frame
number instead. Frame numbers (the last number in a file name, or the manifest's frame column) are
checked: a gap is reported (a log warning, :attr:`Sequences.gaps`, :meth:`Sequences.report`), a
number that appears twice in one sequence is refused (two files for one moment cannot be ordered
without guessing).

The result is a handful of numpy arrays (frames in sequence order, offsets, numbers, gaps) and one
:class:`~dali_backend.util.strings.StringTable` of sequence names: a million frames are not a million
Python objects once built (building sorts the names with Python keys once: measured 4-6 s per million frames on a shared 2-core machine).
No torch import: this is the contract layer.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError, ManifestError
from ..util.strings import StringTable

log = logging.getLogger("dali_backend")
__all__ = ["Sequences", "natural_key"]

_DIGITS = re.compile(r"(\d+)")
_LAST_NUMBER = re.compile(r"(\d+)\D*$")
SHOWN = 10  # items named in a message or a report line before "..."


def natural_key(name: str) -> tuple:
    """The natural sort key of ``name``: digit runs compare as numbers (``frame2`` < ``frame10``).

    Text runs compare as text (case-sensitive); names that compare equal as numbers (``f2``,
    ``f02``) are ordered by the name itself, so the order is total and deterministic."""
    parts = _DIGITS.split(name)
    return tuple(int(p) if k % 2 else p for k, p in enumerate(parts)) + (name,)


def frame_number(name: str) -> int:
    """The last number in a file name (its extension left out), or -1 when it holds none."""
    stem = name.rsplit(".", 1)[0] if "." in name else name
    m = _LAST_NUMBER.search(stem)
    return int(m.group(1)) if m else -1


def shown_text(items: list, total: int | None = None) -> str:
    total = len(items) if total is None else total
    return ", ".join(str(x) for x in items[:SHOWN]) + (f", ... ({total} in all)" if total > SHOWN else "")


class Sequences:
    """The index's frames grouped into ordered sequences (numpy arrays; build with a class method).

    Attributes:
        index (SampleIndex): the frames' index.
        names (StringTable): sequence names (the folder, relative to the index root, or the manifest's
            sequence value), in natural order.
        offsets (NDArray[np.int64]): ``[S + 1]``; sequence ``s`` is ``frames[offsets[s]:offsets[s + 1]]``.
        frames (NDArray[np.int64]): ``[N]`` sample indices of the index, sequence by sequence, each
            sequence in frame order. Every sample of the index appears exactly once.
        numbers (NDArray[np.int64]): ``[N]`` each frame's number (the last number in its file name, or
            the manifest's frame column), -1 where a file name holds none.
        gaps (NDArray[np.int64]): ``[G, 3]`` rows ``(sequence, first missing number, last missing
            number)``: numbers missing between a sequence's smallest and largest.
        source (str): ``"folders"`` or the manifest's path.
    """

    __slots__ = ("index", "names", "offsets", "frames", "numbers", "gaps", "source")

    def __init__(self, index, names: StringTable, offsets: NDArray[np.int64], frames: NDArray[np.int64],
                 numbers: NDArray[np.int64], source: str):
        from ..index import SampleIndex

        if not isinstance(index, SampleIndex):
            raise ConfigError(f"Sequences: index must be a SampleIndex, got {type(index).__name__}; build one with "
                              "SampleIndex.from_folder(root)")
        self.index, self.names, self.source = index, names, source
        self.offsets = _frozen(offsets)
        self.frames = _frozen(frames)
        self.numbers = _frozen(numbers)
        if len(self.frames) != len(index) or not np.array_equal(np.sort(self.frames), np.arange(len(index))):
            raise ConfigError("Sequences: every sample of the index must be in exactly one sequence")
        o = self.offsets
        if (len(o) != len(names) + 1 or o[0] != 0 or o[-1] != len(self.frames) or np.any(np.diff(o) < 1)
                or len(self.numbers) != len(self.frames)):
            raise ConfigError(f"Sequences: offsets must rise from 0 to {len(self.frames)} in {len(names)} non-empty "
                              "steps (one per name) and numbers hold one value per frame; build with "
                              "Sequences.from_index or Sequences.from_manifest")
        self._refuse_duplicates()
        self.gaps = _frozen(self._find_gaps())
        if len(self.gaps):
            log.warning("%s: %d gap(s) in the frame numbering: %s (see Sequences.report())", self._what(),
                        len(self.gaps), shown_text(self._gap_texts(), len(self.gaps)))

    # ----------------------------------------------------------------------------------- builders
    @classmethod
    def from_index(cls, index) -> Sequences:
        """Sequences by folder: the frames of one folder (relative to the index root) form a sequence,
        ordered by a natural sort of their file names; frame numbers are the last number in each name.

        Raises:
            ConfigError: a frame number appears twice in one folder (``frame2.jpg`` and ``frame02.jpg``),
                naming the files.
        """
        from ..index import SampleIndex

        if not isinstance(index, SampleIndex):
            raise ConfigError(f"Sequences.from_index: index must be a SampleIndex, got {type(index).__name__}")
        folders, files = [], []
        for p in index.paths:
            folder, _, name = p.rpartition("/")
            folders.append(folder)
            files.append(name)
        numbers = np.fromiter((frame_number(f) for f in files), dtype=np.int64, count=len(files))
        names = sorted(set(folders), key=natural_key)
        seq_id = {name: s for s, name in enumerate(names)}
        seq_of = np.fromiter((seq_id[f] for f in folders), dtype=np.int64, count=len(folders))
        keys = [natural_key(f) for f in files]
        order = np.array(sorted(range(len(files)), key=lambda i: (seq_of[i], keys[i])), dtype=np.int64)
        keys = files = folders = None  # free the per-file lists before building the arrays
        return cls._grouped(index, names, seq_of, order, numbers, "folders")

    @classmethod
    def from_manifest(cls, index, path: str | os.PathLike, sequence_column: str = "sequence",
                      frame_column: str = "frame", *, path_column: str | None = None,
                      encoding: str | None = None) -> Sequences:
        """Sequences from a CSV manifest with a header: a path column, ``sequence_column`` (any text)
        and ``frame_column`` (integer frame numbers); each sequence ordered by its frame numbers.

        Paths are relative to the index root (as the index's) or absolute. Rows naming files outside
        the index are left out (the index may be one split); every frame of the index needs a row.

        Args:
            index: the frames' :class:`~dali_backend.index.SampleIndex`.
            path: the CSV file.
            sequence_column: the name of the column holding each frame's sequence (any text).
            frame_column: the name of the column holding each frame's number (a non-negative integer).
            path_column: the path column's name (default: the first of
                :data:`~dali_backend.index.manifest.PATH_COLUMNS` present).
            encoding: the file's text encoding (default UTF-8).

        Raises:
            ManifestError: a missing column, a frame number that is not an integer, a file listed twice.
            ConfigError: frames of the index without a row, a frame number twice in one sequence.
        """
        from ..index import SampleIndex
        from ..index.manifest import PATH_COLUMNS, column_name, csv_records, manifest_text

        if not isinstance(index, SampleIndex):
            raise ConfigError(f"Sequences.from_manifest: index must be a SampleIndex, got {type(index).__name__}")
        path = Path(path)
        records = csv_records(path, manifest_text(path, encoding))
        first = next(records, None)
        if first is None:
            raise ManifestError(f"{path}: the manifest is empty; it needs a header with a path column, "
                                f"{sequence_column!r} and {frame_column!r}")
        line1, head = first
        names = [column_name(c) for c in head]

        def column(wanted: str, arg: str) -> int:
            if column_name(wanted) not in names:
                raise ManifestError(f"{path}: {arg}={wanted!r} is not a column of the header on line {line1} "
                                    f"(columns: {', '.join(repr(c) for c in head)}); pass {arg}= naming it")
            return names.index(column_name(wanted))

        s_i, f_i = column(sequence_column, "sequence_column"), column(frame_column, "frame_column")
        if path_column is not None:
            p_i = column(path_column, "path_column")
        else:
            p_i = next((names.index(n) for n in PATH_COLUMNS if n in names), None)
            if p_i is None:
                raise ManifestError(f"{path}: the header on line {line1} ({', '.join(repr(c) for c in head)}) has no "
                                    f"path column ({', '.join(PATH_COLUMNS)}); pass path_column= naming it")
        position = {p: i for i, p in enumerate(index.paths)}
        root = index.root
        seq_of = np.full(len(index), -1, dtype=np.int64)
        numbers = np.full(len(index), -1, dtype=np.int64)
        row_of: dict[int, int] = {}
        seq_id: dict[str, int] = {}
        outside = 0
        for line, row in records:
            if len(row) != len(head):
                raise ManifestError(f"{path}: line {line} has {len(row)} columns, the header on line {line1} has "
                                    f"{len(head)}")
            i, rel = None, row[p_i].strip()
            # as written, then (where / separates folders) a Windows manifest's backslashes as /
            for form in dict.fromkeys([rel, rel.replace("\\", "/") if os.sep == "/" else rel]):
                if os.path.isabs(form):
                    form = os.path.relpath(form, root)
                form = os.path.normpath(form).replace(os.sep, "/")
                i = position.get(form)
                if i is not None:
                    rel = form
                    break
            if i is None:
                outside += 1
                continue
            if i in row_of:
                raise ManifestError(f"{path}: {rel!r} is listed on line {row_of[i]} and on line {line}; list each "
                                    "frame once")
            cell = row[f_i].strip()
            try:
                number = int(cell)
            except ValueError:
                number = -1
            if number < 0 or not cell.lstrip("+").isdigit():
                raise ManifestError(f"{path}: line {line}: {frame_column}={cell!r} for {rel!r}; frame numbers must "
                                    "be non-negative integers")
            name = row[s_i].strip()
            if not name:
                raise ManifestError(f"{path}: line {line}: empty {sequence_column} for {rel!r}; give every frame "
                                    "its sequence")
            row_of[i] = line
            seq_of[i] = seq_id.setdefault(name, len(seq_id))
            numbers[i] = number
        missing = np.flatnonzero(seq_of < 0)
        if missing.size:
            shown = [index.paths[int(i)] for i in missing[:SHOWN]]
            raise ConfigError(f"Sequences.from_manifest: {missing.size} frame(s) of the index have no row in {path}: "
                              f"{shown_text(shown, int(missing.size))}; add them to the manifest (sequence and frame), or "
                              "build the index from the manifest's files only")
        if outside:
            log.info("Sequences.from_manifest: %d row(s) of %s name files outside the index (another split?); "
                     "left out", outside, path)
        # sequences in natural order of their names, frames by number
        ordered = sorted(seq_id, key=natural_key)
        renumber = np.empty(len(ordered), dtype=np.int64)
        for new, name in enumerate(ordered):
            renumber[seq_id[name]] = new
        seq_of = renumber[seq_of]
        order = np.lexsort((numbers, seq_of)).astype(np.int64)
        return cls._grouped(index, ordered, seq_of, order, numbers, str(path))

    @classmethod
    def _grouped(cls, index, names: list[str], seq_of: NDArray[np.int64], order: NDArray[np.int64],
                 numbers: NDArray[np.int64], source: str) -> Sequences:
        """From each sample's sequence id and an order of the samples sorted by sequence first."""
        counts = np.bincount(seq_of, minlength=len(names)).astype(np.int64)
        offsets = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(index, StringTable.from_strings(names), offsets, order, numbers[order], source)

    # ----------------------------------------------------------------------------------- checks
    def _sequence_of_frames(self) -> NDArray[np.int64]:
        return np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)

    def _refuse_duplicates(self) -> None:
        seq = self._sequence_of_frames()
        known = self.numbers >= 0
        s, n, k = seq[known], self.numbers[known], np.flatnonzero(known)
        order = np.lexsort((n, s))
        same = (s[order][1:] == s[order][:-1]) & (n[order][1:] == n[order][:-1])
        if not same.any():
            return
        dup = np.flatnonzero(same)
        lines = []
        for d in dup[:SHOWN]:
            a, b = self.frames[k[order[d]]], self.frames[k[order[d + 1]]]
            lines.append(f"{self.index.paths[int(a)]!r} and {self.index.paths[int(b)]!r} (frame "
                         f"{int(n[order[d]])} of sequence {self.names[int(s[order[d]])]!r})")
        where = "rename or remove one file of each pair" if self.source == "folders" else \
            f"give each frame its own number in {self.source}"
        raise ConfigError(f"{self._what()}: {len(dup)} duplicate frame number(s): {shown_text(lines, len(dup))}; two "
                          f"files for one frame cannot be ordered without guessing: {where}")

    def _find_gaps(self) -> NDArray[np.int64]:
        seq = self._sequence_of_frames()
        known = self.numbers >= 0
        s, n = seq[known], self.numbers[known]
        order = np.lexsort((n, s))
        s, n = s[order], n[order]
        gap = (s[1:] == s[:-1]) & (n[1:] - n[:-1] > 1)
        at = np.flatnonzero(gap)
        return np.stack([s[at], n[at] + 1, n[at + 1] - 1], axis=1).astype(np.int64).reshape(-1, 3)

    def _gap_texts(self) -> list[str]:
        out = []
        for s, a, b in self.gaps[:SHOWN].tolist():
            missing = f"frame {a}" if a == b else f"frames {a}-{b}"
            out.append(f"{self.names[s]!r} lacks {missing}")
        return out

    def _what(self) -> str:
        return "Sequences (by folder)" if self.source == "folders" else f"Sequences (from {self.source})"

    # ----------------------------------------------------------------------------------- accessors
    def __len__(self) -> int:
        return len(self.names)

    @property
    def lengths(self) -> NDArray[np.int64]:
        """Frames per sequence, ``[S]``."""
        return np.diff(self.offsets)

    def sequence(self, s: int) -> NDArray[np.int64]:
        """The sample indices of sequence ``s``, in frame order."""
        if not 0 <= int(s) < len(self):
            raise IndexError(f"sequence {s} out of range for {len(self)} sequences")
        return self.frames[self.offsets[s]:self.offsets[s + 1]]

    def paths(self, s: int) -> list[str]:
        """The relative paths of sequence ``s``'s frames, in frame order."""
        return [self.index.paths[int(i)] for i in self.sequence(s)]

    @property
    def unnumbered(self) -> int:
        """Frames whose file name holds no number (not checked for gaps or duplicates)."""
        return int((self.numbers < 0).sum())

    def report(self) -> str:
        """Counts, then every gap in the numbering (one line each), and frames without a number."""
        lengths = self.lengths
        head = (f"{len(self)} sequence(s), {len(self.frames)} frame(s) ({self.source}); frames per sequence: "
                f"{int(lengths.min()) if len(lengths) else 0}-{int(lengths.max()) if len(lengths) else 0}; "
                f"{len(self.gaps)} gap(s) in the numbering")
        lines = [head]
        for s, a, b in self.gaps.tolist():
            missing = f"frame {a}" if a == b else f"frames {a}-{b}"
            lines.append(f"  gap: {self.names[s]!r} lacks {missing}")
        if self.unnumbered:
            lines.append(f"  {self.unnumbered} frame(s) have no number in their file name (ordered by name only)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Sequences(n={len(self)}, frames={len(self.frames)}, gaps={len(self.gaps)}, source={self.source!r})"


def _frozen(a) -> NDArray[np.int64]:
    a = np.array(a, dtype=np.int64, copy=True)
    a.flags.writeable = False
    return a
