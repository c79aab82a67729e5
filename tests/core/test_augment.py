"""AugmentSpec validation and the per-draw parameters."""

from __future__ import annotations

import dataclasses

import pytest

from dali_backend import AugmentSpec, Clahe, ConfigError, draw_params


def test_defaults_and_eval():
    spec = AugmentSpec()
    assert spec.size == (256, 256) and spec.color == "gray" and spec.clahe == Clahe(2.0, (8, 8))
    assert (spec.rotate_deg, spec.brightness, spec.contrast) == (5.0, 0.1, 0.1)
    ev = spec.eval()
    assert not ev.is_random and ev.size == spec.size and ev.clahe == spec.clahe
    assert draw_params(ev, 0, 3, 17) == (0.0, 1.0, 1.0)
    assert AugmentSpec(size=64).size == (64, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.color = "rgb"


@pytest.mark.parametrize("kwargs, match", [
    ({"size": (0, 10)}, "size"), ({"size": (1, 2, 3)}, "size"), ({"color": "bgr"}, "color='bgr'"),
    ({"rotate_deg": -1}, "rotate_deg"), ({"brightness": 2}, "brightness"), ({"std": (1, 0, 1)}, "std"),
    ({"mean": (0.5,)}, "mean"), ({"dtype": "int8"}, "dtype"), ({"clahe": 2.0}, "clahe"),
])
def test_invalid_specs_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        AugmentSpec(**kwargs)


def test_clahe_validation():
    with pytest.raises(ConfigError, match="clip_limit"):
        Clahe(clip_limit=0)
    with pytest.raises(ConfigError, match="tiles"):
        Clahe(tiles=(0, 8))


def test_params_are_pure_in_range_and_distinct():
    spec = AugmentSpec(rotate_deg=10, brightness=0.2, contrast=0.3)
    ps = [draw_params(spec, 1, 2, pos) for pos in range(2000)]
    assert ps[5] == draw_params(spec, 1, 2, 5)
    assert all(-10 <= p.angle <= 10 and 0.8 <= p.brightness <= 1.2 and 0.7 <= p.contrast <= 1.3 for p in ps)
    assert len(set(ps)) == len(ps)
    assert min(p.angle for p in ps) < -9 and max(p.angle for p in ps) > 9  # the whole range is used
    assert draw_params(spec, 1, 3, 5) != ps[5] and draw_params(spec, 2, 2, 5) != ps[5]
