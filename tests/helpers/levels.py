"""Comparing the two backends' outputs in uint8 levels, against the published tolerance.

A tolerance on normalised floats hides what it allows: 0.05 after ImageNet's normalisation is about
2.9 levels, so ``(x - u).abs().max() <= 0.05`` passes a steady 2-level error on every pixel. These
helpers turn normalised outputs back into the levels they came from and apply the published bound
(``bench.equivalence.BOUNDS``: mean <= 0.05 and 99.9th percentile <= 2 levels on CPU operators) to all
pixels of a run together, plus the per-operation maximum where the caller knows it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from bench.equivalence import diff_stats, over_bound


def to_levels(x: torch.Tensor, spec) -> np.ndarray:
    """The uint8 levels (as int16) a batch of ``spec``'s output was normalised from."""
    x = x.detach().cpu()
    if spec.dtype == "uint8":
        assert x.dtype == torch.uint8, x.dtype
        return x.numpy().astype(np.int16)
    assert spec.dtype == "float32" and x.dtype == torch.float32, (spec.dtype, x.dtype)
    scale, shift = (torch.from_numpy(a).view(-1, 1, 1).to(torch.float64) for a in spec.normalize_coefficients())
    levels = (x.to(torch.float64) - shift) / scale
    rounded = torch.round(levels)
    assert (levels - rounded).abs().max() < 0.01, "not a normalised uint8 image"
    assert rounded.min() >= 0 and rounded.max() <= 255
    return rounded.numpy().astype(np.int16)


def level_stats(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], spec) -> dict:
    """mean / p99.9 / max |difference| in levels over all pixels of paired batches (same count, same shapes)."""
    got, want = list(got), list(want)
    assert len(got) == len(want) and got, (len(got), len(want))
    return diff_stats([to_levels(a, spec) for a in got], [to_levels(b, spec) for b in want])


def assert_within_tolerance(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], spec,
                            max_levels: int | None = None, row: str = "end-to-end") -> dict:
    """The published bound of ``row`` on CPU operators, and at most ``max_levels`` anywhere when given."""
    stats = level_stats(got, want, spec)
    over = over_bound(row, stats, "cpu")
    assert not over, (over, stats)
    assert max_levels is None or stats["max"] <= max_levels, stats
    return stats


# The preset on CPU operators: CLAHE, the resize and the jitter table are exact; the rotation differs by
# at most 1 level (tests/transforms/test_transforms.py TOLERANCE["RandomRotation"]), which a jitter of contrast and
# brightness up to 1.1 each (gain <= 1.21) turns into at most 2 after rounding.
PRESET_MAX_LEVELS = 2
