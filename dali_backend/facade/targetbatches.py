"""What a loader yields for an index with targets: one ``dict`` per batch, the ecosystem's shapes.

``{"image": [B, C, H, W], "label": [B], "mask": uint8 [B, 1, H, W], "boxes": [[N_i, 4] float32, ...],
"box_labels": [[N_i] int64, ...], "dropped": int}``, ``"sizes"`` (int64 ``[B, 2]``) where the spec pads
variable-size batches and ``"meta"`` with ``return_meta=True``. Keys are present when the index
carries them (``"mask"`` for masks, ``"boxes"`` and ``"box_labels"`` for boxes). A list of tensors is what
torchvision's detection models take (``targets[i]["boxes"]``); :func:`pad_boxes` gives one padded
tensor and the counts for code that wants a single array. A dict rather than a longer tuple: the
fields are named, so adding one later breaks no unpacking.
"""

from __future__ import annotations

import torch

from ..core.boundary import Batch
from ..errors import ConfigError


def has_targets(batch: Batch) -> bool:
    """Whether an executor batch carries masks or boxes (a batch-like record without the fields: no)."""
    return getattr(batch, "masks", None) is not None or getattr(batch, "boxes", None) is not None


def refuse_clip_targets(batch: Batch) -> None:
    """Clips (a ClipSampler) over an index with targets are not supported yet: refused, never dropped."""
    if has_targets(batch):
        raise ConfigError("DaliLoader: a ClipSampler over an index with targets (masks or boxes): per-frame targets "
                          "of clips are not supported yet; sample single images (the default sampler or a "
                          "WeightedSampler), or index the frames without targets=")


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
