"""Augmentation operations as classes, one per operation, with torchvision's names and arguments.

Compose them into an :class:`~dali_backend.augment.AugmentSpec` (``AugmentSpec(ops=[...])``) and both
backends run them: each class holds its validated arguments, its per-draw parameters
(``make_params``, pure numpy), its OpenCV implementation and its DALI graph fragment (DALI and
OpenCV are imported only when used). ``REGISTRY`` maps every operation's class name to its class;
the equivalence harness and the torchvision translation iterate it. Adding an operation: one class
in this package (it registers itself) plus its tests.
"""

from __future__ import annotations

from .base import REGISTRY, GraphContext, Param, Transform, uniforms
from .color import Clahe, ColorJitter, GaussianBlur, Grayscale
from .geometry import (CenterCrop, RandomCrop, RandomHorizontalFlip, RandomResizedCrop, RandomRot90, RandomRotation,
                       RandomVerticalFlip, Resize)
from .output import Normalize, ToDtype


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

__all__ = ["parse_ops", "Transform", "Param", "GraphContext", "REGISTRY", "uniforms", "Resize", "CenterCrop", "RandomCrop",
           "RandomResizedCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "RandomRot90", "RandomRotation",
           "ColorJitter", "GaussianBlur", "Clahe", "Grayscale", "Normalize", "ToDtype"]
