"""What a CUDA machine does to process start-up, simulated on the CPU.

On a GPU machine ``torch.cuda.is_available()`` initialises the CUDA driver, and DALI then refuses to
fork its reader workers (``nvidia/dali/_multiproc/pool.py`` checks ``IsDriverInitialized``). These
tests make DALI's own check answer "initialised" and show the loader still builds (it spawns), that
probing for GPUs never initialises the driver, and that torchrun ranks get their own GPU and share
the node's cores.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import needs_cuda
from dali_backend import ConfigError, DaliLoader, WeightedSampler
from fallback import ImageDataset
from tests.helpers.levels import PRESET_MAX_LEVELS, assert_within_tolerance


@pytest.fixture()
def driver_initialised(monkeypatch):
    from nvidia.dali import backend as dali_lib

    monkeypatch.setattr(dali_lib, "IsDriverInitialized", lambda: True)


@pytest.fixture()
def ds(defect_index):
    from dali_backend import AugmentSpec

    return ImageDataset(defect_index, AugmentSpec(size=32), seed=0)


def test_simulated_driver_check_is_the_one_dali_uses(driver_initialised, ds):
    """Without our choice of start method, DALI itself refuses to fork: the simulation is real."""
    from dali_backend.dali.graph import build_pipeline
    from dali_backend.dali.wire import DrawSource, SlotRing

    ring = SlotRing(64)
    try:
        pipe = build_pipeline(ds.spec, DrawSource(ds.reader, ds.spec, "raise", ring), 4, device="cpu", device_id=None,
                              num_threads=1, py_num_workers=1, py_start_method="fork")
        with pytest.raises(RuntimeError, match="Cannot fork"):
            pipe.build()
    finally:
        ring.close()


@pytest.mark.slow
def test_dali_cpu_builds_after_cuda_was_probed(driver_initialised, ds):
    sampler = WeightedSampler(ds.index, num_samples=8, seed=1)
    with DaliLoader(ds, batch_size=4, sampler=sampler, device="cpu", backend="dali") as loader:
        batches = list(loader)
    assert [len(y) for _, y in batches] == [4, 4]
    with DaliLoader(ds, batch_size=4, sampler=sampler, device="cpu", backend="torch") as ref:
        want = list(ref)
    for (a, ya), (b, yb) in zip(batches, want, strict=True):
        assert torch.equal(ya, yb)
    # in uint8 levels: the published tolerance
    assert_within_tolerance([a for a, _ in batches], [b for b, _ in want], ds.spec, PRESET_MAX_LEVELS)


def test_explicit_fork_after_cuda_is_a_clear_error(driver_initialised, ds):
    with pytest.raises(ConfigError, match="py_start_method='fork'.*CUDA driver is already initialised"):
        DaliLoader(ds, batch_size=4, device="cpu", backend="dali", py_start_method="fork")


def test_choosing_a_backend_never_initialises_cuda(monkeypatch, ds):
    def poisoned():
        raise AssertionError("torch.cuda.is_available() initialises the CUDA driver; probe with device_count()")

    monkeypatch.setattr(torch.cuda, "is_available", poisoned)
    monkeypatch.setattr(torch.cuda, "current_device", poisoned)
    from dali_backend.facade.loader import choose_backend

    assert choose_backend("auto", "auto")[0] in ("torch", "dali-gpu")


LAUNCHER_VARIABLES = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                      "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")


def launched(monkeypatch, env: dict, gpus: int, cuda_initialised: bool = False, current: int = 0,
             dist_rank: int | None = None, dist_world: int = 16) -> None:
    """This process as a launcher starts it: ``env`` (the rest of the launchers' variables unset), ``gpus``
    visible, torch's CUDA initialised or not (``current``: its current device then), torch.distributed
    up with ``dist_rank`` of ``dist_world`` or not."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: cuda_initialised)
    if cuda_initialised:
        monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    else:
        monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("would create a context on GPU 0"))
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: dist_rank is not None)
    monkeypatch.setattr(dist, "get_rank", lambda: dist_rank)
    monkeypatch.setattr(dist, "get_world_size", lambda: dist_world)


@pytest.mark.parametrize("local_rank, gpus, want", [("0", 8, 0), ("3", 8, 3), ("9", 8, 1), (None, 2, 0)])
def test_each_torchrun_rank_gets_its_gpu_without_touching_cuda(monkeypatch, local_rank, gpus, want):
    from dali_backend import arguments as mod

    launched(monkeypatch, {} if local_rank is None else {"LOCAL_RANK": local_rank}, gpus)
    assert mod.local_device_id() == want


@pytest.mark.parametrize("case, env, kw, want", [
    # torchrun, 8 GPUs visible, after the model went to its GPU without set_device: current device 0
    ("torchrun after CUDA init", {"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"}, dict(cuda_initialised=True), 3),
    ("torchrun after set_device", {"LOCAL_RANK": "3"}, dict(cuda_initialised=True, current=3), 3),
    ("torchrun, one GPU visible per rank", {"LOCAL_RANK": "3"}, dict(gpus=1, cuda_initialised=True), 0),
    # srun: SLURM_LOCALID, torch.distributed up, no LOCAL_* variables
    ("srun", {"SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "8"}, dict(dist_rank=10), 2),
    ("srun after CUDA init", {"SLURM_LOCALID": "5", "SLURM_TASKS_PER_NODE": "8(x2)"},
     dict(dist_rank=13, cuda_initialised=True), 5),
    # torch.distributed up, no launcher variable: the global rank modulo the GPUs
    ("distributed only", {}, dict(dist_rank=11), 3),
    ("distributed only, after CUDA init", {}, dict(dist_rank=11, cuda_initialised=True), 3),
    # a single process: its own set_device is respected once CUDA is up; GPU 0 before, without a context
    ("single process after set_device", {}, dict(cuda_initialised=True, current=5), 5),
    ("single process before CUDA init", {}, {}, 0),
])
def test_the_gpu_follows_the_launcher_before_torchs_current_device(monkeypatch, case, env, kw, want):
    from dali_backend.facade.arguments import choose_backend
    from dali_backend.dali.devices import local_device_id

    launched(monkeypatch, env, **{"gpus": 8, **kw})
    assert local_device_id() == want, case
    assert choose_backend("cuda", "dali")[1] == want, case  # what DaliLoader(device="cuda") decodes on


@pytest.mark.parametrize("env, kw, want", [
    ({"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"}, {}, (3, 8)),
    ({"SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "4"}, dict(dist_rank=6), (2, 4)),
    ({"SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}, dict(dist_rank=5), (1, 4)),
    ({}, dict(dist_rank=11), (3, 8)),  # 8 GPUs visible, 16 ranks: 8 per node
    ({}, {}, (0, 1)),
])
def test_local_rank_and_ranks_per_node_under_each_launcher(monkeypatch, env, kw, want):
    from dali_backend.dali.devices import local_ranks

    launched(monkeypatch, env, **{"gpus": 8, **kw})
    assert local_ranks() == want


def test_the_pipeline_thread_works_on_the_chosen_gpu_only(monkeypatch):
    """DALI's iterator and the completion event run inside ``torch.cuda.device(k)``: a new thread's current
    device is GPU 0, and torch work there would initialise CUDA on it."""
    import contextlib

    from dali_backend.dali.runner import DaliRunner

    log, current = [], [0]

    @contextlib.contextmanager
    def device(d):
        before, current[0] = current[0], torch.device(d).index
        log.append(("enter", current[0]))
        yield
        current[0] = before

    class Event:
        def record(self, stream):
            log.append(("record", stream))

    class Iterator:
        def __next__(self):
            log.append(("dali", current[0]))
            return [{"images": "dali's buffer"}]

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: log.append(("stream", torch.device(d).index))
                        or f"stream of {torch.device(d).index}")
    for name in ("set_device", "current_device", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, n=name: pytest.fail(f"torch.cuda.{n} in the pipeline thread"))
    runner = object.__new__(DaliRunner)
    runner.__dict__.update(gpu=True, iterator=Iterator(), device=torch.device("cuda", 3), _held_runs=[])
    out, done = runner._produce()
    assert out == {"images": "dali's buffer"} and isinstance(done, Event)
    assert log == [("enter", 3), ("dali", 3), ("stream", 3), ("record", "stream of 3")]


def test_ranks_share_the_nodes_cores(monkeypatch, ds):
    import os

    import dali_backend.dali.graph as pipeline

    seen = {}

    def spy(*args, **kw):
        seen["threads"] = kw["num_threads"]
        raise RuntimeError("stop after planning")

    monkeypatch.setattr(pipeline, "build_pipeline", spy)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    with pytest.raises(RuntimeError, match="stop after planning"):
        DaliLoader(ds, batch_size=4, device="cpu", backend="dali")
    assert seen["threads"] == 8


_CHILD_ON_ITS_GPU = r"""
import ctypes, json, sys
import torch
from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
from fallback import ImageDataset

def contexts():
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    active = []
    for i in range(torch.cuda.device_count()):
        dev, flags, on = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        assert cuda.cuDeviceGet(ctypes.byref(dev), i) == 0
        assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(on)) == 0
        if on.value:
            active.append(i)
    return active

k = int(sys.argv[2])
torch.zeros(1, device=f"cuda:{k}")  # the model on its GPU without set_device: CUDA is up, current device 0
before = contexts()
index = SampleIndex.from_folder(sys.argv[1], progress=False)
ds = ImageDataset(index, AugmentSpec(size=32), seed=0)
with DaliLoader(ds, batch_size=4, sampler=WeightedSampler(index, num_samples=8, seed=0), device="cuda",
                backend="dali") as loader:
    images, labels = next(iter(loader))
    torch.cuda.synchronize(images.device)
print(json.dumps({"images": images.device.index, "labels": labels.device.index, "before": before,
                  "after": contexts()}))
"""


def visibility_settings(gpus: int) -> list[str | None]:
    """``CUDA_VISIBLE_DEVICES`` values to run a rank under (None: unset): with several GPUs all of them,
    all in reverse order and the last alone; with one, unset and ``"0"``."""
    if gpus < 2:
        return [None, "0"]
    every = list(range(gpus))
    return [None, ",".join(map(str, every[::-1])), str(every[-1])]


def test_the_visibility_settings_permute_every_gpu():
    assert visibility_settings(1) == [None, "0"]
    assert visibility_settings(4) == [None, "3,2,1,0", "3"]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("setting", range(3))
def test_a_rank_decodes_on_its_gpu_and_creates_no_context_on_another(defect_root, setting):
    """Under torchrun (``LOCAL_RANK`` = the last visible GPU, or 3 with one GPU visible: it maps onto it),
    after CUDA is up without ``set_device``: the batch is on that GPU and the loader makes no CUDA
    context on another GPU; under each of :func:`visibility_settings` (one child process each)."""
    import json
    import os
    import subprocess
    import sys

    settings = visibility_settings(torch.cuda.device_count())
    if setting >= len(settings):
        pytest.skip(f"{len(settings)} CUDA_VISIBLE_DEVICES settings for this machine")
    visible = settings[setting]
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    gpus = torch.cuda.device_count() if visible is None else len(visible.split(","))
    rank = gpus - 1 if gpus > 1 else 3
    want = rank % gpus
    env.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(max(gpus, rank + 1)),
               PYTHONPATH=os.pathsep.join([os.getcwd(), os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD_ON_ITS_GPU, str(defect_root), str(want)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["images"] == got["labels"] == want, (visible, got)
    assert set(got["after"]) - set(got["before"]) <= {want}, f"CUDA_VISIBLE_DEVICES={visible}: a context on another GPU: {got}"
