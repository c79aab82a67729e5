"""What the folder walk meets on disk: FIFOs, deep trees, one file reached twice, empty results."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from pathlib import Path

import pytest

from tests.helpers import jpeg_bytes, write
from dali_backend import IndexBuildError, SampleIndex


# --------------------------------------------------------------------------------------- special files
def _index_in_child(root: str, case: str, out: str) -> None:
    """Build (or load) an index the way ``case`` says; write what came out to ``out`` as JSON."""
    if case == "load":
        index = SampleIndex.from_folder(root, progress=False)
        index.save(os.path.join(root, "..", "i.npz"))
        os.remove(os.path.join(root, "ok", "good.jpg"))
        os.mkfifo(os.path.join(root, "ok", "good.jpg"))
        try:
            SampleIndex.load(os.path.join(root, "..", "i.npz"))
            result = {"error": None}
        except Exception as e:
            result = {"error": type(e).__name__, "message": str(e)}
    else:
        index = {
            "folder-header": lambda: SampleIndex.from_folder(root, progress=False),
            "folder-decode": lambda: SampleIndex.from_folder(root, verify="decode", progress=False),
            "keywords": lambda: SampleIndex.from_keywords(root, progress=False),
            "manifest": lambda: SampleIndex.from_manifest(os.path.join(root, "m.json"), progress=False),
        }[case]()
        result = {"paths": list(index.paths), "rejected": {r.path: r.reason for r in index.rejected}}
    Path(out).write_text(json.dumps(result))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
@pytest.mark.parametrize("case", ["folder-header", "folder-decode", "keywords", "manifest", "load"])
def test_fifo_named_jpg_is_rejected_without_hanging(tmp_path, case):
    root = tmp_path / "data"
    write(root / "ok" / "good.jpg", jpeg_bytes(seed=1))
    write(root / "ok" / "other_ok.jpg", jpeg_bytes(seed=2))
    os.mkfifo(root / "ok" / "ok_pipe.jpg")
    (root / "m.json").write_text(json.dumps({"ok/good.jpg": "ok", "ok/other_ok.jpg": "ok", "ok/ok_pipe.jpg": "ok"}))
    # In a child process with a join timeout: a regression blocks in open() and must not hang the suite.
    out = tmp_path / "result.json"
    child = multiprocessing.get_context("fork").Process(target=_index_in_child, args=(str(root), case, str(out)))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"indexing with a FIFO in the data hung ({case})")
    assert child.exitcode == 0 and out.is_file()
    got = json.loads(out.read_text())
    if case == "load":
        assert got["error"] == "StaleIndexError" and "ok/good.jpg: not a regular file (FIFO)" in got["message"]
        return
    assert got["paths"] == ["ok/good.jpg", "ok/other_ok.jpg"]
    assert got["rejected"] == {"ok/ok_pipe.jpg": "not a regular file (FIFO)"}


def test_directory_named_jpg_in_a_manifest_is_not_a_regular_file(tmp_path):
    write(tmp_path / "a.jpg", jpeg_bytes())
    (tmp_path / "dir.jpg").mkdir()
    (tmp_path / "m.json").write_text(json.dumps({"a.jpg": "x", "dir.jpg": "x"}))
    index = SampleIndex.from_manifest(tmp_path / "m.json", progress=False)
    assert {r.path: r.reason for r in index.rejected} == {"dir.jpg": "not a regular file (directory)"}


# --------------------------------------------------------------------------------------- walk
def test_walk_survives_folders_nested_deeper_than_the_recursion_limit(tmp_path):
    depth = 1200
    deep = str(tmp_path / "a")
    os.mkdir(deep)
    for _ in range(depth):  # os.makedirs / Path.mkdir(parents=True) recurse too
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    write(Path(deep) / "bottom.jpg", jpeg_bytes())
    try:
        index = SampleIndex.from_folder(tmp_path, progress=False)
        assert list(index.paths) == ["a/" + "d/" * depth + "bottom.jpg"]
    finally:  # shutil.rmtree (pytest's tmp_path cleanup) recurses too: take the tree down bottom-up
        os.remove(os.path.join(deep, "bottom.jpg"))
        for _ in range(depth):
            os.rmdir(deep)
            deep = os.path.dirname(deep)


def test_walk_order_is_sorted_depth_first(tmp_path):
    for rel in ["a/b.jpg", "a/c/d.jpg", "a/c/e/f.jpg", "a/c/g.jpg", "a/h.jpg", "b/z/y.jpg", "b/x.jpg"]:
        write(tmp_path / rel, jpeg_bytes(seed=len(rel)))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    assert list(index.paths) == ["a/b.jpg", "a/c/d.jpg", "a/c/e/f.jpg", "a/c/g.jpg", "a/h.jpg", "b/x.jpg", "b/z/y.jpg"]


# --------------------------------------------------------------------------------------- one file, two paths
def _two_labels_by_folder_link(root: Path) -> None:
    write(root / "bird" / "9.jpg", jpeg_bytes(seed=9))
    write(root / "cat" / "1.jpg", jpeg_bytes(seed=1))
    write(root / "cat" / "2.jpg", jpeg_bytes(seed=2))
    os.symlink(root / "cat", root / "dog")


def _two_labels_by_file_link(root: Path) -> None:
    write(root / "cat" / "1.jpg", jpeg_bytes(seed=1))
    write(root / "cat" / "2.jpg", jpeg_bytes(seed=2))
    write(root / "dog" / "3.jpg", jpeg_bytes(seed=3))
    os.symlink(root / "cat" / "1.jpg", root / "dog" / "1.jpg")
    os.symlink(root / "cat" / "2.jpg", root / "dog" / "2.jpg")


@pytest.mark.parametrize("make", [_two_labels_by_folder_link, _two_labels_by_file_link])
def test_one_file_under_two_labels_is_refused(tmp_path, make, caplog):
    make(tmp_path)
    with caplog.at_level(logging.INFO, logger="dali_backend"):
        index = SampleIndex.from_folder(tmp_path, progress=False)
    assert not {"cat/1.jpg", "cat/2.jpg", "dog/1.jpg", "dog/2.jpg"} & set(index.paths)
    reasons = {r.path: r.reason for r in index.rejected}
    assert reasons["cat/1.jpg"] == ("same file as dog/1.jpg (class dog): one image cannot have two labels; "
                                    "remove one link")
    assert reasons["dog/1.jpg"].startswith("same file as cat/1.jpg (class cat)")
    assert "same file under two labels: 4" in index.summary()
    assert any("same file under two labels: 4" in r.getMessage() for r in caplog.records)


def test_folder_link_between_classes_alone_leaves_nothing(tmp_path):
    write(tmp_path / "cat" / "1.jpg", jpeg_bytes(seed=1))
    os.symlink(tmp_path / "cat", tmp_path / "dog")
    with pytest.raises(IndexBuildError, match=r"2 files rejected \(same file under two labels: 2"):
        SampleIndex.from_folder(tmp_path, progress=False)


def test_same_file_twice_in_one_class_is_kept_once(tmp_path):
    write(tmp_path / "cat" / "1.jpg", jpeg_bytes(seed=1))
    write(tmp_path / "dog" / "2.jpg", jpeg_bytes(seed=2))
    os.symlink(tmp_path / "cat" / "1.jpg", tmp_path / "cat" / "1_copy.jpg")
    index = SampleIndex.from_folder(tmp_path, progress=False)
    assert list(index.paths) == ["cat/1.jpg", "dog/2.jpg"]
    assert [(r.path, r.reason) for r in index.rejected] == [
        ("cat/1_copy.jpg", "duplicate: same file as cat/1.jpg (class cat), indexed once; remove the extra link")]


def test_same_file_under_two_keyword_labels_is_refused(tmp_path):
    write(tmp_path / "raw" / "dent_1.jpg", jpeg_bytes(seed=1))
    write(tmp_path / "raw" / "ok_2.jpg", jpeg_bytes(seed=2))
    os.symlink(tmp_path / "raw" / "dent_1.jpg", tmp_path / "raw" / "ok_1.jpg")
    index = SampleIndex.from_keywords(tmp_path, progress=False)
    assert list(index.paths) == ["raw/ok_2.jpg"]
    assert {r.path for r in index.rejected} == {"raw/dent_1.jpg", "raw/ok_1.jpg"}


def test_same_file_under_two_manifest_labels_is_refused(tmp_path):
    write(tmp_path / "imgs" / "a.jpg", jpeg_bytes(seed=1))
    write(tmp_path / "imgs" / "b.jpg", jpeg_bytes(seed=2))
    os.symlink(tmp_path / "imgs" / "a.jpg", tmp_path / "imgs" / "a_link.jpg")
    (tmp_path / "m.json").write_text(json.dumps({"imgs/a.jpg": "x", "imgs/a_link.jpg": "y", "imgs/b.jpg": "y"}))
    index = SampleIndex.from_manifest(tmp_path / "m.json", progress=False)
    assert list(index.paths) == ["imgs/b.jpg"]
    reasons = {r.path: r.reason for r in index.rejected}
    assert reasons["imgs/a_link.jpg"].startswith("same file as imgs/a.jpg (class x): one image cannot have two labels")


# --------------------------------------------------------------------------------------- empty results
def test_no_images_says_what_was_found(tmp_path):
    for i in range(10):
        write(tmp_path / "cls" / f"{i}.gif", b"GIF89a")
    write(tmp_path / "cls" / "notes.txt", b"x")
    write(tmp_path / "cls" / "README", b"x")
    write(tmp_path / "cls" / ".DS_Store", b"x")
    with pytest.raises(IndexBuildError) as e:
        SampleIndex.from_folder(tmp_path, progress=False)
    assert str(e.value).startswith(f"no image files under {str(tmp_path)!r}: 10 GIF files, 1 extension-less file "
                                   "and 1 TXT file ignored (the index takes .jpg, .jpeg, ")
    assert ".png, .tif, .tiff, .webp)" in str(e.value)
    assert "; also skipped: hidden: 1. Check the path, or convert the images to a supported format" in str(e.value)


def test_no_images_counts_other_files_beyond_the_top_three(tmp_path):
    for ext, k in {"gif": 10, "psd": 3, "heic": 2, "txt": 1, "csv": 1}.items():
        for i in range(k):
            write(tmp_path / "cls" / f"{i}.{ext}", b"x")
    with pytest.raises(IndexBuildError, match=r"10 GIF files, 3 PSD files, 2 HEIC files and 2 other files ignored"):
        SampleIndex.from_folder(tmp_path, progress=False)


def test_all_rejected_says_why(tmp_path):
    for i in range(12):
        write(tmp_path / "cls" / f"{i}.jpg", b"")
    with pytest.raises(IndexBuildError, match=r"no usable image files .*: 12 files rejected \(empty file: 12; e\.g\. "
                                              r"cls/0\.jpg: empty file \(0 bytes\)"):
        SampleIndex.from_folder(tmp_path, progress=False)


def test_package_files_are_not_reported_as_ignored(tmp_path):
    from dali_backend.core.synthetic import generate_defect_dataset

    root = generate_defect_dataset(tmp_path / "demo", n=6, size=(16, 12), progress=False)
    assert any(p.name.startswith(".") and p.is_file() for p in root.iterdir())  # the marker file is there ...
    index = SampleIndex.from_folder(root, progress=False)
    assert index.ignored == {} and "ignored" not in index.summary()  # ... and is not the user's business
