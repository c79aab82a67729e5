"""Resize: exact size, shorter side (with ``max_size``) or letterbox; DALI's antialiased linear
filter on both backends (the CPU kernel is :mod:`.resample`, bit-exact with DALI's CPU ``fn.resize``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .tvread import Unsupported, interp, size_of
from .window import crop
from .base import GraphContext, Param, Size, Transform, as_size


def letterbox_size(height: int, width: int, out_h: int, out_w: int) -> Size:
    """``(h, w)`` a ``height`` x ``width`` image is resized to when fitted inside ``out_h`` x ``out_w``
    keeping its aspect ratio (float32 math, as DALI evaluates it)."""
    f = np.float32
    s = min(f(out_w) / f(width), f(out_h) / f(height))
    return (max(int(np.floor(f(height) * s + f(0.5))), 1), max(int(np.floor(f(width) * s + f(0.5))), 1))


def shorter_side_size(height: int, width: int, size: int, max_size: int | None) -> Size:
    """torchvision's ``Resize(int)`` output size: the shorter side becomes ``size``, the longer side
    ``int(size * long / short)``, both scaled down if the longer one would exceed ``max_size``."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    new_short = max(new_short, 1)
    return (new_long, new_short) if width <= height else (new_short, new_long)


def dali_resize(images, h, w, antialias: bool = True):
    from nvidia.dali import fn, types

    def arg(v):
        return float(v) if isinstance(v, (int, float)) else fn.cast(v, dtype=types.FLOAT)

    return fn.resize(images, resize_x=arg(w), resize_y=arg(h), antialias=antialias, interp_type=types.INTERP_LINEAR)


def cpu_resize(img: np.ndarray, h: int, w: int, antialias: bool = True) -> np.ndarray:
    """:func:`dali_resize` on the CPU: :func:`~dali_backend.transforms.resample.resize`, bit-exact with
    DALI's CPU operator (``antialias=False`` too: DALI's plain linear filter, support 2)."""
    from .resample import resize  # OpenCV and torch: loaded when an image is resized, not with the contract

    return resize(img, int(h), int(w), antialias=bool(antialias))


@dataclass(frozen=True, repr=False)
class Resize(Transform):
    """Resize: ``size=(h, w)`` exactly; ``size=n`` makes the shorter side ``n`` (aspect kept, the longer
    side ``int(n * long / short)``, at most ``max_size``); ``letterbox=True`` with ``(h, w)`` fits the
    image inside keeping its aspect ratio and pads with 0 to ``(h, w)``, content centred (``ceil(pad/2)``
    from the top and left).

    Antialiased linear (triangle filter over the source footprint when shrinking; torchvision's
    ``antialias=True``). ``antialias=False``: plain linear (2 taps) when shrinking too. Both equal
    DALI's CPU ``fn.resize`` bit for bit.
    """

    TORCHVISION = ("Resize",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> Resize:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        interp(t)
        if getattr(t, "antialias", True) is False:
            raise Unsupported("antialias=False")
        return cls(size_of(t.size), max_size=getattr(t, "max_size", None))

    EXAMPLES = ("Resize((40, 56))", "Resize(32)", "Resize((48, 64), letterbox=True)", "Resize(24, max_size=30)")
    TOLERANCE = 0
    GPU_TOLERANCE = 1  # DALI's GPU resampling and rounding differ from its CPU kernels
    DEPTHS = (8, 16)  # uint16 in, uint16 out: the CPU kernel is DALI's at 16 bits too (resample.resize), exact

    size: int | tuple[int, int]
    max_size: int | None = None
    letterbox: bool = False
    antialias: bool = True

    KIND = "geometric"
    PARAMS = (Param("height", "int32"), Param("width", "int32"))

    def __post_init__(self):
        size = self.size
        if isinstance(size, (list, tuple)) and len(size) == 1:
            size = size[0]
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            as_size("size", size, "Resize")
            object.__setattr__(self, "size", int(size))
            if self.letterbox:
                raise ConfigError(f"Resize(size={self.size!r}, letterbox=True); letterbox needs size=(height, width)")
        else:
            object.__setattr__(self, "size", as_size("size", size, "Resize"))
            if self.max_size is not None:
                raise ConfigError(f"Resize.max_size={self.max_size!r} needs size=n (shorter side), not {size!r}")
        if self.max_size is not None and not (isinstance(self.max_size, int) and self.max_size > self.size):
            raise ConfigError(f"Resize.max_size={self.max_size!r}; must be an int larger than size={self.size}")

    @property
    def exact(self) -> bool:
        return isinstance(self.size, tuple) and not self.letterbox

    @property
    def NEEDS_SIZE(self) -> bool:  # type: ignore[override]
        return not self.exact

    @property
    def wire(self):
        return () if self.exact else self.PARAMS

    def sample(self, u, size):
        if self.exact:
            return {}
        h, w = size
        if self.letterbox:
            nh, nw = letterbox_size(h, w, *self.size)
        else:
            nh, nw = shorter_side_size(h, w, self.size, self.max_size)
        return {"height": np.array(nh, np.int32), "width": np.array(nw, np.int32)}

    def output_size(self, size, params):
        if isinstance(self.size, tuple):
            return self.size
        return (int(params["height"]), int(params["width"])) if params else None

    def static_size(self, size):
        return self.size if isinstance(self.size, tuple) else None

    def apply(self, img, params):
        if self.exact:
            return cpu_resize(img, *self.size, antialias=self.antialias)
        inner = cpu_resize(img, int(params["height"]), int(params["width"]), antialias=self.antialias)
        if not self.letterbox:
            return inner
        (H, W), (nh, nw) = self.size, inner.shape[:2]
        return crop(inner, -((H - nh + 1) // 2), -((W - nw + 1) // 2), H, W)

    def dali(self, images, params, ctx: GraphContext):
        from nvidia.dali import fn

        if self.exact:
            ctx.hw = self.size
            return dali_resize(images, *self.size, antialias=self.antialias)
        images = dali_resize(images, params["height"], params["width"], antialias=self.antialias)
        if not self.letterbox:
            ctx.hw = (params["height"], params["width"])
            return images
        ctx.hw = self.size
        return fn.crop(images, crop_h=self.size[0], crop_w=self.size[1], out_of_bounds_policy="pad", fill_values=0)
