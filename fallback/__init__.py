"""CPU execution of the shared contract: the OpenCV ``ImageDataset`` (:mod:`fallback.dataset`), the
executor that runs planned batches through a ``DataLoader`` (:mod:`fallback.executor`), the one that
runs them on threads of the training process (:mod:`fallback.threads`), the per-sample work both run
(:mod:`fallback.samples`) and the reference operations (:mod:`fallback.ops`). Imports the contract
from ``dali_backend``, never DALI, never the loader facade.
"""

from .dataset import ImageDataset

__all__ = ["ImageDataset", "FallbackLoader"]


def __getattr__(name: str):
    # FallbackLoader is the facade on this executor (DaliLoader(backend="torch")), defined with the
    # facade; this package only names it, on first use, for code written as
    # `from fallback import FallbackLoader`. The one arrow from here to the facade, and a lazy one.
    if name == "FallbackLoader":
        from dali_backend.facade.loader import FallbackLoader

        return FallbackLoader
    raise AttributeError(f"module 'fallback' has no attribute {name!r}")
