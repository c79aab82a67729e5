"""What the user gets for one executor batch, as an object the loader holds, one kind per plan: a
batch of frames (:class:`FrameBatches`) or of clips (:class:`ClipBatches`: ``B * T`` frames from the
executor regrouped as ``[B, T, C, H, W]``, checked against the clips planned, with their meta, and with an index with targets
their per-frame masks and boxes, :func:`~.targetbatches.per_clip`); each
labels it, applies ``batch_transform``, adds the meta and the padded batches' valid sizes, and counts
it in the passes' accounting. Chosen once (:func:`batches_of`) from the plan; built from the plan and
the passes alone, so a test can build one without a loader."""

from __future__ import annotations

import numpy as np
import torch

from ..core.boundary import Batch
from ..errors import BadImageError
from ..core.transfer import to_device
from .targetbatches import has_targets, per_clip, target_batch


def sizes_of(sizes: np.ndarray | None) -> tuple:
    """The valid sizes a padded batch yields after its labels (int64 tensor), or nothing."""
    return () if sizes is None else (torch.from_numpy(np.ascontiguousarray(sizes, dtype=np.int64)),)


class FrameBatches:
    """Batches of single draws: the executor's labels, the loader's ``batch_transform``, ``return_meta``.

    Args:
        plan: the loader's plan (:mod:`dali_backend.facade.plans`).
        passes: its :class:`~dali_backend.facade.epochs.Passes` (accounting, meta, batches done).
        batch_size: draws per batch.
        return_meta: add each batch's meta dict.
    """

    table = None  # what the executor replaces whole clips from under on_error="skip" (None: no clips)

    def __init__(self, plan, passes, batch_size: int, *, return_meta: bool = False):
        self.plan, self.passes, self.batch_size, self.return_meta = plan, passes, int(batch_size), bool(return_meta)

    def begin_pass(self, epoch: int, draws: int) -> None:
        """A pass of ``epoch`` with ``draws`` planned draws on this rank begins (from the passes' offset)."""

    def output(self, batch: Batch, images: torch.Tensor, per_draw, batch_transform=None) -> tuple:
        """``(images, labels[, sizes][, meta])`` of one normalised executor batch, counted as yielded
        (``batch_transform``: the loader's ``fn(images, labels) -> (images, labels)``, read per batch)."""
        labels = batch.labels
        if batch_transform is not None:
            images, labels = batch_transform(images, labels)
        meta = self.passes.batch_meta(batch, per_draw) if self.return_meta else None
        self.passes.account(batch.planned, batch.served, batch.positions)
        if has_targets(batch):  # an index with targets: one dict per batch
            return target_batch(images, labels, batch, meta)
        return (images, labels, *sizes_of(batch.sizes)) + (() if meta is None else (meta,))


class ClipBatches(FrameBatches):
    """Batches of clips from a :class:`~dali_backend.facade.plans.ClipPlan`: ``B * T`` frames regrouped as
    ``[B, T, C, H, W]``, labelled by clip ``[B]`` (``on_error``: ``"skip"`` lets the executor replace a
    clip with a bad frame by a whole clip of its class, from :attr:`table`)."""

    def __init__(self, plan, passes, batch_size: int, *, on_error: str = "raise", return_meta: bool = False):
        super().__init__(plan, passes, batch_size, return_meta=return_meta)
        self.sampler, self.clip_len, self.on_error = plan.sampler, plan.clip_len, on_error
        self.table = self.sampler.table()
        self.draws: np.ndarray | None = None  # this pass's clip draws [n, 2] (clip, position)

    def begin_pass(self, epoch: int, draws: int) -> None:
        self.draws = self.plan.clip_draws(epoch, self.passes.pass_offset, draws)

    def output(self, batch: Batch, images: torch.Tensor, per_draw, batch_transform=None) -> tuple:
        T = self.clip_len
        b = self.passes.batches_done
        draws = self.draws[b * self.batch_size:(b + 1) * self.batch_size]
        positions = batch.positions.reshape(-1, T)
        if (len(batch.positions) != len(draws) * T or not (positions == positions[:, :1]).all()
                or not np.array_equal(positions[:, 0], draws[:, 1])):
            raise RuntimeError(f"batch {b}: the executor returned frames of positions {batch.positions.tolist()} where "
                               f"clips of positions {draws[:, 1].tolist()} were planned; this is a bug in dali_backend, "
                               "please report it")
        clips = draws[:, 0]
        served = self.served_clips(clips, batch.served.reshape(-1, T))
        images = images.reshape(len(clips), T, *images.shape[1:])
        labels = to_device(self.sampler.labels[served], batch.labels.device)  # pinned, non-blocking on a GPU
        if batch_transform is not None:
            images, labels = batch_transform(images, labels)
        meta = self.clip_meta(batch, per_draw, clips, served) if self.return_meta else None
        self.passes.account(clips, served, draws[:, 1], self.clip_names)
        if has_targets(batch):  # an index with targets: one dict per batch, per-frame targets by clip
            return per_clip(target_batch(images, labels, batch, meta), T)
        sizes = None if batch.sizes is None else batch.sizes.reshape(len(clips), T, 2)
        return (images, labels, *sizes_of(sizes)) + (() if meta is None else (meta,))

    def served_clips(self, clips: np.ndarray, frames: np.ndarray) -> np.ndarray:
        """The clip numbers the executor served for the planned ``clips`` (``frames``: ``[B, T]`` served
        sample indices): the planned ones, or under ``on_error="skip"`` whole clips of the same class."""
        served = clips.copy()
        for k in np.flatnonzero((frames != self.sampler.frames(clips)).any(axis=1)):
            if self.on_error != "skip":
                raise RuntimeError("the executor served other frames than the clips planned; this is a bug in "
                                   "dali_backend, please report it")
            served[k] = self.table.clip_of(frames[k])  # RuntimeError if the frames are no clip
            if self.sampler.labels[served[k]] != self.sampler.labels[clips[k]]:
                raise RuntimeError(f"clip {clips[k]} was replaced by clip {served[k]} of another class; this is a bug "
                                   "in dali_backend, please report it")
        return served

    def clip_names(self, planned: int, served: int) -> tuple[str, str]:
        """``stats().skipped_files``'s entry for clip ``planned`` replaced by clip ``served``: the planned
        clip's first frame that is bad now (read and checked again here, in the main process: replaced
        clips are rare) and the replacement's frame at its place; the first frames if none is bad now."""
        frames, replacement = self.sampler.frames([planned, served])
        reader, t = self.plan.dataset.reader, 0
        for k, i in enumerate(frames.tolist()):
            try:
                reader.read(i)
            except BadImageError:
                t = k
                break
        index = self.plan.dataset.index
        return index.abspath(int(frames[t])), index.abspath(int(replacement[t]))

    def clip_meta(self, batch: Batch, per_draw, clips: np.ndarray, served: np.ndarray) -> dict:
        """``return_meta`` for clips: per clip (``[B]``) and per frame (``[B, T]``, lists of B lists of T)."""
        T, n = self.clip_len, len(clips)
        frame_meta = self.passes.batch_meta(batch, per_draw)
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
        return {"clip": as_tensor(served), "planned_clip": as_tensor(clips),
                "sequence": as_tensor(self.sampler.clip_sequence[served]),
                "index": frame_meta["index"].reshape(n, T), "planned": frame_meta["planned"].reshape(n, T),
                "epoch": frame_meta["epoch"].reshape(n, T)[:, 0].contiguous(),
                "position": frame_meta["position"].reshape(n, T)[:, 0].contiguous(),
                "path": [frame_meta["path"][k * T:(k + 1) * T] for k in range(n)],
                "params": [frame_meta["params"][k * T:(k + 1) * T] for k in range(n)]}


def batches_of(plan, passes, batch_size: int, *, on_error: str = "raise", return_meta: bool = False) -> FrameBatches:
    """The batches of ``plan``'s kind: clips where its draws are clips, else frames."""
    if plan.clips:
        return ClipBatches(plan, passes, batch_size, on_error=on_error, return_meta=return_meta)
    return FrameBatches(plan, passes, batch_size, return_meta=return_meta)
