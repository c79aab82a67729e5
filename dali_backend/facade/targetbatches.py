"""What a loader yields for an index with targets: one ``dict`` per batch, the ecosystem's shapes.

``{"image": [B, C, H, W], "label": [B], "mask": uint8 [B, 1, H, W], "boxes": [[N_i, 4] float32, ...],
"box_labels": [[N_i] int64, ...], "dropped": int}``, ``"sizes"`` (int64 ``[B, 2]``) where the spec pads
variable-size batches and ``"meta"`` with ``return_meta=True``. Keys are present when the index
carries them (``"mask"`` for masks, ``"boxes"`` and ``"box_labels"`` for boxes). A list of tensors is what
torchvision's detection models take (``targets[i]["boxes"]``); :func:`pad_boxes` gives one padded
tensor and the counts for code that wants a single array. A dict rather than a longer tuple: the
fields are named, so adding one later breaks no unpacking.

Clips (a ``ClipSampler``) carry per-frame targets in the clip's layout, frame axis second as the images'
``[B, T, C, H, W]`` (torchvision's ``Video`` and its video masks ``[..., T, H, W]``): ``"mask"`` uint8
``[B, T, 1, H, W]``, ``"boxes"`` / ``"box_labels"`` a list of ``B`` clips, each a list of ``T`` per-frame
``[N_bt, 4]`` / ``[N_bt]`` tensors (each frame's list in torchvision's detection form, so
``boxes[b][t]`` feeds a per-frame detector, and ``pad_boxes(boxes[b], box_labels[b])`` pads one clip),
``"sizes"`` ``[B, T, 2]``, ``"label"`` ``[B]`` (one per clip). Every frame's targets are moved with that
frame's own image parameters (the clip's one draw, on each frame's size).
"""

from __future__ import annotations

import torch

from ..core.boundary import Batch


def has_targets(batch: Batch) -> bool:
    """Whether an executor batch carries masks or boxes (a batch-like record without the fields: no)."""
    return getattr(batch, "masks", None) is not None or getattr(batch, "boxes", None) is not None


def target_batch(images: torch.Tensor, labels: torch.Tensor, batch: Batch, meta: dict | None) -> dict:
    """The user's dict for an executor ``batch`` whose images and labels are ready (normalised)."""
    out: dict = {"image": images, "label": labels}
    if batch.masks is not None:
        out["mask"] = batch.masks.to(images.device) if batch.masks.device != images.device else batch.masks
    if batch.boxes is not None:
        out["boxes"], out["box_labels"] = batch.boxes, batch.box_labels
    out["dropped"] = batch.dropped
    if batch.sizes is not None:
        out["sizes"] = torch.from_numpy(batch.sizes)
    if meta is not None:
        out["meta"] = meta
    return out


def per_clip(out: dict, clip_len: int) -> dict:
    """A frames' dict of :func:`target_batch` (``B * T`` frames, images already ``[B, T, C, H, W]``)
    regrouped by clip: masks ``[B, T, 1, H, W]``, boxes and their labels ``B`` lists of ``T``, sizes
    ``[B, T, 2]``; the label, the dropped count and the meta are the clips' already."""
    T = int(clip_len)
    if "mask" in out:
        out["mask"] = out["mask"].reshape(-1, T, *out["mask"].shape[1:])
    for key in ("boxes", "box_labels"):
        if key in out:
            out[key] = [out[key][k:k + T] for k in range(0, len(out[key]), T)]
    if "sizes" in out:
        out["sizes"] = out["sizes"].reshape(-1, T, 2)
    return out


def pad_boxes(boxes: list[torch.Tensor], labels: list[torch.Tensor], fill: float = 0.0,
              label_fill: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch's box lists as one padded tensor: ``(boxes [B, N, 4] float32, labels [B, N] int64,
    counts [B] int64)``, ``N`` the most boxes of an image; rows past ``counts[i]`` hold ``fill`` and
    ``label_fill`` (-1: no class)."""
    counts = torch.tensor([len(b) for b in boxes], dtype=torch.int64)
    n = int(counts.max()) if len(boxes) else 0
    out = torch.full((len(boxes), n, 4), float(fill), dtype=torch.float32)
    lab = torch.full((len(boxes), n), int(label_fill), dtype=torch.int64)
    for i, (b, l) in enumerate(zip(boxes, labels)):
        out[i, :len(b)] = b
        lab[i, :len(l)] = l
    return out, lab, counts
