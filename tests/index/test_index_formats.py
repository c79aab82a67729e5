"""The index records each sample's format and bit depth (issue 34): built, derived, updated, packed, pickled,
saved and loaded; an index file of before loads as JPEG at 8 bits; summary() and the CLI show the counts."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest

from dali_backend.errors import IndexFileError
from dali_backend.index import SampleIndex
from tests.formats.test_nothing_lost import mixed  # noqa: F401  (the fixture: jpg, png, tif, bmp, webp per class)
from tests.helpers import jpeg_bytes, run_cli, write

cv2 = pytest.importorskip("cv2")

# what each file of the `mixed` fixture (plus the 16-bit ones added below) is
EXPECTED = {"a.jpg": ("jpeg", 8), "b.png": ("png", 8), "c.tif": ("tiff", 8), "d.bmp": ("bmp", 8),
            "e.webp": ("webp", 8), "p16.png": ("png", 16), "t16.tif": ("tiff", 16)}


@pytest.fixture
def out(tmp_path_factory):
    """A folder outside the data root (the `mixed` fixture's root is tmp_path itself)."""
    return tmp_path_factory.mktemp("out")


@pytest.fixture
def mixed16(mixed):  # noqa: F811
    ramp = (np.arange(48 * 64, dtype=np.uint16).reshape(48, 64) * 21)
    for label in ("good", "rare"):
        write(mixed / label / "p16.png", cv2.imencode(".png", ramp)[1].tobytes())
    write(mixed / "good" / "t16.tif", cv2.imencode(".tif", ramp)[1].tobytes())
    return mixed


def kinds(index) -> list[tuple[str, str, int]]:
    return [(p, str(f), int(d)) for p, f, d in zip(index.paths, index.formats, index.bit_depths)]


def expected(index) -> list[tuple[str, str, int]]:
    return [(p, *EXPECTED[p.rsplit("/", 1)[-1]]) for p in index.paths]


def test_the_index_records_each_samples_format_and_bit_depth(mixed16):
    index = SampleIndex.from_folder(mixed16, progress=False)
    assert len(index) == 13 and kinds(index) == expected(index)
    assert index.format_ids.dtype == np.uint8 and index.bit_depths.dtype == np.uint8
    assert not index.format_ids.flags.writeable and not index.bit_depths.flags.writeable
    assert sorted(index.format_names) == ["bmp", "jpeg", "png", "tiff", "webp"]  # the names used, no others
    line = index.summary().splitlines()[0]
    assert "formats: png 4 (16-bit 2), tiff 3 (16-bit 1), bmp 2, jpeg 2, webp 2" in line


def test_format_and_depth_survive_subset_split_pickle_save_and_load(mixed16, out):
    index = SampleIndex.from_folder(mixed16, progress=False)
    train, val = index.split(0.5, seed=3)
    sub = index.subset([12, 0, 5])
    for part in (train, val, sub, pickle.loads(pickle.dumps(index))):
        assert kinds(part) == expected(part)
    assert len(val) and len(train)
    index.save(out / "i.npz")
    loaded = SampleIndex.load(out / "i.npz")
    assert kinds(loaded) == expected(loaded) and loaded.summary() == index.summary()
    assert loaded.fingerprint == index.fingerprint


def test_a_reload_maps_the_saved_names_whatever_the_registry_order(mixed16, out, monkeypatch):
    from dali_backend.formats import registry

    index = SampleIndex.from_folder(mixed16, progress=False)
    index.save(out / "i.npz")
    monkeypatch.setattr(registry, "FORMATS", dict(reversed(list(registry.FORMATS.items()))))
    loaded = SampleIndex.load(out / "i.npz")
    assert kinds(loaded) == expected(loaded)
    rebuilt = SampleIndex.from_folder(mixed16, progress=False)  # built under the other order: other codes, same names
    assert kinds(rebuilt) == kinds(index)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def rewritten(path, out, drop: tuple = (), meta_drop: tuple = (), arrays: dict | None = None) -> None:
    """``path`` copied to ``out`` without the members ``drop`` and the metadata fields ``meta_drop``, with
    the members ``arrays`` replaced (what an older writer, or a damaged file, holds)."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            if name in drop:
                continue
            data = src.read(name)
            if name == "meta.npy":
                meta = json.loads(np.load(io.BytesIO(data)).tobytes())
                for key in meta_drop:
                    del meta[key]
                data = _npy(np.frombuffer(json.dumps(meta).encode("ascii"), dtype=np.uint8))
            dst.writestr(name, _npy(arrays[name]) if name in (arrays or {}) else data)


def test_an_index_file_of_before_loads_as_jpeg_at_8_bits(tmp_path):
    for label in ("ok", "dent"):
        for i in range(3):
            write(tmp_path / "data" / label / f"{i}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path / "data", progress=False)
    index.save(tmp_path / "new.npz")
    # as the code before this change wrote it: no format_ids / bit_depths arrays, no format_names
    rewritten(tmp_path / "new.npz", tmp_path / "old.npz", ("format_ids.npy", "bit_depths.npy"), ("format_names",))
    with zipfile.ZipFile(tmp_path / "old.npz") as z:
        assert "format_ids.npy" not in z.namelist() and b"format_names" not in z.read("meta.npy")
    old = SampleIndex.load(tmp_path / "old.npz")
    assert list(old.formats) == ["jpeg"] * 6 and old.bit_depths.tolist() == [8] * 6
    assert "formats: jpeg 6" in old.summary() and old.fingerprint == index.fingerprint


@pytest.mark.parametrize("damage", [{"meta_drop": ("format_names",)}, {"drop": ("bit_depths.npy",)},
                                    {"arrays": {"format_ids.npy": np.array([0, 1], np.uint8)}}],
                         ids=["no names", "no depths", "a code past the names"])
def test_format_fields_that_do_not_fit_are_a_damaged_file(tmp_path, damage):
    for i in range(2):
        write(tmp_path / "data" / "ok" / f"{i}.jpg", jpeg_bytes(seed=i))
    SampleIndex.from_folder(tmp_path / "data", progress=False).save(tmp_path / "i.npz")
    rewritten(tmp_path / "i.npz", tmp_path / "bad.npz", **damage)
    with pytest.raises(IndexFileError, match="not a readable index file.*format"):
        SampleIndex.load(tmp_path / "bad.npz")


def test_an_update_copies_unchanged_files_kinds_and_reads_new_ones(mixed16):
    index = SampleIndex.from_folder(mixed16, progress=False)
    ramp = np.full((8, 8), 40000, np.uint16)
    write(mixed16 / "rare" / "t16.tif", cv2.imencode(".tif", ramp)[1].tobytes())  # new
    os.remove(mixed16 / "good" / "b.png")
    updated = index.update(progress=False)
    assert len(updated) == 13 and kinds(updated) == expected(updated)
    assert "formats: tiff 4 (16-bit 2), png 3 (16-bit 2), bmp 2" in updated.summary()


def test_pack_keeps_format_and_depth(mixed16, out):
    from dali_backend.storage.pack import INDEX_NAME, pack

    packed = pack(SampleIndex.from_folder(mixed16, progress=False), out / "packed", shard_bytes=10**8)
    assert kinds(packed) == expected(packed)
    loaded = SampleIndex.load(out / "packed" / INDEX_NAME)
    assert kinds(loaded) == expected(loaded)


def test_verify_none_says_the_files_were_not_read(mixed16):
    index = SampleIndex.from_folder(mixed16, progress=False, verify="none")
    assert set(index.formats) == {""} and set(index.bit_depths.tolist()) == {0}
    assert "formats: not read (verify='none') 13" in index.summary()


def test_a_bucket_records_format_and_depth_as_the_folder(s3, mixed16):
    from bench.s3local import upload_folder

    upload_folder(s3.server.endpoint, mixed16, "kinds", "", client=s3.client)
    local = SampleIndex.from_folder(mixed16, progress=False)
    remote = SampleIndex.from_folder("s3://kinds", progress=False)
    assert kinds(remote) == kinds(local) == expected(local)
    write(mixed16 / "rare" / "t16.tif", cv2.imencode(".tif", np.full((8, 8), 9, np.uint16))[1].tobytes())
    upload_folder(s3.server.endpoint, mixed16, "kinds", "", client=s3.client)
    updated = remote.update(progress=False)  # unchanged objects copied, the new one read
    assert kinds(updated) == expected(updated) and len(updated) == 14


def test_the_cli_index_output_shows_formats_and_depths(mixed16, out, capsys):
    rc, _, err = run_cli(["index", str(mixed16), "--out", str(out / "i.npz")], capsys)
    assert rc == 0, err
    assert "formats: png 4 (16-bit 2), tiff 3 (16-bit 1), bmp 2, jpeg 2, webp 2" in err
