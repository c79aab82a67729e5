"""Reading a sample's bytes at run time, with the checks and the replacement rule both backends share.

A file can change or vanish after indexing. Before bytes reach a decoder (DALI's cannot skip a bad
sample: the whole pipeline dies), cheap checks run: the size equals the indexed size, the data starts
with SOI, its headers hold nothing the index refuses (a frame type, precision or EXIF layout the two
backends' decoders cannot both read alike: :func:`~dali_backend.jpeg.header_refusal`) and an
end-of-image marker follows. ``on_error="raise"`` turns a failure into
:class:`BadImageError` naming the path, sample index, label and epoch. ``on_error="skip"`` replaces
the draw by another sample *of the same class*, chosen by a pure function of (seed, epoch, position),
so both backends pick the same replacement and the class balance is kept; the replacement keeps the
draw's position (and so its augmentation parameters) and is counted and reported.
"""

from __future__ import annotations

import logging
import os
import stat
import weakref
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from .errors import BadImageError, ConfigError
from .jpeg import EOI, SOI, header_refusal

log = logging.getLogger("dali_backend")
OnError = Literal["raise", "skip"]
SERVED_BAD = -2  # the "served" index of a draw whose file was bad under on_error="raise" (both executors)
MAX_REPLACEMENTS = 32
_REPLACE_STREAM = 0x5C1
T = TypeVar("T")


def check_on_error(on_error: str) -> OnError:
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error={on_error!r}; use 'raise' (default: stop and name the file) or 'skip' "
                          "(replace the draw by another sample of its class, counted and reported)")
    return on_error  # type: ignore[return-value]


class EncodedCache:
    """Every file's encoded bytes in one block of POSIX shared memory (the tutorial's ``cache_images``).

    Costs the data set's size on disk in RAM (``nbytes``, logged when built), once for all workers of
    both backends: forked workers share the pages, spawned ones attach by name. Worth it when the
    files sit on slow or network storage and fit in memory; reads then cost a memcpy. Files that
    cannot be read while building are left out and read from disk (and checked) when drawn.
    """

    def __init__(self, paths: list[str], sizes: NDArray[np.int64]):
        self.offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.offsets[1:])
        self.present = np.zeros(len(sizes), dtype=bool)
        self.nbytes = int(self.offsets[-1])
        self._shm = shared_memory.SharedMemory(create=True, size=max(1, self.nbytes))
        self._finalizer = weakref.finalize(self, EncodedCache._release, self._shm, os.getpid())
        buf = np.ndarray((max(1, self.nbytes),), dtype=np.uint8, buffer=self._shm.buf)
        for i, path in enumerate(paths):
            try:
                with open(path, "rb") as f:
                    n = f.readinto(memoryview(buf[self.offsets[i]:self.offsets[i + 1]]))
                self.present[i] = n == sizes[i]
            except OSError:
                pass
        self.buf = buf
        log.info("cached %d of %d files in shared memory: %.1f MB", int(self.present.sum()), len(sizes), self.nbytes / 1e6)

    @staticmethod
    def _release(shm, owner_pid: int) -> None:
        try:
            shm.close()
            if os.getpid() == owner_pid:
                shm.unlink()
        except (FileNotFoundError, BufferError):
            pass

    def __getstate__(self):
        return {"name": self._shm.name, "offsets": self.offsets, "present": self.present, "nbytes": self.nbytes}

    def __setstate__(self, state):
        self.offsets, self.present, self.nbytes = state["offsets"], state["present"], state["nbytes"]
        self._shm = shared_memory.SharedMemory(name=state["name"])  # attached; the creator unlinks
        self.buf = np.ndarray((max(1, self.nbytes),), dtype=np.uint8, buffer=self._shm.buf)

    def get(self, i: int) -> NDArray[np.uint8] | None:
        if not self.present[i]:
            return None
        return self.buf[self.offsets[i]:self.offsets[i + 1]]


def read_regular_file(path: str) -> NDArray[np.uint8]:
    """The bytes of ``path`` if it is a regular file; never blocks on a FIFO, socket or device."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a socket or device"
            raise OSError(0, f"not a regular file: {kind}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return np.frombuffer(f.read(), dtype=np.uint8)
    finally:
        os.close(fd)


class SampleReader:
    """Reads checked bytes of indexed samples. Plain arrays only: cheap to fork or pickle to workers.

    ``refused`` maps sample indices to the reason a decoder refused them at run time (found by the
    DALI loader when its pipeline failed); such samples are bad files like any other. It is filled in
    the main process only, between pipeline builds, so every reader worker started afterwards sees it.
    """

    def __init__(self, root: str, path_data: NDArray[np.uint8], path_offsets: NDArray[np.int64],
                 labels: NDArray[np.int64], sizes: NDArray[np.int64], seed: int, cache: EncodedCache | None = None):
        self.root, self.path_data, self.path_offsets = root, path_data, path_offsets
        self.labels, self.sizes, self.seed, self.cache = labels, sizes, int(seed), cache
        self.refused: dict[int, str] = {}

    @classmethod
    def for_index(cls, index, seed: int, cache: bool = False) -> SampleReader:
        store = EncodedCache([index.abspath(i) for i in range(len(index))], index.sizes) if cache else None
        return cls(index.root, index.paths.data, index.paths.offsets, index.labels, index.sizes, seed, store)

    def path(self, i: int) -> str:
        rel = self.path_data[self.path_offsets[i]:self.path_offsets[i + 1]].tobytes().decode("utf-8", "surrogateescape")
        return os.path.join(self.root, rel)

    def problem(self, i: int, data: NDArray[np.uint8] | None, error: OSError | None = None) -> str | None:
        """What is wrong with sample ``i``'s bytes, or None."""
        if error is not None:
            return f"unreadable ({error.strerror or error})"
        if data.size != self.sizes[i]:
            return f"file changed since indexing (size {self.sizes[i]} -> {data.size} bytes)"
        if data[:2].tobytes() != SOI:
            return "no JPEG signature"
        refusal = header_refusal(data)  # same size, other headers: an edit in place
        if refusal:
            return refusal
        if data[-2:].tobytes() != EOI and data.tobytes().find(EOI) < 0:
            return "truncated (no end-of-image marker)"
        return None

    def read(self, i: int, epoch: int | None = None) -> NDArray[np.uint8]:
        """Checked bytes of sample ``i`` (from the cache when there is one); raises :class:`BadImageError`."""
        if i in self.refused:
            raise BadImageError(self.path(i), i, int(self.labels[i]), epoch, self.refused[i])
        data, err = (self.cache.get(i) if self.cache is not None else None), None
        if data is None:
            try:
                data = read_regular_file(self.path(i))
            except OSError as e:
                err = e
        reason = self.problem(i, data, err)
        if reason:
            raise BadImageError(self.path(i), i, int(self.labels[i]), epoch, reason)
        return data

    def replacements(self, i: int, epoch: int, position: int) -> NDArray[np.int64]:
        """Candidates replacing sample ``i`` at (epoch, position): same class, a pure function of both."""
        same = np.flatnonzero(self.labels == self.labels[i])
        same = same[same != i]
        if same.size == 0:
            return same
        rng = np.random.default_rng([_REPLACE_STREAM, self.seed, int(epoch), int(position)])
        return same[rng.permutation(same.size)[:MAX_REPLACEMENTS]]

    def serve(self, i: int, epoch: int, position: int, on_error: OnError, load: Callable[[int], T]) -> tuple[int, T]:
        """``(served index, load(served index))``: ``i`` itself, or under ``skip`` its replacement."""
        try:
            return i, load(i)
        except BadImageError:
            if on_error != "skip":
                raise
            first = f"{self.path(i)}"
        for cand in self.replacements(i, epoch, position):
            try:
                return int(cand), load(int(cand))
            except BadImageError:
                continue
        raise BadImageError(first, i, int(self.labels[i]), epoch,
                            f"unusable, and no usable replacement among {MAX_REPLACEMENTS} samples of its class")
