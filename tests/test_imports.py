"""Architecture: DALI is imported only where a pipeline is built; no import cycles."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def imported_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.split())


def test_import_dali_backend_does_not_import_dali_or_opencv():
    mods = imported_after("import dali_backend")
    assert not any(m.startswith("nvidia") for m in mods)
    assert "cv2" not in mods


def test_fallback_does_not_import_dali():
    mods = imported_after("import fallback, dali_backend; dali_backend.DaliLoader")
    assert not any(m.startswith("nvidia") for m in mods)


def test_module_graph_is_acyclic():
    """Edges between our modules (top-level imports only: lazy imports inside functions are fine)."""
    modules, packages = {}, {}
    for pkg in ("dali_backend", "fallback"):
        for path in (ROOT / pkg).rglob("*.py"):  # subpackages too (dali_backend.transforms)
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_init else parts)
            modules[name] = path
            packages[name] = name if is_init else name.rsplit(".", 1)[0]
    edges = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:  # top level only
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = packages[name].split(".")
                    anchor = ".".join(anchor[:len(anchor) - (node.level - 1)])
                    base = f"{anchor}.{base}" if base else anchor
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = subs or [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            # a module importing its own package is how relative imports work, not a cycle
            edges[name].update(t for t in targets if t in modules and t != name and not name.startswith(t + "."))
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in edges[m]:
            assert state.get(n) != 1, f"import cycle: {' -> '.join(stack + [n])}"
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in modules:
        if m not in state:
            visit(m, [m])
