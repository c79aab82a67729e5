"""CPU execution of the shared contract: an OpenCV ``ImageDataset`` and a tuned ``DataLoader``.

Imports the contract from ``dali_backend`` (index, spec, sampler) and never imports DALI.
"""

from .dataset import ImageDataset
from .loader import FallbackLoader

__all__ = ["ImageDataset", "FallbackLoader"]
