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
from dali_backend.transforms.targets import Boxes, move_targets
from fallback.dataset import ImageDataset
from tests.helpers import BACKENDS, LOADER_ARGS
from tests.helpers.targets import clip_index_at
from tests.targets.test_targets_both_backends import RECIPE, defect_pixels

CLIP_LEN = 3
DALI = [b for b in BACKENDS if b != "torch"]


@pytest.fixture(scope="module")
def clip_index(tmp_path_factory):
    return clip_index_at(tmp_path_factory.mktemp("clips"), (160, 128), runs=1, frames=4)


def run(index, backend, ops=RECIPE, **kw):
    if backend != "torch":
        pytest.importorskip("nvidia.dali")
    spec = AugmentSpec(ops=ops, color="rgb", dtype="uint8")
    sampler = ClipSampler(Sequences.from_index(index), clip_len=CLIP_LEN, step=1, mode="sequential", seed=0)
    loader = DaliLoader(ImageDataset(index, spec, seed=3), batch_size=2, sampler=sampler, **LOADER_ARGS[backend], **kw)
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


def test_each_frame_is_moved_with_its_own_parameters_through_the_kernels(clip_index):
    """The fallback's clip masks are the kernels' on each frame's file with the parameters the clip's
    draw gave that frame (the clip's seed, epoch and position, on the frame's size); the frames of a clip
    are different masks."""
    got, _ = run(clip_index, "torch", return_meta=True)
    t = clip_index.annotations
    spec = AugmentSpec(ops=RECIPE, color="rgb", dtype="uint8")
    differs = 0
    for b in got:
        for k, frames in enumerate(b["meta"]["index"].tolist()):
            for f, i in enumerate(frames):
                size = (int(clip_index.heights[i]), int(clip_index.widths[i]))
                params = spec.make_params(3, int(b["meta"]["epoch"][k]), int(b["meta"]["position"][k]), size)
                mask, boxes, _ = move_targets(spec.transforms, params, t.read_mask(clip_index.root, i, size),
                                              Boxes(*t.boxes_of(i), size))
                assert np.array_equal(b["mask"][k, f, 0].numpy(), mask), (k, f)
                assert torch.allclose(b["boxes"][k][f], torch.from_numpy(boxes.xyxy))
            differs += not torch.equal(b["mask"][k, 0], b["mask"][k, 1])
    assert differs >= 2  # stain and scratch clips: each frame its own defect


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
