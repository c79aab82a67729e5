"""Reading a torchvision transform's attributes (v1 and v2 store the same ones), for the operations'
``from_torchvision`` classmethods. torchvision is never imported: transforms are read by attribute."""

from __future__ import annotations


class Unsupported(Exception):
    """A transform recognised but used with arguments that cannot be reproduced (the message says which)."""


def interp(t) -> None:
    """Refuse any interpolation but bilinear (the only one both backends compute alike)."""
    mode = getattr(t, "interpolation", None)
    if mode is not None and "bilinear" not in str(getattr(mode, "value", mode)).lower():
        raise Unsupported(f"interpolation={mode!r} (only BILINEAR)")


def size_of(v):
    """torchvision's ``size``: an int, or a (h, w) pair (a 1-element list means an int)."""
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return int(v[0])
    return v if isinstance(v, int) else tuple(int(x) for x in v)


def jitter_range(v, centre: float):
    """torchvision stores ColorJitter ranges as (min, max) or None."""
    if v is None:
        return 0
    return (float(v[0]), float(v[1])) if isinstance(v, (list, tuple)) else float(v)


def fill_of(v) -> float:
    """One fill value for every channel (v2 keeps a per-type dict; None means 0)."""
    if isinstance(v, dict):  # v2 keeps a per-type dict
        vals = {x for x in v.values() if x is not None}
        v = vals.pop() if len(vals) == 1 else (0 if not vals else None)
    if isinstance(v, (list, tuple)):
        if len(set(v)) != 1:
            raise Unsupported(f"fill={v!r} (one value for every channel only)")
        v = v[0]
    if v is None:
        return 0
    return float(v)
