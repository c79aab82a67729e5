"""Files overwritten after indexing at the same size (and with the same mtime): the run-time checks.

The size check catches a file that changed length; these edits keep the length, so only the other
run-time checks of ``dali_backend.core.reading`` stand between the damage and a decoder: the JPEG
signature and the end-of-image marker. Without them the random-tail file decodes to silent garbage on
both backends and the bad-signature file fails later (DALI's decoder, then OpenCV) with another
reason. Each case expects ``BadImageError`` naming the file, its index and label, and the reason.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex, WeightedSampler
from fallback import ImageDataset

VICTIM = 4  # b/4.jpg: label 1


def scan_start(data: bytes) -> int:
    """Offset of the first byte of entropy-coded data (just after the SOS segment)."""
    i = data.index(b"\xff\xda")
    return i + 2 + int.from_bytes(data[i + 2:i + 4], "big")


def random_tail(data: bytes, seed: int = 0) -> bytes:
    """Headers kept, every byte of the scan and the end marker replaced by random bytes (no 0xFF, so no
    marker at all): the same size, readable headers, and no end-of-image marker."""
    start = scan_start(data)
    tail = np.random.default_rng(seed).integers(0, 255, len(data) - start, dtype=np.uint8)  # 0..254
    return data[:start] + tail.tobytes()


def bad_signature(data: bytes) -> bytes:
    return b"\x00\x00" + data[2:]


EDITS = {"random tail": (random_tail, "truncated (no end-of-image marker)"),
         "bad signature": (bad_signature, "no JPEG signature")}


def overwrite_in_place(path, data: bytes) -> None:
    """Rewrite ``path`` with ``data`` (same size) and put its modification time back."""
    st = os.stat(path)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:  # the same inode, as an editor saving in place
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.fixture
def edited(tmp_path, request):
    """(index, path of the edited file, expected reason): 8 files in a/ and b/, one edited after indexing."""
    edit, reason = EDITS[request.param]
    for i in range(8):
        write(tmp_path / ("a" if i < 4 else "b") / f"{i}.jpg", jpeg_bytes(40, 56, seed=i, color=i % 2 == 1))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    path = tmp_path / "b" / f"{VICTIM}.jpg"
    assert index.paths[VICTIM] == "b/4.jpg"
    overwrite_in_place(path, edit(path.read_bytes()))
    return index, path, reason


def test_the_edits_keep_the_headers_and_the_size():
    """The edits are what the tests claim: same size; the random tail leaves the headers readable (so only
    the marker check can tell) and holds no end-of-image marker; the bad signature changes only SOI."""
    from dali_backend.formats.jpeg import header_refusal

    data = jpeg_bytes(40, 56, seed=4)
    tail = random_tail(data)
    assert len(tail) == len(data) and tail[:scan_start(data)] == data[:scan_start(data)]
    assert b"\xff\xd9" not in tail and header_refusal(np.frombuffer(tail, np.uint8)) is None
    sig = bad_signature(data)
    assert len(sig) == len(data) and sig[2:] == data[2:] and sig[:2] != b"\xff\xd8"


@pytest.mark.parametrize("edited", list(EDITS), indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_a_file_overwritten_at_the_same_size_is_refused_with_its_reason(edited, kind):
    index, path, reason = edited
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, **KINDS[kind])
    loader.set_epoch(2)
    got = []
    try:
        with pytest.raises(BadImageError) as info:
            for x, _ in loader:
                got.append(x)
    finally:
        loader.close()
    e = info.value
    assert e.path == str(path) and e.index == VICTIM and e.label == 1 and e.epoch == 2, e
    assert reason in e.reason, e.reason
    assert str(path) in str(e) and reason in str(e)
    assert len(got) == VICTIM // 2, "the good batches before the edited file are yielded"


@pytest.mark.parametrize("edited", list(EDITS), indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_on_error_skip_replaces_a_file_overwritten_at_the_same_size(edited, kind):
    """``skip``: the edited file is never served; it is reported, and another sample of its class serves."""
    index, path, _ = edited
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, on_error="skip",
                        sampler=WeightedSampler(index, mode="sequential"), return_meta=True, **KINDS[kind])
    try:
        meta = [m for _, _, m in loader]
        st = loader.stats()
    finally:
        loader.close()
    served = [int(i) for m in meta for i in m["index"]]
    planned = [int(i) for m in meta for i in m["planned"]]
    assert planned == list(range(8)) and VICTIM not in served and served[VICTIM] in (5, 6, 7)
    assert st["skipped"] == 1 and [bad for bad, _ in st["skipped_files"]] == [str(path)]


def test_the_reader_names_the_reason_for_each_edit(tmp_path):
    """The same checks at the lowest level: ``SampleReader.read`` (what both backends' workers call)."""
    from dali_backend.core.reading import SampleReader

    for i in range(3):
        write(tmp_path / "a" / f"{i}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    overwrite_in_place(tmp_path / "a" / "1.jpg", random_tail((tmp_path / "a" / "1.jpg").read_bytes()))
    overwrite_in_place(tmp_path / "a" / "2.jpg", bad_signature((tmp_path / "a" / "2.jpg").read_bytes()))
    reader = SampleReader.for_index(index, seed=0)
    assert reader.read(0).size == index.sizes[0]
    for i, (_, reason) in zip((1, 2), EDITS.values(), strict=True):
        with pytest.raises(BadImageError) as info:
            reader.read(i, epoch=0)
        assert info.value.path == str(tmp_path / "a" / f"{i}.jpg") and reason in info.value.reason
