"""The mask warps' exact grid (dali_backend/transforms/targets.py: ``on_grid``, ``grid_matrix``): the kernels'
matrices are rounded, by at most ``WARP_TOLERANCE`` of a pixel, onto a grid where every float32 sum a warp
forms is exact, so the direct sums (the fallback), DALI CPU's running sums and its GPU's products give the
same class ids; tests/transforms/test_target_kernels_dali.py checks them against DALI's operators."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.errors import ConfigError
from dali_backend.transforms import targets
from dali_backend.transforms.targets import (WARP_TOLERANCE, forward_matrix, grid_matrix, nearest_resize, nearest_scale,
                                             nearest_warp, on_grid, resize_extent, warp_matrix)

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


@pytest.mark.parametrize("n_in, n_out", [(320, 224), (256, 224), (40, 100), (1, 5), (2048, 224), (61, 16), (7, 300),
                                         (224, 224), (1000, 333), (4000, 3000), (3000, 1), (255, 367), (1023, 700)])
def test_nearest_scale_is_exact_inside_and_within_the_tolerance_or_none(n_in, n_out):
    """On the grid every source position ``s (j + 0.5)`` and every running float32 sum of ``s`` is exact,
    inside the image, and the last sampling point within the tolerance of the true one (in output pixels);
    else None, and the resize keeps DALI's own float32 scale."""
    s = nearest_scale(n_in, n_out)
    extent = resize_extent(n_in, n_out)
    if s is None:
        assert extent == n_in and (n_in, n_out) in {(4000, 3000)}
        return
    f = np.float32
    assert f(s) == s and f(extent) == extent == s * n_out and f(extent) / f(n_out) == f(s)  # DALI's division
    assert 0 < s <= n_in / n_out and (n_in - s * n_out) * n_out / n_in <= WARP_TOLERANCE
    j = np.arange(n_out)
    positions = s * (j + 0.5)                                      # float64: exact
    assert np.array_equal((f(s) * (j + f(0.5)).astype(f)).astype(np.float64), positions)  # float32: the same
    running = np.cumsum(np.r_[f(0.5) * f(s), np.full(n_out - 1, s, f)], dtype=f)  # DALI CPU's rows
    assert np.array_equal(running.astype(np.float64), positions)
    assert positions.max() < n_in
    rows, cols = source_rows(n_in, n_out), source_columns(n_in, n_out)
    assert np.array_equal(rows, np.floor(positions)) and np.array_equal(cols, rows)


def source_rows(n_in: int, n_out: int) -> np.ndarray:
    """The source row of each output row of ``nearest_resize`` (on a mask of row numbers)."""
    return nearest_resize(np.arange(n_in, dtype=np.int32)[:, None], n_out, 1)[:, 0]


def source_columns(n_in: int, n_out: int) -> np.ndarray:
    return nearest_resize(np.arange(n_in, dtype=np.int32)[None, :], 1, n_out)[0]


def test_off_the_grid_the_resize_keeps_dali_cpus_arithmetic():
    """4000 -> 3000 cannot reach the grid within the tolerance: rows by DALI CPU's running sum, columns by
    its product (they differ on ties), as before the grid."""
    assert nearest_scale(4000, 3000) is None
    s = np.float32(4000) / np.float32(3000)
    cols = np.floor((np.arange(3000, dtype=np.float32) + np.float32(0.5)) * s)
    assert np.array_equal(source_columns(4000, 3000), np.minimum(cols, 3999))
    steps = np.full(3000, s, np.float32)
    steps[0] = np.float32(0.5) * s
    assert np.array_equal(source_rows(4000, 3000), np.minimum(np.floor(np.cumsum(steps, dtype=np.float32)), 3999))


def test_nearest_scale_takes_numpy_integers_and_refuses_fractions():
    assert nearest_scale(np.uint8(200), np.int16(150)) == nearest_scale(200, 150) is not None  # no overflow
    assert nearest_scale(0, 5) is None and nearest_scale(5, 0) is None and nearest_scale(2 ** 24, 3) is None
    with pytest.raises(ConfigError, match="whole numbers"):
        nearest_scale(320.0, 224)
