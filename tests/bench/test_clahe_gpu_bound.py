"""``bench.clahe_gpu_bound``: the preset's GPU bound estimated on the CPU with the CLAHE kernel's model."""

from __future__ import annotations

import json

from bench import clahe_gpu_bound


def test_the_estimate_separates_the_kernel_from_the_decoder_noise(tmp_path):
    """Unperturbed decodes: the padded kernel's model is within 1 level of OpenCV after CLAHE (its
    rounding only); with 10 % of the decoded pixels moved by one level CLAHE amplifies the difference."""
    out = tmp_path / "bound.json"
    assert clahe_gpu_bound.main(["--sizes", "96x64", "--images", "2", "--fractions", "0,0.1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["source"], r["perturbed_fraction"], r["images"]) for r in rows] == [("96x64", 0.0, 2), ("96x64", 0.1, 2)]
    clean, noisy = rows
    assert clean["after_clahe"]["max"] <= 1 and clean["after_clahe"]["mean"] < 0.15
    assert noisy["after_clahe"]["mean"] > clean["after_clahe"]["mean"] and noisy["after_clahe"]["max"] > 1
    for r in rows:
        assert set(r["output"]) == {"mean", "p999", "max"}


def test_perturb_moves_the_asked_fraction_by_one_level():
    import numpy as np

    img = np.full((200, 200), 128, np.uint8)
    moved = clahe_gpu_bound.perturb(img, 0.2, np.random.default_rng(0)).astype(int) - 128
    assert set(np.unique(moved)) <= {-1, 0, 1} and 0.18 < (moved != 0).mean() < 0.22
