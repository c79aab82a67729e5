"""The command line's target options (dali_backend/cli/targetflags.py): ``index``, ``preview``, ``demo`` and
``diagnose`` build indexes with masks (``--masks mvtec`` / ``suffix:SUFFIX``) and boxes (``--annotations
FORMAT:PATH``) equal to the library's builders; the output and ``summary()`` show the targets; bad values
are one line naming the option and the fix, exit status 2."""

from __future__ import annotations

import csv
from pathlib import Path

import cv2
import numpy as np
import pytest

from dali_backend import SampleIndex
from dali_backend.cli.pictures import overlay_targets
from dali_backend.core.defects import generate_detection, generate_mvtec
from dali_backend.core.reading import SampleReader
from dali_backend.targets import read_coco
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A synthetic MVTec AD category (mv/plate) and a flat COCO-annotated folder (det)."""
    root = tmp_path_factory.mktemp("targets-cli")
    generate_mvtec(root / "mv", n_train=1, n_good=2, n_defect=2, size=(64, 48))
    generate_detection(root / "det", n=4, size=(64, 48))
    return root


def same_targets(a: SampleIndex, b: SampleIndex) -> None:
    assert list(a.paths) == list(b.paths) and a.annotations.kinds == b.annotations.kinds
    assert a.labels.tolist() == b.labels.tolist() and list(a.classes) == list(b.classes)
    for i in range(len(a)):
        assert a.annotations.mask_path(i) == b.annotations.mask_path(i)
        for x, y in zip(a.annotations.boxes_of(i), b.annotations.boxes_of(i)):
            assert np.array_equal(x, y)


def test_index_masks_mvtec_is_from_mvtec(data, tmp_path, capsys):
    rc, out, err = run_cli(["index", str(data / "mv" / "plate"), "--split", "test", "--masks", "mvtec",
                            "--out", str(tmp_path / "i.npz")], capsys)
    assert rc == 0, err
    assert "targets: masks: 4 of 6 images with a mask file" in out and "class ids 0..1" in out
    got = SampleIndex.load(tmp_path / "i.npz")
    same_targets(got, SampleIndex.from_mvtec(data / "mv", "plate", "test"))
    assert "targets: masks: 4 of 6 images" in got.summary()  # summary() shows them too


def test_index_annotations_alone_is_the_annotated_images(data, tmp_path, capsys):
    rc, out, err = run_cli(["index", str(data / "det"), "--annotations", f"coco:{data / 'det' / 'annotations.json'}",
                            "--out", str(tmp_path / "i.npz")], capsys)
    assert rc == 0, err
    want = SampleIndex.from_annotations(data / "det", read_coco(data / "det" / "annotations.json", data / "det"))
    boxes = len(want.annotations.boxes)
    assert f"targets: boxes: {boxes} on 4 of 4 images" in out
    same_targets(SampleIndex.load(tmp_path / "i.npz"), want)


def test_class_folders_label_by_folder_and_join_the_boxes(data, tmp_path, capsys):
    rc, _, err = run_cli(["index", str(data / "det"), "--class-folders", "--annotations",
                          f"coco:{data / 'det' / 'annotations.json'}", "--out", str(tmp_path / "i.npz")], capsys)
    assert rc == 0, err
    got = SampleIndex.load(tmp_path / "i.npz")
    assert list(got.classes) == ["images"] and got.annotations.kinds == ("boxes",)  # det/images/ is the class folder


def test_suffix_masks_in_a_mask_dir_with_declared_classes_and_a_box_csv(tmp_path, capsys):
    for k in range(3):
        cv2.imwrite(str(tmp_path / "img" / "a" / f"{k}.png") if (tmp_path / "img" / "a").mkdir(parents=True, exist_ok=True)
                    is None else "", np.full((16, 20, 3), 60 + k, np.uint8))
    (tmp_path / "m" / "a").mkdir(parents=True)
    mask = np.zeros((16, 20), np.uint8)
    mask[2:6, 3:9] = 2
    cv2.imwrite(str(tmp_path / "m" / "a" / "1_seg.png"), mask)
    rc, out, err = run_cli(["index", str(tmp_path / "img"), "--masks", "suffix:_seg", "--mask-dir", str(tmp_path / "m"),
                            "--mask-classes", "3", "--out", str(tmp_path / "i.npz")], capsys)
    assert rc == 0, err
    assert "masks: 1 of 3 images with a mask file" in out and "class ids 0..2" in out and "0/1" not in out
    got = SampleIndex.load(tmp_path / "i.npz")
    assert got.annotations.read_mask(SampleReader.for_index(got, seed=0), 1, (16, 20)).max() == 2  # ids kept, not read as 0/1
    with open(tmp_path / "boxes.csv", "w", newline="") as f:
        csv.writer(f).writerows([["path", "x1", "y1", "x2", "y2", "label"], ["a/0.png", 1, 1, 5, 6, "bolt"],
                                 ["a/0.png", 2, 2, 9, 9, "nut"], ["a/2.png", 0, 0, 20, 16, "nut"]])
    rc, out, err = run_cli(["index", str(tmp_path / "img"), "--annotations", f"csv:{tmp_path / 'boxes.csv'}",
                            "--box-classes", "bolt,nut", "--out", str(tmp_path / "j.npz")], capsys)
    assert rc == 0, err
    assert "boxes: 3 on 2 of 2 images (per box class: 0: 1, 1: 2)" in out


def test_update_reads_the_targets_again(data, tmp_path, capsys):
    out = str(tmp_path / "i.npz")
    assert run_cli(["index", str(data / "mv" / "plate"), "--split", "test", "--masks", "mvtec", "--out", out], capsys)[0] == 0
    rc, text, err = run_cli(["index", "--update", out], capsys)
    assert rc == 0 and "targets: masks: 4 of 6 images" in text, err


@pytest.mark.parametrize("extra, want", [
    (["--masks", "fuzzy"], "argument --masks: 'fuzzy' is not a mask rule; pass mvtec"),
    (["--masks", "suffix:"], "pass mvtec (an MVTec AD category"),
    (["--annotations", "coco"], "argument --annotations: 'coco': pass FORMAT:PATH with FORMAT one of coco, yolo, voc, csv"),
    (["--annotations", "json:a.json"], "FORMAT one of coco, yolo, voc, csv"),
    (["--annotations", "coco:missing.json"], "'missing.json' is not a COCO JSON file (it does not exist)"),
    (["--annotations", "yolo:{data}/det/annotations.json"], "is not a folder holding images/ and labels/"),
    (["--mask-classes", "1", "--masks", "suffix:_m"], "argument --mask-classes: 1 is out of range"),
    (["--mask-dir", "{data}"], "--mask-dir {data} applies to --masks suffix:SUFFIX only"),
    (["--masks", "mvtec", "--mask-classes", "3"], "--mask-classes 3 applies to --masks suffix:SUFFIX only (MVTec AD"),
    (["--class-folders"], "--class-folders applies to --annotations only"),
    (["--box-classes", "a,b", "--annotations", "coco:{data}/det/annotations.json"],
     "--box-classes a,b applies to voc: and csv: annotations only"),
])
def test_bad_target_options_name_the_option_and_the_fix(data, tmp_path, capsys, extra, want):
    extra = [x.format(data=data) for x in extra]
    rc, _, err = run_cli(["-q", "index", str(data / "mv" / "plate"), "--split", "test", *extra, "--out",
                          str(tmp_path / "i.npz")], capsys)
    assert rc == 2 and want.format(data=data) in err and err.count("\n") == 1, err


def test_masks_and_boxes_read_relative_to_two_folders_are_refused(data, tmp_path, capsys):
    (tmp_path / "m").mkdir()
    rc, _, err = run_cli(["-q", "index", str(data / "det"), "--masks", "suffix:_m", "--mask-dir", str(tmp_path / "m"),
                          "--annotations", f"coco:{data / 'det' / 'annotations.json'}", "--out", str(tmp_path / "i.npz")],
                         capsys)
    assert rc == 2 and "--masks suffix:_m and --annotations coco:" in err
    assert "their paths are relative to different folders" in err and "keep the masks beside the images" in err


def test_a_wrong_annotation_file_is_a_typed_error_naming_it(data, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [')
    rc, _, err = run_cli(["index", str(data / "det"), "--annotations", f"coco:{bad}", "--out", str(tmp_path / "i.npz")],
                         capsys)
    assert rc == 2 and f"{bad} line 1" in err and "not valid JSON" in err, err


@pytest.mark.parametrize("source", ["mvtec split folder", "index file with masks", "COCO folder"])
def test_preview_draws_the_masks_and_boxes(data, tmp_path, capsys, source):
    where, extra = data / "mv" / "plate" / "test", ["--masks", "mvtec"]  # a category's test split: masks found above
    if source == "index file with masks":
        assert run_cli(["index", str(data / "mv" / "plate"), "--split", "test", *extra, "--out",
                        str(tmp_path / "m.npz")], capsys)[0] == 0
        where, extra = tmp_path / "m.npz", []
    elif source == "COCO folder":
        where, extra = data / "det", ["--annotations", f"coco:{data / 'det' / 'annotations.json'}"]
    rc, out, err = run_cli(["preview", str(where), *extra, "--backend", "torch", "--n", "3", "--size", "48",
                            "--color", "rgb", "--out", str(tmp_path / "p.png")], capsys)
    assert rc == 0 and "preview of 3 draws" in out, err
    shown = cv2.imread(str(tmp_path / "p.png"))[..., ::-1].astype(int)
    r, g, b = shown[..., 0], shown[..., 1], shown[..., 2]
    drawn = ((g - np.maximum(r, b)) > 60) if source != "COCO folder" else ((r > 240) & (g > 200) & (b < 30))
    assert drawn.sum() > 50, source  # the masks' green tint, or the boxes' yellow


def test_mvtec_masks_need_an_mvtec_layout(data, tmp_path, capsys):
    rc, _, err = run_cli(["-q", "index", str(data / "det"), "--masks", "mvtec", "--out", str(tmp_path / "i.npz")], capsys)
    assert rc == 2 and "--masks mvtec: " in err and "is neither an MVTec AD category" in err, err


def test_overlay_tints_the_mask_and_draws_the_boxes():
    tile = np.full((20, 30, 3), 100, np.uint8)
    mask = np.zeros((20, 30), np.uint8)
    mask[5:10, 5:10] = 1
    out = overlay_targets(tile, mask, np.array([[15, 2, 25, 12]], np.float32))
    assert (out[5:10, 5:10] == [33, 203, 33]).all() and (out[0:5, 0:5] == 100).all()
    assert (out[2, 15:25] == [255, 220, 0]).all() and (out[3:11, 16:24] == 100).all()  # the box's edge, not inside
    assert (tile == 100).all()  # a copy


def test_demo_runs_batches_of_a_folder_with_boxes(data, capsys):
    rc, out, err = run_cli(["demo", "--data", str(data / "det"), "--annotations",
                            f"coco:{data / 'det' / 'annotations.json'}", "--epochs", "1", "--out-size", "32",
                            "--backend", "torch", "--workers", "0", "--batch-size", "2"], capsys)
    assert rc == 0, err
    assert "epoch 0: 4 images with boxes" in out and "boxes (0 dropped by the box policy)" in out


@pytest.mark.parametrize("argv, want", [
    (["--masks", "--data", "{data}/det"], "demo --masks without a RULE runs a synthetic MVTec AD set"),
    (["--masks", "suffix:_mask"], "demo --masks RULE / --annotations need --data DIR"),
])
def test_demo_target_options_need_their_data(data, capsys, argv, want):
    rc, _, err = run_cli(["demo", *[a.format(data=data) for a in argv]], capsys)
    assert rc == 2 and want in err, err


def test_diagnose_runs_batches_with_masks(data, capsys):
    rc, out, err = run_cli(["-q", "diagnose", str(data / "mv" / "plate" / "test"), "--masks", "mvtec", "--batches",
                            "2", "--batch-size", "2", "--backend", "torch", "--device", "cpu"], capsys)
    assert rc == 0 and "Verdict:" in out, err


def test_yolo_and_voc_annotations_from_the_command_line(tmp_path, capsys):
    """A YOLO folder (images/, labels/) and a VOC folder of .xml files: the same boxes as the readers give."""
    from dali_backend.targets import read_voc, read_yolo

    root = tmp_path / "d"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    (root / "voc").mkdir()
    for k in range(2):
        cv2.imwrite(str(root / "images" / f"{k}.png"), np.full((40, 50, 3), 80, np.uint8))
        (root / "labels" / f"{k}.txt").write_text(f"{k} 0.5 0.5 0.4 0.2\n")
        (root / "voc" / f"{k}.xml").write_text(
            f"<annotation><filename>images/{k}.png</filename><size><width>50</width><height>40</height></size>"
            f"<object><name>{'bolt' if k else 'nut'}</name><bndbox><xmin>3</xmin><ymin>4</ymin><xmax>20</xmax>"
            "<ymax>30</ymax></bndbox></object></annotation>")
    for source, table, extra in (("yolo", read_yolo(root), []),
                                 ("voc", read_voc(root / "voc", root, classes=["nut", "bolt"]),
                                  ["--box-classes", "nut,bolt"])):
        out = tmp_path / f"{source}.npz"
        where = root if source == "yolo" else root / "voc"
        rc, text, err = run_cli(["-q", "index", str(root), "--annotations", f"{source}:{where}", *extra, "--out",
                                 str(out)], capsys)
        assert rc == 0 and "boxes: 2 on 2 of 2 images (per box class: 0: 1, 1: 1)" in text, err
        same_targets(SampleIndex.load(out), SampleIndex.from_annotations(root, table))
