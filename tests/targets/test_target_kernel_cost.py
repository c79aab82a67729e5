"""The fallback's mask kernels gather with integer maps (``np.take``, ``cv2.remap`` on ``CV_16SC2``) from the
same float32 source indices as DALI's ``INTERP_NN`` (bit-exactness: tests/transforms/test_target_kernels_dali.py):
the remap path equals the plain numpy gather for every draw, outside and far outside the mask included
(scripts/mask_kernels_cost.py measures every operation's cost against the image's kernel)."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.transforms.targets import nearest_resize, nearest_warp, warp_matrix


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


def test_uint8_masks_are_gathered_by_remap_and_uint16_masks_by_numpy(monkeypatch):
    """The uint8 path is the cv2.remap gather on integer maps (measured 0.15-0.28x the numpy gather's time at
    224 x 224 and the mask's warp 1.3-1.7x the image's own, where numpy's was 5.3-6.7x:
    scripts/mask_kernels_cost.py); uint16 ids keep the numpy gather. Speed is the benchmark's to measure,
    this test checks which gather runs."""
    import cv2

    calls = []
    real = cv2.remap

    def counting(*args, **kwargs):
        calls.append(args[0].dtype)
        return real(*args, **kwargs)

    monkeypatch.setattr(cv2, "remap", counting)
    op = T.RandomRotation(15)
    m = warp_matrix(op, op.make_params(seed=1, epoch=0, position=0, image_size=(224, 224)), (224, 224))
    mask = labels((224, 224))
    nearest_warp(mask, m, (224, 224), 0)
    assert calls == [np.dtype(np.uint8)]
    nearest_warp(mask.astype(np.uint16), m, (224, 224), 0)
    assert calls == [np.dtype(np.uint8)]


def random_boxes(rng, n: int):
    from dali_backend.transforms.targets import Boxes

    x1, y1, w, h = rng.uniform(-20, 300, n), rng.uniform(-20, 250, n), rng.uniform(0, 80, n), rng.uniform(0, 80, n)
    return Boxes(np.stack([x1, y1, x1 + w, y1 + h], 1), np.arange(n), (256, 320), rng.uniform(0, 1, n))


def random_affine(rng) -> np.ndarray:
    a, s = np.radians(rng.uniform(-180, 180)), rng.uniform(0.2, 3)
    return np.array([[s * np.cos(a), s * np.sin(a) + rng.uniform(-0.3, 0.3), rng.uniform(-100, 100)],
                     [-s * np.sin(a), s * np.cos(a), rng.uniform(-100, 100)], [0, 0, 1]])


def test_few_boxes_move_on_python_floats_exactly_as_the_numpy_path(monkeypatch):
    """Up to FEW_BOXES boxes are moved on Python floats: the same doubles as the numpy path, bit for bit
    (clipped, emptied and hidden boxes included); measured 9 us against 40 us for 3 boxes (not asserted:
    speed is the benchmark's to measure)."""
    from dali_backend.transforms import boxmove, targets

    rng = np.random.default_rng(3)
    draws = [(random_boxes(rng, int(rng.integers(0, targets.FEW_BOXES + 1))), random_affine(rng),
              (int(rng.integers(1, 400)), int(rng.integers(1, 400)))) for _ in range(500)]
    few = [targets.move_boxes(*d) for d in draws]
    monkeypatch.setattr(boxmove, "FEW_BOXES", -1)  # every call through numpy
    for (b, _, _), p, (_, m, size) in zip(draws, few, draws):
        q = targets.move_boxes(b, m, size)
        assert np.array_equal(p.xyxy, q.xyxy) and np.array_equal(p.visible, q.visible) and p.canvas == q.canvas
