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

PARTS = [  # (part, module-name prefix), first match wins
    ("contract: index", "dali_backend.index"), ("contract: transforms", "dali_backend.transforms"),
    ("executor: dali", "dali_backend.dali"), ("executor: dali", "dali_backend.pipeline"),
    ("executor: dali", "dali_backend.schedule"), ("executor: fallback", "fallback"),
    ("facade", "dali_backend.loader"), ("facade", "dali_backend.epochs"), ("facade", "dali_backend.telemetry"), ("facade", "dali_backend.autotune"), ("facade", "dali_backend.arguments"), ("facade", "dali_backend.changes"), ("facade", "dali_backend.clipbatches"), ("facade", "dali_backend.exporters"), ("facade", "dali_backend.accelerate_state"), ("cli", "dali_backend.cli"),
    ("cli", "dali_backend.__main__"), ("cli", "dali_backend.demo"), ("cli", "dali_backend.preview"), ("cli", "dali_backend.pictures"), ("cli", "dali_backend.cliargs"),
    ("bench", "bench"), ("package", "dali_backend"),
]
CONTRACT_LEAVES = {"storage", "amplification", "colour", "sequences", "clips", "schedule", "procstats", "errors", "strings", "progress", "memory", "jpeg", "labelling", "reading", "sampler", "augment",
                   "synthetic", "tensors", "boundary", "_own", "index"}


def part(module: str) -> str:
    leaf = module.split(".")[1] if module.startswith("dali_backend.") else ""
    if leaf in CONTRACT_LEAVES:
        return "contract" if leaf != "index" else "contract: index"
    for name, prefix in PARTS:
        if module == prefix or module.startswith(prefix + "."):
            return name
    return "other"


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
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
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
