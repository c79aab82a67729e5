"""No host sync in the steady state of a ``dali-gpu`` pass (``dali_backend.core.transfer``).

A host-to-device copy from pageable memory, or with ``non_blocking=False``, makes torch's CUDA copy
synchronise the stream: ``next()`` then waits for the training step's queued GPU work. On the CPU the
per-batch code runs with its tensors on the ``meta`` device while a guard records every host-to-device
copy that would block (pageable source or ``non_blocking=False``); the CUDA case runs a real pass
under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import traceback
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.helpers import needs_cuda
from dali_backend import AugmentSpec
from dali_backend.core.tensors import apply_batch_ops, batch_params, normalize
from dali_backend.transforms import Normalize, RandomErasing, Resize

META = torch.device("meta")


class BlockingCopies:
    """Every host-to-device copy made while installed that would block the host on a GPU: from pageable
    memory or with ``non_blocking=False``. ``pin_memory()`` is simulated (no accelerator here): the
    tensors it returns count as pinned."""

    def __init__(self, monkeypatch):
        self.blocking: list[str] = []
        self._pinned: list[torch.Tensor] = []
        T = torch.Tensor
        to, copy_, tensor, as_tensor = T.to, T.copy_, torch.tensor, torch.as_tensor

        def pin_memory(t, *args, **kwargs):
            pinned = t.clone()
            self._pinned.append(pinned)
            return pinned

        def checked_to(t, *args, **kwargs):
            target = kwargs.get("device")
            for a in args:
                if isinstance(a, (str, torch.device)):
                    target = a
                elif isinstance(a, torch.Tensor):
                    target = a.device
            non_blocking = kwargs.get("non_blocking", any(a is True for a in args))
            if target is not None:
                self._check(t, torch.device(target), non_blocking)
            return to(t, *args, **kwargs)

        def checked_copy(dst, src, non_blocking=False):
            self._check(src, dst.device, non_blocking)
            return copy_(dst, src, non_blocking)

        def made_on(fn):
            def make(data, *args, **kwargs):
                device = kwargs.get("device")
                if device is not None and torch.device(device).type != "cpu" and not isinstance(data, torch.Tensor):
                    self._record(f"torch.{fn.__name__}(..., device={device!r}) from Python data")
                return fn(data, *args, **kwargs)
            return make

        monkeypatch.setattr(T, "pin_memory", pin_memory)
        monkeypatch.setattr(T, "to", checked_to)
        monkeypatch.setattr(T, "copy_", checked_copy)
        monkeypatch.setattr(torch, "tensor", made_on(tensor))
        monkeypatch.setattr(torch, "as_tensor", made_on(as_tensor))

    def _check(self, src: torch.Tensor, target: torch.device, non_blocking: bool) -> None:
        if src.device.type != "cpu" or target.type == "cpu":
            return
        pinned = any(src is p for p in self._pinned)
        if not (pinned and non_blocking):
            self._record(f"copy to {target} from {'pinned' if pinned else 'pageable'} memory, "
                         f"non_blocking={non_blocking}")

    def _record(self, what: str) -> None:
        here = [f for f in traceback.extract_stack() if "dali_backend" in f.filename]  # the innermost library frame
        where = f"{here[-1].filename.rsplit('dali_backend', 1)[1]}:{here[-1].lineno}" if here else "the test"
        self.blocking.append(f"{what} at {where}")


def test_the_guard_sees_a_blocking_copy(monkeypatch):
    """The guard can fail: a pageable copy, and a pinned one without non_blocking, are recorded; a pinned
    non-blocking one is not."""
    guard = BlockingCopies(monkeypatch)
    host = torch.arange(3)
    host.to(META)
    host.pin_memory().to(META)
    torch.tensor([1.0, 2.0], device=META)
    assert len(guard.blocking) == 3, guard.blocking
    host.pin_memory().to(META, non_blocking=True)
    torch.empty(3, dtype=host.dtype, device=META).copy_(host.pin_memory(), non_blocking=True)
    assert len(guard.blocking) == 3


def runner_on(device: torch.device, labels: np.ndarray):
    """A DALI runner without a pipeline, for its per-batch step :meth:`DaliRunner._batch`."""
    from dali_backend.dali.runner import DaliRunner

    runner = object.__new__(DaliRunner)
    index = SimpleNamespace(labels=labels)
    runner.__dict__.update(samples=SimpleNamespace(index=index, spec=SimpleNamespace(pad_batch=None)),
                           with_params=False, clip_len=None, device=device, _queue=deque(), reader_ops=0)
    return runner


def runner_batch(runner, n: int, padded: int):
    """One batch of ``n`` draws (the last ``padded`` rows padding) as DALI hands it over on ``device``."""
    from dali_backend.core.boundary import Kind

    expected = np.zeros((n, 5), np.int64)
    expected[:, 0] = expected[:, 1] = np.arange(n)
    expected[n - padded:, 4] = Kind.PAD
    returned = np.stack([np.arange(n), np.zeros(n, np.int64), np.zeros(n, np.int64)], axis=1)  # served, read, work
    out = {"images": torch.empty(n, 3, 8, 8, dtype=torch.uint8, device=runner.device),
           "labels": torch.from_numpy(runner.samples.index.labels[:n].copy()).view(n, 1)}  # a CPU output of DALI
    return runner._batch(expected, out, returned)


MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
SPEC = AugmentSpec(ops=[Resize((8, 8)), Normalize(MEAN, STD), RandomErasing(p=1.0, value=(0.1, 0.2, 0.3))])


def per_batch_steps(device: torch.device) -> None:
    """What a ``dali-gpu`` pass does per batch on the host: the runner's labels (and padding rows cut
    off), normalisation, the batch operations, and the clip labels."""
    from dali_backend.facade.clipbatches import ClipBatches

    runner = runner_on(device, np.arange(8, dtype=np.int64) % 3)
    batch = runner_batch(runner, 8, padded=2)
    assert batch.images.device == device and batch.labels.device == device and len(batch.labels) == 6
    images = normalize(batch.images, SPEC)
    per_draw = batch_params(SPEC, 0, batch.epochs, batch.positions)
    images = apply_batch_ops(images, SPEC, per_draw)
    assert images.shape == (6, 3, 8, 8) and images.device == device
    # clips: 2 clips of 3 frames regrouped, labelled by clip
    sampler = SimpleNamespace(labels=np.array([4, 5]), table=lambda: None, frames=lambda c: np.arange(6).reshape(2, 3))
    plan = SimpleNamespace(sampler=sampler, clip_len=3, clip_draws=lambda epoch, offset, n: np.array([[0, 0], [1, 0]]))
    clips = ClipBatches(plan, SimpleNamespace(batches_done=0, pass_offset=0, account=lambda *a: None), 2)
    clips.begin_pass(0, 2)
    frames = SimpleNamespace(positions=np.zeros(6, np.int64), served=np.arange(6), labels=batch.labels, sizes=None)
    clip_images, clip_labels = clips.output(frames, images, None)
    assert clip_images.shape == (2, 3, 3, 8, 8) and clip_labels.device == device


def test_the_per_batch_path_makes_no_blocking_host_to_device_copy(monkeypatch):
    guard = BlockingCopies(monkeypatch)
    per_batch_steps(META)  # the first batch may make the constants (once per device, a blocking copy each)
    guard.blocking.clear()
    for _ in range(3):
        per_batch_steps(META)
    assert guard.blocking == [], "blocking host-to-device copies in the steady state:\n" + "\n".join(guard.blocking)


def test_constants_are_made_once_per_device(monkeypatch):
    """Normalisation's scale and shift and the erasing fill are reused, not copied again per batch."""
    made = []
    to = torch.Tensor.to
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: t.clone())
    per_batch_steps(META)
    def recording_to(t, *args, **kwargs):
        if t.device.type == "cpu":  # a copy from the host (conversions on the device are not)
            made.append(tuple(t.shape))
        return to(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recording_to)
    per_batch_steps(META)
    # per batch only the runner's row indices and labels, and the clip labels: 1-D tensors of a few samples
    assert all(len(shape) == 1 for shape in made), made


def test_the_cpu_path_is_unchanged_by_the_staging():
    """On the CPU nothing is staged: the same tensors, labels as the index says."""
    runner = runner_on(torch.device("cpu"), np.array([2, 0, 1, 2], np.int64))
    batch = runner_batch(runner, 4, padded=1)
    assert batch.labels.tolist() == [2, 0, 1] and not batch.labels.is_pinned()


@pytest.mark.cuda
@needs_cuda
def test_a_dali_gpu_pass_never_syncs_the_host_after_its_first_batch(defect_index):
    """The steady state of a ``dali-gpu`` pass under ``set_sync_debug_mode("error")``: any synchronising
    CUDA call in torch (a pageable copy, ``.item()``, a boolean mask) raises."""
    from dali_backend import DaliLoader, WeightedSampler
    from fallback import ImageDataset

    spec = AugmentSpec(ops=[Resize((32, 32)), Normalize(MEAN, STD), RandomErasing(p=1.0, value=(0.1, 0.2, 0.3))])
    ds = ImageDataset(defect_index, spec, seed=0)
    sampler = WeightedSampler(defect_index, num_samples=44, seed=1)  # 6 batches, the last one partial
    seen = 0
    with DaliLoader(ds, batch_size=8, sampler=sampler, device="cuda", backend="dali") as loader:
        it = iter(loader)
        images, labels = next(it)  # the first batch builds the constants
        torch.cuda.set_sync_debug_mode("error")
        try:
            for images, labels in it:
                seen += len(labels)
                _ = images * 2  # a consumer kernel; no host read
        finally:
            torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
    assert seen == 36 and images.device.type == "cuda" and labels.device.type == "cuda"


@pytest.mark.cuda
@needs_cuda
def test_the_data_wait_on_dali_gpu_is_host_wait_not_the_training_steps_gpu_time(defect_index):
    """A GPU-bound training step (``torch.cuda._sleep`` on the consumer's stream, ~40 ms a batch, never
    waited for by the host): the loader's data wait stays far below the GPU time of the steps. With a
    host sync in ``next()`` every batch waited for the step before it, and telemetry blamed the loader."""
    import time

    from dali_backend import DaliLoader, WeightedSampler
    from fallback import ImageDataset

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles = int(10_000_000 * 40.0 / max(start.elapsed_time(end), 1e-3))  # ~40 ms of GPU time
    ds = ImageDataset(defect_index, AugmentSpec(size=32), seed=0)
    sampler = WeightedSampler(defect_index, num_samples=96, seed=2)
    with DaliLoader(ds, batch_size=8, sampler=sampler, device="cuda", backend="dali", prefetch_queue_depth=2) as loader:
        next(iter(loader))  # built and warm
        t0 = time.perf_counter()
        for images, labels in loader:
            torch.cuda._sleep(cycles)  # the training step, queued behind the batch's copy
        host_s = time.perf_counter() - t0
        waited = loader.metrics()["data_wait_s"]
        torch.cuda.synchronize()
        gpu_s = time.perf_counter() - t0
    assert gpu_s > 0.3, gpu_s  # 12 steps of ~40 ms ran on the GPU
    assert waited < 0.5 * gpu_s, (waited, host_s, gpu_s)
