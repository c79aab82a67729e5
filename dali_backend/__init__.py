"""Fast, trustworthy JPEG loading for PyTorch: a DALI GPU pipeline and an equivalent CPU fallback.

The shared contract lives here: :class:`SampleIndex` (which files, which labels),
:class:`WeightedSampler` (which draws, per epoch and rank) and :class:`AugmentSpec` (what is
computed, with per-draw parameters from :func:`draw_params`). Importing this package does not import
``nvidia.dali``: DALI is imported only when a DALI pipeline is built.
"""

from __future__ import annotations

import logging

from .augment import AugmentSpec, AugParams, Clahe, draw_params
from .errors import (BadImageError, ConfigError, DaliBackendError, FallbackWarning, IndexBuildError, IndexFileError,
                     LoaderClosedError, LoaderTimeoutError, LoaderWorkerError, ManifestError, MissingDependencyError,
                     OutputFileError, StaleIndexError)
from .index import Rejected, SampleIndex
from .labelling import DEFAULT_KEYWORDS, KeywordRules
from .sampler import Draw, WeightedSampler

logging.getLogger("dali_backend").addHandler(logging.NullHandler())

__version__ = "0.1.0"
__all__ = [
    "AugmentSpec", "AugParams", "Clahe", "draw_params", "SampleIndex", "Rejected", "KeywordRules", "DEFAULT_KEYWORDS",
    "WeightedSampler", "Draw", "DaliLoader", "ImageDataset", "FallbackLoader", "DaliBackendError", "ConfigError",
    "IndexBuildError", "IndexFileError",
    "ManifestError", "StaleIndexError", "BadImageError", "MissingDependencyError", "LoaderWorkerError", "LoaderClosedError",
    "LoaderTimeoutError", "OutputFileError", "FallbackWarning",
]


def __getattr__(name: str):
    # DaliLoader lives in a module that reaches the fallback package; load it on first use so that
    # `import fallback` -> `import dali_backend` stays free of cycles.
    if name == "DaliLoader":
        from .loader import DaliLoader

        return DaliLoader
    if name in ("ImageDataset", "FallbackLoader"):  # the CPU executor, re-exported (imports OpenCV)
        from ._own import own

        return getattr(own("fallback"), name)
    raise AttributeError(f"module 'dali_backend' has no attribute {name!r}")
