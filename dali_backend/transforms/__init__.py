"""Augmentation operations as classes, one per operation, with torchvision's names and arguments.

Compose them into an :class:`~dali_backend.core.augment.AugmentSpec` (``AugmentSpec(ops=[...])``) and both
backends run them: each class holds its validated arguments, its per-draw parameters
(``make_params``, pure numpy), its OpenCV implementation and its DALI graph fragment (DALI and
OpenCV are imported only when used). ``REGISTRY`` maps every operation's class name to its class;
the equivalence harness, the tolerance tests, the docs table check and the torchvision translation read
it. Adding an operation: one new module in this package holding its class (arguments, ``PARAMS``,
``sample``, ``apply``, ``dali``, ``EXAMPLES``, ``TOLERANCE``, ``TORCHVISION``/``from_torchvision``),
which is found and registered here, plus its row in the docs (docs/guides/torchvision.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import REGISTRY, GraphContext, Param, Transform, uniforms
from .color import Clahe, ColorJitter, GaussianBlur, Grayscale
from .crop import CenterCrop, RandomCrop, RandomResizedCrop
from .flip import RandomHorizontalFlip, RandomRot90, RandomVerticalFlip
from .resize import Resize
from .rotation import RandomRotation
from .output import Normalize, ToDtype

# Every other module of this package that holds operations registers them by being imported; the
# modules that hold none are named here (kernels imported lazily by their operation, the torchvision
# reader). A new operation's module needs no line anywhere.
NOT_OPERATIONS = frozenset({"base", "resample", "clahe_graph", "torchvision", "tvread", "window"})
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in NOT_OPERATIONS:
        importlib.import_module(f"{__name__}.{_module.name}")
globals().update(REGISTRY)  # every operation by its class name: `from dali_backend.transforms import X`


def parse_ops(text: str) -> list[Transform]:
    """Operations from text such as ``"RandomResizedCrop(224), RandomHorizontalFlip(p=0.3)"`` (the
    command line's ``--ops``): only registered class names with literal arguments, nothing evaluated."""
    import ast

    from ..errors import ConfigError

    try:
        tree = ast.parse(f"[{text}]", mode="eval").body
    except SyntaxError as e:
        raise ConfigError(f"--ops {text!r}: not a list of operations ({e.msg}); e.g. 'Resize(256), CenterCrop(224)'") from None
    ops = []
    for node in tree.elts:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REGISTRY):
            raise ConfigError(f"--ops: {ast.unparse(node)!r} is not an operation; use {', '.join(sorted(REGISTRY))}")
        try:
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        except ValueError:
            raise ConfigError(f"--ops: {ast.unparse(node)!r}: arguments must be literals (numbers, strings, tuples)") from None
        try:
            ops.append(REGISTRY[node.func.id](*args, **kwargs))
        except TypeError as e:
            raise ConfigError(f"--ops: {ast.unparse(node)!r}: {e}") from None
    return ops

__all__ = ["parse_ops", "Transform", "Param", "GraphContext", "REGISTRY", "uniforms", *sorted(REGISTRY)]
