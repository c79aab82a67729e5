"""``update_index``: the new dataset keeps every argument of the old one, and the RAM cache holds about
one copy of the data however many updates there were (issue 32, cases 5 and 8)."""

from __future__ import annotations

import os

import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
from dali_backend import reading
from fallback import ImageDataset
from fallback.dataset import _options
from dali_backend.transforms.targets import BoxPolicy

SPEC = AugmentSpec(size=16, dtype="uint8")


def entries(folder) -> int:
    return sum(len(files) for top, _, files in os.walk(folder) if os.path.basename(top) != "tmp")


# For each argument of ImageDataset but the index: a value other than its default, and what the new
# dataset must show of it. A new argument without a row here fails test_the_table_names_every_option.
OPTIONS = {
    "spec": (AugmentSpec(size=12, dtype="uint8"), lambda ds, _: ds.spec == AugmentSpec(size=12, dtype="uint8")),
    "seed": (7, lambda ds, _: ds.seed == 7),
    "on_error": ("skip", lambda ds, _: ds.on_error == "skip"),
    "cache": (True, lambda ds, _: ds.reader.cache is not None and ds.reader.cache.present.all()),
    "cache_dir": ("CACHE", lambda ds, tmp: ds.reader.disk is not None
                  and ds.reader.disk.folder == str(tmp / "cache") and entries(tmp / "cache") == len(ds.index)),
    "cache_limit_bytes": (2**30, lambda ds, _: ds.reader.disk is not None and ds.reader.disk.limit == 2**30),
    "box_policy": (BoxPolicy(min_area=3.0), lambda ds, _: ds.box_policy == BoxPolicy(min_area=3.0)),
    "fill_mask": (255, lambda ds, _: ds.fill_mask == 255 and ds.samples.fill_mask == 255),
}


def test_the_table_names_every_option():
    assert set(OPTIONS) == set(_options())


@pytest.fixture
def folder(tmp_path):
    data = tmp_path / "data"
    for i in range(8):
        write(data / ("a" if i % 2 else "b") / f"{i:02d}.jpg", jpeg_bytes(seed=i))
    return data


def grow(data, start: int, n: int = 4) -> SampleIndex:
    for i in range(start, start + n):
        write(data / ("a" if i % 2 else "b") / f"{i:02d}.jpg", jpeg_bytes(seed=i))
    return SampleIndex.from_folder(data, progress=False)


def one_epoch(loader) -> list[str]:
    paths = []
    for _, labels, meta in loader:
        assert labels.tolist() == loader.dataset.index.labels[meta["index"].numpy()].tolist()
        paths += meta["path"]
    return paths


def options_for(names, tmp_path) -> dict:
    kw = {name: OPTIONS[name][0] for name in names}
    if "cache_dir" in kw or "cache_limit_bytes" in kw:
        kw["cache_dir"] = str(tmp_path / "cache")  # a bound needs a folder
    return kw


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", _options())
def test_every_dataset_option_is_kept_across_update_index(folder, tmp_path, kind, option):
    index = SampleIndex.from_folder(folder, progress=False)
    kw = options_for([option], tmp_path)
    loader = DaliLoader(ImageDataset(index, **kw), batch_size=4, return_meta=True,
                        sampler=WeightedSampler(index, seed=1, mode="uniform"), **KINDS[kind])
    one_epoch(loader)
    new = grow(folder, 8)
    loader.update_index(new)
    paths = one_epoch(loader)
    assert loader.dataset.index.fingerprint == new.fingerprint and len(paths) == len(new)
    assert OPTIONS[option][1](loader.dataset, tmp_path), f"{option}={kw[option]!r} was lost by update_index"
    assert loader.dataset.options == ImageDataset(new, **kw).options
    loader.close()


@pytest.fixture
def shared_memory_blocks(monkeypatch):
    """The /dev/shm names of every RAM cache built during the test."""
    names = []
    real = reading.EncodedCache.__init__

    def recording(self, *args, **kwargs):
        real(self, *args, **kwargs)
        names.append(self._shm.name.lstrip("/"))

    monkeypatch.setattr(reading.EncodedCache, "__init__", recording)
    return names


def resident(names) -> int:
    return sum(os.path.getsize(f"/dev/shm/{n}") for n in names if os.path.exists(f"/dev/shm/{n}"))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shared memory in /dev/shm")
@pytest.mark.parametrize("kind", KINDS)
def test_the_ram_cache_holds_one_copy_across_updates(folder, kind, shared_memory_blocks):
    index = SampleIndex.from_folder(folder, progress=False)
    loader = DaliLoader(ImageDataset(index, SPEC, cache=True), batch_size=4, return_meta=True,
                        sampler=WeightedSampler(index, seed=1, mode="uniform"), **KINDS[kind])
    one_epoch(loader)
    for update in range(3):
        new = grow(folder, 8 + 4 * update)
        loader.update_index(new)
        assert sorted(one_epoch(loader)) == sorted(os.path.join(new.root, p) for p in new.paths)
        data = int(new.sizes.sum())
        assert data <= resident(shared_memory_blocks) <= 1.2 * data, (update, resident(shared_memory_blocks), data)
        assert loader.dataset.index.fingerprint == new.fingerprint  # the one dataset the loader holds
    assert len(shared_memory_blocks) == 4
    # an epoch of an older index again: a dataset rebuilt over it, still one copy
    loader.set_epoch(0)
    assert len(one_epoch(loader)) == len(index)
    assert resident(shared_memory_blocks) <= 1.2 * int(index.sizes.sum())
    loader.close()
