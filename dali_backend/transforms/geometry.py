"""Geometric operations: resize, crops, flips, turns and rotation (torchvision's names and meanings).

Crop windows are drawn in Python as pixel rectangles (``start = (top, left)``, ``shape = (h, w)``);
both backends cut exactly that rectangle, padding with ``fill`` where it leaves the image, so crops
and flips agree exactly. Resizing is DALI's antialiased linear filter, reproduced bit for bit (on
DALI's CPU operators) by :mod:`dali_backend.transforms.resample`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import ConfigError
from .tvread import Unsupported, fill_of, interp, size_of
from .base import GraphContext, Param, Size, Transform, as_range, as_size, centred, check_probability


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


def crop(img: np.ndarray, top: int, left: int, h: int, w: int, fill: float = 0) -> np.ndarray:
    """The ``h`` x ``w`` window at (``top``, ``left``); outside the image filled with ``fill``."""
    H, W = img.shape[:2]
    if 0 <= top and 0 <= left and top + h <= H and left + w <= W:
        return np.ascontiguousarray(img[top:top + h, left:left + w])
    out = np.full((h, w) + img.shape[2:], fill, dtype=img.dtype)
    y0, y1, x0, x1 = max(top, 0), min(top + h, H), max(left, 0), min(left + w, W)
    if y0 < y1 and x0 < x1:
        out[y0 - top:y1 - top, x0 - left:x1 - left] = img[y0:y1, x0:x1]
    return out


def _dali_slice(images, start, shape, fill: float = 0.0):
    from nvidia.dali import fn

    return fn.slice(images, start=start, shape=shape, axis_names="HW", out_of_bounds_policy="pad",
                    fill_values=float(fill))


def _dali_resize(images, h, w, antialias: bool = True):
    from nvidia.dali import fn, types

    def arg(v):
        return float(v) if isinstance(v, (int, float)) else fn.cast(v, dtype=types.FLOAT)

    return fn.resize(images, resize_x=arg(w), resize_y=arg(h), antialias=antialias, interp_type=types.INTERP_LINEAR)


def _cpu_resize(img: np.ndarray, h: int, w: int, antialias: bool = True) -> np.ndarray:
    """:func:`_dali_resize` on the CPU: :func:`~dali_backend.transforms.resample.resize`, bit-exact with
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
            return _cpu_resize(img, *self.size, antialias=self.antialias)
        inner = _cpu_resize(img, int(params["height"]), int(params["width"]), antialias=self.antialias)
        if not self.letterbox:
            return inner
        (H, W), (nh, nw) = self.size, inner.shape[:2]
        return crop(inner, -((H - nh + 1) // 2), -((W - nw + 1) // 2), H, W)

    def dali(self, images, params, ctx: GraphContext):
        from nvidia.dali import fn

        if self.exact:
            ctx.hw = self.size
            return _dali_resize(images, *self.size, antialias=self.antialias)
        images = _dali_resize(images, params["height"], params["width"], antialias=self.antialias)
        if not self.letterbox:
            ctx.hw = (params["height"], params["width"])
            return images
        ctx.hw = self.size
        return fn.crop(images, crop_h=self.size[0], crop_w=self.size[1], out_of_bounds_policy="pad", fill_values=0)


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
        return _dali_slice(images, params["start"], list(self.size), getattr(self, "fill", 0))


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
        return _cpu_resize(crop(img, *self.window(params)), *self.size, antialias=self.antialias)

    def dali(self, images, params, ctx: GraphContext):
        return self.after_region(_dali_slice(images, params["start"], params["shape"]), params, ctx)

    def after_region(self, images, params, ctx: GraphContext):
        """What follows the cut when the decoder already produced the window (region decode)."""
        ctx.hw = self.size
        return _dali_resize(images, *self.size, antialias=self.antialias)

    EVAL_CROP_RATIO = 0.875  # torchvision's ImageNet evaluation: resize to 256, centre crop 224

    def eval(self):
        """torchvision's evaluation transform for this recipe: the shorter side resized to
        ``round(max(h, w) / 0.875)`` (aspect kept: 256 for 224), then the centre ``size`` crop. Not a
        squash to ``size``: the objects keep the proportions they had in training."""
        h, w = self.size
        return (Resize(int(round(max(h, w) / self.EVAL_CROP_RATIO)), antialias=self.antialias), CenterCrop(self.size))


class _Flip(Transform):
    KIND = "geometric"
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


@dataclass(frozen=True, repr=False)
class RandomRotation(Transform):
    """Rotate by ``angle ~ U(-degrees, degrees)`` (or ``U(min, max)`` for a pair) counter-clockwise about
    the image centre, same size, corners filled with ``fill``, bilinear. ``interpolation`` must be
    ``"bilinear"`` (torchvision's default is nearest, whose half-pixel ties DALI and OpenCV resolve
    differently: up to 255 levels on single pixels); ``expand``/``center`` are not supported."""

    TORCHVISION = ("RandomRotation",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> RandomRotation:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        interp(t)
        if getattr(t, "expand", False) or getattr(t, "center", None) is not None:
            raise Unsupported("expand=True or center= (rotation about the centre, same size only)")
        return cls(tuple(float(d) for d in t.degrees), fill=fill_of(t.fill))

    EXAMPLES = ("RandomRotation(30)", "RandomRotation((-20, 40), fill=9)")
    TOLERANCE = 1

    degrees: float | tuple[float, float]
    interpolation: Literal["bilinear"] = "bilinear"
    expand: bool = False
    center: tuple[float, float] | None = None
    fill: float = 0

    KIND = "geometric"
    PARAMS = (Param("angle", "float32"),)
    UNIFORMS = 1

    def __post_init__(self):
        object.__setattr__(self, "_range", as_range("degrees", self.degrees, centre=0.0, low=-360, high=360,
                                                    op="RandomRotation"))
        if self.interpolation != "bilinear":
            raise ConfigError(f"RandomRotation.interpolation={self.interpolation!r}; only 'bilinear' is supported "
                              "(nearest-neighbour ties differ between DALI and OpenCV)")
        if self.expand or self.center is not None:
            raise ConfigError("RandomRotation: expand=True and center= are not supported; rotate about the centre "
                              "keeping the size (expand=False, center=None)")
        if not isinstance(self.fill, (int, float)) or not 0 <= self.fill <= 255:
            raise ConfigError(f"RandomRotation.fill={self.fill!r}; must be one number in [0, 255] (uint8 levels)")

    @property
    def is_identity(self) -> bool:
        return self._range == (0.0, 0.0)

    def sample(self, u, size):
        return {"angle": np.array(centred(u[0], *self._range), np.float32)}

    def apply(self, img, params):
        import cv2

        angle = float(params["angle"])
        if angle == 0.0:
            return img
        h, w = img.shape[:2]
        m = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), angle, 1.0)
        return cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                              borderValue=(float(self.fill),) * 4)

    def dali(self, images, params, ctx):
        from nvidia.dali import fn, types

        return fn.rotate(images, angle=params["angle"], keep_size=True, fill_value=float(self.fill),
                         interp_type=types.INTERP_LINEAR)
