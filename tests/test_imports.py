"""Architecture: DALI is imported only where a pipeline is built; no import cycles."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

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


@pytest.mark.slow
def test_users_own_fallback_and_bench_modules_do_not_break_the_library(tmp_path, defect_root):
    """A user's fallback.py / bench.py beside their script shadows ours on sys.path; the library still works."""
    (tmp_path / "fallback.py").write_text("raise ImportError('the user fallback.py was imported')\n")
    (tmp_path / "bench.py").write_text("raise ImportError('the user bench.py was imported')\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        "from dali_backend import AugmentSpec, DaliLoader, ImageDataset, SampleIndex\n"
        "from dali_backend.cli import main\n"
        f"index = SampleIndex.from_folder({str(defect_root)!r}, progress=False)\n"
        "for backend in ('torch', 'dali'):\n"
        "    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=8, device='cpu', backend=backend)\n"
        "    print(backend, sum(len(y) for _, y in loader))\n"
        "    loader.close()\n"
        "try:\n"
        "    main(['bench', '--help'])\n"
        "except SystemExit as e:\n"
        "    print('bench help', e.code)\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}  # the library as installed (editable: the checkout)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch 60" in out.stdout and "dali 60" in out.stdout and "bench help 0" in out.stdout, out.stdout
