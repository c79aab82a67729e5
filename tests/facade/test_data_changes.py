"""Data changes between epochs: exclude files, draw from a grown index; at an epoch boundary, the same
on every rank, recorded in the state (issue 24, item 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, ConfigError, DaliLoader, SampleIndex, WeightedSampler
from fallback import ImageDataset

SPEC = AugmentSpec(size=16, dtype="uint8")


def make(index, kind: str, rank: int = 0, world: int = 1, **kw) -> DaliLoader:
    sampler = WeightedSampler(index, seed=2, rank=rank, world_size=world, mode=kw.pop("mode", "uniform"))
    return DaliLoader(ImageDataset(index, SPEC, seed=1), batch_size=4, sampler=sampler, return_meta=True,
                      **KINDS[kind], **kw)


def run(loader, batches: int | None = None) -> list[tuple[int, int, str]]:
    """(position, planned sample, path) of the next ``batches`` batches (all: None)."""
    out = []
    for i, (_, labels, meta) in enumerate(loader):
        assert labels.tolist() == loader.dataset.index.labels[meta["index"].numpy()].tolist()
        out += list(zip(meta["position"].tolist(), meta["planned"].tolist(), meta["path"]))
        if batches is not None and i + 1 == batches:
            break
    return out


def closed(st: dict) -> bool:
    return st["accounted"] == st["draws"]


@pytest.mark.parametrize("kind", KINDS)
def test_exclude_takes_effect_at_the_next_epoch_only(defect_index, kind):
    loader = make(defect_index, kind)
    before = run(make(defect_index, "torch"))  # epoch 0 of an untouched loader
    gone = [defect_index.paths[i] for i in (0, 5, 17)]
    assert len(loader) == 15
    got = run(loader, 2)
    assert loader.exclude(gone + [7]) == 1  # mid-epoch 0: from epoch 1; paths or positions
    assert len(loader) == 15  # epoch 0 keeps its length and its draws
    got += run_rest(loader)
    assert got == before and closed(loader.stats())
    loader.set_epoch(1)
    assert len(loader) == 14  # 56 samples left, uniform, every one once
    epoch1 = run(loader)
    paths = {p.split(defect_index.root + "/")[1] for _, _, p in epoch1}
    assert len(epoch1) == 56 and not paths & set(gone + [defect_index.paths[7]])
    assert closed(loader.stats()) and loader.stats()["yielded"] == 56
    loader.set_epoch(0)  # an epoch is a pure function of (seed, epoch, schedule): epoch 0 is as it was
    assert run(loader) == before
    loader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_exclude_between_passes_is_not_served_from_batches_prepared_ahead(defect_index, kind):
    """DALI prepares the next epoch's first batches while the current one ends; a change made between
    the passes must not be served from them."""
    loader = make(defect_index, kind)
    run(loader)
    loader.exclude(range(0, 60, 2))  # between epoch 0 and 1: from epoch 1
    got = run(loader)  # no set_epoch: the next epoch
    assert len(got) == 30 and all(i % 2 for _, i, _ in got) and closed(loader.stats())
    loader.close()


def run_rest(loader) -> list:
    """The rest of a pass broken off by ``run(loader, k)``: a new pass resumes nothing, so use the state."""
    state = loader.state_dict()
    loader.load_state_dict(state)
    return run(loader)


def test_every_rank_draws_the_same_changed_epoch(defect_index):
    dents = [p for p in defect_index.paths if p.startswith("dent/")][:2]
    ranks = [make(defect_index, "torch", rank=r, world=3, mode="balanced") for r in range(3)]
    for loader in ranks:
        loader.exclude(dents, from_epoch=2)
        loader.set_epoch(2)
    draws = [loader.sampler.global_draw() for loader in ranks]
    assert all(np.array_equal(d, draws[0]) for d in draws)
    fresh = WeightedSampler(defect_index, seed=2, mode="balanced")  # the change alone makes the draw
    fresh.exclude(dents, from_epoch=2)
    assert np.array_equal(fresh.global_draw(2), draws[0])
    assert not np.array_equal(draws[0], WeightedSampler(defect_index, seed=2).global_draw(2))
    excluded = {defect_index.paths.index(p) for p in dents}
    assert not excluded & set(draws[0].tolist())
    # num_samples=None follows the 58 samples left; 58 draws padded to 60 over 3 ranks, each once
    assert ranks[0].sampler.num_samples == 58 and len(ranks[0]) == 5
    got = sorted(x[0] for loader in ranks for x in run(loader))
    assert got == list(range(60))
    assert all(closed(loader.stats()) for loader in ranks)
    assert sum(loader.stats()["padded"] for loader in ranks) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_resume_across_a_change_is_exact(defect_index, kind):
    """A state saved mid-epoch 1 (an exclusion in force since 1, another pending from 2) resumes, in a
    loader that was never told of either, the rest of epoch 1 and then epoch 2 with the pending one."""
    ref = make(defect_index, kind)
    ref.exclude([3, 4], from_epoch=1)
    ref.exclude([defect_index.paths[40]], from_epoch=2)  # by path: the same change as by position below
    ref.set_epoch(1)
    want1 = run(ref)
    ref.set_epoch(2)
    want2 = run(ref)
    first = make(defect_index, kind)
    first.exclude([3, 4], from_epoch=1)
    first.set_epoch(1)
    got = run(first, 3)
    first.exclude([40], from_epoch=2)  # mid-epoch 1: pending for epoch 2, recorded in the state
    state = json.loads(json.dumps(first.state_dict()))
    assert [x["from_epoch"] for x in state["data"]["exclude"]] == [1, 2]
    first.close()
    resumed = make(defect_index, kind)
    resumed.load_state_dict(state)
    assert len(resumed) == 15 and resumed.sampler.num_samples == 58
    got += run(resumed)
    assert got == want1 and closed(resumed.stats()) and resumed.stats()["resumed"] == 12
    resumed.set_epoch(2)
    assert run(resumed) == want2 and resumed.sampler.num_samples == 57
    ref.close(), resumed.close()


@pytest.fixture
def growing(tmp_path):
    """A folder of 12 files; ``grow()`` adds 5 and removes 1, and returns the folder's new index."""
    for i in range(12):
        write(tmp_path / ("a" if i % 3 else "b") / f"{i:02d}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path, progress=False)

    def grow():
        for i in range(12, 17):
            write(tmp_path / ("a" if i % 2 else "b") / f"{i:02d}.jpg", jpeg_bytes(seed=i))
        (tmp_path / "a" / "01.jpg").unlink()
        return SampleIndex.from_folder(tmp_path, progress=False)

    return index, grow


@pytest.mark.parametrize("kind", KINDS)
def test_a_grown_index_is_drawn_from_the_next_epoch(growing, kind):
    index, grow = growing
    loader = make(index, kind, on_error="skip")
    got = run(loader, 1)
    new = grow()  # files change on disk mid-epoch 0: epoch 0 still draws from the index it began with
    assert loader.update_index(new) == 1
    loader.exclude(["b/14.jpg"], from_epoch=1)  # a path only the new index has
    assert len(loader) == 3
    got += run_rest(loader)  # the rest of epoch 0, from the old index (a/01.jpg, gone, is replaced)
    assert len(got) == 12 and closed(loader.stats())
    loader.set_epoch(1)
    assert len(loader) == 4 and loader.sampler.num_samples == 15  # 16 files, one excluded
    paths = sorted(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for _, _, p in run(loader))
    want = sorted(p for p in new.paths if p != "b/14.jpg")
    assert paths == want and closed(loader.stats())
    state = json.loads(json.dumps(loader.state_dict()))
    assert [x["samples"] for x in state["data"]["indexes"]] == [12, 16]
    loader.close()

    # resuming epoch 1 needs the new index: built on the old one and not given it, the loader says so
    old_only = make(index, kind)
    with pytest.raises(ConfigError, match=r"another sample index.*update_index\(SampleIndex.load\(\.\.\.\), from_epoch=1\)"):
        old_only.load_state_dict(state)
    old_only.update_index(new, from_epoch=1)
    old_only.load_state_dict(state)
    assert run(old_only) == [] and closed(old_only.stats())
    old_only.close()
    on_new = make(new, kind)  # or built on the new index directly
    on_new.load_state_dict(state)
    on_new.set_epoch(2)
    assert len(run(on_new)) == 15
    with pytest.raises(ConfigError, match=r"epoch 0 draws from the index with fingerprint"):
        on_new.set_epoch(0)
        list(on_new)
    on_new.close()


def test_changes_are_refused_with_the_fix(defect_index, tmp_path):
    loader = make(defect_index, "torch")
    run(loader, 1)
    with pytest.raises(ConfigError, match=r"exclude\(from_epoch=0\): epoch 0 has begun.*from_epoch=1"):
        loader.exclude([1], from_epoch=0)
    with pytest.raises(ConfigError, match=r"'nope.jpg' not in the index"):
        loader.exclude(["nope.jpg"])
    with pytest.raises(ConfigError, match=r"sample 60 is not in the index \(positions 0 to 59\)"):
        loader.exclude([60])
    with pytest.raises(ConfigError, match=r"from epoch 1 no sample would be left"):
        loader.exclude(range(60))
    assert loader.sampler.schedule.exclusions == []  # a refused change leaves no trace
    other = SampleIndex.from_folder(defect_index.root, classes=["scratch", "normal", "dent"], progress=False)
    with pytest.raises(ConfigError, match=r"do not start with the current ones"):
        loader.update_index(other)
    fixed = WeightedSampler(defect_index, num_samples=60, mode="uniform", replacement=False)
    with pytest.raises(ConfigError, match=r"num_samples=60 exceeds the 59 samples left"):
        fixed.exclude([0], from_epoch=1)
    loader.set_epoch(3)
    assert loader.exclude([1], from_epoch=3) == 3  # epoch 3 has not begun: it may still change
    loader.close()
