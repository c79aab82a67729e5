"""Absolute normalisation: the float outputs against constants written out here, computed by hand from
the uint8 levels, on both backends.

The equivalence tests compare the backends with each other and the normalisation tests compare the
outputs with ``spec.normalize_coefficients()`` itself: a wrong constant in the library (say ImageNet's
std of channel 1 typed as 0.456) passes them all. These tests hold the numbers themselves: the
defaults are torchvision's ImageNet constants (``torchvision.transforms.Normalize`` in its reference
training scripts: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.helpers import KINDS
from dali_backend import AugmentSpec, DaliLoader, WeightedSampler
from dali_backend import transforms as T
from fallback import ImageDataset

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # written out on purpose: not imported from the library
IMAGENET_STD = (0.229, 0.224, 0.225)

SPECS = {
    # the preset with its randomness off: its default mean/std are ImageNet's
    "preset-gray": (AugmentSpec(size=(20, 28), rotate_deg=0, brightness=0, contrast=0), IMAGENET_MEAN, IMAGENET_STD),
    "preset-rgb": (AugmentSpec(size=(20, 28), color="rgb", clahe=None, rotate_deg=0, brightness=0, contrast=0),
                   IMAGENET_MEAN, IMAGENET_STD),
    # an operation list without Normalize: float32 on [0, 1] (torchvision's ToTensor)
    "ops-plain": (AugmentSpec(ops=[T.Resize((20, 28))]), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
    # an operation list with Normalize: the constants given
    "ops-normalize": (AugmentSpec(ops=[T.Resize((20, 28)), T.Normalize((0.5, 0.25, 0.125), (0.5, 0.2, 0.1))]),
                      (0.5, 0.25, 0.125), (0.5, 0.2, 0.1)),
}


def test_the_documented_defaults_are_imagenets():
    from dali_backend.core.augment import IMAGENET_MEAN as mean, IMAGENET_STD as std

    assert mean == IMAGENET_MEAN and std == IMAGENET_STD
    spec = AugmentSpec()
    assert spec.mean == IMAGENET_MEAN and spec.std == IMAGENET_STD and spec.dtype == "float32"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SPECS)
def test_float_output_is_the_literal_formula_of_the_uint8_levels(defect_index, kind, name):
    """``out[c] = (level / 255 - mean[c]) / std[c]`` with the literal constants, in float64, against the
    loader's float32 output (float32 arithmetic: within 1e-5 on values of at most ~2.7)."""
    spec, mean, std = SPECS[name]
    assert spec.dtype == "float32"
    levels_ds = ImageDataset(defect_index, dataclasses.replace(spec, dtype="uint8"), seed=3)
    float_ds = ImageDataset(defect_index, spec, seed=3)

    def run(ds):
        loader = DaliLoader(ds, batch_size=5, sampler=WeightedSampler(defect_index, num_samples=10, seed=1), **KINDS[kind])
        try:
            return torch.cat([x for x, _ in loader])
        finally:
            loader.close()

    levels, got = run(levels_ds), run(float_ds)
    assert levels.dtype == torch.uint8 and got.dtype == torch.float32 and levels.shape == got.shape == (10, 3, 20, 28)
    assert len(torch.unique(levels)) > 20  # real images, not a constant
    m = torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)
    want = (levels.to(torch.float64) / 255.0 - m) / s
    err = (got.to(torch.float64) - want).abs().max().item()
    assert err <= 1e-5, (name, kind, err)


@pytest.mark.parametrize("level, channel, value", [(0, 0, -0.485 / 0.229), (255, 1, (1 - 0.456) / 0.224),
                                                   (128, 2, (128 / 255 - 0.406) / 0.225)])
def test_single_levels_by_hand(level, channel, value):
    """Three numbers worked out on paper, through the shared normalisation both backends call."""
    from dali_backend.core.tensors import normalize

    x = torch.full((1, 1, 2, 2), level, dtype=torch.uint8)
    out = normalize(x, AugmentSpec(size=2))
    assert out.shape == (1, 3, 2, 2)
    assert abs(out[0, channel, 0, 0].item() - value) <= 1e-5, (out[0, :, 0, 0], value)
