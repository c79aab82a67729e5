"""Masks through the DALI graph, boxes beside it: the targets of an index with targets on the DALI backend.

**Masks** ride through the same graph as their images, by nearest neighbour: every geometric operation
becomes at most two DALI steps, ``fn.resize(INTERP_NN, antialias=False)`` (resizes, the resize of a
``RandomResizedCrop``; its ROI, the kernel's ``resize_extent``, puts the scale on the exact grid), ``fn.slice(out_of_bounds_policy="pad", fill_values=fill_mask)`` (crops, crop
padding, letterbox bands: an integer window, pixels copied) and ``fn.warp_affine(INTERP_NN,
fill_value=fill_mask, inverse_map=True)`` (flips, quarter turns, rotations, affines: the kernel's own
``warp_matrix``), whose per-draw arguments (windows, sizes, 2x3 matrices) the reader worker computes from
the draw's parameters, exactly as the CPU kernels of :mod:`dali_backend.transforms.targets` do. Those
kernels are written in DALI CPU's float32 arithmetic for both resampling operators, so the masks are
equal pixel for pixel on both backends (tests/targets/test_targets_both_backends.py). A crop was a warp
of a pure translation before (``floor(x + 0.5 + left)``: the same pixels); as a slice it costs 0.10 ms
per 200 x 250 mask against 0.24 ms (DALI CPU, 2 threads, one run on a loaded machine).

The mask enters decoded, through the external source (the reader worker reads the PNG with OpenCV,
maps MVTec's 0/255 to 0/1 and checks its values and size): a sample without a mask file gets its
all-background mask there, of its image's size, with no file to decode, and a bad value is refused
with the mask's path. Decoding on the DALI side instead would need a second encoded input and a
value check after the graph (see the guide's measurement).

Clips need no variant of the graph: a batch of ``B`` clips is ``B * T`` frames through the same graph
(each frame's mask with that frame's draw, the clip's), regrouped ``[B, T, 1, H, W]`` by the facade
(:func:`~dali_backend.facade.targetbatches.per_clip`).

**Boxes** are computed in the reader worker by the same pure functions (the operations' box kernels
on the draw's parameters: a few 3x3 products per box) and travel in the slot's note: a batch of
variable-length box lists is not a tensor, and a handful of numbers per draw costs nothing there.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from ..core.transfer import to_device
from ..transforms.crop import RandomResizedCrop
from ..transforms.resize import Resize
from ..transforms.targets import CROPS, BoxPolicy, Boxes, move_targets, resize_extent, warp_matrix


def step_kinds(op) -> tuple[str, ...]:
    """The DALI steps of ``op``'s mask (``"resize"``, ``"slice"``, ``"warp"``), fixed by the operation, not
    the draw."""
    if op.is_identity or op.KIND != "geometric":
        return ()
    if isinstance(op, Resize):
        return ("resize", "slice") if op.letterbox else ("resize",)
    if isinstance(op, RandomResizedCrop):
        return ("slice", "resize")
    if isinstance(op, CROPS):
        return ("slice",)
    return ("warp",)


def _resize(in_hw: tuple[int, int], out_hw: tuple[int, int]) -> tuple[str, tuple]:
    """A resize step: its output size and the source extent (:func:`resize_extent`) per axis."""
    out_hw = tuple(int(v) for v in out_hw)
    return ("resize", (out_hw, tuple(resize_extent(int(n), o) for n, o in zip(in_hw, out_hw))))


def steps_of(op, params: dict, size: tuple[int, int]) -> list[tuple[str, tuple]]:
    """``op``'s mask steps for one draw on a mask of ``size`` (h, w): ``("resize", ((h, w), (extent_h,
    extent_w)))``, ``("slice", ((top, left), (h, w)))`` or ``("warp", (matrix 2x3, (h, w)))``, the CPU
    kernel's geometry (a resize's extent puts its scale on the kernel's exact grid)."""
    kinds = step_kinds(op)
    if not kinds:
        return []
    if isinstance(op, Resize):
        inner = tuple(op.size) if op.exact else (int(params["height"]), int(params["width"]))
        if not op.letterbox:
            return [_resize(size, inner)]
        (H, W), (nh, nw) = op.size, inner
        return [_resize(size, inner), ("slice", ((-((H - nh + 1) // 2), -((W - nw + 1) // 2)), (H, W)))]
    if isinstance(op, CROPS):
        top, left, ch, cw = (int(v) for v in op.window(params))
        steps = [("slice", ((top, left), (ch, cw)))]
        return steps + [_resize((ch, cw), op.size)] if isinstance(op, RandomResizedCrop) else steps
    return [("warp", (warp_matrix(op, params, size), tuple(op.output_size(size, params))))]


def mask_wire(spec, params: list[dict], size: tuple[int, int]) -> list[np.ndarray]:
    """The per-draw arrays the mask steps of ``spec`` take, in graph order: a float32 ``[2]`` size and ``[2]``
    source extent per resize; a float32 ``[2]`` start (top, left) and ``[2]`` shape per slice; a float32
    ``[2, 3]`` matrix and ``[2]`` size per warp."""
    out = []
    for op, p in zip(spec.transforms, params):
        for kind, value in steps_of(op, p, size):
            if kind == "resize":
                size = tuple(int(v) for v in value[0])
                out += [np.array(size, np.float32), np.array(value[1], np.float32)]  # the extent: exact
            elif kind == "slice":
                start, size = value[0], tuple(int(v) for v in value[1])
                out += [np.array(start, np.float32), np.array(size, np.float32)]
            else:
                matrix, size = value[0], tuple(int(v) for v in value[1])
                out += [np.asarray(matrix, np.float32), np.array(size, np.float32)]
    return out


def mask_wire_count(spec) -> int:
    """How many arrays :func:`mask_wire` sends for ``spec``."""
    return sum(2 for op in spec.transforms for _ in step_kinds(op))


def mask_graph(fn, types, mask, spec, values: list, fill: int = 0):
    """The graph fragment: ``mask`` (``[H, W, 1]`` uint8) through every mask step of ``spec``, fed ``values``
    (external source nodes, :func:`mask_wire` order); ``fill`` (the dataset's ``fill_mask``) where a slice
    or a warp reaches outside."""
    it = iter(values)
    for op in spec.transforms:
        for kind in step_kinds(op):
            if kind == "resize":  # the extent as a ROI: the scale is the CPU kernel's (nearest_scale)
                size, extent = next(it), next(it)
                mask = fn.resize(mask, size=size, roi_start=[0.0, 0.0], roi_end=extent, roi_relative=False,
                                 interp_type=types.INTERP_NN, antialias=False)
            elif kind == "slice":
                start, shape = (fn.cast(next(it), dtype=types.INT32) for _ in range(2))  # whole numbers, sent as float32
                mask = fn.slice(mask, start=start, shape=shape, axis_names="HW", out_of_bounds_policy="pad",
                                fill_values=float(fill))
            else:
                matrix, size = next(it), next(it)
                mask = fn.warp_affine(mask, matrix=matrix, size=size, inverse_map=True, interp_type=types.INTERP_NN,
                                      fill_value=float(fill))
    return mask


def moved_boxes(spec, params: list[dict], annotations, served: int, size: tuple[int, int],
                policy: BoxPolicy) -> dict:
    """Sample ``served``'s boxes moved by the draw (the operations' box kernels), as the note carries them."""
    _, boxes, dropped = move_targets(spec.transforms, params, None, Boxes.of_index(*annotations.boxes_of(served), size),
                                     policy)
    return {"boxes": boxes.xyxy.tolist(), "labels": boxes.labels.tolist(), "dropped": dropped.total}


def box_note_bytes(annotations) -> int:
    """Room in a slot's note for the most boxes any sample has (each coordinate at its longest repr)."""
    if annotations is None or "boxes" not in annotations.kinds:
        return 0
    most = int(np.diff(annotations.box_offsets).max(initial=0))
    return 64 + most * (4 * 26 + 22)


def read_box_note(note: dict):
    """``(boxes float32 [N, 4], labels int64 [N], dropped)`` of a note's box entry."""
    return (np.array(note["boxes"], np.float32).reshape(-1, 4), np.array(note["labels"], np.int64),
            int(note["dropped"]))


def batch_targets(ring, kinds: tuple[str, ...], out: dict, keep: np.ndarray, rows: np.ndarray, good: np.ndarray,
                  hw: tuple[int, int] | None) -> dict:
    """A DALI batch's target fields of :class:`~dali_backend.core.boundary.Batch`: the graph's masks (padding
    rows removed, cut to the batch's padded size ``hw``) and the boxes the workers left in the slots'
    notes (``rows[:, 0]``: slots; a bad draw, ``good`` False, has none)."""
    res: dict = {}
    if "masks" in kinds:
        masks = out["masks"]
        if not keep.all():
            masks = masks.index_select(0, to_device(np.flatnonzero(keep), masks.device))
        if hw is not None:
            masks = masks[:, :, :hw[0], :hw[1]]
        res["masks"] = masks.clone()  # DALI's output buffers are not ours to keep
    if "boxes" in kinds:
        boxes, labels, dropped = [], [], 0
        for slot, ok in zip(rows[:, 0].tolist(), good.tolist()):
            b, lab, d = read_box_note(json.loads(ring.read_note(int(slot)))["boxes"]) if ok else \
                (np.zeros((0, 4), np.float32), np.zeros(0, np.int64), 0)
            boxes.append(torch.from_numpy(b))
            labels.append(torch.from_numpy(lab))
            dropped += d
        res.update(boxes=boxes, box_labels=labels, dropped=dropped)
    return res


def encode_note(params: list | None, boxes: dict | None) -> bytes:
    """A slot's note: the draw's parameters (``return_meta``) and its moved boxes, as JSON."""
    return json.dumps({"params": params, "boxes": boxes}).encode()
