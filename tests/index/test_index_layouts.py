"""Data-set layouts users bring (issue 12): split folders, torchvision names, stale-index wording."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.helpers import jpeg_bytes, write
from dali_backend import IndexBuildError, SampleIndex, StaleIndexError


@pytest.mark.parametrize("splits", [("train", "val"), ("train", "valid", "test"), ("training", "validation"),
                                    ("testing",)])
def test_split_layout_without_split_is_refused(tmp_path, splits):
    for s in splits:
        write(tmp_path / s / "cat" / "1.jpg", jpeg_bytes(seed=1))
        write(tmp_path / s / "dog" / "2.jpg", jpeg_bytes(seed=2))
    with pytest.raises(IndexBuildError) as e:
        SampleIndex.from_folder(tmp_path, progress=False)
    text = str(e.value)
    assert "looks like a split layout" in text and all(f"{s}/ holds cat, dog" in text for s in splits)
    assert "split=" in text and "--split" in text
    index = SampleIndex.from_folder(tmp_path, split=splits[0], progress=False)  # split= still works
    assert index.classes == ("cat", "dog") and len(index) == 2
    # a class really called "test" (holding images, or given in classes=) is not a split
    explicit = SampleIndex.from_folder(tmp_path, classes=list(splits), progress=False)
    assert explicit.classes == splits


def test_a_class_named_test_holding_only_files_is_not_a_split(tmp_path):
    write(tmp_path / "test" / "1.jpg", jpeg_bytes(seed=1))
    write(tmp_path / "prod" / "2.jpg", jpeg_bytes(seed=2))
    assert SampleIndex.from_folder(tmp_path, progress=False).classes == ("prod", "test")


def test_torchvision_imagefolder_names(tmp_path):
    for rel in ["cat/1.jpg", "cat/2.jpg", "dog/3.jpg"]:
        write(tmp_path / rel, jpeg_bytes(seed=len(rel)))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    assert index.class_to_idx == {"cat": 0, "dog": 1}
    assert isinstance(index.targets, np.ndarray) and index.targets.tolist() == [0, 0, 1]
    assert index.samples == [(str(tmp_path / "cat" / "1.jpg"), 0), (str(tmp_path / "cat" / "2.jpg"), 0),
                             (str(tmp_path / "dog" / "3.jpg"), 1)]
    assert all(type(lab) is int for _, lab in index.samples)


def test_torchvision_names_match_imagefolder(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    for rel in ["cat/1.jpg", "cat/2.jpg", "dog/3.jpg"]:
        write(tmp_path / rel, jpeg_bytes(seed=len(rel)))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    ref = torchvision.datasets.ImageFolder(str(tmp_path))
    assert index.class_to_idx == ref.class_to_idx and index.targets.tolist() == ref.targets
    assert index.samples == ref.samples


def test_stale_index_error_names_python_argument_and_cli_flag(tmp_path):
    for i in range(4):
        write(tmp_path / "data" / "a" / f"{i}.jpg", jpeg_bytes(seed=i))
    SampleIndex.from_folder(tmp_path / "data", progress=False).save(tmp_path / "i.npz")
    (tmp_path / "data" / "a" / "0.jpg").unlink()
    with pytest.raises(StaleIndexError) as e:
        SampleIndex.load(tmp_path / "i.npz")
    assert "Rebuild the index, or pass check='none' to SampleIndex.load (CLI: --no-check)" in str(e.value)
    assert "root=" not in str(e.value)


def test_stale_index_error_after_the_data_moved_says_pass_root(tmp_path):
    for i in range(4):
        write(tmp_path / "data" / "a" / f"{i}.jpg", jpeg_bytes(seed=i))
    SampleIndex.from_folder(tmp_path / "data", progress=False).save(tmp_path / "i.npz")
    shutil.move(tmp_path / "data", tmp_path / "moved")
    with pytest.raises(StaleIndexError) as e:
        SampleIndex.load(tmp_path / "i.npz")
    text = str(e.value)
    assert "4 of 4 files are missing" in text and "pass root='NEW/LOCATION' to SampleIndex.load (CLI: --root" in text
    assert "check='none'" in text and "--no-check" in text
    assert len(SampleIndex.load(tmp_path / "i.npz", root=tmp_path / "moved", check="none")) == 4
