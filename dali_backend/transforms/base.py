"""The operation protocol: one class per operation, parameters drawn once, applied by either backend.

A :class:`Transform` is a frozen dataclass (its arguments, validated at construction) with four
parts, as torchvision v2 splits ``make_params`` from ``transform``:

* ``PARAMS``: the names, dtypes and shapes of its per-draw parameters. The DALI wire (the external
  source's outputs and their dtypes) is derived from these definitions, never written by position;
* :meth:`Transform.sample`: the parameters of one draw from a block of ``UNIFORMS`` uniform numbers
  and the size of the image the operation receives. Pure numpy: no DALI, no OpenCV;
* :meth:`Transform.apply`: the OpenCV/numpy implementation (the fallback), imported lazily;
* :meth:`Transform.dali`: its DALI graph fragment, built only inside a pipeline definition.

Randomness: the numbers of ``np.random.default_rng([stream, seed, epoch, position])`` per draw (:func:`uniforms`). Each
operation of a composition owns a fixed block of its uniforms (its offset is the sum of the budgets
of the operations before it), so a draw's numbers do not depend on what an earlier operation did
with its own block (RandomResizedCrop's attempts), nor on the backend, batch or worker.

Image size: operations whose parameters depend on the size (crops, shorter-side resize, letterbox)
receive the size at their place in the chain, computed from the decoded size by each operation's
:meth:`Transform.output_size`. The decoded size is read from the encoded bytes' headers (frame size,
turned by the EXIF orientation: :func:`dali_backend.formats.jpeg.decoded_size`) in the DALI reader worker,
and taken from the decoded array in the fallback; the two agree on every file both decoders accept
(tests/transforms/test_transforms.py). The index's widths and heights are not used: they are before EXIF
rotation and describe the file at index time, not the bytes being served.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, Callable, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError

AUG_STREAM = 0xA06  # separates augmentation draws from the sampler's streams of the same seed
Size = tuple[int, int]  # (height, width)
OpKind = Literal["geometric", "photometric", "output", "batch"]  # what an operation does (not boundary.Kind)
REGISTRY: dict[str, type[Transform]] = {}
KERNELS: dict[tuple[type[Transform], str], Callable[..., Any]] = {}  # (operation, input kind) -> kernel


@dataclass(frozen=True)
class Param:
    """One per-draw parameter: its name, numpy dtype name and shape (``()`` for a scalar)."""

    name: str
    dtype: Literal["float32", "int32"] = "float32"
    shape: tuple[int, ...] = ()

    def array(self, value) -> np.ndarray:
        """``value`` as the exact array the DALI external source sends (0-d for a scalar)."""
        a = np.asarray(value, dtype=self.dtype)
        if a.shape != self.shape:
            raise ValueError(f"parameter {self.name!r} has shape {a.shape}, its definition says {self.shape}")
        return a


def uniforms(seed: int, epoch: int, position: int, n: int) -> NDArray[np.float64]:
    """The first ``n`` uniform numbers in [0, 1) of the draw (seed, epoch, position): those of
    ``np.random.default_rng([AUG_STREAM, seed, epoch, position]).random(n)``, the contract.

    Without constructing that generator per draw (0.05-0.16 ms): :func:`pcg64_state` derives the same
    PCG64 state (numpy's ``SeedSequence`` hash, its part that does not depend on the position cached per
    (seed, epoch)) and a generator kept per thread continues from it; values outside ``[0, 2**32)`` take
    numpy's own path."""
    if n == 0:
        return np.zeros(0)
    seed, epoch, position = int(seed), int(epoch), int(position)
    if not (0 <= seed <= _M32 and 0 <= epoch <= _M32 and 0 <= position <= _M32):
        return np.random.default_rng([AUG_STREAM, seed, epoch, position]).random(n)
    gen = getattr(_DRAW, "generator", None)
    if gen is None:
        gen = _DRAW.generator = np.random.Generator(np.random.PCG64(0))
    state, inc = pcg64_state(seed, epoch, position)
    gen.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc},
                               "has_uint32": 0, "uinteger": 0}
    return gen.random(n)


# numpy's SeedSequence (numpy/random/bit_generator.pyx, pool of 4 words) and PCG64's seeding
# (numpy/random/src/pcg64: pcg64_set_seed), for an entropy of 4 words [AUG_STREAM, seed, epoch, position]
_M32, _M128 = 0xFFFFFFFF, (1 << 128) - 1
_MULT_A, _MULT_B, _MIX_L, _MIX_R = 0x931E8875, 0x58F38DED, 0xCA01F9DD, 0x4973F715
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_HASH_A = [0x43B0D7E5]  # the hash constants SeedSequence's mixing uses, in order (they never depend on the data)
for _ in range(16):
    _HASH_A.append(_HASH_A[-1] * _MULT_A & _M32)
_HASH_B = [0x8B51F9DD]  # and those of generate_state
for _ in range(8):
    _HASH_B.append(_HASH_B[-1] * _MULT_B & _M32)
_DRAW = threading.local()  # each thread's generator (uniforms)


def _hashmix(value: int, k: int) -> int:
    value = ((value ^ _HASH_A[k]) * _HASH_A[k + 1]) & _M32
    return value ^ (value >> 16)


def _mix(x: int, y: int) -> int:
    r = (_MIX_L * x - _MIX_R * y) & _M32
    return r ^ (r >> 16)


@lru_cache(maxsize=64)
def _pool_prefix(seed: int, epoch: int) -> tuple[int, int, int, int, int, int]:
    """SeedSequence's pool words 0-2 before word 3 is mixed into them, and what it mixes into word 3
    from them: the part of the hash that does not depend on the position."""
    p0, p1, p2 = _hashmix(AUG_STREAM, 0), _hashmix(seed, 1), _hashmix(epoch, 2)
    p1, p2, c6 = _mix(p1, _hashmix(p0, 4)), _mix(p2, _hashmix(p0, 5)), _hashmix(p0, 6)
    p0, p2, c9 = _mix(p0, _hashmix(p1, 7)), _mix(p2, _hashmix(p1, 8)), _hashmix(p1, 9)
    p0, p1, c12 = _mix(p0, _hashmix(p2, 10)), _mix(p1, _hashmix(p2, 11)), _hashmix(p2, 12)
    return p0, p1, p2, c6, c9, c12


def pcg64_state(seed: int, epoch: int, position: int) -> tuple[int, int]:
    """``(state, inc)`` of ``np.random.PCG64(np.random.SeedSequence([AUG_STREAM, seed, epoch, position]))``
    (each of seed, epoch, position in ``[0, 2**32)``): the pool mixed, 4 words of 64 bits generated, PCG64
    seeded with them (``inc = 2 * seq + 1``, the state stepped twice)."""
    p0, p1, p2, c6, c9, c12 = _pool_prefix(seed, epoch)
    p3 = _mix(_mix(_mix(_hashmix(position, 3), c6), c9), c12)
    pool = (_mix(p0, _hashmix(p3, 13)), _mix(p1, _hashmix(p3, 14)), _mix(p2, _hashmix(p3, 15)), p3)
    words = []
    for i in range(8):
        v = ((pool[i % 4] ^ _HASH_B[i]) * _HASH_B[i + 1]) & _M32
        words.append(v ^ (v >> 16))
    initstate = (words[2] | words[3] << 32) | (words[0] | words[1] << 32) << 64
    initseq = (words[6] | words[7] << 32) | (words[4] | words[5] << 32) << 64
    inc = (initseq << 1 | 1) & _M128
    return ((inc + initstate) * _PCG_MULT + inc) & _M128, inc


def centred(u: float, centre: float, half: float) -> float:
    """``centre + (2u - 1) * half`` as float32: a uniform draw in ``[centre - half, centre + half]``."""
    return float(np.float32(centre + (2.0 * u - 1.0) * half))


def as_range(name: str, value, *, centre: float, low: float = -math.inf, high: float = math.inf,
             op: str) -> tuple[float, float]:
    """torchvision's range arguments: a number ``v`` means ``[centre - v, centre + v]`` (``v >= 0``),
    a pair means itself; both clipped to ``[low, high]``. Returns ``(centre, half width)``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{op}.{name}={value!r}; must be a non-negative number or a (min, max) pair")
        lo, hi = centre - value, centre + value
        if lo < low or hi > high:
            raise ConfigError(f"{op}.{name}={value!r}; the range [{lo:g}, {hi:g}] must lie in [{low:g}, {high:g}]")
        return float(centre), float(value)
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{op}.{name}={value!r}; give a number or a (min, max) pair") from None
    if not (low <= lo <= hi <= high):
        raise ConfigError(f"{op}.{name}={value!r}; need {low:g} <= min <= max <= {high:g}")
    return (lo + hi) / 2.0, (hi - lo) / 2.0


def as_size(name: str, value, op: str) -> Size:
    """``(height, width)`` from an int (square) or a pair; torchvision's convention."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value), int(value))
    try:
        h, w = (int(v) for v in value)
        ok = all(isinstance(v, (int, np.integer)) for v in value)
    except (TypeError, ValueError):
        ok = False
    if not ok or not (1 <= h <= 16384 and 1 <= w <= 16384):
        raise ConfigError(f"{op}.{name}={value!r}; must be an int or (height, width) integers in [1, 16384]")
    return h, w


def check_probability(value, op: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{op}.p={value!r}; must be a probability in [0, 1]")
    return float(value)


@dataclass
class GraphContext:
    """What a DALI fragment may use besides its image and parameters.

    ``hw``: the image's (height, width) at this point of the graph, Python ints when static, CPU
    nodes otherwise. ``channels``: 1 (gray) or 3. ``gpu``: whether the images live on the GPU.
    ``bits``: 8 (uint8 images) or 16 (uint16, before the ``Window`` of a 16-bit spec).
    """

    gpu: bool
    channels: int
    hw: tuple[Any, Any]
    bits: int = 8  # the images' bits per value at this point (16 before a Window of a 16-bit spec)


def _numbers(value):
    """Every number inside ``value`` (nested tuples and lists)."""
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_)):
        yield value


def _checked(post_init):
    """Wrap an operation's validation: a wrong type or value anywhere in its arguments is one
    :class:`ConfigError` naming the operation, its arguments and the problem (never a bare
    ``TypeError`` from deep inside), and every number must be finite (``inf`` crashed in the workers)."""
    def check(self):
        name = type(self).__name__
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        for f in fields(self):
            bad = [v for v in _numbers(getattr(self, f.name)) if not math.isfinite(float(v))]
            if bad:
                raise ConfigError(f"{name}({shown}): {f.name} must hold finite numbers, got {bad[0]!r}")
        try:
            post_init(self)
        except ConfigError:
            raise
        except (TypeError, ValueError, OverflowError) as e:
            raise ConfigError(f"{name}({shown}): invalid arguments ({e}); see help({name}) for the types each "
                              "argument takes") from None
    return check


class Transform:
    """Base of every operation (subclasses are frozen dataclasses; see the module docstring).

    Class attributes a subclass sets: ``KIND`` (``"geometric"``: moves pixels, may change the size;
    ``"photometric"``: changes values; ``"output"``: configures the final dtype/normalisation and
    runs on the batch; ``"batch"``: runs on the normalised batch tensor, after every pixel operation and
    ``Normalize``, with the same code on every backend (:meth:`apply_batch`; torchvision's
    RandomErasing), ``PARAMS`` (the per-draw parameters), ``UNIFORMS`` (uniforms per draw),
    ``NEEDS_SIZE`` (whether :meth:`sample` reads the image size), ``REGION`` (a crop whose window
    always lies inside the image, so the DALI decoder may produce it alone), ``CONDITIONALS`` (its DALI
    fragment uses per-sample ``if``), ``TORCHVISION`` (the torchvision class names it reproduces, with
    a ``from_torchvision`` classmethod), ``TOLERANCE`` / ``GPU_TOLERANCE`` (the largest difference its
    two backends may show on DALI's CPU / GPU operators), ``DEPTHS`` (the bits per value it takes:
    ``(8, 16)`` where it runs on uint16 images too and may run before a ``Window``), ``TOLERANCE16``
    (its bound on uint16 images, in 16-bit levels), ``SAME_KERNEL_ON_CPU`` (its CPU kernel is DALI's CPU
    operator's code: a CPU graph's readers may run it).

    Targets: the image kernel is :meth:`apply`; a kernel for another input kind (``"mask"``, ...) is
    registered beside it with :func:`register_kernel` and found with :meth:`kernel_for`, as torchvision
    v2 registers one kernel per (operation, input type). A target kind is new kernels, not new plumbing.
    """

    KIND: ClassVar[OpKind] = "photometric"
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    UNIFORMS: ClassVar[int] = 0
    NEEDS_SIZE: ClassVar[bool] = False
    REGION: ClassVar[bool] = False  # a crop the DALI decoder may produce alone (see AugmentSpec.region_crop)
    TORCHVISION: ClassVar[tuple[str, ...]] = ()  # the torchvision transforms this operation reproduces
    CONDITIONALS: ClassVar[bool] = False  # its DALI fragment branches per sample (DALI conditionals)
    # Declared with each operation, read by the equivalence harness (bench.equivalence), the tests and the
    # docs table check: instances to compare the backends on (constructor calls, evaluated in
    # dali_backend.transforms), and the largest difference in uint8 levels DALI's CPU operators may
    # show against the fallback (None: realised outside the per-sample graph, nothing to compare).
    EXAMPLES: ClassVar[tuple[str, ...]] = ()
    TOLERANCE: ClassVar[int | None] = None
    # The same bound on DALI's GPU operators (their resampling and rounding differ from the CPU's);
    # None: as TOLERANCE. Read by the CLAHE amplification warning (dali_backend.core.amplification).
    GPU_TOLERANCE: ClassVar[int | None] = None
    # The bits per value the operation takes: (8,) for the 8-bit operations; (8, 16) for those that run
    # on uint16 values too (they may precede a Window: dali_backend.transforms.intensity); Window: (16,).
    DEPTHS: ClassVar[tuple[int, ...]] = (8,)
    # On uint16 images (DEPTHS holds 16): the largest difference in 16-bit levels DALI's CPU operators may
    # show against the fallback (bench.equivalence --bit-depth 16, docs/guides/16bit.md); None: as TOLERANCE
    # (0 for the operations that only move values).
    TOLERANCE16: ClassVar[int | None] = None
    # Its CPU kernel (:meth:`apply`) gives the pixels of its fragment on DALI's CPU operators for every
    # 8-bit input, not only on the EXAMPLES (the same code: Clahe's fn.clahe runs OpenCV's CLAHE, which
    # the kernel reproduces bit for bit). A graph on CPU operators then runs it in its reader workers,
    # with the decode, where it leads the spec (:func:`dali_backend.dali.wire.reader_ops`).
    SAME_KERNEL_ON_CPU: ClassVar[bool] = False

    @classmethod
    def tolerance16(cls) -> int | None:
        """The largest difference in 16-bit levels on uint16 images (DALI's CPU operators against the
        fallback); None where the operation takes no 16-bit values."""
        if 16 not in cls.DEPTHS:
            return None
        return cls.TOLERANCE if cls.TOLERANCE16 is None else cls.TOLERANCE16

    @classmethod
    def gpu_tolerance(cls) -> int | None:
        """The largest difference in uint8 levels DALI's GPU operators may show against the fallback."""
        return cls.TOLERANCE if cls.GPU_TOLERANCE is None else cls.GPU_TOLERANCE

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            REGISTRY[cls.__name__] = cls
        post = cls.__dict__.get("__post_init__")
        if post is not None:
            cls.__post_init__ = _checked(post)

    # ----------------------------------------------------------------- contract (pure numpy)
    @property
    def is_identity(self) -> bool:
        """True when the operation changes nothing for any draw (then no graph node and no wire)."""
        return False

    @property
    def is_random(self) -> bool:
        return self.UNIFORMS > 0 and not self.is_identity

    @property
    def wire(self) -> tuple[Param, ...]:
        """The parameters sent to the DALI graph (none for an identity)."""
        return () if self.is_identity else self.PARAMS

    def branches(self, gpu: bool) -> bool:
        """Whether its DALI fragment uses per-sample ``if`` on this placement (``CONDITIONALS``, unless an
        identity): the pipeline then enables DALI's conditionals, whose AutoGraph pass costs the first
        batch about a second in a fresh process."""
        return self.CONDITIONALS and not self.is_identity

    def wire_for(self, channels: int) -> tuple[Param, ...]:
        """The parameters the graph uses on images of ``channels`` channels (default: all of :attr:`wire`)."""
        return self.wire

    def sample(self, u: NDArray[np.float64], size: Size | None) -> dict[str, np.ndarray]:
        """The parameters of one draw from ``UNIFORMS`` uniforms ``u`` and the input ``size``."""
        return {}

    def make_params(self, seed: int, epoch: int, position: int, image_size: Size | None,
                    offset: int = 0) -> dict[str, np.ndarray]:
        """The parameters of draw (seed, epoch, position) for an input of ``image_size`` (h, w).

        A pure function. ``offset`` is where this operation's block starts in the draw's uniforms
        (:meth:`AugmentSpec.make_params` passes the sum of the budgets before it; 0 when used alone).
        """
        u = uniforms(seed, epoch, position, offset + self.UNIFORMS)[offset:]
        return self.sample(u, None if image_size is None else (int(image_size[0]), int(image_size[1])))

    def output_size(self, size: Size | None, params: dict[str, np.ndarray]) -> Size | None:
        """The size this operation returns for an input of ``size`` (None: unknown)."""
        return size

    def static_size(self, size: Size | None) -> Size | None:
        """The output size when it is the same for every draw and input (else None)."""
        return size

    def eval(self) -> Transform | tuple[Transform, ...] | None:
        """The evaluation variant: deterministic (None removes the operation; a tuple replaces it by
        several, as ``RandomResizedCrop`` -> ``Resize`` + ``CenterCrop``)."""
        return None if self.is_random else self

    def describe(self, params: dict[str, np.ndarray]) -> str:
        """One short line naming the operation and a draw's parameters (for ``preview``)."""
        parts = [f"{k}={_fmt(v)}" for k, v in params.items()]
        return type(self).__name__ + (f"({', '.join(parts)})" if parts else "")

    # ----------------------------------------------------------------- executors
    @classmethod
    def kernel_for(cls, kind: str) -> Callable[..., Any]:
        """The kernel applying a draw's parameters to an input of ``kind`` (``"image"``: :meth:`apply`;
        others: registered with :func:`register_kernel` for this class or a base class).

        Raises:
            ConfigError: no kernel for ``kind`` is registered for this operation.
        """
        if kind == "image":
            return cls.apply
        for klass in cls.__mro__:
            fn = KERNELS.get((klass, kind))
            if fn is not None:
                return fn
        known = sorted({"image"} | {k for (c, k) in KERNELS if issubclass(cls, c)})
        raise ConfigError(f"{cls.__name__} has no kernel for input kind {kind!r} (it has: {', '.join(known)}); "
                          f"register one with dali_backend.transforms.base.register_kernel({cls.__name__}, "
                          f"{kind!r}, fn)")

    def apply(self, img: NDArray[np.uint8], params: dict[str, np.ndarray]) -> NDArray[np.uint8]:
        """The OpenCV/numpy implementation on a gray ``HxW`` or RGB ``HxWx3`` uint8 image."""
        raise NotImplementedError(f"{type(self).__name__} has no CPU implementation")

    def apply_batch(self, images, params: list[dict[str, np.ndarray]]):
        """A ``"batch"`` operation on the normalised ``[B, C, H, W]`` torch tensor (any device), one
        parameter dict per sample; returns the batch (may modify it in place: the loader owns it)."""
        raise NotImplementedError(f"{type(self).__name__} does not run on batches")

    def dali(self, images, params: dict[str, Any], ctx: GraphContext):
        """The DALI graph fragment: ``images`` (HWC uint8 nodes) -> images; sets ``ctx.hw`` if the size changes."""
        raise NotImplementedError(f"{type(self).__name__} has no DALI implementation")

    def __repr__(self) -> str:
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))  # type: ignore[arg-type]
        return f"{type(self).__name__}({args})"


def register_kernel(op: type[Transform], kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Register ``fn(op_instance, data, params) -> data`` as ``op``'s kernel for inputs of ``kind``
    (e.g. ``"mask"``: nearest, exact; a box rule for ``"boxes"``). Subclasses inherit it. Returns ``fn``.

    Raises:
        ConfigError: ``op`` is not an operation class, ``kind`` is ``"image"`` (that kernel is
            :meth:`Transform.apply`) or already registered for ``op``.
    """
    if not (isinstance(op, type) and issubclass(op, Transform)):
        raise ConfigError(f"register_kernel: op={op!r} is not an operation class (a Transform subclass)")
    if kind == "image" or (op, kind) in KERNELS:
        raise ConfigError(f"register_kernel({op.__name__}, {kind!r}): "
                          + ("the image kernel is the class's apply()" if kind == "image" else "already registered"))
    KERNELS[(op, kind)] = fn
    return fn


def _fmt(v) -> str:
    a = np.asarray(v)
    if a.ndim == 0:
        return f"{float(a):.3g}" if a.dtype.kind == "f" else str(int(a))
    return "(" + ", ".join(_fmt(x) for x in a) + ")"
