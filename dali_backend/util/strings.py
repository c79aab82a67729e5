"""A read-only table of strings held in two numpy arrays (UTF-8 bytes + offsets).

A Python list of a million ``str`` objects costs ~100 MB and, worse, every access in a forked
DataLoader worker touches the objects' reference counts, so copy-on-write pages get copied and worker
memory grows (pytorch/pytorch#13246). Two flat arrays cost ~1 byte per character and are never written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
from numpy.typing import NDArray


class StringTable(Sequence[str]):
    """Immutable sequence of strings backed by ``data`` (uint8) and ``offsets`` (int64, len n+1)."""

    __slots__ = ("_data", "_offsets")

    def __init__(self, data: NDArray[np.uint8], offsets: NDArray[np.int64]):
        data = np.ascontiguousarray(data, dtype=np.uint8)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != data.size:
            raise ValueError("StringTable: offsets must start at 0 and end at len(data)")
        if np.any(np.diff(offsets) < 0):
            raise ValueError("StringTable: offsets must be non-decreasing")
        data.flags.writeable = False
        offsets.flags.writeable = False
        self._data, self._offsets = data, offsets

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> StringTable:
        encoded = [s.encode("utf-8", "surrogateescape") for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        return cls(data, offsets)

    @property
    def data(self) -> NDArray[np.uint8]:
        return self._data

    @property
    def offsets(self) -> NDArray[np.int64]:
        return self._offsets

    def __len__(self) -> int:
        return self._offsets.size - 1

    def _get(self, i: int) -> str:
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        return self._data[start:end].tobytes().decode("utf-8", "surrogateescape")

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"string index {i} out of range for {n} {'entry' if n == 1 else 'entries'}")
        return self._get(i)

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self._get(i)

    def take(self, indices: NDArray[np.int64]) -> StringTable:
        """A new table holding the entries at ``indices`` (in that order)."""
        return StringTable.from_strings(self._get(int(i)) for i in indices)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringTable):
            return np.array_equal(self._offsets, other._offsets) and np.array_equal(self._data, other._data)
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"StringTable([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"
