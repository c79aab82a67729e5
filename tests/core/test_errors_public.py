"""Every public error and warning is importable from ``dali_backend`` and listed in the errors reference
(docs/reference/errors.md), so that ``from dali_backend import StorageError`` works as the guides say."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import dali_backend
from dali_backend import errors

ROOT = Path(__file__).resolve().parents[2]
# raised and caught inside the loader (an executor's repairable failure); never reaches the user
INTERNAL = {"ExecutorFailed"}


def public_classes() -> set[str]:
    """The errors module's exception classes, and every warning class the package defines (AST scan)."""
    names = {name for name, obj in vars(errors).items()
             if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__}
    for path in (ROOT / "dali_backend").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    "Warning" in ast.unparse(base) for base in node.bases):
                names.add(node.name)
    return names - INTERNAL


def test_every_public_error_is_importable_from_the_package_and_in_all():
    names = public_classes()
    assert {"StorageError", "ConfigError", "FallbackWarning", "AmplificationWarning"} <= names
    missing = sorted(n for n in names if not isinstance(getattr(dali_backend, n, None), type))
    assert not missing, f"not importable from dali_backend: {missing}"
    assert not sorted(names - set(dali_backend.__all__)), "missing from dali_backend.__all__"


def test_every_public_error_is_listed_in_the_errors_reference():
    page = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s*- (\w+)$", page, flags=re.M)) | set(re.findall(r"^::: [\w.]+\.(\w+)$", page, flags=re.M))
    assert not sorted(public_classes() - listed), "missing from docs/reference/errors.md"


def test_internal_failure_is_not_a_library_error():
    """The one exclusion above is what it claims: not a DaliBackendError, so not part of the public set."""
    assert not issubclass(errors.ExecutorFailed, errors.DaliBackendError)
