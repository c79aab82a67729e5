"""Reliability of the loaders, third attack (issue 18): dropped loaders are freed, close() from another
thread ends a waiting iterator, a batch's memory stays mapped whatever share_memory_() does, shuffles
follow torch.manual_seed, and epochs, lying samplers and tiny timeouts are handled.

Anything that could hang or crash the interpreter runs in a child process with a timeout.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import KINDS
from dali_backend import AugmentSpec, ConfigError, DaliLoader, SampleIndex, WeightedSampler
from fallback import ImageDataset

ROOT = Path(__file__).resolve().parents[2]


def run_child(tmp_path: Path, body: str, timeout: float = 120, **fmt) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body).format(**fmt))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


PRELUDE = """
import gc, os, sys, threading
import numpy as np, torch
from dali_backend import AugmentSpec, DaliLoader, SampleIndex
from fallback import ImageDataset
ds = ImageDataset(SampleIndex.from_folder({root!r}, progress=False), AugmentSpec(size={size}), seed=0)


def slow_reads(seconds):  # every file read takes `seconds` more: slow storage, busy workers
    import time
    read = ds.reader.read

    def slow(*a, **k):
        time.sleep(seconds)
        return read(*a, **k)

    ds.reader.read = slow
"""


@pytest.mark.slow
def test_dali_loaders_dropped_after_iterating_are_freed(defect_root, tmp_path):
    """A loop that makes a loader per epoch and never closes it: pipelines, reader processes, threads
    and shared memory must not pile up (before: one pipeline thread's frame kept each runner alive)."""
    proc = run_child(tmp_path, PRELUDE + """
import psutil
def shm_maps():
    with open("/proc/self/maps") as f:
        return sum("/dev/shm/" in line for line in f)
def state():
    return len(psutil.Process().children(recursive=True)), threading.active_count(), shm_maps()
for i in range(5):
    loader = DaliLoader(ds, batch_size=4, device="cpu", backend="dali", num_workers=1)
    for _ in loader:
        pass
    if i == 0:
        gc.collect()
        first = state()
    del loader
    gc.collect()
print("STATE", (first, state()))
""", root=str(defect_root), size=16)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("STATE"))
    (children_one, threads_one, shm_one), (children, threads, shm) = eval(line[len("STATE"):])  # noqa: S307
    assert children_one >= 1 and threads_one > 1  # one live loader has its reader process and threads
    assert children <= 1 and threads <= 2 and shm == 0, line  # all of them gone (a resource tracker may stay)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_close_from_another_thread_ends_a_waiting_iterator(defect_root, tmp_path, kind):
    """close() from the main thread while another thread waits in next(): that thread raises
    LoaderClosedError promptly on both backends (before: the torch backend's waited forever)."""
    proc = run_child(tmp_path, PRELUDE + """
import time
from dali_backend.errors import LoaderClosedError
slow_reads(0.2)
loader = DaliLoader(ds, batch_size=8, device="cpu", backend={backend!r}, num_workers=1)
it = iter(loader)
next(it)
result = {{}}
def consume():
    t = time.monotonic()
    try:
        while True:
            next(it)
    except BaseException as e:
        result["error"] = (type(e).__name__, time.monotonic() - t)
thread = threading.Thread(target=consume, daemon=True)
thread.start()
time.sleep(0.3)
loader.close()
thread.join(30)
print("RESULT", thread.is_alive(), result.get("error"))
""", root=str(defect_root), size=16, backend=KINDS[kind]["backend"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    assert "RESULT False ('LoaderClosedError'" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("how", ["numpy-share_memory_", "dlpack-share_memory_", "numpy-queue"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_memory_reached_through_numpy_or_dlpack_survives_share_memory(defect_root, tmp_path, kind, how):
    """``n = batch.numpy()`` then ``batch.share_memory_()`` (or a multiprocessing queue): ``n`` keeps its
    pixels for the rest of the pass and stays readable after it (before: silently the next batch, then
    a segfault once the pool was released)."""
    proc = run_child(tmp_path, PRELUDE + """
import torch.multiprocessing as mp
from dali_backend.core.tensors import release_pooled_outputs
view, move = {how!r}.split("-")
with DaliLoader(ds, batch_size=4, device="cpu", backend={backend!r}) as loader:
    for k, (x, y) in enumerate(loader):
        if k == 1:
            n = x.numpy() if view == "numpy" else np.from_dlpack(x)
            snapshot = n.copy()
            if move == "queue":
                q = mp.Queue()
                q.put(x)
                q.get(timeout=30)
            else:
                x.share_memory_()
            del x
            gc.collect()
    during = np.array_equal(n, snapshot)
del loader
gc.collect()
release_pooled_outputs()
print("RESULT", during, np.array_equal(n, snapshot))
""", root=str(defect_root), size=96, backend=KINDS[kind]["backend"], how=how)
    assert proc.returncode == 0, f"exit {proc.returncode} (-11: segfault)\\n{proc.stderr[-3000:]}"
    assert "RESULT True True" in proc.stdout, proc.stdout


# ------------------------------------------------------------------------------------------ seeds
def _order(ds, **kw) -> list[int]:
    with DaliLoader(ds, batch_size=8, backend="torch", device="cpu", return_meta=True, **kw) as loader:
        return [int(i) for _, _, meta in loader for i in meta["index"]]


def test_shuffle_without_seed_follows_torch_manual_seed(defect_index):
    ds = ImageDataset(defect_index, AugmentSpec(size=16), seed=0)
    torch.manual_seed(1)
    a = _order(ds, shuffle=True)
    torch.manual_seed(1)
    b = _order(ds, shuffle=True)
    torch.manual_seed(2)
    c = _order(ds, shuffle=True)
    assert a == b and a != c and sorted(a) == sorted(c) == list(range(len(defect_index)))
    torch.manual_seed(3)
    assert _order(ds, shuffle=True, seed=0) == _order(ds, shuffle=True, seed=0)  # an explicit seed wins
    assert _order(ds) == list(range(len(defect_index)))  # no shuffle: the index order, no seed involved


def test_distributed_shuffle_without_seed_is_the_same_on_every_rank(defect_index, monkeypatch):
    """Ranks' global RNGs may differ: in a distributed run the default is seed 0 (DistributedSampler's)."""
    from dali_backend import sampler as mod

    monkeypatch.setattr(mod, "_dist_defaults", lambda rank, world: (0, 2))
    torch.manual_seed(1)
    assert mod.default_seed(True) == 0
    torch.manual_seed(2)
    assert mod.default_seed(True) == 0
    monkeypatch.setattr(mod, "_dist_defaults", lambda rank, world: (0, 1))
    torch.manual_seed(1)
    first = mod.default_seed(True)
    torch.manual_seed(1)
    assert mod.default_seed(True) == first != 0


# ------------------------------------------------------------------------------------------ edges
@pytest.mark.parametrize("epoch", [2**63, 2**62, -1, 1.5, True])
def test_out_of_range_epochs_are_a_config_error_everywhere(defect_index, epoch):
    ds = ImageDataset(defect_index, AugmentSpec(size=16))
    sampler = WeightedSampler(defect_index, seed=0)
    with DaliLoader(ds, batch_size=4, backend="torch", device="cpu") as loader:
        for target in (loader, sampler, ds):
            with pytest.raises(ConfigError, match=r"set_epoch.*\[0, 2\*\*62\)"):
                target.set_epoch(epoch)
    sampler.set_epoch(2**62 - 1)  # the largest accepted


class LyingSampler(torch.utils.data.Sampler):
    """Yields ``n`` indices but says it has ``claimed``."""

    def __init__(self, n: int, claimed: int):
        self.n, self.claimed = n, claimed

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.claimed


@pytest.mark.parametrize("n, claimed", [(10, 18), (18, 10)])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_sampler_whose_len_lies_is_accounted_by_what_it_yields(defect_index, kind, n, claimed):
    ds = ImageDataset(defect_index, AugmentSpec(size=16))
    with DaliLoader(ds, batch_size=4, sampler=LyingSampler(n, claimed), backend=KINDS[kind]["backend"], device="cpu") as loader:
        served = sum(len(y) for _, y in loader)
        stats = loader.stats()
    assert served == n
    assert stats["draws"] == n and stats["yielded"] == n, stats


def test_a_dali_timeout_shorter_than_the_poll_interval_is_honoured():
    """The pipeline thread's wait never sleeps past the deadline (before: steps of 0.1 s whatever the
    timeout); checked on the waits themselves, not on a clock."""
    import queue

    from dali_backend.dali.runner import PipelineThread

    steps = []

    class Recording(queue.SimpleQueue):
        def get(self, block=True, timeout=None):
            steps.append(timeout)
            raise queue.Empty

    thread = PipelineThread()
    try:
        thread._results = Recording()
        deadline = time.monotonic() + 1e-6

        def poll():
            if time.monotonic() > deadline:
                raise TimeoutError

        with pytest.raises(TimeoutError):
            thread.wait(1, poll, deadline)
        assert steps and all(s <= 1e-6 for s in steps), steps
        steps.clear()
        with pytest.raises(TimeoutError):
            thread.wait(1, lambda: (_ for _ in ()).throw(TimeoutError()))  # no deadline: POLL_S steps
        assert steps == [PipelineThread.POLL_S]
    finally:
        thread.stop()


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_tiny_timeout_raises_the_loaders_timeout_error(defect_root, tmp_path, kind):
    proc = run_child(tmp_path, PRELUDE + """
import time
from dali_backend.errors import LoaderTimeoutError
slow_reads(0.5)
with DaliLoader(ds, batch_size=4, device="cpu", backend={backend!r}, num_workers=1, timeout=1e-6) as loader:
    t = time.monotonic()
    try:
        next(iter(loader))
        print("RESULT no error")
    except LoaderTimeoutError:
        print("RESULT timeout", time.monotonic() - t)
""", root=str(defect_root), size=16, backend=KINDS[kind]["backend"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT timeout" in proc.stdout, proc.stdout


# ------------------------------------------------------------------------------------------ backend choice
def test_the_fallback_from_auto_is_said_once_without_logging_configuration(defect_index, monkeypatch, caplog):
    """A plain script (no logging set up) learns which backend runs: device='auto' without the GPU is a
    FallbackWarning once per reason; an explicit choice is an INFO line only."""
    import warnings

    from dali_backend import FallbackWarning
    from dali_backend import arguments as mod

    monkeypatch.setattr(mod, "_ANNOUNCED", set())
    monkeypatch.setattr(mod, "cuda_device_count", lambda: 0)
    ds = ImageDataset(defect_index, AugmentSpec(size=16))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            DaliLoader(ds, batch_size=4).close()
        with caplog.at_level("INFO", logger="dali_backend"):
            DaliLoader(ds, batch_size=4, backend="torch").close()
    fallbacks = [w for w in seen if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in seen]
    assert "running torch because CUDA is not available" in str(fallbacks[0].message)
    assert "backend torch (backend='torch' was requested)" in caplog.text


def test_a_workers_error_that_mentions_a_timeout_is_raised_not_taken_for_a_poll_step():
    """The torch executor waits in steps of its own DataLoader timeout; only torch's exact timeout text
    is a step. A worker's RuntimeError that mentions "timed out after" (storage, user code) is raised:
    retrying would skip the batch torch already counted."""
    from fallback.executor import WAIT_POLL_S, TorchExecutor

    executor = object.__new__(TorchExecutor)
    executor.timeout, executor._closed = 0, False
    raised = iter([RuntimeError(f"DataLoader timed out after {WAIT_POLL_S} seconds"), RuntimeError("x"), ("batch",)])

    class Batches:
        _timeout = 0  # torch's iterator with worker processes: the executor sets its wait per step

        def __next__(self):
            item = next(raised)
            if isinstance(item, BaseException):
                raise item
            return item

    with pytest.raises(RuntimeError, match="^x$"):  # one poll step, then the worker's own error
        executor._next_batch(Batches())
    storage = iter([RuntimeError("Caught RuntimeError in DataLoader worker: NFS read timed out after 30 seconds")])

    class Failing:
        _timeout = 0

        def __next__(self):
            raise next(storage)

    with pytest.raises(RuntimeError, match="NFS read timed out"):
        executor._next_batch(Failing())


def test_a_new_pass_after_break_waits_for_busy_persistent_workers(defect_root, tmp_path):
    """Persistent workers still busy with the old pass's prefetch: the next pass waits for them (it used
    to raise torch's 'DataLoader timed out after 0.05 seconds' from the resume handshake)."""
    proc = run_child(tmp_path, PRELUDE + """
import time
slow_reads(0.1)
loader = DaliLoader(ds, batch_size=4, device="cpu", backend="torch", num_workers=1, prefetch_factor=4)
for p in range(3):
    for k, _ in enumerate(loader):
        if p < 2 and k == 0:
            break
print("RESULT ok")
loader.close()
""", root=str(defect_root), size=16)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT ok" in proc.stdout


def test_the_torch_backend_leaves_the_global_rng_alone(defect_index):
    """DataLoader draws each pass's worker seed from torch's global RNG; the executor gives it its own
    generator, so a training script's random numbers do not depend on the backend."""
    ds = ImageDataset(defect_index, AugmentSpec(size=16))
    with DaliLoader(ds, batch_size=8, backend="torch", device="cpu", num_workers=1, seed=0) as loader:
        torch.manual_seed(5)
        list(loader)
        after = torch.rand(1)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(1))


def test_nan_timeout_is_refused(defect_index):
    with pytest.raises(ConfigError, match="timeout=nan"):
        DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16)), batch_size=4, backend="torch", timeout=float("nan"))


def test_eval_removes_a_blur_of_random_sigma_and_keeps_a_fixed_one():
    from dali_backend.transforms import CenterCrop, GaussianBlur

    spec = AugmentSpec(ops=[GaussianBlur(5), GaussianBlur(3, 1.0), CenterCrop(8)])
    assert [type(op).__name__ for op in spec.eval().ops] == ["GaussianBlur", "CenterCrop"]
    assert spec.eval().ops[0] == GaussianBlur(3, 1.0) and not spec.eval().is_random


@pytest.mark.parametrize("persistent", [True, False])
def test_close_stops_the_workers_of_a_pass_in_progress(defect_root, persistent):
    """close() while a pass is suspended between batches (or from another thread) stops that pass's
    DataLoader workers at once, persistent or not (before: without persistent workers they lived on
    until the suspended iterator was collected); next() then raises LoaderClosedError."""
    import multiprocessing

    from dali_backend.errors import LoaderClosedError

    index = SampleIndex.from_folder(defect_root, progress=False)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, num_workers=2,
                        persistent_workers=persistent, backend="torch", device="cpu")
    before = {p.pid for p in multiprocessing.active_children()}  # other tests' processes may still run
    it = iter(loader)
    next(it)
    workers = {p.pid for p in multiprocessing.active_children()} - before
    assert len(workers) == 2
    loader.close()
    assert not workers & {p.pid for p in multiprocessing.active_children()}, "the pass's workers were stopped"
    with pytest.raises(LoaderClosedError):
        next(it)


@pytest.mark.parametrize("persistent", [True, False])
def test_close_landing_while_a_torch_pass_starts_leaves_no_worker(defect_root, persistent):
    """close() from another thread while iter() is starting the DataLoader's workers (simulated: it lands
    right after they started): the pass raises LoaderClosedError and no worker process outlives it."""
    import multiprocessing

    from dali_backend.errors import LoaderClosedError

    index = SampleIndex.from_folder(defect_root, progress=False)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, num_workers=2,
                        persistent_workers=persistent, backend="torch", device="cpu")
    executor = loader._executor
    real_start = executor._start_pass
    started = []

    def start_then_close():
        batches = real_start()
        started.extend(w.pid for w in getattr(batches, "_workers", []))
        loader.close()  # what another thread's close() does, at the worst moment
        return batches

    executor._start_pass = start_then_close
    with pytest.raises(LoaderClosedError, match="closed while this iterator was starting a pass"):
        next(iter(loader))
    assert len(started) == 2
    assert not set(started) & {p.pid for p in multiprocessing.active_children()}, "the pass's workers were stopped"
