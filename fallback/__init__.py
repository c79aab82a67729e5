"""CPU execution of the shared contract: the OpenCV ``ImageDataset``, the executor that runs planned
batches through a ``DataLoader`` (:mod:`fallback.executor`), and ``FallbackLoader`` (the loader facade
on that executor). Imports the contract from ``dali_backend`` and never imports DALI.
"""

from .dataset import ImageDataset
from .loader import FallbackLoader

__all__ = ["ImageDataset", "FallbackLoader"]
