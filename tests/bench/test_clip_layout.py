"""bench.clip_layout: clips as B*T samples and as FHWC sequences give the same pixels on DALI (its
timing is printed, never asserted)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.helpers import CUDA

from bench.clip_layout import ClipFeed, clip_params, compare, main
from dali_backend.errors import ConfigError


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=CUDA)])
def test_both_layouts_give_the_same_pixels(device):
    r = compare(device, source_size=(64, 48), size=(24, 16), clips=3, clip_len=4, batches=1, warmup=0, rounds=1,
                threads=1, distinct=5)
    assert r["shape"] == [3, 4, 16, 24, 3]  # [B, T, H, W, C]
    assert r["equal"] and r["max_abs_diff"] == 0
    assert r["frames_per_batch"] == 12 and r["samples_frames_per_s"] > 0 and r["sequences_frames_per_s"] > 0


def test_each_clip_shares_one_draw_in_both_feeds():
    class Info:
        iteration = 3

    jpegs = [np.full(4, k, np.uint8) for k in range(7)]
    feed = ClipFeed(jpegs, clips=2, clip_len=3)
    frames, flip, angle, *_ = feed.samples(Info)
    *by_t, s_flip, s_angle, _, _ = feed.sequences(Info)
    assert len(frames) == 6 and len(by_t) == 3 and all(len(f) == 2 for f in by_t)
    assert all(frames[b * 3 + t] is by_t[t][b] for b in range(2) for t in range(3))  # the same frame, both layouts
    assert np.array_equal(angle, np.repeat(s_angle, 3)) and np.array_equal(flip, np.repeat(s_flip, 3))
    assert np.array_equal(s_angle, clip_params(0, 3, 2)["angle"])


def test_bad_arguments_are_named():
    with pytest.raises(ConfigError, match="clips=0"):
        compare("cpu", clips=0)
    with pytest.raises(SystemExit):
        main(["--clip-len", "0"])
