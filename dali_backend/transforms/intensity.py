"""Intensity windows: the declared step from 16-bit values to the 8-bit operations.

A spec holding a :class:`Window` decodes every image at 16 bits on both backends (DALI's
``decoders.image(dtype=UINT16)``, OpenCV's ``IMREAD_ANYDEPTH``); an 8-bit file is promoted to the
16-bit scale as DALI's decoder does it, ``x * 257`` (so ``Window(0, 65535)`` gives it back unchanged).
The window then maps ``[low, high]`` to ``[0, 255]`` with one rounding rule, in integers::

    out = clip(floor(((x - low) * 255 + (high - low) // 2) / (high - low)), 0, 255)

that is, ``(x - low) * 255 / (high - low)`` rounded half up (ties decided by the exact fraction; the
``// 2`` is exact for an even ``high - low``, and an odd one has no ties). Both backends apply it as a
table of 65536 entries computed once here (``fn.lookup_table`` in DALI, numpy indexing in the fallback),
so they agree on every value by construction, on CPU and GPU operators alike (no float rounding,
no fused multiply-add). The trade-off: a fixed window only (per-image windows would need per-image
order statistics, which no DALI operator computes). The operations exact on 16-bit values (flips,
quarter turns, crops without resampling) may precede it; every other pixel operation must follow it
(``AugmentSpec`` refuses the order otherwise, naming the fix).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from .base import GraphContext, Transform

MAX16 = 65535
PROMOTE = 257  # 8-bit x on the 16-bit scale: x * 257 (DALI's decoder with dtype=UINT16; 255 -> 65535)


@lru_cache(maxsize=16)
def window_table(low: int, high: int) -> NDArray[np.uint8]:
    """The uint8 output of every uint16 value ``0..65535`` under ``Window(low, high)`` (module docstring)."""
    x = np.arange(MAX16 + 1, dtype=np.int64)
    d = high - low
    out = np.clip(((x - low) * 255 + d // 2) // d, 0, 255).astype(np.uint8)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, repr=False)
class Window(Transform):
    """Map 16-bit values in ``[low, high]`` to 8-bit ``[0, 255]`` (below ``low``: 0; above ``high``: 255).

    The declared conversion of a 12- or 16-bit source before 8-bit operations (``Clahe``,
    ``ColorJitter``, ``Resize``...), rounded half up, the same on both backends (see the module
    docstring). For 12-bit data stored in 16 bits (values below 4096), use ``Window(0, 4095)``.

    Args:
        low: the 16-bit value that becomes 0, an integer in [0, 65534].
        high: the 16-bit value that becomes 255, an integer in [low + 1, 65535].
    """

    EXAMPLES = ("Window(0, 65535)", "Window(low=3000, high=40000)")
    TOLERANCE = 0
    DEPTHS = (16,)  # runs on 16-bit values (a spec holding it decodes at 16 bits)

    low: int = 0
    high: int = MAX16

    KIND = "photometric"

    def __post_init__(self):
        for name in ("low", "high"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or not 0 <= v <= MAX16:
                raise ConfigError(f"Window.{name}={v!r}; must be an integer 16-bit value in [0, 65535] "
                                  "(12-bit data: Window(0, 4095))")
            object.__setattr__(self, name, int(v))
        if self.high <= self.low:
            raise ConfigError(f"Window(low={self.low}, high={self.high}): high must be above low, e.g. "
                              f"Window(low={self.low}, high={min(self.low + 4095, MAX16)})")

    @property
    def table(self) -> NDArray[np.uint8]:
        return window_table(self.low, self.high)

    def apply(self, img, params):
        x = img.astype(np.uint16) * np.uint16(PROMOTE) if img.dtype == np.uint8 else img
        if x.dtype != np.uint16:
            raise ConfigError(f"Window: got a {x.dtype} image; it takes uint16 (or uint8, promoted x * 257)")
        return self.table[x]

    def dali(self, images, params, ctx: GraphContext):
        from nvidia.dali import fn, types

        if ctx.bits == 16:
            keys, values = range(MAX16 + 1), self.table
        else:  # an 8-bit graph (the operation run alone on 8-bit images): x * 257 looked up
            keys, values = range(256), self.table[np.arange(256) * PROMOTE]
        ctx.bits = 8
        return fn.lookup_table(images, keys=list(keys), values=values.tolist(), default_value=0, dtype=types.UINT8)
