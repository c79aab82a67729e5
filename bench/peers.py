"""The peers of ``python -m bench --peers``: what a user would write instead of this library.

Each peer runs the default contract (gray decode, CLAHE, resize, rotation, brightness/contrast, in
the order of ``AugmentSpec(size=...).transforms``; then replicated to 3 channels and normalised per
batch) on the draws of the library's :class:`~dali_backend.WeightedSampler` (the fallback contender's
sampler, :func:`bench.contenders.contract_sampler`) with the parameters the contract draws for them
(``spec.make_params``), so that every peer's output can be set against the fallback's:

* ``opencv-loader``: a torch ``DataLoader`` over a Dataset of hand-written OpenCV calls
  (``cv2.imdecode`` gray, ``createCLAHE``, ``cv2.resize(INTER_AREA)``, ``warpAffine`` bilinear,
  a brightness/contrast table), ``--workers`` worker processes.
* ``albumentations``: the same DataLoader with albumentations' transforms (``CLAHE``,
  ``Resize(INTER_AREA)``, ``Rotate``, ``RandomBrightnessContrast``), each applied with the draw's
  parameters through its ``apply`` (``Compose``'s own random draws replaced by the sampler's).
* ``spdl-threads``: an SPDL thread pipeline (``PipelineBuilder``: the same per-sample function on
  ``--workers`` threads, in order, batched, collated on a thread).
* ``torchdata-nodes``: a ``torchdata.nodes`` thread pipeline (``ParallelMapper(method="thread")``,
  ``Batcher``, ``Mapper``, ``Prefetcher``).
* ``dali-native``: a native DALI pipeline on CPU operators, fed by ``fn.external_source`` (the draws'
  file bytes and parameters, one batch at a time): ``decoders.image(GRAY)``, ``fn.clahe``,
  ``fn.resize`` (antialiased), ``fn.rotate``, ``fn.brightness_contrast``, ``crop_mirror_normalize``.

The trade-off: the peers are written as a careful user would (OpenCV's thread pool off in workers and
threads, one CLAHE object per thread, per-batch normalisation) but not tuned further; their resize is
OpenCV's ``INTER_AREA`` (or DALI's), not the contract's exact triangle filter, so their pixels are
within about a level of the fallback's, not equal (:func:`bench.contenders.levels_difference` measures it).
A peer whose package is missing is skipped (:func:`missing`), with the install hint.
"""

from __future__ import annotations

import importlib
import threading

import cv2
import numpy as np
import torch

PEER_PACKAGES = {"opencv-loader": (), "albumentations": ("albumentations",), "spdl-threads": ("spdl.pipeline",),
                 "torchdata-nodes": ("torchdata.nodes",), "dali-native": ("nvidia.dali",)}
"""The packages each peer imports beyond torch and OpenCV."""


def missing(name: str) -> str | None:
    """Why peer ``name`` cannot run here (a package it needs does not import), or None."""
    for module in PEER_PACKAGES[name]:
        try:
            importlib.import_module(module)
        except ImportError as e:  # also a package that is installed but broken
            return (f"{module} does not import ({e}); install the peers with pip install 'dali-backend[peers]'")
    return None


class ContractDraws:
    """The parameters the default contract draws for a :class:`~dali_backend.sampling.sampler.Draw`, as
    plain numbers: ``(angle, brightness, contrast)`` (the spec's ``describe_params``)."""

    def __init__(self, spec, seed: int = 0):
        self.spec, self.seed = spec, seed

    def __call__(self, draw, hw: tuple[int, int]) -> tuple[float, float, float]:
        p = self.spec.describe_params(self.spec.make_params(self.seed, draw.epoch, draw.position, hw))
        return p["angle"], p["brightness"], p["contrast"]


def rotation_matrix(angle: float, h: int, w: int) -> np.ndarray:
    """The contract's rotation: ``angle`` degrees counter-clockwise about the pixel-centre of the image."""
    return cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), angle, 1.0)


def jitter_table(b: float, c: float) -> np.ndarray:
    """``b * (128 + c * (x - 128))`` rounded and clipped, for every level ``x``."""
    x = np.arange(256, dtype=np.float32)
    return np.clip(np.rint(b * (128 + c * (x - 128))), 0, 255).astype(np.uint8)


AREA_RESIZE = ("opencv-loader", "albumentations", "spdl-threads", "torchdata-nodes")
"""The peers that resize with OpenCV's ``INTER_AREA`` (the others with the contract's filter)."""


def fallback_dataset(index, spec):
    """The fallback's ``ImageDataset`` the peers are set against (gray on purpose: no colour warning)."""
    import warnings

    from dali_backend import ColorDroppedWarning
    from dali_backend._own import own

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ColorDroppedWarning)
        return own("fallback.dataset").ImageDataset(index, spec, seed=0)


def area_resize_difference(index, spec, draws) -> float:
    """What the resize filter alone moves: mean absolute difference, in levels, between the fallback's
    pixels and the contract's own operations with ``cv2.resize(INTER_AREA)`` in place of its resize,
    on ``draws`` (the bound a peer resizing with ``INTER_AREA`` is held to, plus a level)."""
    ds = fallback_dataset(index, spec)
    h, w = spec.size
    total = 0.0
    for d in draws:
        img = cv2.imdecode(np.fromfile(index.abspath(d.index), dtype=np.uint8), cv2.IMREAD_GRAYSCALE)
        for op, p in zip(spec.transforms, spec.make_params(0, d.epoch, d.position, img.shape[:2])):
            img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA) if type(op).__name__ == "Resize" else op.apply(img, p)
        total += np.abs(img.astype(np.float64) - ds.load_uint8(d)[0][0]).mean()
    return total / len(draws)


class HandWritten:
    """The contract with hand-written OpenCV calls, one sample at a time (thread-safe: one CLAHE per thread)."""

    def __init__(self, index, spec):
        self.paths = [index.abspath(i) for i in range(len(index))]
        self.labels = np.asarray(index.labels)
        self.size, self.draws = spec.size, ContractDraws(spec)
        clahe = next(op for op in spec.transforms if type(op).__name__ == "Clahe")
        self.clahe_args = (float(clahe.clip_limit), tuple(clahe.tiles))
        self._local = threading.local()

    def _clahe(self):
        if getattr(self._local, "clahe", None) is None:
            self._local.clahe = cv2.createCLAHE(*self.clahe_args)
        return self._local.clahe

    def augment(self, img: np.ndarray, draw) -> np.ndarray:
        """CLAHE, resize, rotation, brightness/contrast of the decoded gray ``img``."""
        angle, b, c = self.draws(draw, img.shape[:2])
        h, w = self.size
        img = self._clahe().apply(img)
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
        img = cv2.warpAffine(img, rotation_matrix(angle, h, w), (w, h), flags=cv2.INTER_LINEAR,
                             borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        return cv2.LUT(img, jitter_table(b, c))

    def __call__(self, draw) -> tuple[np.ndarray, int]:
        """``(uint8 HxW, label)`` of one draw."""
        data = np.fromfile(self.paths[draw.index], dtype=np.uint8)
        return self.augment(cv2.imdecode(data, cv2.IMREAD_GRAYSCALE), draw), int(self.labels[draw.index])


class Albumentations(HandWritten):
    """The contract with albumentations' transforms, applied with the draw's parameters."""

    def __init__(self, index, spec):
        super().__init__(index, spec)
        import albumentations as A

        h, w = self.size
        clip, tiles = self.clahe_args
        self.ops = (A.CLAHE(clip_limit=(clip, clip), tile_grid_size=tiles, p=1.0),
                    A.Resize(h, w, interpolation=cv2.INTER_AREA, p=1.0),
                    A.Rotate(limit=5, interpolation=cv2.INTER_LINEAR, border_mode=cv2.BORDER_CONSTANT, fill=0, p=1.0),
                    A.RandomBrightnessContrast(p=1.0))

    def augment(self, img: np.ndarray, draw) -> np.ndarray:
        angle, b, c = self.draws(draw, img.shape[:2])
        clahe, resize, rotate, jitter = self.ops
        h, w = self.size
        img = resize.apply(clahe.apply(img, clip_limit=self.clahe_args[0]))
        img = rotate.apply(img, matrix=np.vstack([rotation_matrix(angle, h, w), [0, 0, 1]]), x_min=-1, x_max=-1,
                           y_min=-1, y_max=-1, shape=img.shape)
        return jitter.apply(img, alpha=b * c, beta=b * 128 * (1 - c))  # b * (128 + c * (x - 128)) in albucore's terms


class Collate:
    """uint8 samples -> the contract's batch: ``[B, 3, H, W]`` float32 ``(x / 255 - mean) / std``, labels int64."""

    def __init__(self, spec):
        scale, shift = spec.normalize_coefficients()
        self.scale = torch.from_numpy(scale)[None, :, None, None]
        self.shift = torch.from_numpy(shift)[None, :, None, None]

    def __call__(self, samples) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.stack([s[0] for s in samples]))[:, None].float()
        return x * self.scale + self.shift, torch.tensor([s[1] for s in samples], dtype=torch.int64)


class _DrawDataset(torch.utils.data.Dataset):
    def __init__(self, work):
        self.work = work

    def __len__(self) -> int:
        return len(self.work.paths)

    def __getitem__(self, draw):
        return self.work(draw)


def _no_cv_threads(_worker: int | None = None) -> None:
    cv2.setNumThreads(0)  # processes or threads already run in parallel


class PeerLoader:
    """An epoch-aware iterable of ``(images, labels)`` batches over ``sampler``'s draws: ``set_epoch``, ``close``."""

    def __init__(self, epoch_batches, sampler, close=None):
        self._batches, self.sampler, self._close = epoch_batches, sampler, close
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sampler.set_epoch(epoch)

    def __iter__(self):
        return iter(self._batches(self.epoch))

    def close(self) -> None:
        if self._close is not None:
            self._close()


def _chunks(items: list, n: int):
    return [items[k:k + n] for k in range(0, len(items), n)]


def peer_loader(name: str, index, spec, sampler, batch_size: int, workers: int) -> PeerLoader:
    """The loader of peer ``name`` on ``index`` for the default contract ``spec``, drawing from ``sampler``."""
    collate = Collate(spec)
    if name in ("opencv-loader", "albumentations"):
        work = (HandWritten if name == "opencv-loader" else Albumentations)(index, spec)
        dl = torch.utils.data.DataLoader(_DrawDataset(work), batch_size=batch_size, sampler=sampler, num_workers=workers,
                                         collate_fn=collate, persistent_workers=workers > 0, worker_init_fn=_no_cv_threads)
        return PeerLoader(lambda epoch: dl, sampler)
    if name == "dali-native":
        return _dali_loader(index, spec, sampler, batch_size, workers)
    _no_cv_threads()
    work = HandWritten(index, spec)
    if name == "spdl-threads":
        from spdl.pipeline import PipelineBuilder

        def batches(epoch):
            pipe = (PipelineBuilder().add_source(sampler.draws(epoch)).pipe(work, concurrency=workers, output_order="input")
                    .aggregate(batch_size).pipe(collate).add_sink(4).build(num_threads=workers + 1))
            with pipe.auto_stop():
                yield from pipe.get_iterator()

        return PeerLoader(batches, sampler)
    import torchdata.nodes as tn

    def batches(epoch):
        node = tn.IterableWrapper(sampler.draws(epoch))
        node = tn.ParallelMapper(node, work, num_workers=workers, in_order=True, method="thread")
        node = tn.Prefetcher(tn.Mapper(tn.Batcher(node, batch_size, drop_last=False), collate), prefetch_factor=2)
        return tn.Loader(node)

    return PeerLoader(batches, sampler)


def _dali_loader(index, spec, sampler, batch_size: int, workers: int) -> PeerLoader:
    """Native DALI on CPU operators, fed the draws' bytes and parameters by an external source.

    The source runs through the epochs in order (0, 1, ...; DALI prefetches across an epoch's end), so
    the epochs must be iterated in that order; each epoch is ``ceil(draws / batch_size)`` runs."""
    from nvidia.dali import fn, pipeline_def, types

    from dali_backend.errors import ConfigError

    draws_of = ContractDraws(spec)
    paths = [index.abspath(i) for i in range(len(index))]
    hw = [(int(h), int(w)) for h, w in zip(index.heights, index.widths)]
    labels = np.asarray(index.labels, dtype=np.int64)
    h, w = spec.size
    clahe = next(op for op in spec.transforms if type(op).__name__ == "Clahe")

    def feed():
        epoch = 0
        while True:
            for chunk in _chunks(sampler.draws(epoch), batch_size):
                p = np.array([draws_of(d, hw[d.index]) for d in chunk], dtype=np.float32)
                yield ([np.fromfile(paths[d.index], dtype=np.uint8) for d in chunk], list(p[:, 0]), list(p[:, 1]),
                       list(p[:, 2]), [labels[d.index] for d in chunk])
            epoch += 1

    @pipeline_def(batch_size=batch_size, num_threads=workers, device_id=None, prefetch_queue_depth=2)
    def graph():
        jpegs, angle, b, c, label = fn.external_source(source=feed, num_outputs=5, batch=True,
                                                       dtype=[types.UINT8, types.FLOAT, types.FLOAT, types.FLOAT, types.INT64])
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.GRAY)
        images = fn.clahe(images, tiles_x=clahe.tiles[0], tiles_y=clahe.tiles[1], clip_limit=float(clahe.clip_limit))
        images = fn.resize(images, size=[h, w], interp_type=types.INTERP_LINEAR, antialias=True)
        images = fn.rotate(images, angle=angle, keep_size=True, fill_value=0.0, interp_type=types.INTERP_LINEAR)
        images = fn.brightness_contrast(images, brightness=b, contrast=c, contrast_center=128.0)
        images = fn.cat(images, images, images, axis=2)  # gray replicated to 3 channels, each normalised on its own
        images = fn.crop_mirror_normalize(images, mean=[255 * m for m in spec.mean], std=[255 * s for s in spec.std],
                                          output_layout="CHW", dtype=types.FLOAT)
        return images, label

    pipe = graph()
    pipe.build()
    expected = [0]

    def batches(epoch):
        if epoch != expected[0]:
            raise ConfigError(f"dali-native: set_epoch({epoch}) but its source is at epoch {expected[0]}; iterate the "
                              "epochs in order, 0, 1, ...")
        expected[0] += 1
        for _ in range(-(-len(sampler) // batch_size)):
            x, y = pipe.run()
            yield torch.from_numpy(np.array(x.as_tensor())), torch.from_numpy(np.array(y.as_tensor()))

    return PeerLoader(batches, sampler)
