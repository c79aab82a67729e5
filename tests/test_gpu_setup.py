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

from dali_backend import ConfigError, DaliLoader, WeightedSampler
from fallback import ImageDataset
from levels import PRESET_MAX_LEVELS, assert_within_tolerance


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
    from dali_backend.loader import choose_backend

    assert choose_backend("auto", "auto")[0] in ("torch", "dali-gpu")


@pytest.mark.parametrize("local_rank, gpus, want", [("0", 8, 0), ("3", 8, 3), ("9", 8, 1), (None, 2, 0)])
def test_each_torchrun_rank_gets_its_gpu_without_touching_cuda(monkeypatch, local_rank, gpus, want):
    from dali_backend import arguments as mod

    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("would create a context on GPU 0"))
    assert mod._local_device_id() == want


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
