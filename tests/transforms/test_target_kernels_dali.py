"""The CPU mask kernels (dali_backend/transforms/targets.py) equal DALI's nearest-neighbour operators on
DALI's CPU backend: ``fn.resize`` and ``fn.warp_affine`` with ``INTERP_NN`` on the same drawn parameters
give the same class ids, pixel for pixel (``fn.rotate``: all but rare ties). This pins the rule the DALI graph's
mask steps use (dali_backend/dali/targetgraph.py); the loaders' masks are compared end to end in
tests/targets/test_targets_both_backends.py."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.transforms.targets import (forward_matrix, nearest_resize, nearest_scale, nearest_warp, on_grid,
                                             resize_extent, warp_matrix)
from tests.helpers import CUDA

pytest.importorskip("nvidia.dali")

SHAPES = [(37, 53), (40, 60), (61, 16)]


def constant(batch: list[np.ndarray]):
    return lambda: batch  # no argument: DALI would pass a callable with one the iteration number


def run(masks: list[np.ndarray], build, params: list[dict], device: str = "cpu") -> list[np.ndarray]:
    """``build(mask_node, params_of_sample)`` on DALI's CPU operators (``device="gpu"``: the mask node on the
    GPU, so its operators are the GPU ones), one sample per mask."""
    import nvidia.dali as dali
    from nvidia.dali import fn, types

    names = sorted(params[0])
    arrays = [[np.asarray(p[k], np.float32) for p in params] for k in names]

    @dali.pipeline_def(batch_size=len(masks), num_threads=1, device_id=0 if device == "gpu" else None)
    def pipe():
        x = fn.external_source(source=lambda: [m[..., None] for m in masks], layout="HWC", dtype=types.UINT8)
        nodes = {k: fn.external_source(source=constant(a), dtype=types.FLOAT) for k, a in zip(names, arrays)}
        return build(x.gpu() if device == "gpu" else x, nodes)

    p = pipe()
    p.build()
    (out,) = p.run()
    out = out.as_cpu() if device == "gpu" else out
    return [np.array(out[i])[..., 0] for i in range(len(masks))]


def labels(shape) -> np.ndarray:
    return np.random.default_rng(list(shape)).integers(0, 5, shape).astype(np.uint8)


def resize(x, p):
    from nvidia.dali import fn, types

    return fn.resize(x, size=p["size"], roi_start=[0.0, 0.0], roi_end=p["extent"], roi_relative=False,
                     interp_type=types.INTERP_NN, antialias=False)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=CUDA)])
@pytest.mark.parametrize("shape", [*SHAPES, (320, 256), (255, 511), (2048, 1536)])
def test_dali_nearest_resize_equals_the_cpu_mask_kernel(shape, device):
    """``fn.resize(INTERP_NN)`` with the kernel's ROI (``resize_extent``: the scale on the exact grid where
    ``nearest_scale`` finds one, else the whole image) gives the kernel's class ids: on the grid from DALI's
    CPU (a running sum down the rows) and its GPU (a product per pixel) alike."""
    mask = np.random.default_rng(list(shape)).integers(0, 256, shape).astype(np.uint8)
    sizes = [(24, 40), (100, 7), shape, (2 * shape[0] + 1, 3 * shape[1] // 2), (13, 50), (1, 1), (224, 224),
             (3 * shape[0] // 4, shape[1] - 1)]
    params = [{"size": np.array((h, w), np.float32),
               "extent": np.array([resize_extent(n, o) for n, o in zip(shape, (h, w))], np.float32)} for h, w in sizes]
    grid = [all(nearest_scale(n, o) is not None for n, o in zip(shape, (h, w))) for h, w in sizes]
    assert any(grid) and (max(shape) < 2000 or not all(grid))  # both kinds: on the grid and off it
    if device == "gpu":  # off the grid DALI's GPU may differ from its CPU on ties: only the grid is claimed
        sizes, params = [s for s, g in zip(sizes, grid) if g], [p for p, g in zip(params, grid) if g]
    got = run([mask] * len(sizes), resize, params, device)
    for (h, w), g in zip(sizes, got):
        want = nearest_resize(mask, h, w)
        assert np.array_equal(g, want), (shape, (h, w), int((g != want).sum()))


def test_dali_nearest_resize_without_a_roi_is_the_whole_image_extent():
    """Off the grid the kernel follows DALI's own scale: a ROI of the whole image is no ROI at all."""
    from nvidia.dali import fn, types

    rng = np.random.default_rng(9)
    shapes = [tuple(int(v) for v in rng.integers(1, 1500, 2)) for _ in range(24)]
    outs = [tuple(int(v) for v in rng.integers(1, 1500, 2)) for _ in range(24)]
    for shape, out in zip(shapes, outs):
        mask = labels(shape)
        p = [{"size": np.array(out, np.float32), "extent": np.array(shape, np.float32)}]
        plain = run([mask], lambda x, q: fn.resize(x, size=q["size"], interp_type=types.INTERP_NN, antialias=False), p)
        assert np.array_equal(run([mask], resize, p)[0], plain[0]), (shape, out)


def warp(x, p):
    from nvidia.dali import fn, types

    return fn.warp_affine(x, matrix=p["m"], inverse_map=True, interp_type=types.INTERP_NN, fill_value=0.0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=CUDA)])
@pytest.mark.parametrize("text", [*T.RandomAffine.EXAMPLES, *T.RandomRotation.EXAMPLES])
@pytest.mark.parametrize("shape", [*SHAPES, (224, 224)])
def test_dali_nearest_warp_equals_the_cpu_mask_kernels(text, shape, device):
    """Rotation and affine masks through ``fn.warp_affine`` with the kernel's own matrix (``warp_matrix``, on
    the exact grid): the same class ids from DALI's CPU warp (running float32 sums along each row) and
    its GPU warp (a product per pixel) as from the fallback's kernel (direct sums)."""
    op, mask = eval(text, vars(T)), labels(shape)
    params = [op.make_params(seed=2, epoch=0, position=k, image_size=shape) for k in range(16)]
    matrices = [{"m": warp_matrix(op, p, shape)} for p in params]
    assert all(on_grid(m["m"], op.output_size(shape, p)) for m, p in zip(matrices, params))
    got = run([mask] * len(params), warp, matrices, device)
    for p, g in zip(params, got):
        want = op.kernel_for("mask")(op, mask, p)
        assert np.array_equal(g, want), f"{text} {shape} {op.describe(p)}: {(g != want).sum()} pixels differ"


@pytest.mark.parametrize("shape", [(40, 60), (200, 300), (33, 257), (500, 480)])
def test_dali_nearest_warp_off_the_grid_follows_the_running_sums(shape):
    """A matrix off the grid (the unrounded inverse; or a large output, where ``warp_matrix`` keeps it): the
    fallback follows DALI CPU's running float32 sums, tie for tie: each row from ``(m2 + m0 0.5) + m1 (y +
    0.5)``, in runs of ``WARP_SPAN`` columns, each from the last run's start plus ``256 m0`` (one run per row
    differed on 0.1 % of the pixels from column 256 on). 256 class ids: every pixel an edge."""
    op = T.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=8)
    mask = np.random.default_rng(list(shape)).integers(0, 256, shape).astype(np.uint8)
    params = [op.make_params(seed=5, epoch=0, position=k, image_size=shape) for k in range(8)]
    matrices = [{"m": np.linalg.inv(forward_matrix(op, p, shape))[:2].astype(np.float32)} for p in params]
    assert not any(on_grid(m["m"], shape) for m in matrices)
    if shape[0] > 400:  # warp_matrix keeps these: 1/32 of a pixel is not enough to reach the grid
        assert all(np.array_equal(warp_matrix(op, p, shape), m["m"]) for m, p in zip(matrices, params))
    got = run([mask] * len(params), warp, matrices)
    for m, g in zip(matrices, got):
        want = nearest_warp(mask, m["m"], shape, 0)
        assert np.array_equal(g, want), f"{shape}: {(g != want).sum()} pixels differ"


def test_dali_rotate_agrees_with_the_rotation_mask_geometry_but_for_rare_ties():
    """``fn.rotate`` computes its own matrix from the angle: the same geometry (centre, sign) as the
    unrounded matrix of the kernel, and at most a pixel of a few hundred thousand on ties (the graph
    uses ``fn.warp_affine`` with ``warp_matrix``)."""
    from nvidia.dali import fn, types

    op, shape = T.RandomRotation(30), (40, 60)
    mask = labels(shape)
    params = [op.make_params(seed=2, epoch=0, position=k, image_size=shape) for k in range(16)]
    got = run([mask] * len(params), lambda x, p: fn.rotate(x, angle=p["angle"], keep_size=True,
                                                            interp_type=types.INTERP_NN, fill_value=0.0), params)
    plain = [np.linalg.inv(forward_matrix(op, p, shape))[:2].astype(np.float32) for p in params]
    differ = sum(int((g != nearest_warp(mask, m, shape, 0)).sum()) for m, g in zip(plain, got))
    assert differ <= 2, differ
