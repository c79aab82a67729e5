"""Loaders left by ``break`` and dropped without ``close()`` are silent, as a plain ``DataLoader`` is: no
"Exception ignored ... AssertionError: can only test a child process" on stderr from the workers of a later
loader that inherited their iterators (issue 32, case 11). Run in a child process that reads its stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import KINDS

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import gc, json, sys
sys.path[:0] = [{root!r}, {tests!r}]
from tests.helpers import jpeg_bytes, write
from pathlib import Path
from dali_backend import AugmentSpec, DaliLoader, SampleIndex
from fallback import ImageDataset

folder = Path({folder!r})
for i in range(16):
    write(folder / ("a" if i % 2 else "b") / f"{{i}}.jpg", jpeg_bytes(seed=i))
index = SampleIndex.from_folder(folder, progress=False)
kw = json.loads({kw!r})
held = []


def collect(worker_id):
    gc.collect()  # what a worker's own allocations trigger sooner or later, here at once


def leave_one(cycle):
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, num_workers=2,
                        worker_init_fn=collect, **kw)
    for _ in loader:
        break
    if cycle:  # a training script's object that holds its loader and itself: only the collector frees it
        holder = {{"loader": loader}}
        holder["self"] = holder


gc.disable()  # the parent never collects: a cycle's loader is alive when the next loader forks
for k in range(4):
    leave_one(cycle={cycle})
print("done")
"""


@pytest.mark.parametrize("cycle", [False, True], ids=["dropped", "in a cycle"])
@pytest.mark.parametrize("kind", KINDS)
def test_loaders_dropped_after_break_are_silent(tmp_path, kind, cycle):
    kw = dict(KINDS[kind], **({"persistent_workers": True} if kind == "torch" else {}))
    import json

    code = SCRIPT.format(root=str(ROOT), tests=str(ROOT), folder=str(tmp_path / "data"),
                         kw=json.dumps(kw), cycle=cycle)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("done"), out.stderr[-3000:]
    assert "Exception ignored" not in out.stderr and "can only test a child process" not in out.stderr, \
        out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]


@pytest.mark.parametrize("kind", KINDS)
def test_a_dropped_loader_is_freed_at_once_as_a_dataloader_is(defect_index, kind):
    """No reference cycle through the loader: dropped without close(), it and its workers go at once, not
    whenever the garbage collector runs (in whichever process, thread or worker that happens to be)."""
    import gc
    import weakref

    from dali_backend import AugmentSpec, DaliLoader
    from fallback import ImageDataset

    gc.collect()
    gc.disable()
    try:
        loader = DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16)), batch_size=2, num_workers=2,
                            **KINDS[kind])
        for _ in loader:
            break
        freed = weakref.ref(loader)
        del loader
        assert freed() is None, [type(r).__name__ for r in gc.get_referrers(freed())]
    finally:
        gc.enable()
