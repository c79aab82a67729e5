"""The draw's epoch, not the dataset's: only ``sampler.set_epoch(e)`` is called, never ``ds.set_epoch``.

A ``WeightedSampler`` yields Draws that carry their epoch; the augmentation parameters must come from
that epoch. The semantics tests call ``ds.set_epoch`` together with the sampler's, which hides a
dataset that used its own epoch (still 0 here) instead of the draw's. The expected pixels are built
here from the decoded file and ``spec.make_params(seed, e, position, size)``, without the dataset's epoch.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from bench.equivalence import diff_stats, over_bound
from tests.helpers import KINDS
from dali_backend import AugmentSpec, DaliLoader, WeightedSampler
from dali_backend.sampling.sampler import Draw
from fallback import ImageDataset, ops

EPOCH = 3
SPEC = AugmentSpec(size=24, rotate_deg=20, brightness=0.3, contrast=0.3, dtype="uint8")


@pytest.fixture(scope="module")
def ds(defect_index):
    d = ImageDataset(defect_index, SPEC, seed=7)
    assert d.epoch == 0
    return d


def expected(ds, draws: list[Draw]) -> torch.Tensor:
    """uint8 [n, 3, H, W] of ``draws`` from first principles: decode, the epoch's parameters, normalise."""
    out = []
    for d in draws:
        img = ds.decode(d.index)
        params = ds.spec.make_params(ds.seed, d.epoch, d.position, img.shape[:2])
        out.append(ops.normalize(torch.from_numpy(ops.apply_spec(img, ds.spec, params))[None], ds.spec)[0])
    return torch.stack(out)


def sampler_at(ds, epoch: int) -> WeightedSampler:
    s = WeightedSampler(ds.index, seed=11, num_samples=12)
    s.set_epoch(epoch)
    return s


def test_the_epochs_give_different_parameters(ds):
    """Else the tests below could not tell epoch 3 from epoch 0."""
    draws = sampler_at(ds, EPOCH).draws()
    assert draws == sampler_at(ds, 0).draws(EPOCH) and all(d.epoch == EPOCH for d in draws)
    a = [ds.spec.make_params(ds.seed, EPOCH, d.position, (120, 160))[2] for d in draws]
    b = [ds.spec.make_params(ds.seed, 0, d.position, (120, 160))[2] for d in draws]
    assert all(float(x["angle"]) != float(y["angle"]) for x, y in zip(a, b, strict=True))
    x3, x0 = expected(ds, draws), expected(ds, [d._replace(epoch=0) for d in draws])
    assert (x3.int() - x0.int()).abs().float().mean() > 5  # different pixels, not a level here and there


def test_the_dataset_item_uses_the_draws_epoch(ds):
    draws = sampler_at(ds, EPOCH).draws()[:4]
    assert ds.epoch == 0
    got = torch.stack([ds[d][0] for d in draws])
    assert torch.equal(got, expected(ds, draws))
    assert ds.params(draws[0]) != ds.params(draws[0]._replace(epoch=0))


def test_plain_dataloader_with_a_weighted_sampler_runs_the_samplers_epoch(ds):
    sampler = sampler_at(ds, EPOCH)
    got = list(DataLoader(ds, batch_size=5, sampler=sampler))
    assert [len(y) for _, y in got] == [5, 5, 2]
    draws = sampler.draws()
    assert torch.equal(torch.cat([x for x, _ in got]), expected(ds, draws))
    assert torch.cat([y for _, y in got]).tolist() == ds.index.labels[[d.index for d in draws]].tolist()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_loader_runs_the_samplers_epoch_when_only_the_sampler_is_told(ds, kind, workers):
    sampler = WeightedSampler(ds.index, seed=11, num_samples=12)
    loader = DaliLoader(ds, batch_size=5, sampler=sampler, return_meta=True, num_workers=workers, **KINDS[kind])
    try:
        sampler.set_epoch(EPOCH)  # on the sampler only: neither the loader nor the dataset is told
        out = list(loader)
        assert loader.stats()["epoch"] == EPOCH
    finally:
        loader.close()
    assert ds.epoch == 0
    draws = sampler.draws(EPOCH)
    meta = [m for _, _, m in out]
    assert torch.cat([m["epoch"] for m in meta]).tolist() == [EPOCH] * 12
    assert torch.cat([m["position"] for m in meta]).tolist() == [d.position for d in draws]
    params = [p for m in meta for p in m["params"]]
    for p, d in zip(params, draws, strict=True):
        img_hw = (int(ds.index.heights[d.index]), int(ds.index.widths[d.index]))
        want = ds.spec.make_params(ds.seed, EPOCH, d.position, img_hw)
        assert p["angle"] == pytest.approx(float(want[2]["angle"]), abs=1e-6)
        assert p["brightness"] == pytest.approx(float(want[3]["brightness"]), abs=1e-6)
        assert p["contrast"] == pytest.approx(float(want[3]["contrast"]), abs=1e-6)
    got = torch.cat([x for x, _, _ in out])
    want = expected(ds, draws)
    if kind.startswith("torch"):  # both OpenCV executors: bit-exact
        assert torch.equal(got, want)
    else:  # DALI's rotation: within the published operator tolerance
        stats = diff_stats(list(got.numpy()), list(want.numpy()))
        assert not over_bound("end-to-end", stats, "cpu") and stats["max"] <= 2, stats
