"""Import this distribution's other top-level packages (``fallback``, ``bench``) immune to shadowing.

The project keeps ``fallback/`` and ``bench/`` beside ``dali_backend/``. A user's own ``fallback.py``
or ``bench.py`` next to their script comes first on ``sys.path`` and would be imported instead, so
the library never imports those names plainly: :func:`own` returns *our* package, the one in the
folder beside ``dali_backend/`` — the ordinary module when nothing shadows it (so ``import fallback``
and the library share one module and its classes), else a private copy loaded from our folder.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

_BESIDE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _ours(module: ModuleType | None, folder: str) -> bool:
    path = getattr(module, "__file__", None)
    return path is not None and os.path.dirname(os.path.realpath(path)) == folder


def own(name: str) -> ModuleType:
    """Our ``name`` (``"fallback"``, ``"bench"``, or a submodule such as ``"fallback.ops"``)."""
    top, _, rest = name.partition(".")
    folder = os.path.join(_BESIDE, top)
    module = sys.modules.get(top)
    if not _ours(module, folder):
        private = f"dali_backend._own_{top}"
        module = sys.modules.get(private)
        if module is None:
            spec = importlib.util.find_spec(top) if top not in sys.modules else None
            if spec is not None and spec.origin and os.path.dirname(os.path.realpath(spec.origin)) == folder:
                module = importlib.import_module(top)  # not shadowed: the ordinary import
            else:
                spec = importlib.util.spec_from_file_location(private, os.path.join(folder, "__init__.py"),
                                                              submodule_search_locations=[folder])
                module = importlib.util.module_from_spec(spec)
                sys.modules[private] = module
                spec.loader.exec_module(module)
    return importlib.import_module(f"{module.__name__}.{rest}") if rest else module
