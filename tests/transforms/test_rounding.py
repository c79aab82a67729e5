"""Rounding of exact ties: the fallback rounds half up as DALI's CPU kernels do; DALI's GPU kernels
round half to even, modelled exactly so that the GPU's differences are predicted, not guessed."""

from __future__ import annotations

import numpy as np
import pytest

from bench.equivalence import run_transform_dali
from dali_backend.transforms import ColorJitter
from dali_backend.transforms.color import jitter_lut


def exact_values(b: float, c: float, center: float = 128.0) -> np.ndarray:
    f32 = np.float32
    bb = f32(f32(f32(b) * f32(255.0)) / f32(255.0))
    return np.arange(256, dtype=np.float32) * (bb * f32(c)) + bb * (f32(center) - f32(c) * f32(center))


@pytest.mark.parametrize("b, c", [(1.0, 1.5), (1.0, 0.5), (2.0, 0.75), (0.5, 1.0)])
def test_the_two_tie_rules_differ_only_at_exact_ties_by_one_level(b, c):
    up, even = jitter_lut(b, c, 128.0, "up"), jitter_lut(b, c, 128.0, "even")
    y = exact_values(b, c)
    ties = (y - np.floor(y) == 0.5) & (y > 0) & (y < 255)
    differ = up != even
    assert ties.any()  # these parameters do make ties
    assert np.all(differ <= ties), "the rules may only disagree at an exact .5"
    assert np.abs(up.astype(int) - even.astype(int)).max() == 1
    odd_floor = ties & (np.floor(y) % 2 == 1)  # half to even rounds these up too: no difference there
    np.testing.assert_array_equal(differ, ties & ~odd_floor)


@pytest.mark.parametrize("color", ["gray", "rgb"])
def test_the_jitter_the_loaders_run_rounds_ties_like_dalis_cpu_kernel(color):
    """A fixed contrast of 1.5 makes every odd level a tie: ``ColorJitter.apply`` (what the fallback
    runs) equals DALI's ``brightness_contrast`` (what the DALI loader runs) pixel for pixel. Random
    parameters almost never hit a tie, so only a fixed one catches a half-down rounding."""
    op = ColorJitter(brightness=(1.0, 1.0), contrast=(1.5, 1.5))
    rng = np.random.default_rng(0)
    shape = (17, 256) if color == "gray" else (17, 256, 3)
    img = np.broadcast_to(np.arange(256, dtype=np.uint8)[None, :, None][..., :shape[-1] if color == "rgb" else 1],
                          (17, 256, 3 if color == "rgb" else 1)).copy()
    img = img[..., 0] if color == "gray" else img
    imgs = [img, rng.integers(0, 256, shape, dtype=np.uint8)]
    params = [op.make_params(0, 0, i, im.shape[:2]) for i, im in enumerate(imgs)]
    assert all(float(p["contrast"]) == 1.5 and float(p["brightness"]) == 1.0 for p in params)
    got = run_transform_dali(op, imgs, params)
    for g, im, p in zip(got, imgs, params, strict=True):
        np.testing.assert_array_equal(g, op.apply(im, p))
    assert (op.apply(imgs[0], params[0]) != jitter_lut(1.0, 1.5, 128.0, "even")[imgs[0]]).any()
