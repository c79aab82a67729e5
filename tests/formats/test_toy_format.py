"""The image-format seam: a second format plugged in by this one file, nothing in the library edited.

TOY1: ``b"TOY1"``, width and height as little-endian uint16, then width * height gray bytes. Its
registry entry gives the magic bytes, the header reader, the index-time check (headers and length
only) and the decoder settings per backend: DALI has no TOY1 decoder, so its DALI settings are a
lookup only (no DALI graph decodes it: that needs the next issue's decoders); the fallback's decoder
is the entry's own function, so the torch executor serves TOY1 samples end to end.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from dali_backend.formats import registry
from dali_backend.formats.registry import Check, Decoding, Header, ImageFormat

MAGIC = b"TOY1"


def _header(data) -> Header | None:
    data = bytes(data[:8])
    if len(data) < 8 or not data.startswith(MAGIC):
        return None
    w, h = struct.unpack("<HH", data[4:8])
    return Header(w, h, channels=1, bit_depth=8)


def _check(head, size, max_pixels, load, tail) -> Check:
    header = _header(head)
    if header is None:
        return Check("not a TOY1 file (header too short)")
    if header.width * header.height > max_pixels:
        return Check(f"{header.width}x{header.height} is over max_pixels", header.width, header.height)
    if size != 8 + header.width * header.height:
        return Check(f"truncated: {size} bytes, the header needs {8 + header.width * header.height}")
    return Check(None, header.width, header.height)


def _served(data, indexed) -> str | None:
    header = _header(data)
    if header is None or len(data) != 8 + header.width * header.height:
        return "not a whole TOY1 file"
    if indexed is not None and all(indexed) and (header.width, header.height) != tuple(int(v) for v in indexed):
        return "not the indexed image"
    return None


def _decode(buf, colour: str) -> np.ndarray:
    header = _header(buf)
    gray = np.asarray(buf[8:], dtype=np.uint8).reshape(header.height, header.width)
    return gray if colour == "gray" else np.repeat(gray[:, :, None], 3, axis=2)


TOY = ImageFormat(name="toy", magic=(MAGIC,), extensions=(".toy",), read_header=_header, check=_check,
                  served_refusal=_served, decoding=Decoding(dali_cpu={"toy_mode": "gray"}, opencv=_decode))


def toy_bytes(h: int, w: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w), dtype=np.uint8)
    return MAGIC + struct.pack("<HH", w, h) + pixels.tobytes()


@pytest.fixture
def toy_format():
    registry.register(TOY)
    yield TOY
    registry.unregister("toy")


@pytest.fixture
def toy_folder(tmp_path):
    for label in ("a", "b"):
        (tmp_path / label).mkdir()
        for k in range(3):
            (tmp_path / label / f"{k}.toy").write_bytes(toy_bytes(10 + k, 12, seed=k + 10 * (label == "b")))
    (tmp_path / "a" / "cut.toy").write_bytes(toy_bytes(8, 8, seed=9)[:-5])  # refused by the header check
    return tmp_path


def test_the_index_takes_a_registered_format_by_its_bytes_and_checks_its_headers(toy_format, toy_folder):
    from dali_backend.index import SampleIndex

    index = SampleIndex.from_folder(toy_folder, progress=False)
    assert len(index) == 6 and list(index.classes) == ["a", "b"]
    assert sorted(zip(index.heights.tolist(), index.widths.tolist())) == sorted([(10, 12), (11, 12), (12, 12)] * 2)
    assert [r.reason for r in index.rejected] == ["truncated: 67 bytes, the header needs 72"]
    data = (toy_folder / "a" / "1.toy").read_bytes()
    assert registry.sniff(data, "x.jpg") is TOY  # the content decides, not the name
    assert registry.read_header(data) == Header(12, 11, 1, 8, 1) and registry.decoded_size(data) == (11, 12)
    assert registry.dali_decoder_args(False)["toy_mode"] == "gray"  # DALI's settings: a lookup only
    assert registry.opencv_decoding(data, "gray") is _decode


def test_without_its_entry_the_format_is_not_a_sample(toy_folder):
    from dali_backend.index import SampleIndex

    with pytest.raises(Exception, match="no"):
        SampleIndex.from_folder(toy_folder, progress=False)  # nothing but .toy files: no samples
    assert registry.check_bytes(toy_bytes(4, 4, 0)).reason.startswith("no registered image format's signature")


def test_the_torch_executor_serves_a_registered_format(toy_format, toy_folder):
    from dali_backend import AugmentSpec, FallbackLoader, ImageDataset, transforms as T
    from dali_backend.index import SampleIndex

    index = SampleIndex.from_folder(toy_folder, progress=False)
    dataset = ImageDataset(index, AugmentSpec(ops=[T.Resize((8, 8))], color="gray", dtype="uint8"))
    loader = FallbackLoader(dataset, batch_size=3, num_workers=0, shuffle=False)
    batches = list(loader)
    images = np.concatenate([b[0].numpy() for b in batches])
    assert images.shape[0] == 6 and images.shape[2:] == (8, 8)
    assert all((images[:, c] == images[:, 0]).all() for c in range(images.shape[1]))  # gray, expanded late
    assert len({im.tobytes() for im in images}) == 6  # six decoded images, no blank stand-ins
    labels = np.concatenate([b[1].numpy() for b in batches])
    assert sorted(labels.tolist()) == [0, 0, 0, 1, 1, 1]
