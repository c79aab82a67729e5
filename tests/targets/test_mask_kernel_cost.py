"""The fallback's mask kernels gather with integer maps (``np.take``, ``cv2.remap`` on ``CV_16SC2``) from the
same float32 source indices as DALI's ``INTERP_NN`` (bit-exactness: tests/transforms/test_target_kernels_dali.py):
the remap path equals the plain numpy gather for every draw, outside and far outside the mask included,
and a mask's warp costs about its image's (scripts/mask_kernels_cost.py measures every operation)."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.transforms.targets import nearest_resize, nearest_warp
from scripts.mask_kernels_cost import best_ms


def labels(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 6, shape).astype(np.uint8)


@pytest.mark.parametrize("out_size", [(224, 224), (37, 90), (1, 1)])
def test_the_remap_gather_equals_the_numpy_gather_of_the_same_indices(out_size):
    """uint8 masks take cv2.remap, uint16 the numpy gather: the same class ids, fill where the source is
    outside (a translation of 1e6 pixels too: clipped, not wrapped into int16)."""
    rng = np.random.default_rng(1)
    mask = labels((61, 77))
    for k in range(40):
        a, s = np.radians(rng.uniform(-180, 180)), rng.uniform(0.3, 3.0)
        shift = rng.uniform(-80, 80, 2) if k < 36 else rng.choice([-1e6, 1e6], 2)
        m = np.array([[s * np.cos(a), s * np.sin(a), shift[0]], [-s * np.sin(a), s * np.cos(a), shift[1]]], np.float32)
        got = nearest_warp(mask, m, out_size, fill=9)
        want = nearest_warp(mask.astype(np.uint16), m, out_size, fill=9)
        assert got.dtype == np.uint8 and got.shape == out_size and np.array_equal(got, want), k
    assert (nearest_warp(mask, m, (20, 20), fill=9) == 9).all()  # the last draw is far outside


def test_nearest_resize_gathers_rows_then_columns_of_any_view():
    mask = labels((50, 70))
    window = mask[3:41, 5:66]  # a crop's view, not a copy
    assert np.array_equal(nearest_resize(window, 90, 20), nearest_resize(np.ascontiguousarray(window), 90, 20))
    assert np.array_equal(nearest_resize(mask, 50, 70), mask)
    assert np.array_equal(nearest_resize(mask, 100, 140)[::2, ::2], mask)


def test_a_masks_warp_costs_about_its_images_warp():
    """RandomRotation at 224 x 224: the mask kernel (exact float32 indices, then the gather) against the
    image kernel (cv2.warpAffine bilinear, 3 channels), best of 7 in one run. Measured 1.3-1.7x; the numpy
    gather it replaced was 5.3-6.7x."""
    op = T.RandomRotation(15)
    mask, image = labels((224, 224)), np.random.default_rng(2).integers(0, 200, (224, 224, 3), np.uint8)
    params = [op.make_params(seed=1, epoch=0, position=j, image_size=(224, 224)) for j in range(20)]
    kernel = type(op).kernel_for("mask")
    ratio = best_ms(lambda p: kernel(op, mask, p), params, 7) / best_ms(lambda p: op.apply(image, p), params, 7)
    assert ratio < 3.0, ratio
