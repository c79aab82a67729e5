"""SampleIndex: building from folders, manifests and keywords; rejects; persistence; splits."""

from __future__ import annotations

import csv
import json
import logging
import os

import numpy as np
import pytest

from tests.helpers import jpeg_bytes, set_sof_size, write
from dali_backend import (IndexBuildError, IndexFileError, ManifestError, SampleIndex, StaleIndexError)
from dali_backend.formats.jpeg import check_jpeg_bytes


def header_only(data: bytes) -> bytes:
    return data[:data.index(b"\xff\xda")] + b"\xff\xd9"


GOOD = jpeg_bytes()
BAD_FILES = {
    "empty.jpg": (b"", "empty file"),
    "truncated.jpg": (GOOD[: len(GOOD) // 2], "truncated"),
    "text.jpg": (b"hello, I am not an image\n", "no JPEG signature"),
    "png.jpg": (b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "broken PNG chunk structure"),  # read as PNG: its bytes
    "header_only.jpg": (header_only(GOOD), "header-only"),
    "huge.jpg": (set_sof_size(GOOD, 60000, 60000), "over the limit"),
    "cut_in_header.jpg": (GOOD[:40], "truncated in the headers"),
}


@pytest.fixture
def messy_root(tmp_path):
    root = tmp_path / "data"
    for i in range(3):
        write(root / "normal" / f"n{i}.jpg", jpeg_bytes(seed=i))
    write(root / "normal" / "nested" / "deeper" / "n_deep.JPG", jpeg_bytes(seed=10))
    write(root / "scratch" / "s0.JPEG", jpeg_bytes(seed=20))
    write(root / "scratch" / "trailing.jpg", jpeg_bytes(seed=21) + b"EXTRA-BYTES-AFTER-EOI" * 10)
    write(root / "scratch" / "fill.jpg", jpeg_bytes(seed=22).replace(b"\xff\xdb", b"\xff\xff\xdb", 1))
    for name, (data, _) in BAD_FILES.items():
        write(root / "dent" / name, data)
    write(root / "dent" / "d0.jpg", jpeg_bytes(seed=30))
    write(root / "dent" / ".hidden.jpg", jpeg_bytes(seed=31))
    write(root / "dent" / "._d0.jpg", b"\0\5\26\7AppleDouble")
    write(root / "dent" / "notes.txt", b"operator notes")
    write(root / "stray.jpg", jpeg_bytes(seed=40))
    return root


def test_from_folder_accepts_good_and_rejects_bad_with_reasons(messy_root, caplog):
    with caplog.at_level(logging.INFO, logger="dali_backend"):
        index = SampleIndex.from_folder(messy_root, progress=False)
    assert index.classes == ("dent", "normal", "scratch")
    assert sorted(index.paths) == sorted([
        "dent/d0.jpg", "normal/n0.jpg", "normal/n1.jpg", "normal/n2.jpg", "normal/nested/deeper/n_deep.JPG",
        "scratch/fill.jpg", "scratch/s0.JPEG", "scratch/trailing.jpg"])
    labels = {p: index.classes[lab] for p, lab in zip(index.paths, index.labels, strict=True)}
    assert labels["normal/nested/deeper/n_deep.JPG"] == "normal" and labels["dent/d0.jpg"] == "dent"
    rejected = {r.path: r.reason for r in index.rejected}
    for name, (_, reason) in BAD_FILES.items():
        assert reason in rejected[f"dent/{name}"], (name, rejected[f"dent/{name}"])
    assert "not inside a class folder" in rejected["stray.jpg"]
    assert index.ignored == {"hidden": 1, "macOS ._ file": 1, "other extension": 1}
    # one summary log line names the counts
    summary = [r.getMessage() for r in caplog.records if "indexed" in r.getMessage()]
    assert len(summary) == 1 and f"rejected {len(rejected)}" in summary[0]
    assert index.widths.tolist() == [64] * len(index) and index.heights.tolist() == [48] * len(index)


def test_arrays_are_numpy_and_immutable(messy_root):
    index = SampleIndex.from_folder(messy_root, progress=False)
    assert isinstance(index.labels, np.ndarray) and index.labels.dtype == np.int64
    assert isinstance(index.paths.data, np.ndarray) and index.paths.data.dtype == np.uint8
    with pytest.raises(ValueError):
        index.labels[0] = 1
    with pytest.raises(AttributeError):
        index.classes = ("x",)


def test_max_pixels_is_configurable(tmp_path):
    write(tmp_path / "a" / "big.jpg", jpeg_bytes(h=48, w=64))
    assert len(SampleIndex.from_folder(tmp_path, max_pixels=48 * 64, progress=False)) == 1
    with pytest.raises(IndexBuildError, match=r"no usable image files .*1 file rejected .*over the limit"):
        SampleIndex.from_folder(tmp_path, max_pixels=48 * 64 - 1, progress=False)


def test_verify_decode_catches_what_headers_cannot(tmp_path):
    good = jpeg_bytes(h=64, w=64, seed=1)
    dht = good.index(b"\xff\xc4")
    broken = bytearray(good)
    broken[dht + 5:dht + 21] = b"\xff" * 16  # Huffman code counts far over 256: a bogus table
    write(tmp_path / "a" / "ok.jpg", good)
    write(tmp_path / "a" / "broken.jpg", bytes(broken))
    assert check_jpeg_bytes(bytes(broken)).ok  # the markers look fine ...
    assert len(SampleIndex.from_folder(tmp_path, progress=False)) == 2
    decoded = SampleIndex.from_folder(tmp_path, verify="decode", progress=False)  # ... the decoder does not
    assert list(decoded.paths) == ["a/ok.jpg"]
    assert decoded.rejected[0].path == "a/broken.jpg" and "decoder refused" in decoded.rejected[0].reason


def test_non_ascii_paths(tmp_path):
    root = tmp_path / "数据集" / "缺陷图片"
    write(root / "划痕" / "图 1.jpg", jpeg_bytes(seed=1))
    write(root / "正常" / "图'2\".jpg", jpeg_bytes(seed=2))
    index = SampleIndex.from_folder(root, progress=False)
    assert len(index) == 2 and set(index.classes) == {"划痕", "正常"}
    index.save(tmp_path / "索引.npz")
    again = SampleIndex.load(tmp_path / "索引.npz")
    assert list(again.paths) == list(index.paths)
    assert os.path.isfile(again.abspath(0))


def test_symlink_leaving_root_is_refused(tmp_path):
    outside = write(tmp_path / "elsewhere" / "secret.jpg", jpeg_bytes())
    root = tmp_path / "data"
    write(root / "a" / "ok.jpg", jpeg_bytes())
    os.symlink(outside, root / "a" / "link.jpg")
    os.symlink(tmp_path / "elsewhere", root / "a" / "linkdir")
    write(root / ".store" / "kept.jpg", jpeg_bytes(seed=5))  # hidden: reached only through the link
    os.symlink(root / ".store" / "kept.jpg", root / "a" / "inside_link.jpg")
    index = SampleIndex.from_folder(root, progress=False)
    assert sorted(index.paths) == ["a/inside_link.jpg", "a/ok.jpg"]
    assert {r.path for r in index.rejected} == {"a/link.jpg", "a/linkdir"}
    assert all("leaves the data root" in r.reason for r in index.rejected)
    followed = SampleIndex.from_folder(root, allow_outside_symlinks=True, progress=False)
    assert len(followed) == 3  # link.jpg and linkdir/secret.jpg are one file: indexed once
    assert [r.path for r in followed.rejected] == ["a/linkdir/secret.jpg"]
    assert followed.rejected[0].reason.startswith("duplicate: same file as a/link.jpg")
    os.symlink(tmp_path / "elsewhere", root / "b")  # a whole class folder pointing outside
    index = SampleIndex.from_folder(root, progress=False)
    assert "b" in {r.path for r in index.rejected} and index.classes == ("a", "b") and len(index) == 2


def test_split_layout_shares_class_ids(tmp_path):
    write(tmp_path / "train" / "dent" / "a.jpg", jpeg_bytes())
    write(tmp_path / "train" / "normal" / "b.jpg", jpeg_bytes())
    write(tmp_path / "val" / "normal" / "c.jpg", jpeg_bytes())  # val has no dent folder
    train = SampleIndex.from_folder(tmp_path, split="train", progress=False)
    val = SampleIndex.from_folder(tmp_path, split="val", progress=False)
    assert train.classes == val.classes == ("dent", "normal")
    assert val.labels.tolist() == [1]
    with pytest.raises(IndexBuildError, match="split 'test' not found"):
        SampleIndex.from_folder(tmp_path, split="test")


def test_errors_name_the_folder(tmp_path):
    with pytest.raises(IndexBuildError, match="not a folder"):
        SampleIndex.from_folder(tmp_path / "nope")
    with pytest.raises(IndexBuildError, match="no class folders"):
        SampleIndex.from_folder(tmp_path)
    write(tmp_path / "x" / "a.jpg", jpeg_bytes())
    with pytest.raises(IndexBuildError, match=r"\['x'\].*not in classes"):
        SampleIndex.from_folder(tmp_path, classes=["y"])


# --------------------------------------------------------------------------------------- manifests
@pytest.fixture
def flat_root(tmp_path):
    root = tmp_path / "flat"
    for i in range(4):
        write(root / "imgs" / f"{i}.jpg", jpeg_bytes(seed=i))
    write(root / "imgs" / "bad.jpg", b"")
    return root


def test_manifest_json(flat_root):
    manifest = flat_root / "labels.json"
    manifest.write_text(json.dumps({"imgs/0.jpg": "ok", "imgs/1.jpg": "dent", "imgs/2.jpg": "ok",
                                    "imgs/bad.jpg": "ok", "imgs/missing.jpg": "dent"}))
    index = SampleIndex.from_manifest(manifest)
    assert index.classes == ("dent", "ok")
    assert list(index.paths) == ["imgs/0.jpg", "imgs/1.jpg", "imgs/2.jpg"]
    assert index.labels.tolist() == [1, 0, 1]
    reasons = {r.path: r.reason for r in index.rejected}
    assert reasons == {"imgs/bad.jpg": "empty file (0 bytes)", "imgs/missing.jpg": "missing file"}


def test_manifest_csv_with_header_split_and_duplicates(flat_root):
    manifest = flat_root / "labels.csv"
    with open(manifest, "w", newline="") as f:
        w = csv.writer(f)
        w.writerows([["path", "label", "split"], ["imgs/0.jpg", "ok", "train"], ["imgs/1.jpg", "dent", "val"],
                     ["imgs/2.jpg", "ok", "train"], ["imgs/2.jpg", "dent", "train"], ["imgs/3.jpg", "dent", "train"]])
    train = SampleIndex.from_manifest(manifest, split="train", classes=["ok", "dent"])
    assert list(train.paths) == ["imgs/0.jpg", "imgs/2.jpg", "imgs/3.jpg"]
    assert train.labels.tolist() == [0, 0, 1]
    assert "conflicting label" in train.rejected[0].reason and "line 5" in train.rejected[0].reason


@pytest.mark.parametrize("entry", ["../outside.jpg", "imgs/../../outside.jpg", "/etc/passwd"])
def test_manifest_entry_outside_root_is_refused(flat_root, entry):
    write(flat_root.parent / "outside.jpg", jpeg_bytes())
    manifest = flat_root / "labels.json"
    manifest.write_text(json.dumps({"imgs/0.jpg": "ok", entry: "ok"}))
    with pytest.raises(ManifestError, match="outside the root") as e:
        SampleIndex.from_manifest(manifest)
    assert entry in str(e.value)


def test_manifest_malformed(flat_root):
    bad = flat_root / "m.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ManifestError, match="JSON object"):
        SampleIndex.from_manifest(bad)
    bad_csv = flat_root / "m.csv"
    bad_csv.write_text("imgs/0.jpg\n")
    with pytest.raises(ManifestError, match="line 1 has 1 columns"):
        SampleIndex.from_manifest(bad_csv)


# --------------------------------------------------------------------------------------- keywords
def test_keyword_labelling(tmp_path):
    raw = tmp_path / "raw"
    files = {"batch1/IMG_OK_001.jpg": "normal", "batch1/scr12.jpg": "scratch", "batch2/pitted/x7.jpg": "dent",
             "good/part.jpg": "normal", "batch2/ScratchLeft.JPG": "scratch", "batch3/token.jpg": None,
             "batch3/ok_dent.jpg": None}
    for i, rel in enumerate(files):
        write(raw / rel, jpeg_bytes(seed=i))
    index = SampleIndex.from_keywords(raw)
    got = {p: index.classes[lab] for p, lab in zip(index.paths, index.labels, strict=True)}
    assert got == {k: v for k, v in files.items() if v}
    reasons = {r.path: r.reason for r in index.rejected}
    assert "no keyword matched" in reasons["batch3/token.jpg"]
    assert "ambiguous" in reasons["batch3/ok_dent.jpg"]
    custom = SampleIndex.from_keywords(raw, {"defect": ["scr", "scratch", "pit", "dent"], "fine": ["ok", "good"]})
    assert len(custom) == 5 and custom.classes == ("defect", "fine")


# --------------------------------------------------------------------------------------- persistence
def test_save_load_roundtrip_and_fingerprint(messy_root, tmp_path):
    index = SampleIndex.from_folder(messy_root, progress=False)
    path = tmp_path / "index.idx"  # any name: no .npz appended
    index.save(path)
    assert path.is_file()
    loaded = SampleIndex.load(path)
    assert loaded.fingerprint == index.fingerprint
    assert loaded.paths == index.paths and loaded.classes == index.classes
    np.testing.assert_array_equal(loaded.labels, index.labels)
    assert loaded.rejected == index.rejected and loaded.ignored == index.ignored
    with open(path, "rb") as f:
        assert b"pickle" not in f.read()


def test_load_detects_changed_files(messy_root, tmp_path):
    index = SampleIndex.from_folder(messy_root, progress=False)
    index.save(tmp_path / "i.npz")
    (messy_root / "normal" / "n0.jpg").write_bytes(jpeg_bytes(seed=99, h=50))
    (messy_root / "normal" / "n1.jpg").unlink()
    with pytest.raises(StaleIndexError, match=r"2 of 8 files changed.*normal/n0.jpg: size.*normal/n1.jpg: missing"):
        SampleIndex.load(tmp_path / "i.npz")
    assert len(SampleIndex.load(tmp_path / "i.npz", check="none")) == 8


def test_load_rejects_tampered_or_foreign_files(messy_root, tmp_path):
    index = SampleIndex.from_folder(messy_root, progress=False)
    index.save(tmp_path / "i.npz")
    with np.load(tmp_path / "i.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["labels"] = (arrays["labels"] + 1) % 3
    with open(tmp_path / "t.npz", "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(IndexFileError, match="fingerprint"):
        SampleIndex.load(tmp_path / "t.npz")
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(IndexFileError, match="not a readable index"):
        SampleIndex.load(tmp_path / "junk.npz")


# --------------------------------------------------------------------------------------- split
def test_split_is_deterministic_and_stable_as_data_grows(tmp_path):
    root = tmp_path / "d"
    for i in range(200):
        write(root / ("a" if i % 3 else "b") / f"{i}.jpg", jpeg_bytes(h=8, w=8, seed=i))
    index = SampleIndex.from_folder(root, progress=False)
    train, val = index.split(0.2, seed=5)
    assert len(train) + len(val) == 200 and 20 <= len(val) <= 60
    assert set(train.paths).isdisjoint(val.paths)
    train2, val2 = index.split(0.2, seed=5)
    assert list(val2.paths) == list(val.paths)
    assert list(index.split(0.2, seed=6)[1].paths) != list(val.paths)
    for i in range(200, 300):
        write(root / "a" / f"{i}.jpg", jpeg_bytes(h=8, w=8, seed=i))
    _, val_grown = SampleIndex.from_folder(root, progress=False).split(0.2, seed=5)
    old = set(index.paths)
    assert {p for p in val_grown.paths if p in old} == set(val.paths)  # every old file kept its side
