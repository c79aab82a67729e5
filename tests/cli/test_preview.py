"""``dali-backend preview`` takes the list a user trains with and shows where each crop came from."""

from __future__ import annotations

import numpy as np

from dali_backend import AugmentSpec
from dali_backend import transforms as T
from dali_backend.cli import main
from dali_backend.cli.pictures import crop_windows

RECIPE = ("RandomResizedCrop(64), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4), ToDtype('float32'), "
          "Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))")


def test_preview_accepts_the_training_recipe_with_normalize(defect_root, tmp_path, capsys):
    out = tmp_path / "p.png"
    rc = main(["preview", str(defect_root), "--out", str(out), "--n", "3", "--ops", RECIPE, "--backend", "torch"])
    assert rc == 0 and out.read_bytes()[:4] == b"\x89PNG"
    assert "preview of 3 draws" in capsys.readouterr().out


def test_crop_window_of_a_first_crop_is_its_own_window():
    spec = AugmentSpec(ops=[T.RandomResizedCrop(32)])
    params = spec.make_params(0, 0, 5, (120, 160))
    ((name, (t, l, h, w)),) = crop_windows(spec, params, (120, 160))
    assert name == "RandomResizedCrop"
    assert (t, l, h, w) == tuple(float(v) for v in (*params[0]["start"], *params[0]["shape"]))
    assert 0 <= t and 0 <= l and t + h <= 120 and l + w <= 160


def test_crop_window_after_a_resize_is_traced_back_to_the_original():
    spec = AugmentSpec(ops=[T.Resize((60, 80)), T.CenterCrop((30, 40))])  # half size, then the centre quarter
    params = spec.make_params(0, 0, 0, (120, 160))
    ((_, window),) = crop_windows(spec, params, (120, 160))
    assert window == (30.0, 40.0, 60.0, 80.0)  # the centre of the original, at twice the crop's size


def test_crop_windows_stop_at_operations_that_are_not_rectangles_of_the_original():
    spec = AugmentSpec(ops=[T.RandomRotation(30), T.CenterCrop(20)])
    assert crop_windows(spec, spec.make_params(0, 0, 0, (64, 64)), (64, 64)) == []
    spec = AugmentSpec(ops=[T.CenterCrop(40), T.RandomHorizontalFlip(p=0.0), T.CenterCrop(20)])
    windows = crop_windows(spec, spec.make_params(0, 0, 0, (64, 64)), (64, 64))
    assert [w for _, w in windows] == [(12.0, 12.0, 40.0, 40.0), (22.0, 22.0, 20.0, 20.0)]  # an identity flip is no stop
    assert np.isclose(sum(w[2] for _, w in windows), 60.0)


def test_captions_fit_their_tile_at_small_sizes():
    """A caption is shrunk, then cut (ending in '.'), to stay within its width: at --size 64 the
    labels no longer run into the next tile."""
    import numpy as np

    from dali_backend.cli.pictures import draw_text

    for width in (200, 60, 24):
        img = np.zeros((20, 400, 3), np.uint8)
        draw_text(img, "normal normal/normal_00009.jpg RandomResizedCrop", 0, 15, width, 0.5, (255, 255, 255))
        columns = np.flatnonzero(img.max(axis=(0, 2)) > 0)
        assert columns.max() < width + 2, (width, columns.max())  # anti-aliasing may touch one pixel more
