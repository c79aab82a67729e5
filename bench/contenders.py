"""The contenders of ``python -m bench``; each runs in its own process (clean memory figures).

* ``ceiling``: decode + CLAHE alone on all cores, no loader: the compute limit of this pipeline.
* ``tutorial``: the Dataset style of the tutorial this project grew from (grayscale + CLAHE, then
  rotation and jitter in float at full resolution, then resize) in a DataLoader with all cores.
* ``fallback``: ``DaliLoader(backend="torch")``, our tuned OpenCV DataLoader.
* ``dali-cpu`` / ``dali-gpu``: ``DaliLoader`` on DALI's CPU or GPU operators.
* ``recipe-*``: the torchvision ImageNet training recipe (RandomResizedCrop + horizontal flip +
  ColorJitter(0.4, 0.4, 0.4) + Normalize, RGB) on the fallback and on DALI (CPU or GPU); on DALI the
  crop's window is decoded alone (region decode).
"""

from __future__ import annotations

import os
import statistics
import time

import cv2
import numpy as np
import torch

from .measure import PeakRss, tree_cpu_seconds, tree_rss_mb

from . import CONTENDERS  # noqa: E402,F401  (the names live in the light package module)


def _ceiling_work(path: str) -> int:
    img = cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_GRAYSCALE)
    return int(_CLAHE.apply(img)[0, 0])


_CLAHE = None


def _ceiling_init() -> None:
    global _CLAHE
    cv2.setNumThreads(0)
    _CLAHE = cv2.createCLAHE(2.0, (8, 8))


class TutorialDataset(torch.utils.data.Dataset):
    """The tutorial's style: every step at full resolution, in float, before the resize."""

    def __init__(self, paths: list[str], labels: np.ndarray, size: tuple[int, int], rotate: float = 5.0):
        self.paths, self.labels, self.size, self.rotate = paths, labels, size, rotate
        self.clahe = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        if self.clahe is None:
            self.clahe = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8))
        img = cv2.imread(self.paths[i], cv2.IMREAD_GRAYSCALE)
        img = self.clahe.apply(img).astype(np.float32)
        h, w = img.shape
        rng = np.random.default_rng(i)
        m = cv2.getRotationMatrix2D((w / 2, h / 2), float(rng.uniform(-self.rotate, self.rotate)), 1.0)
        img = cv2.warpAffine(img, m, (w, h))
        b, c = rng.uniform(0.9, 1.1, size=2)
        img = np.clip(b * (128 + c * (img - 128)), 0, 255)
        img = cv2.resize(img, (self.size[1], self.size[0])) / 255.0
        img = (np.stack([img] * 3) - np.array([0.485, 0.456, 0.406])[:, None, None]) / np.array([0.229, 0.224, 0.225])[:, None, None]
        return torch.from_numpy(img.astype(np.float32)), int(self.labels[i])


def recipe_spec(size: tuple[int, int]):
    """torchvision's ImageNet training recipe as a spec (what ``from_torchvision`` gives for it)."""
    from dali_backend import AugmentSpec
    from dali_backend.augment import IMAGENET_MEAN, IMAGENET_STD
    from dali_backend.transforms import ColorJitter, Normalize, RandomHorizontalFlip, RandomResizedCrop

    return AugmentSpec(ops=[RandomResizedCrop(size), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4),
                            Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def _loader_for(name: str, index, size: tuple[int, int], batch_size: int, workers: int):
    from dali_backend import AugmentSpec, DaliLoader, WeightedSampler
    from dali_backend._own import own

    ImageDataset = own("fallback").ImageDataset

    if name == "tutorial":
        paths = [index.abspath(i) for i in range(len(index))]
        ds = TutorialDataset(paths, index.labels, size)
        return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                           persistent_workers=True)
    if name.startswith("recipe-"):
        name = name[len("recipe-"):]
        ds = ImageDataset(index, recipe_spec(size), seed=0)
    else:
        ds = ImageDataset(index, AugmentSpec(size=size), seed=0)
    sampler = WeightedSampler(index, mode="uniform", seed=0)
    device, backend = {"fallback": ("cpu", "torch"), "dali-cpu": ("cpu", "dali"), "dali-gpu": ("cuda", "dali")}[name]
    return DaliLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers, device=device, backend=backend)


def run_contender(name: str, index_path: str, size: tuple[int, int], epochs: int, batch_size: int,
                  workers: int) -> dict:
    """Warm-up epoch + ``epochs`` timed epochs; images/s is the median of the timed epochs."""
    from dali_backend import SampleIndex

    index = SampleIndex.load(index_path)
    n_images = len(index)
    rates, rss_after = [], []
    first_batch_s = None
    cpu0 = tree_cpu_seconds()
    with PeakRss() as peak:
        t_create = time.perf_counter()
        if name == "ceiling":
            import multiprocessing as mp

            paths = [index.abspath(i) for i in range(n_images)]
            pool = mp.get_context("fork").Pool(workers, initializer=_ceiling_init)
            loader = None
        else:
            loader = _loader_for(name, index, size, batch_size, workers)
        timed_cpu0 = None
        for epoch in range(epochs + 1):
            if epoch == 1:
                timed_cpu0 = tree_cpu_seconds()
            t0 = time.perf_counter()
            n = 0
            if loader is None:
                n = len(pool.map(_ceiling_work, paths, chunksize=4))
            else:
                if hasattr(loader, "set_epoch"):
                    loader.set_epoch(epoch)
                for x, y in loader:
                    if first_batch_s is None:
                        first_batch_s = time.perf_counter() - t_create
                    n += len(y)
                if name == "dali-gpu":
                    torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if epoch > 0:
                rates.append(n / dt)
            rss_after.append(tree_rss_mb())
        timed_cpu = tree_cpu_seconds() - timed_cpu0
        if loader is None:
            pool.close()
            pool.join()
        elif hasattr(loader, "close"):
            loader.close()
    growth = (rss_after[-1] - rss_after[0]) / rss_after[0] * 100 if len(rss_after) > 1 else 0.0
    return {
        "name": name,
        "images_per_s": statistics.median(rates),
        "epoch_images_per_s": rates,
        "cpu_s_per_image": timed_cpu / (n_images * epochs),
        "peak_rss_mb": peak.peak,
        "first_batch_s": first_batch_s,
        "rss_growth_pct": growth,
        "total_cpu_s": tree_cpu_seconds() - cpu0,
        "workers": workers,
        "batch_size": batch_size,
    }
