"""The fallback's mask kernels gather with integer maps (``np.take``, ``cv2.remap`` on ``CV_16SC2``) from the
same float32 source indices as DALI's ``INTERP_NN`` (bit-exactness: tests/transforms/test_target_kernels_dali.py):
the remap path equals the plain numpy gather for every draw, outside and far outside the mask included,
and costs a fraction of the numpy gather (scripts/mask_kernels_cost.py measures every operation against
the image's kernel)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.transforms.targets import nearest_resize, nearest_warp, warp_matrix


def cost_ratio(fast, slow, items: list, rounds: int = 11) -> float:
    """CPU time of ``fast`` over ``items`` against ``slow``'s, each the best of ``rounds`` passes taken in
    turn (process time: a busy machine preempts both alike, and it counts OpenCV's threads)."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, fn in enumerate((fast, slow)):
            t0 = time.process_time()
            for item in items:
                fn(item)
            best[k] = min(best[k], time.process_time() - t0)
    return best[0] / best[1]


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


def test_the_remap_gather_costs_a_fraction_of_the_numpy_gather():
    """RandomRotation at 224 x 224, the same source indices gathered by cv2.remap (uint8 masks) and by numpy
    (the uint16 path, the gather this module used for every mask), best of 7 in one run: measured 0.15-0.28x.
    Against the image's own kernel (cv2.warpAffine, bilinear, 3 channels) the mask's warp measured
    1.3-1.7x, where the numpy gather was 5.3-6.7x (scripts/mask_kernels_cost.py); not asserted here:
    OpenCV's thread pool makes that ratio depend on what ran before in the process."""
    op = T.RandomRotation(15)
    mask = labels((224, 224))
    matrices = [warp_matrix(op, op.make_params(seed=1, epoch=0, position=j, image_size=(224, 224)), (224, 224))
                for j in range(20)]
    wide = mask.astype(np.uint16)
    ratio = cost_ratio(lambda m: nearest_warp(mask, m, (224, 224), 0), lambda m: nearest_warp(wide, m, (224, 224), 0),
                       matrices)
    assert ratio < 0.6, ratio


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
    (clipped, emptied and hidden boxes included), in a third of its time or less (measured 9 us against
    40 us for 3 boxes)."""
    from dali_backend.transforms import targets

    rng = np.random.default_rng(3)
    draws = [(random_boxes(rng, int(rng.integers(0, targets.FEW_BOXES + 1))), random_affine(rng),
              (int(rng.integers(1, 400)), int(rng.integers(1, 400)))) for _ in range(500)]
    few = [targets.move_boxes(*d) for d in draws]
    monkeypatch.setattr(targets, "FEW_BOXES", -1)  # every call through numpy
    for (b, _, _), p, (_, m, size) in zip(draws, few, draws):
        q = targets.move_boxes(b, m, size)
        assert np.array_equal(p.xyxy, q.xyxy) and np.array_equal(p.visible, q.visible) and p.canvas == q.canvas
    three = [(random_boxes(rng, 3), random_affine(rng), (224, 224)) for _ in range(200)]

    def through(limit):
        def move(d):
            targets.FEW_BOXES = limit  # monkeypatch restores the module's value after the test
            return targets.move_boxes(*d)
        return move

    ratio = cost_ratio(through(16), through(-1), three)
    assert ratio < 0.5, ratio
