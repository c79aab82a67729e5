"""Manifests (CSV, JSON): columns, encodings, paths as written."""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigError, ManifestError
from ..formats.jpeg import open_regular

from ..formats.registry import extensions

from .options import option_name, option_phrase





PATH_COLUMNS = ("path", "file", "filename", "file_name", "filepath", "file_path", "image", "image_path",
                "image_file", "image_name", "img", "img_path", "relative_path", "relpath", "fname")
LABEL_COLUMNS = ("label", "class", "class_name", "classname", "target", "category", "label_name", "y")
SPLIT_COLUMNS = ("split", "subset", "set", "fold", "partition", "phase")


def column_name(cell: str) -> str:
    return cell.strip().lower().replace(" ", "_").replace("-", "_")


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# Encodings spreadsheet programs on Windows save CSV files in, tried (in this order) to show the user how an
# undecodable manifest line reads in each: Chinese (GBK, Excel's "CSV" on a Chinese Windows) and Western European.
LEGACY_ENCODINGS = ("gbk", "cp1252")


def manifest_text(path: Path, encoding: str | None = None) -> str:
    """The manifest's text, decoded as UTF-8 (a byte-order mark is skipped; a UTF-16 one means UTF-16) or
    as ``encoding``.

    A byte that does not decode is a ManifestError naming the file, the line, the byte offset and the
    fix (re-save as UTF-8, or pass ``encoding=``: the message shows how the line reads in
    :data:`LEGACY_ENCODINGS`); so is a NUL byte (binary data).
    """
    if encoding is not None:
        try:
            codecs.lookup(encoding)
        except (LookupError, TypeError):
            raise ConfigError(f"{option_name('encoding', encoding)} is not a text encoding Python knows; pass e.g. 'utf-8', "
                              "'gbk' or 'cp1252'") from None
    try:
        with open_regular(path) as f:  # a FIFO named labels.csv must not block
            data = f.read()
    except OSError as e:
        raise ManifestError(f"manifest {str(path)!r} is unreadable ({e.strerror or e}); pass the path of a CSV or JSON "
                            "file") from e
    if encoding is None and data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        encoding = "utf-16"  # a UTF-16 byte-order mark says it all (Excel's "Unicode Text" export)
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
        readings.append(f"as {option_phrase('encoding', enc)} it reads {shown!r}")
    fix = "save the manifest as UTF-8 (Excel: Save As > 'CSV UTF-8')"
    how = option_phrase("encoding")
    if how is not None:
        fix += f", or pass {how} naming the encoding it was saved in"
        if readings:
            fix += " (" + "; ".join(readings) + ")"
    return f"{text}; {fix}"


def read_manifest(path: Path, split: str | None, root: Path | None = None, path_column: str | None = None,
                   label_column: str | None = None, split_column: str | None = None,
                   encoding: str | None = None) -> list[tuple[str, str, str]]:
    """``(where, path, label)`` rows of a JSON or CSV manifest; ``where`` is ``"line N"``."""
    text = manifest_text(path, encoding)
    if path.suffix.lower() == ".json":
        if path_column or label_column or split_column:
            given = ", ".join(o for o in (option_phrase(k) for k, v in (("path_column", path_column), ("label_column", label_column),
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
            raise ManifestError(f"manifest {str(path)!r}: {option_name('split', split)} needs a CSV manifest with a split "
                                "column; a JSON manifest has none: drop it")
        rows = []
        for i, (k, v) in enumerate(data.items()):
            if not k.strip() or not v.strip():
                what = "empty path" if not k.strip() else f"empty label for {k!r}"
                raise ManifestError(f"{path}: line {_json_key_line(text, k)}: {what}; give every file a class name or "
                                    "remove the entry (an empty label would become a class '')")
            rows.append((f"entry {i + 1}", k, v.strip()))  # the path as written: see path_as_written
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


def csv_records(path: Path, text: str) -> Iterator[tuple[int, list[str]]]:
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


def path_as_written(root: Path, rel: str) -> str:
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
    reader = csv_records(path, text)
    first = next(reader, None)
    if first is None:
        return []
    line1, head = first
    second = next(reader, None)
    reader = itertools.chain([second] if second is not None else [], reader)
    names = [column_name(c) for c in head]
    asked = {k: v for k, v in (("path_column", path_column), ("label_column", label_column),
                               ("split_column", split_column)) if v is not None}

    def find(wanted: str | None, synonyms: tuple[str, ...], arg: str) -> int | None:
        if wanted is not None:
            if column_name(wanted) not in names:
                raise ManifestError(f"{path}: {option_name(arg, wanted)} is not a column of the header on line {line1} "
                                    f"(columns: {', '.join(repr(c) for c in head)})")
            return names.index(column_name(wanted))
        return next((names.index(n) for n in synonyms if n in names), None)

    def is_file_cell(cell: str) -> bool:
        cell = cell.strip()
        return column_name(cell).endswith(extensions()) or (
            root is not None and bool(cell) and os.path.exists(os.path.join(root, cell)))

    p_i, l_i, s_i = (find(path_column, PATH_COLUMNS, "path_column"), find(label_column, LABEL_COLUMNS, "label_column"),
                     find(split_column, SPLIT_COLUMNS, "split_column"))
    looks_like_data = any(column_name(c).endswith(extensions()) for c in head) or (
        root is not None and bool(head[0].strip()) and os.path.exists(os.path.join(root, head[0].strip())))
    header = bool(asked) or (not looks_like_data and (p_i is not None or l_i is not None))
    # the columns to name: the data row under the header shows which column holds file names
    guess_p = p_i if p_i is not None else next(
        (i for i, c in enumerate(second[1] if second else []) if i < len(head) and is_file_cell(c)), None)
    others = [i for i in range(len(head)) if i != guess_p and i != s_i]
    guess_l = l_i if l_i is not None else others[0] if guess_p is not None and len(others) == 1 else None
    if guess_p is not None and guess_l is not None:
        columns = f"{option_phrase('path_column', head[guess_p].strip())} and {option_phrase('label_column', head[guess_l].strip())}"
    else:
        columns = f"{option_phrase('path_column')} and {option_phrase('label_column')} naming them"
    accepted = (f"a header needs a path column ({', '.join(PATH_COLUMNS)}) and a label column "
                f"({', '.join(LABEL_COLUMNS)}), optionally a split column ({', '.join(SPLIT_COLUMNS)}); for other "
                f"names pass {columns}")
    if header:
        if p_i is None or l_i is None:
            missing = "path" if p_i is None else "label"
            raise ManifestError(f"{path}: the header on line {line1} ({', '.join(repr(c) for c in head)}) has no "
                                f"{missing} column; {accepted}")
        if split is not None and s_i is None:
            raise ManifestError(f"{path}: {option_name('split', split)} was asked but the header on line {line1} has no split "
                                f"column ({', '.join(SPLIT_COLUMNS)}); pass {option_phrase('split_column')} naming it")
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
        rel, label = row[p_i], row[l_i].strip()  # the path as written: see path_as_written
        if not rel.strip() or not label:
            what = "empty path" if not rel.strip() else f"empty label for {rel.strip()!r}"
            raise ManifestError(f"{path}: line {line}: {what}; give every file a class name or remove the line (an "
                                "empty label would become a class '')")
        if split is not None:
            if s_i >= len(row):
                raise ManifestError(f"{path}: line {line} has no split column but {option_name('split', split)} was asked")
            if row[s_i].strip() != split:
                continue
        rows.append((f"line {line}", rel, label))
    return rows


