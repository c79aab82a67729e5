"""Photometric operations: colour jitter, Gaussian blur, CLAHE, grayscale.

Trade-offs against torchvision, made so that both backends compute the same numbers:

* ``ColorJitter`` applies its four adjustments in the fixed order brightness, contrast, saturation,
  hue (torchvision shuffles the order per call), contrast is ``b * (128 + c * (x - 128))`` about a
  fixed ``contrast_center`` (torchvision uses the image's mean gray), and hue rotates colours about
  the gray axis in YIQ space (torchvision shifts HSV hue; the two agree on the hue angle of pure
  colours, not exactly elsewhere). Saturation is torchvision's blend with the gray image.
* ``Grayscale`` is realised by decoding the JPEG's luma channel (it must come before any
  photometric operation); that is the BT.601 gray torchvision computes, up to rounding.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from ..errors import ConfigError
from .tvread import jitter_range
from .base import GraphContext, Param, Transform, as_range, centred

GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # BT.601, torchvision's rgb_to_grayscale
_RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])


def color_matrix(saturation: float, hue: float) -> np.ndarray:
    """3x3 float32 ``M`` with ``rgb' = M @ rgb``: saturation blend with gray, then a hue rotation of
    ``hue`` turns (``hue * 360`` degrees) about the gray axis in YIQ space."""
    s = np.float64(saturation)
    gray = np.tile(np.array(GRAY_WEIGHTS), (3, 1))
    sat = s * np.eye(3) + (1.0 - s) * gray
    a = 2.0 * math.pi * float(hue)
    rot = np.array([[1.0, 0.0, 0.0], [0.0, math.cos(a), -math.sin(a)], [0.0, math.sin(a), math.cos(a)]])
    return (np.linalg.inv(_RGB2YIQ) @ rot @ _RGB2YIQ @ sat).astype(np.float32)


def apply_color_matrix(img: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``round(M @ rgb)`` per pixel in float32, clipped to uint8 (DALI's ``coord_transform``)."""
    f = img.astype(np.float32)
    m = np.asarray(m, np.float32)
    out = f[..., 0:1] * m[:, 0] + f[..., 1:2] * m[:, 1] + f[..., 2:3] * m[:, 2]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


@dataclass(frozen=True, repr=False)
class ColorJitter(Transform):
    """torchvision's ColorJitter arguments: ``brightness``/``contrast``/``saturation`` a number ``v``
    (factor ``U(max(0, 1 - v), 1 + v)``) or a (min, max) pair; ``hue`` a number in [0, 0.5] (shift
    ``U(-hue, hue)`` turns) or a pair in [-0.5, 0.5]. See the module docstring for the formulas.
    Saturation and hue leave gray images unchanged."""

    TORCHVISION = ("ColorJitter",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> ColorJitter:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        return cls(jitter_range(t.brightness, 1.0), jitter_range(t.contrast, 1.0), jitter_range(t.saturation, 1.0),
                   jitter_range(t.hue, 0.0))

    EXAMPLES = ("ColorJitter(0.4, 0.4, 0.4, 0.1)", "ColorJitter(brightness=0.2)")
    TOLERANCE = 0

    brightness: float | tuple[float, float] = 0
    contrast: float | tuple[float, float] = 0
    saturation: float | tuple[float, float] = 0
    hue: float | tuple[float, float] = 0
    contrast_center: float = 128.0

    KIND = "photometric"
    PARAMS = (Param("brightness"), Param("contrast"), Param("matrix", "float32", (3, 3)))
    UNIFORMS = 4

    def __post_init__(self):
        ranges = {}
        for name in ("brightness", "contrast", "saturation"):
            v = getattr(self, name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1:
                v = (0.0, 1.0 + v)  # torchvision clips the lower end at 0
            ranges[name] = as_range(name, v, centre=1.0, low=0.0, op="ColorJitter")
        ranges["hue"] = as_range("hue", self.hue, centre=0.0, low=-0.5, high=0.5, op="ColorJitter")
        object.__setattr__(self, "_ranges", ranges)
        if not isinstance(self.contrast_center, (int, float)) or not 0 <= self.contrast_center <= 255:
            raise ConfigError(f"ColorJitter.contrast_center={self.contrast_center!r}; must be a level in [0, 255]")

    def _fixed(self, name: str) -> bool:
        return self._ranges[name] == ((0.0, 0.0) if name == "hue" else (1.0, 0.0))

    @property
    def jitters(self) -> bool:
        return not (self._fixed("brightness") and self._fixed("contrast"))

    @property
    def mixes(self) -> bool:
        return not (self._fixed("saturation") and self._fixed("hue"))

    @property
    def is_identity(self) -> bool:
        return not (self.jitters or self.mixes)

    @property
    def wire(self):
        return (self.PARAMS[:2] if self.jitters else ()) + (self.PARAMS[2:] if self.mixes else ())

    def wire_for(self, channels):
        return self.wire if channels == 3 else tuple(p for p in self.wire if p.name != "matrix")

    def sample(self, u, size):
        r = self._ranges
        b, c = centred(u[0], *r["brightness"]), centred(u[1], *r["contrast"])
        s, h = centred(u[2], *r["saturation"]), centred(u[3], *r["hue"])
        out = {}
        if self.jitters:
            out |= {"brightness": np.array(b, np.float32), "contrast": np.array(c, np.float32)}
        if self.mixes:
            out["matrix"] = color_matrix(s, h)
        return out

    def describe(self, params):
        parts = [f"{k[0]}={float(params[k]):.3f}" for k in ("brightness", "contrast") if k in params]
        if "matrix" in params:
            parts.append("sat/hue matrix")
        return f"ColorJitter({', '.join(parts)})"

    def apply(self, img, params):
        import cv2

        if self.jitters:
            lut = jitter_lut(float(params["brightness"]), float(params["contrast"]), float(self.contrast_center))
            if not (float(params["brightness"]) == 1.0 and float(params["contrast"]) == 1.0):
                img = cv2.LUT(img, lut)
        if self.mixes and img.ndim == 3:
            img = apply_color_matrix(img, params["matrix"])
        return img

    def dali(self, images, params, ctx: GraphContext):
        from nvidia.dali import fn, types

        if self.jitters:
            images = fn.brightness_contrast(images, brightness=params["brightness"], contrast=params["contrast"],
                                            contrast_center=float(self.contrast_center))
        if self.mixes and ctx.channels == 3:
            images = fn.coord_transform(images, M=params["matrix"], dtype=types.UINT8)  # rounds, saturates
        return images


def jitter_lut(brightness: float, contrast: float, center: float, ties: Literal["up", "even"] = "up") -> np.ndarray:
    """``b * (center + c * (x - center))`` for x in 0..255 as DALI's kernel evaluates it (float32,
    ``x * (b * c) + b * (center - c * center)``), rounded and clipped.

    Rounding of exact ties (x.5): ``"up"`` is DALI's CPU kernel (``std::round``; the values are
    non-negative where it matters), what both backends compute on CPU operators; ``"even"`` is DALI's
    GPU kernel (``__float2int_rn``), used to predict the GPU's 1-level tie differences exactly.
    """
    f32 = np.float32
    b = f32(f32(f32(brightness) * f32(255.0)) / f32(255.0))
    c, m = f32(contrast), f32(center)
    addend = b * (m - c * m)
    y = np.arange(256, dtype=np.float32) * (b * c) + addend
    rounded = np.floor(y + f32(0.5)) if ties == "up" else np.rint(y)
    return np.clip(rounded, 0, 255).astype(np.uint8)


@lru_cache(maxsize=64)
def gaussian_kernel(size: int, sigma: float) -> np.ndarray:
    """DALI's Gaussian window: ``exp(-x^2 / (2 sigma^2))`` for ``x`` in ``[-r, r]``, normalised, float32."""
    r = (size - 1) // 2
    x = np.arange(-r, r + 1, dtype=np.float32)
    k = np.exp(-(x * x) / np.float32(2.0 * sigma * sigma)).astype(np.float32)
    return (k / k.sum(dtype=np.float32)).astype(np.float32)


@dataclass(frozen=True, repr=False)
class GaussianBlur(Transform):
    """Gaussian blur with an odd ``kernel_size`` (int or (width, height)) and ``sigma`` fixed or drawn
    from ``U(min, max)`` per draw (torchvision's default (0.1, 2.0)); borders mirrored (reflect-101)."""

    TORCHVISION = ("GaussianBlur",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> GaussianBlur:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        return cls(tuple(int(k) for k in t.kernel_size), tuple(float(s) for s in t.sigma))

    EXAMPLES = ("GaussianBlur(5, (0.5, 2.0))", "GaussianBlur((3, 7), 1.5)")
    TOLERANCE = 1

    kernel_size: int | tuple[int, int]
    sigma: float | tuple[float, float] = (0.1, 2.0)

    KIND = "photometric"
    PARAMS = (Param("sigma"),)
    UNIFORMS = 1

    def __post_init__(self):
        k = self.kernel_size
        k = (k, k) if isinstance(k, int) else tuple(k)
        if len(k) != 2 or not all(isinstance(v, int) and v > 0 and v % 2 == 1 for v in k):
            raise ConfigError(f"GaussianBlur.kernel_size={self.kernel_size!r}; must be odd positive int(s)")
        object.__setattr__(self, "kernel_size", k)
        s = self.sigma
        lo, hi = (s, s) if isinstance(s, (int, float)) else tuple(float(v) for v in s)
        if not 0 < lo <= hi:
            raise ConfigError(f"GaussianBlur.sigma={self.sigma!r}; must be positive, or a (min, max) pair with 0 < min <= max")
        object.__setattr__(self, "_range", ((lo + hi) / 2.0, (hi - lo) / 2.0))

    def sample(self, u, size):
        return {"sigma": np.array(centred(u[0], *self._range), np.float32)}

    @property
    def is_random(self) -> bool:
        return self._range[1] > 0

    def apply(self, img, params):
        import cv2

        s = float(params["sigma"])
        kx, ky = gaussian_kernel(self.kernel_size[0], s), gaussian_kernel(self.kernel_size[1], s)
        out = cv2.sepFilter2D(img.astype(np.float32), -1, kx, ky, borderType=cv2.BORDER_REFLECT_101)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(img.shape)

    def dali(self, images, params, ctx):
        from nvidia.dali import fn

        kx, ky = self.kernel_size
        return fn.gaussian_blur(images, window_size=[ky, kx], sigma=params["sigma"])


_CLAHES = threading.local()  # each thread's OpenCV CLAHE objects


def _load_native():
    """The compiled kernel (``_clahe.c``, built at install time; see setup.py), or None: not built (no C
    compiler then), or ``DALI_BACKEND_OPENCV_CLAHE=1`` in the environment (OpenCV's CLAHE throughout, for
    an A/B of the two)."""
    import os

    if os.environ.get("DALI_BACKEND_OPENCV_CLAHE", "").strip().lower() not in ("", "0", "false", "no", "off"):
        return None
    try:
        from . import _clahe
    except ImportError:
        return None
    return _clahe


NATIVE_CLAHE = _load_native()
"""``dali_backend.transforms._clahe`` when it is built and not switched off, else None."""

NATIVE_MAX_TILES = 64 * 64
"""The Clahe operation's largest grid; :func:`clahe_plane` sends a larger one to OpenCV."""


def clahe_plane(img: np.ndarray, clip_limit: float, tiles: tuple[int, int]) -> np.ndarray:
    """CLAHE of one 2-D plane (uint8 or uint16): ``cv2.createCLAHE(clip_limit, tiles).apply(img)``'s pixels.
    uint8 goes through the compiled kernel where it is built (:data:`NATIVE_CLAHE`: bit for bit; OpenCV's
    algorithm and its float32 blend in its order, four partial histograms per tile, AVX2 gathers of
    left/right pairs where the CPU has them; about 1 ms less per 640x480 image than OpenCV's in the
    loader, nearly level on an image already in cache); uint16, and every plane where it is not built,
    through OpenCV (:func:`cv_clahe`)."""
    tiles = (int(tiles[0]), int(tiles[1]))
    if (NATIVE_CLAHE is not None and img.dtype == np.uint8 and img.ndim == 2 and 0 < img.size < 2**31
            and tiles[0] * tiles[1] <= NATIVE_MAX_TILES):
        out = np.empty(img.shape, np.uint8)
        NATIVE_CLAHE.clahe_u8(img if img.strides[1] == 1 else np.ascontiguousarray(img), out, tiles[0], tiles[1],
                              float(clip_limit))
        return out
    return cv_clahe(float(clip_limit), tiles).apply(img)


def cv_clahe(clip_limit: float, tiles: tuple[int, int]):
    """This thread's ``cv2.createCLAHE(clip_limit, tiles)``, made once per thread and setting: a CLAHE
    object keeps its working buffers between calls, so one shared by threads (the ``torch-threads``
    executor) gives wrong pixels when two apply it at once."""
    import cv2

    made = _CLAHES.__dict__.setdefault("made", {})
    key = (clip_limit, tiles)
    op = made.get(key)
    if op is None:
        op = made[key] = cv2.createCLAHE(clipLimit=clip_limit, tileGridSize=tiles)
    return op


@dataclass(frozen=True, repr=False)
class Clahe(Transform):
    """Contrast-limited adaptive histogram equalisation (OpenCV's and DALI's CLAHE), per channel. On the
    CPU: :func:`clahe_plane` per channel (the compiled kernel for uint8 where it is built, OpenCV's
    pixels); in the DALI graph: ``fn.clahe`` (see :mod:`.clahe_graph`)."""

    EXAMPLES = ("Clahe()", "Clahe(3.0, (4, 6))")
    TOLERANCE = 0
    SAME_KERNEL_ON_CPU = True  # DALI's CPU fn.clahe is OpenCV's CLAHE, which clahe_plane reproduces

    clip_limit: float = 2.0
    tiles: tuple[int, int] = (8, 8)  # (tiles_x, tiles_y)

    CONDITIONALS = True
    KIND = "photometric"

    def __post_init__(self):
        if not (isinstance(self.clip_limit, (int, float)) and self.clip_limit > 0 and math.isfinite(self.clip_limit)):
            raise ConfigError(f"Clahe.clip_limit={self.clip_limit!r}; must be a positive number (OpenCV's default is 40, ours 2.0)")
        tiles = tuple(self.tiles) if not isinstance(self.tiles, int) else (self.tiles, self.tiles)
        if len(tiles) != 2 or not all(isinstance(t, int) and 1 <= t <= 64 for t in tiles):
            raise ConfigError(f"Clahe.tiles={self.tiles!r}; must be (tiles_x, tiles_y) integers in [1, 64]")
        object.__setattr__(self, "tiles", tiles)

    def apply(self, img, params):
        if img.ndim == 2:
            return clahe_plane(img, self.clip_limit, self.tiles)
        return np.dstack([clahe_plane(np.ascontiguousarray(img[:, :, c]), self.clip_limit, self.tiles)
                          for c in range(img.shape[2])])

    def branches(self, gpu: bool) -> bool:
        return gpu  # the portable graph's padding branch; DALI's CPU kernel is OpenCV's own code, at every size

    def dali(self, images, params, ctx: GraphContext):
        from .clahe_graph import clahe_like_opencv

        return clahe_like_opencv(images, ctx.hw[0], ctx.hw[1], self.tiles, float(self.clip_limit), channels=ctx.channels)


@dataclass(frozen=True, repr=False)
class Grayscale(Transform):
    """Gray output: decodes the JPEG's luma (see the module docstring); ``num_output_channels`` 1 or 3
    (the gray plane replicated), torchvision's meaning. Only geometric operations may precede it."""

    TORCHVISION = ("Grayscale",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> Grayscale:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        return cls(int(t.num_output_channels))

    num_output_channels: int = 1

    KIND = "photometric"
    DEPTHS = (8, 16)  # the decoder's gray (16-bit: DALI's and OpenCV's ANYDEPTH gray agree)

    def __post_init__(self):
        if self.num_output_channels not in (1, 3):
            raise ConfigError(f"Grayscale.num_output_channels={self.num_output_channels!r}; use 1 or 3")

    @property
    def is_identity(self) -> bool:
        return True  # realised by the decoder

    def apply(self, img, params):
        return img

    def dali(self, images, params, ctx):
        return images
