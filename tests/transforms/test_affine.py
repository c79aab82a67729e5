"""RandomAffine: the matrix means what the docstring says; both backends apply it alike (the registry's
examples run in tests/transforms/test_transforms.py and tests/dali/test_gpu_graph.py like every operation's)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from dali_backend import ConfigError
from dali_backend.transforms import RandomAffine
from dali_backend.transforms.torchvision import translate

IMG = (np.arange(35, dtype=np.uint8).reshape(5, 7) * 7)


def apply(op, img, position=0):
    return op.apply(img, op.make_params(0, 0, position, img.shape[:2]))


def test_a_quarter_turn_is_counter_clockwise_like_rotation():
    square = IMG[:, :5]
    np.testing.assert_array_equal(apply(RandomAffine((90, 90)), square), np.rot90(square))


def test_no_change_is_the_identity_and_a_whole_pixel_shift_moves_by_that_pixel():
    assert RandomAffine(0).is_identity
    np.testing.assert_array_equal(apply(RandomAffine(0), IMG), IMG)
    op = RandomAffine(0, translate=(1.0, 0.0))
    shifts = set()
    for position in range(20):
        params = op.make_params(0, 0, position, IMG.shape[:2])
        m = params["matrix"]
        np.testing.assert_array_equal(m[:, :2], np.eye(2))
        tx = -int(m[0, 2])  # destination x comes from source x - tx: a shift right by tx
        assert m[0, 2] == -tx and m[1, 2] == 0 and abs(tx) <= 7
        shifts.add(tx)
        got = op.apply(IMG, params)
        if 0 <= tx < 7:
            np.testing.assert_array_equal(got[:, tx:], IMG[:, :7 - tx])
            assert not got[:, :tx].any()  # filled with 0
    assert len(shifts) > 3


@pytest.mark.parametrize("kwargs", [dict(degrees=-1), dict(degrees=5, translate=(2, 0)), dict(degrees=5, scale=(0, 1)),
                                    dict(degrees=5, shear=(10, 5)), dict(degrees=5, shear=(1, 2, 3)),
                                    dict(degrees=5, fill=300)])
def test_invalid_arguments_name_the_argument(kwargs):
    with pytest.raises(ConfigError, match="RandomAffine"):
        RandomAffine(**kwargs)


def test_from_torchvision_reads_its_attributes_and_refuses_a_centre():
    RandomAffineTV = type("RandomAffine", (), {})
    t = RandomAffineTV()
    t.degrees, t.translate, t.scale, t.shear, t.fill, t.center = [-10.0, 10.0], (0.1, 0.1), (0.9, 1.1), [-5.0, 5.0], 0, None
    t.interpolation = types.SimpleNamespace(value="bilinear")
    (op,) = translate([t])
    assert op == RandomAffine((-10.0, 10.0), translate=(0.1, 0.1), scale=(0.9, 1.1), shear=(-5.0, 5.0))
    t.center = (1, 2)
    with pytest.raises(ConfigError, match="center"):
        translate([t])
