"""Fast, trustworthy JPEG loading for PyTorch: a DALI GPU pipeline and an equivalent CPU fallback.

The shared contract lives here: :class:`SampleIndex` (which files, which labels),
:class:`WeightedSampler` (which draws, per epoch and rank) and :class:`AugmentSpec` (what is
computed, with per-draw parameters from :func:`draw_params`). Importing this package does not import
``nvidia.dali``: DALI is imported only when a DALI pipeline is built.
"""

from __future__ import annotations

import logging

from .augment import AmplificationWarning, AugmentSpec, AugParams, Clahe, draw_params
from .errors import (BadImageError, ColorDroppedWarning, ConfigError, DaliBackendError, FallbackWarning, IndexBuildError,
                     IndexFileError, LoaderClosedError, LoaderTimeoutError, LoaderWorkerError, ManifestError, MissingDependencyError,
                     OutputFileError, StaleIndexError, StaleIteratorError, StorageError)
from .index import Rejected, SampleIndex
from .labelling import DEFAULT_KEYWORDS, KeywordRules
from .sequences import Sequences

logging.getLogger("dali_backend").addHandler(logging.NullHandler())

__version__ = "0.1.0"
__all__ = [
    "AugmentSpec", "AugParams", "Clahe", "draw_params", "SampleIndex", "Rejected", "KeywordRules", "DEFAULT_KEYWORDS",
    "WeightedSampler", "Draw", "AspectGroupedSampler", "padding_fraction", "Sequences", "ClipSampler", "Clip", "DaliLoader", "ImageDataset", "FallbackLoader", "DaliBackendError", "ConfigError",
    "IndexBuildError", "IndexFileError",
    "ManifestError", "StaleIndexError", "BadImageError", "MissingDependencyError", "LoaderWorkerError", "LoaderClosedError",
    "LoaderTimeoutError", "StaleIteratorError", "OutputFileError", "StorageError", "FallbackWarning", "ColorDroppedWarning", "AmplificationWarning",
]


# Loaded on first use: torch (the sampler, the loader) and OpenCV (the dataset) are not imported with
# the package, so `import dali_backend.index` and `dali-backend --help` start in ~0.1 s. Plain imports
# inside the function, so that tests/test_imports.py sees these arrows.


def __getattr__(name: str):
    if name in ("Draw", "WeightedSampler"):
        from . import sampler

        return getattr(sampler, name)
    if name in ("AspectGroupedSampler", "padding_fraction"):
        from . import grouping

        return getattr(grouping, name)
    if name in ("Clip", "ClipSampler"):
        from . import clips

        return getattr(clips, name)
    if name in ("DaliLoader", "FallbackLoader"):
        from . import loader

        return getattr(loader, name)
    if name == "ImageDataset":  # the contract's dataset, executed on the CPU by the fallback (OpenCV)
        from ._own import own

        return own("fallback.dataset").ImageDataset
    raise AttributeError(f"module 'dali_backend' has no attribute {name!r}")
