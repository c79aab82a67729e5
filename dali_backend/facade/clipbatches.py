"""Clip batches on the loader: ``B * T`` frames from the executor regrouped as ``[B, T, C, H, W]``,
checked against the clips planned, with their meta (a mixin of :class:`~dali_backend.facade.loader.DaliLoader`);
and the padded batches' valid sizes."""

from __future__ import annotations

import numpy as np
import torch

from ..core.boundary import Batch
from ..errors import BadImageError
from ..core.transfer import to_device


def _sizes(sizes: np.ndarray | None) -> tuple:
    """The valid sizes a padded batch yields after its labels (int64 tensor), or nothing."""
    return () if sizes is None else (torch.from_numpy(np.ascontiguousarray(sizes, dtype=np.int64)),)


class ClipBatchesMixin:
    """Regrouping for a loader whose sampler is a :class:`~dali_backend.sampling.clips.ClipSampler`
    (``clip_len``, ``_pass_clips``)."""

    def _clip_output(self, batch: Batch, images: torch.Tensor, per_draw) -> tuple:
        """One batch of ``B * T`` frames regrouped as ``[B, T, C, H, W]``, labelled by clip ``[B]``."""
        T = self.clip_len
        b = self._passes.batches_done
        draws = self._pass_clips[b * self.batch_size:(b + 1) * self.batch_size]
        positions = batch.positions.reshape(-1, T)
        if (len(batch.positions) != len(draws) * T or not (positions == positions[:, :1]).all()
                or not np.array_equal(positions[:, 0], draws[:, 1])):
            raise RuntimeError(f"batch {b}: the executor returned frames of positions {batch.positions.tolist()} where "
                               f"clips of positions {draws[:, 1].tolist()} were planned; this is a bug in dali_backend, "
                               "please report it")
        clips = draws[:, 0]
        served = self._served_clips(clips, batch.served.reshape(-1, T))
        images = images.reshape(len(clips), T, *images.shape[1:])
        labels = to_device(self.sampler.labels[served], batch.labels.device)  # pinned, non-blocking on a GPU
        if self.batch_transform is not None:
            images, labels = self.batch_transform(images, labels)
        meta = self._clip_meta(batch, per_draw, clips, served) if self.return_meta else None
        self._passes.account(clips, served, draws[:, 1], self._clip_names)
        sizes = None if batch.sizes is None else batch.sizes.reshape(len(clips), T, 2)
        return (images, labels, *_sizes(sizes)) + (() if meta is None else (meta,))

    def _served_clips(self, clips: np.ndarray, frames: np.ndarray) -> np.ndarray:
        """The clip numbers the executor served for the planned ``clips`` (``frames``: ``[B, T]`` served
        sample indices): the planned ones, or under ``on_error="skip"`` whole clips of the same class."""
        served = clips.copy()
        for k in np.flatnonzero((frames != self.sampler.frames(clips)).any(axis=1)):
            if self._clip_table is None or self.on_error != "skip":
                raise RuntimeError("the executor served other frames than the clips planned; this is a bug in "
                                   "dali_backend, please report it")
            served[k] = self._clip_table.clip_of(frames[k])  # RuntimeError if the frames are no clip
            if self.sampler.labels[served[k]] != self.sampler.labels[clips[k]]:
                raise RuntimeError(f"clip {clips[k]} was replaced by clip {served[k]} of another class; this is a bug "
                                   "in dali_backend, please report it")
        return served

    def _clip_names(self, planned: int, served: int) -> tuple[str, str]:
        """``stats().skipped_files``'s entry for clip ``planned`` replaced by clip ``served``: the planned
        clip's first frame that is bad now (read and checked again here, in the main process: replaced
        clips are rare) and the replacement's frame at its place; the first frames if none is bad now."""
        frames, replacement = self.sampler.frames([planned, served])
        reader, t = self.dataset.reader, 0
        for k, i in enumerate(frames.tolist()):
            try:
                reader.read(i)
            except BadImageError:
                t = k
                break
        index = self.dataset.index
        return index.abspath(int(frames[t])), index.abspath(int(replacement[t]))

    def _clip_meta(self, batch: Batch, per_draw, clips: np.ndarray, served: np.ndarray) -> dict:
        """``return_meta`` for clips: per clip (``[B]``) and per frame (``[B, T]``, lists of B lists of T)."""
        T, n = self.clip_len, len(clips)
        frame_meta = self._passes.batch_meta(batch, per_draw)
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
        return {"clip": as_tensor(served), "planned_clip": as_tensor(clips),
                "sequence": as_tensor(self.sampler.clip_sequence[served]),
                "index": frame_meta["index"].reshape(n, T), "planned": frame_meta["planned"].reshape(n, T),
                "epoch": frame_meta["epoch"].reshape(n, T)[:, 0].contiguous(),
                "position": frame_meta["position"].reshape(n, T)[:, 0].contiguous(),
                "path": [frame_meta["path"][k * T:(k + 1) * T] for k in range(n)],
                "params": [frame_meta["params"][k * T:(k + 1) * T] for k in range(n)]}
