"""Architecture: DALI is imported only where a pipeline is built; no import cycles."""

from __future__ import annotations

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


def module_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Every import between our modules (dali_backend, fallback, bench): at module level *and* inside
    functions, plus imports by location (``own("...")``, ``import_module``, a path to one of our files),
    so that no arrow hides. Read by ``scripts/import_graph.py``, the same reader the closing notes quote."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import import_graph
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return import_graph.graph(root)


# The layers, bottom up; an arrow may only point down (or within a layer).
CONTRACT = {"dali_backend._own", "dali_backend.errors", "dali_backend.strings", "dali_backend.progress",
            "dali_backend.memory", "dali_backend.jpeg", "dali_backend.labelling", "dali_backend.index",
            "dali_backend.reading", "dali_backend.sampler", "dali_backend.augment", "dali_backend.synthetic",
            "dali_backend.tensors", "dali_backend.transfer", "dali_backend.boundary", "dali_backend.procstats", "dali_backend.schedule",
            "dali_backend.amplification", "dali_backend.colour",
            "dali_backend.sequences", "dali_backend.clips", "dali_backend.grouping"}
# tensors: the contract's last steps (normalisation), shared by both executors; boundary: the records
# that cross between the facade and the executors (planned rows, Batch, BadDraw) and their protocol
EXECUTORS = set()  # by package: dali_backend.dali (graph, wire, workers, devices, runner, hand-off) and fallback
FACADE = {"dali_backend", "dali_backend.epochs", "dali_backend.loader", "dali_backend.telemetry", "dali_backend.autotune", "dali_backend.arguments",
          "dali_backend.changes", "dali_backend.clipbatches", "dali_backend.accelerate_state",
          "dali_backend.exporters"}
TOP = {"dali_backend.cli", "dali_backend.cliargs", "dali_backend.pictures", "dali_backend.__main__"}


def layer(module: str) -> int:
    if module in CONTRACT or module.startswith(("dali_backend.transforms", "dali_backend.index.",
                                                "dali_backend.storage")):
        return 0
    if module in EXECUTORS or module.startswith(("dali_backend.dali", "fallback")):
        return 1
    if module in FACADE:
        return 2
    if module in TOP or module.startswith("bench"):
        return 3
    raise AssertionError(f"{module}: put it in a layer (tests/test_imports.py)")


# Declared upward arrows, each for a reason: `from fallback import FallbackLoader` (the facade on the
# CPU executor, defined with the facade) keeps working for users' code, lazily.
DECLARED = {("fallback", "dali_backend.loader")}


def test_module_graph_is_acyclic_with_function_level_imports():
    edges = module_graph()
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in sorted(edges[m]):
            assert state.get(n) != 1, f"import cycle: {' -> '.join(stack + [n])}"
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])


def test_arrows_point_down_the_layers():
    """contract (index, sampler, transforms with their CPU kernels and DALI fragments, augment) <-
    executors (DALI's graph and wire, fallback/) <- facade (DaliLoader) <- cli and bench."""
    edges = module_graph()
    up = sorted((a, b) for a, targets in edges.items() for b in targets
                if layer(b) > layer(a) and (a, b) not in DECLARED)
    assert not up, f"arrows pointing up the layers: {up}"
    contract_out = sorted((a, b) for a, targets in edges.items() for b in targets if layer(a) == 0 and layer(b) > 0)
    assert not contract_out
    assert all(layer(b) == 0 for a, targets in edges.items() if a.startswith("fallback.") for b in targets
               if not b.startswith("fallback")), "fallback/ depends on the contract only"


def test_the_checks_see_function_level_arrows(tmp_path):
    """The graph reads imports inside functions and own() calls: a hidden upward arrow would be seen."""
    for pkg in ("dali_backend", "fallback", "bench"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "dali_backend" / "index.py").write_text("def f():\n    from . import loader\n")
    (tmp_path / "dali_backend" / "loader.py").write_text("def g():\n    own('fallback.executor')\n")
    (tmp_path / "fallback" / "executor.py").write_text("")
    edges = module_graph(tmp_path)
    assert edges["dali_backend.index"] == {"dali_backend.loader"}
    assert edges["dali_backend.loader"] == {"fallback.executor"}
    assert layer("dali_backend.loader") > layer("dali_backend.index")


def test_light_imports_stay_light():
    """The edit loop: the index and the command line's help start without torch, OpenCV or DALI."""
    mods = imported_after("import dali_backend.index")
    assert not {"torch", "cv2"} & mods and not any(m.startswith("nvidia") for m in mods)
    mods = imported_after("import contextlib, io\nfrom dali_backend.cli import main\n"
                          "try:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert not {"torch", "cv2"} & mods and not any(m.startswith("nvidia") for m in mods)


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
