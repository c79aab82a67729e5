"""Elastic resumption: a state saved on W ranks resumed on W' ranks yields every draw of the epoch once.

Ranks are simulated in one process: one loader per rank, each with ``WeightedSampler(..., rank=r,
world_size=W)`` (the draw logic needs no process group). The old ranks advance together (as
data-parallel training does), the state of one of them is saved, and the new ranks each load it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import KINDS
from tests.helpers.resume_harness import resume_on, save_one_rank
from dali_backend import AugmentSpec, ConfigError, DaliLoader, WeightedSampler
from dali_backend.sampling.sampler import rank_slice, remainder_slice
from fallback import ImageDataset

NUM_SAMPLES, BATCH, SEED, EPOCH = 45, 4, 4, 3


@pytest.fixture(scope="module")
def ds(defect_index):
    return ImageDataset(defect_index, AugmentSpec(size=16, dtype="uint8"), seed=1)


def loaders(ds, world: int, kind: str, **kw) -> list[DaliLoader]:
    return [DaliLoader(ds, batch_size=kw.pop("batch_size", BATCH), return_meta=True, **KINDS[kind],
                       sampler=WeightedSampler(ds.index, num_samples=kw.get("num_samples", NUM_SAMPLES),
                                               seed=kw.get("seed", SEED), rank=r, world_size=world),
                       drop_last=kw.get("drop_last", False))
            for r in range(world)]


def run(loader, batches: int | None = None) -> list[tuple[int, int]]:
    """(position, planned sample) of each draw of the next ``batches`` batches (all: None)."""
    out = []
    for i, (_, _, meta) in enumerate(loader):
        out += list(zip(meta["position"].tolist(), meta["planned"].tolist()))
        if batches is not None and i + 1 == batches:
            break
    return out


def check_exactly_once(ds, draws: list[tuple[int, int]], num_samples: int = NUM_SAMPLES, seed: int = SEED):
    """Every real position of the epoch's global draw yielded once, with the sample drawn there."""
    glob = WeightedSampler(ds.index, num_samples=num_samples, seed=seed).global_draw(EPOCH)
    real = sorted((p, i) for p, i in draws if p < num_samples)
    assert [p for p, _ in real] == list(range(num_samples)), "a draw missing or yielded twice"
    assert [i for _, i in real] == glob.tolist()
    for p, i in draws:
        if p >= num_samples:  # padding repeats the start of the draw
            assert i == glob[p % num_samples]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("old, new, cut, saver", [(2, 1, 3, 0), (1, 3, 5, 0), (4, 2, 2, 3)])
def test_resume_on_another_number_of_ranks_yields_every_draw_once(ds, kind, old, new, cut, saver):
    drawn, state = save_one_rank(loaders(ds, old, kind), EPOCH, run, cut, saver)
    assert state["global"]["consumed"] == cut * BATCH * old
    after = loaders(ds, new, kind)
    resumed, stats = resume_on(after, state, EPOCH, run)
    check_exactly_once(ds, drawn + resumed)
    assert sum(st["resumed"] for st in stats) == cut * BATCH * old
    assert sum(st["yielded"] for st in stats) == NUM_SAMPLES - cut * BATCH * old
    assert sum(st["padded"] for st in stats) == len([p for p, _ in resumed if p >= NUM_SAMPLES])

    for loader in after:  # the next epoch is a normal epoch on the new ranks
        loader.set_epoch(EPOCH + 1)
    nxt = [run(loader) for loader in after]
    for r, got in enumerate(nxt):
        idx, pos = rank_slice(after[0].sampler.global_draw(EPOCH + 1), r, new)
        assert got == list(zip(pos.tolist(), idx.tolist()))
        assert after[r].stats()["resumed"] == 0
    for loader in after:
        loader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_resume_twice_across_three_world_sizes_with_drop_last(ds, kind):
    """4 ranks -> 2 ranks -> 3 ranks within one epoch; drop_last cuts each rank's last partial batch,
    which is counted as dropped: the draws yielded plus those dropped are the epoch, each once."""
    first = loaders(ds, 4, kind, drop_last=True)
    drawn = []
    for loader in first:
        loader.set_epoch(EPOCH)
        drawn += run(loader, 1)
    state = first[0].state_dict()
    second = loaders(ds, 2, kind, drop_last=True)
    for loader in second:
        loader.load_state_dict(state)
        drawn += run(loader, 2)
    state = json.loads(json.dumps(second[1].state_dict()))
    assert state["global"] == {"offset": 16, "consumed": 32, "rank": 1, "world_size": 2, "num_samples": 45,
                               "drop_last": True}
    third = loaders(ds, 3, kind, drop_last=True)
    dropped = 0
    for loader in third:
        loader.load_state_dict(state)
        drawn += run(loader)
        st = loader.stats()
        assert st["accounted"] == st["draws"]
        dropped += st["dropped"]
    # 13 draws left over 3 ranks: 5 each (2 padding), one batch of 4 each, 1 dropped per rank
    assert dropped == 3
    real = sorted(p for p, _ in drawn if p < NUM_SAMPLES)
    assert len(real) == len(set(real)) == NUM_SAMPLES - 1  # the one real draw dropped, nothing twice
    for loader in first + second + third:
        loader.close()


def test_state_of_a_finished_epoch_resumes_empty_elsewhere(ds):
    before = loaders(ds, 2, "torch")
    for loader in before:
        loader.set_epoch(EPOCH)
        run(loader)
    state = before[0].state_dict()
    assert state["global"]["consumed"] == NUM_SAMPLES
    after = loaders(ds, 3, "torch")[1]
    after.load_state_dict(state)
    assert run(after) == [] and after.stats()["accounted"] == after.stats()["draws"]
    assert after.stats()["resumed"] == len(range(1, NUM_SAMPLES, 3))


def test_remainder_slice_from_zero_is_rank_slice_and_covers_the_rest():
    glob = np.random.default_rng(0).integers(0, 100, 37)
    for world in (1, 2, 3, 5):
        for rank in range(world):
            for drop in (False, True):
                a, b = remainder_slice(glob, 0, rank, world, drop), rank_slice(glob, rank, world, drop)
                assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        shares = [remainder_slice(glob, 12, r, world)[1] for r in range(world)]
        assert sorted(np.concatenate(shares).tolist())[:37 - 12] == list(range(12, 37))


@pytest.mark.parametrize("change, match", [
    ("seed", r"seed 4 -> 5"),
    ("index", r"another sample index"),
    ("batch_size", r"batch_size=4; this loader has 5"),
    ("num_samples", r"num_samples 45 -> 44"),
    ("consumed", r"says 9 global draws consumed, but 2 batches of 4 on each of 2 ranks from position 0 make 16"),
    ("plan", r"plans another order for rank 1 of 2"),
])
def test_states_that_cannot_be_split_again_are_refused(ds, change, match):
    old = loaders(ds, 2, "torch")[1]
    old.set_epoch(EPOCH)
    run(old, 2)
    state = json.loads(json.dumps(old.state_dict()))
    kw = {}
    target_ds = ds
    if change in ("seed", "num_samples", "batch_size"):
        kw = {"seed": 5} if change == "seed" else {"num_samples": 44} if change == "num_samples" else {"batch_size": 5}
    elif change == "index":
        target_ds = ImageDataset(ds.index.subset(range(50)), ds.spec, seed=1)
    elif change == "consumed":
        state["global"]["consumed"] = 9
    elif change == "plan":
        state["plan"] = "0" * 32
    new = loaders(target_ds, 3, "torch", **kw)[0]
    before = new.sampler.schedule.state()
    with pytest.raises(ConfigError, match=match):
        new.load_state_dict(state)
    assert new.sampler.schedule.state() == before  # a refused state leaves the loader as it was
    assert new.stats() == {} and new.state_dict()["batches_done"] == 0
