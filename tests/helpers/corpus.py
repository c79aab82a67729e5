"""A bad-input corpus generated on the fly: what real folders of JPEGs contain."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np

from tests.helpers import jpeg_bytes, set_sof_size, with_exif_orientation, write

ACCEPTED = "ok"


def _encode(img: np.ndarray, *params: int) -> bytes:
    ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90, *params])
    assert ok
    return enc.tobytes()


def _cmyk(h: int, w: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(3)
    arr = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr, mode="CMYK").save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _flip_bits(data: bytes, count: int = 6) -> bytes:
    b = bytearray(data)
    start = data.index(b"\xff\xda") + 20
    rng = np.random.default_rng(1)
    for pos in rng.integers(start, len(b) - 4, size=count):
        if b[pos] != 0xFF and b[pos - 1] != 0xFF:  # keep marker structure intact
            b[pos] ^= 1 << int(rng.integers(0, 7))
            if b[pos] == 0xFF:
                b[pos] ^= 1
    return bytes(b)


def build_corpus(root: Path) -> dict[str, str]:
    """Write the corpus under ``root/<class>/``; returns {relative path: "ok" or a reason substring}."""
    rng = np.random.default_rng(0)
    color = cv2.GaussianBlur(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), (0, 0), 2)
    gray = cv2.cvtColor(color, cv2.COLOR_BGR2GRAY)
    base = _encode(color)
    files: dict[str, tuple[bytes, str]] = {
        "good/progressive.jpg": (_encode(color, cv2.IMWRITE_JPEG_PROGRESSIVE, 1), ACCEPTED),
        "good/s444.jpg": (_encode(color, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444), ACCEPTED),
        "good/s422.jpg": (_encode(color, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422), ACCEPTED),
        "good/restart_markers.jpg": (_encode(color, cv2.IMWRITE_JPEG_RST_INTERVAL, 2), ACCEPTED),
        "good/grayscale.jpg": (_encode(gray), ACCEPTED),
        "bad/cmyk.jpg": (_cmyk(64, 48), "CMYK"),
        "good/one_by_one.jpg": (jpeg_bytes(1, 1, seed=1), ACCEPTED),
        "good/tiny_2x3.jpg": (jpeg_bytes(2, 3, seed=2, color=True), ACCEPTED),
        "good/odd_33x17.jpg": (jpeg_bytes(33, 17, seed=3), ACCEPTED),
        "good/extreme_wide.jpg": (jpeg_bytes(12, 3000, seed=4), ACCEPTED),
        "good/extreme_tall.jpg": (jpeg_bytes(3000, 12, seed=5, color=True), ACCEPTED),
        "good/trailing_bytes.jpg": (base + b"\x00TRAILER" * 50, ACCEPTED),
        "good/数据 名字 'q' \"dq\".jpg": (jpeg_bytes(40, 50, seed=6), ACCEPTED),
        "good/UPPER.JPG": (jpeg_bytes(40, 50, seed=7), ACCEPTED),
        "good/lower.jpeg": (jpeg_bytes(40, 50, seed=8), ACCEPTED),
        "good/flipped_bits.jpg": (_flip_bits(base), ACCEPTED),
        "good/png_named_jpg.jpg": (cv2.imencode(".png", gray)[1].tobytes(), ACCEPTED),  # its bytes decide: PNG
        "bad/empty.jpg": (b"", "empty file"),
        "bad/text.jpg": (b"this is a note, not a picture\n", "no JPEG signature"),
        "bad/truncated.jpg": (base[: len(base) * 2 // 3], "truncated"),
        "bad/header_only.jpg": (base[: base.index(b"\xff\xda")] + b"\xff\xd9", "header-only"),
        "bad/huge_header.jpg": (set_sof_size(base, 60000, 60000), "over the limit"),
    }
    for orientation in range(2, 9):
        files[f"good/exif_{orientation}.jpg"] = (with_exif_orientation(_encode(color[:90, :70]), orientation), ACCEPTED)
    for rel, (data, _) in files.items():
        write(root / rel, data)
    return {rel: expect for rel, (_, expect) in files.items()}

