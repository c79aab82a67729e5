"""``FallbackLoader``: the loader on its CPU executor, whatever the machine has.

It is :class:`dali_backend.loader.DaliLoader` with ``backend="torch"``: one facade (arguments,
passes and epochs, accounting, resumption, errors, normalisation) over the OpenCV executor
(:mod:`fallback.executor`), which moves uint8 through DataLoader worker IPC. Its outputs equal
``ImageDataset.__getitem__``'s exactly (same ops, same normalise function). Kept for code that
names the CPU path explicitly; ``DaliLoader`` chooses it by itself on machines without DALI or CUDA.
"""

from __future__ import annotations

from dali_backend.errors import ConfigError
from dali_backend.loader import DaliLoader
from dali_backend.sampler import default_sampler  # noqa: F401  (re-exported for older imports)

from .dataset import ImageDataset


class FallbackLoader(DaliLoader):
    """DataLoader-compatible iterable yielding ``(images [B, 3, H, W], labels [B] int64)`` on the CPU.

    Args are ``DaliLoader``'s (``DataLoader``'s), without ``device``/``backend``; ``seed`` seeds the
    default sampler.
    """

    def __init__(self, dataset: ImageDataset, batch_size: int = 1, shuffle: bool | None = None, sampler=None,
                 num_workers: int = 0, drop_last: bool = False, pin_memory: bool = False, seed: int = 0, **kwargs):
        for name in ("device", "backend"):
            if name in kwargs:
                raise ConfigError(f"FallbackLoader: {name}={kwargs[name]!r}; it runs on the CPU with the torch "
                                  "backend: drop it, or use DaliLoader, which chooses between backends")
        super().__init__(dataset, batch_size, shuffle, sampler, num_workers=num_workers, drop_last=drop_last,
                         pin_memory=pin_memory, seed=seed, device="cpu", backend="torch", **kwargs)
