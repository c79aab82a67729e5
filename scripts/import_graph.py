"""Print the import graph of a checkout of this repository, grouped by part, with its cycles and sizes.

    python scripts/import_graph.py [REPO]          (default: this checkout)

Every import between the repository's modules counts, at module level and inside functions, and so
does an import by location (``own("...")``, ``importlib.import_module("...")``, ``spec_from_file_location``
naming one of our files): the graph a reader or a tool should see. Modules are grouped into the parts
of the design (the contract and its subpackages, the two executors, the facade, the CLI, the
benchmark); the output lists the arrows between parts with how many module-level arrows each has,
the strongly connected components of the module graph (cycles), and the modules over 500 lines.
Used for the closing note of issue 19 (the graph before and after the redesign).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

# The layer rule, read from the tree: (module-name prefix, layer, part), the longest matching prefix wins;
# a module in a folder is classified by its folder. An arrow may only point down a layer (or within
# one). tests/test_imports.py checks the rule from this table and docs/concepts/architecture.md
# against it; a module directly under dali_backend/ that no entry names is unclassified (an error).
LAYERS = [
    ("dali_backend.errors", 0, "contract"), ("dali_backend._own", 0, "contract"), ("dali_backend.util", 0, "contract: util"),
    ("dali_backend.core", 0, "contract"), ("dali_backend.sampling", 0, "contract: sampling"),
    ("dali_backend.formats", 0, "contract: formats"), ("dali_backend.transforms", 0, "contract: transforms"),
    ("dali_backend.index", 0, "contract: index"), ("dali_backend.storage", 0, "contract: storage"),
    ("dali_backend.targets", 0, "contract: targets"),
    ("dali_backend.dali", 1, "executor: dali"), ("fallback", 1, "executor: fallback"),
    ("dali_backend", 2, "facade: package"), ("dali_backend.facade", 2, "facade"), ("dali_backend.telemetry", 2, "facade: telemetry"),
    ("dali_backend.cli", 3, "cli"), ("dali_backend.__main__", 3, "cli"), ("bench", 3, "bench"),
]


class Unclassified(LookupError):
    pass


def classify(module: str) -> tuple[int, str]:
    """(layer, part) of a module, from the longest prefix of LAYERS it falls under."""
    best = max((p for p in LAYERS if module == p[0] or module.startswith(p[0] + ".")), key=lambda p: len(p[0]),
               default=None)
    if best is None or (best[0] == "dali_backend" and module != "dali_backend"):
        raise Unclassified(f"{module}: no layer; put it in a folder that scripts/import_graph.py's LAYERS names, "
                           "or add its prefix to LAYERS")
    return best[1], best[2]


def part(module: str) -> str:
    try:
        return classify(module)[1]
    except Unclassified:
        return "other"


def aliases(root: Path) -> dict[str, str]:
    """The old module paths kept working (``ALIASES`` in dali_backend/__init__.py): old -> new."""
    init = root / "dali_backend" / "__init__.py"
    if not init.exists():
        return {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ALIASES" for t in node.targets):
            return eval(compile(ast.Expression(node.value), str(init), "eval"), {})  # our own literal table
    return {}


def modules_of(root: Path) -> tuple[dict[str, Path], dict[str, str]]:
    modules, packages = {}, {}
    for pkg in ("dali_backend", "fallback", "bench"):
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_init else parts)
            modules[name] = path
            packages[name] = name if is_init else name.rsplit(".", 1)[0]
    return modules, packages


def graph(root: Path) -> dict[str, set[str]]:
    modules, packages = modules_of(root)
    alias = aliases(root)

    def real(name: str) -> str:  # an old path of ALIASES is an arrow to the module it names
        for old in sorted(alias, key=len, reverse=True):
            if name == old or name.startswith(old + "."):
                return alias[old] + name[len(old):]
        return name

    edges: dict[str, set[str]] = {m: set() for m in modules}
    by_file = {str(p.relative_to(root).with_suffix("")).replace("/", "."): m for m, p in modules.items()}
    for name, path in modules.items():
        source = path.read_text()
        targets: list[str] = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = packages[name].split(".")
                    anchor = ".".join(anchor[:len(anchor) - (node.level - 1)])
                    base = f"{anchor}.{base}" if base else anchor
                subs = [real(f"{base}.{a.name}") for a in node.names if real(f"{base}.{a.name}") in modules]
                targets += subs or [base]
            elif isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                fn = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if fn in ("own", "import_module"):
                    targets.append(node.args[0].value)
        # imports by file location: a path string naming one of our files
        for m in re.findall(r'["\'](?:\.\./)?((?:dali_backend|fallback|bench)/[\w/]+)\.py["\']', source):
            targets.append(by_file.get(m.replace("/", "."), m.replace("/", ".")))
        for t in targets:
            t = real(t)
            while t and t not in modules and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in modules and t != name and not name.startswith(t + "."):
                edges[name].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).resolve().parents[1])
    edges = graph(root)
    modules, _ = modules_of(root)
    arrows = Counter((part(a), part(b)) for a, bs in edges.items() for b in bs if part(a) != part(b))
    print(f"{len(modules)} modules, {sum(len(b) for b in edges.values())} arrows between them")
    print("arrows between parts (count of module arrows):")
    for (a, b), n in sorted(arrows.items()):
        print(f"  {a:22s} -> {b:22s} {n}")
    comps = cycles(edges)
    print(f"cycles (strongly connected components): {len(comps)}")
    for comp in comps:
        print("  " + " <-> ".join(comp))
    sizes = sorted(((len(p.read_text().splitlines()), m) for m, p in modules.items()), reverse=True)
    print("modules over 500 lines: " + (", ".join(f"{m} {n}" for n, m in sizes if n > 500) or "none"))
    print("largest: " + ", ".join(f"{m} {n}" for n, m in sizes[:5]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
