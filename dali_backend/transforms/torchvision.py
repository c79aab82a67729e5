"""Translation of a torchvision ``Compose`` (v1 ``transforms`` or v2 ``transforms.v2``) into operations.

Transforms are recognised by class name and read through the attributes torchvision stores (both
versions keep ``size``, ``scale``, ``ratio``, ``p``, ``degrees``, ``brightness``..., ``mean``/``std``),
so torchvision is never imported here and the table is testable without it. Everything that cannot
be translated exactly is collected and refused in one :class:`ConfigError` naming each transform.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from .base import Transform
from .color import ColorJitter, GaussianBlur, Grayscale
from .geometry import CenterCrop, RandomCrop, RandomHorizontalFlip, RandomResizedCrop, RandomRotation, RandomVerticalFlip, Resize
from .output import Normalize, ToDtype


class Unsupported(Exception):
    """A transform recognised but used with arguments that cannot be reproduced (the message says which)."""


def _interp(t, name: str) -> None:
    mode = getattr(t, "interpolation", None)
    if mode is not None and "bilinear" not in str(getattr(mode, "value", mode)).lower():
        raise Unsupported(f"interpolation={mode!r} (only BILINEAR)")


def _size(v):
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return int(v[0])
    return v if isinstance(v, int) else tuple(int(x) for x in v)


def _range(v, centre: float):
    """torchvision stores ColorJitter ranges as (min, max) or None."""
    if v is None:
        return 0
    return (float(v[0]), float(v[1])) if isinstance(v, (list, tuple)) else float(v)


def _fill(v) -> float:
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


def _resize(t):
    _interp(t, "Resize")
    if getattr(t, "antialias", True) is False:
        raise Unsupported("antialias=False")
    return Resize(_size(t.size), max_size=getattr(t, "max_size", None))


def _rrc(t):
    _interp(t, "RandomResizedCrop")
    return RandomResizedCrop(_size(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio),
                             antialias=getattr(t, "antialias", True) is not False)


def _random_crop(t):
    if getattr(t, "padding_mode", "constant") != "constant":
        raise Unsupported(f"padding_mode={t.padding_mode!r} (only 'constant')")
    pad = t.padding
    pad = None if pad is None else (pad if isinstance(pad, int) else tuple(int(x) for x in pad))
    return RandomCrop(_size(t.size), padding=pad, pad_if_needed=bool(t.pad_if_needed), fill=_fill(t.fill))


def _rotation(t):
    _interp(t, "RandomRotation")
    if getattr(t, "expand", False) or getattr(t, "center", None) is not None:
        raise Unsupported("expand=True or center= (rotation about the centre, same size only)")
    return RandomRotation(tuple(float(d) for d in t.degrees), fill=_fill(t.fill))


def _jitter(t):
    return ColorJitter(_range(t.brightness, 1.0), _range(t.contrast, 1.0), _range(t.saturation, 1.0), _range(t.hue, 0.0))


def _blur(t):
    sigma = tuple(float(s) for s in t.sigma)
    return GaussianBlur(tuple(int(k) for k in t.kernel_size), sigma)


def _to_dtype(t):
    dtype = getattr(t, "dtype", None)
    if isinstance(dtype, dict):
        vals = {v for v in dtype.values() if v is not None}
        if len(vals) != 1:
            raise Unsupported(f"dtype={dtype!r} (one dtype for images)")
        dtype = vals.pop()
    if not getattr(t, "scale", True):
        raise Unsupported("scale=False")
    try:
        return ToDtype(dtype)
    except ConfigError as e:
        raise Unsupported(str(e)) from None


TABLE: dict[str, Callable[[object], Transform | None]] = {
    "Resize": _resize,
    "CenterCrop": lambda t: CenterCrop(_size(t.size)),
    "RandomCrop": _random_crop,
    "RandomResizedCrop": _rrc,
    "RandomHorizontalFlip": lambda t: RandomHorizontalFlip(float(t.p)),
    "RandomVerticalFlip": lambda t: RandomVerticalFlip(float(t.p)),
    "RandomRotation": _rotation,
    "ColorJitter": _jitter,
    "GaussianBlur": _blur,
    "Grayscale": lambda t: Grayscale(int(t.num_output_channels)),
    "Normalize": lambda t: Normalize(tuple(t.mean), tuple(t.std)),
    "ToTensor": lambda t: ToDtype("float32"),
    "ConvertImageDtype": _to_dtype,
    "ToDtype": _to_dtype,
    # conversions our loaders do anyway (decoded uint8 CHW tensors)
    "ToImage": lambda t: None,
    "PILToTensor": lambda t: None,
    "ToPureTensor": lambda t: None,
}


def translate(compose) -> list[Transform]:
    """The operations equivalent to ``compose`` (a torchvision Compose, or a list of transforms).

    Raises:
        ConfigError: listing every transform that has no equivalent, by position and name, with why.
    """
    items = getattr(compose, "transforms", compose)
    try:
        items = list(items)
    except TypeError:
        raise ConfigError(f"from_torchvision: expected a torchvision Compose or a list of transforms, got "
                          f"{type(compose).__name__}") from None
    ops, refused = [], []
    for k, t in enumerate(items):
        name = type(t).__name__
        make = TABLE.get(name)
        if make is None:
            refused.append(f"[{k}] {name} (no equivalent)")
            continue
        try:
            op = make(t)
        except (Unsupported, ConfigError) as e:
            refused.append(f"[{k}] {name} ({e})")
            continue
        except (TypeError, ValueError, AttributeError, OverflowError) as e:  # attributes of unexpected shape
            refused.append(f"[{k}] {name} (its arguments could not be read: {type(e).__name__}: {e})")
            continue
        if op is not None:
            ops.append(op)
    if refused:
        raise ConfigError(f"from_torchvision: {len(refused)} transform(s) cannot be translated: {'; '.join(refused)}. "
                          f"Supported: {', '.join(sorted(TABLE))}")
    return ops
