"""A served sample is the indexed sample: one checked rule at the read (SampleReader.problem), for loose
files, shard members, disk-cache entries and the RAM cache alike, on both backends: the size, the JPEG
signature and decodable headers, and the frame header's dimensions against the index. A mismatch is a
BadImageError naming the file (or SHARD:member) and what differs, skipped under on_error="skip" like any
bad file. A disk-cache entry that fails it is a miss: dropped, and the source read instead.
Shards rewritten after packing at the same size (issue 32 case 1), locally and in a bucket."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import KINDS, jpeg_bytes, set_sof_size, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex
from dali_backend.errors import StaleIndexError
from dali_backend.formats.jpeg import check_jpeg_bytes, header_refusal, read_frame_header
from dali_backend.storage.cache import DiskCache
from dali_backend.storage.pack import pack
from fallback import ImageDataset
from tests.core.test_overwritten_files import overwrite_in_place
from tests.storage.test_storage_versions import passes as run

VICTIM = 6  # class b (samples 4-7), 64x48 as indexed


def make(root: Path) -> SampleIndex:
    """Class a: 40x48 images, class b: 64x48 (the issue's sizes)."""
    for k in range(8):
        w = 40 if k < 4 else 64
        write(root / ("a" if k < 4 else "b") / f"{k}.jpg", jpeg_bytes(h=48, w=w, seed=k))
    return SampleIndex.from_folder(root, progress=False)


def _loose(tmp_path, index):
    path = tmp_path / "d" / index.paths[VICTIM]
    overwrite_in_place(path, set_sof_size(path.read_bytes(), 40, 48))  # same size, same mtime
    return index, {}, str(path)


def _shard(tmp_path, index):
    packed = pack(index, tmp_path / "p", shard_bytes=1)  # one sample per shard
    shard = tmp_path / "p" / packed.shards.names[packed.shards.ids[VICTIM]]
    overwrite_in_place(shard, set_sof_size(shard.read_bytes(), 40, 48))
    return packed, {}, f"{shard}:{index.paths[VICTIM]}"


def _ram_cache(tmp_path, index):  # the file changed before the RAM cache was filled: the cache holds it
    _loose(tmp_path, index)
    return index, {"cache": True}, str(tmp_path / "d" / index.paths[VICTIM])


SOURCES = {"loose file": _loose, "shard member": _shard, "RAM cache": _ram_cache}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("source", list(SOURCES))
def test_a_same_size_sample_of_another_frame_size_is_not_served(tmp_path, source, kind):
    index = make(tmp_path / "d")
    index, dataset, named = SOURCES[source](tmp_path, index)
    with pytest.raises(BadImageError) as e:
        run(index, kind, **dataset)
    assert e.value.path == named and e.value.index == VICTIM
    assert "frame header says 40x48, the index 64x48" in e.value.reason
    served, stats = run(index, kind, on_error="skip", **dataset)
    assert VICTIM not in served and len(served) == len(index) and stats["skipped"] == 1
    assert all(int(index.labels[s]) == int(index.labels[i]) for i, s in zip(range(len(index)), sorted(served)))


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_cache_entry_of_another_sample_is_a_miss_and_the_source_is_served(tmp_path, kind):
    """A whole entry (its checksum matches) holding another image, e.g. a cache folder shared with another
    copy of the data: the rule refuses it, the entry is dropped and the intact file is read instead."""
    index = make(tmp_path / "d")
    cache = tmp_path / "c"
    ds = ImageDataset(index, AugmentSpec(size=16), cache_dir=cache)
    want = ds.load_uint8(VICTIM)[0]
    name, version = ds.reader.path(VICTIM), ds.reader._version(VICTIM)
    data = (tmp_path / "d" / index.paths[VICTIM]).read_bytes()
    DiskCache(cache).put(name, version, set_sof_size(data, 40, 48))
    served, stats = run(index, kind, cache_dir=cache)
    assert sorted(served) == list(range(len(index))) and stats["skipped"] == 0
    assert DiskCache(cache).get(name, version, len(data)) == data  # filled again from the file
    assert np.array_equal(ImageDataset(index, AugmentSpec(size=16), cache_dir=cache).load_uint8(VICTIM)[0], want)


def test_the_rule_compares_only_what_the_index_recorded():
    data = jpeg_bytes(h=48, w=64)
    assert header_refusal(data, (64, 48)) is None and header_refusal(data, None) is None
    assert header_refusal(data, (0, 0)) is None  # verify="none": no frame size recorded, nothing to compare
    assert "says 64x48, the index 64x47" in header_refusal(data, (64, 47))
    assert "says 64x48, the index 65x48" in header_refusal(data, (65, 48))


# ------------------------------------------------------------------------------ shards rewritten (case 1)
def _packed_pair(tmp_path):
    index = make(tmp_path / "d")
    packed = pack(index, tmp_path / "p", shard_bytes=1)
    names = packed.shards.names
    a, d = names[packed.shards.ids[1]], names[packed.shards.ids[VICTIM]]
    assert {packed.shards.sizes[packed.shards.ids[k]] for k in range(8)} == {10240}  # tar pads to 10 KiB
    return index, packed, tmp_path / "p" / a, tmp_path / "p" / d


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_local_shard_rewritten_at_the_same_size_is_stale_or_refused(tmp_path, kind):
    """Before: check="stat" compared sizes only, and the sample came out with class a's image."""
    index, packed, a, d = _packed_pair(tmp_path)
    st = d.stat()
    shutil.copyfile(a, d)  # another class's shard in its place: 10240 bytes too
    with pytest.raises(StaleIndexError, match=f"{d.name}: modified since packing"):
        SampleIndex.load(tmp_path / "p" / "index.npz")
    os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with its mtime put back: the read refuses it
    loaded = SampleIndex.load(tmp_path / "p" / "index.npz")
    with pytest.raises(BadImageError) as e:
        run(loaded, kind)
    assert e.value.path == f"{d}:{index.paths[VICTIM]}" and e.value.index == VICTIM
    served, stats = run(loaded, kind, on_error="skip")
    assert VICTIM not in served and stats["skipped"] == 1


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_bucket_shard_rewritten_at_the_same_size_is_stale_or_refused(s3, tmp_path, kind):
    from tests.storage.test_storage import upload

    index, packed, a, d = _packed_pair(tmp_path)
    url = upload(s3, tmp_path / "p", f"shards-{kind}")
    loaded = SampleIndex.load(tmp_path / "p" / "index.npz", root=url)  # listed: the shards' ETags kept
    s3.client.put_object(Bucket=url[5:], Key=d.name, Body=a.read_bytes())  # rewritten after loading
    s3.proxy.stats(reset=True)
    with pytest.raises(BadImageError) as e:
        run(loaded, kind)
    assert e.value.path == f"{url}/{d.name}:{index.paths[VICTIM]}" and "changed" in e.value.reason
    stats = s3.proxy.stats()
    assert stats["if_match"]["GET"] == stats["requests"]["GET"]  # every range conditional on the shard's ETag
    served, loader_stats = run(loaded, kind, on_error="skip")
    assert VICTIM not in served and loader_stats["skipped"] == 1
    with pytest.raises(StaleIndexError, match=f"{d.name}: content differs from packing"):
        SampleIndex.load(tmp_path / "p" / "index.npz", root=url)
    unlisted = SampleIndex.load(tmp_path / "p" / "index.npz", root=url, check="none")  # nothing listed
    with pytest.raises(BadImageError, match="frame header says 40x48, the index 64x48"):
        run(unlisted, kind)


# ------------------------------------------------------------------------------ fill bytes (the marker walk)
def with_fill_bytes(data: bytes, n: int) -> bytes:
    """``data`` with ``n`` fill bytes (0xFF) before each marker after the first segment: ITU T.81 B.1.1.2
    allows any number of them before any marker."""
    out, pos = bytearray(data[:2]), 2
    while True:
        marker = data[pos + 1]
        out += b"\xff" * n
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        out += data[pos:pos + 2 + length]
        pos += 2 + length
        if marker == 0xDA:
            return bytes(out + data[pos:])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_several_fill_bytes_before_markers_are_accepted_everywhere(tmp_path, n):
    import cv2

    plain = jpeg_bytes(h=48, w=64, seed=2)
    filled = with_fill_bytes(plain, n)
    assert len(filled) > len(plain) and check_jpeg_bytes(filled).ok
    frame = read_frame_header(filled)
    assert (frame.width, frame.height) == (64, 48) and header_refusal(filled, (64, 48)) is None
    ref = cv2.imdecode(np.frombuffer(plain, np.uint8), cv2.IMREAD_GRAYSCALE)
    assert np.array_equal(cv2.imdecode(np.frombuffer(filled, np.uint8), cv2.IMREAD_GRAYSCALE), ref)
    outputs = {}
    for name, first in (("filled", filled), ("plain", plain)):  # the same draws: same positions, same seed
        write(tmp_path / name / "a" / "0.jpg", first)
        write(tmp_path / name / "a" / "1.jpg", plain)
        index = SampleIndex.from_folder(tmp_path / name, progress=False)
        assert len(index) == 2 and not index.rejected
        for kind in KINDS:
            loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, shuffle=False, seed=1,
                                **KINDS[kind])
            try:
                (x, _), = list(loader)
            finally:
                loader.close()
            outputs[name, kind] = x.numpy()
    for kind in KINDS:  # the same pixels as without fill bytes, on both backends
        assert np.array_equal(outputs["filled", kind], outputs["plain", kind]), kind


def test_an_index_packed_without_shard_mtimes_and_digests_still_loads_and_compares_sizes(tmp_path):
    from dali_backend.index.shards import Shards, check_meta_shards

    index, packed, a, d = _packed_pair(tmp_path)
    s = packed.shards
    old = Shards(s.names, s.sizes, s.ids, s.offsets)  # what an older release wrote: [[name, size], ...]
    assert old.meta() == [[n, z] for n, z in zip(s.names, s.sizes)] and len(s.meta()[0]) == 4
    assert check_meta_shards(old.meta()) and check_meta_shards(s.meta())
    assert not check_meta_shards([[s.names[0], s.sizes[0], 1]]) and not check_meta_shards([[s.names[0], "1", 1, "x"]])
    legacy = SampleIndex(packed.root, packed.paths, packed.labels, packed.classes, packed.sizes, packed.mtimes,
                         packed.widths, packed.heights, [], packed.ignored, [], shards=old)
    legacy.save(tmp_path / "legacy.npz")
    assert len(SampleIndex.load(tmp_path / "legacy.npz")) == len(index)  # touched shards: no mtime to compare
    os.utime(d)
    assert SampleIndex.load(tmp_path / "legacy.npz").shards.mtimes == ()
    with open(d, "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(StaleIndexError, match=f"{d.name}: shard size 10240 -> 10752 bytes"):
        SampleIndex.load(tmp_path / "legacy.npz")
