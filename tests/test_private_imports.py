"""scripts/private_imports.py finds a private name taken across modules however it is taken: imported
(at module level or in a function), read off a module, or patched by a test by object or by path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("private_imports", ROOT / "scripts" / "private_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_way_of_taking_a_private_name_is_counted_and_public_ones_are_not(tmp_path):
    (tmp_path / "dali_backend" / "sub").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "dali_backend" / "__init__.py").write_text("")
    (tmp_path / "dali_backend" / "sub" / "__init__.py").write_text("")
    (tmp_path / "dali_backend" / "sub" / "a.py").write_text("_x = 1\ny = 2\nprint(_x)\n")
    (tmp_path / "dali_backend" / "sub" / "b.py").write_text(
        "from .a import _x, y\nfrom . import a\nprint(a._x, a.y)\n\ndef f():\n    from dali_backend.sub.a import _x\n")
    (tmp_path / "tests" / "test_t.py").write_text(
        "import dali_backend.sub.a as m\n\ndef test(monkeypatch):\n    monkeypatch.setattr(m, '_x', 3)\n"
        "    monkeypatch.setattr('dali_backend.sub.a._x', 3)\n    monkeypatch.setattr(m, 'y', 3)\n")
    found = load_script().found(tmp_path)
    assert [(path, line) for path, line, *_ in found] == [
        ("dali_backend/sub/b.py", 1), ("dali_backend/sub/b.py", 3), ("dali_backend/sub/b.py", 6),
        ("tests/test_t.py", 4), ("tests/test_t.py", 5)]
    assert {(owner, name) for _, _, owner, name in found} == {("dali_backend.sub.a", "_x")}
