"""The preset decodes gray by default: on a colour data set it says so once, naming color="rgb" (issue 36)."""

from __future__ import annotations

import warnings

import pytest

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, ColorDroppedWarning, ImageDataset, SampleIndex
from dali_backend.transforms import Grayscale, Resize


def folder(root, color):
    for k in range(4):
        write(root / ("good" if k % 2 else "bad") / f"{k}.jpg", jpeg_bytes(seed=k, color=color(k)))
    return SampleIndex.from_folder(root, progress=False)


def no_colour_warning(index, spec):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ColorDroppedWarning)
        ImageDataset(index, spec)


def test_colour_files_under_the_default_gray_warn_once_naming_rgb(tmp_path):
    index = folder(tmp_path, color=lambda k: k == 3)  # one colour file among gray ones is enough
    with pytest.warns(ColorDroppedWarning, match=r'color="rgb"') as seen:
        ImageDataset(index, AugmentSpec(size=32))
    assert "good/3.jpg" in str(seen[0].message)
    no_colour_warning(index, AugmentSpec(size=64))  # once per index and process


@pytest.mark.parametrize("spec", [AugmentSpec(size=32, color="rgb"), AugmentSpec(size=32, color="gray"),
                                  AugmentSpec(ops=[Grayscale(3), Resize((32, 32))]), AugmentSpec(ops=[Resize((32, 32))])],
                         ids=["rgb", "gray-asked", "grayscale-op", "ops-rgb"])
def test_a_spec_that_chooses_its_colour_does_not_warn(tmp_path, spec):
    no_colour_warning(folder(tmp_path, color=lambda k: True), spec)


def test_a_gray_data_set_does_not_warn(tmp_path):
    no_colour_warning(folder(tmp_path, color=lambda k: False), AugmentSpec(size=32))
