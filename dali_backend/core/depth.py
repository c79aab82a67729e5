"""Bit depth in the contract: a 16-bit image keeps its values until a declared conversion.

The declared conversions: a ``Window`` (16 bits to 8, before the 8-bit operations), or, with
``AugmentSpec(decode_bits=16)`` and no ``Window``, the float output itself (``x / 65535``, then
mean/std): every operation then runs on uint16 and the executors hand uint16 batches to the one
normalisation both share (:func:`check_through`).

Three checks, all typed errors that name the operation and the fix:

* :func:`check_order` (at spec construction): in an operation list holding a ``Window``, every
  operation before it must take 16-bit values (``Transform.DEPTHS`` holds 16: flips, quarter turns,
  crops, ``Grayscale``, ``Resize``, ``RandomResizedCrop``, ``RandomRotation``, ``RandomAffine``:
  :func:`sixteen_bit_operations`), and there is one ``Window``;
* :func:`source_refusal` / :func:`check_served` (when a sample is served): a file whose header declares more than 8 bits
  per value, under a spec without a ``Window``, would be cut to 8 bits by the decoder (DALI rounds
  ``x / 257``, OpenCV shifts ``x >> 8``: not even the same 8 bits). It is refused, whatever the spec
  does after the decode: a spec with no 8-bit operation and no ``Window`` is refused too, since its
  output stage (uint8, or float scaled from ``x / 255``) is 8-bit; the fix names ``decode_bits=16``;
* :func:`check_through` (at spec construction, ``decode_bits=16`` without a ``Window``): every operation
  takes 16-bit values and the output is float (a uint8 output cannot hold them).

A 16-bit spec (a ``Window``, or ``decode_bits=16``) decodes every image at 16 bits; 8-bit files are
promoted (``x * 257``, as DALI's decoder does), so one dataset may mix 8- and 16-bit files.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from ..formats.registry import HEAD_BYTES, read_header
from ..transforms import REGISTRY, Transform
from ..transforms.intensity import Window

FIX_12BIT = "12-bit data stored in 16 bits: Window(0, 4095)"


def window_position(ops: Sequence[Transform]) -> int | None:
    """The position of the ``Window`` in ``ops`` (None: an 8-bit spec)."""
    found = [k for k, op in enumerate(ops) if isinstance(op, Window)]
    return found[0] if found else None


def sixteen_bit_operations() -> list[str]:
    """The names of the registered pixel operations that take uint16 images (``16 in DEPTHS``), sorted."""
    return sorted(name for name, cls in REGISTRY.items() if 16 in cls.DEPTHS and cls is not Window
                  and cls.KIND not in ("output", "batch"))


def check_order(ops: Sequence[Transform]) -> None:
    """Refuse an operation list that would run an 8-bit operation on 16-bit values (see the module docstring).

    Raises:
        ConfigError: two Windows, or an operation not exact on uint16 before the Window.
    """
    windows = [k for k, op in enumerate(ops) if isinstance(op, Window)]
    if len(windows) > 1:
        raise ConfigError("AugmentSpec.ops: more than one Window; the first maps 16 bits to 8, keep one")
    if not windows:
        return
    w = windows[0]
    early = eight_bit_operations(ops[:w])
    if early:
        raise ConfigError(f"AugmentSpec.ops: {early[0]} runs on 8-bit values and comes before {ops[w]!r}, so it would "
                          f"see 16-bit values; move {ops[w]!r} before {early[0]} (only "
                          f"{', '.join(sixteen_bit_operations())} may run on 16-bit values)")


def eight_bit_operations(ops: Sequence[Transform], skip_identity: bool = False) -> list[str]:
    """The names of the pixel operations of ``ops`` that take 8-bit values only, in order."""
    return [type(op).__name__ for op in ops if op.KIND not in ("output", "batch") and 16 not in op.DEPTHS
            and not (skip_identity and op.is_identity)]


def check_through(ops: Sequence[Transform], dtype: str, preset: bool) -> None:
    """Refuse ``AugmentSpec(decode_bits=16)`` without a ``Window`` where 16-bit values would reach an 8-bit
    operation or a uint8 output (see the module docstring).

    Raises:
        ConfigError: naming the first 8-bit operation (or the dtype) and the fix.
    """
    if preset:
        raise ConfigError("AugmentSpec(decode_bits=16): the preset runs Clahe and ColorJitter, 8-bit operations; "
                          "write its steps as ops=[Window(...), Clahe(), Resize(...), ...], or for a float output "
                          "from all 16 bits ops= of operations that take 16 bits "
                          f"({', '.join(sixteen_bit_operations())})")
    eight = eight_bit_operations(ops)
    if eight:
        raise ConfigError(f"AugmentSpec(decode_bits=16): {eight[0]} runs on 8-bit values, and the spec has no Window; "
                          f"put Window(low=..., high=...) before {eight[0]} (then the output is 8-bit), or drop "
                          f"{eight[0]} (only {', '.join(sixteen_bit_operations())} take 16-bit values)")
    if dtype == "uint8":
        raise ConfigError("AugmentSpec(decode_bits=16, dtype='uint8'): a uint8 output cannot hold 16-bit values; use "
                          "dtype='float32' (x / 65535, then mean/std), or put Window(low=..., high=...) as the last "
                          "pixel operation for a uint8 output")


def source_refusal(ops: Sequence[Transform], bits: int) -> str | None:
    """Why a sample of ``bits`` bits per value cannot be served under the operations ``ops``, or None."""
    if bits <= 8 or window_position(ops) is not None:
        return None
    eight = eight_bit_operations(ops, skip_identity=True)
    if eight:
        return (f"a {bits}-bit image, and the spec has no Window: {eight[0]} runs on 8-bit values, so the decoder would "
                f"cut the image to 8 bits; add Window(low=..., high=...) before {eight[0]} ({FIX_12BIT})")
    return (f"a {bits}-bit image, and the spec has no Window: its output is 8-bit, so the decoder would cut the image "
            f"to 8 bits; for a float output from all {bits} bits (x / 65535, then mean/std) pass "
            f"AugmentSpec(..., decode_bits=16), or add Window(low=..., high=...) as the last pixel operation "
            f"({FIX_12BIT})")


def check_served(spec, data, where: str) -> None:
    """Refuse served encoded ``data`` whose header declares more bits per value than ``spec`` (an
    :class:`~dali_backend.core.augment.AugmentSpec`) keeps (:meth:`AugmentSpec.depth_refusal`).

    Both backends call it on each sample's bytes before decoding (a header read, ~20 us); a 16-bit
    spec takes every depth. Not a bad file (``on_error="skip"`` does not replace it): the spec is wrong.

    Raises:
        ConfigError: naming ``where`` (the file), the operation and the fix.
    """
    if spec.bit_depth == 16:
        return
    header = read_header(data[:HEAD_BYTES])
    reason = None if header is None or header.bit_depth <= 8 else spec.depth_refusal(header.bit_depth)
    if reason:
        raise ConfigError(f"{where}: {reason}")
