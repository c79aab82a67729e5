"""The format and bit depth of every indexed sample: uint8 codes into a tuple of format names, and a uint8 bit depth.

Two bytes per sample (a million files: 2 MB), filled by the index-time checks (the
:class:`~dali_backend.formats.registry.Check` of each accepted file) and carried by subset, split, update,
pack, pickling and index files. The names are saved beside the codes, so an index file reloads the same
names whatever order the format registry holds. A file not read (``verify="none"``) has the format
:data:`UNREAD` and bit depth 0. An index file saved before formats were recorded holds neither array: it
loads as every sample JPEG at 8 bits (:data:`BEFORE`), since only JPEG files were indexed then.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from ..formats import registry

UNREAD = ""  # the format of a sample not read at indexing (verify="none")
# What an index file saved before this column existed holds: only .jpg/.jpeg files were indexable then,
# and the JPEG check accepted 8-bit frames only.
BEFORE = ("jpeg", 8)


class Kinds:
    """The checks' record of format and bit depth per candidate, filled by threads (:meth:`set`)."""

    def __init__(self, n: int):
        self.names = [UNREAD, *registry.FORMATS]
        self._code = {name: k for k, name in enumerate(self.names)}
        self._lock = threading.Lock()
        self.codes = np.zeros(n, dtype=np.uint8)
        self.depths = np.zeros(n, dtype=np.uint8)

    def set(self, i: int, format_name: str, bit_depth: int) -> None:
        """Record candidate ``i`` as ``format_name`` (a registered name, or :data:`UNREAD`) at ``bit_depth`` bits."""
        code = self._code.get(format_name)
        if code is None:  # a format registered during the build
            with self._lock:
                code = self._code.setdefault(format_name, len(self.names))
                if code == len(self.names):
                    self.names.append(format_name)
        self.codes[i], self.depths[i] = code, bit_depth

    def copy(self, i: int, index, j: int) -> None:
        """Record candidate ``i`` as sample ``j`` of ``index`` is recorded (an update's unchanged file)."""
        self.set(i, index.format_names[index.format_ids[j]], int(index.bit_depths[j]))

    def fields(self, kept: Sequence[int] | NDArray[np.int64]) -> dict:
        """The index's keyword arguments for the candidates ``kept``: codes renumbered over the names used."""
        kept = np.asarray(kept, dtype=np.int64)
        used, ids = np.unique(self.codes[kept], return_inverse=True)
        return {"format_ids": ids.astype(np.uint8).reshape(-1), "format_names": tuple(self.names[u] for u in used),
                "bit_depths": self.depths[kept]}


def checked_fields(n: int, format_ids, format_names: Sequence[str],
                   bit_depths) -> tuple[NDArray[np.uint8], tuple[str, ...], NDArray[np.uint8]]:
    """``(format_ids, format_names, bit_depths)`` of an index of ``n`` samples, read-only; None arrays: :data:`BEFORE`.

    Raises:
        ConfigError: a length other than ``n``, a code without a name, names not unique strings.
    """
    names = tuple(format_names)
    if not all(isinstance(x, str) for x in names) or len(set(names)) != len(names):
        raise ConfigError(f"SampleIndex: format_names={names!r}; expected unique format names such as ('jpeg', 'png')")
    ids = np.zeros(n, np.uint8) if format_ids is None else np.array(format_ids, dtype=np.uint8, copy=True).reshape(-1)
    depths = (np.full(n, BEFORE[1], np.uint8) if bit_depths is None
              else np.array(bit_depths, dtype=np.uint8, copy=True).reshape(-1))
    for name, a in (("format_ids", ids), ("bit_depths", depths)):
        if a.size != n:
            raise ConfigError(f"SampleIndex: {name} has {a.size} entries for {n} paths")
        a.flags.writeable = False
    if n and int(ids.max()) >= len(names):
        raise ConfigError(f"SampleIndex: format_ids go up to {int(ids.max())} but format_names has {len(names)} "
                          f"names {names!r}")
    return ids, names, depths


def formats_text(format_ids: NDArray[np.uint8], format_names: Sequence[str], bit_depths: NDArray[np.uint8]) -> str:
    """``formats: jpeg 120, png 40 (16-bit 12)``: samples per format, most first, with those not at 8 bits by depth."""
    counts = np.bincount(format_ids, minlength=len(format_names))
    parts = []
    for k in sorted(np.flatnonzero(counts).tolist(), key=lambda k: (-counts[k], format_names[k])):
        name = format_names[k] or "not read (verify='none')"
        depths = np.bincount(bit_depths[format_ids == k], minlength=256)
        other = [f"{d}-bit {int(depths[d])}" for d in range(255, -1, -1) if depths[d] and d not in (8, 0)]
        parts.append(f"{name} {int(counts[k])}" + (f" ({', '.join(other)})" if other else ""))
    return "formats: " + ", ".join(parts)
