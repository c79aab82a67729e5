"""How error messages name an option: the library keyword, or the flag of the command line in use."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Literal




from ..formats.jpeg import JPEG

log = logging.getLogger("dali_backend")

JPEG_EXTENSIONS = JPEG.extensions  # the JPEG entry of the format registry (the index takes every entry's)
NOT_JPEG = "other extension"  # why a file whose extension names no registered image format is ignored
# Files this package writes into data folders (dali_backend/core/synthetic.py's cache marker): never
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


def option_phrase(keyword: str, value: object = _BARE) -> str | None:
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


def option_name(keyword: str, value: object) -> str:
    """Option ``keyword=value`` restated (as the caller passed it) in an error message."""
    caller = _CALLER.get()
    flag = caller.get(keyword) if caller is not None else None
    return f"{keyword}={value!r}" if flag is None else _cli_form(flag, value)


def index_first(root: str | os.PathLike, keyword: str, value: object = _BARE) -> str:
    """For a command without option ``keyword``: build the index with ``dali-backend index`` using it."""
    caller = _CALLER.get()
    data = caller.get("root") if caller is not None else "DATA"
    command = (f"index it with `dali-backend index {shlex.quote(os.fspath(root))} "
               f"{_cli_form(INDEX_CLI_FLAGS[keyword], value)} --out index.npz`")
    return command + (f" and pass that file as {data}" if data else "")


MAX_EXAMPLES = 5


def capped(items: Sequence[str], k: int = MAX_EXAMPLES, sep: str = "; ") -> str:
    """At most ``k`` of ``items`` joined, then ``and N more``: error and log lines stay short."""
    shown = sep.join(items[:k])
    return shown + (f"{sep}and {len(items) - k} more" if len(items) > k else "")
