"""The traversal plans (one object per sampler kind), built without a loader, and the rule that the
facade examines the sampler's type in one place only (:func:`dali_backend.facade.plans.make_plan`)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, ConfigError, SampleIndex, WeightedSampler
from dali_backend.core.boundary import Kind, Plan
from dali_backend.facade.plans import ClipPlan, GroupedPlan, IndexPlan, WeightedPlan, make_plan
from dali_backend.sampling.clips import ClipSampler
from dali_backend.sampling.grouping import AspectGroupedSampler
from dali_backend.sampling.sampler import plan_epoch
from fallback import ImageDataset

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> ImageDataset:
    root = tmp_path_factory.mktemp("plans")
    for s, (cls, frames) in enumerate([("a", 5), ("b", 4)]):
        for k in range(frames):
            write(root / cls / f"seq{s}" / f"f{k:02d}.jpg", jpeg_bytes(16, 24, seed=10 * s + k))
    return ImageDataset(SampleIndex.from_folder(root, progress=False), AugmentSpec(size=8, dtype="uint8"), seed=1)


def test_make_plan_chooses_one_plan_per_sampler_kind(ds):
    weighted = WeightedSampler(ds.index, num_samples=6, seed=2)
    assert type(make_plan(weighted, ds, 2)) is WeightedPlan
    assert type(make_plan(list(range(len(ds))), ds, 2)) is IndexPlan
    assert type(make_plan(ClipSampler(ds.index, clip_len=2, step=1, num_samples=3, seed=0), ds, 2)) is ClipPlan
    with pytest.raises(ConfigError, match="pad_batch"):  # a grouped plan checks its loader's spec
        make_plan(AspectGroupedSampler(weighted, 2), ds, 2)


def test_a_weighted_plan_is_the_samplers_pure_draw_with_a_prefetch_key(ds):
    s = WeightedSampler(ds.index, num_samples=7, seed=4, rank=1, world_size=2)
    plan = WeightedPlan(s, ds)
    rows = plan.rows(3)
    assert np.array_equal(rows[:, :3], plan_epoch(s, 3, 0)) and (rows[:, Plan.KIND] == Kind.DRAW).all()
    assert plan.num_samples(3) == 7 and plan.partitioned and plan.weighted and not plan.clips
    assert plan.prefetch_key(3, 1) == ((id(s), s.schedule.version), 3, 1)
    assert plan.changes("exclude") is s and plan.index_at(3) is ds.index and not plan.draws_elsewhere(3)


def test_an_index_plan_has_no_prefetch_key_no_padding_and_refuses_data_changes(ds):
    plan = IndexPlan([0, 2, 4], ds)
    assert plan.rows(0)[:, Plan.INDEX].tolist() == [0, 2, 4]
    assert plan.prefetch_key(0, 0) is None and plan.num_samples(0) is None and plan.schedule() is None
    with pytest.raises(ConfigError, match="needs a WeightedSampler"):
        plan.changes("exclude")
    with pytest.raises(IndexError, match="outside"):
        IndexPlan([0, len(ds)], ds).rows(0)


def test_a_clip_plan_runs_each_clip_as_its_frames_at_the_clips_position(ds):
    s = ClipSampler(ds.index, clip_len=3, step=1, num_samples=4, seed=5)
    plan = ClipPlan(s, ds)
    rows = plan.rows(1)
    clips, positions = s.rank_draw(1)
    assert plan.clip_len == 3 and plan.clips and len(rows) == 3 * len(clips)
    assert np.array_equal(rows[:, Plan.INDEX], s.frames(clips).reshape(-1))
    assert np.array_equal(rows[:, Plan.POSITION], np.repeat(positions, 3)) and (rows[:, Plan.EPOCH] == 1).all()
    assert np.array_equal(plan.clip_draws(1, 0, 2), np.stack([clips, positions], axis=1)[:2])
    assert plan.prefetch_key(1, 0) == (id(s), 1, 0) and plan.num_samples(1) == 4


def test_the_facade_examines_the_samplers_type_in_the_plan_factory_only():
    kinds = r"(WeightedSampler|ClipSampler|AspectGroupedSampler)"
    found = {}
    for path in sorted((ROOT / "dali_backend" / "facade").glob("*.py")):
        hits = re.findall(rf"isinstance\([^)]*{kinds}", path.read_text())
        if hits:
            found[path.name] = len(hits)
    assert found == {"plans.py": 3}, found


def test_the_loaders_telemetry_is_a_held_object_not_a_mixin():
    from dali_backend import DaliLoader
    from dali_backend.telemetry import LoaderTelemetry, check_hook, live

    assert not [c.__name__ for c in DaliLoader.__mro__ if c.__name__ == "TelemetryMixin"]
    held = LoaderTelemetry("torch", None)  # built without a loader
    assert live(held) is held
    with pytest.raises(ConfigError, match="telemetry=False"):
        live(None)
    with pytest.raises(ConfigError, match="every_s"):
        check_hook(print, -1)


def test_passes_account_and_resume_without_a_loader(ds):
    from dali_backend.facade.epochs import Passes

    sampler = WeightedSampler(ds.index, num_samples=7, seed=4)
    passes = Passes(make_plan(sampler, ds, 3), 3, drop_last=False)
    assert len(passes) == 3 and passes.begin_pass() == 0
    rows = passes.plan.rows(0)
    passes.begin_epoch(len(rows))
    passes.check_resumable(0, rows)
    first = rows[:3]
    passes.account(first[:, Plan.INDEX], first[:, Plan.INDEX], first[:, Plan.POSITION])
    state = passes.state_dict()
    assert state["epoch"] == 0 and state["batches_done"] == 1 and passes.stats()["yielded"] == 3
    again = Passes(make_plan(WeightedSampler(ds.index, num_samples=7, seed=4), ds, 3), 3, drop_last=False)
    again.load_state_dict(state)
    assert again.begin_pass() == 0 and again.begin_epoch(len(rows)) == 1  # resumes at the second batch
    assert again.stats()["resumed"] == 3
    assert passes.begin_pass() == 1  # a pass without set_epoch runs the next epoch
