"""The torch executor's workers: a pass left by ``break`` stops them, close() from another thread reaches
those of a pass in progress (persistent or not)."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time

import pytest

from dali_backend import AugmentSpec, DaliLoader, SampleIndex
from dali_backend.errors import LoaderClosedError
from fallback import ImageDataset


def _children() -> set[int]:
    return {p.pid for p in multiprocessing.active_children()}


def test_a_pass_left_with_break_stops_its_workers_without_persistent_workers(defect_root):
    """``for x in loader: break`` (an evaluation cut short) without persistent workers: the abandoned
    pass's DataLoader iterator is collected with the generator and its workers stop at once (the
    executor holds it weakly, for close(); a strong reference kept them and their prefetched batches
    until the next pass)."""
    index = SampleIndex.from_folder(defect_root, progress=False)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, num_workers=2,
                        persistent_workers=False, backend="torch", device="cpu")
    before = _children()
    try:
        for _ in loader:
            break
        gc.collect()
        deadline = time.monotonic() + 5
        while _children() - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _children() - before, "the abandoned pass's workers are still running"
    finally:
        loader.close()


@pytest.mark.parametrize("persistent", [True, False])
def test_close_from_another_thread_during_iteration_ends_the_pass(defect_root, persistent):
    """close() from another thread while the main thread iterates: LoaderClosedError within seconds, no
    worker left."""
    index = SampleIndex.from_folder(defect_root, progress=False)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=1, num_workers=2,
                        persistent_workers=persistent, backend="torch", device="cpu")
    before = _children()
    it = iter(loader)
    next(it)
    timer = threading.Timer(0.05, loader.close)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(LoaderClosedError):
        for _ in range(10_000):
            next(it)
    timer.join()
    assert time.monotonic() - t0 < 10
    assert not _children() - before


def test_worker_pids_of_a_pass_without_persistent_workers(defect_root):
    """The telemetry's worker figures and a dead worker's pid come from the running pass's workers, also
    when they are not persistent (the DataLoader then keeps no iterator of its own)."""
    index = SampleIndex.from_folder(defect_root, progress=False)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, num_workers=2,
                        persistent_workers=False, backend="torch", device="cpu")
    try:
        before = _children()
        it = iter(loader)
        next(it)
        pids = loader._executor.worker_pids()
        assert len(pids) == 2 and set(pids) == _children() - before
    finally:
        loader.close()
