"""Translation of a torchvision ``Compose`` (v1 ``transforms`` or v2 ``transforms.v2``) into operations.

Transforms are recognised by class name and read through the attributes torchvision stores (both
versions keep ``size``, ``scale``, ``ratio``, ``p``, ``degrees``, ``brightness``..., ``mean``/``std``),
so torchvision is never imported here and the table is testable without it. Everything that cannot
be translated exactly is collected and refused in one :class:`ConfigError` naming each transform.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from .base import REGISTRY, Transform
from .tvread import Unsupported

# Conversions the loaders do anyway (decoded uint8 CHW tensors): accepted, nothing to add.
PASS_THROUGH = ("ToImage", "PILToTensor", "ToPureTensor")


def table() -> dict[str, Callable[[object], Transform | None]]:
    """torchvision class name -> translator, from each operation's ``TORCHVISION`` names and its
    ``from_torchvision`` classmethod (the registry: a new operation declares itself, nothing here)."""
    out: dict[str, Callable[[object], Transform | None]] = {name: (lambda t: None) for name in PASS_THROUGH}
    for cls in REGISTRY.values():
        for name in cls.TORCHVISION:
            out[name] = cls.from_torchvision
    return out


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
    ops, refused, known = [], [], table()
    for k, t in enumerate(items):
        name = type(t).__name__
        make = known.get(name)
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
                          f"Supported: {', '.join(sorted(known))}")
    return ops
