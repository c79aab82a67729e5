"""DaliLoader: backend choice, epochs, equivalence with the fallback, DataLoader compatibility."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from bench.equivalence import compare_end_to_end, compare_operations, over_bound
from tests.helpers import BACKENDS, CUDA, LOADER_ARGS, needs_cuda
from dali_backend import (AugmentSpec, BadImageError, ConfigError, DaliLoader, MissingDependencyError, SampleIndex,
                          WeightedSampler)
from fallback import FallbackLoader, ImageDataset
from tests.helpers.levels import PRESET_MAX_LEVELS, assert_within_tolerance


def make_loader(kind: str, ds, **kw) -> DaliLoader:
    loader = DaliLoader(ds, **LOADER_ARGS[kind], **kw)
    assert loader.backend == kind
    return loader


@pytest.fixture(scope="module")
def ds(defect_index):
    return ImageDataset(defect_index, AugmentSpec(size=(48, 64)), seed=11)


# ----------------------------------------------------------------------------------- backend choice
def test_auto_without_cuda_falls_back_with_one_log_line(ds, caplog, monkeypatch):
    """device='auto' without CUDA: the torch backend, said in one WARNING line (and a FallbackWarning, once
    per process: tests/facade/test_reliability_loader.py); an explicit device and backend is an INFO line."""
    from dali_backend import FallbackWarning
    from dali_backend import arguments as mod

    monkeypatch.setattr(mod, "_ANNOUNCED", set())  # as in a fresh process
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with caplog.at_level(logging.INFO, logger="dali_backend"), pytest.warns(FallbackWarning):
        loader = DaliLoader(ds, batch_size=4)
    assert loader.backend == "torch"
    lines = [r.getMessage() for r in caplog.records if "DaliLoader" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("DaliLoader: not on the GPU: running torch because CUDA is not "
                                                   "available"), lines
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dali_backend"):
        assert DaliLoader(ds, backend="dali", device="cpu").backend == "dali-cpu"
    assert [r.getMessage() for r in caplog.records if "DaliLoader" in r.getMessage()] == [
        "DaliLoader: backend dali-cpu (device='cpu', backend='dali' was requested)"]


def test_device_cuda_without_dali_is_said_not_silent(ds, monkeypatch):
    """device='cuda' on a machine with a GPU but no DALI runs the torch executor on the CPU: a
    FallbackWarning says so (the user asked for the GPU), as device='auto' does."""
    from dali_backend import FallbackWarning
    from dali_backend import arguments as mod

    monkeypatch.setattr(mod, "_ANNOUNCED", set())
    monkeypatch.setattr(mod, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(mod, "dali_importable", lambda: "DALI is not installed")
    with pytest.warns(FallbackWarning, match=r"running torch because DALI is not installed.*device='cuda' was asked"):
        loader = DaliLoader(ds, batch_size=4, device="cuda")
    assert loader.backend == "torch"


def test_explicit_choices_and_errors(ds, monkeypatch):
    assert DaliLoader(ds, device="cpu").backend == "torch"
    assert DaliLoader(ds, backend="torch").backend == "torch"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError, match="device='cuda' but CUDA is not available"):
        DaliLoader(ds, device="cuda")
    with pytest.raises(ConfigError, match="backend='tf'"):
        DaliLoader(ds, backend="tf")
    with pytest.raises(ConfigError, match="device='tpu'"):
        DaliLoader(ds, device="tpu")
    with pytest.raises(ConfigError, match="mutually exclusive"):
        DaliLoader(ds, shuffle=True, sampler=WeightedSampler(ds.index))
    with pytest.raises(ConfigError, match="must be an ImageDataset"):
        DaliLoader([1, 2, 3])


def test_missing_dali_raises_with_install_command(ds, monkeypatch):
    for name in [m for m in sys.modules if m.startswith("nvidia.dali")] + ["nvidia.dali"]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingDependencyError, match="pip install nvidia-dali-cuda120"):
        DaliLoader(ds, device="cpu", backend="dali")
    assert DaliLoader(ds).backend == "torch"  # auto still works, on the fallback


# ----------------------------------------------------------------------------------- epochs
@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("drop_last", [False, True])
def test_epochs_lengths_and_order(ds, kind, drop_last):
    sampler = WeightedSampler(ds.index, num_samples=37, seed=5)
    loader = make_loader(kind, ds, batch_size=8, sampler=sampler, drop_last=drop_last, num_workers=2)
    assert len(loader) == (4 if drop_last else 5)
    for epoch in range(3):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == len(loader)
        sizes = [len(y) for _, y in batches]
        assert sizes == ([8] * 4 if drop_last else [8, 8, 8, 8, 5])
        x, _ = batches[0]
        assert x.shape == (8, 3, 48, 64) and x.dtype == torch.float32
        labels = torch.cat([y for _, y in batches])
        assert labels.dtype == torch.int64
        want = ds.index.labels[[d.index for d in sampler.draws(epoch)]][: sum(sizes)]
        assert labels.cpu().tolist() == want.tolist()


@pytest.mark.parametrize("kind", BACKENDS)
def test_break_mid_epoch_then_continue_exactly(ds, kind):
    sampler = WeightedSampler(ds.index, num_samples=60, seed=2)
    loader = make_loader(kind, ds, batch_size=4, sampler=sampler)
    ref = FallbackLoader(ds, batch_size=4, sampler=WeightedSampler(ds.index, num_samples=60, seed=2))
    for epoch in (0, 1, 1, 7):  # also: the same epoch twice, and a jump
        loader.set_epoch(epoch)
        for i, _ in enumerate(loader):
            if i == 2:
                break
        loader.set_epoch(epoch)
        ref.set_epoch(epoch)
        got, want = list(loader), list(ref)
        assert len(got) == len(want) == 15
        for (xa, ya), (xb, yb) in zip(got, want, strict=True):
            assert torch.equal(ya.cpu(), yb)
        if kind.startswith("torch"):
            assert all(torch.equal(xa, xb) for (xa, _), (xb, _) in zip(got, want, strict=True))
        elif kind == "dali-cpu":  # in uint8 levels: the published tolerance (the GPU's is the GPU check's)
            assert_within_tolerance([x for x, _ in got], [x for x, _ in want], ds.spec, PRESET_MAX_LEVELS)


@pytest.mark.parametrize("kind", BACKENDS)
def test_sampler_set_epoch_is_respected_and_plain_samplers_work(ds, kind):
    sampler = WeightedSampler(ds.index, num_samples=16, seed=3)
    loader = make_loader(kind, ds, batch_size=16, sampler=sampler)
    sampler.set_epoch(4)  # set on the sampler directly, not through the loader
    (_, y), = list(loader)
    assert y.cpu().tolist() == ds.index.labels[[d.index for d in sampler.draws(4)]].tolist()
    plain = make_loader(kind, ds, batch_size=5, sampler=[3, 1, 4, 1, 5, 9, 2, 6])
    ys = torch.cat([y for _, y in plain]).cpu().tolist()
    assert ys == ds.index.labels[[3, 1, 4, 1, 5, 9, 2, 6]].tolist()
    seq = make_loader(kind, ds, batch_size=7)
    assert torch.cat([y for _, y in seq]).cpu().tolist() == ds.index.labels.tolist()


def test_dataloader_attributes(ds):
    loader = DaliLoader(ds, batch_size=6, num_workers=1, drop_last=True, device="cpu", backend="dali")
    for name in ("dataset", "sampler", "batch_size", "num_workers", "drop_last", "pin_memory", "batch_sampler",
                 "collate_fn", "timeout", "persistent_workers", "prefetch_factor"):
        assert hasattr(loader, name), name
    assert loader.dataset is ds and loader.batch_size == 6 and len(loader.sampler) == len(ds)
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        iter(loader)


@pytest.mark.parametrize("kind", ["dali-cpu", pytest.param("dali-gpu", marks=CUDA)])
def test_changed_file_raises_naming_it(tmp_path, kind):
    from tests.helpers import jpeg_bytes, write

    for i in range(6):
        write(tmp_path / "a" / f"{i}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    (tmp_path / "a" / "3.jpg").write_bytes(jpeg_bytes(seed=3)[:200])  # truncated after indexing
    loader = make_loader(kind, ImageDataset(index, AugmentSpec(size=16)), batch_size=2)
    with pytest.raises(BadImageError, match=r"a/3\.jpg.*file changed since indexing"):
        list(loader)


# ----------------------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[pytest.mark.cuda, needs_cuda])])
def test_each_operation_agrees(device):
    """Decoder rows against the decoders' bound, operator rows (same decoded pixels on both sides)
    against the operators' (``bench.equivalence.BOUNDS``)."""
    results = compare_operations(device)
    assert {"decode:gray", "decode:rgb", "decode:region-rgb", "op:clahe", "op:resize", "op:jitter-ties"} <= set(results)
    for row, s in results.items():
        assert not over_bound(row, s, device), (row, s)
    if device == "cpu":  # measured exact on the CPU: keep it so
        exact = ("decode:gray", "decode:rgb", "decode:region-gray", "decode:region-rgb", "op:clahe", "op:clahe-rgb",
                 "op:jitter", "op:jitter-ties")
        assert all(results[row]["max"] == 0 for row in exact), results
        assert results["op:jitter-ties"]["vs_half_even"] == 1  # the ties are real: the GPU's rounding would move them
    else:  # the GPU rounds ties to even, exactly as modelled
        assert results["op:jitter-ties"]["vs_half_even"] == 0, results["op:jitter-ties"]
        assert {"decode:rgb-hw", "decode:rgb-cuda"} <= set(results)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[pytest.mark.cuda, needs_cuda])])
@pytest.mark.parametrize("size", [(256, 256), (31, 17)])
@pytest.mark.parametrize("fit", ["stretch", "letterbox"])
def test_end_to_end_gray_agrees_on_odd_inputs(odd_root, device, size, fit):
    index = SampleIndex.from_folder(odd_root, progress=False)
    assert len(index) == 8 and not index.rejected
    ds = ImageDataset(index, AugmentSpec(size=size, rotate_deg=10, brightness=0.2, contrast=0.2, fit=fit), seed=1)
    stats = compare_end_to_end(ds, WeightedSampler(index, num_samples=24, seed=0), device=device)
    assert stats["labels_equal"]
    assert not over_bound("end-to-end", stats, device), stats


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[pytest.mark.cuda, needs_cuda])])
@pytest.mark.parametrize("fit", ["stretch", "letterbox"])
def test_end_to_end_rgb_agrees(odd_root, device, fit):
    index = SampleIndex.from_folder(odd_root, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=64, color="rgb", fit=fit), seed=1)
    stats = compare_end_to_end(ds, WeightedSampler(index, num_samples=16, seed=0), device=device)
    assert stats["labels_equal"]
    assert not over_bound("end-to-end", stats, device), stats


def test_uint8_and_eval_specs(defect_index):
    spec = AugmentSpec(size=32, dtype="uint8").eval()
    ds = ImageDataset(defect_index, spec)
    x, _ = next(iter(DaliLoader(ds, batch_size=4, device="cpu", backend="dali")))
    assert x.dtype == torch.uint8 and x.shape == (4, 3, 32, 32)
    ref, _ = next(iter(FallbackLoader(ds, batch_size=4)))
    assert (x.int() - ref.int()).abs().max() <= 1


# ----------------------------------------------------------------------------------- drop-in proof
class TinyNet(torch.nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2)
        self.head = torch.nn.Linear(8, classes)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def train(loader, classes: int, epochs: int = 2) -> list[float]:
    """A training loop written for torch.utils.data.DataLoader, unchanged."""
    torch.manual_seed(0)
    model = TinyNet(classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for epoch in range(epochs):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for images, labels in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def test_training_loop_runs_unchanged_with_daliloader_swapped_in(ds):
    classes = len(ds.index.classes)
    with_dataloader = train(DataLoader(ds, batch_size=8, sampler=WeightedSampler(ds.index, num_samples=32, seed=1)), classes)
    with_dali = train(DaliLoader(ds, batch_size=8, sampler=WeightedSampler(ds.index, num_samples=32, seed=1),
                                 device="cpu", backend="dali"), classes)
    assert len(with_dali) == len(with_dataloader) == 8 and all(np.isfinite(with_dali))
    np.testing.assert_allclose(with_dali, with_dataloader, rtol=1e-3, atol=1e-4)  # same samples, same pixels


@pytest.mark.slow
def test_spawned_reader_workers(ds):
    """CUDA initialised before the loader means spawn instead of fork: the schedule must cross a pickle."""
    sampler = WeightedSampler(ds.index, num_samples=20, seed=8)
    with DaliLoader(ds, batch_size=8, sampler=sampler, device="cpu", backend="dali", py_start_method="spawn") as loader:
        got = [y for _, y in loader]
    want = [y for _, y in FallbackLoader(ds, batch_size=8, sampler=sampler)]
    assert len(got) == 3 and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("kind", ["torch", "dali-cpu"])
def test_letterbox_keeps_aspect_and_pads_centred(tmp_path, kind):
    """The preset's letterbox through the loaders (``Resize(letterbox=True)`` on both backends): 100x33
    in 64x80 is resized to 64x21 and placed ``ceil(59 / 2) = 30`` columns from the left; 33x100 in 80x64
    to 21x64, ``ceil(59 / 2) = 30`` rows from the top."""
    import cv2

    from tests.helpers import write

    spec = AugmentSpec(size=(64, 80), fit="letterbox", clahe=None, dtype="uint8").eval()
    assert spec.letterbox_size(120, 160) == (60, 80) and spec.letterbox_size(100, 33) == (64, 21)
    assert spec.letterbox_size(3, 1000) == (1, 80) and spec.letterbox_size(1, 1) == (64, 64)
    assert spec.letterbox_size(1000, 13) == (64, 1) and spec.letterbox_size(10, 31) == (26, 80)  # 25.8 -> 26
    assert spec.letterbox_size(40, 61) == (52, 80) and spec.letterbox_size(66, 101) == (52, 80)  # 52.46, 52.27
    tall = np.full((100, 33, 3), 200, np.uint8)
    wide = np.full((64, 195, 3), 100, np.uint8)  # 64x80 holds it as 26x80: ceil(38 / 2) = 19 rows from the top
    write(tmp_path / "a" / "tall.jpg", cv2.imencode(".jpg", tall, [cv2.IMWRITE_JPEG_QUALITY, 100])[1].tobytes())
    write(tmp_path / "a" / "wide.jpg", cv2.imencode(".jpg", wide, [cv2.IMWRITE_JPEG_QUALITY, 100])[1].tobytes())
    index = SampleIndex.from_folder(tmp_path, progress=False)
    assert list(index.paths) == ["a/tall.jpg", "a/wide.jpg"]
    loader = make_loader(kind, ImageDataset(index, spec), batch_size=2)
    (x, _), = list(loader)
    loader.close()
    tall_out, wide_out = x[0, 0].numpy(), x[1, 0].numpy()
    cols = np.flatnonzero(tall_out.max(axis=0))
    assert cols[0] == 30 and cols[-1] == 50 and tall_out[:, 30:51].min() == 200  # 21 columns, (59 + 1) // 2 from the left
    assert tall_out[:, :30].max() == 0 and tall_out[:, 51:].max() == 0
    rows = np.flatnonzero(wide_out.max(axis=1))
    assert rows[0] == 19 and rows[-1] == 44 and wide_out[19:45].min() == 100  # 26 rows, (38 + 1) // 2 from the top
