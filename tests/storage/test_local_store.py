"""The local folder is a store beside S3 (:class:`~dali_backend.storage.local.LocalStore`): the same
protocol (listing, HEAD, whole and range reads, whether the root is there, which samples changed),
returned by ``open_store`` for a path; the index holds a store and asks it, and no module outside
``dali_backend/storage/`` tests whether a root is a URL."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest

from dali_backend.errors import ConfigError, StaleIndexError
from dali_backend.index import SampleIndex
from dali_backend.storage import stores
from dali_backend.storage.local import LocalStore
from dali_backend.storage.objects import ObjectMissing
from tests.helpers import jpeg_bytes, write

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "data"
    write(root / "cats" / "a.jpg", jpeg_bytes(20, 24, seed=1))
    write(root / "dogs" / "b.jpg", jpeg_bytes(20, 24, seed=2))
    write(root / ".hidden" / "c.jpg", b"hidden but a file")
    (root / "dogs" / "link.jpg").symlink_to(root / "cats" / "a.jpg")
    os.mkfifo(root / "dogs" / "pipe.jpg")
    return root


def test_a_path_opens_a_local_store_answering_the_protocol(folder):
    store = stores.open_store(str(folder))
    assert isinstance(store, LocalStore) and store.folder == folder and store.root == str(folder)
    assert store.exists() and not stores.open_store(str(folder / "nope")).exists()
    # regular files only: the symlink and the FIFO are not objects (a FIFO would block a reader)
    assert [o.rel for o in store.list()] == [".hidden/c.jpg", "cats/a.jpg", "dogs/b.jpg"]
    assert [o.rel for o in store.list("dogs")] == ["dogs/b.jpg"]
    data = (folder / "cats" / "a.jpg").read_bytes()
    info = store.head("cats/a.jpg")
    assert (info.size, info.mtime_ns) == (len(data), os.stat(folder / "cats" / "a.jpg").st_mtime_ns)
    assert store.get("cats/a.jpg")[0] == data and store.get("cats/a.jpg", start=2, end=9)[0] == data[2:9]
    for rel in ("dogs/pipe.jpg", "cats/none.jpg"):
        with pytest.raises(ObjectMissing, match=rel.split("/")[1]):
            store.head(rel)
        with pytest.raises(ObjectMissing, match=rel.split("/")[1]):
            store.get(rel)


def test_the_local_stores_version_is_size_and_mtime(folder):
    store = stores.open_store(folder)
    paths = ["cats/a.jpg", "dogs/b.jpg", "dogs/pipe.jpg", "gone.jpg"]
    st = [os.stat(folder / p) if (folder / p).exists() else None for p in paths]
    sizes = np.array([s.st_size if s else 1 for s in st], np.int64)
    mtimes = np.array([s.st_mtime_ns if s else 0 for s in st], np.int64)
    os.utime(folder / "dogs" / "b.jpg", ns=(st[1].st_atime_ns, st[1].st_mtime_ns + 10**9))
    assert store.changed(paths, sizes, mtimes, None, range(4)) == [
        ("dogs/b.jpg", "modified (mtime changed)"), ("dogs/pipe.jpg", "not a regular file (FIFO)"),
        ("gone.jpg", "missing")]


def test_the_index_holds_a_store_and_its_staleness_check_asks_it(folder, tmp_path, monkeypatch):
    index = SampleIndex.from_folder(folder, progress=False)
    assert isinstance(index.store, LocalStore) and index.bucket() is None and not index.is_remote
    index.save(tmp_path / "i.npz")
    asked = []
    monkeypatch.setattr(LocalStore, "changed", lambda self, *a: asked.append(self.root) or [("cats/a.jpg", "why")])
    with pytest.raises(StaleIndexError, match="cats/a.jpg: why"):
        SampleIndex.load(tmp_path / "i.npz")
    assert asked == [str(folder)]


def test_storage_options_for_a_folder_are_refused_by_the_builders(folder):
    with pytest.raises(ConfigError, match="local folder: drop them"):
        SampleIndex.from_folder(folder, progress=False, storage_options={"retries": 1})


def test_no_module_outside_storage_asks_whether_a_root_is_a_url():
    """The store answers; ``is_remote``/``is_url`` are named only inside dali_backend/storage/ (the
    index's ``is_remote`` property, kept for users, is defined there by asking its store)."""
    found = []
    for top in ("dali_backend", "fallback", "bench"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("dali_backend/storage/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.asname or a.name for a in node.names] if isinstance(node, ast.ImportFrom) else \
                    [getattr(node, "attr", None) or getattr(node, "id", None)]
                if isinstance(node, (ast.ImportFrom, ast.Attribute, ast.Name)) and \
                        {"is_remote", "is_url"} & set(names):
                    found.append(f"{rel}:{node.lineno}")
    assert not found, f"ask the index's store (index.store) instead: {found}"
