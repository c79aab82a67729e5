"""Aspect-ratio grouping of variable-size batches (issue 23: 4): each batch of one shape group (the
leftovers aside), every draw served once with its own parameters, the same batches on both backends,
a pure function of (seed, epoch, rank, world size), exact resumption, and less padding."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import (AspectGroupedSampler, AugmentSpec, ConfigError, DaliLoader, SampleIndex, WeightedSampler,
                          padding_fraction)
from dali_backend.sampling.clips import ClipSampler
from dali_backend.sampling.grouping import aspect_edges, aspect_groups, grouped_order
from dali_backend.sampling.sampler import LabelledItems
from dali_backend.transforms import ColorJitter, RandomHorizontalFlip, Resize
from fallback import ImageDataset
from tests.helpers.levels import assert_within_tolerance

# (height, width): landscape 4:3 and 16:9, portrait 3:4 and 9:16, square; 23 files in two classes
SHAPES = [(24, 32), (32, 24), (18, 32), (28, 28), (32, 18)]
N = 23
B = 4
MULTIPLE = 4


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> SampleIndex:
    root = tmp_path_factory.mktemp("aspects")
    for k in range(N):
        h, w = SHAPES[k * 3 % len(SHAPES)]
        write(root / ("a" if k % 3 else "b") / f"img{k:02d}.jpg", jpeg_bytes(h, w, seed=k, color=True))
    return SampleIndex.from_folder(root, progress=False)


def spec(pad: int | None = MULTIPLE) -> AugmentSpec:
    ops = [Resize(16, max_size=28), RandomHorizontalFlip(), ColorJitter(0.3, 0.3)]
    return AugmentSpec(ops=ops if pad else [*ops, Resize((16, 16))], color="rgb", pad_batch=pad, dtype="uint8")


def weighted(index, **kw) -> WeightedSampler:
    return WeightedSampler(index, seed=kw.pop("seed", 3), mode=kw.pop("mode", "uniform"),
                           replacement=kw.pop("replacement", False), **kw)


def grouped(index, batch_size: int = B, groups=2, **kw) -> AspectGroupedSampler:
    return AspectGroupedSampler(weighted(index, **kw), batch_size, groups=groups)


def run(index, sampler, kind: str, epoch: int = 0, **kw) -> list[tuple]:
    loader = DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=B, sampler=sampler, return_meta=True,
                        **KINDS[kind], **kw)
    try:
        loader.set_epoch(epoch)
        out = list(loader)
        assert loader.stats()["accounted"] == loader.stats()["draws"] == len(sampler)
        return out
    finally:
        loader.close()


def bucket_reference(groups: np.ndarray, batch_size: int) -> np.ndarray:
    """GroupedBatchSampler's loop, written plainly: the order grouped_order must compute."""
    buckets: dict[int, list[int]] = {}
    out: list[int] = []
    for i, g in enumerate(groups.tolist()):
        buckets.setdefault(g, []).append(i)
        if len(buckets[g]) == batch_size:
            out += buckets.pop(g)
    for g in sorted(buckets):
        out += buckets[g]
    return np.asarray(out, dtype=np.int64)


def test_grouped_order_is_the_bucket_loop():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, k, b = int(rng.integers(0, 50)), int(rng.integers(1, 5)), int(rng.integers(1, 8))
        g = rng.integers(0, k, n)
        order = grouped_order(g, b)
        assert np.array_equal(order, bucket_reference(g, b)), (g, b)
        assert np.array_equal(np.sort(order), np.arange(n))  # a permutation
        full = sum(c // b for c in np.bincount(g, minlength=k)) * b
        assert all(len(set(g[order[j:j + b]])) == 1 for j in range(0, full, b))  # full batches: one group


def test_aspect_groups_and_edges():
    assert aspect_edges(2).tolist() == [1.0]
    assert np.allclose(aspect_edges(3), [2 ** (-1 / 3), 2 ** (1 / 3)]) and np.allclose(aspect_edges(4), [0.5 ** 0.5, 1, 2 ** 0.5])
    assert aspect_edges(1).size == 0 and aspect_edges([0.8, 1.25]).tolist() == [0.8, 1.25]
    # portrait w < h is group 0; a square joins the landscape group
    assert aspect_groups(np.array([24, 32, 28, 32]), np.array([32, 24, 28, 18]), aspect_edges(2)).tolist() == [0, 1, 1, 1]
    assert aspect_groups(np.array([24, 32, 28, 32]), np.array([32, 24, 28, 18]), aspect_edges(3)).tolist() == [0, 2, 1, 2]


def served(batches) -> list[tuple[int, int]]:
    return [(int(i), int(p)) for b in batches for i, p in zip(b[-1]["index"], b[-1]["position"])]


def test_grouped_batches_on_both_backends(index):
    """One group per batch (the leftovers aside); every draw once, with its own parameters; the same
    batches, sizes and pixels on both backends; less padding than the same draws ungrouped."""
    sampler = grouped(index)
    groups = sampler.groups_of(np.arange(N))
    runs = {kind: run(index, sampler, kind) for kind in KINDS}
    plain = run(index, weighted(index), "torch")
    assert len(plain) == len(runs["torch"]) == -(-N // B)
    by_draw = {(int(i), int(p)): params for b in plain for i, p, params in
               zip(b[-1]["index"], b[-1]["position"], b[-1]["params"])}
    counts = np.bincount(groups[weighted(index).rank_draw(0)[0]], minlength=2)
    single = sum(c // B for c in counts)  # batches that can be of one group
    for kind, batches in runs.items():
        assert Counter(served(batches)) == Counter(list(by_draw)) and len(by_draw) == N  # the same draws, each once
        mixed = [k for k, b in enumerate(batches) if len(set(groups[b[-1]["index"].numpy()].tolist())) > 1]
        assert all(k >= single for k in mixed) and len(mixed) <= 1, (kind, mixed)  # the leftovers, at the end
        assert single >= len(batches) - 2
        for b in batches:  # each draw's augmentation parameters are those it has ungrouped
            for i, p, params in zip(b[-1]["index"], b[-1]["position"], b[-1]["params"]):
                assert params == by_draw[(int(i), int(p))]
    for (x, _, s, m), (u, _, t, n) in zip(runs["dali-cpu"], runs["torch"], strict=True):
        assert torch.equal(s, t) and torch.equal(m["index"], n["index"]) and torch.equal(m["position"], n["position"])
        assert x.shape == u.shape
    assert_within_tolerance([b[0] for b in runs["dali-cpu"]], [b[0] for b in runs["torch"]], spec(), 0)
    with_groups = padding_fraction([b[2] for b in runs["torch"]], MULTIPLE)
    without = padding_fraction([b[2] for b in plain], MULTIPLE)
    assert with_groups < without, (with_groups, without)
    # the measure is the batches' own: their pixels minus the valid ones
    total = sum(b[0].shape[0] * b[0].shape[2] * b[0].shape[3] for b in plain)
    valid = sum(int((b[2][:, 0] * b[2][:, 1]).sum()) for b in plain)
    assert without == pytest.approx(1 - valid / total)


def test_a_pure_function_of_seed_epoch_and_partition(index):
    a, b = grouped(index), grouped(index)
    for epoch in (0, 1, 7):
        ia, pa = a.rank_draw(epoch)
        ib, pb = b.rank_draw(epoch)
        assert np.array_equal(ia, ib) and np.array_equal(pa, pb)
        plain_i, plain_p = weighted(index).rank_draw(epoch)
        assert sorted(zip(ia.tolist(), pa.tolist())) == sorted(zip(plain_i.tolist(), plain_p.tolist()))
    assert not np.array_equal(a.rank_draw(0)[1], a.rank_draw(1)[1])
    assert not np.array_equal(a.rank_draw(0)[1], grouped(index, seed=4).rank_draw(0)[1])
    assert [tuple(d) for d in a.draws(2)] == [(int(i), 2, int(p)) for i, p in zip(*a.rank_draw(2))]
    # the epoch is the wrapped sampler's: set on either, seen by both
    a.set_epoch(3)
    assert a.sampler.epoch == 3 and a.epoch == 3 and len(a) == len(a.sampler) == N
    a.sampler.set_epoch(4)
    assert a.epoch == 4 and [d.position for d in a] == a.rank_draw(4)[1].tolist()


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_partition_the_epoch(index, drop_last):
    world = 3
    ranks = [grouped(index, rank=r, world_size=world, drop_last=drop_last) for r in range(world)]
    plain = [weighted(index, rank=r, world_size=world, drop_last=drop_last) for r in range(world)]
    positions = []
    for g, p in zip(ranks, plain):
        gi, gp = g.rank_draw(1)
        pi, pp = p.rank_draw(1)
        assert len(g) == len(p) == len(gp)
        assert sorted(zip(gi.tolist(), gp.tolist())) == sorted(zip(pi.tolist(), pp.tolist()))  # its own share
        positions += gp.tolist()
        groups = g.groups_of(gi, 1)
        full = sum(c // B for c in np.bincount(groups)) * B
        assert all(len(set(groups[j:j + B].tolist())) == 1 for j in range(0, full, B))
    want = (N // world if drop_last else -(-N // world)) * world
    assert sorted(positions) == list(range(want))  # every global position on exactly one rank


@pytest.mark.parametrize("kind", list(KINDS))
def test_resume_mid_epoch_is_exact(index, kind):
    full = run(index, grouped(index), kind, epoch=2)
    loader = DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=B, sampler=grouped(index), return_meta=True,
                        **KINDS[kind])
    loader.set_epoch(2)
    it = iter(loader)
    first = [next(it), next(it)]
    state = loader.state_dict()
    loader.close()
    resumed = DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=B, sampler=grouped(index), return_meta=True,
                         **KINDS[kind])
    resumed.load_state_dict(state)
    rest = list(resumed)
    st = resumed.stats()
    resumed.close()
    assert served(first + rest) == served(full)
    for x, y in zip(first + rest, full, strict=True):
        assert torch.equal(x[0], y[0]) and torch.equal(x[2], y[2])
    assert st["resumed"] == 2 * B and st["accounted"] == st["draws"] == N


def test_resumption_on_other_ranks_only_at_an_epoch_boundary(index):
    def loader(rank, world):
        return DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=B, backend="torch", device="cpu",
                          sampler=grouped(index, rank=rank, world_size=world))

    two = loader(0, 2)
    it = iter(two)
    next(it)
    mid = two.state_dict()
    list(it)
    end = two.state_dict()
    two.close()
    three = loader(1, 3)
    with pytest.raises(ConfigError, match=r"mid-epoch .*AspectGroupedSampler.*resume on 2 ranks"):
        three.load_state_dict(mid)
    three.load_state_dict(end)  # a finished epoch: nothing left to deal out
    assert list(three) == [] and three.stats()["accounted"] == three.stats()["draws"]
    three.close()
    # another grouping is another sampler: refused by name
    other = DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=B, backend="torch", device="cpu",
                       sampler=grouped(index, groups=3, rank=0, world_size=2))
    with pytest.raises(ConfigError, match="grouping"):
        other.load_state_dict(mid)
    other.close()


def test_data_changes_follow_the_wrapped_sampler(index):
    sampler = grouped(index)
    loader = DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=B, backend="torch", device="cpu",
                        sampler=sampler, drop_last=True)
    assert len(loader) == N // B
    first = list(loader)
    assert len(first) == N // B and loader.stats()["dropped"] == N % B
    loader.exclude([0, 1, 2], from_epoch=1)
    assert sampler.sampler.num_samples_at(1) == N - 3
    loader.set_epoch(1)
    idx, _ = sampler.rank_draw(1)
    assert len(idx) == N - 3 and not {0, 1, 2} & set(idx.tolist())
    assert len(list(loader)) == (N - 3) // B and loader.stats()["accounted"] == N - 3
    loader.close()


def test_refused_combinations(index, tmp_path):
    with pytest.raises(ConfigError, match="ClipSampler; clips are not grouped"):
        AspectGroupedSampler(ClipSampler(index, clip_len=2, step=2, mode="sequential"), B)
    with pytest.raises(ConfigError, match="must be a WeightedSampler.*got list"):
        AspectGroupedSampler(list(range(N)), B)
    with pytest.raises(ConfigError, match="already grouped"):
        AspectGroupedSampler(grouped(index), B)
    with pytest.raises(ConfigError, match="without image sizes"):
        AspectGroupedSampler(WeightedSampler(LabelledItems(np.zeros(4, np.int64), ["a"])), B)
    with pytest.raises(ConfigError, match=r"batch_size=0"):
        AspectGroupedSampler(weighted(index), 0)
    for bad in (0, [1.2, 0.8], [], [-1.0], "wide"):
        with pytest.raises(ConfigError, match="groups="):
            AspectGroupedSampler(weighted(index), B, groups=bad)
    with pytest.raises(ConfigError, match=r"batch_size=8 .*batches of 4.*batch_size=8\)"):
        DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=8, sampler=grouped(index), backend="torch")
    with pytest.raises(ConfigError, match="one output size.*pad_batch=k"):
        DaliLoader(ImageDataset(index, spec(None), seed=5), batch_size=B, sampler=grouped(index), backend="torch")
    write(tmp_path / "x" / "one.jpg", jpeg_bytes(20, 30))
    other = SampleIndex.from_folder(tmp_path, progress=False)
    with pytest.raises(ConfigError, match="another index"):
        DaliLoader(ImageDataset(other, spec(), seed=5), batch_size=B, sampler=grouped(index), backend="torch")
    with pytest.raises(ConfigError, match=r"multiple=0"):
        padding_fraction([np.ones((2, 2), np.int64)], 0)
    with pytest.raises(ConfigError, match=r"batch 0 has sizes of shape \(3,\)"):
        padding_fraction([np.ones(3, np.int64)], 4)


def test_padding_fraction_by_hand():
    # 10 x 20 beside 20 x 10: a 20 x 20 batch of two, half of it valid; rounded to 8: 24 x 24
    sizes = [np.array([[10, 20], [20, 10]])]
    assert padding_fraction(sizes, 1) == 0.5
    assert padding_fraction(sizes, 8) == pytest.approx(1 - 400 / (2 * 24 * 24))
    assert padding_fraction([torch.tensor([[[8, 8], [8, 8]]])], 8) == 0.0  # clips [B, T, 2], tensors
    assert padding_fraction([], 8) == 0.0


@pytest.mark.parametrize("kind", list(KINDS))
def test_passes_follow_the_grouped_plan_epoch_after_epoch(index, kind):
    """Pass after pass on one loader (DALI plans the next epoch ahead): each pass serves its epoch's
    grouped order, a new one each epoch; the sampler survives a copy and a pickle."""
    import copy
    import pickle

    sampler = grouped(index)
    loader = DaliLoader(ImageDataset(index, spec(), seed=5), batch_size=B, sampler=sampler, return_meta=True,
                        **KINDS[kind])
    passes = [served(list(loader)) for _ in range(3)]
    loader.close()
    for epoch, got in enumerate(passes):
        idx, pos = sampler.rank_draw(epoch)
        assert got == list(zip(idx.tolist(), pos.tolist())), (kind, epoch)
    assert passes[0] != passes[1] != passes[2]
    for clone in (copy.deepcopy(sampler), pickle.loads(pickle.dumps(sampler))):
        assert np.array_equal(clone.rank_draw(1)[1], sampler.rank_draw(1)[1]) and clone.epoch == sampler.epoch


@pytest.mark.parametrize("groups", [2.0, 3.0, np.float64(2.0), 1.0])
def test_a_float_number_of_groups_is_refused_not_taken_for_an_edge(tmp_path, groups):
    """groups=2.0 (a count read from a YAML/JSON config) would be one edge at w/h = 2.0 if taken as a list:
    4:3 and 16:9 landscapes in the portraits' group, the grouping silently saving nothing. Refused."""
    write(tmp_path / "a" / "x.jpg", jpeg_bytes(24, 32))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    with pytest.raises(ConfigError, match=r"number of groups as an int .* as a list"):
        AspectGroupedSampler(WeightedSampler(index), 4, groups=groups)
    assert AspectGroupedSampler(WeightedSampler(index), 4, groups=[2.0]).edges.tolist() == [2.0]


def test_every_attribute_of_the_wrapped_sampler_is_shared(index):
    """AspectGroupedSampler is a view: it reads and writes the WeightedSampler's state through properties.
    A state attribute WeightedSampler gains later must be shared too, or the view would silently keep a
    stale copy (set_epoch on one not seen by the other)."""
    inner = weighted(index)
    inner.set_epoch(3)  # attributes set lazily too
    view = AspectGroupedSampler(inner, B)
    shared = {name for name, v in vars(AspectGroupedSampler).items() if isinstance(v, property)}
    missing = set(vars(inner)) - shared
    assert not missing, f"WeightedSampler state not shared by AspectGroupedSampler: {sorted(missing)}"
    view.set_epoch(5)
    assert inner.epoch == 5 and view.epoch == 5
