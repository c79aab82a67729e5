"""Print every private name one of this repository's modules takes from another, and how many.

    python scripts/private_imports.py [REPO] [--library]   (default: this checkout; --library: no tests/ or scripts/)

A private name (``_name``, not a dunder) belongs to its module: another module that imports it
(``from x import _name``, at module level or inside a function) or reads it off a module
(``x._name``, ``own("x")._name``, ``setattr(x, "_name", ...)`` as tests patch it) depends on what the owner may change without notice. Each one is
printed as ``importer:line: module._name``, then the counts per top-level folder and in all. A private
module (``dali_backend._own``) is not counted: its package's ``__init__`` decides who may use it.

Used for issue 31 (private cross-module imports made public or moved); the lead runs it on the
whole tree.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

FOLDERS = ("dali_backend", "fallback", "bench", "tests", "scripts")
LIBRARY = ("dali_backend", "fallback", "bench")
ALIAS: dict[str, str] = {}  # the tree's ALIASES, read by found()


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def modules_of(root: Path, folders) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``folders`` (a package by its ``__init__``)."""
    out = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def aliases(root: Path) -> dict[str, str]:
    """The old module paths kept working (``ALIASES`` in dali_backend/__init__.py): old -> new."""
    init = root / "dali_backend" / "__init__.py"
    for node in ast.parse(init.read_text()).body if init.exists() else ():
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ALIASES" for t in node.targets):
            return eval(compile(ast.Expression(node.value), str(init), "eval"), {})  # our own literal table
    return {}


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` names in the tree (an old path of ``ALIASES`` names its new module; tests and
    scripts import their helpers by bare name)."""
    name = ALIAS.get(name, name)
    for candidate in (name, f"tests.{name}", f"scripts.{name}"):
        if candidate in modules:
            return candidate
    return None


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def found(root: Path, folders=FOLDERS) -> list[tuple[str, int, str, str]]:
    """(importer file, line, owner module, private name) for every private name taken across modules."""
    modules = modules_of(root, folders)
    ALIAS.clear()
    ALIAS.update(aliases(root))
    hits = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        bound: dict[str, str] = {}  # a local name -> the project module last bound to it (in source order)
        nodes = sorted((n for n in ast.walk(tree) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset))
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    target = resolve(a.name, modules)
                    if target is None:
                        continue
                    if a.asname:
                        bound[a.asname] = target
                    else:  # ``import a.b`` binds ``a``; ``a.b._x`` resolves through the attribute chain
                        head = resolve(a.name.split(".")[0], modules)
                        if head is not None:
                            bound[a.name.split(".")[0]] = head
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and isinstance(node.value, ast.Call)):  # ops = own("fallback.ops")
                target = module_named(node.value, bound, modules)
                if target is not None:
                    bound[node.targets[0].id] = target
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package_of(module, path).split(".")
                    anchor = ".".join(anchor[:len(anchor) - (node.level - 1)])
                    base = f"{anchor}.{base}" if base else anchor
                owner = resolve(base, modules)
                for a in node.names:
                    sub = resolve(f"{base}.{a.name}", modules)
                    if sub is not None:  # a module imported from its package
                        bound[a.asname or a.name] = sub
                    elif owner is not None and owner != module and private(a.name):
                        hits.append((path, node.lineno, owner, a.name))
            else:
                if isinstance(node, ast.Attribute) and private(node.attr):
                    owner, name = module_named(node.value, bound, modules), node.attr
                elif isinstance(node, ast.Call):
                    owner, name = by_string(node, bound, modules)
                else:
                    continue
                if owner is not None and owner != module:
                    hits.append((path, node.lineno, owner, name))
    return sorted((str(p.relative_to(root)), line, owner, name) for p, line, owner, name in hits)


def module_named(node: ast.expr, bound: dict[str, str], modules: dict[str, Path]) -> str | None:
    """The project module an expression evaluates to (a bound name, its attribute chain, ``own("x")``), or None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        head = module_named(node.value, bound, modules)
        return None if head is None else resolve(f"{head}.{node.attr}", modules)
    if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("own", "import_module")
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return resolve(node.args[0].value, modules)
    return None


def by_string(call: ast.Call, bound: dict[str, str], modules: dict[str, Path]) -> tuple[str | None, str]:
    """A private name reached by a string: ``setattr(x, "_name", ...)``, ``getattr``/``hasattr`` (also
    ``monkeypatch.setattr``), or ``monkeypatch.setattr("pkg.module._name", ...)``."""
    fn = getattr(call.func, "id", getattr(call.func, "attr", None))
    if fn not in ("setattr", "getattr", "hasattr", "delattr") or not call.args:
        return None, ""
    args = [a.value if isinstance(a, ast.Constant) else a for a in call.args[:2]]
    if len(args) == 2 and isinstance(args[1], str) and private(args[1]) and isinstance(args[0], ast.expr):
        return module_named(args[0], bound, modules), args[1]
    if isinstance(args[0], str) and "." in args[0]:
        owner, _, name = args[0].rpartition(".")
        if private(name):
            return resolve(owner, modules), name
    return None, ""


def main(argv: list[str]) -> int:
    library = "--library" in argv
    args = [a for a in argv if a != "--library"]
    root = Path(args[0] if args else Path(__file__).resolve().parents[1])
    folders = LIBRARY if library else FOLDERS
    hits = found(root, folders)
    for path, line, owner, name in hits:
        print(f"{path}:{line}: {owner}.{name}")
    per = Counter(path.split("/")[0] for path, *_ in hits)
    print("private names taken across modules: " + ", ".join(f"{f} {per.get(f, 0)}" for f in folders)
          + f"; total {len(hits)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
