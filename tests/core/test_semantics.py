"""DataLoader's semantics: one rule from sampler item to draw, passes and epochs, DataLoader's arguments.

The same sampler items give the same pixels through a plain ``DataLoader(ImageDataset)``,
``DaliLoader(backend="torch")`` and ``DaliLoader(backend="dali")``; a pass without ``set_epoch``
runs the next epoch; a second ``iter()`` makes the older iterator stale; every ``DataLoader``
argument is accepted and honoured where it means something.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from tests.helpers import KINDS
from dali_backend import AugmentSpec, ConfigError, DaliLoader, WeightedSampler
from dali_backend.errors import StaleIteratorError
from dali_backend.sampling.sampler import Draw, as_draw
from fallback import ImageDataset
from tests.helpers.levels import PRESET_MAX_LEVELS, assert_within_tolerance



@pytest.fixture(scope="module")
def ds(defect_index):
    return ImageDataset(defect_index, AugmentSpec(size=24), seed=7)


def test_the_rule():
    assert as_draw(Draw(3, 1, 9), 5) == Draw(3, 1, 9)
    assert as_draw(4, 2) == Draw(4, 2, 4)
    assert as_draw(torch.tensor(6), 1) == Draw(6, 1, 6)
    with pytest.raises(ConfigError, match="sample indices"):
        as_draw([1, 2], 0)


def _plain(ds, sampler, epoch):
    ds.set_epoch(epoch)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    return [(x, y) for x, y in DataLoader(ds, batch_size=8, sampler=sampler)]


@pytest.mark.parametrize("which", ["weighted", "random"])
def test_plain_dataloader_and_both_backends_give_the_same_pixels(ds, which):
    def sampler():
        if which == "weighted":
            return WeightedSampler(ds.index, seed=11, num_samples=30)
        return RandomSampler(ds, generator=torch.Generator().manual_seed(11))

    epoch = 3
    want = _plain(ds, sampler(), epoch)
    assert len(want) == (4 if which == "weighted" else 8)
    for kind, args in KINDS.items():
        loader = DaliLoader(ds, batch_size=8, sampler=sampler(), **args)
        loader.set_epoch(epoch)
        got = list(loader)
        loader.close()
        assert len(got) == len(want)
        for (x, y), (u, v) in zip(got, want, strict=True):
            assert torch.equal(y, v), kind
            if kind.startswith("torch"):  # both OpenCV executors: bit-exact
                assert torch.equal(x, u)
        if not kind.startswith("torch"):  # in uint8 levels, the published DALI/OpenCV tolerance
            assert_within_tolerance([x for x, _ in got], [u for u, _ in want], ds.spec, PRESET_MAX_LEVELS)


@pytest.mark.parametrize("kind", KINDS)
def test_a_pass_without_set_epoch_runs_the_next_epoch(ds, kind):
    gen = lambda: torch.Generator().manual_seed(5)  # noqa: E731 - the shuffle's seed (else torch's global RNG)
    loader = DaliLoader(ds, batch_size=10, shuffle=True, generator=gen(), **KINDS[kind])
    first = [y for _, y in loader]
    second = [y for _, y in loader]
    assert loader.epoch == 1 and loader.stats()["epoch"] == 1
    assert len(first) == len(second) == 6
    assert not all(torch.equal(a, b) for a, b in zip(first, second, strict=True)), "a new pass reshuffles"
    again = DaliLoader(ds, batch_size=10, shuffle=True, generator=gen(), **KINDS[kind])
    again.set_epoch(1)
    assert all(torch.equal(a, b) for a, b in zip(second, [y for _, y in again], strict=True))
    again.set_epoch(1)  # an explicit epoch is kept, pass after pass
    assert all(torch.equal(a, b) for a, b in zip(second, [y for _, y in again], strict=True))
    loader.close(), again.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_iterator_makes_the_first_stale(ds, kind):
    loader = DaliLoader(ds, batch_size=10, **KINDS[kind])
    loader.set_epoch(0)
    old = iter(loader)
    next(old)
    loader.set_epoch(0)
    new = list(loader)
    with pytest.raises(StaleIteratorError, match="newer pass"):
        next(old)
    st = loader.stats()
    assert len(new) == 6 and st["yielded"] == 60 and st["accounted"] == st["draws"] == 60
    loader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_dataloader_arguments_are_accepted_and_honoured(ds, kind, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    def init(worker_id):
        (marks / f"{os.getpid()}-{worker_id}").touch()

    gen = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    common = dict(batch_size=6, num_workers=2, pin_memory=False, timeout=30, worker_init_fn=init,
                  multiprocessing_context="fork", prefetch_factor=2, persistent_workers=True, **KINDS[kind])
    # DataLoader's positional order: dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
    # pin_memory, drop_last, timeout, worker_init_fn, multiprocessing_context, generator
    a = DaliLoader(ds, 6, True, None, None, 2, None, False, False, 30, init, "fork", gen(5), prefetch_factor=2,
                   persistent_workers=True, **KINDS[kind])
    b = DaliLoader(ds, shuffle=True, generator=gen(5), **common)
    c = DaliLoader(ds, shuffle=True, generator=gen(6), **common)
    ya, yb, yc = ([y for _, y in loader] for loader in (a, b, c))
    assert len(ya) == 10
    assert all(torch.equal(p, q) for p, q in zip(ya, yb, strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(ya, yc, strict=True))
    assert list(marks.iterdir()), "worker_init_fn ran in the workers"
    ids = {int(p.name.split("-")[1]) for p in marks.iterdir()}
    assert ids <= {0, 1}
    for loader in (a, b, c):
        loader.close()
    with pytest.raises(ConfigError, match="batch_transform"):
        DaliLoader(ds, collate_fn=lambda batch: batch, **KINDS[kind])
    with pytest.raises(ConfigError, match="batch_sampler= is not supported"):
        DaliLoader(ds, batch_sampler=[[0, 1]], **KINDS[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_batch_transform_runs_on_every_batch(ds, kind):
    def mix(images, labels):
        return images.flip(0) * 0.5, labels.flip(0)

    plain = DaliLoader(ds, batch_size=8, **KINDS[kind])
    mixed = DaliLoader(ds, batch_size=8, batch_transform=mix, **KINDS[kind])
    plain.set_epoch(0), mixed.set_epoch(0)
    pairs = list(zip(plain, mixed, strict=True))
    assert len(pairs) == 8
    for (x, y), (u, v) in pairs:
        assert torch.equal(v, y.flip(0)) and torch.equal(u, x.flip(0) * 0.5)
    plain.close(), mixed.close()


def test_return_meta_with_an_operation_list(ds):
    from dali_backend.transforms import ColorJitter, RandomHorizontalFlip, RandomResizedCrop

    spec = AugmentSpec(ops=[RandomResizedCrop(20), RandomHorizontalFlip(), ColorJitter(brightness=0.2)])
    opds = ImageDataset(ds.index, spec, seed=3)
    metas = {}
    for kind, args in KINDS.items():
        loader = DaliLoader(opds, batch_size=5, sampler=WeightedSampler(ds.index, seed=2, num_samples=10),
                            return_meta=True, **args)
        metas[kind] = [m for _, _, m in loader]
        loader.close()
    assert len(metas["torch"]) == 2
    for a, b in zip(metas["dali-cpu"], metas["torch"], strict=True):
        assert a["params"] == b["params"] and torch.equal(a["index"], b["index"])
    first = metas["torch"][0]["params"][0]
    assert set(first) == {"RandomResizedCrop", "RandomHorizontalFlip", "ColorJitter"}


@pytest.mark.parametrize("width", [224, 223, 7, 1])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("channels", [1, 3])
def test_table_normalisation_is_bitwise_the_float_arithmetic(width, dtype, channels):
    """The CPU path normalises through a per-channel table (cv2.LUT); it must equal addcmul exactly."""
    from dali_backend.core.tensors import _DTYPES, normalize

    spec = AugmentSpec(size=(5, width), dtype=dtype, color="gray" if channels == 1 else "rgb")
    x = torch.randint(0, 256, (3, channels, 5, width), dtype=torch.uint8, generator=torch.Generator().manual_seed(width))
    scale, shift = spec.normalize_coefficients()
    want = torch.addcmul(torch.from_numpy(shift).view(3, 1, 1), x.expand(3, 3, 5, width).to(torch.float32),
                         torch.from_numpy(scale).view(3, 1, 1))
    want = want if dtype == "float32" else want.to(_DTYPES[dtype])
    got = normalize(x, spec)
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (0, 1, 100, 100), (2, 3, 0, 8), (0, 1, 8, 8)])
def test_normalising_an_empty_batch_gives_an_empty_batch(shape):
    """An empty batch (no samples, or no pixels) normalises to an empty batch of the output shape, as
    ``addcmul`` does; the table path must not reach ``cv2.LUT``, which returns None on empty input."""
    from dali_backend.core.tensors import normalize

    got = normalize(torch.zeros(shape, dtype=torch.uint8), AugmentSpec(size=8))
    assert got.shape == (shape[0], 3, *shape[2:]) and got.dtype == torch.float32


def _normalised(value: int, spec: AugmentSpec) -> torch.Tensor:
    from dali_backend.core.tensors import normalize

    return normalize(torch.full((4, 1, 8, 8), value, dtype=torch.uint8), spec)


@pytest.mark.parametrize("hold", ["tensor", "view", "numpy", "autograd", "dlpack"])
def test_a_batch_anybody_holds_is_never_overwritten(hold):
    """CPU outputs reuse memory, but only memory that nothing refers to any more: a batch kept by the
    user, a slice of it, a numpy array over it, a tensor autograd saved for backward, or a DLPack
    capsule keeps its values while later batches are produced."""
    spec = AugmentSpec(size=8, color="gray")
    first = _normalised(10, spec)
    want = first.clone()
    weight = torch.ones_like(first, requires_grad=True)
    kept = {"tensor": lambda t: t, "view": lambda t: t[1:3, 0],
            "numpy": lambda t: t.numpy(), "autograd": lambda t: (t * weight).sum(),
            "dlpack": lambda t: torch.utils.dlpack.to_dlpack(t)}[hold](first)
    del first
    for value in range(20, 30):  # later batches, each dropped at once: their memory is reused
        _normalised(value, spec)
    if hold == "autograd":
        kept.backward()
        assert torch.equal(weight.grad, want)  # d/dw (x * w) = x: the saved input is intact
    elif hold == "dlpack":
        assert torch.equal(torch.utils.dlpack.from_dlpack(kept), want)
    else:
        assert torch.equal(torch.as_tensor(kept), {"view": want[1:3, 0]}.get(hold, want))


def test_output_memory_comes_back_once_free_and_the_pool_stays_small():
    from dali_backend.core.tensors import _ReusedMemory

    pool = _ReusedMemory(keep=2)
    a = pool.empty((2, 3, 4, 4))
    first = a.data_ptr()
    assert first % 64 == 0                              # aligned as torch's own allocator
    del a
    b = pool.empty((2, 3, 4, 4))
    assert b.data_ptr() == first                        # reused: nobody held it
    assert pool.empty((2, 3, 4, 4)).data_ptr() != first # b is held: other memory (the new one is freed at once)
    held = [pool.empty((2, 3, 4, 4)) for _ in range(5)] + [pool.empty((7,))]
    del b, held
    assert len(pool._free) == 2                         # at most `keep` free blocks are kept
    pool.clear()
    assert pool._free == [] and pool.empty((2, 3, 4, 4)).data_ptr() % 64 == 0
    assert pool.empty((0, 3)).shape == (0, 3) and pool.empty((5,), torch.float16).dtype == torch.float16


def test_a_pass_leaves_no_output_memory_resident(ds):
    from dali_backend.core.tensors import _OUTPUTS

    with DaliLoader(ds, batch_size=4, sampler=WeightedSampler(ds.index, num_samples=12), **KINDS["torch"]) as loader:
        kept = [images for images, _ in loader]
        assert _OUTPUTS._free == []                     # cleared at the end of the pass
        del kept
        assert _OUTPUTS._free == []                     # batches held past the pass are freed, not kept
        for images, _ in loader:
            pass                                        # the loop variable holds the last batch past the end
        del images
        assert _OUTPUTS._free == []
        kept = next(iter(loader))
    del kept
    assert _OUTPUTS._free == []                         # nor after close()


def test_a_pass_left_early_leaves_no_output_memory_resident(ds):
    """``break`` after a few batches (steps per epoch) ends the pass too: the free output memory goes."""
    from dali_backend.core.tensors import _OUTPUTS

    with DaliLoader(ds, batch_size=4, sampler=WeightedSampler(ds.index, num_samples=40), **KINDS["torch"]) as loader:
        batches = iter(loader)
        for _ in range(4):
            next(batches)
        del batches                                     # what leaving a for loop early does
        assert _OUTPUTS._free == []


@pytest.mark.parametrize("recipe", ["defect", "classification-train", "classification-eval"])
def test_both_recipes_run_on_both_backends_with_equal_pixels(defect_index, recipe):
    """Issue 10's done-when: the defect preset and torchvision's train/eval recipes, both backends."""
    from dali_backend.transforms import CenterCrop, ColorJitter, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize

    norm = Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    spec = {"defect": AugmentSpec(size=64),
            "classification-train": AugmentSpec(ops=[RandomResizedCrop(64), RandomHorizontalFlip(),
                                                     ColorJitter(0.2, 0.2, 0.2), norm]),
            "classification-eval": AugmentSpec(ops=[Resize(72), CenterCrop(64), norm])}[recipe]
    ds = ImageDataset(defect_index, spec, seed=4)
    out = {}
    for kind, args in KINDS.items():
        loader = DaliLoader(ds, batch_size=10, sampler=WeightedSampler(defect_index, seed=3, num_samples=30), **args)
        loader.set_epoch(1)
        out[kind] = list(loader)
        loader.close()
    assert len(out["torch"]) == 3
    for (x, y), (u, v) in zip(out["dali-cpu"], out["torch"], strict=True):
        assert torch.equal(y, v) and x.shape == u.shape == (10, 3, 64, 64)
    # in uint8 levels: the published bound over the run, and 2 levels at most anywhere (RandomResizedCrop
    # and Resize are exact on CPU operators; the preset's rotation differs by a level, amplified by the jitter)
    assert_within_tolerance([x for x, _ in out["dali-cpu"]], [u for u, _ in out["torch"]], spec, PRESET_MAX_LEVELS)


# ------------------------------------------------------------------------------------ found by a review
def test_dropping_an_old_iterator_does_not_cut_the_new_pass(ds):
    loader = DaliLoader(ds, batch_size=10, num_workers=2, device="cpu", backend="torch")
    old = iter(loader)
    next(old)
    new = iter(loader)
    got = [next(new)]
    del old  # GeneratorExit in the stale generator: the shared DataLoader iterator must be left alone
    got += list(new)
    st = loader.stats()
    assert len(got) == 6 and st["yielded"] == 60 and st["accounted"] == st["draws"]
    for _ in loader:  # a break keeps the persistent workers
        break
    assert len(list(loader)) == 6
    loader.close()


def test_samplers_own_set_epoch_repeated_is_respected(ds):
    sampler = WeightedSampler(ds.index, seed=1, num_samples=20)
    loader = DaliLoader(ds, batch_size=10, sampler=sampler, device="cpu", backend="torch")
    sampler.set_epoch(0)
    first = [y for _, y in loader]
    sampler.set_epoch(0)  # chosen again: the same epoch, not the next one
    again = [y for _, y in loader]
    assert len(first) == 2
    assert loader.stats()["epoch"] == 0 and all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert [y for _, y in loader] and loader.stats()["epoch"] == 1  # untouched: the next epoch


def test_other_samplers_num_samples_is_not_padding(ds):
    loader = DaliLoader(ds, batch_size=4, sampler=RandomSampler(ds, num_samples=6), device="cpu", backend="torch")
    list(loader)
    st = loader.stats()
    assert st["yielded"] == 6 and st["padded"] == 0
    loader.close()


@pytest.mark.parametrize("kwargs, match", [
    (dict(device="cuda:x"), "cuda:N"), (dict(timeout=True), "timeout=True"), (dict(num_workers=True), "num_workers"),
    (dict(hw_decoder_load="a"), "hw_decoder_load"),
])
def test_bad_arguments_are_config_errors(ds, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        DaliLoader(ds, **kwargs)


def test_size_dependent_ops_with_a_huge_header_agree(tmp_path):
    """A valid JPEG whose ICC segment is larger than 64 KiB: its size is still read from the header."""
    from tests.helpers import jpeg_bytes, write
    from dali_backend import SampleIndex
    from dali_backend.transforms import RandomResizedCrop

    icc = b"ICC_PROFILE\x00\x01\x01" + bytes(65000)
    for k in range(4):
        d = jpeg_bytes(40, 60, seed=k, color=True)
        write(tmp_path / "a" / f"{k}.jpg", d[:2] + b"\xff\xe2" + (len(icc) + 2).to_bytes(2, "big") + icc + d[2:])
    index = SampleIndex.from_folder(tmp_path, progress=False)
    spec = AugmentSpec(ops=[RandomResizedCrop(16)])
    out = {}
    for kind, args in KINDS.items():
        loader = DaliLoader(ImageDataset(index, spec, seed=1), batch_size=4, return_meta=True, **args)
        out[kind] = list(loader)
        loader.close()
    (x, y, m), (u, v, n) = out["dali-cpu"][0], out["torch"][0]
    assert m["params"] == n["params"] and torch.equal(y, v)
    assert_within_tolerance([x], [u], spec, max_levels=RandomResizedCrop.TOLERANCE)  # declared on the class (0)
