"""Architecture: DALI is imported only where a pipeline is built; no import cycles."""

from __future__ import annotations

import pathlib
import re
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
    return import_graph().graph(root)


def import_graph():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import import_graph
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return import_graph


def layer(module: str) -> int:
    """The layer of a module, from the path-prefix table scripts/import_graph.py's LAYERS (bottom up:
    contract 0, executors 1, facade 2, cli and bench 3); an unclassified module fails with the fix."""
    graph = import_graph()
    try:
        return graph.classify(module)[0]
    except graph.Unclassified as e:
        raise AssertionError(str(e)) from None


# Declared upward arrows, each for a reason: `from fallback import FallbackLoader` (the facade on the
# CPU executor, defined with the facade) keeps working for users' code, lazily.
DECLARED = {("fallback", "dali_backend.facade.loader")}


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
    assert layer("dali_backend.facade.loader") > layer("dali_backend.index")


def test_every_module_is_in_a_layer_by_its_folder():
    """The layer rule reads path prefixes: every module of the tree is classified, a new module in a
    folder gets its folder's layer, a new top-level module of dali_backend/ is refused with the fix."""
    modules, _ = import_graph().modules_of(ROOT)
    assert {m: layer(m) for m in modules}  # raises on an unclassified module
    assert layer("dali_backend.core.colour") == 0 and layer("dali_backend.facade.accelerate_state") == 2
    assert layer("dali_backend.dali.anything") == 1 and layer("dali_backend.cli.anything") == 3
    with pytest.raises(AssertionError, match="dali_backend.colour: no layer; put it in a folder"):
        layer("dali_backend.colour")


def test_the_old_module_paths_are_the_new_modules():
    """`import dali_backend.sampler` (the flat layout's paths, the reference's public ones) gives the very
    module of its folder, and importing the package still loads neither DALI nor OpenCV."""
    code = ("import sys, importlib, dali_backend\n"
            "heavy = [m for m in sys.modules if m.startswith('nvidia') or m == 'cv2']\n"
            "for old, new in dali_backend.ALIASES.items():\n"
            "    assert importlib.import_module(old) is importlib.import_module(new), old\n"
            "    assert sys.modules[old].__spec__.name == new, old\n"
            "import dali_backend.sampler, dali_backend.exporters\n"
            "from dali_backend.epochs import Passes, sampler_identity\n"
            "from dali_backend import sampler, grouping, clips, sequences, synthetic, labelling, amplification, augment\n"
            "assert dali_backend.sampler is sys.modules['dali_backend.sampling.sampler']\n"
            "print(len(dali_backend.ALIASES), heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[1:] == ["[]"] and int(out.stdout.split()[0]) >= 13
    public = {"dali_backend.augment", "dali_backend.sampler", "dali_backend.grouping", "dali_backend.clips",
              "dali_backend.sequences", "dali_backend.synthetic", "dali_backend.labelling",
              "dali_backend.amplification", "dali_backend.epochs", "dali_backend.exporters"}
    assert public <= set(import_graph().aliases(ROOT))


def test_the_graph_follows_the_old_paths(tmp_path):
    """An import through an old path (ALIASES) is an arrow to the module it names: no arrow hides."""
    for pkg in ("dali_backend", "dali_backend/core", "fallback", "bench"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "dali_backend" / "__init__.py").write_text("ALIASES = {'dali_backend.old': 'dali_backend.core.new'}\n")
    (tmp_path / "dali_backend" / "core" / "new.py").write_text("")
    (tmp_path / "fallback" / "executor.py").write_text("def f():\n    from dali_backend.old import x\n")
    (tmp_path / "bench" / "run.py").write_text("from dali_backend import old\n")
    edges = module_graph(tmp_path)
    assert edges["fallback.executor"] == {"dali_backend.core.new"} and edges["bench.run"] == {"dali_backend.core.new"}


def test_the_architecture_page_shows_the_tree():
    """docs/concepts/architecture.md's tree names every folder the layer rule names, and only folders that exist."""
    page = (ROOT / "docs" / "concepts" / "architecture.md").read_text()
    tree = page.split("```text\n", 1)[1].split("```", 1)[0]
    folders = {p[0].split(".")[1] for p in import_graph().LAYERS if p[0].count(".") == 1
               and (ROOT / p[0].replace(".", "/")).is_dir()}
    shown = set(re.findall(r"^  (\w+)/", tree, re.M))
    assert folders == shown, f"folders in the rule {sorted(folders)}, in the page {sorted(shown)}"
    assert all((ROOT / "dali_backend" / f).is_dir() for f in shown)
    for prefix, n, _ in import_graph().LAYERS:
        if prefix.startswith("dali_backend.") and prefix.count(".") == 1 and prefix.split(".")[1] in folders:
            line = next(x for x in tree.splitlines() if x.startswith(f"  {prefix.split('.')[1]}/"))
            assert f"layer {n}" in line, line


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
