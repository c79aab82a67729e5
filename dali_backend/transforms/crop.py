"""The crops (torchvision's names and meanings): windows drawn in Python as pixel rectangles
(``start = (top, left)``, ``shape = (h, w)``) that both backends cut exactly, padding with ``fill``
where the window leaves the image; ``RandomResizedCrop`` then resizes (its window alone is decoded
on DALI when it comes first)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import ConfigError
from .tvread import Unsupported, fill_of, interp, size_of
from .resize import Resize, cpu_resize, dali_resize
from .window import crop, dali_slice
from .base import GraphContext, Param, Transform, as_size


class _Crop(Transform):
    """Shared by the crops: parameters ``start = (top, left)`` and the fixed output ``size``."""

    KIND = "geometric"
    NEEDS_SIZE = True
    REGION = False  # True: the window always lies inside the image, so the decoder can produce it alone

    def output_size(self, size, params):
        return self.size

    def static_size(self, size):
        return self.size

    def window(self, params) -> tuple[int, int, int, int]:
        (top, left), (h, w) = (int(v) for v in params["start"]), self.size
        return top, left, h, w

    def apply(self, img, params):
        return crop(img, *self.window(params), getattr(self, "fill", 0))

    def dali(self, images, params, ctx: GraphContext):
        ctx.hw = self.size
        return dali_slice(images, params["start"], list(self.size), getattr(self, "fill", 0))


@dataclass(frozen=True, repr=False)
class CenterCrop(_Crop):
    """The centre ``size`` window (torchvision's rounding: ``top = int(round((H - h) / 2))``), padded
    with 0 on both sides (the extra pixel bottom/right) when the image is smaller."""

    TORCHVISION = ("CenterCrop",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> CenterCrop:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        return cls(size_of(t.size))

    EXAMPLES = ("CenterCrop(24)", "CenterCrop((300, 9))")
    TOLERANCE = 0
    DEPTHS = (8, 16)  # a cut (padded with 0): exact on uint16 too

    size: int | tuple[int, int]

    PARAMS = (Param("start", "int32", (2,)),)

    def __post_init__(self):
        object.__setattr__(self, "size", as_size("size", self.size, "CenterCrop"))

    def sample(self, u, size):
        def anchor(n, c):
            return -((c - n) // 2) if c > n else int(round((n - c) / 2.0))

        return {"start": np.array([anchor(size[0], self.size[0]), anchor(size[1], self.size[1])], np.int32)}


@dataclass(frozen=True, repr=False)
class RandomCrop(_Crop):
    """A uniformly placed ``size`` window of the image padded by ``padding`` (int, (lr, tb) or
    (left, top, right, bottom)) with the constant ``fill``. ``pad_if_needed`` pads both sides of a
    too-small image by the shortfall, as torchvision; an image still smaller than ``size`` is centred
    in the window instead of raising."""

    TORCHVISION = ("RandomCrop",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> RandomCrop:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        if getattr(t, "padding_mode", "constant") != "constant":
            raise Unsupported(f"padding_mode={t.padding_mode!r} (only 'constant')")
        pad = t.padding
        pad = None if pad is None else (pad if isinstance(pad, int) else tuple(int(x) for x in pad))
        return cls(size_of(t.size), padding=pad, pad_if_needed=bool(t.pad_if_needed), fill=fill_of(t.fill))

    EXAMPLES = ("RandomCrop(24, padding=4)", "RandomCrop(32, pad_if_needed=True, fill=7)")
    TOLERANCE = 0
    DEPTHS = (8, 16)  # a cut: exact on uint16 too (``fill`` is then a value of the 16-bit image)

    size: int | tuple[int, int]
    padding: int | tuple[int, ...] | None = None
    pad_if_needed: bool = False
    fill: float = 0
    padding_mode: Literal["constant"] = "constant"

    PARAMS = (Param("start", "int32", (2,)),)
    UNIFORMS = 2

    def __post_init__(self):
        object.__setattr__(self, "size", as_size("size", self.size, "RandomCrop"))
        p = self.padding
        p = (0, 0, 0, 0) if p is None else (p,) * 4 if isinstance(p, int) else tuple(p)
        if len(p) == 2:
            p = (p[0], p[1], p[0], p[1])
        if len(p) != 4 or not all(isinstance(v, int) and v >= 0 for v in p):
            raise ConfigError(f"RandomCrop.padding={self.padding!r}; give an int, (left/right, top/bottom) or "
                              "(left, top, right, bottom) of non-negative ints")
        object.__setattr__(self, "_ltrb", p)
        if self.padding_mode != "constant":
            raise ConfigError(f"RandomCrop.padding_mode={self.padding_mode!r}; only 'constant' is supported")
        if not isinstance(self.fill, (int, float)) or not 0 <= self.fill <= 255:
            raise ConfigError(f"RandomCrop.fill={self.fill!r}; must be one number in [0, 255] (uint8 levels)")

    def sample(self, u, size):
        left, top, right, bottom = self._ltrb
        starts = []
        for k, (n, c, lo, hi) in enumerate(((size[0], self.size[0], top, bottom), (size[1], self.size[1], left, right))):
            padded = n + lo + hi
            if self.pad_if_needed and padded < c:
                lo, padded = lo + (c - padded), padded + 2 * (c - padded)
            if padded < c:
                starts.append(-lo - (c - padded) // 2)
            else:
                starts.append(min(int(u[k] * (padded - c + 1)), padded - c) - lo)
        return {"start": np.array(starts, np.int32)}

    def eval(self):
        return CenterCrop(self.size)


@dataclass(frozen=True, repr=False)
class RandomResizedCrop(_Crop):
    """torchvision's RandomResizedCrop: up to 10 attempts at a window of ``scale`` of the area and
    ``ratio`` (w/h, log-uniform), placed uniformly; else the centre crop of the clamped ratio; then
    resized to ``size``. Each attempt uses its own 4 uniforms (40 per draw, fixed)."""

    TORCHVISION = ("RandomResizedCrop",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> RandomResizedCrop:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        interp(t)
        return cls(size_of(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio),
                   antialias=getattr(t, "antialias", True) is not False)

    EXAMPLES = ("RandomResizedCrop(32)", "RandomResizedCrop((24, 40), scale=(0.5, 1.0))")
    TOLERANCE = 0
    GPU_TOLERANCE = 1  # DALI's GPU resampling and rounding differ from its CPU kernels
    DEPTHS = (8, 16)  # a cut, then Resize's kernel: exact on uint16 too

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    antialias: bool = True

    PARAMS = (Param("start", "int32", (2,)), Param("shape", "int32", (2,)))
    UNIFORMS = 40
    REGION = True

    def __post_init__(self):
        object.__setattr__(self, "size", as_size("size", self.size, "RandomResizedCrop"))
        for name in ("scale", "ratio"):
            v = getattr(self, name)
            try:
                lo, hi = (float(x) for x in v)
            except (TypeError, ValueError):
                raise ConfigError(f"RandomResizedCrop.{name}={v!r}; give a (min, max) pair") from None
            if not 0 < lo <= hi:
                raise ConfigError(f"RandomResizedCrop.{name}={v!r}; need 0 < min <= max")
            object.__setattr__(self, name, (lo, hi))

    def sample(self, u, size):
        height, width = size
        area = height * width
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for k in range(10):
            a, r, y, x = u[4 * k:4 * k + 4]
            target_area = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * a)
            aspect = math.exp(log_lo + (log_hi - log_lo) * r)
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = min(int(y * (height - h + 1)), height - h)
                left = min(int(x * (width - w + 1)), width - w)
                return {"start": np.array([top, left], np.int32), "shape": np.array([h, w], np.int32)}
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        h, w = max(min(h, height), 1), max(min(w, width), 1)
        return {"start": np.array([(height - h) // 2, (width - w) // 2], np.int32), "shape": np.array([h, w], np.int32)}

    def window(self, params):
        (top, left), (h, w) = (int(v) for v in params["start"]), (int(v) for v in params["shape"])
        return top, left, h, w

    def apply(self, img, params):
        return cpu_resize(crop(img, *self.window(params)), *self.size, antialias=self.antialias)

    def dali(self, images, params, ctx: GraphContext):
        return self.after_region(dali_slice(images, params["start"], params["shape"]), params, ctx)

    def after_region(self, images, params, ctx: GraphContext):
        """What follows the cut when the decoder already produced the window (region decode)."""
        ctx.hw = self.size
        return dali_resize(images, *self.size, antialias=self.antialias)

    EVAL_CROP_RATIO = 0.875  # torchvision's ImageNet evaluation: resize to 256, centre crop 224

    def eval(self):
        """torchvision's evaluation transform for this recipe: the shorter side resized to
        ``round(max(h, w) / 0.875)`` (aspect kept: 256 for 224), then the centre ``size`` crop. Not a
        squash to ``size``: the objects keep the proportions they had in training."""
        h, w = self.size
        return (Resize(int(round(max(h, w) / self.EVAL_CROP_RATIO)), antialias=self.antialias), CenterCrop(self.size))
