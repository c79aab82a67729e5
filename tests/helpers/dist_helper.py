"""Run by tests/facade/test_reliability.py in 2 spawned processes joined by torch.distributed (gloo), and by
tests/facade/test_engines.py under two torchrun "nodes" (``--torchrun``)."""

from __future__ import annotations

import json
import os
import sys


def run_rank(rank: int, world: int, root: str, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    run(rank, root, out)


def run_torchrun(root: str, out: str) -> None:
    """Under torchrun: rank, world size and the rendezvous from its environment (env://)."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    run(dist.get_rank(), root, out, node=int(os.environ["GROUP_RANK"]), local_rank=int(os.environ["LOCAL_RANK"]))


def run(rank: int, root: str, out: str, **where) -> None:
    """Both backends' loaders for this rank; what each yielded to ``out/rank<r>.json``."""
    import torch.distributed as dist

    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
    from fallback import ImageDataset

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
                               "stats": loader.stats(), **where}
            if hasattr(loader, "close"):
                loader.close()
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "--torchrun":
        run_torchrun(sys.argv[2], sys.argv[3])
    else:
        run_rank(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
