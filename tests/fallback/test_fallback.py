"""The CPU fallback: outputs, worker determinism, bad files, and each reference operation."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, Draw, SampleIndex, WeightedSampler
from dali_backend.transforms import resample
from fallback import FallbackLoader, ImageDataset, ops


def test_sample_shape_dtype_label(defect_index):
    ds = ImageDataset(defect_index, AugmentSpec(size=(40, 56)))
    x, y = ds[0]
    assert x.shape == (3, 40, 56) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and int(y) == defect_index.labels[0]
    raw, _ = ds.load_uint8(0)
    scale, shift = AugmentSpec().normalize_coefficients()
    np.testing.assert_allclose(x.numpy(), raw.astype(np.float32) * scale[:, None, None] + shift[:, None, None], atol=1e-6)


def test_draws_get_their_own_parameters(defect_index):
    ds = ImageDataset(defect_index, seed=4)
    a, b = Draw(3, 0, 10), Draw(3, 0, 11)
    assert ds.params(a) != ds.params(b)
    assert not torch.equal(ds[a][0], ds[b][0])
    assert torch.equal(ds[a][0], ds[Draw(3, 0, 10)][0])


@pytest.mark.parametrize("loader_kind", ["DataLoader", "FallbackLoader"])
def test_batches_identical_for_0_and_2_workers(defect_index, loader_kind):
    ds = ImageDataset(defect_index, AugmentSpec(size=48), seed=1)

    def run(workers):
        s = WeightedSampler(defect_index, num_samples=40, seed=2)
        s.set_epoch(1)
        if loader_kind == "DataLoader":
            loader = DataLoader(ds, batch_size=8, sampler=s, num_workers=workers)
        else:
            loader = FallbackLoader(ds, batch_size=8, sampler=s, num_workers=workers)
        return [(x.clone(), y.clone()) for x, y in loader]

    a, b = run(0), run(2)
    assert len(a) == len(b) == 5
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_tuned_loader_equals_plain_dataloader(defect_index):
    ds = ImageDataset(defect_index, AugmentSpec(size=32), seed=1)
    s = WeightedSampler(defect_index, num_samples=20, seed=9)
    plain = list(DataLoader(ds, batch_size=6, sampler=s))
    tuned = FallbackLoader(ds, batch_size=6, sampler=s)
    assert len(tuned) == len(plain) == 4
    for (xa, ya), (xb, yb) in zip(plain, tuned, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert len(FallbackLoader(ds, batch_size=6, sampler=s, drop_last=True)) == 3


def test_bad_file_raises_naming_it(tmp_path):
    write(tmp_path / "a" / "ok.jpg", jpeg_bytes())
    write(tmp_path / "a" / "z_later.jpg", jpeg_bytes(seed=1))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    (tmp_path / "a" / "z_later.jpg").write_bytes(b"garbage that replaced the file")
    ds = ImageDataset(index)
    with pytest.raises(BadImageError) as e:
        ds[Draw(1, 3, 0)]
    assert str(tmp_path / "a" / "z_later.jpg") in str(e.value) and "epoch 3" in str(e.value)
    assert (e.value.index, e.value.label, e.value.epoch) == (1, 0, 3)
    with pytest.raises(BadImageError):
        list(FallbackLoader(ds, batch_size=2, num_workers=1))


# ------------------------------------------------------------------------------------- operations
@pytest.mark.parametrize("src, dst", [((120, 160), (48, 48)), ((7, 5), (256, 256)), ((1, 1), (3, 4)),
                                      ((40, 2000), (32, 32)), ((300, 200), (301, 199)),
                                      ((96, 128, 3), (28, 28)), ((9, 7, 3), (20, 21)), ((768, 1024), (32, 32)),
                                      ((1, 50), (1, 7)), ((50, 1, 3), (7, 1))])
def test_fast_resize_equals_reference_resize(src, dst):
    img = np.random.default_rng(0).integers(0, 256, src, dtype=np.uint8)
    fast, ref = ops.resize(img, *dst), resample.resize_exact(img, *dst)
    diff = np.abs(fast.astype(int) - ref.astype(int))
    assert fast.shape == dst + src[2:] and fast.dtype == np.uint8 and diff.max() <= 1 and diff.mean() < 0.01


@pytest.mark.parametrize("value", [0, 255])
@pytest.mark.parametrize("src, dst", [((480, 640), (224, 224)), ((7, 5, 3), (256, 300)), ((1536, 2048), (3, 2))])
def test_resize_keeps_the_extremes(value, src, dst):
    """Rounding truncates value + 0.5: the extremes must come out as themselves (no wrap past 255)."""
    out = ops.resize(np.full(src, value, np.uint8), *dst)
    assert out.shape == dst + src[2:] and (out == value).all()


def test_resize_replicates_the_border():
    img = np.zeros((60, 60), np.uint8)
    img[:, 0] = 255
    out = ops.resize(img, 20, 20)
    # output column 0 is centred on source x=1 with taps -1..3 (weights 1,2,3,2,1 / 9 after normalising);
    # DALI replicates the edge so tap -1 reads column 0 too: (1 + 2) / 9 * 255 = 85. torch's
    # renormalising at the border would give 2 / 8 * 255 = 64.
    assert out[:, 0].tolist() == [85] * 20 and out[:, 1:].max() == 0


@pytest.mark.parametrize("backend", ["fallback", "dali-cpu"])
def test_rotation_is_counter_clockwise_about_the_pixel_centre(backend):
    """``RandomRotation``, the operation both loaders run (``apply`` on the fallback, its DALI fragment on
    the DALI backend): +90 degrees turns counter-clockwise (right of centre moves up) about the centre
    of the middle pixel ``((w - 1) / 2, (h - 1) / 2)``, so a lone pixel lands on a pixel, undivided."""
    from bench.equivalence import run_transform_dali
    from dali_backend.transforms import RandomRotation

    op = RandomRotation((90.0, 90.0))
    for h, w, src, dst in ((9, 9, (4, 6), (2, 4)), (7, 11, (3, 7), (1, 5)), (8, 8, (3, 6), (1, 3))):
        img = np.zeros((h, w), np.uint8)
        img[src] = 200
        params = op.make_params(0, 0, 0, (h, w))
        assert float(params["angle"]) == 90.0
        rot = op.apply(img, params) if backend == "fallback" else run_transform_dali(op, [img], [params])[0]
        assert rot.shape == (h, w) and rot[dst] == 200 and rot.sum() == 200, (h, w, np.argwhere(rot))
    assert op.apply(img, {"angle": np.float32(0.0)}) is img


def test_jitter_is_the_documented_formula_rounded_half_up():
    """``ColorJitter.apply`` (what the fallback runs for the preset's jitter): the table is
    ``b * (128 + c * (x - 128))`` rounded half up and clipped; exact binary factors make many levels ties."""
    from dali_backend.transforms import ColorJitter

    x = np.arange(256, dtype=np.uint8)[None, :]
    for b, c in ((1.1, 0.9), (1.0, 1.5), (1.0, 0.5), (0.5, 1.0), (1.25, 0.75)):  # the last four tie often
        op = ColorJitter(brightness=(b, b), contrast=(c, c))
        got = op.apply(x, op.make_params(0, 0, 0, x.shape))[0]
        want = np.clip(np.floor(np.float32(b) * (128 + np.float32(c) * (x[0].astype(np.float64) - 128)) + 0.5), 0, 255)
        np.testing.assert_array_equal(got, want, err_msg=f"b={b} c={c}")
    tie = ColorJitter(contrast=(1.5, 1.5))
    assert tie.apply(x, tie.make_params(0, 0, 0, x.shape))[0, 129] == 130  # 129.5 rounds up (DALI's CPU), not to even
    assert tie.apply(x, tie.make_params(0, 0, 0, x.shape))[0, 127] == 127  # 126.5 rounds up too


def test_the_preset_without_randomness_is_the_identity_at_its_own_size():
    """``apply_spec`` (what ``ImageDataset`` runs) with the preset's evaluation variant and no CLAHE."""
    img = np.random.default_rng(0).integers(0, 256, (32, 32), dtype=np.uint8)
    spec = AugmentSpec(size=32, clahe=None).eval()
    assert not spec.is_random
    np.testing.assert_array_equal(ops.apply_spec(img, spec, spec.make_params(0, 0, 0, img.shape))[0], img)


@pytest.mark.parametrize("src, dst", [((480, 640), (224, 224)), ((1536, 2048), (256, 256)), ((240, 320), (224, 224)),
                                      ((100, 150), (150, 225)), ((64, 64), (128, 128)), ((96, 128, 3), (37, 301))])
def test_resize_equals_dalis_resize(src, dst):
    """The fallback's resize against DALI's own ``fn.resize`` (CPU operator), downscales and upscales:
    within 1 level, rarely (upscales tie more often: mean up to ~0.04 measured)."""
    pytest.importorskip("nvidia.dali")
    from dali_backend.transforms.resize import dali_resize
    from nvidia.dali import fn, pipeline_def, types

    rng = np.random.default_rng(list(src))
    img = cv2.GaussianBlur(rng.integers(0, 256, src, dtype=np.uint8), (5, 5), 1.5)
    hwc = img if img.ndim == 3 else img[:, :, None]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        return dali_resize(fn.external_source(source=lambda: [hwc], layout="HWC", dtype=types.UINT8), *dst)

    p = pipe()
    p.build()
    want = np.array(p.run()[0][0]).reshape(dst + src[2:])
    diff = np.abs(ops.resize(img, *dst).astype(int) - want.astype(int))
    assert diff.max() <= 1 and diff.mean() < 0.05, (diff.max(), diff.mean())
