"""The targets seam: a kernel per (operation, input kind) beside the image kernel (torchvision v2's
``_register_kernel_internal``). This file is the whole toy: it registers a mask kernel for the flips
(nearest, exact: a flip moves labels, never mixes them) and applies one drawn flip to an image and its
mask; nothing in the library was edited to take it."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.errors import ConfigError
from dali_backend.transforms.base import KERNELS, Transform, register_kernel


def flip_mask(op, mask: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """A label mask (H x W integers) flipped as the image: same axis, same draw."""
    return np.ascontiguousarray(np.flip(mask, axis=op.AXIS)) if int(params["flip"]) else mask


@pytest.fixture
def mask_kernel():
    base = type(T.RandomHorizontalFlip()).__mro__[1]  # the flips' shared base: one kernel serves both
    register_kernel(base, "mask", flip_mask)
    yield
    del KERNELS[(base, "mask")]


@pytest.mark.parametrize("op", [T.RandomHorizontalFlip(0.5), T.RandomVerticalFlip(0.5)])
def test_a_drawn_flip_moves_the_image_and_its_mask_together(mask_kernel, op):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)
    mask = rng.integers(0, 4, (6, 9)).astype(np.int64)
    mask[img[..., 0] > 128] = 7  # the mask names the image's bright pixels: the pairing must survive the flip
    flipped = 0
    for position in range(16):
        params = op.make_params(seed=1, epoch=0, position=position, image_size=img.shape[:2])
        out_img = op.kernel_for("image")(op, img, params)
        out_mask = op.kernel_for("mask")(op, mask, params)
        assert out_mask.dtype == mask.dtype and out_mask.shape == mask.shape
        assert np.array_equal(out_mask == 7, out_img[..., 0] > 128) or not (mask == 7).any()
        assert np.array_equal(out_img, op.apply(img, params))
        flipped += int(params["flip"])
        assert np.array_equal(out_mask, mask) == (not int(params["flip"]))
    assert 0 < flipped < 16


def test_an_operation_without_a_kernel_for_a_kind_says_how_to_register_one():
    assert T.Resize(8).kernel_for("image") is T.Resize.apply
    with pytest.raises(ConfigError, match=r"Resize has no kernel for input kind 'mask'.*register_kernel"):
        T.Resize(8).kernel_for("mask")
    with pytest.raises(ConfigError, match="image kernel"):
        register_kernel(T.Resize, "image", flip_mask)
    with pytest.raises(ConfigError, match="not an operation class"):
        register_kernel(object, "mask", flip_mask)


def test_the_attributes_read_by_the_library_are_declared_on_transform():
    """REGION and TORCHVISION have defaults on the base class (no getattr defaults); WHOLE_IMAGE, read
    nowhere, is gone."""
    for name, default in (("REGION", False), ("TORCHVISION", ()), ("GPU_TOLERANCE", None)):
        assert name in vars(Transform) and vars(Transform)[name] == default, name
    assert not hasattr(Transform, "WHOLE_IMAGE")
    assert T.RandomResizedCrop(8).REGION and not T.CenterCrop(8).REGION
