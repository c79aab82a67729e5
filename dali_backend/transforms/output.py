"""Output operations: the final dtype and normalisation. They run once per batch on the batch's device
(``dali_backend.core.tensors.normalize``), for both backends, so they carry no per-draw parameters."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .tvread import Unsupported
from .base import Transform

DTYPES = ("float32", "float16", "bfloat16", "uint8")


def dtype_name(dtype) -> str:
    """``"float32"`` from ``"float32"``, ``torch.float32`` or ``np.float32``; ConfigError otherwise."""
    name = str(getattr(dtype, "__name__", dtype)).replace("torch.", "")
    name = {"float": "float32", "half": "float16"}.get(name, name)
    if name not in DTYPES:
        raise ConfigError(f"dtype={dtype!r}; use one of {', '.join(DTYPES)}")
    return name


@dataclass(frozen=True, repr=False)
class Normalize(Transform):
    """``(x / 255 - mean) / std`` per output channel, torchvision's meaning on the [0, 1] scale."""

    TORCHVISION = ("Normalize",)  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> Normalize:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        return cls(tuple(t.mean), tuple(t.std))

    mean: tuple[float, ...]
    std: tuple[float, ...]
    inplace: bool = False

    KIND = "output"

    def __post_init__(self):
        for name in ("mean", "std"):
            try:
                v = tuple(float(x) for x in getattr(self, name))
            except TypeError:
                raise ConfigError(f"Normalize.{name}={getattr(self, name)!r}; give one value per channel") from None
            if len(v) not in (1, 3):
                raise ConfigError(f"Normalize.{name}={getattr(self, name)!r}; give 1 or 3 values (one per channel)")
            object.__setattr__(self, name, v)
        if any(s <= 0 for s in self.std):
            raise ConfigError(f"Normalize.std={self.std!r}; every value must be positive")

    @property
    def is_identity(self) -> bool:
        return True  # per batch, in tensors.normalize


@dataclass(frozen=True, repr=False)
class ToDtype(Transform):
    """The output dtype: ``float32``, ``float16``, ``bfloat16`` (scaled to [0, 1], then normalised if a
    Normalize follows) or ``uint8`` (levels as they are). torchvision's ``ToDtype(dtype, scale=True)``."""

    TORCHVISION = ("ToDtype", "ConvertImageDtype", "ToTensor")  # the torchvision transforms this operation reproduces (class names)

    @classmethod
    def from_torchvision(cls, t) -> ToDtype:
        """This operation for torchvision transform ``t`` (read by attribute; see :mod:`.tvread`)."""
        if type(t).__name__ == "ToTensor":
            return cls("float32")
        dtype = getattr(t, "dtype", None)
        if isinstance(dtype, dict):
            vals = {v for v in dtype.values() if v is not None}
            if len(vals) != 1:
                raise Unsupported(f"dtype={dtype!r} (one dtype for images)")
            dtype = vals.pop()
        if not getattr(t, "scale", True):
            raise Unsupported("scale=False")
        try:
            return cls(dtype)
        except ConfigError as e:
            raise Unsupported(str(e)) from None

    dtype: str = "float32"
    scale: bool = True

    KIND = "output"

    def __post_init__(self):
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        if self.dtype != "uint8" and not self.scale:
            raise ConfigError(f"ToDtype(dtype={self.dtype!r}, scale=False); float outputs are always scaled to "
                              "[0, 1] here: use scale=True")

    @property
    def is_identity(self) -> bool:
        return True
