"""The TIFF entry: the layouts both backends read alike indexed and served equal; the others, and
broken files, refused at index time with the reason."""

from __future__ import annotations

import io

import numpy as np
import pytest

from dali_backend.formats import registry
from dali_backend.formats.tiff import rgb_to_gray
from dali_backend.index import SampleIndex
from tests.formats.backends import assert_refused_with_reasons, served_by_both
from tests.helpers import write

cv2 = pytest.importorskip("cv2")
Image = pytest.importorskip("PIL.Image")
tifffile = pytest.importorskip("tifffile")


def _pil(arr, **kw) -> bytes:
    b = io.BytesIO()
    (arr if isinstance(arr, Image.Image) else Image.fromarray(arr)).save(b, "TIFF", **kw)
    return b.getvalue()


def _tf(arr, **kw) -> bytes:
    b = io.BytesIO()
    tifffile.imwrite(b, arr, **kw)
    return b.getvalue()


def tiff_variants(seed: int = 0, h: int = 30, w: int = 40) -> dict[str, bytes]:
    """One TIFF per accepted layout."""
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (h, w), dtype=np.uint8)
    return {
        "gray": _pil(gray), "rgb": _pil(rgb), "lzw": _pil(rgb, compression="tiff_lzw"),
        "deflate": _pil(rgb, compression="tiff_deflate"), "packbits": _pil(rgb, compression="packbits"),
        "jpeg": _pil(rgb, compression="jpeg"), "tiled": _tf(rgb, tile=(32, 32), photometric="rgb"),
        "tiled_gray": _tf(gray, tile=(32, 32), photometric="minisblack"), "big_endian": _tf(rgb, byteorder=">"),
        "planar": _tf(np.moveaxis(rgb, -1, 0), planarconfig="separate", photometric="rgb"),
        "opencv_lzw": cv2.imencode(".tif", rgb)[1].tobytes(),
    }


def corrupt_tiffs() -> dict[str, tuple[bytes, str]]:
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    strips_first = _tf(rgb)  # tifffile: IFD first, pixels after it
    ifd_last = cv2.imencode(".tif", rgb)[1].tobytes()  # libtiff: pixels first, the IFD at the end
    return {
        "cut_pixels.tif": (strips_first[:-200], "strip 0 (offset"),
        "cut_ifd.tif": (ifd_last[:-40], "truncated"),
        "empty.tif": (b"", "empty file"),
        "rgba.tif": (_pil(np.dstack([rgb, rgb[..., 0]])), "alpha channel"),
        "palette.tif": (_pil(Image.fromarray(rgb).quantize(16)), "palette TIFF"),
        "one_bit.tif": (_pil(rgb[..., 0] > 127), "1-bit TIFF"),
        "sixteen_planar.tif": (_tf(np.moveaxis(rgb, 2, 0).astype(np.uint16) * 257, photometric="rgb",
                                   planarconfig="separate"), "16-bit planar TIFF"),
        "float.tif": (_tf(rgb.astype(np.float32), photometric="rgb"), "32-bit TIFF"),
        "pages.tif": (_pil(rgb, save_all=True, append_images=[Image.fromarray(rgb[::-1])]), "multi-page TIFF"),
        "small_tiles.tif": (_tf(rgb, tile=(16, 16), photometric="rgb"), "tiles of 16x16"),
    }


@pytest.fixture
def tiff_tree(tmp_path):
    for label in ("a", "b"):
        for name, data in tiff_variants(seed=label == "b").items():
            write(tmp_path / label / f"{name}.tif", data)
    write(tmp_path / "a" / "named_as.png", tiff_variants(5)["rgb"])  # the content decides
    return tmp_path


def test_every_accepted_layout_is_indexed_with_its_size(tiff_tree):
    index = SampleIndex.from_folder(tiff_tree, progress=False)
    assert not index.rejected and len(index) == 23
    assert set(zip(index.heights.tolist(), index.widths.tolist())) == {(30, 40)}


def test_refused_layouts_and_broken_files_name_the_reason(tmp_path):
    assert_refused_with_reasons(tmp_path, corrupt_tiffs(), "ok.tiff", tiff_variants(2)["gray"])


def test_an_ifd_at_the_end_of_a_long_file_is_loaded():
    rgb = np.random.default_rng(2).integers(0, 256, (200, 200, 3), dtype=np.uint8)
    data = cv2.imencode(".tif", rgb)[1].tobytes()  # libtiff: pixels first, the IFD at the end
    assert len(data) > registry.HEAD_BYTES and int.from_bytes(data[4:8], "little") > registry.HEAD_BYTES
    loads = []

    def load(end):
        loads.append(end)
        return data

    res = registry.check_head(data[:registry.HEAD_BYTES], len(data), 10**8, load, data[-2:])
    assert res.ok and (res.width, res.height) == (200, 200) and loads and res.format == "tiff"


def test_the_header_reads_orientation_and_depth():
    turned = _pil(np.zeros((5, 7, 3), np.uint8), tiffinfo={0x0112: 6})
    assert registry.read_header(turned).orientation == 6 and registry.decoded_size(turned) == (7, 5)
    assert registry.read_header(_tf(np.zeros((4, 4), np.uint16))).bit_depth == 16


def test_the_gray_conversion_is_dalis():
    rgb = np.random.default_rng(3).integers(0, 256, (300, 300, 3), dtype=np.uint8)
    cv = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    ours = rgb_to_gray(rgb)
    assert (ours != cv).any()  # OpenCV's own conversion is not DALI's: the reason the entry converts
    assert np.abs(ours.astype(int) - cv).max() == 1


@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_both_backends_serve_equal_pixels(tiff_tree, color):
    out = served_by_both(tiff_tree, color)
    assert out["torch"].shape[0] == 23
    assert np.array_equal(out["torch"], out["dali-cpu"])
