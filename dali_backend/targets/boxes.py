"""Box annotations read into one table (relative image path -> :class:`ImageTargets`): COCO JSON, YOLO txt,
Pascal VOC XML and a CSV with one row per box. Every coordinate ends as XYXY float32 in absolute pixels.

Each format's own convention, converted once here: COCO ``bbox`` is ``[x, y, width, height]`` in
absolute pixels; YOLO lines are ``class cx cy w h`` normalised by the image's width and height (read
from the image's header unless given); VOC ``bndbox`` holds 1-based inclusive pixel indices (the
devkit's: ``xmin = 1`` is the first pixel), so ``x1 = xmin - 1`` and ``x2 = xmax``; the CSV holds
XYXY pixels as they are. Class ids: COCO's ``category_id`` and YOLO's class as written; VOC and CSV
names map to ids by ``classes`` (a list: the position is the id; default the sorted names found).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import TargetError
from .records import ImageTargets, Size, check_boxes, existing, read_text, recorded

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


def _number(text, where: str, name: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise TargetError(f"{where} field {name}: {text!r} is not a number; fix the annotation") from None
    if not np.isfinite(value):
        raise TargetError(f"{where} field {name}: {text!r} is not a finite number; fix the annotation")
    return value


def _class_id(name: str, classes: Sequence[str], where: str) -> int:
    try:
        return list(classes).index(name)
    except ValueError:
        raise TargetError(f"{where}: class {name!r} is not one of the declared classes {list(classes)}; add it to "
                          "classes= or fix the annotation") from None


def _table(rows: dict[str, list], source: str) -> dict[str, ImageTargets]:
    out = {}
    for rel, boxes in sorted(rows.items()):
        xyxy = np.array([b[:4] for b in boxes], np.float32).reshape(-1, 4)
        out[rel] = ImageTargets(xyxy, np.array([b[4] for b in boxes], np.int64), None, source)
    return out


def header_size(path: Path) -> Size:
    """``(height, width)`` of the image file at ``path`` from its header (the format registry's reader)."""
    from ..formats.registry import decoded_size

    with open(path, "rb") as f:
        size = decoded_size(f.read(1 << 20))
    if size is None:
        raise TargetError(f"{path}: its size cannot be read from its header (not an image format this library "
                          "reads); pass image_sizes={relative path: (height, width)}")
    return size


@recorded("root")
def read_coco(path: str | Path, root: str | Path | None = None,
              storage_options: Mapping | None = None) -> dict[str, ImageTargets]:
    """A COCO detection file: ``images`` (``id``, ``file_name``, ``width``, ``height``) and ``annotations``
    (``image_id``, ``bbox`` = ``[x, y, w, h]``, ``category_id``). An image without annotations gets no
    boxes. ``root``: the folder ``file_name`` is relative to (checked to exist when given). ``path`` and
    ``root`` may be ``s3://`` URLs (one GET, one listing; ``storage_options`` as the index's, never recorded).

    Raises:
        TargetError: unparsable JSON (line and column), a missing or wrong field (named by its place,
            ``annotations[3].bbox``), a box outside its image or of negative size, an annotation of an
            unknown image, a file that does not exist, one file named by two image entries.
    """
    check = existing(root, storage_options)
    try:
        data = json.loads(read_text(path, storage_options))
    except json.JSONDecodeError as e:
        raise TargetError(f"{path} line {e.lineno} column {e.colno}: not valid JSON ({e.msg}); fix or re-export "
                          "the COCO file") from None
    except UnicodeDecodeError as e:
        raise TargetError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}); is it a COCO JSON file?") from None

    def field_of(entry, key: str, where: str):
        if not isinstance(entry, dict) or key not in entry:
            raise TargetError(f"{path} {where}: no field {key!r}; a COCO entry needs it (see the COCO format)")
        return entry[key]

    images, sizes, names = {}, {}, {}
    if not isinstance(data, dict):
        raise TargetError(f"{path}: the top level is a {type(data).__name__}, not a COCO object with 'images'")
    for k, img in enumerate(field_of(data, "images", "(top level)") or []):
        where = f"images[{k}]"
        rel, image_id = str(field_of(img, "file_name", where)), field_of(img, "id", where)
        size = (int(_number(field_of(img, "height", where), f"{path} {where}", "height")),
                int(_number(field_of(img, "width", where), f"{path} {where}", "width")))
        if rel in names:
            raise TargetError(f"{path} {where}: file_name {rel!r} is also images[{names[rel]}]; one entry per file")
        check(rel, f"{path} {where}")
        images[image_id], sizes[image_id], names[rel] = rel, size, k
    rows: dict[str, list] = {rel: [] for rel in images.values()}
    for k, ann in enumerate(field_of(data, "annotations", "(top level)") or []):
        where = f"{path} annotations[{k}]"
        image_id = field_of(ann, "image_id", f"annotations[{k}]")
        if image_id not in images:
            raise TargetError(f"{where}: image_id {image_id!r} is not the id of any entry in 'images'; fix the id "
                              "or add the image")
        bbox = field_of(ann, "bbox", f"annotations[{k}]")
        if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
            raise TargetError(f"{where} field bbox: {bbox!r}; give [x, y, width, height]")
        x, y, w, h = (_number(v, where, f"bbox[{i}]") for i, v in enumerate(bbox))
        label = int(_number(field_of(ann, "category_id", f"annotations[{k}]"), where, "category_id"))
        check_boxes(np.array([x, y, x + w, y + h]), sizes[image_id], f"{where} (image {images[image_id]!r})")
        rows[images[image_id]].append((x, y, x + w, y + h, label))
    return _table(rows, str(path))


@recorded("root")
def read_yolo(root: str | Path, images: str = "images", labels: str = "labels",
              image_sizes: Mapping[str, Size] | Callable[[Path], Size] | None = None) -> dict[str, ImageTargets]:
    """YOLO txt labels: ``<root>/<labels>/<stem>.txt`` for ``<root>/<images>/<stem>.<image suffix>`` (the
    same folder for both is allowed), one ``class cx cy w h`` line per box, normalised to [0, 1] by
    the image's width and height. Keys are image paths relative to ``root``. ``image_sizes``: a mapping
    of those paths, or a function of the image's path, to ``(height, width)``; default its header.

    Raises:
        TargetError: a line without five fields or with a non-number (file, line and field named), a
            box outside [0, 1] or of negative size, a label file without its image.
    """
    root = Path(root)
    label_dir, image_dir = root / labels, root / images
    if not label_dir.is_dir():
        raise TargetError(f"read_yolo: {label_dir} is not a folder; pass labels= (the folder of .txt files, "
                          f"relative to {root})")
    rows: dict[str, list] = {}
    for txt in sorted(label_dir.rglob("*.txt")):
        if txt.name == "classes.txt":  # the class names some tools write beside the labels
            continue
        stem = txt.relative_to(label_dir).with_suffix("")
        found = [image_dir / stem.with_suffix(s) for s in IMAGE_SUFFIXES if (image_dir / stem.with_suffix(s)).is_file()]
        if not found:
            raise TargetError(f"{txt}: names image {stem} (any of {', '.join(IMAGE_SUFFIXES)}) under {image_dir}, "
                              "which does not exist; remove the label file or add the image")
        image = found[0]
        rel = image.relative_to(root).as_posix()
        if isinstance(image_sizes, Mapping):
            if rel not in image_sizes:
                raise TargetError(f"read_yolo: image_sizes has no entry {rel!r} (for {txt}); add its (height, width)")
            h, w = image_sizes[rel]
        else:
            h, w = (image_sizes or header_size)(image)
        boxes = []
        for n, line in enumerate(txt.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            parts = line.split()
            if not parts:
                continue
            where = f"{txt} line {n}"
            if len(parts) != 5:
                raise TargetError(f"{where}: {len(parts)} fields in {line.strip()!r}; YOLO lines are "
                                  "'class cx cy w h' (normalised), one box per line")
            label = _number(parts[0], where, "1 (class)")
            if label != int(label) or label < 0:
                raise TargetError(f"{where} field 1 (class): {parts[0]!r} is not a class id (an integer >= 0)")
            cx, cy, bw, bh = (_number(v, where, f"{i + 2} ({name})") for i, (v, name) in
                              enumerate(zip(parts[1:], ("cx", "cy", "w", "h"))))
            box = np.array([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h])
            check_boxes(box, (h, w), f"{where} ({line.strip()!r}, normalised by {w}x{h})")
            boxes.append((*box, int(label)))
        rows[rel] = boxes
    return _table(rows, str(label_dir))


@recorded("root")
def read_voc(folder: str | Path, root: str | Path | None = None,
             classes: Sequence[str] | None = None) -> dict[str, ImageTargets]:
    """Pascal VOC XML files (every ``*.xml`` under ``folder``): ``filename`` (the key, as written: a path
    relative to ``root``, checked to exist when ``root`` is given), ``size`` (``width``, ``height``) and
    one ``object`` (``name``, ``bndbox``: ``xmin ymin xmax ymax``, 1-based inclusive) per box.

    Raises:
        TargetError: unparsable XML (line and column), a missing element (named), a box outside its
            image, a class not in ``classes``, a file that does not exist under ``root``.
    """
    import xml.etree.ElementTree as ET

    check = existing(root)
    parsed = []
    for xml in sorted(Path(folder).rglob("*.xml")):
        try:
            parsed.append((xml, ET.parse(xml).getroot()))
        except ET.ParseError as e:
            line, column = e.position
            raise TargetError(f"{xml} line {line} column {column}: not valid XML ({e}); fix or re-export it") from None

    def text(node, tag: str, xml: Path) -> str:
        found = node.find(tag)
        if found is None or found.text is None:
            raise TargetError(f"{xml}: no <{tag}> in <{node.tag}>; a VOC annotation needs it")
        return found.text.strip()

    if classes is None:
        classes = sorted({text(o, "name", xml) for xml, node in parsed for o in node.iter("object")})
    rows: dict[str, list] = {}
    for xml, node in parsed:
        rel = text(node, "filename", xml)
        check(rel, str(xml))
        size = node.find("size")
        if size is None:
            raise TargetError(f"{xml}: no <size> in <annotation>; a VOC annotation needs width and height")
        hw = (int(_number(text(size, "height", xml), str(xml), "size/height")),
              int(_number(text(size, "width", xml), str(xml), "size/width")))
        if rel in rows:
            raise TargetError(f"{xml}: {rel!r} is annotated by another XML file too; keep one annotation per image")
        boxes = []
        for k, obj in enumerate(node.iter("object")):
            bb = obj.find("bndbox")
            if bb is None:
                raise TargetError(f"{xml} object {k}: no <bndbox>; give xmin, ymin, xmax, ymax")
            x1, y1, x2, y2 = (_number(text(bb, t, xml), f"{xml} object {k}", f"bndbox/{t}")
                              for t in ("xmin", "ymin", "xmax", "ymax"))
            box = np.array([x1 - 1, y1 - 1, x2, y2])
            check_boxes(box, hw, f"{xml} object {k} (1-based bndbox {x1:g} {y1:g} {x2:g} {y2:g})")
            boxes.append((*box, _class_id(text(obj, "name", xml), classes, f"{xml} object {k}")))
        rows[rel] = boxes
    return _table(rows, str(folder))


CSV_COLUMNS = ("path", "x1", "y1", "x2", "y2", "label")


@recorded("root")
def read_box_csv(path: str | Path, root: str | Path | None = None, classes: Sequence[str] | None = None,
                 image_sizes: Mapping[str, Size] | None = None,
                 columns: Sequence[str] = CSV_COLUMNS, storage_options: Mapping | None = None) -> dict[str, ImageTargets]:
    """A CSV with a header and one row per box: ``columns`` name the image path, the XYXY pixel corners
    and the label (an integer id, or a name when ``classes`` is given). Rows of one image gather into
    its table entry (a box per row is not a conflict). ``image_sizes`` (relative path -> (h, w)):
    boxes are also checked against the image. ``path`` and ``root`` may be ``s3://`` URLs (as :func:`read_coco`).

    Raises:
        TargetError: a missing column, a row with a non-number or too few fields (line and column
            named), a box with x2 < x1 or outside its image, a file that does not exist under ``root``.
    """
    check = existing(root, storage_options)
    with io.StringIO(read_text(path, storage_options, errors="replace"), newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in columns if c not in header]
        if missing:
            raise TargetError(f"{path} line 1: no column {missing[0]!r} in the header {header}; the CSV needs a header "
                              f"with {list(columns)} (or pass columns=)")
        at = [header.index(c) for c in columns]
        rows: dict[str, list] = {}
        for n, row in enumerate(reader, start=2):
            if not any(cell.strip() for cell in row):
                continue
            where = f"{path} line {n}"
            if len(row) < len(header):
                raise TargetError(f"{where}: {len(row)} fields, the header has {len(header)}; fix the row")
            rel, cells = row[at[0]].strip(), [row[i].strip() for i in at[1:]]
            check(rel, where)
            box = [_number(v, where, name) for v, name in zip(cells[:4], columns[1:5])]
            if classes is None:
                try:
                    label = float(cells[4])
                except ValueError:
                    label = 0.5
                if label != int(label):
                    raise TargetError(f"{where} field {columns[5]}: {cells[4]!r} is not an integer class id; pass "
                                      "classes=[names] for named labels")
                label = int(label)
            else:
                label = _class_id(cells[4], classes, f"{where} field {columns[5]}")
            size = None if image_sizes is None else image_sizes.get(rel)
            check_boxes(np.array(box), size, f"{where} ({rel!r})")
            rows.setdefault(rel, []).append((*box, label))
    return _table(rows, str(path))
