"""A griffe extension for the docs site (mkdocs.yml loads it for mkdocstrings): the library's
docstrings use Sphinx cross-reference roles (``:class:`SampleIndex```, ``:func:`~dali_backend.sampling.sampler.as_draw```)
inside otherwise Google-style, Markdown-friendly text. Markdown would print the roles literally; this
turns each into inline code, linked to the object's reference entry where the site documents it (an
optional cross-reference: a target that is not on the site stays plain code, without a warning).

Only the rendered text changes; the docstrings in the code stay as they are (``help()`` reads them).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(?P<tilde>~?)(?P<target>[\w.]+)`")


def _resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path of ``target`` as written in ``obj``'s docstring (relative names resolved in its scope)."""
    if target.startswith("."):  # a relative module name, from the package of obj's module
        package = obj.module if obj.module.is_package else obj.module.parent
        while target.startswith("..") and package is not None and package.parent is not None:
            package, target = package.parent, target[1:]
        return f"{package.path}{target}" if package is not None else None
    first, _, rest = target.partition(".")
    try:
        full = obj.resolve(first)
    except Exception:  # noqa: BLE001 - any name griffe cannot resolve is shown as written
        return target if "." in target else None
    return f"{full}.{rest}" if rest else full


def _convert(obj: griffe.Object, text: str) -> str:
    def replace(m: re.Match) -> str:
        target = m["target"]
        shown = target.lstrip(".").rsplit(".", 1)[-1] if m["tilde"] else target.lstrip(".")
        full = _resolve(obj, target)
        code = f"<code>{shown}</code>"
        return f'<autoref identifier="{full}" optional>{code}</autoref>' if full else code

    return _ROLE.sub(replace, text)


def _walk(obj: griffe.Object, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None:
        obj.docstring.value = _convert(obj, obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _walk(member, seen)


class SphinxRoles(griffe.Extension):
    """Rewrite ``:role:`target``` in every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _walk(pkg, set())
