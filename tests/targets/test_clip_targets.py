"""Clips over an index with targets: per-frame masks ``[B, T, 1, H, W]`` and boxes ``boxes[b][t]``, each
frame's targets moved with that frame's image parameters, on both backends, equal. Generated line-camera
runs whose every frame has its own defect drawn into the image, its mask and its box
(tests/helpers/targets.py::clip_index_at)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dali_backend import AugmentSpec, ClipSampler, DaliLoader, Sequences
from dali_backend import transforms as T
from dali_backend.core.reading import SampleReader
from dali_backend.transforms.targets import Boxes, move_targets
from fallback.dataset import ImageDataset
from tests.helpers import BACKENDS, LOADER_ARGS
from tests.helpers.targets import clip_index_at
from tests.targets.test_targets_both_backends import RECIPE, defect_pixels

CLIP_LEN = 3
DALI = [b for b in BACKENDS if b != "torch"]  # each set against torch: dali-cpu, torch-threads, dali-gpu


@pytest.fixture(scope="module")
def clip_index(tmp_path_factory):
    return clip_index_at(tmp_path_factory.mktemp("clips"), (160, 128), runs=1, frames=4)


def run(index, backend, ops=RECIPE, step=1, on_error="raise", **kw):
    if backend != "torch":
        pytest.importorskip("nvidia.dali")
    spec = AugmentSpec(ops=ops, color="rgb", dtype="uint8")
    sampler = ClipSampler(Sequences.from_index(index), clip_len=CLIP_LEN, step=step, mode="sequential", seed=0)
    loader = DaliLoader(ImageDataset(index, spec, seed=3, on_error=on_error), batch_size=2, sampler=sampler,
                        **LOADER_ARGS[backend], **kw)
    try:
        return list(loader), sampler
    finally:
        loader.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_clips_carry_per_frame_masks_and_boxes_that_cover_each_frames_defect(clip_index, backend):
    got, sampler = run(clip_index, backend)
    assert sum(len(b["label"]) for b in got) == sampler.num_clips == 6  # 3 classes x 1 run x (4 - 3 + 1)
    masks, found = [], []
    for b in got:
        n = len(b["label"])
        assert sorted(b) == ["box_labels", "boxes", "dropped", "image", "label", "mask"]
        assert b["image"].shape == (n, CLIP_LEN, 3, 224, 224)
        assert b["mask"].shape == (n, CLIP_LEN, 1, 224, 224) and b["mask"].dtype == torch.uint8
        assert len(b["boxes"]) == len(b["box_labels"]) == n
        assert all(len(c) == CLIP_LEN for c in b["boxes"] + b["box_labels"])
        images = b["image"].cpu().flatten(0, 1)
        masks.append(b["mask"].cpu().flatten(0, 1)[:, 0] > 0)
        found.append(defect_pixels(images))
        for k, clip in enumerate(b["boxes"]):  # every defect pixel of a frame lies in that frame's box
            for t, boxes in enumerate(clip):
                ys, xs = torch.nonzero(found[-1][k * CLIP_LEN + t], as_tuple=True)
                if not len(xs):
                    continue
                assert len(boxes) == 1 and b["box_labels"][k][t].tolist() in ([1], [2])
                x1, y1, x2, y2 = boxes[0].tolist()
                assert ((xs + 0.5 >= x1 - 1) & (xs + 0.5 <= x2 + 1) & (ys + 0.5 >= y1 - 1) & (ys + 0.5 <= y2 + 1)).all()
    masks, found = torch.cat(masks), torch.cat(found)
    inter, union = (masks & found).sum().item(), (masks | found).sum().item()
    assert union > 1000 and inter / union >= 0.98, (inter, union)


def kernel_targets(index, i: int, epoch: int, position: int, ops=RECIPE):
    """Sample ``i``'s mask and boxes through the CPU kernels with the draw ``(seed 3, epoch, position)``."""
    t, size = index.annotations, (int(index.heights[i]), int(index.widths[i]))
    spec = AugmentSpec(ops=ops, color="rgb", dtype="uint8")
    mask, boxes, _ = move_targets(spec.transforms, spec.make_params(3, epoch, position, size),
                                  t.read_mask(SampleReader.for_index(index, seed=0), i, size), Boxes(*t.boxes_of(i), size))
    return mask, boxes


def check_clip_targets(index, batches, ops=RECIPE) -> int:
    """Every frame's mask and boxes are the kernels' on the frame served there (``meta["index"]``), with the
    clip's draw; returns how many clips hold frames with different masks."""
    differs = 0
    for b in batches:
        for k, frames in enumerate(b["meta"]["index"].tolist()):
            for f, i in enumerate(frames):
                mask, boxes = kernel_targets(index, i, int(b["meta"]["epoch"][k]), int(b["meta"]["position"][k]), ops)
                assert np.array_equal(b["mask"][k, f, 0].cpu().numpy(), mask), (k, f)
                assert torch.allclose(b["boxes"][k][f], torch.from_numpy(boxes.xyxy), atol=1e-3, rtol=0)
            differs += not torch.equal(b["mask"][k, 0], b["mask"][k, 1])
    return differs


def test_each_frame_is_moved_with_its_own_parameters_through_the_kernels(clip_index):
    """The fallback's clip masks are the kernels' on each frame's file with the parameters the clip's
    draw gave that frame (the clip's seed, epoch and position, on the frame's size); the frames of a clip
    are different masks."""
    got, _ = run(clip_index, "torch", return_meta=True)
    assert check_clip_targets(clip_index, got) >= 2  # stain and scratch clips: each frame its own defect


@pytest.mark.parametrize("backend", ["torch", "dali-cpu"])
def test_a_clip_replaced_under_skip_carries_the_served_frames_targets(tmp_path, backend):
    """on_error="skip": a clip with a bad frame is replaced by a whole clip of its class, and its masks and
    boxes are the replacement's frames', not the planned ones'."""
    index = clip_index_at(tmp_path, (64, 48), runs=2, frames=3)  # per class 2 clips of 3 frames (step 3)
    bad = tmp_path / "images" / "stain" / "run0" / "frame1.png"
    bad.write_bytes(b"\0" * bad.stat().st_size)  # the same size: only the read-time check sees it
    ops = [T.RandomResizedCrop((32, 40), scale=(0.5, 1.0)), T.RandomHorizontalFlip()]
    got, _ = run(index, backend, ops, step=3, on_error="skip", return_meta=True)
    planned = torch.cat([b["meta"]["planned_clip"] for b in got]).tolist()
    served = torch.cat([b["meta"]["clip"] for b in got]).tolist()
    # clips in folder order: good/run0, good/run1, scratch/run0, scratch/run1, stain/run0 (bad frame), stain/run1
    assert [(p, s) for p, s in zip(planned, served) if p != s] == [(4, 5)]
    assert check_clip_targets(index, got, ops) >= 1  # the replacement's frames' masks, each moved with its draw


@pytest.mark.parametrize("dali", DALI)
def test_clip_masks_and_boxes_are_equal_on_both_backends(clip_index, dali):
    ops = [T.RandomResizedCrop((48, 64), scale=(0.5, 1.0)), T.RandomHorizontalFlip(), T.RandomRotation(20)]
    (a, _), (b, _) = run(clip_index, "torch", ops, return_meta=True), run(clip_index, dali, ops, return_meta=True)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x["meta"]["index"], y["meta"]["index"]) and torch.equal(x["label"], y["label"].cpu())
        assert x["mask"].shape == y["mask"].shape and torch.equal(x["mask"], y["mask"].cpu())
        for p, q in zip(sum(x["boxes"], []), sum(y["boxes"], [])):
            assert p.shape == q.shape and torch.allclose(p, q, atol=1e-3, rtol=0)
        assert [c.tolist() for c in sum(x["box_labels"], [])] == [c.tolist() for c in sum(y["box_labels"], [])]


@pytest.mark.parametrize("backend", ["torch", "dali-cpu"])
def test_padded_clip_batches_give_each_frames_size_beside_its_mask(clip_index, backend):
    """pad_batch: masks padded with the images, ``"sizes"`` ``[B, T, 2]``, nothing of a mask past its size."""
    if backend != "torch":
        pytest.importorskip("nvidia.dali")
    spec = AugmentSpec(ops=[T.Resize(40, max_size=None), T.RandomRotation(10)], color="rgb", dtype="uint8", pad_batch=16)
    sampler = ClipSampler(Sequences.from_index(clip_index), clip_len=CLIP_LEN, step=1, mode="sequential", seed=0)
    with DaliLoader(ImageDataset(clip_index, spec, seed=3), batch_size=2, sampler=sampler,
                    **LOADER_ARGS[backend]) as loader:
        for b in loader:
            n = len(b["label"])
            assert b["sizes"].shape == (n, CLIP_LEN, 2) and b["mask"].shape[:3] == (n, CLIP_LEN, 1)
            assert b["mask"].shape[3:] == b["image"].shape[3:] and b["mask"].shape[3] % 16 == 0
            for k in range(n):
                for t, (h, w) in enumerate(b["sizes"][k].tolist()):
                    assert (h, w) == (40, 50) and not b["mask"][k, t, :, h:].any() and not b["mask"][k, t, :, :, w:].any()
