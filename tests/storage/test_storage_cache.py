"""The local disk cache (``ImageDataset(..., cache_dir=)``) of samples on object storage or a slow NAS:
keyed by (URL, ETag, size), atomic fills, verified on read, bounded with LRU eviction, safe after a
``kill -9`` during a fill, usable offline, exact resumption with a cold and a warm cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
from dali_backend.errors import BadImageError, ConfigError
from dali_backend.storage.cache import TRAILER, DiskCache
from fallback import ImageDataset

BACKENDS = {"torch": dict(device="cpu", backend="torch"), "dali-cpu": dict(device="cpu", backend="dali")}
ROOT = Path(__file__).resolve().parents[2]


def entries(folder) -> list[Path]:
    return sorted(p for p in Path(folder).glob("??/*") if p.is_file())


def images(ds) -> list[np.ndarray]:
    return [ds.load_uint8(i)[0] for i in range(len(ds))]


@pytest.fixture
def private_proxy(s3):
    """A proxy of its own in front of the session's moto: killing it takes the bucket away from one test."""
    from bench.s3local import Proxy

    proxy = Proxy(s3.server.endpoint)
    yield proxy
    proxy.stop()


def test_fill_then_warm_reads_give_the_same_bytes_and_work_offline(s3, s3_defects, defect_index, private_proxy,
                                                                   tmp_path):
    opts = {"endpoint_url": private_proxy.endpoint, "retries": 1, "backoff_s": 0.01, "connect_timeout": 1}
    index = SampleIndex.from_folder(s3_defects, storage_options=opts, progress=False)
    cache = tmp_path / "cache"
    cold = ImageDataset(index, AugmentSpec(size=24), cache_dir=cache)
    reference = images(ImageDataset(defect_index, AugmentSpec(size=24)))
    assert all(np.array_equal(a, b) for a, b in zip(images(cold), reference))
    held = entries(cache)
    assert len(held) == len(index) and sum(p.stat().st_size for p in held) == int(index.sizes.sum()) + TRAILER * len(index)
    private_proxy.stats(reset=True)
    warm = ImageDataset(index, AugmentSpec(size=24), cache_dir=cache)
    assert all(np.array_equal(a, b) for a, b in zip(images(warm), reference))
    assert private_proxy.stats()["requests"] == {}  # a warm cache asks the server nothing
    private_proxy.kill()  # offline: every sample still reads from the cache
    offline = ImageDataset(index, AugmentSpec(size=24), cache_dir=cache)
    assert all(np.array_equal(a, b) for a, b in zip(images(offline), reference))
    with pytest.raises(BadImageError, match="could not connect"):  # without the cache it needs the server
        ImageDataset(index, AugmentSpec(size=24))[0]


def test_a_truncated_or_foreign_entry_is_refetched_never_decoded(s3, s3_defects, tmp_path, caplog):
    index = SampleIndex.from_folder(s3_defects, progress=False)
    cache = tmp_path / "cache"
    ds = ImageDataset(index, AugmentSpec(size=24), cache_dir=cache)
    want = ds.load_uint8(3)[0]
    entry = Path(ds.reader.disk.entry(index.abspath(3), index.etags[3], int(index.sizes[3])))
    good = entry.read_bytes()
    entry.write_bytes(good[: len(good) // 2])  # a machine crash after the rename, before the data reached disk
    s3.proxy.stats(reset=True)
    again = ImageDataset(index, AugmentSpec(size=24), cache_dir=cache)
    assert np.array_equal(again.load_uint8(3)[0], want)
    assert s3.proxy.stats()["requests"] == {"GET": 1} and entry.read_bytes() == good
    assert "holds" in caplog.text and "fetching again" in caplog.text


def test_an_overwritten_object_never_hits_its_old_entry(s3, tmp_path):
    root = tmp_path / "d"
    for k in range(4):
        write(root / "a" / f"{k}.jpg", jpeg_bytes(seed=k))
        write(root / "b" / f"{k}.jpg", jpeg_bytes(seed=k + 10))
    from bench.s3local import upload_folder

    upload_folder(s3.server.endpoint, root, "cache-versions", client=s3.client)
    url = "s3://cache-versions"
    first = SampleIndex.from_folder(url, progress=False)
    cache = tmp_path / "cache"
    images(ImageDataset(first, AugmentSpec(size=16), cache_dir=cache))
    new = jpeg_bytes(seed=99)
    s3.client.put_object(Bucket="cache-versions", Key="a/1.jpg", Body=new)
    second = SampleIndex.from_folder(url, progress=False)  # indexed again: the new ETag
    ds = ImageDataset(second, AugmentSpec(size=16), cache_dir=cache)
    i = list(second.paths).index("a/1.jpg")
    assert bytes(ds.reader.read(i)) == new
    assert len(entries(cache)) == len(first) + 1  # old and new versions side by side; the limit evicts


def test_the_cache_stays_under_its_limit_least_recently_used_first(tmp_path, defect_index):
    cache = DiskCache(tmp_path / "c", limit_bytes=10 * (1000 + TRAILER))
    blobs = {f"s3://b/{k}.jpg": bytes([k]) * 1000 for k in range(13)}
    names = list(blobs)
    for name in names[:9]:  # 9 KB: under the limit
        cache.put(name, '"e"', blobs[name])
    assert cache.total_bytes() == 9 * (1000 + TRAILER)
    old = time.time() - 3600
    for k, name in enumerate(names[:9]):  # written an hour ago, in this order (a hit refreshes an entry older
        path = cache.entry(name, '"e"', 1000)  # than LRU_RESOLUTION_S)
        os.utime(path, (old + k, old + k))
    assert cache.get(names[0], '"e"', 1000) == blobs[names[0]]  # used again: the most recent now
    for name in names[9:]:
        cache.put(name, '"e"', blobs[name])
    assert cache.total_bytes() <= 10 * (1000 + TRAILER)
    assert cache.get(names[0], '"e"', 1000) == blobs[names[0]] and cache.get(names[-1], '"e"', 1000) is not None
    assert cache.get(names[1], '"e"', 1000) is None  # the least recently used went first
    with pytest.raises(ConfigError, match="cache_limit_bytes=0"):
        DiskCache(tmp_path / "c", limit_bytes=0)
    with pytest.raises(ConfigError, match="pass cache_dir= too"):
        ImageDataset(defect_index, cache_limit_bytes=10)


FILL = r"""
import os, sys
sys.path.insert(0, {root!r})
from dali_backend import SampleIndex, AugmentSpec
from fallback import ImageDataset
index = SampleIndex.load({index!r}, check="none")
ds = ImageDataset(index, AugmentSpec(size=16), cache_dir={cache!r})
print("filling", flush=True)
for i in range(len(ds)):
    ds.reader.read(i)
"""


@pytest.mark.slow
def test_kill_9_during_a_fill_leaves_nothing_that_breaks_the_next_run(s3, s3_defects, defect_index, tmp_path):
    index = SampleIndex.from_folder(s3_defects, progress=False)
    saved = tmp_path / "i.npz"
    index.save(saved)
    cache = tmp_path / "cache"
    s3.proxy.configure(latency_ms=30)  # a fill that takes seconds, killed in the middle
    try:
        child = subprocess.Popen([sys.executable, "-c", FILL.format(root=str(ROOT), index=str(saved),
                                                                     cache=str(cache))],
                                 stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert child.stdout.readline().strip() == b"filling"
        deadline = time.monotonic() + 30
        while len(entries(cache)) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        s3.proxy.configure()
    assert 5 <= len(entries(cache)) < len(index)
    # what a kill between write and rename leaves: a temporary file of a process that is gone
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = cache / "tmp" / f"ab{'0' * 62}.1234.{gone.stdout.strip()}.deadbeef.part"
    stale.write_bytes(b"\xff\xd8 half")
    ds = ImageDataset(index, AugmentSpec(size=24), cache_dir=cache)
    assert not stale.exists() and ds.reader.disk.removed_temp == 1
    reference = images(ImageDataset(defect_index, AugmentSpec(size=24)))
    assert all(np.array_equal(a, b) for a, b in zip(images(ds), reference))
    assert len(entries(cache)) == len(index)


def test_in_ram_cache_of_a_bucket_and_disk_cache_of_a_folder(s3, s3_defects, defect_index, tmp_path):
    remote = SampleIndex.from_folder(s3_defects, progress=False)
    reference = images(ImageDataset(defect_index, AugmentSpec(size=24)))
    ram = ImageDataset(remote, AugmentSpec(size=24), cache=True)
    assert ram.reader.cache.present.all()
    s3.proxy.stats(reset=True)
    assert all(np.array_equal(a, b) for a, b in zip(images(ram), reference))
    assert s3.proxy.stats()["requests"] == {}
    nas = ImageDataset(defect_index, AugmentSpec(size=24), cache_dir=tmp_path / "nas-cache")
    assert all(np.array_equal(a, b) for a, b in zip(images(nas), reference))
    assert len(entries(tmp_path / "nas-cache")) == len(defect_index)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_exact_resumption_with_a_cold_and_a_warm_cache(s3, s3_defects, tmp_path, backend):
    index = SampleIndex.from_folder(s3_defects, progress=False)

    def make(cache):
        ds = ImageDataset(index, AugmentSpec(size=16), cache_dir=cache)
        return DaliLoader(ds, batch_size=4, num_workers=2, sampler=WeightedSampler(index, num_samples=32, seed=6),
                          timeout=60, **BACKENDS[backend])

    def batches(loader):
        out = [(x.clone(), y.clone()) for x, y in loader]
        loader.close()
        return out

    full = batches(make(None))
    assert len(full) == 8
    for name in ("cold", "warm"):  # the same folder: empty on the first round, filled by it on the second
        cache = tmp_path / "cache"
        assert (len(entries(cache)) > 0) == (name == "warm") if cache.exists() else name == "cold"
        first = make(cache)
        taken = []
        for i, batch in enumerate(first):
            taken.append((batch[0].clone(), batch[1].clone()))
            if i == 2:
                break
        state = json.loads(json.dumps(first.state_dict()))
        first.close()
        resumed = make(cache)
        resumed.load_state_dict(state)
        rest = batches(resumed)
        for (xa, ya), (xb, yb) in zip(taken + rest, full, strict=True):
            assert torch.equal(ya, yb) and torch.equal(xa, xb)
