"""A ClipSampler state resumes on any rank and on another number of ranks, as a WeightedSampler's does
(issue 32, case 10: the documented "save rank 0's state" recipe failed on rank 1).

Ranks are simulated in one process (one loader per rank); the old ranks advance together, one rank's
state is saved, and every new rank loads it."""

from __future__ import annotations

import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from tests.helpers.resume_harness import resume_on, save_one_rank
from dali_backend import AugmentSpec, ConfigError, DaliLoader, SampleIndex
from dali_backend.sampling.clips import ClipSampler
from fallback import ImageDataset

CLIPS, BATCH, SEED, EPOCH, T = 30, 2, 3, 2, 3


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> ImageDataset:
    root = tmp_path_factory.mktemp("clip_sequences")
    for s, (cls, frames) in enumerate([("a", 9), ("a", 6), ("b", 8), ("b", 5)]):
        for k in range(frames):
            write(root / cls / f"seq{s}" / f"f{k:02d}.jpg", jpeg_bytes(16, 24, seed=10 * s + k))
    return ImageDataset(SampleIndex.from_folder(root, progress=False), AugmentSpec(size=8, dtype="uint8"), seed=1)


def sampler(ds, rank: int, world: int, **kw) -> ClipSampler:
    return ClipSampler(ds.index, clip_len=T, step=1, num_samples=CLIPS, seed=SEED, rank=rank, world_size=world, **kw)


def loaders(ds, world: int, kind: str, **kw) -> list[DaliLoader]:
    drop_last = kw.pop("drop_last_batches", False)
    return [DaliLoader(ds, batch_size=BATCH, sampler=sampler(ds, r, world, **kw), return_meta=True,
                       drop_last=drop_last, **KINDS[kind]) for r in range(world)]


def run(loader, batches: int | None = None) -> list[tuple[int, int]]:
    """(position, planned clip) of each clip of the next ``batches`` batches (all: None); each clip's
    frames are checked to be the clip's."""
    out = []
    for i, (images, labels, meta) in enumerate(loader):
        assert images.shape[1] == T
        clips = meta["planned_clip"].numpy()
        assert (meta["planned"].numpy() == loader.sampler.frames(clips)).all()
        assert labels.tolist() == loader.sampler.labels[meta["clip"].numpy()].tolist()
        out += list(zip(meta["position"].tolist(), clips.tolist()))
        if batches is not None and i + 1 == batches:
            break
    return out


def check_exactly_once(ds, draws: list[tuple[int, int]]):
    glob = sampler(ds, 0, 1).global_draw(EPOCH)
    real = sorted((p, c) for p, c in draws if p < CLIPS)
    assert [p for p, _ in real] == list(range(CLIPS)), "a clip missing or yielded twice"
    assert [c for _, c in real] == glob.tolist()


def save(ds, old: int, kind: str, cut: int, saver: int) -> tuple[list, dict]:
    return save_one_rank(loaders(ds, old, kind), EPOCH, run, cut, saver)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("old, new, cut, saver", [(2, 2, 2, 0), (2, 2, 3, 1), (2, 1, 2, 0), (1, 3, 4, 0),
                                                  (3, 2, 1, 2)])
def test_a_clip_state_resumes_on_any_rank_and_world_size(ds, kind, old, new, cut, saver):
    drawn, state = save(ds, old, kind, cut, saver)
    after = loaders(ds, new, kind)
    resumed, stats = resume_on(after, state, EPOCH, run)
    check_exactly_once(ds, drawn + resumed)
    assert state["global"]["consumed"] == cut * BATCH * old and state["sampler"]["type"] == "ClipSampler"
    assert sum(st["resumed"] for st in stats) == cut * BATCH * old
    for loader in after:  # the next epoch is a normal epoch on the new ranks
        loader.set_epoch(EPOCH + 1)
        clips, positions = loader.sampler.rank_draw(EPOCH + 1)
        assert run(loader) == list(zip(positions.tolist(), clips.tolist()))
        loader.close()


def test_a_clip_state_of_another_sampler_is_refused_on_another_rank(ds):
    _, state = save(ds, 2, "torch", 2, 0)
    other = DaliLoader(ds, batch_size=BATCH, sampler=ClipSampler(ds.index, clip_len=T, step=2, num_samples=CLIPS,
                                                                 seed=SEED, rank=1, world_size=2), backend="torch")
    with pytest.raises(ConfigError, match=r"sampler or augmentation differs.*step 1 -> 2"):
        other.load_state_dict(state)
    edited = {**state, "global": {**state["global"], "consumed": state["global"]["consumed"] + 1}}
    with pytest.raises(ConfigError, match="global draws consumed"):
        loaders(ds, 2, "torch")[1].load_state_dict(edited)
