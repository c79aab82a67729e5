"""Training engines: Ray Train workers and torchrun across two nodes (issue 24, item 4).

Both run the real engine on this machine: Ray Train's ``TorchTrainer`` with two CPU workers (gloo),
and two ``torchrun`` agents joined by a c10d rendezvous, as two nodes of one process each would be.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dali_backend import SampleIndex, WeightedSampler
from dali_backend.sampling.sampler import rank_slice

ROOT = Path(__file__).resolve().parents[2]
NUM_SAMPLES, SEED = 45, 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected(index, epoch: int, rank: int, world: int) -> list[list[int]]:
    """[epoch, position, planned sample] of each draw of ``rank`` in ``epoch``."""
    idx, pos = rank_slice(WeightedSampler(index, num_samples=NUM_SAMPLES, seed=SEED).global_draw(epoch), rank, world)
    return [[epoch, p, i] for p, i in zip(pos.tolist(), idx.tolist())]


@pytest.mark.slow
def test_ray_train_workers_partition_and_resume_through_rays_checkpoint(defect_root, tmp_path):
    """Run a: 2 workers, epoch 0, then 3 batches of epoch 1, a checkpoint and a stop. Run b restores
    run a (same name) on 2 workers: each rank yields the rest of its share. Run c takes run a's
    checkpoint to 1 worker: it yields the draws of epoch 1 that run a had not, each once."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.train.torch")
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from tests.helpers import ray_helper

    index = SampleIndex.from_folder(defect_root, progress=False)
    index.save(tmp_path / "index.npz")
    config = {"index": str(tmp_path / "index.npz"), "num_samples": NUM_SAMPLES, "seed": SEED, "batch_size": 4,
              "epochs": 2, "out": str(tmp_path)}
    paths = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": paths}},
             log_to_driver=False)

    def fit(run: str, workers: int, name: str, **extra):
        trainer = TorchTrainer(ray_helper.train_loop, train_loop_config={**config, "run": run, **extra},
                               scaling_config=ScalingConfig(num_workers=workers, use_gpu=False),
                               torch_config=TorchConfig(backend="gloo"),
                               run_config=RunConfig(name=name, storage_path=str(tmp_path / "ray")))
        return trainer.fit()

    try:
        a = fit("a", 2, "scale", backend="dali", stop_at=[1, 3])
        fit("b", 2, "scale", backend="torch")  # the same run: Ray restores its latest checkpoint
        fit("c", 1, "scale-one-worker", backend="dali", resume_from=a.checkpoint.path)
    finally:
        ray.shutdown()
    runs = {run: [json.loads((tmp_path / f"{run}-rank{r}.json").read_text()) for r in range(n)]
            for run, n in (("a", 2), ("b", 2), ("c", 1))}
    for r, got in enumerate(runs["a"]):
        assert (got["rank"], got["world"]) == (r, 2)
        epoch0 = [d for d in got["seen"] if d[0] == 0]
        assert epoch0 == expected(index, 0, r, 2)  # the rank's share, from Ray's rank and world size
        first = [d for d in got["seen"] if d[0] == 1]
        assert len(first) == 12  # 3 batches of epoch 1
        assert first + runs["b"][r]["seen"] == expected(index, 1, r, 2)  # resumed exactly, on the other backend
        assert runs["b"][r]["stats"]["resumed"] == 12 and runs["b"][r]["stats"]["accounted"] == 23
    assert sorted(d[1] for got in runs["a"] for d in got["seen"] if d[0] == 0) == list(range(46))
    one = runs["c"][0]
    assert one["world"] == 1 and one["stats"]["resumed"] == 24 and one["stats"]["accounted"] == one["stats"]["draws"]
    epoch1 = [d for got in runs["a"] for d in got["seen"] if d[0] == 1] + one["seen"]
    glob = WeightedSampler(index, num_samples=NUM_SAMPLES, seed=SEED).global_draw(1)
    assert sorted((p, i) for _, p, i in epoch1 if p < NUM_SAMPLES) == list(enumerate(glob.tolist()))


@pytest.mark.slow
def test_two_torchrun_nodes_partition_the_draw(defect_root, tmp_path):
    """Two torchrun agents (--nnodes 2, one process each, c10d rendezvous on this machine): each rank
    gets its strided share of the same global draw, on both backends."""
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                               "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                               "--rdzv-id", "scale-test", str(ROOT / "tests" / "helpers" / "dist_helper.py"), "--torchrun",
                               str(defect_root), str(tmp_path)],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for node in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    index = SampleIndex.from_folder(defect_root, progress=False)
    assert sorted(ranks[r]["torch"]["node"] for r in range(2)) == [0, 1]  # one rank on each node
    for backend in ("torch", "dali"):
        for r in range(2):
            got = ranks[r][backend]
            assert (got["rank"], got["world"], got["local_rank"]) == (r, 2, 0)
            assert [[3, p, i] for i, p in got["draws"]] == expected(index, 3, r, 2)
            assert got["stats"]["accounted"] == got["stats"]["draws"] == 23
            assert sum(got["labels"], []) == index.labels[[i for i, _ in got["draws"]]].tolist()
