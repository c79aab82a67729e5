"""The executor boundary: what the facade asks an executor to run, and what comes back.

The facade (:mod:`dali_backend.facade.loader`) plans each pass; an executor (:mod:`dali_backend.dali` on
DALI, :mod:`fallback.executor` on OpenCV) turns planned draws into uint8 pixels. Only these records
cross between them:

- **planned rows**: an int64 array ``[n, PLAN_WIDTH]`` whose columns are :class:`Plan` (sample
  index, epoch, position in the epoch's global draw, :class:`Kind`); one row per draw, in order.
- a :class:`Batch` per batch: the pixels and labels, which draw each sample is (planned and served
  sample, position, epoch), the per-operation parameters each draw was augmented with, exactly as
  the executor drew them (when the facade asked for them: ``return_meta``), and the bad draws.
- the :class:`SampleSet` an executor runs on: the index, its reader, the augmentation spec and the
  seed (what the user's ``ImageDataset`` carries; ``ImageDataset.samples`` gives it).
- a :class:`BadDraw` per draw whose file failed its checks under ``on_error="raise"``: the fields of
  :class:`~dali_backend.errors.BadImageError`, carried from the process that read the file.

So the facade never re-reads a file or draws parameters again, and an executor is anything with
:class:`Executor`'s methods.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import BadImageError, ExecutorFailed

if TYPE_CHECKING:
    import torch

    from ..core.augment import AugmentSpec
    from ..core.reading import SampleReader
    from ..index import SampleIndex


class Kind(IntEnum):
    """What a planned row is: a real draw, or padding (fills the last partial batch on DALI; thrown away)."""

    DRAW = 0
    PAD = 1


class Plan(IntEnum):
    """The columns of a planned row."""

    INDEX = 0
    EPOCH = 1
    POSITION = 2
    KIND = 3


PLAN_WIDTH = len(Plan)


class Served(IntEnum):
    """The columns of a served sample's row, as an executor's workers return it (the :class:`Batch`
    fields ``planned``, ``served``, ``positions`` and ``epochs``, in this order)."""

    PLANNED = 0
    SERVED = 1
    POSITION = 2
    EPOCH = 3


def planned_rows(draws: np.ndarray) -> np.ndarray:
    """``[n, 3]`` (index, epoch, position) draws as planned rows of kind :attr:`Kind.DRAW`."""
    draws = np.asarray(draws, dtype=np.int64).reshape(-1, 3)
    return np.concatenate([draws, np.full((len(draws), 1), Kind.DRAW, np.int64)], axis=1)


def padding_rows(n: int) -> np.ndarray:
    """``n`` planned rows of kind :attr:`Kind.PAD` (sample 0, epoch 0, position 0: never yielded)."""
    rows = np.zeros((n, PLAN_WIDTH), dtype=np.int64)
    rows[:, Plan.KIND] = Kind.PAD
    return rows


@dataclass(frozen=True, kw_only=True)
class SampleSet:
    """What an executor runs on: the samples (``index``), how each is read (``reader``: checks,
    ``on_error`` replacements, caches), the augmentation (``spec``) and its seed.

    The contract's record of a data set, so that no executor depends on another one's class: the
    user's :class:`~fallback.dataset.ImageDataset` builds one (``dataset.samples``), the DALI executor
    runs on it, and the torch executor runs on the dataset that holds it."""

    index: SampleIndex
    reader: SampleReader
    spec: AugmentSpec
    seed: int
    box_policy: Any = None  # which moved boxes a draw keeps (an index with targets; None: BoxPolicy())
    fill_mask: int = 0  # a mask's class id where its image is padded or warped in from outside


Params = list  # one draw's parameters: one dict per operation of ``spec.transforms``, in order


def plain_params(params: Sequence[dict]) -> Params:
    """A draw's parameters (``spec.make_params``) as plain Python values (lists, floats, ints, bools):
    what crosses a process boundary as JSON and what ``return_meta`` shows."""
    return [{k: np.asarray(v).tolist() for k, v in p.items()} for p in params]


@dataclass(frozen=True)
class BadDraw:
    """A draw whose file failed its checks (the fields of :class:`BadImageError`)."""

    path: str
    index: int
    label: int
    epoch: int
    reason: str

    @classmethod
    def from_error(cls, error: BadImageError) -> BadDraw:
        return cls(str(error.path), int(error.index), int(error.label), int(error.epoch), str(error.reason))

    def error(self) -> BadImageError:
        return BadImageError(self.path, self.index, self.label, self.epoch, self.reason)

    def to_json(self, limit: int) -> bytes:
        """The fields as UTF-8 JSON of at most ``limit`` bytes (>= 256): a reason too long for it is
        shortened; a path too long for it is left empty (the receiver takes it from the index)."""
        fields = {"path": self.path, "index": self.index, "label": self.label, "epoch": self.epoch, "reason": self.reason}
        keep = len(self.reason)
        while True:
            data = json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogateescape")
            if len(data) <= limit or keep == 0:
                break
            keep = keep * 3 // 4
            fields["reason"] = self.reason[:keep] + "..." if keep else ""
        if len(data) > limit:  # a path too long for the note: the receiver names the file from the index
            fields["path"] = ""
            data = json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogateescape")
        return data

    @classmethod
    def from_json(cls, data: bytes) -> BadDraw:
        f = json.loads(data.decode("utf-8", "surrogateescape"))
        return cls(f["path"], f["index"], f["label"], f["epoch"], f["reason"])


@dataclass(frozen=True, eq=False, kw_only=True)
class Batch:
    """What an executor yields per batch (only draws of kind :attr:`Kind.DRAW`; padding removed).

    Built by keyword only (``Batch(images=..., labels=..., planned=...)``): its fields are named once,
    here, for both executors and the facade.

    Attributes:
        images: uint8 ``[B, C, H, W]`` (C = 1 in gray mode; uint16 where ``spec.batch_bits`` is 16),
            augmented, not yet normalised; on the executor's ``device``.
        labels: int64 ``[B]``, the served samples' labels, on the same device.
        planned, served, positions, epochs: int64 ``[B]`` numpy arrays: the sample drawn, the sample
            served (differs where ``on_error="skip"`` replaced a bad file), the draw's position in the
            epoch's global draw, its epoch.
        params: each draw's parameters (:data:`Params`, plain values) when the executor was asked
            for them, else None.
        bad: the draws of this batch whose files were bad under ``on_error="raise"`` (their pixels
            and labels are placeholders): the facade raises the first one's error.
        stages: seconds spent per stage on this batch's images, summed over them, where the
            executor measured it (``"read"``, ``"decode"``, ``"augment"``, or ``"decode+augment"``
            where one engine does both): the loader's telemetry.
        in_flight: batches the executor holds in progress or ready beyond this one.
        sizes: int64 ``[B, 2]`` numpy, each image's valid (height, width) at the top left of
            ``images``, where the spec pads variable-size batches (``pad_batch``); else None.
        masks: uint8 ``[B, 1, H, W]`` class ids moved with the images (padded as they are), where the
            index carries masks; else None.
        boxes, box_labels: per image a float32 ``[N_i, 4]`` (XYXY pixels of the output) and an int64
            ``[N_i]`` CPU tensor, where the index carries boxes; else None.
        dropped: boxes the box policy dropped in this batch (clipped below its area or visibility).
    """

    images: torch.Tensor
    labels: torch.Tensor
    planned: np.ndarray
    served: np.ndarray
    positions: np.ndarray
    epochs: np.ndarray
    params: list[Params] | None = None
    bad: tuple[BadDraw, ...] = ()
    stages: dict[str, float] = field(default_factory=dict)
    in_flight: int = 0
    sizes: np.ndarray | None = None
    masks: torch.Tensor | None = None
    boxes: list | None = None
    box_labels: list | None = None
    dropped: int = 0


class Executor(Protocol):
    """What the facade needs of an executor."""

    device: Any  # torch.device of the images it yields

    def run(self, rows: np.ndarray, key: tuple | None,
            plan_next: Callable[[int], np.ndarray] | None) -> Iterator[Batch]:
        """Batches of planned ``rows`` (``[n, PLAN_WIDTH]``, cut into batches of the loader's size).

        ``key`` names the pass (``(plan id, epoch, first batch)``) when ``plan_next(epoch)`` can plan
        the next epoch ahead (pure samplers); an executor may use it to prefetch across passes.
        Raises :class:`ExecutorFailed` for a failure :meth:`recover` can repair.
        """
        ...

    def recover(self, failure: ExecutorFailed) -> None:
        """Repair what raised ``failure`` (or raise the user-facing error); the facade then resumes
        the pass at the batch that failed."""
        ...

    def abandon(self) -> None:
        """A pass ended early with an error: release what that pass held."""
        ...

    def close(self) -> None:
        """Release everything; a thread waiting in :meth:`run` raises ``LoaderClosedError``."""
        ...

    def worker_pids(self) -> list[int]:
        """The pids of the executor's worker processes now (for CPU and memory telemetry)."""
        ...
