"""16-bit sources through both loaders (issue 34): a tree mixing 12/16-bit PNG and TIFF with 8-bit PNG
variants, BMP, WebP and JPEG indexes completely and gives equal batches under a spec with a Window; without a
Window, a 16-bit file is refused with the fix on both backends (not skipped as a bad file)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest

from dali_backend import AugmentSpec, ConfigError, DaliLoader, ImageDataset, SampleIndex, Window
from dali_backend import transforms as T
from tests.formats.test_png import png_variants
from tests.helpers import KINDS, jpeg_bytes, write

tifffile = pytest.importorskip("tifffile")


def tif(a: np.ndarray, **kw) -> bytes:
    b = io.BytesIO()
    tifffile.imwrite(b, a, **kw)
    return b.getvalue()


def png(a: np.ndarray) -> bytes:
    return cv2.imencode(".png", a if a.ndim == 2 else a[:, :, ::-1])[1].tobytes()


def sixteen_bit_files(seed: int, h: int = 30, w: int = 40) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    g16, rgb16 = rng.integers(0, 65536, (h, w), dtype=np.uint16), rng.integers(0, 65536, (h, w, 3), dtype=np.uint16)
    return {"g16.png": png(g16), "rgb16.png": png(rgb16), "g12.png": png(g16 >> 4),
            "rgba16.png": cv2.imencode(".png", np.dstack([rgb16, g16]))[1].tobytes(),
            "g16.tif": tif(g16), "rgb16.tif": tif(rgb16, photometric="rgb"),
            "rgb16_deflate.tif": tif(rgb16, photometric="rgb", compression="zlib")}


@pytest.fixture(scope="module")
def mixed_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("sixteen")
    for label, seed in (("a", 0), ("b", 1)):
        for name, data in sixteen_bit_files(seed).items():
            write(root / label / name, data)
        for name, data in png_variants(seed + 5).items():
            write(root / label / f"{name}.png", data)
        write(root / label / "photo.jpg", jpeg_bytes(30, 40, seed=seed, color=True))
        rgb8 = np.random.default_rng(seed + 9).integers(0, 256, (30, 40, 3), dtype=np.uint8)
        for ext in (".bmp", ".webp"):  # lossless WebP (quality above 100)
            write(root / label / f"photo{ext}", cv2.imencode(ext, rgb8, [cv2.IMWRITE_WEBP_QUALITY, 101])[1].tobytes())
        write(root / label / "gray.bmp", cv2.imencode(".bmp", rgb8[..., 0])[1].tobytes())
    return root


def batches(index, spec, kind):
    loader = DaliLoader(ImageDataset(index, spec, seed=3), batch_size=6, shuffle=False, **KINDS[kind])
    try:
        return np.concatenate([x.numpy() for x, _ in loader])
    finally:
        loader.close()


@pytest.mark.parametrize("window", [Window(1000, 50000), Window(percentiles=(0.5, 99.5))], ids=["fixed", "percentiles"])
@pytest.mark.parametrize("color", ["gray", "rgb"])
def test_a_tree_mixing_16_and_8_bit_files_gives_equal_batches(mixed_tree, color, window):
    index = SampleIndex.from_folder(mixed_tree, progress=False)
    assert not index.rejected and len(index) == 2 * (7 + 7 + 1 + 3)
    ops = [T.RandomHorizontalFlip(), T.CenterCrop((28, 36)), window, T.Clahe(2.0, (4, 4)), T.Resize((20, 24))]
    spec = AugmentSpec(ops=([T.Grayscale()] if color == "gray" else []) + ops, dtype="uint8")
    dali, torch_ = batches(index, spec, "dali-cpu"), batches(index, spec, "torch")
    assert dali.shape == torch_.shape == (len(index), 1 if color == "gray" else 3, 20, 24)
    assert np.array_equal(dali, torch_)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_16_bit_file_without_a_window_is_refused_with_the_fix(tmp_path, kind):
    write(tmp_path / "a" / "x.png", png(np.full((16, 16), 3000, np.uint16)))
    write(tmp_path / "a" / "y.jpg", jpeg_bytes(16, 16))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    assert len(index) == 2  # 16-bit files are indexed: the spec decides
    spec = AugmentSpec(ops=[T.Clahe(), T.CenterCrop(8)], dtype="uint8")
    loader = DaliLoader(ImageDataset(index, spec, seed=0, on_error="skip"), batch_size=2, shuffle=False,
                        **KINDS[kind])
    try:
        with pytest.raises(ConfigError, match=r"x\.png: a 16-bit image, and the spec has no Window: Clahe .*add "
                                              r"Window\(low=\.\.\., high=\.\.\.\) before Clahe"):
            next(iter(loader))
    finally:
        loader.close()


def test_12_bit_data_with_a_fixed_window_uses_the_whole_8_bit_range(tmp_path):
    rng = np.random.default_rng(4)
    for k in range(3):
        write(tmp_path / "a" / f"x{k}.png", png(rng.integers(0, 4096, (24, 24), dtype=np.uint16)))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    spec = AugmentSpec(ops=[T.Grayscale(), Window(0, 4095), T.CenterCrop(24)], dtype="uint8")
    dali, torch_ = batches(index, spec, "dali-cpu"), batches(index, spec, "torch")
    assert np.array_equal(dali, torch_) and dali.max() >= 250 and len(np.unique(dali)) > 200
