"""RandomErasing: a box per draw on the normalised batch, the same code after either backend."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from dali_backend import AugmentSpec, ConfigError, DaliLoader, WeightedSampler
from dali_backend import transforms as T
from dali_backend.transforms.torchvision import translate
from fallback import ImageDataset

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def recipe(**erasing):
    return AugmentSpec(ops=[T.Resize((24, 32)), T.Normalize(MEAN, STD), T.RandomErasing(**erasing)])


def test_boxes_fit_follow_p_and_are_pure_functions_of_the_draw():
    spec = recipe(p=0.5)
    boxes = [spec.make_batch_params(3, 1, pos)[0]["box"] for pos in range(200)]
    erased = [b for b in boxes if b[2] > 0]
    assert 60 < len(erased) < 140  # about half
    for top, left, h, w in erased:
        assert 0 <= top and top + h <= 24 and 0 <= left and left + w <= 32
        assert 0.02 * 24 * 32 * 0.5 <= h * w <= 0.33 * 24 * 32 * 1.6
    np.testing.assert_array_equal(spec.make_batch_params(3, 1, 7)[0]["box"], boxes[7])
    assert not np.array_equal(spec.make_batch_params(3, 2, 7)[0]["box"], boxes[7]) or boxes[7][2] == 0
    assert all(recipe(p=0.0).make_batch_params(0, 0, pos) == [{}] for pos in range(20))  # p=0: no operation


def test_its_uniforms_do_not_move_the_pixel_operations_parameters():
    with_erasing = AugmentSpec(ops=[T.RandomResizedCrop(16), T.Normalize(MEAN, STD), T.RandomErasing()])
    without = AugmentSpec(ops=[T.RandomResizedCrop(16), T.Normalize(MEAN, STD)])
    for pos in range(10):
        a, b = with_erasing.make_params(0, 0, pos, (60, 80)), without.make_params(0, 0, pos, (60, 80))
        np.testing.assert_array_equal(a[0]["start"], b[0]["start"])


def test_apply_batch_sets_the_box_to_the_value_and_nothing_else():
    op = T.RandomErasing(p=1.0, value=(1.0, 2.0, 3.0))
    images = torch.zeros(2, 3, 6, 8)
    out = op.apply_batch(images, [{"box": np.array([1, 2, 3, 4])}, {"box": np.zeros(4)}])
    assert torch.equal(out[0, :, 1:4, 2:6], torch.tensor([1.0, 2.0, 3.0]).view(3, 1, 1).expand(3, 3, 4))
    assert out[0].sum() == 12 * 6 and not out[1].any()


@pytest.mark.parametrize("backend", ["dali", "torch"])
def test_both_backends_and_the_dataset_erase_the_same_boxes(defect_index, backend):
    spec = recipe(p=1.0, value=0.0)
    ds = ImageDataset(defect_index, spec, seed=2)
    sampler = WeightedSampler(defect_index, num_samples=12, seed=1)
    with DaliLoader(ds, batch_size=4, sampler=sampler, device="cpu", backend=backend, return_meta=True) as loader:
        loader.set_epoch(0)
        batches = list(loader)
    assert len(batches) == 3
    for images, _, meta in batches:
        for i, params in enumerate(meta["params"]):
            top, left, h, w = params["RandomErasing"]["box"]
            assert h > 0 and torch.all(images[i, :, top:top + h, left:left + w] == 0)
            draw = sampler.draws(0)[int(meta["position"][i])]
            want, _ = ds[draw]  # the plain Dataset path erases the same box
            assert torch.equal(images[i], want)


def test_eval_drops_it_and_replace_keeps_it():
    import dataclasses

    spec = recipe()
    assert spec.eval().batch_ops == ()
    assert [type(op).__name__ for op in dataclasses.replace(spec, channels_last=True).batch_ops] == ["RandomErasing"]


@pytest.mark.parametrize("bad, match", [
    (dict(value="random"), "random"), (dict(p=2), "probability"), (dict(scale=(0.5, 2.0)), "at most 1"),
    (dict(ratio=(0, 1)), "0 < min"),
])
def test_invalid_arguments_name_the_argument(bad, match):
    with pytest.raises(ConfigError, match=match):
        T.RandomErasing(**bad)


def test_it_must_follow_normalize_and_every_pixel_operation():
    with pytest.raises(ConfigError, match="after Normalize"):
        AugmentSpec(ops=[T.Resize((8, 8)), T.RandomErasing(), T.Normalize(MEAN, STD)])
    with pytest.raises(ConfigError, match="after every pixel operation"):
        AugmentSpec(ops=[T.RandomErasing(), T.Resize((8, 8))])


def test_from_torchvision():
    RandomErasingTV = type("RandomErasing", (), {})
    t = RandomErasingTV()
    t.p, t.scale, t.ratio, t.value, t.inplace = 0.25, (0.1, 0.2), (0.5, 2.0), 0, False
    (op,) = translate([t])
    assert op == T.RandomErasing(0.25, (0.1, 0.2), (0.5, 2.0), 0.0)
    t.value = "random"
    with pytest.raises(ConfigError, match="random"):
        translate([t])
