"""Flips and quarter turns: exact on both backends (pixels are moved, never interpolated)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import Param, Transform, check_probability


class _Flip(Transform):
    KIND = "geometric"
    DEPTHS = (8, 16)  # moves values, never computes them: exact on uint16 too
    PARAMS = (Param("flip", "int32"),)
    UNIFORMS = 1
    AXIS = 1

    @classmethod
    def from_torchvision(cls, t) -> _Flip:
        """The flip for torchvision transform ``t`` (its probability ``p``)."""
        return cls(float(t.p))

    def __post_init__(self):
        object.__setattr__(self, "p", check_probability(self.p, type(self).__name__))

    @property
    def is_identity(self) -> bool:
        return self.p == 0.0

    def sample(self, u, size):
        return {"flip": np.array(int(u[0] < self.p), np.int32)}

    def apply(self, img, params):
        return np.ascontiguousarray(np.flip(img, axis=self.AXIS)) if int(params["flip"]) else img

    def dali(self, images, params, ctx):
        from nvidia.dali import fn

        kw = {"horizontal": params["flip"], "vertical": 0} if self.AXIS == 1 else {"horizontal": 0, "vertical": params["flip"]}
        return fn.flip(images, **kw)


@dataclass(frozen=True, repr=False)
class RandomHorizontalFlip(_Flip):
    """Mirror left-right with probability ``p``."""

    TORCHVISION = ("RandomHorizontalFlip",)  # the torchvision transforms this operation reproduces (class names)
    EXAMPLES = ("RandomHorizontalFlip()",)
    TOLERANCE = 0

    p: float = 0.5
    AXIS = 1


@dataclass(frozen=True, repr=False)
class RandomVerticalFlip(_Flip):
    """Mirror top-bottom with probability ``p``."""

    TORCHVISION = ("RandomVerticalFlip",)  # the torchvision transforms this operation reproduces (class names)
    EXAMPLES = ("RandomVerticalFlip()",)
    TOLERANCE = 0

    p: float = 0.5
    AXIS = 0


@dataclass(frozen=True, repr=False)
class RandomRot90(Transform):
    """Turn by ``k`` quarter turns counter-clockwise, ``k`` uniform in {0, 1, 2, 3} (``np.rot90``);
    with probability ``1 - p`` no turn. Exact (a transpose and flips); odd turns swap height and width."""

    EXAMPLES = ("RandomRot90()",)
    TOLERANCE = 0

    p: float = 1.0

    CONDITIONALS = True
    KIND = "geometric"
    DEPTHS = (8, 16)  # a transpose and flips: exact on uint16 too
    PARAMS = (Param("transpose", "int32"), Param("hflip", "int32"), Param("vflip", "int32"))
    UNIFORMS = 2

    def __post_init__(self):
        object.__setattr__(self, "p", check_probability(self.p, "RandomRot90"))

    @property
    def is_identity(self) -> bool:
        return self.p == 0.0

    def sample(self, u, size):
        k = min(int(u[1] * 4), 3) if u[0] < self.p else 0
        # rot90 k=1: transpose then flip rows; k=2: both flips; k=3: transpose then flip columns
        t, hf, vf = {0: (0, 0, 0), 1: (1, 0, 1), 2: (0, 1, 1), 3: (1, 1, 0)}[k]
        return {"transpose": np.array(t, np.int32), "hflip": np.array(hf, np.int32), "vflip": np.array(vf, np.int32)}

    def output_size(self, size, params):
        return None if size is None else (size[::-1] if int(params["transpose"]) else size)

    def static_size(self, size):
        return size if size is not None and size[0] == size[1] else None

    def apply(self, img, params):
        if int(params["transpose"]):
            img = np.swapaxes(img, 0, 1)
        if int(params["vflip"]):
            img = img[::-1]
        if int(params["hflip"]):
            img = img[:, ::-1]
        return np.ascontiguousarray(img)

    def dali(self, images, params, ctx):
        from nvidia.dali import fn

        t = params["transpose"]
        if t:  # a DALI conditional: per sample (the pipeline enables conditionals)
            turned = fn.transpose(images, perm=[1, 0, 2], transpose_layout=False)
        else:
            turned = images
        h, w = ctx.hw
        ctx.hw = (t * w + (1 - t) * h, t * h + (1 - t) * w)
        return fn.flip(turned, horizontal=params["hflip"], vertical=params["vflip"])
