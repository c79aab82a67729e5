"""``RandomRotation``: about the image centre, bilinear, same size; ``cv2.warpAffine`` on the fallback,
``fn.rotate`` on DALI (within 1 level)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import ConfigError
from .tvread import Unsupported, fill_of, interp
from .affine import at_depth
from .base import Param, Transform, as_range, centred


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
    DEPTHS = (8, 16)  # uint16 too (fill: a value at the image's depth); DALI's warp through int32 (affine.at_depth)
    TOLERANCE16 = 128  # 16-bit levels (half an 8-bit level of the full range): OpenCV's warp samples at 1/32 pixel

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
        from nvidia.dali import fn

        return at_depth(images, ctx, lambda x, types: fn.rotate(x, angle=params["angle"], keep_size=True,
                                                                fill_value=float(self.fill), interp_type=types.INTERP_LINEAR))
