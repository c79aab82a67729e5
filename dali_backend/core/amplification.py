"""The warning for operation lists where CLAHE would amplify a 1-level difference between the backends.

CLAHE maps levels by their rank in a tile's histogram: a 1-level difference before it (DALI's GPU
resampling, a rotation's rounding) can come out as several after it (measured up to 14 levels). The
warning names the pair of operations and the fix (CLAHE first); docs: concepts/equivalence,
"Compositions".
"""

from __future__ import annotations

import warnings

from ..transforms import Clahe, Transform


class AmplificationWarning(UserWarning):
    """An operation list where CLAHE follows an operation whose two backends can differ by a level:
    the difference is amplified (docs: concepts/equivalence, "Compositions")."""


def one_level(op: Transform) -> str | None:
    """Where the backends can differ by a level after ``op`` (None: nowhere), from the operation's
    declared tolerances: ``TOLERANCE`` on DALI's CPU operators, ``gpu_tolerance()`` on its GPU kernels
    (the fallback's Resize and RandomResizedCrop are bit-exact with DALI's CPU fn.resize, not its GPU)."""
    if (op.TOLERANCE or 0) >= 1:
        return "DALI's CPU and GPU operators"
    if (op.gpu_tolerance() or 0) >= 1:
        return "the GPU"
    return None


_WARNED: set[tuple[str, str]] = set()


def warn_amplification(ops: tuple[Transform, ...]) -> None:
    """Warn (once per pair of operation types and process) when CLAHE comes after an operation of a
    declared tolerance of 1 level or more (:func:`one_level`): a 1-level difference between the
    backends then becomes several (measured: up to 14 levels; on tiles of a few pixels CLAHE maps by rank, up to 255 * k / pixels per tile).
    A ColorJitter multiplies a difference by its gain only (3 levels at contrast 2-3, measured) and
    does not warn: torchvision's own recipe puts ColorJitter(0.4, 0.4, 0.4) after RandomResizedCrop,
    and a warning on every such recipe would teach users to ignore it (docs: concepts/equivalence, "Compositions")."""
    pairs = []
    for j, amp in enumerate(ops):
        if amp.is_identity or not isinstance(amp, Clahe):
            continue
        for i, src in enumerate(ops[:j]):
            name = type(src).__name__
            if one_level(src) is not None and not src.is_identity and (type(amp).__name__, name) not in _WARNED:
                pairs.append((i, j))
    if not pairs:
        return
    _WARNED.update((type(ops[j]).__name__, type(ops[i]).__name__) for i, j in pairs)
    said = "; ".join(f"{type(ops[j]).__name__} (ops[{j}]) after {type(ops[i]).__name__} (ops[{i}]), which can differ "
                     f"by 1 level on {one_level(ops[i])}" for i, j in pairs)
    warnings.warn(f"AugmentSpec.ops: {said}. CLAHE amplifies such a difference between the DALI and fallback "
                  "backends (measured up to 14 levels; more on images of a few pixels per CLAHE tile): see the docs, "
                  "concepts/equivalence, 'Compositions'. Put Clahe before that operation to keep the backends equal.", AmplificationWarning,
                  stacklevel=5)
