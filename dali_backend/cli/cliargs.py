"""Argument types and error handling shared by ``dali-backend`` and ``python -m bench``.

Both command lines import this module and it imports neither of them, so ``dali_backend.cli`` and
``bench`` have no import cycle. Besides the standard library it imports only library modules, inside
the functions that need them: :mod:`dali_backend.errors` (when a command runs),
:func:`dali_backend.formats.jpeg.file_kind`, :class:`~dali_backend.core.labelling.KeywordRules` (to check
``--keyword-rules``) and :mod:`dali_backend.index` (to load or build an index).

Every user error ends the same way: one line on stderr that names the argument, the value and the
fix, exit status 2, no traceback. Values are checked by argparse ``type=`` functions (before any
work starts); the library's typed errors (:class:`~dali_backend.errors.DaliBackendError`) and
``OSError`` raised later are caught by :func:`run_command`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

USAGE_ERROR = 2
NPZ_MAGIC = b"PK\x03\x04"  # an index file is a numpy .npz, i.e. a zip archive


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (no usage block) pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: object) -> str:
    """``text`` with its line breaks folded into ``" | "`` (an error message for one stderr line)."""
    return " | ".join(part.strip() for part in str(text).splitlines() if part.strip())


def verbosity_parent() -> argparse.ArgumentParser:
    """A parent parser with ``-q``/``-v``, for every subcommand (so they work after the subcommand too).

    Their default is ``SUPPRESS`` so that a subcommand does not reset a flag given before it.
    """
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only warnings and errors")
    g.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="debug logging: resolved arguments, backend choice, timings")
    return p


# ------------------------------------------------------------------------------------------ types
def operation_list(text: str) -> list:
    """``--ops``: operations of :mod:`dali_backend.transforms` written as calls with literal arguments."""
    from ..errors import ConfigError
    from ..transforms import parse_ops

    try:
        return parse_ops(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--ops: ", "").replace(f"--ops {text!r}: ", "")) from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return int_range(1)(text)


def milliseconds(text: str) -> float:
    """A time in milliseconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a time in ms; give a number >= 0, e.g. 120")
    return value


def workers_count(text: str) -> int | str:
    """A worker count (>= 0) or ``auto``."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a worker count; give a number >= 0 or 'auto'")
    return value


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """A ``type=`` function accepting integers in ``[lo, hi]`` (``hi=None``: no upper bound)."""
    want = f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; pass {want}") from None
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{value} is out of range; pass {want}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its own messages
    return parse


def fraction(text: str) -> float:
    """A number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; pass a fraction between 0 and 1, e.g. 0.2") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1 (exclusive); pass e.g. 0.2")
    return value


def size_wxh(text: str) -> tuple[int, int]:
    """``WIDTHxHEIGHT`` in pixels, both >= 1, as ``(width, height)``."""
    parts = text.lower().strip().split("x")
    try:
        w, h = (int(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: use WIDTHxHEIGHT in pixels, e.g. 640x480") from None
    if w < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"size {text!r}: both sides must be >= 1, e.g. 640x480")
    return w, h


def size_list(text: str) -> list[tuple[int, int]]:
    """Comma-separated ``WIDTHxHEIGHT`` sizes, e.g. ``320x240,640x480``; no duplicates."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"sizes {text!r}: pass WIDTHxHEIGHT sizes separated by commas, e.g. 320x240,640x480")
    sizes = [size_wxh(t) for t in items]
    if len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(f"sizes {text!r}: a size is listed twice; list each size once")
    return sizes


def json_object(text: str) -> dict:
    """A JSON object given on the command line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({e.msg} at character {e.pos}); "
                                         "quote it for the shell, e.g. '{\"dent\": [\"dent\", \"pit\"]}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is JSON but not an object; pass {{\"class\": [\"word\", ...]}}")
    return value


def keyword_rules(text: str) -> dict[str, list[str]]:
    """A JSON object ``{class: [keyword, ...]}`` that :class:`~dali_backend.core.labelling.KeywordRules` accepts."""
    from ..errors import ConfigError
    from ..core.labelling import KeywordRules

    value = json_object(text)
    if not value:
        raise argparse.ArgumentTypeError(f"{text!r} names no class; pass {{\"class\": [\"word\", ...]}}, or drop "
                                         "--keyword-rules for the default rules (use --keywords)")
    for cls, words in value.items():
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise argparse.ArgumentTypeError(f"{text!r}: class {cls!r} maps to {words!r}; each class needs a list of "
                                             "keywords, e.g. {\"dent\": [\"dent\", \"pit\"]}")
    try:
        KeywordRules(value)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def class_list(text: str) -> list[str]:
    """``--classes``: class names in id order, comma-separated (``normal,scratch,dent``), or a JSON list
    (``["a,b", "c"]``) for names that hold a comma. Names are stripped; none may be empty or repeated."""
    if text.lstrip().startswith("["):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid JSON list ({e.msg} at character {e.pos}); "
                                             "pass names separated by commas, e.g. normal,scratch,dent") from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise argparse.ArgumentTypeError(f"{text!r}: a JSON list of class names is a list of strings, e.g. "
                                             "[\"normal\", \"scratch\"]")
    else:
        names = text.split(",")
    names = [n.strip() for n in names]
    if not names or any(not n for n in names):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty class name; pass names separated by commas, e.g. "
                                         "normal,scratch,dent")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{text!r} lists {', '.join(map(repr, repeated))} more than once; list each "
                                         "class once")
    return names


def text_encoding(text: str) -> str:
    """A text encoding Python knows (``gbk``, ``cp1252``, ``utf-8``...)."""
    import codecs

    try:
        codecs.lookup(text)
    except LookupError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a text encoding Python knows; pass e.g. utf-8, gbk or "
                                         "cp1252") from None
    return text


def existing_dir(text: str) -> Path:
    """A folder that exists."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"folder {text!r} does not exist; check the path")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder; pass the data folder (root/<class>/*.jpg)")
    return path


def _url(text: str) -> str | None:
    """``text`` normalised when it is an object-storage URL (``s3://bucket/prefix``), else None."""
    from ..errors import ConfigError
    from ..storage.stores import url_root

    try:
        return url_root(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def dir_or_url(text: str) -> Path | str:
    """A folder that exists, or an ``s3://bucket/prefix`` URL (credentials come from the AWS_* variables)."""
    return _url(text) or existing_dir(text)


def path_kind(path: str | os.PathLike) -> str | None:
    """What is at ``path`` after following symlinks: ``"regular"``, ``"directory"``, ``"FIFO"``,
    ``"character device"``...; ``None`` when nothing is there (or it cannot be reached)."""
    from ..formats.jpeg import file_kind

    try:
        return file_kind(os.stat(path).st_mode)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None


def is_index_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file that starts like an index file (a numpy ``.npz`` archive).

    The type is checked before opening (a FIFO would block ``open()`` forever, a device has side
    effects), and again on the descriptor, which is opened non-blocking, in case the file was swapped.
    """
    if path_kind(path) != "regular":
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        return stat.S_ISREG(os.fstat(fd).st_mode) and f.read(4) == NPZ_MAGIC


def _not_regular(text: str, kind: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{text!r} is a {kind}, not an index file; pass the .npz written by "
                                      "`dali-backend index`")


def _not_index(text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{text!r} is not an index file (a .npz written by `dali-backend index`); build "
                                      f"one with: dali-backend index DATA_ROOT --out index.npz")


def index_file(text: str) -> Path:
    """An index file written by ``dali-backend index`` (checked by its first bytes, not by its name)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"index file {text!r} does not exist; build one with: "
                                         "dali-backend index DATA_ROOT --out index.npz")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not an index file; build one with: "
                                         f"dali-backend index {text} --out index.npz")
    kind = path_kind(path)
    if kind not in ("regular", None):
        raise _not_regular(text, kind)
    if not is_index_file(path):
        raise _not_index(text)
    return path


def data_or_index(text: str) -> Path | str:
    """A data folder (root/<class>/*.jpg), an ``s3://bucket/prefix`` URL, or an index file."""
    url = _url(text)
    if url:
        return url
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r} does not exist; pass a data folder (root/<class>/*.jpg) or an index file")
    if path.is_dir():
        return path
    kind = path_kind(path)
    if kind not in ("regular", None):
        raise argparse.ArgumentTypeError(f"{text!r} is a {kind}; pass a data folder (root/<class>/*.jpg) or an "
                                         "index file")
    if not is_index_file(path):
        raise _not_index(text)
    return path


def _refuse_url(text: str, what: str) -> None:
    """Outputs are local: a URL would become a local folder named ``s3:`` that reads like an upload."""
    from ..storage.stores import url_scheme

    scheme = url_scheme(text)
    if scheme is not None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a URL; outputs are written to local {what}s only (a URL would become a local folder "
            f"named '{scheme}:'). Write to a local path and upload it (e.g. aws s3 cp --recursive "
            "OUT s3://bucket/prefix); an index is loaded from a local file, its data from a bucket with --root")


def output_file(text: str) -> Path:
    """A file path that can be written: absent or a regular file (never a folder, FIFO, socket or device
    such as ``/dev/null``, which would be replaced or written into, nor a URL), whose nearest existing
    parent is a writable folder (missing parent folders are created by the command)."""
    _refuse_url(text, "file")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; pass a file name inside it, e.g. {Path(text) / 'out'}")
    kind = path_kind(path)
    if kind not in ("regular", None):
        raise argparse.ArgumentTypeError(f"{text!r} is a {kind}, not a regular file; refusing to write or replace "
                                         "it. Pass the path of a file to create or overwrite")
    _check_writable_parent(text, path.parent)
    return path


def output_dir(text: str) -> Path:
    """A folder to write into: an existing writable folder, or one that can be created (not a URL)."""
    _refuse_url(text, "folder")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder; pass a folder path")
    _check_writable_parent(text, path)
    return path


def _check_writable_parent(text: str, folder: Path) -> None:
    probe = folder.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: {str(probe)!r} is a file, not a folder; choose another path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: folder {str(probe)!r} is not writable; choose another path")


# ------------------------------------------------------------------------------------------ running
def configure_logging(args: argparse.Namespace, names: tuple[str, ...] = ("dali_backend", "bench")) -> Callable[[], None]:
    """Send the ``names`` loggers to stderr at the level ``-q``/``-v`` ask for; returns an undo function
    (so that a command run in-process, e.g. in tests, leaves logging as it found it)."""
    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(n) for n in names]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
        lg.addHandler(handler)
        lg.propagate = False  # one line per record, whatever the root logger has

    def undo() -> None:
        for lg, (lvl, prop) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.setLevel(lvl)
            lg.propagate = prop

    return undo


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None, log: logging.Logger) -> int:
    """Parse ``argv``, run ``args.func(args)`` and turn every expected failure into one stderr line.

    Returns the exit status: the command's own, 2 for a usage error or a typed library error or an
    ``OSError``, 130 on Ctrl-C.
    """
    args = parser.parse_args(argv)
    if getattr(args, "quiet", False) and getattr(args, "verbose", False):
        parser.error("argument -q/--quiet: not allowed with argument -v/--verbose; pass one of them")
    undo = configure_logging(args)
    prog = getattr(args, "prog", parser.prog)
    from ..errors import DaliBackendError
    from ..index import command_line

    try:
        log.debug("%s: arguments %s", prog, {k: str(v) if isinstance(v, Path) else v for k, v in sorted(vars(args).items())
                                             if k not in ("func", "prog")})
        t0 = time.perf_counter()
        # index errors never suggest a builder option as a flag of this command: a command that has such
        # flags (`index`) or names the data root (load_data) says so in a context of its own
        with command_line({}):
            rc = args.func(args)
        log.debug("%s: done in %.2f s (exit status %d)", prog, time.perf_counter() - t0, rc)
        return rc
    except DaliBackendError as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as e:
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"{prog}: error: {where}{one_line(e.strerror or e)}; check the path and its permissions", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        undo()


# ------------------------------------------------------------------------------------------ shared helpers
def default_cache() -> Path:
    """Where synthetic data sets are generated: ``$XDG_CACHE_HOME/dali_backend`` (unset or empty:
    ``~/.cache/dali_backend``)."""
    from ..facade.autotune import cache_home

    return cache_home()


def add_index_load_arguments(p: argparse.ArgumentParser) -> None:
    """``--root`` and ``--no-check``: how an index file given on the command line is loaded."""
    p.add_argument("--root", type=dir_or_url, help="data root (a folder or an s3:// URL) to use instead of the one "
                                                   "saved in the index file (the data moved since indexing)")
    p.add_argument("--no-check", action="store_true", help="do not compare the files' sizes and modification times "
                                                           "with indexing time (SampleIndex.load(check='none'))")


def load_data(path: Path, root: Path | None = None, no_check: bool = False, progress: bool | None = None,
              arg: str = "data"):
    """A :class:`~dali_backend.SampleIndex` from an index file (honouring ``--root``/``--no-check``) or
    by indexing a data folder. Index errors are re-raised (same type) with ``arg`` and ``path`` in front."""
    from ..errors import ConfigError, IndexBuildError, IndexFileError, StaleIndexError
    from ..index import SampleIndex, command_line

    if isinstance(path, str):  # an s3:// URL: indexed afresh, as a folder
        if root is not None or no_check:
            flag = "--root" if root is not None else "--no-check"
            raise ConfigError(f"{flag} applies to an index file, but {arg} {path!r} is a data root (indexed afresh); "
                              f"drop {flag}")
        try:
            with command_line({"root": arg if arg.startswith("-") else arg.upper()}):
                return SampleIndex.from_folder(path, progress=progress)
        except (IndexBuildError, IndexFileError, StaleIndexError) as e:
            raise type(e)(f"{arg} {path!r}: {e}") from e
    if path.is_dir():
        if root is not None or no_check:
            flag = "--root" if root is not None else "--no-check"
            raise ConfigError(f"{flag} applies to an index file, but {arg} {str(path)!r} is a data folder (indexed "
                              f"afresh); drop {flag}")
    try:
        if path.is_dir():
            # errors name how to pass the data root here, and suggest `dali-backend index` for the options
            # this command lacks (--split, --classes, ...)
            with command_line({"root": arg if arg.startswith("-") else arg.upper()}):
                return SampleIndex.from_folder(path, progress=progress)
        return SampleIndex.load(path, root=root, check="none" if no_check else "stat")
    except (IndexBuildError, IndexFileError, StaleIndexError) as e:
        raise type(e)(f"{arg} {str(path)!r}: {e}") from e


def disk_bytes(text: str) -> bytes:
    """UTF-8 bytes of ``text``; a name that was not UTF-8 on disk gets its own bytes back."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte (a JSON "\\ud800")
        return text.encode("utf-8", "backslashreplace")


def printable(text: str) -> str:
    """``text`` printable on any stdout: bytes of names that are not UTF-8 on disk shown as ``\\xff``."""
    return disk_bytes(text).decode("utf-8", "backslashreplace")
