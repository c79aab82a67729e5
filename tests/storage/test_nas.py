"""A network share, stood in for by a local folder that answers slowly and loses a file mid-epoch: the
promises hold on both backends (a typed error naming the file, or a counted replacement; the timeout
bounds a read that never returns; a disk cache does not hide a file that vanished before it was cached)."""

from __future__ import annotations

import time

import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex, WeightedSampler
from dali_backend.core.reading import SampleReader
from fallback import ImageDataset

SLOW_S = 0.005  # per read: a share a few ms away


@pytest.fixture
def share(tmp_path, monkeypatch):
    root = tmp_path / "share"
    for i in range(48):
        write(root / ("ok" if i % 4 else "dent") / f"{i:02d}.jpg", jpeg_bytes(32, 40, seed=i))
    read = SampleReader.read

    def slow(self, i, epoch=None):
        time.sleep(SLOW_S)
        return read(self, i, epoch)

    monkeypatch.setattr(SampleReader, "read", slow)  # before any loader forks its workers: they inherit it
    return root


def _loader(index, kind, **kw):
    return DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, sampler=WeightedSampler(
        index, mode="sequential"), num_workers=2 if kind.startswith("torch") else 0, **KINDS[kind], **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_lost_mid_epoch_is_named(share, kind):
    index = SampleIndex.from_folder(share, progress=False)
    last = index.abspath(len(index) - 1)  # drawn last: no worker has read it when it goes
    with _loader(index, kind) as loader:
        it = iter(loader)
        next(it)
        (share / index.paths[len(index) - 1]).unlink()
        with pytest.raises(BadImageError) as e:
            list(it)
    assert e.value.path == last and e.value.index == len(index) - 1 and "No such file" in e.value.reason


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_lost_mid_epoch_is_replaced_and_counted_under_skip(share, kind):
    index = SampleIndex.from_folder(share, progress=False)
    lost = len(index) - 1
    with _loader(index, kind, on_error="skip") as loader:
        it = iter(loader)
        batches = [next(it)]
        (share / index.paths[lost]).unlink()
        batches += list(it)
        stats = loader.stats()
    assert sum(len(y) for _, y in batches) == len(index)  # nothing silently lost
    assert stats["skipped"] == 1 and stats["skipped_files"][0][0] == index.abspath(lost)
    assert stats["accounted"] == stats["draws"] == len(index)
