"""The mask warps' exact grid (dali_backend/transforms/targets.py: ``on_grid``, ``grid_matrix``): the kernels'
matrices are rounded, by at most ``WARP_TOLERANCE`` of a pixel, onto a grid where every float32 sum a warp
forms is exact, so the direct sums (the fallback), DALI CPU's running sums and its GPU's products give the
same class ids; tests/transforms/test_target_kernels_dali.py checks them against DALI's operators."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.transforms import targets
from dali_backend.transforms.targets import (WARP_TOLERANCE, forward_matrix, grid_matrix, nearest_warp, on_grid,
                                             warp_matrix)

OPS = [*T.RandomAffine.EXAMPLES, *T.RandomRotation.EXAMPLES,
       "RandomAffine(30, translate=(0.3, 0.3), scale=(0.5, 2.0), shear=20)"]


def draws(text: str, shape, n: int = 24):
    op = eval(text, vars(T))
    return op, [op.make_params(seed=11, epoch=0, position=k, image_size=shape) for k in range(n)]


def shift(m: np.ndarray, plain: np.ndarray, out_size) -> float:
    """The largest distance, in source pixels, between where ``m`` and ``plain`` send an output pixel's centre."""
    h, w = out_size
    corners = np.array([[0.5, 0.5, 1], [w - 0.5, 0.5, 1], [0.5, h - 0.5, 1], [w - 0.5, h - 0.5, 1]])
    return float(np.abs((m.astype(np.float64) - plain) @ corners.T).max())


@pytest.mark.parametrize("text", OPS)
@pytest.mark.parametrize("shape", [(224, 224), (256, 256), (61, 16), (256, 320), (384, 384)])
def test_the_kernels_matrices_are_on_the_grid_within_the_tolerance_or_unrounded(text, shape):
    """Up to 224 x 224 every draw reaches the grid (up to 256 x 256 every draw of the operations' examples);
    larger outputs where it is near enough
    (within ``WARP_TOLERANCE`` at the farthest pixel), else the matrix is the plain float32 inverse."""
    op, params = draws(text, shape)
    reached = 0
    for p in params:
        out = op.output_size(shape, p)
        m, plain = warp_matrix(op, p, shape), np.linalg.inv(forward_matrix(op, p, shape))[:2]
        assert m.dtype == np.float32 and m.shape == (2, 3)
        assert not on_grid(plain.astype(np.float32), out)  # the rounding is what puts it there
        if on_grid(m, out):
            reached += 1
            assert shift(m, plain, out) <= WARP_TOLERANCE
        else:
            assert np.array_equal(m, plain.astype(np.float32))
    if max(shape) <= 224 or (max(shape) <= 256 and text != OPS[-1]):
        assert reached == len(params), (text, shape)


@pytest.mark.parametrize("shape", [(1024, 1024), (480, 640)])
def test_large_outputs_keep_the_plain_matrix(shape):
    """Where the grid would move a source by more than the tolerance, the matrix stays as it was (the
    running sums then follow DALI CPU's)."""
    op, params = draws(T.RandomRotation.EXAMPLES[0], shape, 6)
    for p in params:
        plain = np.linalg.inv(forward_matrix(op, p, shape))[:2].astype(np.float32)
        assert np.array_equal(warp_matrix(op, p, shape), plain)
    assert on_grid(grid_matrix(plain, shape, tolerance=1.0), shape)  # a looser tolerance reaches it


def test_on_grid_reads_the_bits_and_the_range():
    assert on_grid(np.array([[1, 0, 3], [0, 1, -2]], np.float32), (100, 100))          # integers
    assert on_grid(np.array([[0.5, 0.25, 0.125], [0, 1, 0.5]], np.float32), (100, 100))
    assert not on_grid(np.array([[1 / 3, 0, 0], [0, 1, 0]], np.float32), (100, 100))  # 24 bits of fraction
    fine = np.array([[2.0 ** -12, 0, 0], [0, 1, 0]], np.float32)
    assert on_grid(fine, (100, 100)) and not on_grid(fine * 4096 * 4096, (100, 100))   # in range, then not
    assert not on_grid(np.array([[1, 0, 2.0 ** -14], [0, 1, 0]], np.float32), (4096, 4096))
    for bad in (np.nan, np.inf):  # not on it: the running sums run, as for any matrix (all fill here)
        m = np.array([[1, 0, bad], [0, 1, 0]], np.float32)
        assert not on_grid(m, (10, 10)) and np.array_equal(grid_matrix(m, (10, 10)), m, equal_nan=True)
        assert (nearest_warp(np.ones((10, 10), np.uint8), m, (10, 10), 0) == 0).all()


@pytest.mark.parametrize("text", OPS)
@pytest.mark.parametrize("out", [(224, 224), (37, 300), (300, 290)])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_on_the_grid_the_direct_sums_are_the_running_sums(text, out, dtype):
    """On the grid, the direct sums (one vector addition per map) give what DALI CPU's running sums give,
    for runs of any length: every sum is exact."""
    rng = np.random.default_rng(list(out))
    mask = rng.integers(0, 6, (out[0] + 13, out[1] - 7)).astype(dtype)
    op, params = draws(text, mask.shape, 12)
    for p in params:
        m = grid_matrix(np.linalg.inv(forward_matrix(op, p, mask.shape)), out, tolerance=0.5)  # on it: the
        assert on_grid(m, out)                                                                # arithmetic's case
        direct = nearest_warp(mask, m, out, fill=3)
        sums = nearest_warp(mask, m, out, fill=3, sources=targets.warp_sources([(m, *out)])[0])
        assert direct.dtype == dtype and direct.shape == out
        assert np.array_equal(direct, sums), (text, op.describe(p))


def test_the_scratch_maps_are_per_thread_and_not_returned():
    """The direct maps live in a per-thread scratch buffer: two threads warping at once get their own
    results, and a returned mask is never a view of the buffer."""
    import threading

    op, params = draws(T.RandomRotation.EXAMPLES[0], (224, 224), 16)
    mask = np.random.default_rng(3).integers(0, 4, (224, 224)).astype(np.uint16)  # the numpy gather: reads the maps
    want = [nearest_warp(mask, warp_matrix(op, p, mask.shape), (224, 224), 0) for p in params]
    got: dict[int, list] = {}

    def work(k):
        got[k] = [nearest_warp(mask, warp_matrix(op, p, mask.shape), (224, 224), 0) for p in params * 4]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):
        assert all(np.array_equal(g, want[j % len(params)]) for j, g in enumerate(got[k]))
    assert all(w.flags.owndata for w in want)  # its own memory, not a view of the maps
