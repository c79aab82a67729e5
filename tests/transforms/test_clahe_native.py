"""The compiled CLAHE kernel (``dali_backend/transforms/_clahe.c``) gives OpenCV's pixels, bit for bit.

The Clahe operation's CPU kernel for uint8 (``color.clahe_plane``) is the extension where it was built and
``cv2.createCLAHE(...).apply`` otherwise; both backends' equality rests on the two being the same. Checked
here on random sizes (the padded-tile rule, the AVX2 blocks of 8 and their scalar tails), tile grids up to
64, clip limits from below one pixel per bin to none in effect, flat, two-valued, noisy and smooth images,
row-strided views, both blend paths (``simd=False``) and threads sharing nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading

import cv2
import numpy as np
import pytest

from dali_backend.transforms import color
from dali_backend.transforms.color import Clahe, clahe_plane, cv_clahe

native = pytest.mark.skipif(color.NATIVE_CLAHE is None, reason="the CLAHE extension is not built here (no C "
                            "compiler at install time, or DALI_BACKEND_OPENCV_CLAHE=1): Clahe uses OpenCV itself")


def image(rng: np.random.Generator, h: int, w: int, kind: int) -> np.ndarray:
    if kind == 0:
        return rng.integers(0, 256, (h, w), dtype=np.uint8)
    if kind == 1:
        return np.clip(rng.normal(128, 6, (h, w)), 0, 255).astype(np.uint8)  # narrow: clipping redistributes a lot
    if kind == 2:
        return np.full((h, w), int(rng.integers(0, 256)), np.uint8)
    if kind == 3:
        return np.where(rng.random((h, w)) < 0.3, 0, 255).astype(np.uint8)
    y, x = np.mgrid[0:h, 0:w]
    return np.clip(100 + 60 * np.sin(x / 17.0) * np.cos(y / 29.0) + rng.normal(0, 4, (h, w)), 0, 255).astype(np.uint8)


def test_built_where_a_compiler_is():
    """An install with a C compiler builds the extension (setup.py); a test run there without it would check
    nothing of it, so that is a failure, not a skip."""
    if os.environ.get("DALI_BACKEND_OPENCV_CLAHE", "") not in ("", "0"):
        pytest.skip("DALI_BACKEND_OPENCV_CLAHE is set: OpenCV's CLAHE on purpose")
    if not sys.platform.startswith("linux") or shutil.which("cc") is None:
        pytest.skip("no C compiler here: the extension is optional")
    assert color.NATIVE_CLAHE is not None, ("dali_backend.transforms._clahe did not import although a C compiler is "
                                            "here: reinstall the package (pip install -e .) and read the build log")


@native
@pytest.mark.parametrize("simd", [True, False])
def test_equals_opencv_on_random_cases(simd):
    rng = np.random.default_rng(7)
    for case in range(160):
        h, w = (int(v) for v in rng.integers(1, 260, 2))
        tiles = tuple(int(v) for v in rng.integers(1, 17, 2)) if case % 4 else tuple(int(v) for v in rng.integers(1, 65, 2))
        clip = float(rng.choice([0.01, 0.5, 1.0, 2.0, 3.7, 40.0, 1e6]))
        img = image(rng, h, w, case % 5)
        out = np.empty_like(img)
        color.NATIVE_CLAHE.clahe_u8(img, out, tiles[0], tiles[1], clip, simd)
        ref = cv2.createCLAHE(clip, tiles).apply(img)
        assert np.array_equal(out, ref), (h, w, tiles, clip, case % 5, int((out != ref).sum()))


@native
@pytest.mark.parametrize("hw", [(1, 1), (1, 9), (9, 1), (480, 640), (1536, 2048), (477, 641), (64, 3000)])
def test_equals_opencv_at_preset_sizes(hw):
    rng = np.random.default_rng(list(hw))
    for kind in range(5):
        img = image(rng, *hw, kind)
        assert np.array_equal(clahe_plane(img, 2.0, (8, 8)), cv_clahe(2.0, (8, 8)).apply(img)), kind


@native
def test_strided_views():
    rng = np.random.default_rng(3)
    big = image(rng, 300, 400, 4)
    for view in (big[::2], big[10:200, 7:301], big[:, ::3], big[::-1], big[:, ::-1]):
        assert np.array_equal(clahe_plane(view, 2.0, (8, 8)), cv_clahe(2.0, (8, 8)).apply(np.ascontiguousarray(view)))


@native
def test_threads_share_nothing():
    rng = np.random.default_rng(5)
    imgs = [image(rng, 200 + k, 300 - k, k % 5) for k in range(16)]
    want = [cv_clahe(2.0, (8, 8)).apply(x) for x in imgs]
    got = [None] * len(imgs)

    def run(k0):
        for _ in range(5):
            for k in range(k0, len(imgs), 4):
                got[k] = clahe_plane(imgs[k], 2.0, (8, 8))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


@native
def test_refuses_what_it_cannot_take():
    k = color.NATIVE_CLAHE
    img = np.zeros((8, 8), np.uint8)
    with pytest.raises(ValueError, match="2-D uint8"):
        k.clahe_u8(np.zeros((8, 8), np.uint16), np.zeros((8, 8), np.uint16), 8, 8, 2.0)
    with pytest.raises(ValueError, match="2-D uint8"):
        k.clahe_u8(np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8, 3), np.uint8), 8, 8, 2.0)
    with pytest.raises(ValueError, match="same size"):
        k.clahe_u8(img, np.zeros((8, 9), np.uint8), 8, 8, 2.0)
    with pytest.raises(ValueError, match="contiguous columns"):
        k.clahe_u8(np.zeros((8, 16), np.uint8)[:, ::2], img, 8, 8, 2.0)
    with pytest.raises(ValueError, match="out of range"):
        k.clahe_u8(img, np.empty_like(img), 0, 8, 2.0)
    read_only = np.empty_like(img)
    read_only.flags.writeable = False
    with pytest.raises((BufferError, ValueError), match="read-only|not writable"):
        k.clahe_u8(img, read_only, 8, 8, 2.0)


def test_operation_equal_either_way(monkeypatch):
    """Clahe.apply on gray, RGB (per channel) and 16-bit images: the kernel where built, OpenCV without it."""
    rng = np.random.default_rng(11)
    gray, rgb = image(rng, 123, 177, 4), np.dstack([image(rng, 123, 177, k) for k in (0, 1, 4)])
    deep = rng.integers(0, 65536, (50, 70), dtype=np.uint16)
    op = Clahe(3.0, (4, 6))
    built = [op.apply(x, None) for x in (gray, rgb, deep)]
    monkeypatch.setattr(color, "NATIVE_CLAHE", None)
    opencv = [op.apply(x, None) for x in (gray, rgb, deep)]
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(built, opencv))
    assert np.array_equal(opencv[1][:, :, 2], cv2.createCLAHE(3.0, (4, 6)).apply(np.ascontiguousarray(rgb[:, :, 2])))


def test_switch_off_by_environment(monkeypatch):
    monkeypatch.setenv("DALI_BACKEND_OPENCV_CLAHE", "1")
    assert color._load_native() is None
    monkeypatch.setenv("DALI_BACKEND_OPENCV_CLAHE", "0")
    assert (color._load_native() is None) == (color.NATIVE_CLAHE is None)


@native
def test_in_place_and_overlap():
    """dst may be src itself (every tile's table is made before any pixel is written); a dst overlapping
    src otherwise would read pixels already written, so it is refused."""
    img = image(np.random.default_rng(2), 120, 90, 4)
    want = cv_clahe(2.0, (8, 8)).apply(img)
    same = img.copy()
    color.NATIVE_CLAHE.clahe_u8(same, same, 8, 8, 2.0)
    assert np.array_equal(same, want)
    big = np.zeros((121, 90), np.uint8)
    big[:120] = img
    for src, dst in ((big[:120], big[1:]), (same, same[::-1]), (big[:120, :89], big[:120, 1:])):
        with pytest.raises(ValueError, match="overlaps src"):
            color.NATIVE_CLAHE.clahe_u8(src, dst, 8, 8, 2.0)


@native
def test_clip_limits_past_int():
    """A clip limit whose pixel count passes INT_MAX (OpenCV's cast gives INT_MIN there, so a clip of 1):
    OpenCV's pixels, without the undefined conversion. (Grids past 2**23 tiles, whose table offsets pass
    an int, were checked once against OpenCV by hand: each needs a table of more than 2 GB.)"""
    img = image(np.random.default_rng(4), 64, 80, 4)
    for clip in (1e10, 1e30, float("inf")):
        color.NATIVE_CLAHE.clahe_u8(img, out := np.empty_like(img), 8, 8, clip)
        assert np.array_equal(out, cv2.createCLAHE(clip, (8, 8)).apply(img)), clip


def test_wrapper_takes_what_opencv_takes():
    """clahe_plane: tiles as any pair of integers for every dtype; a grid past the operation's 64 x 64 goes
    to OpenCV rather than being refused."""
    rng = np.random.default_rng(6)
    deep = rng.integers(0, 65536, (20, 30), dtype=np.uint16)
    assert np.array_equal(clahe_plane(deep, 2.0, [4, 4]), cv2.createCLAHE(2.0, (4, 4)).apply(deep))
    small = image(rng, 10, 10, 0)
    assert np.array_equal(clahe_plane(small, 2.0, np.array([5000, 1])), cv2.createCLAHE(2.0, (5000, 1)).apply(small))


@pytest.mark.parametrize("value, off", [("1", True), ("yes", True), ("0", False), ("false", False), (" Off ", False),
                                        ("", False)])
def test_switch_values(monkeypatch, value, off):
    monkeypatch.setenv("DALI_BACKEND_OPENCV_CLAHE", value)
    assert (color._load_native() is None) == (off or color.NATIVE_CLAHE is None)
