"""verify="decode": what only a full decode can see, and what it must still accept."""

from __future__ import annotations

import cv2
import numpy as np

from tests.helpers import jpeg_bytes, write
from tests.helpers.corpus import ACCEPTED, build_corpus
from dali_backend import SampleIndex
from dali_backend.formats.jpeg import check_jpeg_bytes


def half_blank(data: bytes, keep: float = 0.75) -> bytes:
    """``data`` with its scan cut at ``keep`` of its length and re-terminated by an EOI marker."""
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    end = data.rindex(b"\xff\xd9")
    cut = start + int((end - start) * keep)
    if data[cut - 1] == 0xFF:  # never split a stuffed 0xFF 0x00 pair
        cut -= 1
    return data[:cut] + b"\xff\xd9"


def test_half_blank_file_is_caught_only_by_decode(tmp_path):
    good = jpeg_bytes(h=64, w=64, seed=1)
    bad = half_blank(good)
    # OpenCV decodes it (with a libjpeg warning on stderr) and the bottom comes out flat grey.
    img = cv2.imdecode(np.frombuffer(bad, np.uint8), cv2.IMREAD_GRAYSCALE)
    assert img is not None and img[-8:].std() == 0
    write(tmp_path / "a" / "ok.jpg", good)
    write(tmp_path / "a" / "half_blank.jpg", bad)
    assert check_jpeg_bytes(bad).ok
    header = SampleIndex.from_folder(tmp_path, verify="header", progress=False)
    assert len(header) == 2  # header verification cannot see it (documented)
    decoded = SampleIndex.from_folder(tmp_path, verify="decode", progress=False)
    assert list(decoded.paths) == ["a/ok.jpg"]
    (rej,) = decoded.rejected
    assert rej.path == "a/half_blank.jpg"
    assert rej.reason.startswith("corrupt or truncated scan data: ") and "premature end" in rej.reason.lower()


def test_decode_accepts_every_good_corpus_file(tmp_path):
    expected = build_corpus(tmp_path)
    index = SampleIndex.from_folder(tmp_path, verify="decode", progress=False)
    accepted = {p for p, e in expected.items() if e == ACCEPTED}
    # flipped_bits passes the header check but its entropy data is corrupt: decode-verification says so
    assert set(index.paths) == accepted - {"good/flipped_bits.jpg"}
    reasons = {r.path: r.reason for r in index.rejected}
    assert reasons["good/flipped_bits.jpg"].startswith("corrupt or truncated scan data: Corrupt JPEG data")
    for path, expect in expected.items():
        if expect != ACCEPTED:
            assert expect in reasons[path], (path, reasons[path])


def test_decode_falls_back_to_opencv_for_layouts_turbojpeg_refuses(tmp_path, monkeypatch):
    import simplejpeg

    def refuse(data, **kwargs):
        raise ValueError("tjDecompressHeader3(): Could not determine subsampling level of JPEG image")

    monkeypatch.setattr(simplejpeg, "decode_jpeg", refuse)
    write(tmp_path / "a" / "ok.jpg", jpeg_bytes(seed=2))
    index = SampleIndex.from_folder(tmp_path, verify="decode", progress=False)
    assert len(index) == 1 and not index.rejected
