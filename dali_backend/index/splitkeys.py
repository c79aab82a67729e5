"""The key that decides a sample's side of :meth:`SampleIndex.split <dali_backend.index.SampleIndex.split>`:
a pure function of (seed, relative path), so a file keeps its side when others are added or removed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray


def split_keys(paths: Iterable[str], seed: int) -> NDArray[np.float64]:
    """A uniform number in [0, 1) per path, a pure function of (seed, path)."""
    prefix = f"{int(seed)}\0".encode()
    return np.array([int.from_bytes(hashlib.blake2b(prefix + p.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "little")
                     for p in paths], dtype=np.float64) / 2.0**64
