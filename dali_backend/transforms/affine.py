"""``RandomAffine``: torchvision's random affine transformation (rotation, translation, scale, shear).

One operation, one module: its arguments, its per-draw parameter (the 2x3 matrix), its CPU kernel
(``cv2.warpAffine``), its DALI fragment (``fn.warp_affine``), its examples, tolerance and torchvision
name. The matrix is drawn once per draw and both backends apply the same numbers.

Trade-offs against torchvision: bilinear only (nearest-neighbour ties differ between DALI and
OpenCV); the centre is the image's centre; translations are whole pixels, as torchvision rounds them.
The forward map is ``d = c + t + scale * R(angle) @ Sh(shear) @ (p - c)`` with ``R`` turning
counter-clockwise (like ``RandomRotation``) and ``Sh = [[1, tan(sx)], [tan(sy), 1]]``: the same
parameters as torchvision's, but torchvision composes rotation and shear in another decomposition
(``_get_inverse_affine_matrix``), so with shear the two differ slightly; without shear they agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .base import GraphContext, Param, Transform, as_range
from .tvread import Unsupported, fill_of, interp


def inverse_matrix(height: int, width: int, angle: float, translate: tuple[float, float], scale: float,
                   shear: tuple[float, float]) -> np.ndarray:
    """The 2x3 float32 destination-to-source matrix in DALI's coordinates (``[0, 0]`` the corner of the
    first pixel): ``src = M @ [x, y, 1]``. Rotation about the image centre, then shear, scale, translate."""
    cx, cy = width / 2.0, height / 2.0  # the centre in corner coordinates (pixel (w-1)/2 in OpenCV's)
    a = math.radians(angle)
    rotation = np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])  # counter-clockwise, y down
    shearing = np.array([[1.0, math.tan(math.radians(shear[0]))], [math.tan(math.radians(shear[1])), 1.0]])
    forward = scale * rotation @ shearing  # a source offset from the centre -> its destination offset
    inv = np.linalg.inv(forward)
    tx, ty = translate
    offset = np.array([cx, cy]) - inv @ np.array([cx + tx, cy + ty])
    return np.concatenate([inv, offset[:, None]], axis=1).astype(np.float32)


@dataclass(frozen=True, repr=False)
class RandomAffine(Transform):
    """torchvision's RandomAffine: ``degrees`` a number ``d`` (``U(-d, d)``) or a (min, max) pair;
    ``translate`` an optional (a, b), the largest shift as fractions of the width and height (whole
    pixels, ``round(U(-a*w, a*w))``); ``scale`` an optional (min, max) factor; ``shear`` an optional
    number ``s`` (x shear ``U(-s, s)``), pair (x range) or 4-tuple (x and y ranges), in degrees;
    ``fill`` the value outside the image. Bilinear. Same output size."""

    degrees: float | tuple[float, float]
    translate: tuple[float, float] | None = None
    scale: tuple[float, float] | None = None
    shear: float | tuple[float, ...] | None = None
    fill: float = 0.0

    KIND = "geometric"
    NEEDS_SIZE = True
    PARAMS = (Param("matrix", "float32", (2, 3)),)
    UNIFORMS = 6  # angle, tx, ty, scale, shear x, shear y
    EXAMPLES = ("RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10)",
                "RandomAffine((-10, 30), shear=(-5, 5, -8, 8), fill=7)")
    TOLERANCE = 1
    DEPTHS = (8, 16)  # uint16 too (fill: a value at the image's depth); DALI's warp through int32 (at_depth)
    TOLERANCE16 = 128  # 16-bit levels, as RandomRotation's
    TORCHVISION = ("RandomAffine",)

    def __post_init__(self):
        ranges = {"degrees": as_range("degrees", self.degrees, centre=0.0, op="RandomAffine")}
        if self.translate is not None:
            a, b = (float(v) for v in self.translate)
            if not (0.0 <= a <= 1.0 and 0.0 <= b <= 1.0):
                raise ConfigError(f"RandomAffine.translate={self.translate!r}; give (a, b) fractions in [0, 1]")
        if self.scale is not None:
            lo, hi = (float(v) for v in self.scale)
            if not 0.0 < lo <= hi:
                raise ConfigError(f"RandomAffine.scale={self.scale!r}; need 0 < min <= max")
        shear = self.shear
        if shear is None:
            shear = (0.0, 0.0, 0.0, 0.0)
        elif isinstance(shear, (int, float)):
            shear = (-float(shear), float(shear), 0.0, 0.0) if shear >= 0 else None
        elif len(shear) == 2:
            shear = (float(shear[0]), float(shear[1]), 0.0, 0.0)
        elif len(shear) != 4:
            shear = None
        if shear is None or shear[0] > shear[1] or shear[2] > shear[3] or any(abs(v) >= 90 for v in shear):
            raise ConfigError(f"RandomAffine.shear={self.shear!r}; give s >= 0, (min, max) or (xmin, xmax, ymin, ymax) "
                              "degrees within (-90, 90)")
        ranges["shear"] = tuple(float(v) for v in shear)
        if not isinstance(self.fill, (int, float)) or not 0 <= self.fill <= 255:
            raise ConfigError(f"RandomAffine.fill={self.fill!r}; must be a level in [0, 255]")
        object.__setattr__(self, "_ranges", ranges)

    @classmethod
    def from_torchvision(cls, t) -> RandomAffine:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        interp(t)
        if getattr(t, "center", None) is not None:
            raise Unsupported("center= (the image centre only)")
        shear = getattr(t, "shear", None)
        return cls(tuple(float(d) for d in t.degrees), translate=getattr(t, "translate", None),
                   scale=getattr(t, "scale", None), shear=None if shear is None else tuple(float(s) for s in shear),
                   fill=fill_of(getattr(t, "fill", 0)))

    @property
    def is_identity(self) -> bool:
        c, half = self._ranges["degrees"]
        return (c == 0 and half == 0 and self.translate in (None, (0, 0)) and self.scale in (None, (1, 1))
                and self._ranges["shear"] == (0.0, 0.0, 0.0, 0.0))

    def sample(self, u, size):
        h, w = size
        centre, half = self._ranges["degrees"]
        angle = centre + (2.0 * u[0] - 1.0) * half
        tx = ty = 0.0
        if self.translate is not None:  # torchvision: round(U(-a * w, a * w)) whole pixels
            max_dx, max_dy = float(self.translate[0]) * w, float(self.translate[1]) * h
            tx, ty = float(round((2.0 * u[1] - 1.0) * max_dx)), float(round((2.0 * u[2] - 1.0) * max_dy))
        scale = 1.0 if self.scale is None else float(self.scale[0]) + (float(self.scale[1]) - float(self.scale[0])) * u[3]
        x0, x1, y0, y1 = self._ranges["shear"]
        shear = (x0 + (x1 - x0) * u[4], y0 + (y1 - y0) * u[5])
        return {"matrix": inverse_matrix(h, w, angle, (tx, ty), scale, shear)}

    def describe(self, params):
        m = np.asarray(params["matrix"])
        return f"RandomAffine(matrix=[[{m[0, 0]:.3f} {m[0, 1]:.3f} {m[0, 2]:.1f}] [{m[1, 0]:.3f} {m[1, 1]:.3f} {m[1, 2]:.1f}]])"

    def apply(self, img, params):
        import cv2

        h, w = img.shape[:2]
        m = np.asarray(params["matrix"], np.float64).copy()
        # DALI's coordinates put pixel centres at +0.5, OpenCV's at the integers: src + 0.5 = M (x + 0.5)
        m[:, 2] += m[:, :2] @ np.array([0.5, 0.5]) - 0.5
        out = cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                             borderMode=cv2.BORDER_CONSTANT, borderValue=(float(self.fill),) * 4)
        return out.reshape(img.shape)

    def dali(self, images, params, ctx: GraphContext):
        from nvidia.dali import fn

        return at_depth(images, ctx, lambda x, types: fn.warp_affine(x, matrix=params["matrix"], fill_value=float(self.fill),
                                                                     interp_type=types.INTERP_LINEAR, inverse_map=True))


def at_depth(images, ctx: GraphContext, warp):
    """``warp(images, types)`` (a DALI warp: ``fn.rotate``, ``fn.warp_affine``) on the graph's images at their
    depth: DALI's warps take no uint16, so 16-bit images go through int32 (the warp's float result rounded
    to int32 by DALI, then cast back: a bilinear mix of uint16 values stays within uint16)."""
    from nvidia.dali import fn, types

    if ctx.bits == 8:
        return warp(images, types)
    return fn.cast(warp(fn.cast(images, dtype=types.INT32), types), dtype=types.UINT16)
