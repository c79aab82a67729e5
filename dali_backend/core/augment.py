"""The augmentation contract: what both backends compute, and the per-draw random parameters.

Randomness is drawn here, once, as a pure function of (seed, epoch, position) and the spec; the
backends only apply the numbers they are given (torchvision's make_params / transform split). That
is what makes the DALI pipeline and the OpenCV fallback comparable pixel for pixel, and it makes the
parameters independent of worker ids, ``num_workers``, batch size and backend.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

import numpy as np

from .amplification import AmplificationWarning, warn_amplification  # noqa: F401 (AmplificationWarning: re-exported)
from .depth import check_order, check_through, source_refusal, window_position
from ..errors import ConfigError
from ..transforms import Clahe, ColorJitter, Grayscale, Normalize, RandomRotation, Resize, ToDtype, Transform
from ..transforms.base import Param, uniforms
from ..transforms.resize import letterbox_size

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
ColorMode = Literal["gray", "rgb"]
Fit = Literal["stretch", "letterbox"]
OutputDtype = Literal["float32", "float16", "bfloat16", "uint8"]
__all__ = ["AmplificationWarning", "AugmentSpec", "AugParams", "Clahe", "draw_params", "IDENTITY", "IMAGENET_MEAN",
           "IMAGENET_STD"]


class _Default:
    """Marks an argument left out (so that ``clahe=None`` can mean "no CLAHE")."""

    def __repr__(self) -> str:
        return "<default>"


_D: Any = _Default()
_PRESET = {"size": (256, 256), "color": "gray", "clahe": Clahe(), "rotate_deg": 5.0, "brightness": 0.1, "contrast": 0.1,
           "mean": IMAGENET_MEAN, "std": IMAGENET_STD, "dtype": "float32", "fit": "stretch"}
_RECIPE = ("size", "clahe", "rotate_deg", "brightness", "contrast", "fit")  # preset-only arguments


@dataclass(frozen=True)
class AugmentSpec:
    """What to do to every image; validated at construction, immutable. Two ways to build one.

    **Preset** (the arguments below, ``ops`` left out). Reference semantics (both backends
    implement exactly this, in this order):

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
    ``c ~ 1 + U(-contrast, contrast)`` (see :func:`draw_params`). The preset is the operation list
    ``[Clahe, Resize, RandomRotation, ColorJitter]`` (:attr:`transforms`).

    **Operation list**: ``AugmentSpec(ops=[RandomResizedCrop(224), RandomHorizontalFlip(),
    ColorJitter(0.4, 0.4, 0.4), Normalize(mean, std)])`` with the classes of
    :mod:`dali_backend.transforms` (torchvision's names and arguments), applied in order. ``color``
    is ``"rgb"`` unless a ``Grayscale`` is in the list; the output is ``float32`` scaled to [0, 1]
    unless ``ToDtype``/``Normalize``/``dtype`` say otherwise; the list must end at a fixed size (a
    crop or ``Resize((h, w))``). The preset-only arguments (size, clahe, rotate_deg, brightness,
    contrast, fit) cannot be combined with ``ops``. See also :meth:`from_torchvision`.

    Args:
        size: output ``(height, width)`` in pixels, or one int for a square.
        color: ``"gray"`` (default) or ``"rgb"``.
        clahe: a :class:`Clahe`, or None to skip it.
        rotate_deg: largest rotation in degrees (0 disables).
        brightness: largest relative brightness change (0 disables).
        contrast: largest relative contrast change (0 disables).
        mean: per-channel normalisation mean, on the [0, 1] scale.
        std: per-channel normalisation standard deviation, on the [0, 1] scale.
        dtype: output dtype, ``"float32"`` (default), ``"float16"``, ``"bfloat16"`` or ``"uint8"``
            (no normalisation).
        fit: ``"stretch"`` (default) or ``"letterbox"`` (keep the aspect ratio, pad with 0).
        ops: the operation list (see above), or None for the preset.
        channels_last: return batches in ``torch.channels_last`` memory format (same shape).
        pad_batch: variable-size batches (operation lists only): the list may end at a size that
            depends on the image (``Resize(n, max_size=m)``: the shorter side ``n``, aspect kept, no
            crop), and each batch is padded with 0 at the bottom and right to its largest height and
            width, rounded up to a multiple of ``pad_batch`` (1: no rounding; 32 for most detectors).
            The loader then yields ``(images, labels, sizes)``, ``sizes`` int64 ``[B, 2]`` the valid
            ``(height, width)`` of each image (top-left). None (default): every image ends at one size.
        decode_bits: 16 (operation lists without a ``Window``): decode every image at 16 bits (8-bit files
            promoted ``x * 257``), run the operations on uint16 (each must take 16 bits) and normalise the
            float output from all of them, ``(x / 65535 - mean) / std``. None (default): 16 bits up to a
            ``Window`` when the list holds one, else 8 (see :mod:`dali_backend.core.depth`).
    """

    size: tuple[int, int] | int = _D
    color: ColorMode = _D
    clahe: Clahe | None = _D
    rotate_deg: float = _D
    brightness: float = _D
    contrast: float = _D
    mean: tuple[float, ...] = _D
    std: tuple[float, ...] = _D
    dtype: OutputDtype = _D
    fit: Fit = _D
    ops: tuple[Transform, ...] | None = None
    channels_last: bool = False
    pad_batch: int | None = None
    decode_bits: int | None = None

    def __post_init__(self):
        if self.ops is None:
            self._init_preset()
        else:
            self._init_ops()
        if self.dtype not in ("float32", "float16", "bfloat16", "uint8"):
            raise ConfigError(f"AugmentSpec.dtype={self.dtype!r}; use 'float32', 'float16', 'bfloat16' or 'uint8'")
        if not isinstance(self.channels_last, bool):
            raise ConfigError(f"AugmentSpec.channels_last={self.channels_last!r}; use True or False")
        if self.pad_batch is not None and (not isinstance(self.pad_batch, (int, np.integer))
                                           or isinstance(self.pad_batch, bool) or not 1 <= self.pad_batch <= 4096):
            raise ConfigError(f"AugmentSpec.pad_batch={self.pad_batch!r}; an integer multiple in [1, 4096] to pad "
                              "each batch's height and width to (1: the largest image, no rounding), or None")
        if self.decode_bits not in (None, 8, 16) or isinstance(self.decode_bits, bool):
            raise ConfigError(f"AugmentSpec.decode_bits={self.decode_bits!r}; use 16 (a float output from all 16 bits) "
                              "or None (16 bits up to a Window, else 8)")
        if self.decode_bits == 8 and window_position(self.transforms) is not None:
            raise ConfigError("AugmentSpec(decode_bits=8): the Window in ops takes 16-bit values; drop decode_bits")
        if self.decode_bits == 16 and window_position(self.transforms) is None:
            check_through(self.transforms, self.dtype, self.ops is None)
        offsets, total = [], 0
        for op in self.transforms + self.batch_ops:  # batch operations' blocks come after the pixel ones'
            offsets.append(total)
            total += op.UNIFORMS
        object.__setattr__(self, "_offsets", tuple(offsets[:len(self.transforms)]))
        object.__setattr__(self, "_batch_offsets", tuple(offsets[len(self.transforms):]))
        object.__setattr__(self, "_uniforms", total)

    def __repr__(self) -> str:
        """Only the fields that apply: a preset's own (mean/std unless the output is uint8), or an
        operation list's ``ops`` and output fields (``color`` when not implied by the list, mean/std
        when they change anything, ``dtype``); ``channels_last`` when set. Evaluates to an equal spec."""
        if self.ops is None:
            names = ["size", "color", "clahe", "rotate_deg", "brightness", "contrast"]
            names += ["mean", "std"] if self.dtype != "uint8" else []
            parts = [f"{name}={getattr(self, name)!r}" for name in [*names, "dtype", "fit"]]
        else:
            parts = [f"ops={list(self.ops)!r}"]
            if self.color == "gray" and not any(isinstance(op, Grayscale) for op in self.ops):
                parts.append("color='gray'")
            if self.dtype != "uint8" and (any(m != 0.0 for m in self.mean) or any(v != 1.0 for v in self.std)):
                parts += [f"mean={self.mean!r}", f"std={self.std!r}"]
            parts.append(f"dtype={self.dtype!r}")
        if self.channels_last:
            parts.append("channels_last=True")
        for name in ("pad_batch", "decode_bits"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)!r}")
        return f"AugmentSpec({', '.join(parts)})"

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)

    def _init_preset(self) -> None:
        self._set("color_given", self.color is not _D)  # gray by default or asked for (dali_backend.colour)
        for name, value in _PRESET.items():
            if getattr(self, name) is _D:
                self._set(name, value)
        size = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
        if len(size) != 2 or not all(isinstance(s, (int, np.integer)) and 1 <= s <= 16384 for s in size):
            raise ConfigError(f"AugmentSpec.size={self.size!r}; must be (height, width) integers in [1, 16384]")
        self._set("size", (int(size[0]), int(size[1])))
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
            self._set(name, v)
        if any(s <= 0 for s in self.std):
            raise ConfigError(f"AugmentSpec.std={self.std!r}; every value must be positive")
        if self.fit not in ("stretch", "letterbox"):
            raise ConfigError(f"AugmentSpec.fit={self.fit!r}; use 'stretch' or 'letterbox'")
        ops = ([self.clahe] if self.clahe is not None else []) + [
            Resize(self.size, letterbox=self.fit == "letterbox"),
            RandomRotation(self.rotate_deg),  # always present: the draw's uniform layout stays fixed
            ColorJitter(brightness=self.brightness, contrast=self.contrast)]
        if self.pad_batch is not None:
            raise ConfigError(f"AugmentSpec(pad_batch={self.pad_batch!r}) needs an operation list ending at a size "
                              "that depends on the image, e.g. ops=[Resize(256, max_size=400)]; the preset ends at "
                              "one size (fit='letterbox' keeps the aspect ratio there)")
        self._set("_transforms", tuple(ops))
        self._set("_batch_ops", ())
        self._set("_out_size", self.size)
        self._set("out_channels", 3)

    def _init_ops(self) -> None:
        given = [name for name in _RECIPE if getattr(self, name) not in (_D, None)]
        if given:
            raise ConfigError(f"AugmentSpec: {', '.join(given)} {'belongs' if len(given) == 1 else 'belong'} to the "
                              f"preset and cannot be combined with ops=; express {'it' if len(given) == 1 else 'them'} "
                              "as operations (Resize, Clahe, RandomRotation, ColorJitter)")
        for name in _RECIPE:
            self._set(name, None)
        ops = self.ops
        if isinstance(ops, Transform) or not hasattr(ops, "__iter__"):
            raise ConfigError(f"AugmentSpec.ops={ops!r}; give a list of operations from dali_backend.transforms")
        ops = tuple(ops)
        for k, op in enumerate(ops):
            if not isinstance(op, Transform):
                hint = (" (a torchvision transform: translate a Compose with AugmentSpec.from_torchvision)"
                        if type(op).__module__.startswith("torchvision") else "")
                raise ConfigError(f"AugmentSpec.ops[{k}]={op!r} is not an operation of dali_backend.transforms{hint}")
        check_order(ops)  # 16-bit values reach only the operations exact on them, then a Window
        pixel = [k for k, op in enumerate(ops) if op.KIND not in ("output", "batch")]
        late = [type(op).__name__ for k, op in enumerate(ops)
                if op.KIND in ("output", "batch") and pixel and k < pixel[-1]]
        if late:
            raise ConfigError(f"AugmentSpec.ops: {', '.join(late)} must come after every pixel operation "
                              "(they run once per batch on the output)")
        early = [type(op).__name__ for k, op in enumerate(ops) if op.KIND == "batch"
                 and any(isinstance(o, Normalize) for o in ops[k + 1:])]
        if early:
            raise ConfigError(f"AugmentSpec.ops: {', '.join(early)} before Normalize; it runs on the normalised "
                              "output (its value is in normalised units, as in torchvision's recipes): put it after "
                              "Normalize")
        grays = [k for k, op in enumerate(ops) if isinstance(op, Grayscale)]
        if len(grays) > 1:
            raise ConfigError("AugmentSpec.ops: more than one Grayscale")
        if grays and any(op.KIND != "geometric" for op in ops[:grays[0]]):
            raise ConfigError("AugmentSpec.ops: Grayscale must come before every photometric operation (it is "
                              "realised by decoding the JPEG's luma); move it up")
        color = "gray" if grays else ("rgb" if self.color is _D else self.color)
        if grays and self.color not in (_D, "gray"):
            raise ConfigError(f"AugmentSpec(color={self.color!r}) contradicts the Grayscale in ops")
        if color not in ("gray", "rgb"):
            raise ConfigError(f"AugmentSpec.color={self.color!r}; use 'gray' or 'rgb'")
        self._set("color", color)
        self._set("out_channels", ops[grays[0]].num_output_channels if grays else 3)
        # output stage: folded into mean/std/dtype (so dataclasses.replace sees no conflict later)
        norm = [op for op in ops if isinstance(op, Normalize)]
        casts = [op for op in ops if isinstance(op, ToDtype)]
        if len(norm) > 1 or len(casts) > 1:
            raise ConfigError("AugmentSpec.ops: at most one Normalize and one ToDtype")
        c = self.out_channels
        mean = norm[0].mean if norm else (None if self.mean is _D else self.mean)
        std = norm[0].std if norm else (None if self.std is _D else self.std)
        if norm and (self.mean is not _D and tuple(self.mean) != mean or self.std is not _D and tuple(self.std) != std):
            raise ConfigError("AugmentSpec: mean/std given both as arguments and in a Normalize; keep one")
        mean = tuple(float(x) for x in (mean if mean is not None else (0.0,) * c))
        std = tuple(float(x) for x in (std if std is not None else (1.0,) * c))
        if len(mean) == 1 and len(std) == 1 and c == 3:
            mean, std = mean * 3, std * 3
        if len(mean) != c or len(std) != c:
            raise ConfigError(f"AugmentSpec: mean={mean} / std={std} need {c} value{'s' if c != 1 else ''} each (the "
                              f"output has {c} channel{'s' if c != 1 else ''})")
        if any(s <= 0 for s in std):
            raise ConfigError(f"AugmentSpec.std={std!r}; every value must be positive")
        dtype = casts[0].dtype if casts else ("float32" if self.dtype is _D else self.dtype)
        if casts and self.dtype not in (_D, dtype):
            raise ConfigError(f"AugmentSpec(dtype={self.dtype!r}) contradicts ToDtype({dtype!r}) in ops")
        if dtype == "uint8" and norm:
            raise ConfigError("AugmentSpec.ops: Normalize needs a float output; add ToDtype('float32') or drop it")
        self._set("mean", mean)
        self._set("std", std)
        self._set("dtype", dtype)
        kept = tuple(op for op in ops if op.KIND not in ("output", "batch"))
        batch = tuple(op for op in ops if op.KIND == "batch")
        self._set("ops", kept + batch)  # the output stage is folded into mean/std/dtype; batch operations stay
        self._set("_transforms", kept)
        self._set("_batch_ops", batch)
        size = None
        for op in kept:
            size = op.static_size(size)
        if self.pad_batch is not None and batch:
            raise ConfigError(f"AugmentSpec(pad_batch={self.pad_batch}): {type(batch[0]).__name__} needs one output "
                              "size for the whole batch; drop it or pad_batch")
        if size is None and self.pad_batch is None:
            raise ConfigError("AugmentSpec.ops: the output size depends on the image; end the list with an operation "
                              "of fixed size (Resize((h, w)), CenterCrop, RandomCrop or RandomResizedCrop), or pass "
                              "pad_batch= (variable-size batches padded to their largest image)")
        self._set("_out_size", size)
        warn_amplification(kept)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_torchvision(cls, compose, **kwargs) -> AugmentSpec:
        """The spec equivalent to a torchvision ``Compose`` (v1 or v2) of supported transforms.

        Raises :class:`ConfigError` listing every unsupported transform by name. ``kwargs`` go to
        the spec (``dtype=``, ``channels_last=``). See :mod:`dali_backend.transforms.torchvision`.
        """
        from ..transforms.torchvision import translate

        return cls(ops=translate(compose), **kwargs)

    # ------------------------------------------------------------------ properties
    @property
    def transforms(self) -> tuple[Transform, ...]:
        """The operations both backends run, in order (the preset's too); output ops excluded."""
        return self._transforms  # type: ignore[attr-defined]

    @property
    def batch_ops(self) -> tuple[Transform, ...]:
        """The operations that run on the normalised batch (``"batch"`` kind: RandomErasing), in order."""
        return self._batch_ops  # type: ignore[attr-defined]

    def make_batch_params(self, seed: int, epoch: int, position: int) -> list[dict[str, np.ndarray]]:
        """The parameters of every batch operation for one draw (a pure function, as :meth:`make_params`);
        they depend on the output size only."""
        return [{} if op.is_identity else op.make_params(seed, epoch, position, self._out_size, off)  # type: ignore[attr-defined]
                for op, off in zip(self.batch_ops, self._batch_offsets)]  # type: ignore[attr-defined]

    @property
    def variable_size(self) -> bool:
        """True when the output size depends on the image (``pad_batch``): batches are padded."""
        return self._out_size is None  # type: ignore[attr-defined]

    @property
    def height(self) -> int:
        """The output height (1 where it depends on the image: ``pad_batch``)."""
        return self._out_size[0] if self._out_size is not None else 1  # type: ignore[attr-defined]

    @property
    def width(self) -> int:
        """The output width (1 where it depends on the image: ``pad_batch``)."""
        return self._out_size[1] if self._out_size is not None else 1  # type: ignore[attr-defined]

    @property
    def channels(self) -> int:
        """Channels the decode/augment stages carry (1 in gray mode); see ``out_channels`` for the output."""
        return 1 if self.color == "gray" else 3

    @property
    def is_random(self) -> bool:
        return any(op.is_random for op in self.transforms)

    @property
    def bit_depth(self) -> int:
        """Bits per value the images are decoded to: 16 when the operations hold a ``Window`` or
        ``decode_bits=16`` (8-bit files promoted ``x * 257``), else 8 (see :mod:`dali_backend.core.depth`)."""
        return 16 if self.decode_bits == 16 or window_position(self.transforms) is not None else 8

    @property
    def batch_bits(self) -> int:
        """Bits per value of the batches both executors hand to :func:`~dali_backend.core.tensors.normalize`:
        16 (uint16) for ``decode_bits=16`` without a ``Window``, else 8 (uint8)."""
        return 16 if self.decode_bits == 16 and window_position(self.transforms) is None else 8

    def depth_refusal(self, bits: int) -> str | None:
        """Why an image of ``bits`` bits per value cannot go through this spec (it would lose bits), or None."""
        reason = source_refusal(self.transforms, bits)
        if reason and self.ops is None:
            reason += "; the preset holds no Window: use ops=[Window(...), Clahe(), Resize(...), ...]"
        return reason

    @property
    def needs_size(self) -> bool:
        """Whether a draw's parameters depend on the decoded image size (crops, aspect-keeping resize)."""
        return any(op.NEEDS_SIZE and not op.is_identity for op in self.transforms)

    @property
    def wire(self) -> tuple[tuple[int, Param], ...]:
        """``(operation number, parameter)`` of every per-draw value the DALI graph receives, in order."""
        return tuple((k, p) for k, op in enumerate(self.transforms) for p in op.wire_for(self.channels))

    @property
    def region_crop(self) -> int | None:
        """The number of the crop the DALI graph decodes as a region (the first geometric operation,
        when it is a crop whose window lies inside the image and nothing before it changes pixels)."""
        for k, op in enumerate(self.transforms):
            if op.is_identity:
                continue
            return k if op.REGION else None
        return None

    def eval(self) -> AugmentSpec:
        """The evaluation variant: same decode, size and normalisation; no randomness.

        Preset: CLAHE kept, rotation and jitter off. Operation list: each operation's ``eval()``
        (random flips, rotations and jitter removed, RandomCrop -> CenterCrop, RandomResizedCrop(s)
        -> Resize(round(s / 0.875)) + CenterCrop(s), torchvision's ImageNet evaluation transform:
        aspect kept, not squashed). For anything else, build the evaluation spec yourself.
        """
        if self.ops is None:
            return replace(self, rotate_deg=0.0, brightness=0.0, contrast=0.0)
        ops: list = []
        for op in self.ops:
            e = op.eval()
            ops += [] if e is None else list(e) if isinstance(e, tuple) else [e]
        return replace(self, ops=tuple(ops))

    # ------------------------------------------------------------------ per-draw parameters
    def make_params(self, seed: int, epoch: int, position: int,
                    image_size: tuple[int, int] | None) -> list[dict[str, np.ndarray]]:
        """The parameters of every operation for one draw: a pure function of its arguments.

        Args:
            seed: the dataset's augmentation seed.
            epoch: the epoch of the draw.
            position: the draw's position in the epoch's global draw.
            image_size: the decoded ``(height, width)`` (EXIF orientation applied); may be None when
                :attr:`needs_size` is False.

        Returns:
            one dict per operation of :attr:`transforms` (empty for operations without parameters).
        """
        u = uniforms(seed, epoch, position, self._uniforms)  # type: ignore[attr-defined]
        size = None if image_size is None else (int(image_size[0]), int(image_size[1]))
        out = []
        for op, off in zip(self.transforms, self._offsets):  # type: ignore[attr-defined]
            p = {} if op.is_identity else op.sample(u[off:off + op.UNIFORMS], size)
            out.append(p)
            size = op.output_size(size, p) if not op.is_identity else size
        return out

    def wire_arrays(self, params: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
        """``params`` (from :meth:`make_params`) as the arrays the DALI external source sends, in :attr:`wire` order."""
        return [p.array(params[k][p.name]) for k, p in self.wire]

    def describe_params(self, params: list[dict], batch_params: list[dict] | None = None) -> dict:
        """One draw's parameters (:meth:`make_params`, and :meth:`make_batch_params` when there are batch
        operations) as ``return_meta`` shows them, in plain values: the preset's three numbers
        (``angle``, ``brightness``, ``contrast``), or one entry per operation under its class name
        (``Name#2`` for the second of a name)."""
        if self.ops is None:
            rotation, jitter = params[-2], params[-1]  # the preset's list ends with RandomRotation, ColorJitter
            return {"angle": float(np.asarray(rotation.get("angle", 0.0))),
                    "brightness": float(np.asarray(jitter.get("brightness", 1.0))),
                    "contrast": float(np.asarray(jitter.get("contrast", 1.0)))}
        out: dict = {}
        for op, values in [*zip(self.transforms, params), *zip(self.batch_ops, batch_params or ())]:
            name = type(op).__name__
            key = name if name not in out else f"{name}#{sum(k.split('#')[0] == name for k in out) + 1}"
            out[key] = {k: np.asarray(v).tolist() for k, v in values.items()}
        return out

    def letterbox_size(self, height: int, width: int) -> tuple[int, int]:
        """``(h, w)`` a ``height`` x ``width`` image is resized to in letterbox mode (float32 math, as DALI)."""
        return letterbox_size(height, width, self.height, self.width)

    def normalize_coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scale, shift)`` per output channel so that ``out = x * scale + shift`` for the batches' ``x``
        (uint8, or uint16 where :attr:`batch_bits` is 16: ``x / 65535``)."""
        std = np.asarray(self.std, dtype=np.float64)
        mean = np.asarray(self.mean, dtype=np.float64)
        top = float((1 << self.batch_bits) - 1)
        return (1.0 / (top * std)).astype(np.float32), (-mean / std).astype(np.float32)


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
    if spec.ops is not None:
        raise ConfigError("draw_params describes the preset's three numbers; for an operation list use "
                          "spec.make_params(seed, epoch, position, image_size)")
    # the preset's list ends with RandomRotation and ColorJitter: their own parameters, read (one function
    # draws them all: Transform.make_params), as float32 values, what the DALI operators receive; the
    # size-dependent operations before them (a letterbox) are not drawn, so no image size is needed
    found = {type(op): (op, off) for op, off in zip(spec.transforms, spec._offsets)}  # type: ignore[attr-defined]
    (rotation, r_off), (jitter, j_off) = found[RandomRotation], found[ColorJitter]
    return AugParams(**spec.describe_params([rotation.make_params(seed, epoch, position, None, r_off),
                                             jitter.make_params(seed, epoch, position, None, j_off)]))
