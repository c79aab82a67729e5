"""The executor seam: a third executor plugged in by this one file (a registry entry), and the records
every executor runs on and returns (:class:`SampleSet`, :class:`Batch` by keyword)."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from tests.helpers import jpeg_bytes, write
from dali_backend import AugmentSpec, ConfigError, DaliLoader, SampleIndex
from dali_backend.core.boundary import Batch, Kind, Plan, SampleSet, Served
from dali_backend.facade.executors import REGISTRY, ExecutorKind, ExecutorSettings, executor_kind, register
from dali_backend.sampling.sampler import Draw
from fallback import ImageDataset


class ThreadedExecutor:
    """A toy executor: the fallback's pixels (``ImageDataset.load_draw_with_params``) made in a thread
    pool of this process, returned as the contract's :class:`Batch`. It sees only the contract."""

    device = torch.device("cpu")

    def __init__(self, dataset: ImageDataset, settings: ExecutorSettings):
        self.dataset, self.settings = dataset, settings
        self.pool = ThreadPoolExecutor(max(1, settings.num_workers))
        self.batches = 0

    def run(self, rows: np.ndarray, key, plan_next):
        size = self.settings.frames_per_batch
        rows = rows[rows[:, Plan.KIND] == Kind.DRAW]
        for start in range(0, len(rows), size):
            chunk = rows[start:start + size]
            draws = [Draw(int(r[Plan.INDEX]), int(r[Plan.EPOCH]), int(r[Plan.POSITION])) for r in chunk]
            out = list(self.pool.map(lambda d: self.dataset.load_draw_with_params(d, self.settings.on_error), draws))
            meta = np.stack([np.append(m, r[Plan.EPOCH]) for (_, _, m, _), r in zip(out, chunk)])
            self.batches += 1
            yield Batch(images=torch.from_numpy(np.stack([o[0] for o in out])),
                        labels=torch.tensor([o[1] for o in out], dtype=torch.int64),
                        planned=meta[:, Served.PLANNED], served=meta[:, Served.SERVED],
                        positions=meta[:, Served.POSITION], epochs=meta[:, Served.EPOCH])

    def recover(self, failure) -> None:
        raise failure

    def abandon(self) -> None:
        pass

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def worker_pids(self) -> list[int]:
        return []


TOY = register(ExecutorKind(name="toy-threads", build=ThreadedExecutor))


@pytest.fixture
def dataset(tmp_path):
    for c in range(2):
        for i in range(5):
            write(tmp_path / f"c{c}" / f"{i}.jpg", jpeg_bytes(40, 48, seed=10 * c + i))
    return ImageDataset(SampleIndex.from_folder(tmp_path), AugmentSpec(size=32), seed=3)


def test_a_registered_executor_runs_a_pass_with_the_fallbacks_pixels(dataset):
    toy = DaliLoader(dataset, batch_size=4, shuffle=True, seed=5, backend="toy-threads", device="cpu")
    assert toy.backend == "toy-threads" and isinstance(toy._executor, ThreadedExecutor)
    reference = DaliLoader(dataset, batch_size=4, shuffle=True, seed=5, backend="torch")
    got, want = list(toy), list(reference)
    assert len(got) == len(want) == 3 and toy._executor.batches == 3
    for (images, labels), (ref_images, ref_labels) in zip(got, want):
        assert torch.equal(labels, ref_labels)
        assert torch.equal(images, ref_images)  # normalised by the facade, the same for every executor
    assert toy.stats()["accounted"] == toy.stats()["draws"] == 10
    toy.close()
    reference.close()


def test_executors_are_chosen_from_the_registry():
    assert {"torch", "dali-cpu", "dali-gpu", "toy-threads"} <= set(REGISTRY)
    assert executor_kind("torch").worker_processes and not executor_kind("torch").dali
    assert executor_kind("dali-gpu").gpu and executor_kind("dali-cpu").dali and not executor_kind("dali-cpu").gpu
    with pytest.raises(ConfigError, match="toy-threads"):  # the error lists what is registered
        executor_kind("nope")
    with pytest.raises(ConfigError, match="request word"):
        register(dataclasses.replace(TOY, name="auto"))


def test_an_unknown_backend_names_the_registered_executors(dataset):
    with pytest.raises(ConfigError, match="registered executor.*toy-threads"):
        DaliLoader(dataset, batch_size=2, backend="nope")


def test_batch_is_built_by_keyword_only():
    z = np.zeros(1, np.int64)
    with pytest.raises(TypeError):
        Batch(torch.zeros(1, 1, 2, 2, dtype=torch.uint8), torch.zeros(1), z, z, z, z)  # noqa: the point
    b = Batch(images=torch.zeros(1, 1, 2, 2, dtype=torch.uint8), labels=torch.zeros(1), planned=z, served=z,
              positions=z, epochs=z)
    assert b.params is None and b.bad == () and b.sizes is None


def test_the_record_executors_run_on_is_the_contracts(dataset):
    samples = dataset.samples
    assert type(samples) is SampleSet and type(samples).__module__ == "dali_backend.core.boundary"
    assert (samples.index, samples.reader, samples.spec, samples.seed) == \
        (dataset.index, dataset.reader, dataset.spec, dataset.seed)
    with pytest.raises(TypeError):
        SampleSet(dataset.index, dataset.reader, dataset.spec, 0)  # noqa: by keyword, as every record
