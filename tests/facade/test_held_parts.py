"""The loader's parts held by composition, each built here without a loader: the data changes
(:class:`~dali_backend.facade.changes.DataChanges`) and the batches of frames or clips
(:mod:`dali_backend.facade.clipbatches`); and the rule that the facade has no mixin and that no part
reads another object's private attributes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, ConfigError, SampleIndex, WeightedSampler
from dali_backend.core.boundary import Batch, Plan
from dali_backend.facade.changes import DataChanges
from dali_backend.facade.clipbatches import ClipBatches, FrameBatches, batches_of
from dali_backend.facade.epochs import Passes
from dali_backend.facade.plans import make_plan
from dali_backend.sampling.clips import ClipSampler
from fallback import ImageDataset

ROOT = Path(__file__).resolve().parents[2]
FACADE = ROOT / "dali_backend" / "facade"
SPEC = AugmentSpec(size=8, dtype="uint8")


def folder(root: Path, frames: dict[str, int]) -> Path:
    for s, (cls, n) in enumerate(frames.items()):
        for k in range(n):
            write(root / cls / f"seq{s}" / f"f{k:02d}.jpg", jpeg_bytes(16, 24, seed=10 * s + k))
    return root


@pytest.fixture
def ds(tmp_path) -> ImageDataset:
    index = SampleIndex.from_folder(folder(tmp_path / "data", {"a": 5, "b": 4}), progress=False)
    return ImageDataset(index, SPEC, seed=1)


class Recorded:
    """An executor that records being closed (what DataChanges does with the one it replaces)."""

    def __init__(self, dataset):
        self.dataset, self.closed = dataset, False

    def close(self) -> None:
        self.closed = True


class Switches:
    """A telemetry that records the executors it is told about."""

    def __init__(self):
        self.seen = []

    def switch_executor(self, executor) -> None:
        self.seen.append(executor)


def test_data_changes_take_effect_at_an_epoch_boundary_without_a_loader(ds):
    plan = make_plan(WeightedSampler(ds.index, seed=3), ds, 2)
    passes = Passes(plan, 2, drop_last=False)
    changes = DataChanges(plan, passes, Recorded)
    assert changes.exclude([0]) == 1  # the epoch after the selected one (0)
    assert 0 not in plan.rows(1)[:, Plan.INDEX] and 0 in plan.rows(0)[:, Plan.INDEX]
    passes.begin_pass()
    passes.epoch_planned = True  # epoch 0's pass has begun: its draws cannot change any more
    with pytest.raises(ConfigError, match="epoch 0 has begun"):
        changes.exclude([1], from_epoch=0)
    assert changes.exclude([1], from_epoch=2) == 2


def test_data_changes_replace_the_dataset_and_the_executor_at_the_epoch_of_another_index(ds, tmp_path):
    plan = make_plan(WeightedSampler(ds.index, seed=3, mode="uniform"), ds, 2)
    telemetry = Switches()
    changes = DataChanges(plan, Passes(plan, 2, drop_last=False), Recorded, telemetry)
    first = Recorded(ds)
    assert changes.executor_for(0, first) is first  # no change scheduled: the same executor
    grown = SampleIndex.from_folder(folder(Path(ds.index.root), {"a": 7, "b": 4}), progress=False)
    assert changes.update_index(grown, from_epoch=2) == 2
    assert changes.executor_for(1, first) is first and plan.dataset is ds  # epoch 1 still draws from the old one
    second = changes.executor_for(2, first)
    assert first.closed and isinstance(second, Recorded) and not second.closed
    assert plan.dataset is second.dataset and plan.dataset.index.fingerprint == grown.fingerprint
    assert plan.dataset.spec is ds.spec and plan.dataset.seed == ds.seed
    assert telemetry.seen == [None, second]  # the old engine's time read before it stopped, then the new one
    assert changes.executor_for(3, second) is second


def test_data_changes_need_a_sampler_with_a_data_schedule(ds):
    plan = make_plan(list(range(len(ds))), ds, 2)
    changes = DataChanges(plan, Passes(plan, 2, drop_last=False), Recorded)
    with pytest.raises(ConfigError, match="needs a WeightedSampler"):
        changes.exclude([0])
    with pytest.raises(ConfigError, match="needs a WeightedSampler"):
        changes.update_index(ds.index)


def executor_batch(ds: ImageDataset, rows: np.ndarray) -> Batch:
    """What an executor returns for planned ``rows`` (every draw served as planned)."""
    n, labels = len(rows), ds.index.labels
    params = [ds.spec.make_params(ds.seed, int(e), int(p), (16, 24)) for e, p in rows[:, [Plan.EPOCH, Plan.POSITION]]]
    return Batch(images=torch.zeros(n, 1, 8, 8, dtype=torch.uint8), labels=torch.from_numpy(labels[rows[:, 0]]),
                 planned=rows[:, Plan.INDEX].copy(), served=rows[:, Plan.INDEX].copy(),
                 positions=rows[:, Plan.POSITION].copy(), epochs=rows[:, Plan.EPOCH].copy(), params=params)


def test_clip_batches_regroup_frames_into_clips_and_count_clips_without_a_loader(ds):
    sampler = ClipSampler(ds.index, clip_len=3, step=1, num_samples=4, seed=5)
    plan = make_plan(sampler, ds, 2)
    passes = Passes(plan, 2, drop_last=False)
    batches = batches_of(plan, passes, 2, return_meta=True)
    assert type(batches) is ClipBatches and batches.table is not None
    epoch = passes.begin_pass()
    rows = plan.rows(epoch)
    passes.begin_epoch(len(rows) // 3)
    batches.begin_pass(epoch, len(rows) // 3)
    batch = executor_batch(ds, rows[:6])
    images, labels, meta = batches.output(batch, batch.images, None)
    clips, _ = sampler.rank_draw(epoch)
    assert images.shape == (2, 3, 1, 8, 8) and labels.tolist() == sampler.labels[clips[:2]].tolist()
    assert meta["clip"].tolist() == clips[:2].tolist() and meta["index"].shape == (2, 3)
    assert passes.batches_done == 1 and passes.stats()["yielded"] == 2  # clips, not frames
    wrong = executor_batch(ds, rows[:6][::-1])  # frames of other positions than the clips planned
    with pytest.raises(RuntimeError, match="clips of positions"):
        batches.output(wrong, wrong.images, None)


def test_frame_batches_apply_the_batch_transform_and_count_draws_without_a_loader(ds):
    plan = make_plan(WeightedSampler(ds.index, seed=3), ds, 4)
    passes = Passes(plan, 4, drop_last=False)
    batches = batches_of(plan, passes, 4)
    assert type(batches) is FrameBatches and batches.table is None
    epoch = passes.begin_pass()
    rows = plan.rows(epoch)
    passes.begin_epoch(len(rows))
    batch = executor_batch(ds, rows[:4])
    images, labels = batches.output(batch, batch.images, None, lambda x, y: (x + 1, y * 10))
    assert (images == 1).all() and labels.tolist() == (10 * ds.index.labels[rows[:4, 0]]).tolist()
    assert passes.stats()["yielded"] == 4


def test_the_facade_has_no_mixin_and_its_parts_read_no_private_attribute_of_another_object():
    from dali_backend import DaliLoader

    assert [c.__name__ for c in DaliLoader.__mro__] == ["DaliLoader", "object"]
    mixins, foreign = [], []
    for path in sorted(FACADE.glob("*.py")):
        tree = ast.parse(path.read_text())
        mixins += [f"{path.name}:{n.name}" for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and "Mixin" in n.name]
        for node in ast.walk(tree):  # x._name where x is not self (or a class's own cls)
            if isinstance(node, ast.Attribute) and re.match(r"_[a-z]", node.attr) and \
                    not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "sys")):
                foreign.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert mixins == []
    # Accelerate's GradientState._add_dataloader/_remove_dataloader: its own protocol for loaders
    assert [f for f in foreign if "_dataloader" not in f] == [], foreign


def test_accelerates_padding_warning_is_said_once_per_loader_and_only_for_a_weighted_plan(monkeypatch):
    import warnings
    from types import SimpleNamespace

    from dali_backend.facade import accelerate_state as acc

    class State:  # Accelerate's GradientState, as far as begin() uses it
        def _add_dataloader(self, loader) -> None:
            pass

    class Loader:  # what begin() reads of a loader: its public attributes
        sampler = SimpleNamespace(world_size=2, num_padded=1)
        batch_size, drop_last = 4, False

    monkeypatch.setattr(acc, "gradient_state", State)
    monkeypatch.setattr(acc, "processes", lambda: 2)
    monkeypatch.setattr(acc, "gathered_real", lambda *a: None)  # padding in the middle of the last batch
    one, two = Loader(), Loader()
    with pytest.warns(UserWarning, match="gather_for_metrics cannot cut them off"):
        acc.begin(one, 0, 0, weighted=True)
    assert one.remainder == acc.UNKNOWN
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.begin(one, 1, 0, weighted=True)  # said once per loader
        acc.begin(two, 0, 0, weighted=False)  # not a WeightedSampler: its padding is not known
    with pytest.warns(UserWarning, match="gather_for_metrics cannot cut them off"):
        acc.begin(two, 0, 0, weighted=True)


def test_the_loaders_batch_transform_is_read_at_each_batch_as_before_the_parts(ds):
    from dali_backend import DaliLoader

    with DaliLoader(ds, batch_size=3, backend="torch", device="cpu", telemetry=False) as loader:
        first = next(iter(loader))[1]
        loader.batch_transform = lambda images, labels: (images, labels * 0 + 7)  # changed between passes
        assert (next(iter(loader))[1] == 7).all() and not (first == 7).all()
