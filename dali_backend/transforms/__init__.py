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

__all__ = ["Transform", "Param", "GraphContext", "REGISTRY", "uniforms", "Resize", "CenterCrop", "RandomCrop",
           "RandomResizedCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "RandomRot90", "RandomRotation",
           "ColorJitter", "GaussianBlur", "Clahe", "Grayscale", "Normalize", "ToDtype"]
