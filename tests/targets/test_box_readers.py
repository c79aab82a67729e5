"""Box annotations: each format read into the same table (XYXY float32 absolute pixels, int64 ids),
and each bad annotation refused with the file, the line or field, the value and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from dali_backend import TargetError
from dali_backend.targets.boxes import header_size
from dali_backend.targets import ImageTargets, merge_sources, read_box_csv, read_coco, read_voc, read_yolo

# two images: a.jpg 40 x 60 (h x w) with two boxes, sub/b.png 30 x 20 with one; c.jpg with none
SIZES = {"a.jpg": (40, 60), "sub/b.png": (30, 20), "c.jpg": (10, 10)}
BOXES = {"a.jpg": ([[5, 6, 25, 30], [0, 0, 60, 40]], [3, 1]), "sub/b.png": ([[2.5, 4, 10, 29.5]], [2]), "c.jpg": ([], [])}


def write_images(root: Path) -> Path:
    for rel, (h, w) in SIZES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(root / rel), np.zeros((h, w, 3), np.uint8))
    return root


def assert_table(table: dict[str, ImageTargets], keys=SIZES):
    assert sorted(table) == sorted(keys)
    for rel in keys:
        boxes, labels = BOXES[rel]
        t = table[rel]
        assert t.boxes.dtype == np.float32 and t.labels.dtype == np.int64 and t.boxes.shape == (len(labels), 4)
        np.testing.assert_allclose(t.boxes, np.array(boxes, np.float32).reshape(-1, 4), atol=1e-5)
        assert t.labels.tolist() == labels


def coco(root: Path, **changes) -> Path:
    ids = {rel: k + 1 for k, rel in enumerate(SIZES)}
    data = {"images": [{"id": ids[rel], "file_name": rel, "height": h, "width": w} for rel, (h, w) in SIZES.items()],
            "annotations": [{"id": 10 * ids[rel] + j, "image_id": ids[rel], "category_id": c,
                             "bbox": [x1, y1, x2 - x1, y2 - y1]}
                            for rel, (boxes, labels) in BOXES.items() for j, ((x1, y1, x2, y2), c) in enumerate(zip(boxes, labels))],
            "categories": [{"id": c, "name": f"c{c}"} for c in (1, 2, 3)]}
    for key, fn in changes.items():
        fn(data)
    path = root / "instances.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def test_coco(tmp_path):
    root = write_images(tmp_path)
    assert_table(read_coco(coco(root), root=root))
    assert read_coco(coco(root))["a.jpg"].source.endswith("instances.json")


@pytest.mark.parametrize("change, match", [
    (lambda d: d["annotations"][0].update(bbox=[5, 6, -2, 3]), r"annotations\[0\].*x2 < x1.*swap"),
    (lambda d: d["annotations"][1].update(bbox=[50, 0, 20, 10]), r"annotations\[1\].*\[50, 0, 70, 10\].*outside its 60x40"),
    (lambda d: d["annotations"][0].update(image_id=99), r"annotations\[0\]: image_id 99 is not the id"),
    (lambda d: d["annotations"][2].pop("bbox"), r"annotations\[2\]: no field 'bbox'"),
    (lambda d: d["annotations"][0].update(bbox=[1, "x", 2, 3]), r"annotations\[0\] field bbox\[1\]: 'x' is not a number"),
    (lambda d: d["images"][1].update(file_name="a.jpg"), r"images\[1\]: file_name 'a.jpg' is also images\[0\]"),
    (lambda d: d["images"][2].update(file_name="gone.jpg"), r"images\[2\]: names 'gone.jpg', which is not a file"),
])
def test_coco_refusals(tmp_path, change, match):
    root = write_images(tmp_path)
    with pytest.raises(TargetError, match=match):
        read_coco(coco(root, change=change), root=root)


def test_a_corrupt_coco_file_names_its_line(tmp_path):
    path = coco(write_images(tmp_path))
    lines = path.read_text().splitlines()
    lines[7] = lines[7].replace(",", ";", 1) if "," in lines[7] else lines[7] + " ;"
    path.write_text("\n".join(lines))
    with pytest.raises(TargetError, match=r"instances.json line 8 column \d+: not valid JSON"):
        read_coco(path)


def yolo(root: Path, lines: dict[str, str] | None = None) -> Path:
    images = write_images(root / "images")
    for rel, (boxes, labels) in BOXES.items():
        h, w = SIZES[rel]
        txt = root / "labels" / Path(rel).with_suffix(".txt")
        txt.parent.mkdir(parents=True, exist_ok=True)
        rows = [f"{c} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}"
                for (x1, y1, x2, y2), c in zip(boxes, labels)]
        txt.write_text("\n".join(rows) + "\n")
    for rel, text in (lines or {}).items():
        (root / "labels" / rel).write_text(text)
    (root / "labels" / "classes.txt").write_text("c0\nc1\nc2\nc3\n")
    return images


def test_yolo_sizes_from_the_headers_or_given(tmp_path):
    yolo(tmp_path)
    expected = {f"images/{k}": v for k, v in BOXES.items()}
    assert header_size(tmp_path / "images" / "a.jpg") == SIZES["a.jpg"]
    table = read_yolo(tmp_path, image_sizes=lambda path: cv2.imread(str(path)).shape[:2])
    assert sorted(table) == sorted(expected)
    for rel, (boxes, labels) in expected.items():
        np.testing.assert_allclose(table[rel].boxes, np.array(boxes, np.float32).reshape(-1, 4), atol=1e-3)
        assert table[rel].labels.tolist() == labels
    given = read_yolo(tmp_path, image_sizes={f"images/{k}": v for k, v in SIZES.items()})
    assert all(np.array_equal(given[k].boxes, table[k].boxes) for k in table)


@pytest.mark.parametrize("text, match", [
    ("1 0.5 0.5 0.2\n", r"a.txt line 1: 4 fields in '1 0.5 0.5 0.2'"),
    ("1 0.5 0.5 0.2 0.2\n2 0.5 abc 0.2 0.2\n", r"a.txt line 2 field 3 \(cy\): 'abc' is not a number"),
    ("1.5 0.5 0.5 0.2 0.2\n", r"a.txt line 1 field 1 \(class\): '1.5' is not a class id"),
    ("1 0.95 0.5 0.2 0.2\n", r"a.txt line 1 .*outside its 60x40"),
    ("1 0.5 0.5 -0.2 0.2\n", r"a.txt line 1 .*x2 < x1"),
])
def test_yolo_refusals(tmp_path, text, match):
    yolo(tmp_path, {"a.txt": text})
    with pytest.raises(TargetError, match=match):
        read_yolo(tmp_path, image_sizes={f"images/{k}": v for k, v in SIZES.items()})


def test_a_yolo_label_without_its_image_is_refused(tmp_path):
    yolo(tmp_path, {"ghost.txt": "0 0.5 0.5 0.1 0.1\n"})
    with pytest.raises(TargetError, match=r"ghost.txt: names image ghost .* which does not exist"):
        read_yolo(tmp_path, image_sizes={f"images/{k}": v for k, v in SIZES.items()})


VOC = """<annotation><folder>x</folder><filename>{name}</filename>
<size><width>{w}</width><height>{h}</height><depth>3</depth></size>
{objects}</annotation>"""
OBJECT = "<object><name>{c}</name><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>\n"
CLASSES = ["c0", "c1", "c2", "c3"]


def voc(root: Path) -> Path:
    folder = root / "Annotations"
    folder.mkdir(parents=True)
    for k, (rel, (boxes, labels)) in enumerate(BOXES.items()):
        h, w = SIZES[rel]
        objects = "".join(OBJECT.format(c=CLASSES[c], x1=x1 + 1, y1=y1 + 1, x2=x2, y2=y2)
                          for (x1, y1, x2, y2), c in zip(boxes, labels))
        (folder / f"{k}.xml").write_text(VOC.format(name=rel, w=w, h=h, objects=objects))
    return folder


def test_voc_one_based_inclusive_corners(tmp_path):
    root = write_images(tmp_path)
    assert_table(read_voc(voc(root), root=root, classes=CLASSES))
    named = read_voc(voc(tmp_path / "again"), classes=None)  # default ids: the sorted names found
    assert named["a.jpg"].labels.tolist() == [2, 0]


@pytest.mark.parametrize("edit, match", [
    (lambda s: s.replace("<xmax>25</xmax>", "<xmax>4</xmax>"), r"0.xml object 0 .*x2 < x1"),
    (lambda s: s.replace("<xmax>60</xmax>", "<xmax>61</xmax>"), r"0.xml object 1 .*outside its 60x40"),
    (lambda s: s.replace("<name>c3</name>", "<name>dog</name>"), r"0.xml object 0: class 'dog' is not one of"),
    (lambda s: s.replace("<ymin>7</ymin>", ""), r"0.xml: no <ymin> in <bndbox>"),
    (lambda s: s.replace("</size>", ""), r"0.xml line \d+ column \d+: not valid XML"),
    (lambda s: s.replace("a.jpg", "gone.jpg"), r"0.xml: names 'gone.jpg', which is not a file"),
])
def test_voc_refusals(tmp_path, edit, match):
    root = write_images(tmp_path)
    folder = voc(root)
    (folder / "0.xml").write_text(edit((folder / "0.xml").read_text()))
    with pytest.raises(TargetError, match=match):
        read_voc(folder, root=root, classes=CLASSES)


def box_csv(root: Path, extra: str = "") -> Path:
    rows = ["path,x1,y1,x2,y2,label"] + [f"{rel},{x1},{y1},{x2},{y2},{c}" for rel, (boxes, labels) in BOXES.items()
                                          for (x1, y1, x2, y2), c in zip(boxes, labels)]
    path = root / "boxes.csv"
    path.write_text("\n".join(rows) + "\n" + extra)
    return path


def test_csv_rows_of_one_image_gather(tmp_path):
    root = write_images(tmp_path)
    assert_table(read_box_csv(box_csv(root), root=root, image_sizes=SIZES), keys=["a.jpg", "sub/b.png"])
    named = tmp_path / "named.csv"
    named.write_text("path,x1,y1,x2,y2,label\nc.jpg,1,1,3,3,c2\nc.jpg,0,0,9,9,c0\n")
    assert read_box_csv(named, classes=CLASSES)["c.jpg"].labels.tolist() == [2, 0]


@pytest.mark.parametrize("extra, match", [
    ("c.jpg,1,1,3\n", r"boxes.csv line 5: 4 fields, the header has 6"),
    ("c.jpg,1,one,3,3,0\n", r"boxes.csv line 5 field y1: 'one' is not a number"),
    ("c.jpg,5,1,3,3,0\n", r"boxes.csv line 5 \('c.jpg'\): box .* x2 < x1"),
    ("c.jpg,1,1,3,11,0\n", r"boxes.csv line 5 \('c.jpg'\): box .* outside its 10x10"),
    ("c.jpg,1,1,3,3,cat\n", r"boxes.csv line 5 field label: 'cat' is not an integer class id; pass classes="),
    ("gone.jpg,1,1,3,3,0\n", r"boxes.csv line 5: names 'gone.jpg', which is not a file"),
])
def test_csv_refusals(tmp_path, extra, match):
    root = write_images(tmp_path)
    with pytest.raises(TargetError, match=match):
        read_box_csv(box_csv(root, extra), root=root, image_sizes=SIZES)


def test_a_csv_without_the_columns_names_them(tmp_path):
    path = tmp_path / "boxes.csv"
    path.write_text("file,x1,y1,x2,y2,label\na.jpg,0,0,1,1,0\n")
    with pytest.raises(TargetError, match=r"boxes.csv line 1: no column 'path'.*columns="):
        read_box_csv(path)
    assert read_box_csv(path, columns=("file", "x1", "y1", "x2", "y2", "label"))["a.jpg"].labels.tolist() == [0]


def test_two_sources_for_one_image_are_refused_unless_they_agree(tmp_path):
    root = write_images(tmp_path)
    from_coco, from_csv = read_coco(coco(root)), read_box_csv(box_csv(root))
    assert sorted(merge_sources(from_coco, from_csv)) == sorted(SIZES)  # the same boxes: no conflict
    other = read_box_csv(box_csv(root, "a.jpg,1,1,3,3,0\n"))
    with pytest.raises(TargetError, match=r"'a.jpg': two annotation sources give different boxes: .*instances.json and .*boxes.csv"):
        merge_sources(from_coco, other)
    masks = {"a.jpg": ImageTargets(mask="masks/a.png", source="rule")}
    merged = merge_sources(from_coco, masks)
    assert merged["a.jpg"].mask == "masks/a.png" and merged["a.jpg"].labels.tolist() == [3, 1]
    with pytest.raises(TargetError, match="different masks"):
        merge_sources(masks, {"a.jpg": ImageTargets(mask="other/a.png", source="rule 2")})
