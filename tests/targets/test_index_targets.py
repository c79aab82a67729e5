"""Targets in the sample index: masks (the MVTec AD layout) and boxes (a flat COCO-annotated folder) per
sample, saved and fingerprinted with the index, a changed mask caught like a changed image, kept by
``update``; bad targets refused at build time."""

from __future__ import annotations

import json
import os

import cv2
import numpy as np
import pytest

from dali_backend import TargetError
from dali_backend.core.reading import SampleReader
from dali_backend.core.defects import generate_detection, generate_mvtec
from dali_backend.errors import ConfigError, StaleIndexError
from dali_backend.index import SampleIndex
from dali_backend.targets import ImageTargets, mvtec_masks, read_coco


@pytest.fixture
def mvtec(tmp_path):
    return generate_mvtec(tmp_path / "mvtec", n_train=2, n_good=2, n_defect=2, size=(48, 40))


def test_from_mvtec_pairs_each_defect_with_its_mask_and_good_images_with_none(mvtec):
    index = SampleIndex.from_mvtec(mvtec, "plate", "test")
    assert index.classes == ("good", "scratch", "stain")
    t = index.annotations
    assert t.kinds == ("masks",) and t.binary and t.num_classes == 2
    got = {p: t.mask_path(i) for i, p in enumerate(index.paths)}
    assert got == {"test/good/000.png": None, "test/good/001.png": None,
                   "test/scratch/000.png": "ground_truth/scratch/000_mask.png",
                   "test/scratch/001.png": "ground_truth/scratch/001_mask.png",
                   "test/stain/000.png": "ground_truth/stain/000_mask.png",
                   "test/stain/001.png": "ground_truth/stain/001_mask.png"}
    # masks are read as class ids 0/1; a good image gets an all-background mask of its size
    i = list(index.paths).index("test/stain/001.png")
    reader = SampleReader.for_index(index, seed=0)  # masks are read as the images are: through the sample reader
    m = t.read_mask(reader, i, (40, 48))
    assert set(np.unique(m)) == {0, 1} and m.sum() == (cv2.imread(os.path.join(index.root, t.mask_path(i)), 0) > 0).sum()
    assert not t.read_mask(reader, 0, (40, 48)).any()
    train = SampleIndex.from_mvtec(mvtec, "plate", "train")
    assert train.classes == index.classes and train.annotations.kinds == ("masks",)


def test_targets_round_trip_through_save_and_load_and_enter_the_fingerprint(mvtec, tmp_path):
    plain = SampleIndex.from_folder(mvtec / "plate", split="test")
    index = SampleIndex.from_mvtec(mvtec, "plate", "test")
    assert index.fingerprint != plain.fingerprint
    index.save(tmp_path / "i.npz")
    back = SampleIndex.load(tmp_path / "i.npz")
    assert back.fingerprint == index.fingerprint
    for name in ("mask_sizes", "mask_mtimes", "box_offsets", "boxes", "box_labels"):
        assert np.array_equal(getattr(back.annotations, name), getattr(index.annotations, name))
    assert list(back.annotations.masks) == list(index.annotations.masks)
    assert back.annotations.recipe == index.annotations.recipe and back.annotations.binary
    sub = index.subset([5, 0])
    assert [sub.annotations.mask_path(i) for i in range(2)] == [index.annotations.mask_path(5), None]


def test_a_changed_mask_file_makes_the_index_stale(mvtec, tmp_path):
    index = SampleIndex.from_mvtec(mvtec, "plate", "test")
    index.save(tmp_path / "i.npz")
    mask = mvtec / "plate" / "ground_truth" / "stain" / "000_mask.png"
    changed = cv2.imread(str(mask), 0)
    changed[:4, :4] = 255
    cv2.imwrite(str(mask), changed)
    st = os.stat(mask)
    os.utime(mask, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(StaleIndexError, match="ground_truth/stain/000_mask.png"):
        SampleIndex.load(tmp_path / "i.npz")
    assert len(SampleIndex.load(tmp_path / "i.npz", check="none")) == len(index)


def test_update_keeps_the_targets_and_pairs_new_images(mvtec):
    index = SampleIndex.from_mvtec(mvtec, "plate", "test")
    cat = mvtec / "plate"
    img = cv2.imread(str(cat / "test" / "stain" / "000.png"))
    cv2.imwrite(str(cat / "test" / "stain" / "007.png"), img)
    cv2.imwrite(str(cat / "ground_truth" / "stain" / "007_mask.png"), cv2.imread(str(cat / "ground_truth" / "stain" / "000_mask.png"), 0))
    new = index.update()
    assert len(new) == len(index) + 1 and new.paths[len(index)] == "test/stain/007.png"
    assert new.annotations.mask_path(len(index)) == "ground_truth/stain/007_mask.png"
    assert [new.annotations.mask_path(i) for i in range(len(index))] == [index.annotations.mask_path(i)
                                                                          for i in range(len(index))]


def test_a_mask_of_another_size_than_its_image_is_refused_when_indexed(mvtec):
    mask = mvtec / "plate" / "ground_truth" / "scratch" / "001_mask.png"
    cv2.imwrite(str(mask), np.zeros((20, 48), np.uint8))
    with pytest.raises(TargetError, match=r"001_mask.png: the mask is 48x20 .* its image 'plate/test/scratch/001.png' 48x40"):
        SampleIndex.from_mvtec(mvtec, "plate", "test")


def test_a_mask_that_is_not_a_png_is_refused(mvtec):
    index = SampleIndex.from_folder(mvtec / "plate", split="test")
    (mvtec / "plate" / "bad_mask.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(40))
    table = {"test/good/000.png": ImageTargets(mask="bad_mask.jpg")}
    with pytest.raises(TargetError, match="bad_mask.jpg: not a PNG file"):
        index.with_targets(table)


def test_a_detection_folder_without_class_folders_is_indexed_with_its_boxes(tmp_path):
    path = generate_detection(tmp_path / "det", n=5)
    index = SampleIndex.from_annotations(tmp_path / "det", read_coco(path, tmp_path / "det"))
    assert index.classes == ("image",) and len(index) == 5 and index.annotations.kinds == ("boxes",)
    coco = json.loads(path.read_text())
    for i, name in enumerate(index.paths):
        image_id = next(im["id"] for im in coco["images"] if im["file_name"] == name)
        want = [a for a in coco["annotations"] if a["image_id"] == image_id]
        boxes, labels = index.annotations.boxes_of(i)
        assert boxes.tolist() == [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in want)]
        assert labels.tolist() == [a["category_id"] for a in want]


def test_boxes_outside_their_image_are_refused_when_indexed(tmp_path):
    path = generate_detection(tmp_path / "det", n=2)
    index = SampleIndex.from_annotations(tmp_path / "det", read_coco(path, tmp_path / "det"))
    table = {"images/000.png": ImageTargets(boxes=[[10, 10, 200, 20]], labels=[1], source="hand")}
    with pytest.raises(TargetError, match=r"hand: box 0 of 'images/000.png'.*outside its 160x128"):
        index.with_targets(table)


def test_a_table_given_by_hand_cannot_be_updated_and_says_so(mvtec):
    index = SampleIndex.from_folder(mvtec / "plate", split="test")
    table = {k[len("plate/"):]: ImageTargets(mask=v.mask and v.mask[len("plate/"):])  # relative to the index root
             for k, v in mvtec_masks(mvtec).items() if k.startswith("plate/")}
    by_hand = index.with_targets(table, binary=True)
    assert by_hand.annotations.mask_path(list(by_hand.paths).index("test/stain/000.png")) == "ground_truth/stain/000_mask.png"
    with pytest.raises(ConfigError, match="plain table"):
        by_hand.update()


def test_an_index_made_from_annotations_says_how_to_update_it(tmp_path):
    path = generate_detection(tmp_path / "det", n=2)
    index = SampleIndex.from_annotations(tmp_path / "det", read_coco(path, tmp_path / "det"))
    with pytest.raises(ConfigError, match="made by SampleIndex.from_annotations"):
        index.update()


def test_update_reports_a_sample_whose_mask_file_was_deleted(tmp_path, caplog):
    # suffix_masks' missing="background" reads an image without a mask as all background: after a mask is
    # deleted, update must not call the sample "unchanged" while its defect turned into background
    from dali_backend.index.update import update_index
    from dali_backend.targets import suffix_masks

    mask = np.zeros((20, 30), np.uint8)
    mask[5:10, 5:10] = 1
    for stem in ("x", "y"):
        (tmp_path / "images/a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "masks/a").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(tmp_path / f"images/a/{stem}.png"), np.full((20, 30, 3), 90, np.uint8))
        cv2.imwrite(str(tmp_path / f"masks/a/{stem}_mask.png"), mask)
    index = SampleIndex.from_folder(tmp_path / "images", targets=suffix_masks(tmp_path / "images", tmp_path / "masks"))
    _, kept = update_index(index)
    assert kept.masks_lost == ()
    (tmp_path / "masks/a/y_mask.png").unlink()
    with caplog.at_level("WARNING", logger="dali_backend"):
        new, report = update_index(index)
    assert new.annotations.mask_path(1) is None  # the rule's answer: now all background
    assert report.masks_lost == ("a/y.png",)
    assert "1 sample lost its mask file (now all background: a/y.png)" in str(report)
    assert any("a/y.png" in r.getMessage() and "../masks/a/y_mask.png" in r.getMessage() for r in caplog.records)


def test_a_table_whose_keys_match_no_sample_is_refused(tmp_path):
    # COCO file_names relative to data/det ("images/000.png") read without root= and joined with an index of
    # data/ (class folder det): every image got no box, and the index claimed boxes
    path = generate_detection(tmp_path / "data" / "det", n=3)
    assert json.loads(path.read_text())["images"][0]["file_name"] == "images/000.png"
    with pytest.raises(TargetError, match=r"none of the 3 annotated images is a sample of this index \(the key "
                                          r"'images/000.png' looked up under .*data, where the first sample is "
                                          r"'det/images/000.png'\); give the reader the folder its paths are relative to"):
        SampleIndex.from_folder(tmp_path / "data", targets=read_coco(path))
    index = SampleIndex.from_folder(tmp_path / "data", targets=read_coco(path, tmp_path / "data" / "det"))
    assert len(index.annotations.boxes) == len(json.loads(path.read_text())["annotations"]) > 0


def test_a_binary_mask_with_two_foreground_values_is_refused_when_read(mvtec):
    # binary masks are read as 0/1 (mask > 0): a mask of classes 0, 1, 2 (a multi-class mask indexed without its
    # num_classes, e.g. --masks suffix:_mask without --mask-classes) merged classes 1 and 2 without a word
    path = mvtec / "plate" / "ground_truth" / "stain" / "001_mask.png"
    mask = cv2.imread(str(path), 0)
    assert set(np.unique(mask)) == {0, 255}
    mask[:3, :5], mask[3:4, :2] = 1, 2
    cv2.imwrite(str(path), mask)
    index = SampleIndex.from_mvtec(mvtec, "plate", "test")
    reader = SampleReader.for_index(index, seed=0)
    i = list(index.paths).index("test/stain/001.png")
    with pytest.raises(TargetError, match=r"stain/001_mask.png: a binary mask \(0 and one foreground value, read as "
                                          r"0/1\) holds the foreground values 1 \(15 pixels\), 2 \(2 pixels\), 255 "
                                          r"\(.* pixels\); .*num_classes=256"):
        index.annotations.read_mask(reader, i, (40, 48))
    assert index.annotations.read_mask(reader, i - 1, (40, 48)).max() == 1  # a 0/255 mask: read as 0/1
