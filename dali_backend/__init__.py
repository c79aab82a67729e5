"""Fast, trustworthy JPEG loading for PyTorch: a DALI GPU pipeline and an equivalent CPU fallback.

The shared contract lives here: :class:`SampleIndex` (which files, which labels),
:class:`WeightedSampler` (which draws, per epoch and rank) and :class:`AugmentSpec` (what is
computed, with per-draw parameters from :func:`draw_params`). Importing this package does not import
``nvidia.dali``: DALI is imported only when a DALI pipeline is built.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import sys

# The module paths of the flat layout (before the layer folders), kept working: `import dali_backend.sampler`
# gives the very module `dali_backend.sampling.sampler` (one object, not a copy). The one table of old
# paths; scripts/import_graph.py reads it, so an import through an old path is an arrow to its target.
ALIASES = {
    **{f"dali_backend.{m}": f"dali_backend.core.{m}"
       for m in ("amplification", "augment", "boundary", "labelling", "reading", "synthetic", "tensors", "transfer")},
    **{f"dali_backend.{m}": f"dali_backend.sampling.{m}" for m in ("clips", "grouping", "sampler", "schedule", "sequences")},
    "dali_backend.jpeg": "dali_backend.formats.jpeg",
    **{f"dali_backend.{m}": f"dali_backend.util.{m}" for m in ("memory", "procstats", "progress", "strings")},
    **{f"dali_backend.{m}": f"dali_backend.facade.{m}" for m in ("arguments", "autotune", "changes", "clipbatches", "epochs")},
    "dali_backend.loader": "dali_backend.facade.loader",
    "dali_backend.exporters": "dali_backend.telemetry.exporters",
    **{f"dali_backend.{m}": f"dali_backend.cli.{m}" for m in ("cliargs", "pictures")},
}


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = importlib.import_module(ALIASES[spec.name])
        self.spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self.spec  # the import system gave the module the alias's spec; give it back its own


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader())
        return None


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())

from .errors import (BadImageError, ColorDroppedWarning, ConfigError, DaliBackendError, FallbackWarning, IndexBuildError, IndexFileError,
                     LoaderClosedError, LoaderTimeoutError, LoaderWorkerError, ManifestError, MissingDependencyError, TargetError,
                     OutputFileError, StaleIndexError, StaleIteratorError, StorageError)
from .errors import FilesNotIndexedWarning
from .core.augment import AmplificationWarning, AugmentSpec, AugParams, Clahe, draw_params
from .transforms.intensity import Window
from .index import Rejected, SampleIndex
from .core.labelling import DEFAULT_KEYWORDS, KeywordRules
from .sampling.sequences import Sequences

logging.getLogger("dali_backend").addHandler(logging.NullHandler())

__version__ = "0.1.0"
__all__ = [
    "AugmentSpec", "AugParams", "Clahe", "Window", "draw_params", "SampleIndex", "Rejected", "KeywordRules", "DEFAULT_KEYWORDS",
    "WeightedSampler", "Draw", "AspectGroupedSampler", "padding_fraction", "Sequences", "ClipSampler", "Clip", "DaliLoader", "ImageDataset", "FallbackLoader", "DaliBackendError", "ConfigError",
    "IndexBuildError", "IndexFileError",
    "ManifestError", "TargetError", "StaleIndexError", "BadImageError", "MissingDependencyError", "LoaderWorkerError", "LoaderClosedError",
    "LoaderTimeoutError", "StaleIteratorError", "OutputFileError", "StorageError", "FallbackWarning", "ColorDroppedWarning", "AmplificationWarning",
    "FilesNotIndexedWarning",
]


# Loaded on first use: torch (the sampler, the loader) and OpenCV (the dataset) are not imported with
# the package, so `import dali_backend.index` and `dali-backend --help` start in ~0.1 s. Plain imports
# inside the function, so that tests/test_imports.py sees these arrows.


def __getattr__(name: str):
    if name in ("Draw", "WeightedSampler"):
        from .sampling import sampler

        return getattr(sampler, name)
    if name in ("AspectGroupedSampler", "padding_fraction"):
        from .sampling import grouping

        return getattr(grouping, name)
    if name in ("Clip", "ClipSampler"):
        from .sampling import clips

        return getattr(clips, name)
    if name in ("DaliLoader", "FallbackLoader"):
        from .facade import loader

        return getattr(loader, name)
    if name == "ImageDataset":  # the contract's dataset, executed on the CPU by the fallback (OpenCV)
        from ._own import own

        return own("fallback.dataset").ImageDataset
    raise AttributeError(f"module 'dali_backend' has no attribute {name!r}")
