"""Batches of an index with targets: one dict per batch, masks ``[B, 1, H, W]`` uint8 class ids moved with
the image (padded with ``pad_batch``), boxes as lists of ``[N_i, 4]`` float32 with their labels, the
padded form by :func:`pad_boxes`; ``return_meta`` still there. On the torch backend (the DALI backend's
are in test_targets_both_backends.py)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from dali_backend import AugmentSpec, DaliLoader
from dali_backend import transforms as T
from dali_backend.facade.targetbatches import pad_boxes
from dali_backend.index import SampleIndex
from dali_backend.transforms.targets import BoxPolicy
from fallback.dataset import ImageDataset
from tests.helpers import LOADER_ARGS
from tests.helpers.targets import detection_index_at, mvtec_index_at


@pytest.fixture(scope="module")
def mvtec_index(tmp_path_factory):
    return mvtec_index_at(tmp_path_factory.mktemp("mv"), (64, 48))


@pytest.fixture(scope="module")
def det_index(tmp_path_factory):
    return detection_index_at(tmp_path_factory.mktemp("det"), (64, 48), n=6)


def batches(index, spec, **kw):
    return list(DaliLoader(ImageDataset(index, spec), batch_size=3, backend="torch", **kw))


def test_masks_come_as_uint8_class_ids_in_the_images_geometry(mvtec_index):
    spec = AugmentSpec(ops=[T.Resize((24, 32))], color="rgb")  # a pure resize: each mask is its file, resized
    got = batches(mvtec_index, spec)
    assert [sorted(b) for b in got] == [["dropped", "image", "label", "mask"]] * 2
    masks = torch.cat([b["mask"] for b in got])
    assert masks.shape == (6, 1, 24, 32) and masks.dtype == torch.uint8
    for i in range(6):
        rel = mvtec_index.annotations.mask_path(i)
        want = np.zeros((48, 64), np.uint8) if rel is None else (cv2.imread(f"{mvtec_index.root}/{rel}", 0) > 0)
        want = cv2.resize(want.astype(np.uint8), (32, 24), interpolation=cv2.INTER_NEAREST_EXACT)
        assert np.array_equal(masks[i, 0].numpy(), want), mvtec_index.paths[i]
    assert not masks[:2].any() and masks[2:].amax() == 1  # good images: all background


def test_boxes_come_as_lists_of_tensors_with_labels_and_meta_still_works(det_index):
    spec = AugmentSpec(ops=[T.Resize((24, 32))], color="rgb")  # half the size: boxes halve
    got = batches(det_index, spec, return_meta=True)
    for b in got:
        assert sorted(b) == ["box_labels", "boxes", "dropped", "image", "label", "meta"]
        for k, i in enumerate(b["meta"]["index"].tolist()):
            xyxy, labels = det_index.annotations.boxes_of(i)
            assert b["boxes"][k].dtype == torch.float32 and b["boxes"][k].shape == (len(xyxy), 4)
            assert torch.allclose(b["boxes"][k], torch.from_numpy(np.array(xyxy)) / 2, atol=1e-4)
            assert b["box_labels"][k].tolist() == labels.tolist()
        padded, labels, counts = pad_boxes(b["boxes"], b["box_labels"])
        assert padded.shape == (3, int(counts.max()), 4) and counts.tolist() == [len(x) for x in b["boxes"]]
        assert (labels[torch.arange(int(counts.max()))[None] >= counts[:, None]] == -1).all()


def test_a_box_policy_drops_boxes_cut_by_a_crop_and_counts_them(det_index):
    spec = AugmentSpec(ops=[T.CenterCrop((8, 8))], color="rgb")
    ds = ImageDataset(det_index, spec, box_policy=BoxPolicy(min_area=1e6))  # no box is that large
    got = list(DaliLoader(ds, batch_size=3, backend="torch"))
    assert all(len(x) == 0 for b in got for x in b["boxes"])
    assert sum(b["dropped"] for b in got) == len(det_index.annotations.boxes)


def test_masks_are_padded_with_the_images_and_their_sizes(mvtec_index):
    spec = AugmentSpec(ops=[T.Resize(20, max_size=None)], color="rgb", pad_batch=8)
    for b in batches(mvtec_index, spec):
        assert b["mask"].shape[2:] == b["image"].shape[2:] and b["sizes"].shape == (3, 2)
        for k, (h, w) in enumerate(b["sizes"].tolist()):
            assert not b["mask"][k, :, h:].any() and not b["mask"][k, :, :, w:].any()


def test_masks_are_served_with_a_cache_dir(mvtec_index, tmp_path):
    spec = AugmentSpec(ops=[T.Resize((24, 32))], color="rgb")
    ds = ImageDataset(mvtec_index, spec, cache_dir=tmp_path / "cache")
    cold = list(DaliLoader(ds, batch_size=3, backend="torch"))
    warm = list(DaliLoader(ImageDataset(mvtec_index, spec, cache_dir=tmp_path / "cache"), batch_size=3, backend="torch"))
    plain = batches(mvtec_index, spec)
    for a, b, c in zip(cold, warm, plain):
        assert torch.equal(a["mask"], c["mask"]) and torch.equal(b["mask"], c["mask"])


def test_the_demo_draws_image_and_mask_batches(tmp_path, capsys):
    from tests.helpers import run_cli

    rc, out, _ = run_cli(["demo", "--masks", "--images", "8", "--size", "64x48", "--out-size", "32", "--epochs", "1",
                          "--backend", "torch", "--cache", str(tmp_path)], capsys)
    assert rc == 0 and "8 test images" in out and "images with masks" in out, out
    share = float(out.split("defect pixels ")[1].split("%")[0])
    assert 0 < share < 100


@pytest.mark.parametrize("backend", ["torch", "dali-cpu"])
def test_a_mask_value_outside_the_declared_classes_is_refused_when_read(tmp_path, backend):
    from dali_backend import TargetError
    from dali_backend.targets import suffix_masks

    for part in ("images", "masks"):
        (tmp_path / part / "a").mkdir(parents=True)
    cv2.imwrite(str(tmp_path / "images" / "a" / "0.png"), np.full((16, 16, 3), 90, np.uint8))
    mask = np.zeros((16, 16), np.uint8)
    mask[2:4, 2:4] = 7
    cv2.imwrite(str(tmp_path / "masks" / "a" / "0_mask.png"), mask)
    index = SampleIndex.from_folder(tmp_path / "images").with_targets(
        suffix_masks(tmp_path / "images", tmp_path / "masks"), num_classes=3)
    if backend != "torch":
        pytest.importorskip("nvidia.dali")
    loader = DaliLoader(ImageDataset(index, AugmentSpec(ops=[T.Resize((8, 8))], color="rgb")), batch_size=1,
                        **LOADER_ARGS[backend])
    with pytest.raises(TargetError, match=r"0_mask.png: values 7 \(4 pixels\) are outside the declared classes 0..2"):
        list(loader)
    loader.close()


@pytest.mark.parametrize("executor", ["processes", "threads"])
def test_pinned_batches_pin_their_boxes_and_masks(det_index, mvtec_index, monkeypatch, executor):
    """Under ``pin_memory=True`` the targets are page-locked with the images: the masks tensor, and the
    batch's packed boxes (one array each for boxes and labels), whose per-image tensors are views of the
    pinned ones. ``pin_memory()`` is simulated (no accelerator here): the tensors it returns count as
    pinned. "processes": the pinning torch's DataLoader does (its pin-memory thread's function on the
    worker's collated batch); "threads": the thread pool pins its own."""
    from torch.utils.data._utils.pin_memory import pin_memory as torch_pins

    from dali_backend.sampling.sampler import Draw
    from fallback.samples import Uint8Samples, batch_of, collate_uint8
    from fallback.threads import ThreadExecutor

    pinned: list[torch.Tensor] = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t, *a, **k: pinned.append(t.clone()) or pinned[-1])
    spec = AugmentSpec(ops=[T.Resize((24, 32))], color="rgb")
    for index in (det_index, mvtec_index):
        ds = ImageDataset(index, spec)
        samples = Uint8Samples(ds, "raise").__getitems__([Draw(i, 0, i) for i in range(3)])
        if executor == "processes":
            collated = torch_pins(collate_uint8(samples))
        else:
            monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
            collated = ThreadExecutor(ds, 3, "raise", pin_memory=True)._collate(samples)
        batch = batch_of(collated, False, 0)

        def is_pinned(t):
            return any(t.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() for p in pinned)

        assert is_pinned(batch.images) and is_pinned(batch.labels)
        if index is det_index:
            assert len(batch.boxes) == 3 and all(is_pinned(b) for b in batch.boxes + batch.box_labels)
            for k in range(3):
                want = torch.from_numpy(np.array(det_index.annotations.boxes_of(k)[0]) / 2).float()
                assert torch.allclose(batch.boxes[k], want, atol=1e-4)
        else:
            assert batch.masks is not None and is_pinned(batch.masks) and batch.masks.shape == (3, 1, 24, 32)
        pinned.clear()
