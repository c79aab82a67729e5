"""A JPEG overwritten after its signature with fill bytes (0xFF) to the end, as erased flash reads: the
marker walk (dali_backend/formats/jpeg.py ``_Segments``) refuses it with a reason, never an IndexError."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex
from dali_backend.formats.jpeg import check_jpeg_bytes, decoded_size, header_refusal, read_frame_header
from fallback import ImageDataset
from tests.core.test_overwritten_files import overwrite_in_place

# SOI, then fill bytes (0xFF) to the end: what an erased flash block reads as, after the signature.
FF_TAIL = b"\xff\xd8" + b"\xff" * 30


def test_run_time_header_reads_do_not_raise_on_fill_bytes_to_the_end():
    """The lenient reads return None / a reason for a broken structure (before: IndexError)."""
    assert read_frame_header(FF_TAIL) is None
    assert decoded_size(np.frombuffer(FF_TAIL, np.uint8)) is None
    assert header_refusal(FF_TAIL) is not None


def test_the_strict_check_names_fill_bytes_to_the_end_as_truncated_headers():
    """The index check refuses it as truncated headers (before: 'the file ended ... while being read', the
    IndexError path for a file that shrank, though nothing shrank)."""
    assert "while being read" not in check_jpeg_bytes(FF_TAIL).reason


def test_reader_refuses_a_file_overwritten_with_fill_bytes(tmp_path):
    """SampleReader.read (both backends' workers) raises BadImageError, not IndexError, for a file
    overwritten at the same size with SOI + 0xFF bytes."""
    from dali_backend.core.reading import SampleReader

    for i in range(2):
        write(tmp_path / "a" / f"{i}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    path = tmp_path / "a" / "1.jpg"
    overwrite_in_place(path, b"\xff\xd8" + b"\xff" * (path.stat().st_size - 2))
    reader = SampleReader.for_index(index, seed=0)
    with pytest.raises(BadImageError):
        reader.read(1, epoch=0)


@pytest.mark.parametrize("kind", KINDS)
def test_on_error_skip_survives_a_file_overwritten_with_fill_bytes(tmp_path, kind):
    """Under ``on_error="skip"`` the file is skipped like any bad file (before, the pass died: torch with
    an IndexError from the worker, DALI with a LoaderWorkerError wrapping the reader's IndexError)."""
    for i in range(8):
        write(tmp_path / ("a" if i < 4 else "b") / f"{i}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    path = tmp_path / "a" / "1.jpg"
    overwrite_in_place(path, b"\xff\xd8" + b"\xff" * (path.stat().st_size - 2))
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, on_error="skip", **KINDS[kind])
    try:
        assert sum(1 for _ in loader) == 2
        assert loader.stats()["skipped"] == 1
    finally:
        loader.close()
