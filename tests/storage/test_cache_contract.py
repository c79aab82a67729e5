"""The disk cache's one written contract (dali_backend/storage/cache.py): write to a temporary file,
fsync, rename; read a regular file only, of exactly the indexed size plus its trailer, whose bytes hash
to the trailer's digest; anything else is a miss: removed and fetched again, never decoded, never
blamed on the object. Tested against power-loss-like damage, and each bound of the cache pinned with a
made-up input on each side of it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, DaliLoader, SampleIndex
from dali_backend.storage import cache as cache_mod
from dali_backend.storage.cache import LRU_RESOLUTION_S, STALE_TEMP_S, TRAILER, DiskCache
from fallback import ImageDataset

NAME, VERSION = "s3://b/a/1.jpg", '"etag"'
DATA = jpeg_bytes(seed=3)


def _zero_block(p: Path) -> None:  # a power loss: the size is on disk, a block of the data is not
    b = bytearray(p.read_bytes())
    b[100:612] = bytes(512)
    p.write_bytes(bytes(b))


def _fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def _folder(p: Path) -> None:
    p.unlink()
    (p / "x").mkdir(parents=True)


DAMAGE = {
    "zeroed block": _zero_block,
    "zeroed trailer": lambda p: p.write_bytes(p.read_bytes()[:-TRAILER] + bytes(TRAILER)),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(DATA) // 2]),
    "one byte longer": lambda p: p.write_bytes(p.read_bytes() + b"\0"),
    "the sample without trailer": lambda p: p.write_bytes(DATA),  # an entry of the older layout
    "a FIFO": _fifo,
    "a directory": _folder,
}


def _get_within(cache: DiskCache, path: Path, seconds: float = 5.0):
    """``cache.get`` in a thread: a read that blocks (a FIFO opened plainly) fails the test, not the run."""
    out = []
    t = threading.Thread(target=lambda: out.append(cache.get(NAME, VERSION, len(DATA))), daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():  # unblock it (a writer opens the FIFO), then fail
        if path.exists() and not path.is_dir():
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        t.join(5)
        pytest.fail("the cache read blocked")
    return out[0]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_a_miss_removed_and_filled_again(tmp_path, damage, caplog):
    cache = DiskCache(tmp_path / "c")
    cache.put(NAME, VERSION, DATA)
    entry = Path(cache.entry(NAME, VERSION, len(DATA)))
    assert entry.stat().st_size == len(DATA) + TRAILER and cache.get(NAME, VERSION, len(DATA)) == DATA
    DAMAGE[damage](entry)
    assert _get_within(cache, entry) is None
    assert not os.path.lexists(entry), "a damaged entry must be removed"
    assert "removed, fetching again" in caplog.text
    cache.put(NAME, VERSION, DATA)  # the refetch fills it again
    assert cache.get(NAME, VERSION, len(DATA)) == DATA


def test_a_fill_is_fsynced_before_its_rename(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(cache_mod.os, "fsync", lambda fd: (calls.append(("fsync", os.fstat(fd).st_size)),
                                                           real_fsync(fd))[1])
    monkeypatch.setattr(cache_mod.os, "replace", lambda a, b: (calls.append(("rename", 0)), real_replace(a, b))[1])
    cache = DiskCache(tmp_path / "c")
    cache.put(NAME, VERSION, DATA)
    assert calls[:2] == [("fsync", len(DATA) + TRAILER), ("rename", 0)], calls  # the file's bytes, then the name
    assert ("fsync", 0) not in calls[:1]


# ------------------------------------------------------------------------------ through the loaders
def _data(tmp_path: Path) -> SampleIndex:
    for k in range(8):
        write(tmp_path / "d" / ("a" if k < 4 else "b") / f"{k}.jpg", jpeg_bytes(seed=k))
    return SampleIndex.from_folder(tmp_path / "d", progress=False)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_damaged_entry_of_the_right_size_never_condemns_the_intact_file(tmp_path, kind):
    """Issue 32 case 4: zero blocks in an entry of the right size (renamed before its data reached the
    disk) made the intact file a bad image on every run; now the entry is a miss, dropped and filled again."""
    index = _data(tmp_path)
    cache = tmp_path / "cache"
    ds = ImageDataset(index, AugmentSpec(size=16), cache_dir=cache)
    want = [ds.load_uint8(i)[0] for i in range(len(ds))]
    entry = Path(ds.reader.disk.entry(ds.reader.path(2), ds.reader._version(2), int(index.sizes[2])))
    good = entry.read_bytes()
    b = bytearray(good)
    b[200:] = bytes(len(b) - 200)  # everything after the first 200 bytes zeroed, the size kept
    entry.write_bytes(bytes(b))
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16), cache_dir=cache), batch_size=4, return_meta=True,
                        **KINDS[kind])
    try:
        got = {int(i): x for xs, _, m in loader for x, i in zip(xs, m["index"])}
        assert loader.stats()["skipped"] == 0
    finally:
        loader.close()
    assert sorted(got) == list(range(len(index)))
    assert np.array_equal(ImageDataset(index, AugmentSpec(size=16), cache_dir=cache).load_uint8(2)[0], want[2])
    assert entry.read_bytes() == good  # filled again from the file


# ------------------------------------------------------------------------------ each bound, both sides
def test_a_hit_refreshes_the_lru_time_only_past_the_resolution(tmp_path):
    cache = DiskCache(tmp_path / "c")
    cache.put(NAME, VERSION, DATA)
    entry = cache.entry(NAME, VERSION, len(DATA))
    for age, refreshed in ((LRU_RESOLUTION_S - 5, False), (LRU_RESOLUTION_S + 5, True)):
        then = time.time() - age
        os.utime(entry, (then, then))
        assert cache.get(NAME, VERSION, len(DATA)) == DATA
        assert (os.stat(entry).st_mtime > then + 1) == refreshed, age


def test_temporary_files_are_removed_when_their_process_is_gone_or_they_are_stale(tmp_path):
    cache = DiskCache(tmp_path / "c")
    tmp = Path(cache.tmp)
    alive = os.getpid()
    young = tmp / f"x.{alive}.aa.part"  # a fill in progress in a live process
    old = tmp / f"y.{alive}.bb.part"  # a live pid, but older than STALE_TEMP_S (the pid was reused)
    for p, age in ((young, STALE_TEMP_S - 60), (old, STALE_TEMP_S + 60)):
        p.write_bytes(b"x")
        os.utime(p, (time.time() - age, time.time() - age))
    unparsable = tmp / "z.part"
    unparsable.write_bytes(b"x")
    other = tmp / "notes.txt"  # not ours: kept
    other.write_bytes(b"x")
    assert cache.clean_temp() == 2
    assert young.exists() and not old.exists() and not unparsable.exists() and other.exists()


def test_eviction_goes_down_to_its_fraction_of_the_limit(tmp_path):
    each = 1000 + TRAILER
    cache = DiskCache(tmp_path / "c", limit_bytes=10 * each)
    for k in range(10):  # exactly at the limit: nothing evicted
        cache.put(f"s3://b/{k}", VERSION, bytes([k]) * 1000)
        os.utime(cache.entry(f"s3://b/{k}", VERSION, 1000), (1000.0 + k, 1000.0 + k))
    assert cache.evict() == 0 and cache.total_bytes() == 10 * each
    cache.put("s3://b/10", VERSION, bytes(1000))  # one over: down to 90 % = 9 entries, the oldest first
    assert cache.total_bytes() == 9 * each
    assert cache.get("s3://b/0", VERSION, 1000) is None and cache.get("s3://b/1", VERSION, 1000) is None
    assert cache.get("s3://b/2", VERSION, 1000) is not None


def test_a_process_lists_the_folder_again_after_writing_its_share_of_the_limit(tmp_path, monkeypatch):
    cache = DiskCache(tmp_path / "c", limit_bytes=80 * (100 + TRAILER))  # an eighth: 10 entries' bytes
    listed = []
    monkeypatch.setattr(cache, "evict", lambda: (listed.append(cache._written), setattr(cache, "_written", 0)))
    cache._estimate = -10**9  # another process's view: far under the limit, so only the share decides
    for k in range(10):
        cache.put(f"s3://b/{k}", VERSION, bytes(100))
    assert listed == []  # 10 entries = exactly 1/8 of the limit: not yet
    cache.put("s3://b/10", VERSION, bytes(100))
    assert listed == [11 * (100 + TRAILER)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_fifo_in_place_of_an_entry_never_blocks_a_loader(tmp_path, kind):
    """Issue 32 case 6: a FIFO as an entry blocked the read forever (plain open()); with torch and
    num_workers=0, timeout= could not help. Now it is refused by its type: a miss, removed, the file read."""
    index = _data(tmp_path)
    cache = tmp_path / "cache"
    ds = ImageDataset(index, AugmentSpec(size=16), cache_dir=cache)
    for i in range(len(ds)):
        ds.reader.read(i)
    entry = Path(ds.reader.disk.entry(ds.reader.path(5), ds.reader._version(5), int(index.sizes[5])))
    entry.unlink()
    os.mkfifo(entry)
    rescued = []

    def rescue():  # a blocked open() of the FIFO returns once a writer opens it: the test then fails, not hangs
        if entry.exists() and not entry.is_file():
            rescued.append(1)
            with open(entry, "wb"):
                pass
    watchdog = threading.Timer(30, rescue)
    watchdog.start()
    try:
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16), cache_dir=cache), batch_size=4, num_workers=0,
                            timeout=5, return_meta=True, **KINDS[kind])
        try:
            served = sorted(int(i) for _, _, m in loader for i in m["index"])
        finally:
            loader.close()
    finally:
        watchdog.cancel()
    assert not rescued and served == list(range(len(index)))
    assert entry.is_file()  # removed, then filled again from the file
