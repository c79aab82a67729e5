"""What every loader of this library shares: epoch selection and batches per epoch."""

from __future__ import annotations

import numpy as np

from .errors import ConfigError


class EpochLoaderMixin:
    """``set_epoch`` forwarded to the sampler and the dataset (as with ``DistributedSampler``) and
    ``len()`` in batches. Needs ``sampler``, ``dataset``, ``batch_size`` and ``drop_last``."""

    epoch: int = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (forwarded to the sampler's and the dataset's ``set_epoch``)."""
        if not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ConfigError(f"set_epoch({epoch!r}): epoch must be a non-negative integer")
        self.epoch = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)
        self.dataset.set_epoch(self.epoch)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
