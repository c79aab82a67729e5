"""SampleIndex.load on damaged files: always IndexFileError naming the file and the fix, never a huge allocation."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from tests.helpers import jpeg_bytes, write
from dali_backend import IndexFileError, SampleIndex


@pytest.fixture
def saved(tmp_path):
    for i in range(4):
        write(tmp_path / "data" / ("a" if i < 2 else "b") / f"{i}.jpg", jpeg_bytes(seed=i))
    path = tmp_path / "i.npz"
    SampleIndex.from_folder(tmp_path / "data", progress=False).save(path)
    return path


def _arrays(path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _resave(path, arrays: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _edit_array(name, fn):
    def damage(path):
        arrays = _arrays(path)
        arrays[name] = fn(arrays[name])
        _resave(path, arrays)
    return damage


def _edit_meta(**changes):
    def damage(path):
        arrays = _arrays(path)
        meta = json.loads(arrays["meta"].tobytes())
        meta.update(changes)
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        _resave(path, arrays)
    return damage


def _huge_declared_shape(path):
    """labels.npy declares 1e12 int64 entries (8 TB) but holds a few bytes."""
    arrays = _arrays(path)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)})
    with zipfile.ZipFile(path, "w") as zf:
        for name, a in arrays.items():
            if name == "labels":
                zf.writestr("labels.npy", buf.getvalue() + a.tobytes())
            else:
                member = io.BytesIO()
                np.save(member, a)
                zf.writestr(f"{name}.npy", member.getvalue())


def _wrong_member(path):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("something_else.npy", b"\x93NUMPY")


def _bytes(fn):
    def damage(path):
        path.write_bytes(fn(path.read_bytes()))
    return damage


DAMAGES = {
    "truncated": _bytes(lambda b: b[: len(b) // 2]),
    "random bytes": _bytes(lambda b: np.random.default_rng(0).integers(0, 256, len(b), dtype=np.uint8).tobytes()),
    "empty": _bytes(lambda b: b""),
    "zip with a wrong member": _wrong_member,
    "meta not JSON": _edit_array("meta", lambda a: np.frombuffer(b"{not json", np.uint8)),
    "meta not UTF-8": _edit_array("meta", lambda a: np.frombuffer(b"\xff\xfe", np.uint8)),
    "meta a list": _edit_array("meta", lambda a: np.frombuffer(b"[1, 2]", np.uint8)),
    "classes is a number": _edit_meta(classes=5),
    "rejected is a string": _edit_meta(rejected="x"),
    "ignored is a list": _edit_meta(ignored=[1]),
    "fingerprint missing": _edit_meta(fingerprint=None),
    "root is a number": _edit_meta(root=3),
    "arrays of mismatched lengths": _edit_array("sizes", lambda a: a[:-1]),
    "offsets past the data": _edit_array("path_offsets", lambda a: a + np.arange(a.size)),
    "offsets not monotonic": _edit_array("path_offsets", lambda a: a[[0, 2, 1, 3, 4]]),
    "labels out of range": _edit_array("labels", lambda a: a + 7),
    "labels of wrong dtype": _edit_array("labels", lambda a: a.astype(np.float64)),
    "labels 2-D": _edit_array("labels", lambda a: a.reshape(2, 2)),
    "huge declared shape": _huge_declared_shape,
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_index_file_raises_index_file_error(saved, damage):
    DAMAGES[damage](saved)
    with pytest.raises(IndexFileError) as e:
        SampleIndex.load(saved)
    assert str(saved) in str(e.value) and "rebuild" in str(e.value).lower()


def test_a_folder_or_missing_path_is_an_index_file_error(tmp_path):
    for path in (tmp_path, tmp_path / "nope.npz"):
        with pytest.raises(IndexFileError, match=str(path)):
            SampleIndex.load(path)
