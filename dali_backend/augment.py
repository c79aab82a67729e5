"""The augmentation contract: what both backends compute, and the per-draw random parameters.

Randomness is drawn here, once, as a pure function of (seed, epoch, position) and the spec; the
backends only apply the numbers they are given (torchvision's make_params / transform split). That
is what makes the DALI pipeline and the OpenCV fallback comparable pixel for pixel, and it makes the
parameters independent of worker ids, ``num_workers``, batch size and backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

import numpy as np

from .errors import ConfigError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
ColorMode = Literal["gray", "rgb"]
Fit = Literal["stretch", "letterbox"]
OutputDtype = Literal["float32", "float16", "uint8"]
_AUG_STREAM = 0xA06  # separates augmentation draws from the sampler's streams of the same seed


@dataclass(frozen=True)
class Clahe:
    """Contrast-limited adaptive histogram equalisation (OpenCV's and DALI's CLAHE)."""

    clip_limit: float = 2.0
    tiles: tuple[int, int] = (8, 8)  # (tiles_x, tiles_y)

    def __post_init__(self):
        if not (isinstance(self.clip_limit, (int, float)) and self.clip_limit > 0 and math.isfinite(self.clip_limit)):
            raise ConfigError(f"Clahe.clip_limit={self.clip_limit!r}; must be a positive number (OpenCV's default is 40, ours 2.0)")
        tiles = tuple(self.tiles) if not isinstance(self.tiles, int) else (self.tiles, self.tiles)
        if len(tiles) != 2 or not all(isinstance(t, int) and 1 <= t <= 64 for t in tiles):
            raise ConfigError(f"Clahe.tiles={self.tiles!r}; must be (tiles_x, tiles_y) integers in [1, 64]")
        object.__setattr__(self, "tiles", tiles)


@dataclass(frozen=True)
class AugmentSpec:
    """What to do to every image; validated at construction, immutable.

    Reference semantics (both backends implement exactly this, in this order):

    1. decode the JPEG (EXIF orientation applied); ``gray``: decode to one luma channel;
       ``rgb``: decode to RGB;
    2. CLAHE at native resolution (``rgb``: on each channel independently);
    3. antialiased resize to ``size`` (triangle filter over the source footprint when shrinking,
       bilinear when enlarging). ``fit="stretch"`` (default) ignores the aspect ratio;
       ``fit="letterbox"`` keeps it: scale ``s = min(W / w, H / h)``, resize to
       ``(floor(h * s + 0.5), floor(w * s + 0.5))`` (at least 1), and pad with 0 to ``size``,
       the content placed ``ceil(pad / 2)`` from the top and left (for lines that mix camera
       resolutions);
    4. rotation by ``angle`` degrees counter-clockwise about the image centre, bilinear, fill 0,
       same size;
    5. ``out = b * (128 + c * (x - 128))``, rounded and clipped to [0, 255];
    6. ``gray``: replicate the channel to 3;
    7. ``float32``/``float16``: ``(x / 255 - mean) / std`` per channel; ``uint8``: left as is;
    8. channel-first layout ``[3, H, W]``.

    Per draw, ``angle ~ U(-rotate_deg, rotate_deg)``, ``b ~ 1 + U(-brightness, brightness)`` and
    ``c ~ 1 + U(-contrast, contrast)`` (see :func:`draw_params`).

    Args:
        size: output ``(height, width)`` in pixels, or one int for a square.
        color: ``"gray"`` (default) or ``"rgb"``.
        clahe: a :class:`Clahe`, or None to skip it.
        rotate_deg: largest rotation in degrees (0 disables).
        brightness: largest relative brightness change (0 disables).
        contrast: largest relative contrast change (0 disables).
        mean, std: per-channel normalisation on the [0, 1] scale.
        dtype: output dtype, ``"float32"`` (default), ``"float16"`` or ``"uint8"`` (no normalisation).
        fit: ``"stretch"`` (default) or ``"letterbox"`` (keep the aspect ratio, pad with 0).
    """

    size: tuple[int, int] | int = (256, 256)
    color: ColorMode = "gray"
    clahe: Clahe | None = field(default_factory=Clahe)
    rotate_deg: float = 5.0
    brightness: float = 0.1
    contrast: float = 0.1
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    dtype: OutputDtype = "float32"
    fit: Fit = "stretch"

    def __post_init__(self):
        size = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
        if len(size) != 2 or not all(isinstance(s, (int, np.integer)) and 1 <= s <= 16384 for s in size):
            raise ConfigError(f"AugmentSpec.size={self.size!r}; must be (height, width) integers in [1, 16384]")
        object.__setattr__(self, "size", (int(size[0]), int(size[1])))
        if self.color not in ("gray", "rgb"):
            raise ConfigError(f"AugmentSpec.color={self.color!r}; use 'gray' or 'rgb'")
        if self.clahe is not None and not isinstance(self.clahe, Clahe):
            raise ConfigError(f"AugmentSpec.clahe={self.clahe!r}; pass Clahe(clip_limit, tiles) or None")
        for name, limit in (("rotate_deg", 180.0), ("brightness", 1.0), ("contrast", 1.0)):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v <= limit:
                raise ConfigError(f"AugmentSpec.{name}={v!r}; must be a number in [0, {limit}]")
        for name in ("mean", "std"):
            v = tuple(float(x) for x in getattr(self, name))
            if len(v) != 3:
                raise ConfigError(f"AugmentSpec.{name}={getattr(self, name)!r}; give 3 values (one per output channel)")
            object.__setattr__(self, name, v)
        if any(s <= 0 for s in self.std):
            raise ConfigError(f"AugmentSpec.std={self.std!r}; every value must be positive")
        if self.dtype not in ("float32", "float16", "uint8"):
            raise ConfigError(f"AugmentSpec.dtype={self.dtype!r}; use 'float32', 'float16' or 'uint8'")
        if self.fit not in ("stretch", "letterbox"):
            raise ConfigError(f"AugmentSpec.fit={self.fit!r}; use 'stretch' or 'letterbox'")

    @property
    def height(self) -> int:
        return self.size[0]  # type: ignore[index]

    @property
    def width(self) -> int:
        return self.size[1]  # type: ignore[index]

    @property
    def channels(self) -> int:
        """Channels the decode/augment stages carry (1 in gray mode); the output always has 3."""
        return 1 if self.color == "gray" else 3

    @property
    def rotates(self) -> bool:
        return bool(self.rotate_deg)

    @property
    def jitters(self) -> bool:
        return bool(self.brightness or self.contrast)

    @property
    def is_random(self) -> bool:
        return self.rotates or self.jitters

    def eval(self) -> AugmentSpec:
        """The evaluation variant: same decode, CLAHE, size and normalisation; no randomness."""
        return replace(self, rotate_deg=0.0, brightness=0.0, contrast=0.0)

    def letterbox_size(self, height: int, width: int) -> tuple[int, int]:
        """``(h, w)`` a ``height`` x ``width`` image is resized to in letterbox mode (float32 math, as DALI)."""
        f = np.float32
        s = min(f(self.width) / f(width), f(self.height) / f(height))
        return (max(int(np.floor(f(height) * s + f(0.5))), 1), max(int(np.floor(f(width) * s + f(0.5))), 1))

    def normalize_coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scale, shift)`` per output channel so that ``out = x * scale + shift`` for uint8 ``x``."""
        std = np.asarray(self.std, dtype=np.float64)
        mean = np.asarray(self.mean, dtype=np.float64)
        return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


class AugParams(NamedTuple):
    """The random numbers of one draw: rotation in degrees (counter-clockwise), brightness and contrast factors."""

    angle: float
    brightness: float
    contrast: float


IDENTITY = AugParams(0.0, 1.0, 1.0)


def draw_params(spec: AugmentSpec, seed: int, epoch: int, position: int) -> AugParams:
    """The augmentation parameters of one draw: a pure function of its arguments.

    Args:
        spec: the augmentation spec (ranges).
        seed: the dataset's augmentation seed.
        epoch: the epoch of the draw.
        position: the draw's position in the epoch's global draw (not the sample index: a sample
            drawn twice gets two sets of parameters).
    """
    if not spec.is_random:
        return IDENTITY
    u = np.random.default_rng([_AUG_STREAM, int(seed), int(epoch), int(position)]).random(3)
    angle = (2.0 * u[0] - 1.0) * spec.rotate_deg
    b = 1.0 + (2.0 * u[1] - 1.0) * spec.brightness
    c = 1.0 + (2.0 * u[2] - 1.0) * spec.contrast
    # float32 values: what the DALI operators receive, so both backends use identical numbers.
    return AugParams(float(np.float32(angle)), float(np.float32(b)), float(np.float32(c)))
