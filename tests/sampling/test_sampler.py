"""WeightedSampler and the pure draw functions: balance, determinism, epochs, ranks."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dali_backend import ConfigError, Draw, SampleIndex, WeightedSampler
from dali_backend.sampling.sampler import epoch_draw, rank_slice
from dali_backend.util.strings import StringTable


def synthetic_index(counts=(800, 130, 70)) -> SampleIndex:
    """An index of imaginary files (no disk access needed for sampling)."""
    labels = np.concatenate([np.full(k, c) for c, k in enumerate(counts)]).astype(np.int64)
    n = labels.size
    z = np.zeros(n, np.int64)
    return SampleIndex("/nonexistent", StringTable.from_strings(f"f{i}.jpg" for i in range(n)), labels,
                       [f"c{i}" for i in range(len(counts))], z, z, z, z)


def check_invariants(draws: list[Draw], n: int, epoch: int) -> None:
    """One harness for every mode: valid indices, the epoch carried, positions unique."""
    assert all(0 <= d.index < n for d in draws)
    assert all(d.epoch == epoch for d in draws)
    assert len({d.position for d in draws}) == len(draws)


def test_balanced_within_two_points_over_30k_draws():
    index = synthetic_index()
    s = WeightedSampler(index, num_samples=30_000, seed=0)
    draws = list(s)
    check_invariants(draws, len(index), 0)
    share = np.bincount(index.labels[[d.index for d in draws]], minlength=3) / 30_000
    assert np.all(np.abs(share - 1 / 3) <= 0.02), share


def test_other_modes():
    index = synthetic_index()
    uniform = [d.index for d in WeightedSampler(index, mode="uniform")]
    assert sorted(uniform) == list(range(len(index)))  # a permutation: every sample exactly once
    assert [d.index for d in WeightedSampler(index, mode="sequential")] == list(range(len(index)))
    w = np.zeros(len(index))
    w[[3, 5]] = [1.0, 3.0]
    picked = [d.index for d in WeightedSampler(index, mode="weights", weights=w, num_samples=4000)]
    assert set(picked) == {3, 5} and 0.7 < picked.count(5) / 4000 < 0.8
    no_repl = [d.index for d in WeightedSampler(index, num_samples=150, replacement=False)]
    assert len(set(no_repl)) == 150
    share = np.bincount(index.labels[no_repl], minlength=3) / 150
    assert share[2] > 0.2  # rare class strongly over-represented relative to its 7%


def test_same_draws_for_same_seed_epoch_even_in_another_process():
    index = synthetic_index()
    here = [d.index for d in WeightedSampler(index, seed=7)]
    code = ("import json,sys; sys.path.insert(0, '.'); from tests.sampling.test_sampler import synthetic_index;"
            "from dali_backend import WeightedSampler;"
            "print(json.dumps([d.index for d in WeightedSampler(synthetic_index(), seed=7)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == here


def test_epochs_differ_and_repeat():
    index = synthetic_index()
    s = WeightedSampler(index, seed=1)
    e0 = [d.index for d in s]
    s.set_epoch(1)
    e1 = list(s)
    check_invariants(e1, len(index), 1)
    assert [d.index for d in e1] != e0
    s.set_epoch(0)
    assert [d.index for d in s] == e0
    # no (seed, epoch) collision between (1, 0) and (0, 1)
    assert list(epoch_draw(100, 100, 1, 0, "uniform", False)) != list(epoch_draw(100, 100, 0, 1, "uniform", False))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("num_samples", [1000, 1001, 7])
def test_ranks_partition_the_padded_global_draw(world, num_samples):
    index = synthetic_index()
    samplers = [WeightedSampler(index, num_samples=num_samples, seed=3, rank=r, world_size=world) for r in range(world)]
    for s in samplers:
        s.set_epoch(2)
    per_rank = [list(s) for s in samplers]
    assert len({len(p) for p in per_rank}) == 1 and len(per_rank[0]) == len(samplers[0])
    positions = sorted(d.position for p in per_rank for d in p)
    padded = len(samplers[0]) * world
    assert positions == list(range(padded))  # disjoint, covering
    glob = samplers[0].global_draw()
    by_pos = {d.position: d.index for p in per_rank for d in p}
    assert [by_pos[i] for i in range(num_samples)] == glob.tolist()
    assert samplers[0].num_padded == padded - num_samples
    for pos in range(num_samples, padded):  # padding repeats the start, like DistributedSampler
        assert by_pos[pos] == glob[pos - num_samples]


def test_drop_last_trims_instead_of_padding():
    idx, pos = rank_slice(np.arange(10), rank=1, world_size=3, drop_last=True)
    assert idx.tolist() == [1, 4, 7] and pos.tolist() == [1, 4, 7]


def test_reads_torch_distributed(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    s = WeightedSampler(synthetic_index())
    assert (s.rank, s.world_size) == (1, 2)


def test_draw_works_as_plain_index():
    d = Draw(5, 0, 9)
    assert list(range(10))[d] == 5 and d.index == 5


@pytest.mark.parametrize("kwargs, match", [
    ({"rank": 2, "world_size": 2}, r"invalid rank 2, rank should be in the interval \[0, 1\]"),
    ({"mode": "bogus"}, "mode='bogus'"),
    ({"num_samples": 5000, "replacement": False, "mode": "uniform"}, "exceeds the 1000 samples"),
    ({"seed": -1}, "seed=-1"),
    ({"mode": "weights"}, "needs weights"),
    ({"mode": "weights", "weights": [1.0]}, "must be 1000 finite"),
])
def test_errors_name_the_argument(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        WeightedSampler(synthetic_index(), **kwargs)
