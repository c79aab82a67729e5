"""The Ray Train recipe that tests/facade/test_engines.py runs: each worker builds a DaliLoader for its rank.

Importable by Ray's worker processes (tests/ is on their PYTHONPATH). Each worker writes what it
yielded (epoch, position, planned sample) to ``<out>/<run>-rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import tempfile


def train_loop(config: dict) -> None:
    """One Ray Train worker: the rank and world size from Ray's context, the loader state in Ray's checkpoint."""
    import ray.train
    import torch
    from ray.train.torch import prepare_model

    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
    from fallback import ImageDataset

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    index = SampleIndex.load(config["index"])
    sampler = WeightedSampler(index, num_samples=config["num_samples"], seed=config["seed"], rank=rank, world_size=world)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16), seed=1), batch_size=config["batch_size"],
                        sampler=sampler, device="cpu", backend=config["backend"], return_meta=True)
    model = prepare_model(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 3)))  # DDP, gloo
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    checkpoint = ray.train.get_checkpoint()  # the run's latest (a restored run) ...
    if checkpoint is None and config.get("resume_from"):  # ... or one handed over (another number of workers)
        checkpoint = ray.train.Checkpoint(config["resume_from"])
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            with open(os.path.join(folder, "loader.json")) as f:
                state = json.load(f)
        loader.load_state_dict(state)
        start = state["epoch"]
    seen = []
    for epoch in range(start, config["epochs"]):
        loader.set_epoch(epoch)
        for step, (images, labels, meta) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(images), labels)  # the all-reduce keeps ranks in step
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            seen += [(epoch, p, i) for p, i in zip(meta["position"].tolist(), meta["planned"].tolist())]
            if config.get("stop_at") == [epoch, step + 1]:  # a preemption right after a checkpoint
                with tempfile.TemporaryDirectory() as folder:
                    if rank == 0:  # one rank's loader state is enough (dali_backend.facade.epochs)
                        with open(os.path.join(folder, "loader.json"), "w") as f:
                            json.dump(loader.state_dict(), f)
                    ray.train.report({"epoch": epoch, "step": step + 1},
                                     checkpoint=ray.train.Checkpoint.from_directory(folder) if rank == 0 else None)
                _write(config, rank, world, seen, loader)
                return
    ray.train.report({"epoch": config["epochs"]})
    _write(config, rank, world, seen, loader)


def _write(config: dict, rank: int, world: int, seen: list, loader) -> None:
    with open(os.path.join(config["out"], f"{config['run']}-rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "seen": seen, "stats": loader.stats()}, f)
    loader.close()
