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
