"""A chain's targets (``move_targets``) against its operations' kernels called one by one: consecutive crops,
flips and resizes are composed as 1-D integer maps and gathered once (the same class ids, fill included),
and boxes travel as plain rows between the operations (within float32 rounding of the one-by-one result);
the batch's boxes cross the worker queue as one array and come back as per-image tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dali_backend import transforms as T
from dali_backend.errors import ConfigError
from dali_backend.transforms import targets
from dali_backend.transforms.base import KERNELS, register_kernel
from dali_backend.transforms.targets import BoxPolicy, Boxes, forward_matrix, move_boxes, move_targets

SIZE = (61, 83)
CHAINS = {
    "rrc+flips": [T.RandomResizedCrop((40, 56), scale=(0.3, 1.0)), T.RandomHorizontalFlip(), T.RandomVerticalFlip()],
    "resize+centercrop": [T.Resize(70), T.CenterCrop(64)],
    "pad+letterbox": [T.RandomCrop(72, pad_if_needed=True, fill=3), T.Resize((50, 90), letterbox=True),
                      T.RandomHorizontalFlip()],
    "recipe": [T.RandomResizedCrop(48, scale=(0.5, 1.0)), T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3),
               T.RandomRotation(15), T.RandomAffine(10, translate=(0.05, 0.05), scale=(0.9, 1.1), shear=5),
               T.CenterCrop(40), T.RandomVerticalFlip()],
    "quarter turns": [T.Resize((50, 70)), T.RandomRot90(), T.RandomCrop(40, padding=6)],
}


def one_by_one(ops, params, mask, fill):
    for op, p in zip(ops, params):
        if not op.is_identity:
            mask = type(op).kernel_for("mask")(op, mask, p, fill=fill)
    return mask


def draws(ops, n=24):
    from dali_backend.core.augment import AugmentSpec

    spec = AugmentSpec(ops=ops, pad_batch=8)
    return [spec.make_params(seed=5, epoch=1, position=k, image_size=SIZE) for k in range(n)], spec.transforms


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("fill", [0, 255])
def test_a_chains_mask_equals_its_kernels_one_by_one(name, fill):
    mask = np.random.default_rng(2).integers(0, 5, SIZE).astype(np.uint8)
    params, ops = draws(CHAINS[name])
    for k, p in enumerate(params):
        got, _, _ = move_targets(ops, p, mask, fill=fill)
        want = one_by_one(ops, p, mask, fill)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), (name, k)


def test_consecutive_crops_flips_and_resizes_are_gathered_once(monkeypatch):
    calls = []
    real = targets.gathered
    monkeypatch.setattr(targets, "gathered", lambda *a: calls.append(1) or real(*a))
    params, ops = draws(CHAINS["rrc+flips"] + [T.ColorJitter(0.2)], n=3)
    for p in params:
        move_targets(ops, p, np.ones(SIZE, np.uint8))
    assert len(calls) == 3  # one gather per draw, not one per operation
    calls.clear()
    params, ops = draws(CHAINS["recipe"], n=2)
    for p in params:
        move_targets(ops, p, np.ones(SIZE, np.uint8))
    assert len(calls) == 4  # before the rotation, and after the affine: the warps are passes of their own


def test_the_warps_of_a_chain_share_one_source_loop_with_the_same_indices(monkeypatch):
    """Consecutive warps of one output size compute their float32 source indices in one loop: each the
    same as alone, bit for bit; a rotation then an affine (a colour operation between) is one call."""
    rng = np.random.default_rng(7)
    jobs = []
    for _ in range(3):
        a, sc = np.radians(rng.uniform(-180, 180)), rng.uniform(0.3, 3.0)
        m = np.array([[sc * np.cos(a), sc * np.sin(a), rng.uniform(-50, 50)],
                      [-sc * np.sin(a), sc * np.cos(a), rng.uniform(-50, 50)]], np.float32)
        jobs.append((m, 37, 61))
    together = targets.warp_sources(jobs)
    for job, got in zip(jobs, together):
        alone = targets.warp_sources([job])[0]
        assert got.shape == alone.shape == (61, 37, 2) and np.array_equal(got, alone)
    with pytest.raises(ConfigError, match="one .out_h, out_w."):
        targets.warp_sources([jobs[0], (jobs[1][0], 5, 60)])
    calls = []
    real = targets.warp_sources
    monkeypatch.setattr(targets, "warp_sources", lambda j: calls.append(len(j)) or real(j))
    params, ops = draws(CHAINS["recipe"], n=3)
    for p in params:
        move_targets(ops, p, np.ones(SIZE, np.uint8))
    assert calls == []  # on the exact grid: direct sums, no loop
    off_the_grid(monkeypatch)
    for p in params:
        move_targets(ops, p, np.ones(SIZE, np.uint8))
    assert calls == [2, 2, 2]


def off_the_grid(monkeypatch):
    """The kernels' warp matrices unrounded (as for outputs too large for the grid): their warps take DALI
    CPU's running sums, computed in shared loops."""
    monkeypatch.setattr(targets, "grid_matrix",
                        lambda inverse, out_size, tolerance=0: np.asarray(inverse)[:2].astype(np.float32))


@pytest.mark.parametrize("fill", [0, 255])
@pytest.mark.parametrize("grid", [True, False])
def test_a_batchs_masks_moved_together_equal_them_one_by_one(monkeypatch, fill, grid):
    """``move_masks`` (a batch's masks: the warps of all its samples off the grid share source loops of up to
    WARP_JOBS) gives each mask the class ids of ``move_mask`` alone, for chains and mask sizes mixed in one call."""
    if not grid:
        off_the_grid(monkeypatch)
    rng = np.random.default_rng(3)
    chains, want = [], []
    for name in sorted(CHAINS):
        params, ops = draws(CHAINS[name], n=12)
        for k, p in enumerate(params):
            mask = rng.integers(0, 5, SIZE if k % 3 else (SIZE[0] + 7, SIZE[1] - 9)).astype(np.uint8)
            if k % 3 == 0:  # another input size: the draw's parameters for it
                from dali_backend.core.augment import AugmentSpec

                p = AugmentSpec(ops=CHAINS[name], pad_batch=8).make_params(5, 1, k, mask.shape)
            chains.append((ops, p, mask))
            want.append(targets.move_mask(ops, p, mask, fill))
    calls = []
    real = targets.warp_sources
    monkeypatch.setattr(targets, "warp_sources", lambda j: calls.append(len(j)) or real(j))
    got = targets.move_masks(chains, fill)
    assert len(got) == len(want) and all(g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))
    # the recipe's 24 warps (12 draws x rotation + affine, one output size): loops of WARP_JOBS warps
    assert targets.WARP_JOBS == 8 and calls == ([] if grid else [8, 8, 8])
    assert targets.move_masks([], fill) == []


@pytest.mark.parametrize("fill", [0, 255])
def test_a_mask_all_fill_costs_no_pass_and_equals_its_kernels(monkeypatch, fill):
    """A mask all ``fill`` (a sample without a mask file: all background) comes out all ``fill`` at the
    chain's output size with no gather nor warp; a mask of another value, or one pixel off, takes the
    passes; an operation with a kernel of its own is run (nothing assumed of it)."""
    calls = []
    for name in ("warp_sources", "gathered", "warp_matrix"):  # nor the warps' matrices
        real = getattr(targets, name)
        monkeypatch.setattr(targets, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    for name in sorted(CHAINS):
        params, ops = draws(CHAINS[name], n=4)
        flat = np.full(SIZE, fill, np.uint8)
        other = np.full(SIZE, 255 - fill, np.uint8)
        spot = flat.copy()
        spot[30, 40] = 255 - fill
        got = targets.move_masks([(ops, p, m) for p in params for m in (flat, other, spot)], fill)
        want = [one_by_one(ops, p, m, fill) for p in params for m in (flat, other, spot)]
        assert all(g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want)), name
        calls.clear()
        targets.move_masks([(ops, p, flat) for p in params], fill)
        assert calls == [], name

    class _Drawn(T.RandomHorizontalFlip):  # "_": kept out of the operations' registry
        pass

    monkeypatch.setattr("dali_backend.transforms.base.KERNELS", dict(KERNELS))
    register_kernel(_Drawn, "mask", lambda op, mask, params, fill=0: np.pad(mask[1:], ((0, 1), (0, 0)),
                                                                             constant_values=7))
    ops = [T.CenterCrop(40), _Drawn(1.0), T.RandomRotation(10)]
    params = [op.make_params(seed=0, epoch=0, position=0, image_size=SIZE) for op in ops]
    flat = np.full(SIZE, fill, np.uint8)
    assert np.array_equal(targets.move_masks([(ops, params, flat)], fill)[0], one_by_one(ops, params, flat, fill))
    assert (targets.move_masks([(ops, params, flat)], fill)[0] == 7).any()


def test_a_warp_after_a_kernel_of_unknown_size_computes_its_own_sources(monkeypatch):
    """A registered kernel whose operation declares no output size (None) leaves the next warp's input
    size unknown when the batch is planned: that warp computes its sources when it runs, the same ids."""
    class _Grow(T.RandomHorizontalFlip):  # "_": kept out of the operations' registry
        def output_size(self, size, params):
            return None

    monkeypatch.setattr("dali_backend.transforms.base.KERNELS", dict(KERNELS))
    register_kernel(_Grow, "mask", lambda op, mask, params, fill=0: np.pad(mask, 3, constant_values=fill))
    ops = [_Grow(1.0), T.RandomRotation(20), T.RandomAffine(5, translate=(0.1, 0.1))]
    mask = np.random.default_rng(1).integers(0, 4, SIZE).astype(np.uint8)
    for k in range(4):
        params = [op.make_params(seed=1, epoch=0, position=k, image_size=SIZE) for op in ops]
        params[1:] = [op.make_params(seed=1, epoch=0, position=k, image_size=(SIZE[0] + 6, SIZE[1] + 6))
                      for op in ops[1:]]
        got = targets.move_masks([(ops, params, mask)] * 2, 7)
        want = one_by_one(ops, params, mask, 7)
        assert all(np.array_equal(g, want) for g in got)


def test_a_size_changing_kernel_registered_elsewhere_is_followed_on_the_mask_it_gives(monkeypatch):
    """An operation with a mask kernel of its own that changes the size but keeps Transform's default
    ``output_size`` (the input's): what follows it is planned on the mask its kernel gave, not on the size
    it declared (a plan made ahead built the resize's maps for the wrong size); a generator of chains works."""
    class _Pad3(T.RandomHorizontalFlip):  # "_": kept out of the operations' registry
        pass

    monkeypatch.setattr("dali_backend.transforms.base.KERNELS", dict(KERNELS))
    register_kernel(_Pad3, "mask", lambda op, mask, params, fill=0: np.pad(mask, 3, constant_values=fill))
    mask = np.random.default_rng(4).integers(0, 6, (8, 8)).astype(np.uint8)
    for ops in ([_Pad3(1.0), T.Resize((10, 10))], [T.CenterCrop(6), _Pad3(1.0), T.RandomHorizontalFlip(1.0),
                                                  T.Resize((9, 7)), T.RandomRotation(20), T.CenterCrop(5)]):
        params = [op.make_params(seed=2, epoch=0, position=0, image_size=(8, 8)) for op in ops]
        want = one_by_one(ops, params, mask, 0)
        got = targets.move_masks((c for c in [(ops, params, mask), (ops, params, np.zeros_like(mask))]), 0)
        assert np.array_equal(got[0], want) and np.array_equal(got[1], one_by_one(ops, params, 0 * mask, 0))


def test_large_warps_share_no_loop(monkeypatch):
    """The shared warp loops hold every warp's source indices until their samples are moved: they are
    capped by output pixels too (WARP_PIXELS), so full-size warps run a loop each, as one sample's did."""
    calls = []
    real = targets.warp_sources
    monkeypatch.setattr(targets, "warp_sources", lambda j: calls.append(len(j)) or real(j))
    off_the_grid(monkeypatch)
    side = int((targets.WARP_PIXELS / 4) ** 0.5) + 1  # four warps of this size exceed the cap, three do not
    ops = [T.RandomRotation(15)]
    params = [[ops[0].make_params(seed=0, epoch=0, position=k, image_size=(side, side))] for k in range(7)]
    mask = np.ones((side, side), np.uint8)
    got = targets.move_masks([(ops, p, mask) for p in params])
    assert calls == [3, 3, 1] and all(np.array_equal(g, one_by_one(ops, p, mask, 0)) for g, p in zip(got, params))


def test_an_operation_with_its_own_mask_kernel_is_not_composed(monkeypatch):
    class _Shifted(T.RandomHorizontalFlip):  # "_": kept out of the operations' registry
        pass

    monkeypatch.setattr("dali_backend.transforms.base.KERNELS", dict(KERNELS))  # the registration stays here
    register_kernel(_Shifted, "mask", lambda op, mask, params, fill=0: np.roll(mask, 1, axis=1))
    ops = [T.CenterCrop(40), _Shifted(1.0), T.RandomVerticalFlip(1.0)]
    params = [op.make_params(seed=0, epoch=0, position=0, image_size=SIZE) for op in ops]
    mask = np.arange(SIZE[0] * SIZE[1]).reshape(SIZE).astype(np.uint16)
    got, _, _ = move_targets(ops, params, mask)
    assert np.array_equal(got, np.roll(targets.crop(mask, *ops[0].window(params[0])), 1, axis=1)[::-1])
    with pytest.raises(ConfigError, match="move_targets"):
        move_targets(ops, params, np.zeros((4, 4, 3), np.uint8))


def random_boxes(rng, n):
    x1, y1 = rng.uniform(0, SIZE[1] - 2, n), rng.uniform(0, SIZE[0] - 2, n)
    x2, y2 = np.minimum(x1 + rng.uniform(0, 40, n), SIZE[1]), np.minimum(y1 + rng.uniform(0, 40, n), SIZE[0])
    return Boxes(np.stack([x1, y1, x2, y2], 1), np.arange(n), SIZE)


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("n", [3, 40])
def test_a_chains_boxes_equal_its_kernels_one_by_one(name, n):
    """Rows in doubles between the operations, float32 once at the end: within float32 rounding of the
    kernels called one by one (each rounds to float32), the same boxes kept and dropped."""
    rng = np.random.default_rng(n)
    params, ops = draws(CHAINS[name])
    policy = BoxPolicy(min_area=2.0, min_visibility=0.2)
    for k, p in enumerate(params):
        boxes = random_boxes(rng, n)
        _, got, dropped = move_targets(ops, p, None, boxes, policy)
        want = boxes
        for op, q in zip(ops, p):
            if not op.is_identity:
                want = type(op).kernel_for("boxes")(op, want, q)
        want, want_dropped = policy.apply(want)
        assert got.canvas == want.canvas and got.labels.tolist() == want.labels.tolist(), (name, k)
        np.testing.assert_allclose(got.xyxy, want.xyxy, atol=1e-3, err_msg=f"{name} {k}")
        np.testing.assert_allclose(got.visible, want.visible, atol=1e-5)
        assert dropped == want_dropped


def test_few_boxes_take_two_corners_and_give_the_numpy_paths_doubles(monkeypatch):
    """Up to FEW_BOXES boxes on Python floats move two corners, those the map's signs pick, not four: the
    same doubles as the numpy path's least and greatest of the four corners, bit for bit (axis-keeping
    maps, any affine map, boxes given reversed)."""
    from dali_backend.transforms import boxmove

    rng = np.random.default_rng(4)
    cases = []
    for _ in range(300):
        a, e = rng.choice([-1, 1]) * rng.uniform(0.2, 3), rng.choice([-1, 1]) * rng.uniform(0.2, 3)
        m = np.array([[a, 0, rng.uniform(-100, 100)], [0, e, rng.uniform(-100, 100)], [0, 0, 1]])
        cases.append((random_boxes(rng, int(rng.integers(0, boxmove.FEW_BOXES + 1))), m, tuple(rng.integers(1, 300, 2))))
    for _ in range(300):  # any map, and boxes given with x2 < x1 or y2 < y1 (a Boxes the kernels made by hand)
        b = random_boxes(rng, int(rng.integers(0, boxmove.FEW_BOXES + 1)))
        flipped = np.where(rng.random((len(b), 1)) < 0.3, b.xyxy[:, [2, 3, 0, 1]], b.xyxy)
        m = np.array([[*rng.uniform(-3, 3, 2), rng.uniform(-100, 100)], [*rng.uniform(-3, 3, 2), rng.uniform(-100, 100)],
                      [0, 0, 1]])
        cases.append((Boxes(flipped, b.labels, SIZE, rng.uniform(0, 1, len(b))), m, tuple(rng.integers(1, 300, 2))))
    few = [move_boxes(*c) for c in cases]
    monkeypatch.setattr(boxmove, "FEW_BOXES", -1)
    for (b, m, size), p in zip(cases, few):
        q = move_boxes(b, m, size)
        assert np.array_equal(p.xyxy, q.xyxy) and np.array_equal(p.visible, q.visible)
    op = T.RandomResizedCrop(32)
    params = op.make_params(seed=0, epoch=0, position=1, image_size=SIZE)
    top, left, h, w = op.window(params)
    np.testing.assert_allclose(forward_matrix(op, params, SIZE), [[32 / w, 0, -left * 32 / w], [0, 32 / h, -top * 32 / h],
                                                                   [0, 0, 1]])


def test_a_batchs_boxes_cross_the_queue_as_one_array_and_come_back_per_image():
    from fallback.samples import collate_targets, split_boxes

    per = [{"mask": None, "boxes": np.full((n, 4), n, np.float32), "box_labels": np.arange(n), "dropped": n}
           for n in (2, 0, 3)]
    collated = collate_targets(per, None)
    xyxy, labels, counts = collated["boxes"]
    assert isinstance(xyxy, np.ndarray) and xyxy.shape == (5, 4) and counts == [2, 0, 3]  # no tensor to share
    out = split_boxes(collated)
    assert [tuple(b.shape) for b in out["boxes"]] == [(2, 4), (0, 4), (3, 4)] and out["dropped"] == 5
    assert all(isinstance(b, torch.Tensor) and b.dtype == torch.float32 for b in out["boxes"])
    assert [lab.tolist() for lab in out["box_labels"]] == [[0, 1], [], [0, 1, 2]]
    assert (out["boxes"][2] == 3).all()
