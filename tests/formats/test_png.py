"""The PNG entry: every 8-bit variant indexed by its bytes and served alike by both backends; corrupt
files refused at index time with the reason (16-bit files are indexed: tests/transforms/test_window.py)."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest

from bench.formats_table import interlaced_png
from dali_backend.formats import registry
from dali_backend.index import SampleIndex
from tests.formats.backends import assert_refused_with_reasons, served_by_both
from tests.helpers import write

cv2 = pytest.importorskip("cv2")
Image = pytest.importorskip("PIL.Image")


def _pil(arr, fmt="PNG", mode=None, **kw) -> bytes:
    b = io.BytesIO()
    (arr if isinstance(arr, Image.Image) else Image.fromarray(arr, mode)).save(b, fmt, **kw)
    return b.getvalue()


def png_variants(seed: int = 0, h: int = 30, w: int = 40) -> dict[str, bytes]:
    """One PNG per 8-bit variant (gray, RGB, RGBA, gray+alpha, palette, 1-bit, interlaced)."""
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (h, w), dtype=np.uint8)
    return {
        "gray": cv2.imencode(".png", gray)[1].tobytes(),
        "rgb": cv2.imencode(".png", rgb)[1].tobytes(),
        "rgba": _pil(np.dstack([rgb, gray])),
        "gray_alpha": _pil(np.dstack([gray, gray[::-1]]), mode="LA"),
        "palette": _pil(Image.fromarray(rgb).quantize(32)),
        "one_bit": _pil(gray > 127),
        "interlaced": interlaced_png(rgb),
    }


def chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def registry_png(ihdr: bytes, idat: bytes) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def corrupt_pngs() -> dict[str, tuple[bytes, str]]:
    """Broken PNGs and the reason the index gives for each."""
    good = png_variants(1)["rgb"]
    idat = good.index(b"IDAT")
    bad_crc = bytearray(good)
    bad_crc[29] ^= 0xFF  # IHDR's CRC
    return {
        "truncated_idat.png": (good[:idat + 40], "truncated in the IDAT chunk"),
        "bad_crc.png": (bytes(bad_crc), "bad CRC in the IHDR chunk"),
        "no_iend.png": (good[:-12], "truncated (no IEND chunk"),
        "empty.png": (b"", "empty file"),
        "zero_size.png": (registry_png(bytes(8) + bytes([8, 2, 0, 0, 0]), zlib.compress(b"")), "empty size (0x0)"),
    }


@pytest.fixture
def png_tree(tmp_path):
    for label in ("a", "b"):
        for name, data in png_variants(seed=label == "b").items():
            write(tmp_path / label / f"{name}.png", data)
    write(tmp_path / "a" / "named_as.jpg", png_variants(5)["rgb"])  # the content decides, not the name
    return tmp_path


def test_every_8_bit_variant_is_indexed_with_its_size(png_tree):
    index = SampleIndex.from_folder(png_tree, progress=False)
    assert len(index) == 15 and not index.rejected
    assert set(zip(index.heights.tolist(), index.widths.tolist())) == {(30, 40)}


def test_corrupt_pngs_are_refused_at_index_time_with_the_reason(tmp_path):
    assert_refused_with_reasons(tmp_path, corrupt_pngs(), "ok.png", png_variants(2)["gray"])


def test_a_long_png_is_checked_by_its_head_and_tail():
    rng = np.random.default_rng(3)
    big = cv2.imencode(".png", rng.integers(0, 256, (300, 300, 3), dtype=np.uint8))[1].tobytes()
    assert len(big) > registry.HEAD_BYTES
    loads = []

    def load(end):
        loads.append(end)
        return big

    head = big[:registry.HEAD_BYTES]
    assert registry.check_head(head, len(big), 10**8, load, big[-2:]).ok and not loads  # headers only
    cut = big[:-100]
    res = registry.check_head(head, len(cut), 10**8, lambda end: cut, cut[-2:])
    assert "truncated in the IDAT chunk" in res.reason


def test_the_header_reads_depth_channels_and_orientation():
    v = png_variants(4)
    assert registry.read_header(v["gray"]).channels == 1 and registry.read_header(v["rgba"]).channels == 3
    assert registry.read_header(v["one_bit"]).bit_depth == 1
    assert registry.check_bytes(v["one_bit"]).bit_depth == 1 and registry.check_bytes(v["rgb"]).format == "png"
    sixteen = cv2.imencode(".png", np.zeros((5, 7, 3), np.uint16))[1].tobytes()
    assert registry.read_header(sixteen).bit_depth == 16 and registry.decoded_size(sixteen) == (5, 7)
    exif = Image.Exif()
    exif[0x0112] = 6
    turned = _pil(np.zeros((5, 7, 3), np.uint8), exif=exif.tobytes())
    assert registry.read_header(turned).orientation == 6 and registry.decoded_size(turned) == (7, 5)


@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_both_backends_serve_equal_pixels(png_tree, color):
    out = served_by_both(png_tree, color)
    assert out["torch"].shape[0] == 15
    assert np.array_equal(out["torch"], out["dali-cpu"])
    assert len({im.tobytes() for im in out["torch"]}) >= 11  # rgb = rgba = interlaced, gray = gray_alpha: no blanks


def test_verify_decode_catches_corrupt_pixel_data_the_header_check_passes(tmp_path):
    good = png_variants(6)["rgb"]
    bad = bytearray(good)
    start = good.index(b"IDAT") + 4
    bad[start + 10:start + 30] = bytes(20)  # inside IDAT: its CRC, unchecked by the header walk, now fails
    write(tmp_path / "a" / "bad.png", bytes(bad))
    write(tmp_path / "a" / "good.png", good)
    assert [r.path for r in SampleIndex.from_folder(tmp_path, progress=False).rejected] == []
    index = SampleIndex.from_folder(tmp_path, verify="decode", progress=False)
    assert list(index.paths) == ["a/good.png"]
    assert "corrupt or unsupported PNG data" in index.rejected[0].reason


def test_the_mvtec_ad_layout_indexes_by_split(tmp_path):
    """``<category>/train/good``, ``<category>/test/<defect>`` and the masks in ``ground_truth/<defect>``:
    ``split=`` picks the images; the classes are the same in both splits; the masks are not samples."""
    root = tmp_path / "bottle"
    v = png_variants(8)
    for k in range(3):
        write(root / "train" / "good" / f"{k:03d}.png", v["rgb"])
    for defect in ("good", "broken_large", "contamination"):
        write(root / "test" / defect / "000.png", v["gray"])
    for defect in ("broken_large", "contamination"):
        write(root / "ground_truth" / defect / "000_mask.png", v["one_bit"])
    train = SampleIndex.from_folder(root, split="train", progress=False)
    test = SampleIndex.from_folder(root, split="test", progress=False)
    assert train.classes == test.classes == ("broken_large", "contamination", "good")
    assert train.class_counts().tolist() == [0, 0, 3] and test.class_counts().tolist() == [1, 1, 1]
    assert not any("mask" in p for p in [*train.paths, *test.paths])
