"""The local folder as a store: the same questions as an object store (listing, ``stat`` for HEAD, reads
whole or a byte range, the staleness check), answered by the file system.

A file's version is its size and mtime (``make``'s and ``rsync``'s rule; an ETag would cost reading
every byte). :func:`~.stores.open_store` returns a :class:`LocalStore` for a root without a scheme (a
path; ``file://`` URLs are refused like any unregistered scheme: pass the path). Only regular files are
objects: a FIFO named ``x.jpg`` would block a reader forever, so special files are never opened
(:func:`~dali_backend.formats.files.open_regular`). The index builds its samples from the folder with
its own walk (:mod:`dali_backend.index.walk`: symlinks inside the root followed, outside ones refused,
hidden and special files recorded as ignored or refused), which names every file it skips;
:meth:`LocalStore.list` is the plain listing: the regular files below the root, symlinks not followed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..formats.files import not_regular_reason, open_regular
from .objects import ObjectInfo, ObjectMissing


class LocalStore:
    """A data folder answering the :class:`~.stores.Store` protocol.

    Args:
        root: the folder (as given: the index's walk and its messages name it so; :attr:`root` is absolute).
        storage_options: unused (they configure an object store's requests; the index's builders refuse
            them for a folder, :meth:`SampleIndex.load` keeps them as given).
    """

    def __init__(self, root: str | os.PathLike, storage_options: Mapping | None = None):
        self.folder = Path(root)  # what the index's walk reads
        self.root = str(self.folder.absolute())

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def url(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def patient(self, factor: int) -> LocalStore:
        """The same store: a file system does not throttle (no retries to lengthen)."""
        return self

    def exists(self) -> bool:
        """Whether the root is a folder."""
        return os.path.isdir(self.root)

    def list(self, sub: str = "") -> Iterator[ObjectInfo]:
        """Every regular file below the root (or below ``sub``), in path order; symlinks and special
        files are not objects here (the index's walk has its own symlink rules)."""
        top = os.path.join(self.root, sub) if sub else self.root
        base = len(self.root) + 1
        stack = [top]
        found: list[ObjectInfo] = []
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:  # unreadable folder: nothing listed below it
                continue
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    found.append(ObjectInfo(e.path[base:].replace(os.sep, "/"), st.st_size, "", st.st_mtime_ns))
        yield from sorted(found, key=lambda info: info.rel)

    def head(self, rel: str) -> ObjectInfo:
        """``stat`` of the file ``rel`` (symlinks followed).

        Raises:
            ObjectMissing: no such file, or not a regular file (the message says which).
        """
        try:
            st = os.stat(self.url(rel))
        except OSError as e:
            raise ObjectMissing(f"{self.url(rel)}: {e.strerror or e}") from None
        reason = not_regular_reason(st.st_mode)
        if reason:
            raise ObjectMissing(f"{self.url(rel)}: {reason}")
        return ObjectInfo(rel, st.st_size, "", st.st_mtime_ns)

    def get(self, rel: str, etag: str | None = None, start: int | None = None,
            end: int | None = None) -> tuple[bytes, ObjectInfo]:
        """``(bytes, the file's stat)``: the whole file, or bytes ``[start, end)``; ``etag`` is ignored (a
        file has none: :meth:`changed` compares size and mtime).

        Raises:
            ObjectMissing: no such file, or not a regular file.
        """
        try:
            with open_regular(self.url(rel)) as f:
                st = os.fstat(f.fileno())
                if start is None:
                    data = f.read()
                else:
                    f.seek(start)
                    data = f.read(max(0, (st.st_size if end is None else end) - start))
        except OSError as e:
            raise ObjectMissing(f"{self.url(rel)}: {e.strerror or e}") from None
        return data, ObjectInfo(rel, st.st_size, "", st.st_mtime_ns)

    def changed(self, paths: Sequence[str], sizes: NDArray[np.int64], mtimes: NDArray[np.int64],
                etags: Sequence[str] | None, positions: Iterable[int]) -> list[tuple[str, str]]:
        """``(path, what changed)`` for the files at ``positions`` whose size or mtime differ from
        indexing time, or that are gone or not regular files now (``stat`` only; nothing is opened)."""
        out = []
        for i in positions:
            rel = paths[i]
            try:
                st = os.stat(os.path.join(self.root, rel))  # never opens the file
            except OSError:
                out.append((rel, "missing"))
                continue
            reason = not_regular_reason(st.st_mode)
            if reason:
                out.append((rel, reason))
            elif st.st_size != sizes[i]:
                out.append((rel, f"size {sizes[i]} -> {st.st_size} bytes"))
            elif st.st_mtime_ns != mtimes[i]:
                out.append((rel, "modified (mtime changed)"))
        return out
