"""``ImageDataset``: the shared contract executed on the CPU with OpenCV, one sample at a time.

Accepts the sampler's :class:`~dali_backend.sampling.sampler.Draw` records (augmentation parameters from the
draw's epoch and position) and plain integer indices (parameters from the dataset's own epoch, set
with :meth:`ImageDataset.set_epoch`, and the index). Safe in forked workers: OpenCV's thread pool is
switched off in each worker (``cv2.setNumThreads(0)``; ``1`` can deadlock after a fork: measured) and
nothing touches CUDA.
"""

from __future__ import annotations

import inspect
import os
import time
from typing import NamedTuple

import cv2
import numpy as np
import torch
from numpy.typing import NDArray
from torch.utils.data import Dataset, get_worker_info

from dali_backend.core.augment import AugmentSpec, AugParams, draw_params
from dali_backend.core.boundary import SampleSet
from dali_backend.core.colour import warn_if_colour_dropped
from dali_backend.core.depth import check_served
from dali_backend.errors import BadImageError, ConfigError
from dali_backend.index import SampleIndex
from dali_backend.core.tensors import apply_batch_ops, batch_params
from dali_backend.core.reading import OnError, SampleReader, check_on_error
from dali_backend.sampling.sampler import as_draw, check_epoch
from dali_backend.transforms.targets import BoxPolicy, Boxes, move_masks, move_targets

from . import ops

_configured_pid: int | None = None


def _configure_worker() -> None:
    """Once per process: no OpenCV thread pool inside DataLoader workers (processes already run in parallel)."""
    global _configured_pid
    pid = os.getpid()
    if _configured_pid != pid:
        _configured_pid = pid
        if get_worker_info() is not None:
            cv2.setNumThreads(0)


def resolve_item(item, default_epoch: int) -> tuple[int, int | None, int, int]:
    """``(sample index, epoch or None, epoch used for parameters, position)`` of a Draw or an int.

    The draw is :func:`dali_backend.sampling.sampler.as_draw`'s, the rule every loader uses (an int ``i`` is
    drawn at position ``i`` of the dataset's epoch); ``None`` marks a plain int for error messages.
    """
    draw = as_draw(item, default_epoch)
    plain = not (hasattr(item, "position") and hasattr(item, "epoch"))
    return draw.index, None if plain else draw.epoch, draw.epoch, draw.position


_SPEC_HOW = ("ImageDataset(index, AugmentSpec(ops=[...])) with operations of dali_backend.transforms, or "
             "ImageDataset(index, AugmentSpec.from_torchvision(compose)) to translate a torchvision Compose")


def _unexpected_arguments(given: dict) -> str:
    """The ConfigError text for keyword arguments ``ImageDataset`` does not take (torchvision's among them)."""
    import difflib

    names = sorted(given)
    if "transform" in given or "transforms" in given:
        name = "transform" if "transform" in given else "transforms"
        return (f"ImageDataset: {name}= is torchvision's argument; here the augmentation is the spec, which both "
                f"backends run with the same parameters: {_SPEC_HOW}")
    if "target_transform" in given:
        return ("ImageDataset: target_transform= is not supported: labels are the index's class ids "
                "(index.classes names them); remap them in your training step, or on every batch with "
                "DaliLoader(..., batch_transform=fn(images, labels))")
    arguments = ("index", *_options())
    close = {n: difflib.get_close_matches(n, arguments, n=1) for n in names}
    said = ", ".join(f"{n}=" + (f" (did you mean {close[n][0]}=?)" if close[n] else "") for n in names)
    return (f"ImageDataset got unexpected argument{'s' if len(names) != 1 else ''} {said}; its arguments are "
            f"{', '.join(arguments)}")


def _options() -> tuple[str, ...]:
    """The arguments of :class:`ImageDataset` but ``index``, read from its signature (a new argument is
    kept across ``update_index`` without a list to update)."""
    params = inspect.signature(ImageDataset.__init__).parameters.values()
    return tuple(p.name for p in params if p.name not in ("self", "index") and p.kind == p.POSITIONAL_OR_KEYWORD)


class UnmovedMask(NamedTuple):
    """A sample's mask read and checked, waiting for :meth:`ImageDataset.finish_masks` to move it with
    ``params`` (its image's draw) beside the rest of its batch."""

    mask: NDArray[np.uint8]
    params: list[dict]


class ImageDataset(Dataset):
    """A torch Dataset over a :class:`SampleIndex` that applies an :class:`AugmentSpec`.

    Args:
        index: the samples.
        spec: the augmentation (default ``AugmentSpec()``: gray, CLAHE, 256x256, light jitter).
        seed: augmentation seed (parameters are a pure function of seed, epoch and position).
        on_error: ``"raise"`` (default) or ``"skip"``: replace a bad file by another sample of its
            class, chosen deterministically (see :mod:`dali_backend.core.reading`).
        cache: hold every file's encoded bytes in shared memory (costs the data set's size on disk
            in RAM, once for all workers and both backends; see ``EncodedCache``).
        cache_dir: a folder on local disk caching every sample read (for an ``s3://`` index or a slow
            NAS): entries keyed by (URL, ETag, size), written atomically, verified on read, shared by
            all workers and runs; see :mod:`dali_backend.storage.cache`.
        cache_limit_bytes: bound on ``cache_dir``'s size (least recently used entries go first;
            default None: no bound).
        box_policy: which moved boxes a sample keeps (an index with targets; default
            ``BoxPolicy()``: at least 1 pixel of area).
        fill_mask: the class id a mask gets where its image is padded or warped in from outside
            (letterbox bands, crop padding, a rotation's corners, ``pad_batch``), on both backends:
            0 (default, background) or an ignore id such as 255 for ``CrossEntropyLoss(ignore_index=255)``
            (albumentations' ``fill_mask``, torchvision v2's ``fill={tv_tensors.Mask: 255}``).

    ``ds[i]`` returns ``(image, label)``: float32 ``[3, H, W]`` (the spec's dtype) and an int64 scalar
    tensor. Bad files raise :class:`BadImageError` naming the file; nothing is replaced silently.
    """

    def __init__(self, index: SampleIndex, spec: AugmentSpec | None = None, seed: int = 0, on_error: OnError = "raise",
                 cache: bool = False, cache_dir: str | os.PathLike | None = None,
                 cache_limit_bytes: int | None = None, box_policy: BoxPolicy | None = None, fill_mask: int = 0,
                 **unexpected):
        if unexpected:
            raise ConfigError(_unexpected_arguments(unexpected))
        if not isinstance(index, SampleIndex):
            raise ConfigError(f"ImageDataset: index must be a SampleIndex, got {type(index).__name__}; "
                              "build one with SampleIndex.from_folder(root)")
        if spec is None:
            spec = AugmentSpec()
        if not isinstance(spec, AugmentSpec):
            torchvision = type(spec).__module__.split(".")[0] == "torchvision"
            hint = ("a torchvision transform: translate it with AugmentSpec.from_torchvision(compose)" if torchvision
                    else "pass AugmentSpec(size=...) (the preset), AugmentSpec(ops=[...]) with operations of "
                         "dali_backend.transforms, or AugmentSpec.from_torchvision(compose)")
            raise ConfigError(f"ImageDataset: spec must be an AugmentSpec, got {type(spec).__name__} ({hint})")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ConfigError(f"ImageDataset: seed={seed!r}; must be a non-negative integer")
        self.index, self.spec, self.seed, self.epoch = index, spec, int(seed), 0
        if box_policy is not None and not isinstance(box_policy, BoxPolicy):
            raise ConfigError(f"ImageDataset: box_policy must be a BoxPolicy, got {type(box_policy).__name__}")
        self.box_policy = box_policy or BoxPolicy()
        if isinstance(fill_mask, bool) or not isinstance(fill_mask, (int, np.integer)) or not 0 <= fill_mask <= 255:
            raise ConfigError(f"ImageDataset: fill_mask={fill_mask!r}; give a uint8 class id in [0, 255] (0: "
                              "background, or an ignore id such as 255)")
        self.fill_mask = int(fill_mask)
        self.on_error = check_on_error(on_error)
        self.options = {name: value for name, value in locals().items() if name in _options()}
        warn_if_colour_dropped(index, spec)  # the preset's default gray on colour files: said once per index
        self.reader = SampleReader.for_index(index, self.seed, cache=cache, cache_dir=cache_dir,
                                             cache_limit_bytes=cache_limit_bytes)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def samples(self) -> SampleSet:
        """This dataset as the contract's record an executor runs on (index, reader, spec, seed)."""
        return SampleSet(index=self.index, reader=self.reader, spec=self.spec, seed=self.seed,
                         box_policy=self.box_policy, fill_mask=self.fill_mask)

    def with_index(self, index: SampleIndex) -> ImageDataset:
        """A dataset over ``index`` with every other argument this one was given (``options``: each
        argument of the signature but ``index``), for a loader's ``update_index``."""
        return type(self)(index, **self.options)

    def set_epoch(self, epoch: int) -> None:
        """Epoch used for the parameters of plain integer indices (Draws carry their own)."""
        self.epoch = check_epoch(epoch)

    def params(self, item) -> AugParams:
        """The augmentation parameters ``item`` (a Draw or an int) gets."""
        _, _, epoch, position = resolve_item(item, self.epoch)
        return draw_params(self.spec, self.seed, epoch, position)

    def decode(self, i: int, epoch: int | None = None, stages: dict | None = None) -> NDArray[np.uint8]:
        """Checked, decoded image of sample ``i`` (gray HxW or RGB HxWx3), before any augmentation.

        ``stages``: seconds spent reading and decoding are added to its ``"read"`` and ``"decode"``."""
        t0 = time.perf_counter()
        data = self.reader.read(i, epoch)
        t1 = time.perf_counter()
        check_served(self.spec, data, self.reader.path(i))  # 16-bit data under an 8-bit spec: refused
        img = ops.decode(data, self.spec.color, self.spec.bit_depth)
        if stages is not None:
            stages["read"] = stages.get("read", 0.0) + (t1 - t0)
            stages["decode"] = stages.get("decode", 0.0) + (time.perf_counter() - t1)
        if img is None or img.size == 0:
            raise BadImageError(self.reader.path(i), i, int(self.index.labels[i]), epoch,
                                "OpenCV could not decode it (corrupt JPEG data)")
        return img

    def load_draw(self, item, on_error: OnError | None = None) -> tuple[NDArray[np.uint8], int, NDArray[np.int64]]:
        """``(uint8 [C, H, W], label, [planned index, served index, position])``, not yet normalised.

        C = 1 in gray mode. The served index differs from the planned one only when ``skip``
        replaced a bad file; the label is always the served sample's.
        """
        image, label, meta, _ = self.load_draw_with_params(item, on_error)
        return image, label, meta

    def load_draw_with_params(self, item, on_error: OnError | None = None, stages: dict | None = None,
                              targets: bool = False, defer_mask: bool = False):
        """:meth:`load_draw` and the parameters the draw was augmented with (``spec.make_params``);
        ``targets``, ``defer_mask``: as :meth:`augment_served`'s.

        ``stages``: seconds spent reading, decoding and augmenting are added to its ``"read"``,
        ``"decode"`` and ``"augment"`` (the loader's telemetry)."""
        _configure_worker()
        i, epoch, pepoch, position = resolve_item(item, self.epoch)
        if not 0 <= i < len(self.index):
            raise IndexError(f"sample index {i} out of range for {len(self.index)} samples")
        served, img = self.reader.serve(i, pepoch, position, on_error or self.on_error,
                                        lambda j: self.decode(j, epoch, stages))
        return self.augment_served(item, served, img, stages, targets, defer_mask)

    def augment_served(self, item, served: int, img: NDArray[np.uint8], stages: dict | None = None,
                       targets: bool = False, defer_mask: bool = False):
        """:meth:`load_draw_with_params` of ``item`` once sample ``served`` was read and decoded as
        ``img`` (the planned sample, or its replacement under ``on_error="skip"``); ``targets``: also
        the served sample's targets moved with the same parameters (:meth:`move_targets`, ``defer_mask``
        passed on), a 5th item."""
        i, _, pepoch, position = resolve_item(item, self.epoch)
        t0 = time.perf_counter()
        params = self.spec.make_params(self.seed, pepoch, position, img.shape[:2])
        out = ops.apply_spec(img, self.spec, params)
        if stages is not None:
            stages["augment"] = stages.get("augment", 0.0) + (time.perf_counter() - t0)
        done = out, int(self.index.labels[served]), np.array([i, served, position], dtype=np.int64), params
        return done + (self.move_targets(served, params, img.shape[:2], defer_mask),) if targets else done

    def move_targets(self, served: int, params: list[dict], size: tuple[int, int], defer_mask: bool = False) -> dict:
        """Sample ``served``'s targets (the index's :attr:`~dali_backend.index.SampleIndex.annotations`) moved
        by the operations' mask and box kernels with the image's ``params`` (drawn for ``size``, the
        decoded (h, w)): ``{"mask": uint8 [1, H, W] or None, "boxes": float32 [N, 4], "box_labels":
        int64 [N], "dropped": int}`` (boxes None when the index has none). ``defer_mask``: the mask is
        read and checked here but moved by :meth:`finish_masks`, with the rest of its batch."""
        t = self.index.annotations
        mask = t.read_mask(self.reader, served, size) if "masks" in t.kinds else None
        boxes = None
        if "boxes" in t.kinds:
            boxes = Boxes.of_index(*t.boxes_of(served), size)
        served_mask = None  # [1, H, W] moved here, or an UnmovedMask that finish_masks moves with its batch's
        if defer_mask and mask is not None:
            served_mask, mask = UnmovedMask(mask, params), None
        mask, boxes, dropped = move_targets(self.spec.transforms, params, mask, boxes, self.box_policy, self.fill_mask)
        if mask is not None:
            served_mask = np.ascontiguousarray(mask)[None]
        return {"mask": served_mask,
                "boxes": None if boxes is None else boxes.xyxy, "box_labels": None if boxes is None else boxes.labels,
                "dropped": dropped.total}

    def finish_masks(self, targets: list[dict]) -> None:
        """The masks :meth:`move_targets` deferred (``defer_mask``) in ``targets`` (a batch's), moved in
        place: one :func:`~dali_backend.transforms.targets.move_masks` call for them all, the class ids of
        one by one at a lower cost (the warps' source indices share loops)."""
        pending = [t for t in targets if isinstance(t.get("mask"), UnmovedMask)]
        moved = move_masks([(self.spec.transforms, t["mask"].params, t["mask"].mask) for t in pending], self.fill_mask)
        for t, mask in zip(pending, moved):
            t["mask"] = np.ascontiguousarray(mask)[None]

    def load_uint8(self, item) -> tuple[NDArray[np.uint8], int]:
        """``(uint8 [C, H, W], label)`` with C = 1 in gray mode: augmented, not yet normalised."""
        img, label, _ = self.load_draw(item)
        return img, label

    def __getitem__(self, item) -> tuple[torch.Tensor, torch.Tensor]:
        img, label = self.load_uint8(item)
        out = ops.normalize(torch.from_numpy(img), self.spec)
        if self.spec.batch_ops:  # RandomErasing: the same code the loaders run on their batches
            _, _, epoch, position = resolve_item(item, self.epoch)
            out = apply_batch_ops(out[None], self.spec, batch_params(self.spec, self.seed, [epoch], [position]))[0]
        return out, torch.tensor(label, dtype=torch.int64)

    def __repr__(self) -> str:
        return f"ImageDataset(n={len(self)}, spec={self.spec}, seed={self.seed}, on_error={self.on_error!r})"
