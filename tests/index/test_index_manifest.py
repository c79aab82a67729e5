"""Manifest parsing: headers by name, blank labels, duplicate keys, binary junk, capped summaries."""

from __future__ import annotations

import logging

import pytest

from tests.helpers import jpeg_bytes, write
from dali_backend import ManifestError, SampleIndex


@pytest.fixture
def imgs(tmp_path):
    for i in range(3):
        write(tmp_path / "imgs" / f"{i}.jpg", jpeg_bytes(seed=i))
    return tmp_path


def _manifest(root, name: str, content: str | bytes):
    path = root / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


@pytest.mark.parametrize("name, content, match", [
    ("m.csv", "imgs/0.jpg,ok\nimgs/1.jpg,\n", r"m\.csv: line 2: empty label for 'imgs/1\.jpg'"),
    ("m.csv", "path,label\nimgs/0.jpg,ok\n\nimgs/2.jpg,  \n", r"m\.csv: line 4: empty label for 'imgs/2\.jpg'"),
    ("m.json", '{\n "imgs/0.jpg": "ok",\n "imgs/1.jpg": ""\n}', r"m\.json: line 3: empty label for 'imgs/1\.jpg'"),
    ("m.json", '{\n "imgs/0.jpg": "ok",\n "imgs/1.jpg": "ok",\n "imgs/0.jpg": "dent"\n}',
     r"m\.json: key 'imgs/0\.jpg' appears more than once \(line 4\)"),
    ("m.csv", b"imgs/0.jpg,ok\nimgs/1.jpg,o\x00k\n", r"m\.csv: line 2 contains a NUL byte"),
    ("m.csv", b"imgs/0.jpg,ok\nimgs/1.jpg,caf\xe9\n", r"m\.csv: line 2 is not UTF-8 \(byte 0xe9"),
    ("m.json", b'{"imgs/0.jpg": "ok",\n"imgs/1.jpg": "\xff"}', r"m\.json: line 2 is not UTF-8"),
    ("m.csv", "image_id,category_name\nimgs/0.jpg,ok\n", r"line 1 \('image_id', 'category_name'\) looks like a "
                                                         r"header but names no known column.*path_column="),
    ("m.csv", "path,kind\nimgs/0.jpg,ok\n", r"header on line 1 \('path', 'kind'\) has no label column.*label_column="),
])
def test_bad_manifests_name_file_and_line(imgs, name, content, match):
    path = _manifest(imgs, name, content)
    with pytest.raises(ManifestError, match=match):
        SampleIndex.from_manifest(path, progress=False)


@pytest.mark.parametrize("header", ["image_path,class", "filepath,target,subset", "Image Path,Class Name,fold",
                                    "img,category", "id,file,label,notes"])
def test_csv_header_is_read_by_name(imgs, header):
    cols = header.split(",")
    values = {"path": "imgs/{i}.jpg", "label": "{c}", "split": "train"}
    kinds = {"image_path": "path", "class": "label", "filepath": "path", "target": "label", "subset": "split",
             "Image Path": "path", "Class Name": "label", "fold": "split", "img": "path", "category": "label",
             "file": "path", "label": "label", "id": None, "notes": None}
    lines = [header]
    for i, c in enumerate(["ok", "dent", "ok"]):
        lines.append(",".join(values[kinds[k]].format(i=i, c=c) if kinds[k] else f"x{i}" for k in cols))
    path = _manifest(imgs, "m.csv", "\n".join(lines) + "\n")
    index = SampleIndex.from_manifest(path, progress=False)
    assert index.classes == ("dent", "ok")  # no phantom class named after the header
    assert list(index.paths) == ["imgs/0.jpg", "imgs/1.jpg", "imgs/2.jpg"] and index.labels.tolist() == [1, 0, 1]


def test_csv_columns_by_keyword(imgs):
    path = _manifest(imgs, "m.csv", "pic,verdict,part\nimgs/0.jpg,ok,a\nimgs/1.jpg,dent,b\nimgs/2.jpg,ok,a\n")
    with pytest.raises(ManifestError, match="looks like a header"):
        SampleIndex.from_manifest(path, progress=False)
    index = SampleIndex.from_manifest(path, path_column="pic", label_column="verdict", split_column="part", split="a",
                                      progress=False)
    assert list(index.paths) == ["imgs/0.jpg", "imgs/2.jpg"] and index.classes == ("ok",)
    with pytest.raises(ManifestError, match=r"label_column='nope' is not a column .*'pic', 'verdict', 'part'"):
        SampleIndex.from_manifest(path, path_column="pic", label_column="nope", progress=False)


def test_headerless_csv_still_works_even_with_a_label_named_like_a_column(imgs):
    path = _manifest(imgs, "m.csv", "imgs/0.jpg,label\nimgs/1.jpg,class\n")
    index = SampleIndex.from_manifest(path, progress=False)
    assert index.classes == ("class", "label") and len(index) == 2


def test_a_million_duplicates_give_a_short_summary(imgs, caplog):
    path = _manifest(imgs, "m.csv", "imgs/0.jpg,ok\n" * 200_000 + "imgs/1.jpg,dent\n")
    with caplog.at_level(logging.INFO, logger="dali_backend"):
        index = SampleIndex.from_manifest(path, progress=False)
    assert len(index) == 2 and len(index.rejected) == 199_999
    summary = index.summary()
    assert "rejected 199999 (duplicate: 199999; e.g. imgs/0.jpg: duplicate: listed again at line 2" in summary
    assert len(summary) < 600
    assert all(len(r.getMessage()) < 1000 for r in caplog.records)
