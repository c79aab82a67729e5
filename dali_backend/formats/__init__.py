"""Image formats: the registry (:mod:`.registry`: magic bytes, header reader, index check, decoder
settings per backend) and its entries, one module each (:mod:`.jpeg`). Every module of this package
is imported here, so a format module registers itself by being added; :mod:`.files` opens the files
they read. Pure Python: imports neither DALI nor OpenCV.
"""

from __future__ import annotations

import importlib
import pkgutil

from . import jpeg  # noqa: F401  (the first entry: registered before any other)

for _m in pkgutil.iter_modules(__path__):
    if _m.name not in ("files", "registry"):
        importlib.import_module(f"{__name__}.{_m.name}")
