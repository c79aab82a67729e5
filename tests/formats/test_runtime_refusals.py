"""Files whose headers pass the index-time check but whose pixel data is corrupt: named at run time
(:class:`BadImageError`) on both backends, and counted by ``on_error="skip"``, per format."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend import AugmentSpec, BadImageError, DaliLoader, ImageDataset
from dali_backend.index import SampleIndex
from tests.helpers import KINDS, write

cv2 = pytest.importorskip("cv2")


def _corrupt_png() -> bytes:
    rgb = np.random.default_rng(9).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    data = bytearray(cv2.imencode(".png", rgb)[1].tobytes())
    start = data.index(b"IDAT") + 4
    data[start + 10:start + 40] = bytes(30)  # the IDAT CRC fails: only a decoder sees it
    return bytes(data)


@pytest.fixture
def tree(tmp_path):
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        for k in range(3):
            write(tmp_path / label / f"{k}.png", cv2.imencode(".png", rng.integers(0, 256, (30, 40), np.uint8))[1].tobytes())
    write(tmp_path / "a" / "bad.png", _corrupt_png())
    index = SampleIndex.from_folder(tmp_path, progress=False)
    assert "a/bad.png" in index.paths  # its headers are sound
    return index


@pytest.mark.parametrize("kind", KINDS)
def test_a_corrupt_png_is_named_at_run_time(tree, kind):
    loader = DaliLoader(ImageDataset(tree, AugmentSpec(size=16)), batch_size=7, **KINDS[kind])
    with pytest.raises(BadImageError, match="a/bad.png"):
        list(loader)


def test_skip_counts_it_on_both_backends(tree):
    stats = {}
    for kind in KINDS:
        loader = DaliLoader(ImageDataset(tree, AugmentSpec(size=16, dtype="uint8"), seed=1), batch_size=7,
                            on_error="skip", **KINDS[kind])
        images = np.concatenate([x.numpy() for x, _ in loader])
        assert images.shape[0] == 7
        stats[kind] = loader.stats()
    assert stats["torch"]["skipped"] == stats["dali-cpu"]["skipped"] == 1
    assert [bad for bad, _ in stats["torch"]["skipped_files"]][0].endswith("a/bad.png")
