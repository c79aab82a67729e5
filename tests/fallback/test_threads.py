"""The loader's own work in the training process runs on one torch intra-op thread, as in a worker."""

from __future__ import annotations

import pytest
import torch

from dali_backend import AugmentSpec, DaliLoader, WeightedSampler
from dali_backend.transforms import resample
from fallback import ImageDataset, ops


@pytest.fixture
def two_threads():
    """torch on 2 intra-op threads (a training process's default on a 2-core machine), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_in_process_loader_runs_its_operations_on_one_intra_op_thread(defect_index, two_threads, monkeypatch):
    seen = []
    real = resample.resize

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(resample, "resize", spy)
    ds = ImageDataset(defect_index, AugmentSpec(size=(40, 56), color="gray"), seed=1)
    loader = DaliLoader(ds, batch_size=4, sampler=WeightedSampler(defect_index, num_samples=8, seed=0),
                        num_workers=0, backend="torch")
    with loader:
        batches = list(loader)
        # between batches (the training step) the caller's setting holds
        assert len(batches) == 2 and torch.get_num_threads() == 2
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2


def test_one_intra_op_thread_restores_the_setting_when_the_block_raises(two_threads):
    with pytest.raises(ValueError):
        with ops.one_intra_op_thread():
            assert torch.get_num_threads() == 1
            raise ValueError("boom")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("workers", [0, 2])
def test_metrics_carry_the_intra_op_threads_the_operations_ran_on(defect_index, two_threads, workers):
    # (a worker raised to 2 threads is not run here: libgomp's thread team does not survive the fork of a
    # process that used it, and such a worker can hang in its first product; the verdict is checked below)
    ds = ImageDataset(defect_index, AugmentSpec(size=(40, 56), color="gray"), seed=1)
    loader = DaliLoader(ds, batch_size=4, sampler=WeightedSampler(defect_index, num_samples=8, seed=0),
                        num_workers=workers, backend="torch")
    with loader:
        for _ in loader:
            pass
        m = loader.metrics()
    assert m["intra_op_threads"] == 1
    from dali_backend.telemetry import verdict

    assert "Thread oversubscription" not in verdict(dict(m, data_wait_fraction=0.9), cores=2)


def test_the_verdict_names_in_process_oversubscription():
    from dali_backend.telemetry import oversubscription

    assert oversubscription({"intra_op_threads": 4.0, "workers": 0}, cores=2).startswith(
        "Thread oversubscription: the training process's 4 torch intra-op thread(s) = 4 threads on 2 cores")
    assert oversubscription({"intra_op_threads": 1.0, "workers": 2}, cores=2) is None
    assert oversubscription({"intra_op_threads": 2.0, "workers": 2}, cores=2).startswith(
        "Thread oversubscription: 2 worker process(es) x 2 torch intra-op thread(s) = 4 threads on 2 cores")
    assert oversubscription({"intra_op_threads": None, "workers": 2}, cores=2) is None


def test_a_starving_loader_on_too_many_threads_is_told_to_use_one_per_worker(defect_index):
    from dali_backend.telemetry import verdict

    ds = ImageDataset(defect_index, AugmentSpec(size=(40, 56), color="gray"), seed=1)
    loader = DaliLoader(ds, batch_size=4, sampler=WeightedSampler(defect_index, num_samples=8, seed=0),
                        num_workers=0, backend="torch")
    with loader:
        for _ in loader:
            pass
        m = loader.metrics()
    text = verdict(dict(m, data_wait_fraction=0.9, workers=2, intra_op_threads=2.0), cores=2)
    assert "2 worker process(es) x 2 torch intra-op thread(s) = 4 threads on 2 cores" in text
    assert "What to change: one torch thread per worker first (torch.set_num_threads(1) in worker_init_fn)" in text
