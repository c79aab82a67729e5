"""The synthetic generator's formats and bit depths (issue 34): the default stays the JPEG set it was,
byte for byte; other formats hold the same scenes; 12/16-bit PNG and TIFF hold values 8 bits cannot."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from dali_backend import ConfigError
from dali_backend.core.synthetic import FORMATS, generate_defect_dataset, make_image

SIZE = (40, 30)


def files(root):
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def test_the_default_is_the_jpeg_set_it_was(tmp_path):
    """The files are exactly what the generator wrote before formats existed: cv2.imencode(".jpg", q)."""
    root = generate_defect_dataset(tmp_path / "d", n=9, size=SIZE, seed=4, quality=90, progress=False)
    written = files(root)
    assert [p.suffix for p in written] == [".jpg"] * 9
    for p in written:
        cls, number = p.stem.rsplit("_", 1)
        old = cv2.imencode(".jpg", make_image(4, cls, int(number), *SIZE), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
        assert p.read_bytes() == old
    assert set(json.loads((root / ".synthetic.json").read_text())) == {"n", "size", "fractions", "quality", "seed",
                                                                       "color", "version"}


@pytest.mark.parametrize("fmt", ["png", "bmp", "tiff"])
def test_lossless_formats_hold_the_8_bit_scene(tmp_path, fmt):
    root = generate_defect_dataset(tmp_path / fmt, n=4, size=SIZE, seed=1, format=fmt, progress=False)
    for p in files(root):
        assert p.suffix == FORMATS[fmt][0]
        cls, number = p.stem.rsplit("_", 1)
        got = cv2.imdecode(np.frombuffer(p.read_bytes(), np.uint8), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(got, make_image(1, cls, int(number), *SIZE))


@pytest.mark.parametrize("fmt, bits", [("png", 16), ("png", 12), ("tiff", 16)])
def test_high_bit_depth_files_hold_values_8_bits_cannot(tmp_path, fmt, bits):
    root = generate_defect_dataset(tmp_path / f"{fmt}{bits}", n=3, size=SIZE, seed=2, color=False, format=fmt,
                                   bit_depth=bits, progress=False)
    for p in files(root):
        got = cv2.imdecode(np.frombuffer(p.read_bytes(), np.uint8), cv2.IMREAD_UNCHANGED)
        cls, number = p.stem.rsplit("_", 1)
        eight = make_image(2, cls, int(number), *SIZE, color=False).astype(np.int64)
        top = (1 << bits) - 1
        assert got.dtype == np.uint16 and got.max() <= top
        assert np.abs(np.rint(got / (top / 255.0)) - eight).max() <= 1  # the same scene
        assert np.any(got % 257 != 0) if bits == 16 else len(np.unique(got)) > len(np.unique(eight))
    assert json.loads((root / ".synthetic.json").read_text())["bit_depth"] == bits


@pytest.mark.parametrize("kwargs, words", [({"format": "gif"}, "format='gif'; use one of jpeg, png"),
                                           ({"format": "jpeg", "bit_depth": 16}, "12 and 16 bits: png or tiff"),
                                           ({"format": "webp", "bit_depth": 12}, "webp is written at 8 bits")])
def test_unsupported_formats_and_depths_are_refused(tmp_path, kwargs, words):
    with pytest.raises(ConfigError, match=words):
        generate_defect_dataset(tmp_path / "x", n=2, size=SIZE, progress=False, **kwargs)


def test_the_demo_spec_windows_high_bit_depths():
    from dali_backend.cli.commands import demo_spec
    from dali_backend.transforms import Window

    assert demo_spec(64) == __import__("dali_backend").AugmentSpec(size=64, color="gray")
    for bits, high in ((12, 4095), (16, 65535)):
        spec = demo_spec(64, bits)
        assert spec.bit_depth == 16 and spec.transforms[1] == Window(0, high) and spec.out_channels == 3
        assert [type(op).__name__ for op in spec.transforms[2:]] == ["Clahe", "Resize", "RandomRotation", "ColorJitter"]
