"""The resize kernel's cheaper arithmetic gives the same bits as the reference order of operations."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend.transforms import resample


def accumulate_reference(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """DALI's running float32 sum as first written here: ``np.add.accumulate`` over the taps."""
    return np.add.accumulate(values * w, axis=-1)[..., -1]


@pytest.mark.parametrize("taps", [1, 2, 3, 5, 12, 16, 33])
@pytest.mark.parametrize("kind", ["uint8", "float32"])
def test_the_running_sum_is_bit_identical_to_accumulate(taps, kind):
    rng = np.random.default_rng(taps)
    shape = (37, 5, taps)
    if kind == "uint8":
        values = rng.integers(0, 256, shape).astype(np.uint8)
    else:  # intermediate values of a first pass, with values near 0, 255 and ties in them
        values = (rng.random(shape) * 255).astype(np.float32)
        values.ravel()[::7] = np.float32(127.5)
    w = rng.random((37, 1, taps)).astype(np.float32)
    w /= np.add.accumulate(w, axis=-1)[..., -1:]  # weights summing to about 1, as DALI's rows do
    got, want = resample.running_sum(values, w), accumulate_reference(values, w)
    assert got.dtype == want.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


SIZES = [((240, 320), (256, 256)), ((480, 640), (256, 256)), ((1536, 2048), (256, 256)), ((480, 640), (224, 224)),
         ((37, 53), (64, 29)), ((256, 256), (255, 257)), ((100, 3), (7, 40)), ((64, 64), (32, 32)), ((31, 97), (13, 13))]


@pytest.mark.parametrize("src, dst", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
def test_fast_resize_is_the_reference_on_many_sizes(src, dst, channels):
    rng = np.random.default_rng(src[0] * 7 + dst[1])
    shape = src if channels == 1 else src + (channels,)
    smooth = rng.integers(0, 256, shape).astype(np.uint8)
    for img in (smooth, np.full(shape, 128, np.uint8), (np.indices(shape).sum(axis=0) % 2 * 255).astype(np.uint8)):
        got = resample.resize(img, *dst)
        assert np.array_equal(got, resample.resize_exact(img, *dst)), (src, dst, channels)


@pytest.mark.parametrize("src, dst", SIZES + [((1536, 2048), (224, 224)), ((20, 20), (81, 60))])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("antialias", [True, False])
def test_the_row_passes_are_the_reference_at_every_size(src, dst, channels, dtype, antialias):
    """resize_passes (DALI's arithmetic on gathered rows, what resize runs when the taps are few) gives
    resize_exact's values and rounding (ties by position) at sizes either kernel of resize would take."""
    rng = np.random.default_rng(src[1] * 5 + dst[0])
    shape = src if channels == 1 else src + (channels,)
    top = np.iinfo(dtype).max
    images = (rng.integers(0, top + 1, shape).astype(dtype), np.full(shape, top // 2 + 1, dtype),
              (np.indices(shape).sum(axis=0) % 2 * top).astype(dtype))
    for img in images:
        got = resample.resize_passes(img, *dst, antialias=antialias)
        want = resample.resize_exact(img, *dst, antialias=antialias)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want), (src, dst, channels, dtype)


def test_resize_takes_the_row_passes_when_the_taps_are_few(monkeypatch):
    """320x240 -> 256x256 (3 + 2 taps) runs resize_passes; 640x480 (5 + 4) the sparse products."""
    called = []
    real = resample.resize_passes
    monkeypatch.setattr(resample, "resize_passes", lambda *a, **k: called.append(a[0].shape) or real(*a, **k))
    for shape in ((240, 320), (480, 640)):
        resample.resize(np.zeros(shape, np.uint8), 256, 256)
    assert called == [(240, 320)]
