"""The thread executor (``backend="torch-threads"``): the torch executor's pixels made on threads of this
process, with its contract (prefetch depth, timeouts, close, worker_init_fn), and the per-sample state
that threads share made safe (OpenCV's CLAHE objects, the reader's fetched-ahead tables). The
invariants every executor keeps (every sample once, resume, on_error) run over it in the shared
backend-parametrized tests (``tests.helpers.KINDS``)."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
import torch

from dali_backend import AugmentSpec, DaliLoader, LoaderClosedError, LoaderTimeoutError
from dali_backend.core import reading
from dali_backend.facade.executors import backend_choices, executor_kind
from dali_backend.transforms import Clahe, color
from fallback import ImageDataset
from fallback.threads import THREAD_PREFIX, ThreadExecutor
from tests.helpers import run_cli


def pool_threads(settle_s: float = 0.0) -> list[str]:
    """The executor's live threads; ``settle_s``: wait up to that long for them to end (a thread making a
    batch when close() came ends once it is made)."""
    deadline = time.monotonic() + settle_s
    while True:
        alive = [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


@pytest.fixture
def ds(defect_index):
    return ImageDataset(defect_index, AugmentSpec(size=32, color="gray"), seed=4)


def batches(loader) -> list:
    return [(x.clone(), y.clone(), m["planned"].clone(), m["params"]) for x, y, m in loader]


@pytest.mark.parametrize("workers", [0, 3])
def test_the_same_batches_as_the_torch_executor_over_two_epochs(ds, workers):
    """Same draws, same order, same pixels and parameters as DataLoader workers (3 threads: batches
    finish out of order, they are yielded in order)."""
    kw = dict(batch_size=7, shuffle=True, seed=9, return_meta=True, device="cpu")
    threads = DaliLoader(ds, backend="torch-threads", num_workers=workers, **kw)
    torch_ = DaliLoader(ds, backend="torch", num_workers=2, **kw)
    for epoch in (0, 1):
        threads.set_epoch(epoch)
        torch_.set_epoch(epoch)
        got, want = batches(threads), batches(torch_)
        assert len(got) == len(want) == 9
        for (x, y, planned, params), (wx, wy, wplanned, wparams) in zip(got, want):
            assert torch.equal(x, wx) and torch.equal(y, wy) and np.array_equal(planned, wplanned)
            assert params == wparams
    assert threads.backend == "torch-threads" and isinstance(threads._executor, ThreadExecutor)
    threads.close()
    torch_.close()
    assert pool_threads(settle_s=5) == []


def test_clahe_objects_are_per_thread_a_shared_one_gives_other_pixels():
    """OpenCV's CLAHE keeps working buffers in the object: applied by threads at once, one shared object
    gives wrong pixels (measured: 9-12 of 16 images), one per thread the serial ones."""
    rng = np.random.default_rng(0)
    images = [cv2.GaussianBlur(rng.integers(0, 256, hw).astype(np.uint8), (0, 0), 2)
              for hw in [(480, 640), (240, 320), (300, 500), (200, 200)] * 4]
    op = Clahe()
    want = [op.apply(im, {}) for im in images]
    with ThreadPoolExecutor(4) as pool:
        got = [list(pool.map(lambda im: op.apply(im, {}), images)) for _ in range(3)]
        shared = cv2.createCLAHE(2.0, (8, 8))
        racy = [list(pool.map(shared.apply, images)) for _ in range(3)]
    assert all(np.array_equal(a, b) for run in got for a, b in zip(run, want))
    # the check can fail: a shared object under the same threads does give other pixels
    assert any(not np.array_equal(a, b) for run in racy for a, b in zip(run, want))
    assert color.cv_clahe(2.0, (8, 8)) is color.cv_clahe(2.0, (8, 8))  # made once per thread and setting


def test_prefetching_from_many_threads_at_once_is_safe(monkeypatch):
    """The fetched-ahead tables of a URL reader under 8 threads evicting at once: unlocked, threads raised
    KeyError and 'dictionary changed size during iteration' (7 of 8 here)."""
    monkeypatch.setattr(reading, "MAX_PREFETCHED", 4)
    n = 1000
    reader = reading.SampleReader("s3://bucket", np.zeros(0, np.uint8), np.zeros(1, np.int64), np.zeros(n, np.int64),
                                  np.zeros(n, np.int64), 0)
    reader.bucket = object()  # a URL root: prefetch runs (the fetch itself is replaced)
    reader._fetch = lambda i: (b"", None)
    errors = []

    def work(k: int) -> None:
        try:
            for j in range(300):
                reader.prefetch(range(7 * k + j, 7 * k + j + 6))
                reader._fetched(7 * k + j)
        except Exception as e:  # noqa: BLE001 - collected, asserted below
            errors.append(repr(e))

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows every run
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(work, range(8)))
    finally:
        sys.setswitchinterval(before)
    assert errors == []


def test_pool_threads_run_on_one_intra_op_thread_and_call_worker_init_fn(ds):
    seen = []
    before = torch.get_num_threads()
    init = lambda k: seen.append((k, threading.current_thread().name, torch.get_num_threads()))  # noqa: E731
    with DaliLoader(ds, batch_size=8, num_workers=3, backend="torch-threads", worker_init_fn=init) as loader:
        assert sum(len(y) for _, y in loader) == len(ds)
        m = loader.metrics()
    assert sorted(k for k, _, _ in seen) == [0, 1, 2]
    assert all(name.startswith(THREAD_PREFIX) and threads == 1 for _, name, threads in seen)
    assert torch.get_num_threads() == before  # the training process's own setting untouched
    assert m["intra_op_threads"] == 1 and m["workers"] == 0 and m["stage_ms.decode"] is not None
    assert m["how"]["decode"] == "same" and "threads" in m["how"]["read"]
    assert m["threads"] == 3


def test_the_verdict_names_more_executor_threads_than_cores(ds):
    from dali_backend.telemetry import oversubscription, verdict

    with DaliLoader(ds, batch_size=4, num_workers=3, backend="torch-threads") as loader:
        for _ in loader:
            pass
        m = loader.metrics()
    assert m["threads"] == 3 and m["workers"] == 0
    text = verdict(dict(m, data_wait_fraction=0.9), cores=2)
    assert ("Thread oversubscription: 3 executor thread(s) x 1 torch intra-op thread(s) = 3 threads on 2 cores"
            in text and "num_workers=2 or fewer for backend='torch-threads'" in text)
    assert "no more executor threads than cores first" in text
    assert "Thread oversubscription" not in verdict(dict(m, data_wait_fraction=0.9), cores=4)
    assert oversubscription(dict(m, threads=2), cores=2) is None


@pytest.mark.parametrize("factor", [1, 3])
def test_prefetch_factor_bounds_the_batches_in_flight(ds, monkeypatch, factor):
    reads = []
    real = ds.reader.read
    monkeypatch.setattr(ds.reader, "read", lambda i, epoch=None: reads.append(i) or real(i, epoch))
    with DaliLoader(ds, batch_size=2, num_workers=2, prefetch_factor=factor, backend="torch-threads") as loader:
        it = iter(loader)
        next(it)
        time.sleep(0.5)  # the threads fill what they may
        ahead = len(reads)
        del it
    depth = 2 * factor  # num_workers * prefetch_factor batches in flight, the first one yielded among them
    assert depth * 2 <= ahead <= (depth + 1) * 2


def test_a_slow_batch_raises_the_timeout_and_close_from_another_thread_ends_a_wait(ds, monkeypatch):
    real = ds.reader.read
    monkeypatch.setattr(ds.reader, "read", lambda i, epoch=None: time.sleep(0.3) or real(i, epoch))
    loader = DaliLoader(ds, batch_size=4, num_workers=1, backend="torch-threads", timeout=0.1)
    with pytest.raises(LoaderTimeoutError, match="timeout=0.1"):
        next(iter(loader))
    loader.close()
    waiting = DaliLoader(ds, batch_size=4, num_workers=1, backend="torch-threads")
    threading.Timer(0.2, waiting.close).start()
    with pytest.raises(LoaderClosedError):
        for _ in waiting:
            pass
    assert pool_threads(settle_s=10) == []


def test_no_thread_outlives_the_loader(ds):
    """A pass left early, an iterator deleted, an error mid-epoch: the threads stay for the next pass;
    close() (or the loader dropped) ends them."""
    loader = DaliLoader(ds, batch_size=4, num_workers=2, backend="torch-threads")
    for k, _ in enumerate(loader):
        if k == 1:
            break
    it = iter(loader)
    next(it)
    del it
    boom = DaliLoader(ds, batch_size=4, num_workers=2, backend="torch-threads",
                      batch_transform=lambda x, y: (_ for _ in ()).throw(ValueError("mid-epoch")))
    with pytest.raises(ValueError, match="mid-epoch"):
        list(boom)
    assert sum(len(y) for _, y in loader) == len(ds)  # the next pass whole
    assert pool_threads()
    loader.close()
    del boom
    import gc

    gc.collect()
    assert pool_threads(settle_s=5) == []


def test_the_registry_and_the_command_line_offer_it(ds, capsys):
    kind = executor_kind("torch-threads")
    assert kind.threads and not kind.worker_processes and not kind.dali and not kind.gpu
    assert "torch-threads" in backend_choices()
    rc, out, err = run_cli(["diagnose", "--help"], capsys)
    assert rc == 0 and "torch-threads" in out
    with pytest.warns(UserWarning, match="multiprocessing_context='spawn' has no effect on the torch-threads"):
        DaliLoader(ds, batch_size=4, num_workers=1, backend="torch-threads", multiprocessing_context="spawn").close()


def test_opencvs_own_pool_is_off_while_threads_run_and_restored_after(ds):
    """The executor's threads are the parallelism: OpenCV's pool (which fought them for the cores) is off
    while a pool of threads runs, and the setting found before is back once the last one closes."""
    before = cv2.getNumThreads()
    cv2.setNumThreads(2)
    try:
        inline = DaliLoader(ds, batch_size=8, num_workers=0, backend="torch-threads")
        next(iter(inline))
        assert cv2.getNumThreads() == 2  # in the calling thread: OpenCV's pool is the only parallelism
        a = DaliLoader(ds, batch_size=8, num_workers=2, backend="torch-threads")
        b = DaliLoader(ds, batch_size=8, num_workers=1, backend="torch-threads")
        next(iter(a))
        next(iter(b))
        assert cv2.getNumThreads() == 1  # setNumThreads(0): no pool
        a.close()
        assert cv2.getNumThreads() == 1  # b still runs
        b.close()
        inline.close()
        assert cv2.getNumThreads() == 2
    finally:
        cv2.setNumThreads(before)


@pytest.mark.parametrize("workers", [1, 3])
def test_clips_with_a_bad_frame_are_replaced_whole_as_on_worker_processes(tmp_path, workers):
    """A batch is cut into one share per thread, whole clips each (a clip with a bad frame is replaced
    whole under skip): the same clips, parameters and pixels as DataLoader workers."""
    from dali_backend import ClipSampler, SampleIndex
    from dali_backend.transforms import RandomHorizontalFlip, RandomResizedCrop
    from tests.sampling.test_clips import SKIP_LAYOUT, make_sequences

    root = make_sequences(tmp_path / "data", SKIP_LAYOUT)
    index = SampleIndex.from_folder(root, progress=False)
    (root / "ok/a/f5.jpg").write_bytes(b"\0" * (root / "ok/a/f5.jpg").stat().st_size)
    runs = {}
    for backend, w in (("torch", 2), ("torch-threads", workers)):
        sampler = ClipSampler(index, clip_len=3, step=3, mode="uniform", seed=2)
        ds = ImageDataset(index, AugmentSpec(ops=[RandomResizedCrop(16, scale=(0.5, 1.0)), RandomHorizontalFlip()]),
                          seed=4, on_error="skip")
        with DaliLoader(ds, batch_size=2, sampler=sampler, return_meta=True, num_workers=w, backend=backend) as loader:
            runs[backend] = ([(x, y, m) for x, y, m in loader], loader.stats())
    (got, gstats), (want, wstats) = runs["torch-threads"], runs["torch"]
    assert gstats["skipped"] == wstats["skipped"] >= 1 and gstats["skipped_files"] == wstats["skipped_files"]
    for (x, y, m), (u, v, w) in zip(got, want, strict=True):
        assert torch.equal(x, u) and torch.equal(y, v) and torch.equal(m["clip"], w["clip"]) and m["path"] == w["path"]
        assert m["params"] == w["params"]
