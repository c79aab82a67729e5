"""The BMP and WebP entries: variants indexed and served equal by both backends; broken files refused
at index time with the reason."""

from __future__ import annotations

import io

import numpy as np
import pytest

from dali_backend.formats import registry
from dali_backend.index import SampleIndex
from tests.formats.backends import assert_refused_with_reasons, served_by_both
from tests.helpers import write

cv2 = pytest.importorskip("cv2")
Image = pytest.importorskip("PIL.Image")


def _pil(arr, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    (arr if isinstance(arr, Image.Image) else Image.fromarray(arr)).save(b, fmt, **kw)
    return b.getvalue()


def variants(seed: int = 0, h: int = 30, w: int = 40) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (h, w), dtype=np.uint8)
    rgba = np.dstack([rgb, gray])
    return {
        "rgb.bmp": cv2.imencode(".bmp", rgb)[1].tobytes(), "gray.bmp": cv2.imencode(".bmp", gray)[1].tobytes(),
        "one_bit.bmp": _pil(gray > 127, "BMP"), "palette.bmp": _pil(Image.fromarray(rgb).quantize(16), "BMP"),
        "rgba.bmp": _pil(rgba, "BMP"), "top_down.bmp": _top_down(cv2.imencode(".bmp", rgb)[1].tobytes()),
        "lossless.webp": cv2.imencode(".webp", rgb, [cv2.IMWRITE_WEBP_QUALITY, 101])[1].tobytes(),
        "lossy.webp": cv2.imencode(".webp", rgb, [cv2.IMWRITE_WEBP_QUALITY, 80])[1].tobytes(),
        "alpha_lossless.webp": _pil(rgba, "WEBP", lossless=True), "alpha_lossy.webp": _pil(rgba, "WEBP", quality=80),
    }


def _top_down(bottom_up: bytes) -> bytes:
    """The same 24-bit BMP stored top-down (negative height, rows reversed)."""
    offset, width, height = (int.from_bytes(bottom_up[a:b], "little") for a, b in ((10, 14), (18, 22), (22, 26)))
    stride = (width * 3 + 3) // 4 * 4
    rows = [bottom_up[offset + k * stride: offset + (k + 1) * stride] for k in range(height)]
    return bottom_up[:22] + (-height).to_bytes(4, "little", signed=True) + bottom_up[26:offset] + b"".join(rows[::-1])


def corrupt() -> dict[str, tuple[bytes, str]]:
    good = variants(1)
    bmp, webp = good["rgb.bmp"], good["lossless.webp"]
    zero = bytearray(bmp)
    zero[18:22] = bytes(4)
    wrong_riff = bytearray(webp)
    wrong_riff[4:8] = (len(webp) + 100).to_bytes(4, "little")
    return {
        "cut.bmp": (bmp[:-50], "truncated: the BMP header says"),
        "zero_size.bmp": (bytes(zero), "empty size (0x30)"),
        "empty.bmp": (b"", "empty file"),
        "header_only.bmp": (bmp[:20], "truncated in the BMP headers"),
        "wrong_riff.webp": (bytes(wrong_riff), "wrong RIFF size"),
        "cut.webp": (webp[:-30], "truncated"),
        "wave.webp": (b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + bytes(28), "RIFF data, not WebP"),
        "no_bitstream.webp": (b"RIFF" + (4).to_bytes(4, "little") + b"WEBP", "no VP8/VP8L/VP8X header"),
    }


@pytest.fixture
def tree(tmp_path):
    for label in ("a", "b"):
        for name, data in variants(seed=label == "b").items():
            write(tmp_path / label / name, data)
    return tmp_path


def test_every_variant_is_indexed_with_its_size(tree):
    index = SampleIndex.from_folder(tree, progress=False)
    assert not index.rejected and len(index) == 20
    assert set(zip(index.heights.tolist(), index.widths.tolist())) == {(30, 40)}


def test_broken_files_name_the_reason(tmp_path):
    assert_refused_with_reasons(tmp_path, corrupt(), "ok.bmp", variants(2)["gray.bmp"])


def test_headers_read_channels_and_orientation():
    v = variants(3)
    assert registry.read_header(v["gray.bmp"]).channels == 1 and registry.read_header(v["rgb.bmp"]).channels == 3
    assert registry.read_header(v["top_down.bmp"]).height == 30
    exif = Image.Exif()
    exif[0x0112] = 8
    turned = _pil(np.zeros((5, 7, 3), np.uint8), "WEBP", lossless=True, exif=exif.tobytes())
    assert registry.read_header(turned).orientation == 8 and registry.decoded_size(turned) == (7, 5)


@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_both_backends_serve_equal_pixels(tree, color):
    out = served_by_both(tree, color)
    assert out["torch"].shape[0] == 20
    assert np.array_equal(out["torch"], out["dali-cpu"])
