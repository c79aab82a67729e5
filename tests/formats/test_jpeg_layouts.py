"""JPEG layouts the two decoders could read differently (issue 18, items 3 and 8).

EXIF placement and repetition, frame types and sample precisions: every layout accepted at indexing
decodes to identical pixels in DALI's CPU decoder (``fn.decoders.image``) and ``cv2.imdecode``, in
gray and in colour, with :func:`decoded_size` equal to the decoded shape; every other one is refused
at indexing with a reason naming what is wrong, and the run-time reader refuses a file edited into
such a layout after indexing. The tests also pin what the decoders do (measured with DALI 2.4 and
OpenCV 5.0), so a decoder upgrade that changes it shows up here.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.helpers import jpeg_bytes, with_exif_orientation, write
from dali_backend import AugmentSpec, BadImageError, SampleIndex, WeightedSampler
from dali_backend.index import decode_check
from dali_backend.formats.jpeg import check_jpeg_bytes, decoded_size, header_refusal
from dali_backend.core.reading import SampleReader

COLORS = ["gray", "rgb"]
DISAGREE = "two EXIF segments with different orientations: decoders disagree"


# ----------------------------------------------------------------------------------- builders
def exif_segment(orientation: int | None, order: str = "II") -> bytes:
    """An APP1 Exif segment whose IFD0 holds an orientation tag (a make tag when ``orientation`` is None)."""
    bo = "little" if order == "II" else "big"
    tag, typ, count, value = ((0x010F, 2, 4, b"cam\x00") if orientation is None
                              else (0x0112, 3, 1, orientation.to_bytes(2, bo) + b"\x00\x00"))
    tiff = (order.encode() + (42).to_bytes(2, bo) + (8).to_bytes(4, bo) + (1).to_bytes(2, bo) + tag.to_bytes(2, bo)
            + typ.to_bytes(2, bo) + count.to_bytes(4, bo) + value + (0).to_bytes(4, bo))
    payload = b"Exif\x00\x00" + tiff
    return b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload


def app_segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """``(marker, start, end)`` of each segment up to and including the first start-of-scan header."""
    pos, found = 2, []
    while True:
        marker, end = data[pos + 1], pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
        found.append((marker, pos, end))
        if marker == 0xDA:
            return found
        pos = end


def insert_after(data: bytes, marker: int, segment: bytes) -> bytes:
    """``data`` with ``segment`` inserted after its first ``marker`` segment."""
    end = next(e for m, _, e in segments(data) if m == marker)
    return data[:end] + segment + data[end:]


def insert_before(data: bytes, marker: int, segment: bytes) -> bytes:
    """``data`` with ``segment`` inserted before its first ``marker`` segment."""
    start = next(s for m, s, _ in segments(data) if m == marker)
    return data[:start] + segment + data[start:]


def set_frame(data: bytes, marker: int, precision: int = 8) -> bytes:
    """``data`` with its frame header relabelled as SOFn ``marker`` of ``precision`` bits (same scan data)."""
    start = next(s for m, s, _ in segments(data) if m in (0xC0, 0xC1, 0xC2))
    b = bytearray(data)
    b[start + 1], b[start + 4] = marker, precision
    return bytes(b)


class _Bits:
    """An entropy-coded segment writer: MSB first, 0xFF stuffed, padded with 1 bits."""

    def __init__(self):
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, value: int, n: int) -> None:
        self.acc, self.n = (self.acc << n) | (value & ((1 << n) - 1)), self.n + n
        while self.n >= 8:
            self.n -= 8
            byte = (self.acc >> self.n) & 0xFF
            self.out += b"\xff\x00" if byte == 0xFF else bytes([byte])
        self.acc &= (1 << self.n) - 1

    def flush(self) -> bytes:
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)
        return bytes(self.out)


def lossless_jpeg(img: np.ndarray, precision: int = 8) -> bytes:
    """A lossless (SOF3) JPEG of ``img`` (HxW or HxWxC, values below ``2**precision``), predictor 1.

    One Huffman table gives each of the 17 difference categories a 5-bit code (ITU T.81 annex H).
    """
    img = img.astype(np.int64).reshape(img.shape[0], img.shape[1], -1)
    h, w, nc = img.shape
    sof = bytes([precision]) + h.to_bytes(2, "big") + w.to_bytes(2, "big") + bytes([nc])
    sof += b"".join(bytes([c + 1, 0x11, 0]) for c in range(nc))
    dht = bytes([0x00, 0, 0, 0, 0, 17] + [0] * 11) + bytes(range(17))
    sos = bytes([nc]) + b"".join(bytes([c + 1, 0x00]) for c in range(nc)) + bytes([1, 0, 0])
    bits = _Bits()
    for y in range(h):
        for x in range(w):
            for c in range(nc):
                pred = (1 << (precision - 1) if y == 0 else img[y - 1, 0, c]) if x == 0 else img[y, x - 1, c]
                diff = (int(img[y, x, c]) - int(pred)) % 65536
                diff = diff - 65536 if diff > 32768 else diff
                category = 16 if diff == 32768 else abs(diff).bit_length()
                bits.put(category, 5)
                if 0 < category < 16:
                    bits.put(diff if diff > 0 else diff - 1, category)
    return (b"\xff\xd8" + app_segment(0xC4, dht) + app_segment(0xC3, sof) + app_segment(0xDA, sos) + bits.flush()
            + b"\xff\xd9")


def smooth(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur(rng.integers(0, 256, shape).astype(np.uint8), (0, 0), 1.0)


# ----------------------------------------------------------------------------------- decoders
def cv_decode(data: bytes, color: str) -> np.ndarray | None:
    """cv2.imdecode as the fallback calls it: HxW gray or HxWx3 RGB; None when it refuses the data."""
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE if color == "gray" else cv2.IMREAD_COLOR)
    return img if img is None or color == "gray" else cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def dali_decode(datas: list[bytes], color: str) -> list[np.ndarray]:
    """DALI's CPU decoder on ``datas`` (one batch, as the loader's pipeline decodes); HxW or HxWx3."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def, types

    arrays = [np.frombuffer(d, np.uint8) for d in datas]

    @pipeline_def(batch_size=len(arrays), num_threads=1, device_id=None)
    def pipe():
        jpegs = fn.external_source(source=lambda: arrays, batch=True)
        return fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY if color == "gray" else types.RGB)

    p = pipe()
    p.build()
    out = p.run()[0]
    return [np.array(out[k]).squeeze(-1) if color == "gray" else np.array(out[k]) for k in range(len(arrays))]


def dali_refuses(data: bytes, color: str) -> bool:
    try:
        dali_decode([data], color)
    except RuntimeError:
        return True
    return False


def index_of(tmp_path: Path, files: dict[str, bytes], verify: str = "header") -> SampleIndex:
    for name, data in files.items():
        write(tmp_path / "a" / f"{name}.jpg", data)
    return SampleIndex.from_folder(tmp_path, verify=verify, progress=False)


# ----------------------------------------------------------------------------------- EXIF layouts
BASE = jpeg_bytes(40, 64, seed=3, color=True)  # not square: a 90-degree orientation changes the shape
PROGRESSIVE = cv2.imencode(".jpg", cv2.imdecode(np.frombuffer(BASE, np.uint8), cv2.IMREAD_COLOR),
                           [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes()


def _between_scans(data: bytes, segment: bytes) -> bytes:
    """``segment`` inserted before the second scan's tables of a progressive JPEG (after the first scan)."""
    first_scan = next(e for m, _, e in segments(data) if m == 0xDA)
    at = min(i for i in (data.find(b"\xff\xc4", first_scan), data.find(b"\xff\xda", first_scan)) if i > 0)
    return data[:at] + segment + data[at:]


# name: (bytes, orientation both decoders apply)
ACCEPTED = {
    "exif_first": (with_exif_orientation(BASE, 6), 6),  # before the JFIF APP0
    "exif_before_sof": (insert_after(BASE, 0xE0, exif_segment(6)), 6),
    "exif_after_sof": (insert_after(BASE, 0xC0, exif_segment(6)), 6),
    "exif_after_sof_big_endian": (insert_after(BASE, 0xC0, exif_segment(8, "MM")), 8),
    "exif_just_before_scan": (insert_before(BASE, 0xDA, exif_segment(5)), 5),
    "exif_in_a_later_app1": (insert_after(BASE, 0xE0, app_segment(0xE2, b"ICC_PROFILE\x00\x01\x01")
                                          + app_segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00<x/>")
                                          + exif_segment(7)), 7),
    "two_agreeing": (insert_after(BASE, 0xE0, exif_segment(6) + exif_segment(6)), 6),
    "two_agreeing_across_sof": (insert_after(insert_after(BASE, 0xE0, exif_segment(8)), 0xC0, exif_segment(8)), 8),
    "tagless_exif_then_exif": (insert_after(BASE, 0xE0, exif_segment(None) + exif_segment(6)), 6),
    "exif_then_tagless_exif": (insert_after(BASE, 0xE0, exif_segment(6) + exif_segment(None)), 6),
    "invalid_then_one": (insert_after(BASE, 0xE0, exif_segment(0) + exif_segment(1)), 1),
    "exif_after_first_scan": (_between_scans(PROGRESSIVE, exif_segment(6)), 1),  # read by neither decoder
    "exif_after_eoi": (BASE + exif_segment(6), 1),
}
# name: (bytes, orientation OpenCV applies, orientation DALI applies)
DISAGREEING = {
    "one_then_six": (insert_after(BASE, 0xE0, exif_segment(1) + exif_segment(6)), 1, 6),
    "six_then_one": (insert_after(BASE, 0xE0, exif_segment(6) + exif_segment(1)), 6, 1),
    "six_before_sof_one_after": (insert_after(insert_after(BASE, 0xE0, exif_segment(6)), 0xC0, exif_segment(1)), 6, 1),
    "invalid_then_six": (insert_after(BASE, 0xE0, exif_segment(0) + exif_segment(6)), 1, 6),
}


def turned(orientation: int) -> tuple[int, int]:
    return (64, 40) if orientation >= 5 else (40, 64)


@pytest.mark.parametrize("color", COLORS)
def test_accepted_exif_layouts_decode_alike_at_the_size_decoded_size_says(tmp_path, color):
    index = index_of(tmp_path, {name: data for name, (data, _) in ACCEPTED.items()}, verify="decode")
    assert not index.rejected and len(index) == len(ACCEPTED)
    datas = [data for data, _ in ACCEPTED.values()]
    for (name, (data, orientation)), dali in zip(ACCEPTED.items(), dali_decode(datas, color), strict=True):
        ref = cv_decode(data, color)
        assert dali.shape[:2] == turned(orientation), name
        np.testing.assert_array_equal(dali, ref, err_msg=name)
        assert decoded_size(data) == dali.shape[:2], name
        assert header_refusal(data) is None, name


@pytest.mark.parametrize("verify", ["header", "decode"])
def test_disagreeing_exif_segments_are_refused_naming_the_file(tmp_path, verify):
    index = index_of(tmp_path, {"ok": BASE, **{name: data for name, (data, _, _) in DISAGREEING.items()}}, verify)
    assert list(index.paths) == ["a/ok.jpg"]
    reasons = {r.path: r.reason for r in index.rejected}
    assert set(reasons) == {f"a/{name}.jpg" for name in DISAGREEING}
    for reason in reasons.values():
        assert reason.startswith(DISAGREE) and "OpenCV applies the first" in reason, reason
    assert "orientation 6, then 1" in reasons["a/six_then_one.jpg"]


def test_disagreeing_exif_segments_really_decode_differently():
    """What the refusal rests on: OpenCV applies the first orientation tag, DALI the last."""
    datas = [data for data, _, _ in DISAGREEING.values()]
    for (name, (data, first, last)), dali in zip(DISAGREEING.items(), dali_decode(datas, "rgb"), strict=True):
        assert cv_decode(data, "rgb").shape[:2] == turned(first), name
        assert dali.shape[:2] == turned(last), name


def test_exif_after_the_frame_header_crops_alike_end_to_end(tmp_path):
    """RandomResizedCrop draws its window from decoded_size: with the EXIF segment after SOF it must
    see the turned size, or DALI's region decode gets a window outside the image."""
    from bench.equivalence import compare_end_to_end
    from dali_backend.transforms import RandomResizedCrop
    from fallback import ImageDataset

    for k in range(6):
        img = smooth((40 + 8 * k, 72, 3), seed=k)
        data = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
        write(tmp_path / "a" / f"{k}.jpg", insert_after(data, 0xC0, exif_segment(6 if k % 2 else 8)))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    ds = ImageDataset(index, AugmentSpec(ops=[RandomResizedCrop(24, scale=(0.5, 1.0))], color="rgb"), seed=1)
    stats = compare_end_to_end(ds, WeightedSampler(index, num_samples=24, seed=0))
    assert stats["labels_equal"] and stats["max"] <= 1, stats


def _in_place(path: Path, old: bytes, new: bytes) -> None:
    """Replace the only occurrence of ``old`` in the file by ``new``, of the same length."""
    data = path.read_bytes()
    assert len(old) == len(new) and data.count(old) == 1
    path.write_bytes(data.replace(old, new))


def test_reader_refuses_a_file_edited_in_place_into_a_refused_layout(tmp_path):
    two_sixes = insert_after(BASE, 0xE0, exif_segment(6) + exif_segment(6, "MM"))
    index = index_of(tmp_path, {"exif": two_sixes, "frame": BASE, "ok": jpeg_bytes(seed=1)})
    assert len(index) == 3 and not index.rejected
    _in_place(tmp_path / "a" / "exif.jpg", exif_segment(6, "MM"), exif_segment(1, "MM"))
    sof = BASE[next(s for m, s, _ in segments(BASE) if m == 0xC0):][:5]
    _in_place(tmp_path / "a" / "frame.jpg", sof, b"\xff\xc1" + sof[2:4] + b"\x0c")  # 12-bit SOF1
    reader = SampleReader.for_index(index, seed=0)
    for name, reason in (("exif", DISAGREE), ("frame", "12-bit precision")):
        i = list(index.paths).index(f"a/{name}.jpg")
        with pytest.raises(BadImageError, match=rf"a/{name}\.jpg: {reason}") as e:
            reader.read(i, epoch=0)
        assert e.value.path == str(tmp_path / "a" / f"{name}.jpg") and e.value.index == i
    assert reader.read(list(index.paths).index("a/ok.jpg")).size > 0


def test_dali_loader_raises_naming_a_file_edited_into_a_refused_layout(tmp_path):
    from dali_backend import DaliLoader
    from fallback import ImageDataset

    files = {f"{k}": with_exif_orientation(jpeg_bytes(seed=k), 1) for k in range(5)}
    files["3"] = insert_after(jpeg_bytes(seed=3), 0xE0, exif_segment(6) + exif_segment(6, "MM"))
    index = index_of(tmp_path, files)
    _in_place(tmp_path / "a" / "3.jpg", exif_segment(6, "MM"), exif_segment(1, "MM"))
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, device="cpu", backend="dali")
    try:
        with pytest.raises(BadImageError, match=rf"a/3\.jpg: {DISAGREE}"):
            list(loader)
    finally:
        loader.close()


# ----------------------------------------------------------------------------------- frame types, precision
GRAY_SMALL, COLOR_SMALL = smooth((12, 16)), smooth((12, 16, 3), seed=1)
GRAY_JPEG = jpeg_bytes(24, 32, seed=1)
# name: (bytes, reason substring)
REFUSED_FRAMES = {
    "sof1_12bit": (set_frame(BASE, 0xC1, 12), "12-bit precision (extended sequential JPEG, SOF1)"),
    "sof0_12bit": (set_frame(GRAY_JPEG, 0xC0, 12), "12-bit precision (baseline JPEG, SOF0)"),
    "progressive_12bit": (set_frame(PROGRESSIVE, 0xC2, 12), "12-bit precision (progressive JPEG, SOF2)"),
    "lossless_gray_8bit": (lossless_jpeg(GRAY_SMALL), "lossless JPEG (SOF3) is not supported by the decoders: "
                           "they read a 1-component lossless file as gray only"),
    "lossless_rgb_8bit": (lossless_jpeg(COLOR_SMALL), "lossless JPEG (SOF3) is not supported by the decoders: "
                          "they read a 3-component lossless file as RGB only"),
    "lossless_gray_12bit": (lossless_jpeg(GRAY_SMALL * np.int64(16), 12), "12-bit precision (lossless JPEG, SOF3)"),
    "lossless_gray_16bit": (lossless_jpeg(GRAY_SMALL * np.int64(257), 16), "16-bit precision (lossless JPEG, SOF3)"),
    "lossless_rgb_16bit": (lossless_jpeg(COLOR_SMALL * np.int64(257), 16), "16-bit precision (lossless JPEG, SOF3)"),
    "lossless_two_components": (lossless_jpeg(smooth((8, 8, 2))), "2-component JPEG"),
    "hierarchical": (set_frame(BASE, 0xC5), "hierarchical sequential JPEG (SOF5) is not supported by the decoders"),
    "hierarchical_progressive": (set_frame(PROGRESSIVE, 0xCE),
                                 "hierarchical arithmetic-coded progressive JPEG (SOF14) is not supported"),
    "arithmetic_lossless": (set_frame(GRAY_JPEG, 0xCB), "arithmetic-coded lossless JPEG (SOF11) is not supported"),
}
# Read by both decoders in both colour modes. The arithmetic-coded ones are baseline/progressive data
# relabelled: both decoders run their arithmetic decoder on it and agree (garbage, but the same garbage).
ACCEPTED_FRAMES = {
    "sof1_8bit": set_frame(BASE, 0xC1),
    "sof1_8bit_gray": set_frame(GRAY_JPEG, 0xC1),
    "progressive": PROGRESSIVE,
    "arithmetic_sequential": set_frame(BASE, 0xC9),
    "arithmetic_progressive": set_frame(PROGRESSIVE, 0xCA),
}


@pytest.mark.parametrize("name", sorted(REFUSED_FRAMES))
def test_frame_types_the_decoders_cannot_read_are_refused_by_name(name):
    data, reason = REFUSED_FRAMES[name]
    assert reason in check_jpeg_bytes(data).reason
    assert reason in header_refusal(data)


@pytest.mark.parametrize("verify", ["header", "decode"])
def test_refused_frames_are_listed_with_their_reason_at_indexing(tmp_path, verify):
    index = index_of(tmp_path, {"ok": BASE, **{name: data for name, (data, _) in REFUSED_FRAMES.items()}}, verify)
    assert list(index.paths) == ["a/ok.jpg"]
    reasons = {r.path: r.reason for r in index.rejected}
    assert set(reasons) == {f"a/{name}.jpg" for name in REFUSED_FRAMES}
    for name, (_, reason) in REFUSED_FRAMES.items():
        assert reason in reasons[f"a/{name}.jpg"], (name, reasons[f"a/{name}.jpg"])


@pytest.mark.parametrize("name, color", [("sof1_12bit", "rgb"), ("lossless_gray_16bit", "gray"),
                                         ("lossless_gray_8bit", "rgb"), ("lossless_rgb_8bit", "gray"),
                                         ("hierarchical", "rgb"), ("lossless_two_components", "gray")])
def test_refused_frames_really_fail_in_both_decoders(name, color):
    """What the refusals rest on: each of these fails in OpenCV and in DALI (DALI's whole pipeline)."""
    data = REFUSED_FRAMES[name][0]
    assert cv_decode(data, color) is None
    assert dali_refuses(data, color)


@pytest.mark.parametrize("color", COLORS)
def test_lossless_8bit_decodes_in_its_own_colour_mode_only(color):
    """Either colour mode fails on one of the two lossless kinds: refused whatever the loader's mode."""
    own = "lossless_gray_8bit" if color == "gray" else "lossless_rgb_8bit"
    data = REFUSED_FRAMES[own][0]
    (dali,) = dali_decode([data], color)
    np.testing.assert_array_equal(dali, cv_decode(data, color))
    np.testing.assert_array_equal(dali, GRAY_SMALL if color == "gray" else COLOR_SMALL)  # lossless indeed


@pytest.mark.parametrize("color", COLORS)
def test_accepted_frame_types_decode_alike(tmp_path, color):
    index = index_of(tmp_path, {n: d for n, d in ACCEPTED_FRAMES.items() if not n.startswith("arithmetic")}, "decode")
    assert not index.rejected
    datas = list(ACCEPTED_FRAMES.values())
    for (name, data), dali in zip(ACCEPTED_FRAMES.items(), dali_decode(datas, color), strict=True):
        assert check_jpeg_bytes(data).ok, name
        np.testing.assert_array_equal(dali, cv_decode(data, color), err_msg=name)
        assert decoded_size(data) == dali.shape[:2], name


# ----------------------------------------------------------------------------------- verify="decode" modes
@pytest.mark.parametrize("name, mode", [("lossless_gray_8bit", "colour"), ("lossless_rgb_8bit", "gray")])
def test_decode_check_decodes_in_colour_and_in_gray(tmp_path, name, mode):
    """Past the header check, a file decodable in one colour mode only is still refused by the decode
    check (it used to decode in gray only, so a gray lossless file passed and then failed in an RGB
    loader)."""
    path = write(tmp_path / "x.jpg", REFUSED_FRAMES[name][0])
    reason = decode_check(str(path))
    assert reason is not None and f"in {mode}" in reason and "Unsupported color conversion" in reason, reason
    assert decode_check(str(write(tmp_path / "ok.jpg", GRAY_JPEG))) is None
