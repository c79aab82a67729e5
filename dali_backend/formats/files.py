"""Opening the files the formats read: only regular files (a FIFO named ``x.jpg`` would block
``open()`` forever, reading a device has side effects), checked with ``stat`` before and after opening.
Shared by every image format of the registry (:mod:`.registry`); imports nothing of the package.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"))


def file_kind(mode: int) -> str:
    """``"regular"``, or what else an ``st_mode`` describes (``"FIFO"``, ``"socket"``, ...)."""
    if stat.S_ISREG(mode):
        return "regular"
    return next((name for test, name in _KINDS if test(mode)), "special file")


def not_regular_reason(mode: int) -> str | None:
    """The rejection reason for a non-regular file (``"not a regular file (FIFO)"``), or None."""
    kind = file_kind(mode)
    return None if kind == "regular" else f"not a regular file ({kind})"


class NotRegularFileError(OSError):
    """Raised by :func:`open_regular` for a FIFO, socket, device or directory."""


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file (after following symlinks).

    A FIFO named ``x.jpg`` would block ``open()`` forever (even Ctrl-C cannot interrupt it), and
    reading a device has side effects, so the type is checked with ``stat`` before opening, and again
    on the open descriptor (opened non-blocking) in case the file was swapped in between.

    Raises:
        NotRegularFileError: the path is not a regular file; the message is the rejection reason.
        OSError: the file cannot be stat'ed or opened.
    """
    reason = not_regular_reason(os.stat(path).st_mode)
    if reason:
        raise NotRegularFileError(reason)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        reason = not_regular_reason(os.fstat(fd).st_mode)
        if reason:
            raise NotRegularFileError(reason)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
