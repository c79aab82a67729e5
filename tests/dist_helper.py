"""Run by tests/test_reliability.py in 2 spawned processes joined by torch.distributed (gloo)."""

from __future__ import annotations

import json
import os
import sys


def run_rank(rank: int, world: int, root: str, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
    from fallback import ImageDataset

    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        index = SampleIndex.from_folder(root, progress=False)
        ds = ImageDataset(index, AugmentSpec(size=16), seed=1)
        result = {}
        for backend in ("torch", "dali"):
            sampler = WeightedSampler(index, num_samples=45, seed=4)  # rank and world size from torch.distributed
            loader = DaliLoader(ds, batch_size=4, sampler=sampler, device="cpu", backend=backend)
            loader.set_epoch(3)
            labels = [y.tolist() for _, y in loader]
            draws = [(d.index, d.position) for d in sampler]
            result[backend] = {"rank": sampler.rank, "world": sampler.world_size, "draws": draws, "labels": labels,
                               "stats": loader.stats()}
            if hasattr(loader, "close"):
                loader.close()
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    run_rank(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
