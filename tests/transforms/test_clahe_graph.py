"""CLAHE in the DALI graph equals OpenCV's at every size, on the CPU and (by its kernel's model) on the GPU.

DALI's GPU CLAHE refuses RGB with ``luma_only=False`` and sizes its tiles by ceiling division where
OpenCV pads with reflect-101 to whole tiles; ``pipeline.clahe_like_opencv`` splits channels and pads
as OpenCV does, in one graph for both devices (loaders on CPU operators use the plain operator, which is
OpenCV's code). CI runs that graph with CPU operators; the numpy
model of the CUDA kernel (``clahe_gpu_model``) takes ``fn.clahe``'s place inside that very graph and
shows what the GPU would compute from the input the graph pads; the CUDA-marked cases check the real
GPU where there is one.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from tests.helpers.clahe_gpu_model import dali_gpu_clahe, opencv_padding
from tests.helpers import needs_cuda

SIZES = [(1536, 2048), (1234, 1624), (300, 400), (33, 257), (7, 5), (1, 1), (2, 3), (3000, 12), (12, 3000), (64, 64),
         (65, 9)]
TILES = [(8, 8), (5, 3)]
DEVICES = ["cpu", pytest.param("gpu", marks=[pytest.mark.cuda, needs_cuda])]


def texture(h: int, w: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([seed, h, w])
    y, x = np.mgrid[0:h, 0:w]
    planes = [np.clip(120 + 40 * np.sin(x / (37.0 + 9 * c)) + 30 * np.cos(y / 23.0) + rng.normal(0, 10, (h, w)), 0, 255)
              for c in range(channels)]
    return np.stack(planes, axis=-1).astype(np.uint8)


def tile_pixels(h: int, w: int, tiles) -> int:
    """Pixels per tile of the padded image OpenCV equalises."""
    py, px = opencv_padding(h, w, *tiles)
    return ((h + py) // tiles[1]) * ((w + px) // tiles[0])


def within_one_level(got: np.ndarray, want: np.ndarray, tiles) -> None:
    """The CUDA kernel rounds its tables half up where OpenCV rounds to even: 1 level at most, and rare
    (mean < 0.15) except on tiles of a few pixels, where ties are common (the kernel's model: mean 0.2-0.27
    on 7x5 with tiles (5, 3), 6 pixels per tile)."""
    diff = np.abs(got.astype(int) - want.astype(int))
    h, w = want.shape[:2]
    assert diff.max() <= 1, f"{want.shape}: max {diff.max()}"
    if tile_pixels(h, w, tiles) >= 16:
        assert diff.mean() < 0.15, f"{want.shape}: mean {diff.mean():.4f}"


def opencv_clahe(img: np.ndarray, tiles, clip: float = 2.0) -> np.ndarray:
    cl = cv2.createCLAHE(clip, tuple(tiles))
    return np.stack([cl.apply(np.ascontiguousarray(img[..., c])) for c in range(img.shape[-1])], axis=-1)


def run_graph(images: list[np.ndarray], build, device: str) -> list[np.ndarray]:
    """Outputs of ``build(images_node, h_node, w_node)`` for each image (HWC uint8), batch of all."""
    import nvidia.dali as dali
    from nvidia.dali import fn, types

    @dali.pipeline_def(batch_size=len(images), num_threads=2, device_id=0 if device == "gpu" else None,
                       enable_conditionals=True, exec_dynamic=True)
    def pipe():
        x = fn.external_source(source=lambda: images, layout="HWC", dtype=types.UINT8)
        hw = fn.external_source(source=lambda: [np.array(im.shape[:2], np.int32) for im in images], dtype=types.INT32)
        if device == "gpu":
            x = x.gpu()
        return build(x, hw[0], hw[1])

    p = pipe()
    p.build()
    (out,) = p.run()
    if device == "gpu":
        out = out.as_cpu()
    return [np.array(out[i]) for i in range(len(images))]


@pytest.mark.parametrize("tiles", TILES)
def test_padding_is_opencv_reflect101_with_its_rule(tiles):
    from dali_backend.transforms.clahe_graph import _reflect101_extend

    tx, ty = tiles
    images = [texture(h, w, 1, seed=1) for h, w in SIZES if (h % ty or w % tx) and h * w < 1e6]

    def build(x, h, w):
        x = _reflect101_extend(x, h, ty - h % ty, ty, axis=0)
        return _reflect101_extend(x, w, tx - w % tx, tx, axis=1)

    for img, got in zip(images, run_graph(images, build, "cpu"), strict=True):
        py, px = opencv_padding(*img.shape[:2], tx, ty)
        want = cv2.copyMakeBorder(img[..., 0], 0, py, 0, px, cv2.BORDER_REFLECT_101)
        np.testing.assert_array_equal(got[..., 0], want, err_msg=f"{img.shape[:2]}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("tiles", TILES)
def test_graph_clahe_equals_opencv_at_every_size(device, channels, tiles):
    from dali_backend.transforms.clahe_graph import clahe_like_opencv

    images = [texture(h, w, channels, seed=2) for h, w in SIZES]
    outs = run_graph(images, lambda x, h, w: clahe_like_opencv(x, h, w, tiles, 2.0, channels, portable=True), device)
    for img, got in zip(images, outs, strict=True):
        want = opencv_clahe(img, tiles)
        assert got.shape == want.shape
        diff = np.abs(got.astype(int) - want.astype(int))
        if device == "cpu":  # DALI's CPU kernel is OpenCV's: exact
            assert diff.max() == 0, f"{img.shape}: max {diff.max()}"
        else:  # the CUDA kernel rounds its tables half up (OpenCV: to even): 1 level at most, rare but for tiny tiles
            within_one_level(got, want, tiles)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("tiles", TILES)
def test_on_cpu_operators_the_clahe_op_is_the_plain_operator_and_equals_opencv_at_every_size(channels, tiles):
    """``Clahe.dali`` on CPU operators skips the portable graph: DALI's CPU kernel is OpenCV's code, so
    the plain operator is exact at uneven sizes and for 3 channels too."""
    from dali_backend.transforms import Clahe
    from dali_backend.transforms.base import GraphContext

    names = []

    def build(x, h, w):
        out = Clahe(2.0, tiles).dali(x, {}, GraphContext(gpu=False, channels=channels, hw=(h, w)))
        names.append(out.name)
        return out

    images = [texture(h, w, channels, seed=3) for h, w in SIZES]
    for img, got in zip(images, run_graph(images, build, "cpu"), strict=True):
        np.testing.assert_array_equal(got, opencv_clahe(img, tiles).reshape(got.shape), err_msg=f"{img.shape}")
    assert names and all(n.startswith("__Clahe") for n in names), names  # fn.clahe itself, no split, pad or crop


def test_the_portable_graph_is_not_the_plain_operator():
    from dali_backend.transforms.clahe_graph import clahe_like_opencv

    names = []

    def build(x, h, w):
        out = clahe_like_opencv(x, h, w, (8, 8), 2.0, 3, portable=True)
        names.append(out.name)
        return out

    run_graph([texture(33, 257, 3, seed=4)], build, "cpu")
    assert not names[0].startswith("__Clahe")


@pytest.fixture
def gpu_kernel_model(monkeypatch):
    """``fn.clahe`` replaced by the numpy model of DALI's CUDA kernel (``fn.python_function``, one channel):
    the product's graph around it (padding, per-channel split, crop, the conditional) runs as it is, on
    CPU operators, and the model computes what the GPU kernel would from the very pixels the graph gives
    it. Returns the list of the padded inputs' shapes the model saw."""
    from nvidia.dali import fn

    seen = []

    def model(x, tiles_x, tiles_y, clip_limit, luma_only):
        assert luma_only is False

        def kernel(a):
            a = np.asarray(a)
            assert a.shape[2] == 1, "the GPU kernel equalises one channel at a time here"
            seen.append(a.shape[:2])
            return dali_gpu_clahe(a[..., 0], tiles_x, tiles_y, clip_limit)[..., None]

        return fn.python_function(x, function=kernel, output_layouts="HWC")

    monkeypatch.setattr(fn, "clahe", model)
    return seen


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("tiles", TILES)
def test_gpu_kernel_model_in_the_products_padded_graph_is_within_one_level(gpu_kernel_model, tiles, channels):
    """``clahe_like_opencv(portable=True)``, the graph the GPU runs, with the kernel's model in place of the
    kernel: within 1 level of OpenCV at every size (the kernel rounds its tables half up, OpenCV to even),
    because the graph pads to whole tiles exactly as OpenCV does."""
    from dali_backend.transforms.clahe_graph import clahe_like_opencv

    tx, ty = tiles
    images = [texture(h, w, channels, seed=7) for h, w in SIZES if h * w < 1e6]
    outs = run_graph(images, lambda x, h, w: clahe_like_opencv(x, h, w, tiles, 2.0, channels, portable=True), "cpu")
    for img, got in zip(images, outs, strict=True):
        want = opencv_clahe(img, tiles)
        assert got.shape == want.shape
        within_one_level(got, want, tiles)
    padded = {(h + opencv_padding(h, w, tx, ty)[0], w + opencv_padding(h, w, tx, ty)[1]) for h, w in SIZES if h * w < 1e6}
    assert padded <= set(gpu_kernel_model), "the model saw OpenCV's padded sizes"  # the padding ran, as OpenCV's rule


@pytest.mark.parametrize("h, w", [(33, 257), (7, 5), (300, 400), (3000, 12)])
def test_gpu_kernel_model_without_the_products_padding_differs(gpu_kernel_model, h, w):
    """The fault the padding removes: the plain operator (``portable=False``, what CPU operators run) with
    the CUDA kernel's model leaves trailing tiles empty (black edges) where the size is not whole tiles.
    So the GPU must take the padded graph, which the GPU placement chooses by default."""
    from dali_backend.transforms.clahe_graph import clahe_like_opencv

    img = texture(h, w, 1, seed=8)
    (got,) = run_graph([img], lambda x, hh, ww: clahe_like_opencv(x, hh, ww, (8, 8), 2.0, 1, portable=False), "cpu")
    assert set(gpu_kernel_model) == {(h, w)}  # unpadded
    diff = np.abs(got[..., 0].astype(int) - cv2.createCLAHE(2.0, (8, 8)).apply(img[..., 0]).astype(int))
    assert diff.mean() > 1.0


@pytest.mark.cuda
@needs_cuda
def test_gpu_refuses_rgb_per_channel_clahe_directly():
    """Why the graph splits channels: DALI's GPU CLAHE needs luma_only=True for 3 channels."""
    from nvidia.dali import fn

    with pytest.raises(RuntimeError, match="luma_only"):
        run_graph([texture(64, 64, 3)], lambda x, h, w: fn.clahe(x, tiles_x=8, tiles_y=8, clip_limit=2.0,
                                                                 luma_only=False), "gpu")


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("tiles", TILES)
@pytest.mark.parametrize("h, w", [(30, 20), (33, 257), (7, 5), (1, 1), (65, 9), (64, 64)])
def test_portable_graph_with_static_sizes_equals_opencv(h, w, tiles, channels):
    """After a fixed-size operation the graph's sizes are Python ints (no per-sample nodes): the padded
    graph then does its size arithmetic in Python (DALI refuses ``math.min`` of two constants)."""
    from dali_backend.transforms.clahe_graph import clahe_like_opencv

    images = [texture(h, w, channels, seed=s) for s in (5, 6)]
    outs = run_graph(images, lambda x, _h, _w: clahe_like_opencv(x, h, w, tiles, 2.0, channels, portable=True), "cpu")
    for img, got in zip(images, outs, strict=True):
        np.testing.assert_array_equal(got, opencv_clahe(img, tiles).reshape(got.shape), err_msg=f"{img.shape}")
