"""``dali-backend pack``: tar shards in WebDataset's layout and an index of (shard, offset, size); a packed
sample reads as one range and gives the same pixels, labels and order as the loose file, locally and
from a bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex
from dali_backend.errors import StaleIndexError
from dali_backend.storage.pack import pack
from fallback import ImageDataset

ROOT = Path(__file__).resolve().parents[2]

BACKENDS = {"torch": dict(device="cpu", backend="torch"), "dali-cpu": dict(device="cpu", backend="dali")}


@pytest.fixture(scope="module")
def packed(defect_index, tmp_path_factory):
    out = tmp_path_factory.mktemp("packed")
    return pack(defect_index, out, shard_bytes=100_000), out


def test_shards_are_plain_tars_in_webdataset_layout(packed, defect_index):
    index, out = packed
    assert len(index.shards.names) > 1 and (out / "index.npz").exists()
    seen = 0
    for name in index.shards.names:
        with tarfile.open(out / name) as tar:
            members = tar.getmembers()
            assert [m.name.split(".")[1] for m in members] == ["jpg", "cls"] * (len(members) // 2)
            for jpg, cls in zip(members[::2], members[1::2]):
                i = int(jpg.name.split(".")[0])
                assert cls.name == f"{i:08d}.cls" and int(tar.extractfile(cls).read()) == defect_index.labels[i]
                assert tar.extractfile(jpg).read() == open(defect_index.abspath(i), "rb").read()
                assert (index.shards.names[index.shards.ids[i]], int(index.shards.offsets[i])) == (name, jpg.offset_data)
                seen += 1
    assert seen == len(defect_index)
    shard = index.shards.names[index.shards.ids[5]]
    assert index.abspath(5) == f"{index.root}/{shard}:{index.paths[5]}"  # where the bytes are, as errors name them
    loaded = SampleIndex.load(out / "index.npz")
    assert loaded.fingerprint == index.fingerprint and list(loaded.paths) == list(defect_index.paths)
    train, val = loaded.split(0.25, seed=1)
    ref_train, ref_val = defect_index.split(0.25, seed=1)
    assert list(val.paths) == list(ref_val.paths) and val.shards is not None and len(val.shards) == len(val)


@pytest.mark.parametrize("backend", [pytest.param(b, marks=[pytest.mark.slow] if b == "dali-cpu" else [])
                                     for b in BACKENDS])
def test_packed_samples_give_the_same_batches_as_loose_files(packed, defect_index, backend):
    def run(index):
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=24)), batch_size=8, shuffle=True, seed=2,
                            num_workers=2, return_meta=True, timeout=60, **BACKENDS[backend])
        try:
            return [(x.clone(), y.clone(), {k: v for k, v in m.items() if k != "path"}) for x, y, m in loader]
        finally:
            loader.close()

    for (xa, ya, ma), (xb, yb, mb) in zip(run(defect_index), run(packed[0]), strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert json.dumps(ma, default=str, sort_keys=True) == json.dumps(mb, default=str, sort_keys=True)


def test_a_packed_sample_is_one_range_read_from_a_bucket(s3, packed, defect_index):
    from bench.s3local import upload_folder

    index, out = packed
    upload_folder(s3.server.endpoint, out, "packed", "v1/", client=s3.client)
    s3.proxy.stats(reset=True)
    remote = SampleIndex.load(out / "index.npz", root="s3://packed/v1")  # check="stat": one listing
    assert s3.proxy.stats()["requests"] == {"GET": 1}
    ds = ImageDataset(remote, AugmentSpec(size=24))
    ref = ImageDataset(defect_index, AugmentSpec(size=24))
    s3.proxy.stats(reset=True)
    for i in range(len(ds)):
        assert np.array_equal(ds.load_uint8(i)[0], ref.load_uint8(i)[0])
    st = s3.proxy.stats()
    assert st["requests"] == {"GET": len(ds)} and st["bytes"]["GET"] == int(defect_index.sizes.sum())


def test_a_damaged_shard_names_the_sample_and_a_changed_one_is_stale(defect_index, tmp_path):
    index = pack(defect_index, tmp_path / "p", shard_bytes=100_000)
    i = 5
    shard = tmp_path / "p" / index.shards.names[index.shards.ids[i]]
    blob = bytearray(shard.read_bytes())
    blob[int(index.shards.offsets[i])] = 0  # the sample's SOI marker, in place: the shard's size is unchanged
    shard.write_bytes(bytes(blob))
    with pytest.raises(StaleIndexError, match=f"{shard.name}: modified since packing"):  # the same size: its mtime
        SampleIndex.load(tmp_path / "p" / "index.npz")
    ds = ImageDataset(SampleIndex.load(tmp_path / "p" / "index.npz", check="none"), AugmentSpec(size=16))
    with pytest.raises(BadImageError) as e:
        ds.load_uint8(i)
    assert e.value.path == f"{shard}:{defect_index.paths[i]}" and "no JPEG signature" in e.value.reason
    with open(shard, "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(StaleIndexError, match=f"{shard.name}: shard size"):
        SampleIndex.load(tmp_path / "p" / "index.npz")


def test_the_pack_command(defect_root, tmp_path, capsys):
    from tests.helpers import run_cli

    rc, out, err = run_cli(["pack", str(defect_root), "--out", str(tmp_path / "p"), "--shard-mb", "1"], capsys)
    assert rc == 0 and "60 samples packed into 1 shards" in out, err
    assert len(SampleIndex.load(tmp_path / "p" / "index.npz")) == 60


def test_packed_samples_through_the_ram_and_disk_caches(packed, defect_index, tmp_path):
    ref = ImageDataset(defect_index, AugmentSpec(size=24))
    ram = ImageDataset(packed[0], AugmentSpec(size=24), cache=True)
    disk = ImageDataset(packed[0], AugmentSpec(size=24), cache_dir=tmp_path / "c")
    assert ram.reader.cache.present.all()
    for i in range(len(ref)):
        want = ref.load_uint8(i)[0]
        assert np.array_equal(ram.load_uint8(i)[0], want) and np.array_equal(disk.load_uint8(i)[0], want)
    assert len(list((tmp_path / "c").glob("??/*"))) == len(ref)


def test_bench_on_a_packed_index_runs_or_is_refused_before_any_contender(tmp_path):
    """``python -m bench --data DIR/index.npz`` of a packed index is refused before any contender runs (the
    ceiling, the tutorial and the plain DALI pipeline open each image as a file, which a packed sample
    is not), as an s3:// --data is (before: the ceiling failed on a missing file and the run went on)."""
    from dali_backend.storage.pack import pack

    for i in range(4):
        write(tmp_path / "src" / ("a" if i % 2 else "b") / f"{i}.jpg", jpeg_bytes(seed=i))
    pack(SampleIndex.from_folder(tmp_path / "src", progress=False), tmp_path / "packed")
    assert not os.path.exists(SampleIndex.load(tmp_path / "packed" / "index.npz").abspath(0))
    proc = subprocess.run([sys.executable, "-m", "bench", "--data", str(tmp_path / "packed" / "index.npz"), "--only",
                           "fallback", "--epochs", "1", "--batch-size", "2", "--workers", "1", "--size", "16x16",
                           "--no-plot", "--json", str(tmp_path / "b.json")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert "No such file or directory" not in proc.stderr, proc.stderr[-1500:]
    assert proc.returncode == 2 and "a packed index (dali-backend pack)" in proc.stderr, proc.stderr[-1500:]
