"""Reading a sample's bytes at run time, with the checks and the replacement rule both backends share.

A file can change or vanish after indexing. Before bytes reach a decoder (DALI's cannot skip a bad
sample: the whole pipeline dies), cheap checks run: the size equals the indexed size, the data starts
with SOI and an end-of-image marker follows. ``on_error="raise"`` turns a failure into
:class:`BadImageError` naming the path, sample index, label and epoch. ``on_error="skip"`` replaces
the draw by another sample *of the same class*, chosen by a pure function of (seed, epoch, position),
so both backends pick the same replacement and the class balance is kept; the replacement keeps the
draw's position (and so its augmentation parameters) and is counted and reported.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from .errors import BadImageError, ConfigError
from .jpeg import EOI, SOI

OnError = Literal["raise", "skip"]
MAX_REPLACEMENTS = 32
_REPLACE_STREAM = 0x5C1
T = TypeVar("T")


def check_on_error(on_error: str) -> OnError:
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error={on_error!r}; use 'raise' (default: stop and name the file) or 'skip' "
                          "(replace the draw by another sample of its class, counted and reported)")
    return on_error  # type: ignore[return-value]


class SampleReader:
    """Reads checked bytes of indexed samples. Plain arrays only: cheap to fork or pickle to workers."""

    def __init__(self, root: str, path_data: NDArray[np.uint8], path_offsets: NDArray[np.int64],
                 labels: NDArray[np.int64], sizes: NDArray[np.int64], seed: int):
        self.root, self.path_data, self.path_offsets = root, path_data, path_offsets
        self.labels, self.sizes, self.seed = labels, sizes, int(seed)

    @classmethod
    def for_index(cls, index, seed: int) -> SampleReader:
        return cls(index.root, index.paths.data, index.paths.offsets, index.labels, index.sizes, seed)

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
        if data[-2:].tobytes() != EOI and data.tobytes().find(EOI) < 0:
            return "truncated (no end-of-image marker)"
        return None

    def read(self, i: int, epoch: int | None = None) -> NDArray[np.uint8]:
        """Checked bytes of sample ``i``; raises :class:`BadImageError` naming the file."""
        data, err = None, None
        try:
            data = np.fromfile(self.path(i), dtype=np.uint8)
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
