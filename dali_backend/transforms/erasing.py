"""``RandomErasing``: torchvision's random erasing of a rectangle, on the normalised batch.

One operation, one module. It is the first ``"batch"`` operation: it runs after ``Normalize`` on the
batch tensor (on the loader's device: the GPU for ``dali-gpu``), with the same code whichever backend
made the pixels, so both backends are equal by construction. Its box is drawn per draw from the
output size; the value is in normalised units, as in torchvision's recipes (``0``: the mean colour).
``value="random"`` (noise) is not supported: noise would need a random stream on the device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .base import Param, Transform, check_probability
from .tvread import Unsupported


@dataclass(frozen=True, repr=False)
class RandomErasing(Transform):
    """torchvision's RandomErasing: with probability ``p``, a rectangle of ``scale`` of the area (min, max)
    and aspect ``ratio`` (min, max; log-uniform) at a uniform place is set to ``value`` (a number, or
    one per output channel). Up to 10 attempts at a box that fits, else nothing is erased (torchvision's
    rule). Put it after ``Normalize``."""

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: float | tuple[float, ...] = 0.0

    KIND = "batch"
    PARAMS = (Param("box", "int32", (4,)),)  # (top, left, height, width); height 0: nothing erased
    UNIFORMS = 1 + 10 * 4
    TORCHVISION = ("RandomErasing",)

    def __post_init__(self):
        object.__setattr__(self, "p", check_probability(self.p, "RandomErasing"))
        for name in ("scale", "ratio"):
            lo, hi = (float(v) for v in getattr(self, name))
            if not 0 < lo <= hi:
                raise ConfigError(f"RandomErasing.{name}={getattr(self, name)!r}; need 0 < min <= max")
            object.__setattr__(self, name, (lo, hi))
        if self.scale[1] > 1:
            raise ConfigError(f"RandomErasing.scale={self.scale!r}; fractions of the area, at most 1")
        value = self.value
        values = (value,) if isinstance(value, (int, float)) else tuple(value) if isinstance(value, (tuple, list)) else None
        if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise ConfigError(f"RandomErasing.value={value!r}; a number or one number per channel "
                              "('random' is not supported)")
        object.__setattr__(self, "value", float(values[0]) if len(values) == 1 else tuple(float(v) for v in values))

    @classmethod
    def from_torchvision(cls, t) -> RandomErasing:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        value = getattr(t, "value", 0)
        if isinstance(value, str):
            raise Unsupported(f"value={value!r} (a number or one per channel only)")
        value = value if isinstance(value, (int, float)) else tuple(float(v) for v in value)
        return cls(float(t.p), tuple(t.scale), tuple(t.ratio), value)

    @property
    def is_identity(self) -> bool:
        return self.p == 0.0

    def sample(self, u, size):
        h_img, w_img = size
        area = h_img * w_img
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        if u[0] < self.p:
            for k in range(10):
                a, r, y, x = u[1 + 4 * k:5 + 4 * k]
                erase_area = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * a)
                aspect = math.exp(log_lo + (log_hi - log_lo) * r)
                h = int(round(math.sqrt(erase_area * aspect)))
                w = int(round(math.sqrt(erase_area / aspect)))
                if 0 < h < h_img and 0 < w < w_img:
                    top, left = min(int(y * (h_img - h + 1)), h_img - h), min(int(x * (w_img - w + 1)), w_img - w)
                    return {"box": np.array([top, left, h, w], np.int32)}
        return {"box": np.zeros(4, np.int32)}

    def apply_batch(self, images, params):
        from ..core.transfer import device_constant

        channels = images.shape[-3]
        value = self.value if isinstance(self.value, float) else None
        if value is None and len(self.value) != channels:
            raise ConfigError(f"RandomErasing.value={self.value!r} has {len(self.value)} values; the output has "
                              f"{channels} channels")
        # a per-channel fill is made once per device (a tensor built per batch would be a blocking copy)
        fill = value if value is not None else device_constant(self.value, images.dtype, images.device, (channels, 1, 1))
        for i, p in enumerate(params):
            top, left, h, w = (int(v) for v in p["box"])
            if h > 0 and w > 0:
                images[i, :, top:top + h, left:left + w] = fill
        return images

    def describe(self, params):
        top, left, h, w = (int(v) for v in params["box"])
        return f"RandomErasing(box={h}x{w} at ({top}, {left}))" if h else "RandomErasing(none)"
