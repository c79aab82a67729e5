"""The fallback's per-sample work and collation, shared by its two executors: DataLoader worker
processes (:mod:`fallback.executor`) and a thread pool in the training process (:mod:`fallback.threads`).

:class:`Uint8Samples` turns a batch's draws into augmented uint8 samples (with the served sample, the
draw's parameters, the stages' times, the targets) and never raises a bad file (it comes back as a
:class:`~dali_backend.core.boundary.BadDraw`); :func:`collate_uint8` stacks them. Both run unchanged in a
worker process and in a thread: the pixels are the same whichever executor runs them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from dali_backend.core.boundary import BadDraw, Batch, Served, plain_params
from dali_backend.core.reading import SERVED_BAD, ClipTable
from dali_backend.errors import BadImageError
from dali_backend.sampling.sampler import Draw
from dali_backend.util.memory import EveryNth

from .dataset import ImageDataset
from .ops import one_intra_op_thread

# samples between heap trims in a worker: a trim returns the full-resolution temporaries' pages, which
# the next image faults in again (measured at 2048x1536 -> 256: every 16 samples cost ~0.9 ms/img
# beyond the reference, every 32 about 0, RSS growth over the run <= 4 %)
WORKER_TRIM_EVERY = 32


class Uint8Samples(Dataset):
    """Returns the dataset's uint8 samples (and which sample was served) instead of normalised tensors,
    with the draw's parameters when the loader asked for them (``return_meta``).

    A bad file under ``on_error="raise"`` is not raised in the worker (torch would re-raise it as text,
    losing its fields): the sample comes back blank with ``served = SERVED_BAD`` and a
    :class:`~dali_backend.core.boundary.BadDraw`, and the loader raises :class:`BadImageError` when it
    reaches that batch, as the DALI path does.
    """

    def __init__(self, dataset: ImageDataset, on_error: str, with_params: bool = False, timed: bool = True,
                 clips: ClipTable | None = None):
        self.dataset, self.on_error, self.with_params, self.timed = dataset, on_error, with_params, timed
        self.clips = clips if on_error == "skip" else None  # whole clips are replaced under skip
        self.targets = dataset.index.annotations is not None  # masks and boxes ride with each sample
        self._trim = EveryNth(WORKER_TRIM_EVERY)  # each worker counts its own samples (its own copy; threads share one)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, draws: list[Draw]) -> list:
        """A batch (torch's fetcher calls this with the batch's draws): objects in a bucket are fetched
        concurrently first, so the batch waits for the network once, then decoded one by one."""
        if get_worker_info() is None:  # in the training process (num_workers=0): one thread, as a worker
            with one_intra_op_thread():
                return self._fetch(draws)
        return self._fetch(draws)

    def _fetch(self, draws: list[Draw]) -> list:
        self.dataset.reader.prefetch([d.index for d in draws])
        if self.clips is not None:
            T = self.clips.clip_len
            samples = [s for k in range(0, len(draws), T) for s in self._clip(draws[k:k + T])]
        else:
            samples = [self._sample(d, defer_mask=True) for d in draws]
        if self.targets:  # the batch's masks moved together: their warps share loops (move_masks)
            self.dataset.finish_masks([s[5] for s in samples])
        if self.timed:  # the intra-op threads the operations ran on, per sample (report(): oversubscription)
            threads = float(torch.get_num_threads())
            for s in samples:
                s[4]["intra_op_threads"] = threads  # dali_backend.telemetry.THREADS_KEY (a layer above)
        return samples

    def _clip(self, draws: list[Draw]) -> list:
        """The samples of one clip's frames under ``on_error="skip"``: every frame of the clip, or every
        frame of its replacement (:meth:`~dali_backend.core.reading.SampleReader.serve_clip`)."""
        if len(draws) != self.clips.clip_len or len({(d.epoch, d.position) for d in draws}) != 1:
            raise RuntimeError(f"a batch's frames {draws} do not make whole clips of {self.clips.clip_len}; this is "
                               "a bug in dali_backend, please report it")
        self._trim()
        ds, epoch, position = self.dataset, draws[0].epoch, draws[0].position
        stages: dict[str, float] = {}
        timed = stages if self.timed else None
        try:
            served, images = ds.reader.serve_clip(self.clips, np.array([d.index for d in draws], np.int64), epoch,
                                                  position, lambda fr: [ds.decode(int(j), epoch, timed) for j in fr])
        except BadImageError as e:
            return [self._bad(d, e, stages if k == 0 else {}) for k, d in enumerate(draws)]
        out = []
        for k, (d, j, img) in enumerate(zip(draws, served, images)):
            image, label, meta, params, *targets = ds.augment_served(d, int(j), img, timed, self.targets, True)
            note = plain_params(params) if self.with_params else None
            out.append((image, label, np.append(meta, d.epoch), note, stages if k == 0 else {}, *targets))
        return out

    def _bad(self, draw: Draw, error: BadImageError, stages: dict) -> tuple:
        """A bad draw's sample: blank, served ``SERVED_BAD``, with the error's fields for the loader."""
        spec = self.dataset.spec
        blank = np.zeros((1 if spec.color == "gray" else 3, spec.height, spec.width),
                         np.uint16 if spec.batch_bits == 16 else np.uint8)
        targets = ({"mask": np.zeros((1, *blank.shape[1:]), np.uint8), "boxes": np.zeros((0, 4), np.float32),
                    "box_labels": np.zeros(0, np.int64), "dropped": 0},) if self.targets else ()
        return (blank, -1, np.array([draw.index, SERVED_BAD, draw.position, draw.epoch], np.int64),
                BadDraw.from_error(error), stages, *targets)

    def __getitem__(self, draw: Draw):
        return self._sample(draw)

    def _sample(self, draw: Draw, defer_mask: bool = False):
        """One draw's sample (:meth:`__getitem__`); ``defer_mask``: its mask left for the batch's
        :meth:`~fallback.dataset.ImageDataset.finish_masks`."""
        self._trim()  # keep worker RSS flat (full-resolution temporaries)
        stages: dict[str, float] = {}  # seconds per stage, for the loader's telemetry
        try:
            image, label, meta, params, *targets = self.dataset.load_draw_with_params(
                draw, self.on_error, stages if self.timed else None, self.targets, defer_mask)
            note = plain_params(params) if self.with_params else None
            return (image, label, np.append(meta, draw.epoch), note, stages, *targets)
        except BadImageError as e:
            return self._bad(draw, e, stages)


def pad_images(images: list[np.ndarray], multiple: int, fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``[B, C, H, W]`` with each image at the top left and ``fill`` elsewhere, ``H`` and ``W`` the largest
    height and width rounded up to a multiple of ``multiple``; and the valid sizes ``[B, 2]``."""
    sizes = np.array([im.shape[1:] for im in images], dtype=np.int64).reshape(-1, 2)
    h, w = (-(-sizes.max(axis=0) // multiple) * multiple).tolist() if len(images) else (0, 0)
    out = np.full((len(images), images[0].shape[0] if images else 1, h, w), fill,
                  dtype=images[0].dtype if images else np.uint8)
    for k, im in enumerate(images):
        out[k, :, :im.shape[1], :im.shape[2]] = im
    return out, sizes


def collate_uint8(samples: list[tuple], pad: int | None = None, fill_mask: int = 0) -> tuple:
    """A batch of :class:`Uint8Samples` samples: ``(images [B, C, H, W] uint8, labels [B] int64, served rows
    [B, 4], notes, stages summed, valid sizes or None, targets or None)``; ``pad``: the spec's ``pad_batch``,
    ``fill_mask``: the dataset's class id for padded mask pixels."""
    if pad is not None:  # variable-size outputs: padded to the batch's largest, with the valid sizes
        padded, sizes = pad_images([s[0] for s in samples], pad)  # a bad draw's blank is 1 x 1
        images = torch.from_numpy(padded)
    else:
        images, sizes = torch.from_numpy(np.stack([s[0] for s in samples])), None
    labels = torch.tensor([s[1] for s in samples], dtype=torch.int64)
    stages: dict[str, float] = {}
    for s in samples:
        for k, v in s[4].items():
            stages[k] = stages.get(k, 0.0) + v
    targets = collate_targets([s[5] for s in samples], pad, fill_mask) if len(samples) and len(samples[0]) > 5 else None
    return images, labels, np.stack([s[2] for s in samples]), [s[3] for s in samples], stages, sizes, targets


def collate_targets(per_sample: list[dict], pad: int | None, fill_mask: int = 0) -> dict:
    """A batch's targets (fields of :class:`~dali_backend.core.boundary.Batch`): masks ``[B, 1, H, W]``
    uint8 (padded as the images are, with ``pad``, by ``fill_mask``), the boxes and their labels as one array
    each plus the per-image counts (:func:`split_boxes` makes the lists of ``[N_i, 4]`` float32 and ``[N_i]``
    int64 tensors), and the boxes the policy dropped, summed."""
    out: dict = {"dropped": int(sum(t["dropped"] for t in per_sample))}
    if per_sample[0]["mask"] is not None:
        masks = [t["mask"] for t in per_sample]
        out["masks"] = torch.from_numpy(pad_images(masks, pad, fill_mask)[0] if pad is not None else np.stack(masks))
    if per_sample[0]["boxes"] is not None:  # one array and the counts: 2 B small tensors cost 2 B shared segments
        out["boxes"] = PackedBoxes(np.concatenate([np.asarray(t["boxes"], np.float32).reshape(-1, 4) for t in per_sample]),
                                   np.concatenate([np.asarray(t["box_labels"], np.int64).reshape(-1) for t in per_sample]),
                                   [len(t["box_labels"]) for t in per_sample])
    return out


class PackedBoxes(NamedTuple):
    """A batch's boxes as :func:`collate_targets` packs them: one ``[N, 4]`` float32 array of XYXY rows, one
    ``[N]`` int64 array of labels, and the boxes per image; :func:`split_boxes` gives the per-image tensors."""

    xyxy: np.ndarray | torch.Tensor
    labels: np.ndarray | torch.Tensor
    counts: list[int]

    def pin_memory(self, device=None) -> PackedBoxes:
        """The two arrays as page-locked tensors: torch's pin-memory thread calls this under
        ``pin_memory=True`` (a plain tuple of arrays stayed pageable), and the per-image boxes
        :func:`split_boxes` makes are views of them, so pinned too."""
        return PackedBoxes(torch.as_tensor(self.xyxy).pin_memory(), torch.as_tensor(self.labels).pin_memory(),
                           self.counts)


def pin_targets(targets: dict | None) -> dict | None:
    """:func:`collate_targets`' fields in page-locked memory (the masks tensor and the packed boxes), for an
    executor that pins its batches itself (the thread pool; torch's DataLoader pins them by the same calls)."""
    if targets is None:
        return None
    return {k: v.pin_memory() if isinstance(v, (torch.Tensor, PackedBoxes)) else v for k, v in targets.items()}


def split_boxes(targets: dict | None) -> dict | None:
    """:func:`collate_targets`' fields as :class:`~dali_backend.core.boundary.Batch` takes them, in the training
    process: the batch's boxes as one array each for boxes and labels (pickled with the batch, where a
    tensor per image would cross as its own shared-memory segment) split into per-image tensors, views of
    one buffer each."""
    if targets is None or "boxes" not in targets or not isinstance(targets["boxes"], tuple):
        return targets
    xyxy, labels, counts = targets["boxes"]  # arrays, or tensors where pinned (PackedBoxes.pin_memory)
    return {**targets, "boxes": list(torch.as_tensor(xyxy).split(counts)),
            "box_labels": list(torch.as_tensor(labels).split(counts))}


def batch_of(collated: tuple, with_params: bool, in_flight: int) -> Batch:
    """The :class:`~dali_backend.core.boundary.Batch` of a :func:`collate_uint8` result (the params only
    when asked for and no draw of the batch was bad)."""
    images, labels, meta, notes, stages, sizes, targets = collated
    bad = tuple(n for n in notes if isinstance(n, BadDraw))
    params = None if bad or not with_params else notes
    return Batch(images=images, labels=labels, planned=meta[:, Served.PLANNED], served=meta[:, Served.SERVED],
                 positions=meta[:, Served.POSITION], epochs=meta[:, Served.EPOCH], params=params, bad=bad,
                 stages=stages, in_flight=in_flight, sizes=sizes, **(split_boxes(targets) or {}))
