"""Run by tests/test_gather_metrics.py under ``torchrun --nproc_per_node 2``: validation over a DaliLoader
gathered with Accelerate's own ``gather_for_metrics``, and with Lightning's ``validate``
(``use_distributed_sampler=False``); what rank 0 gathered goes to ``out/<what>.json``."""

from __future__ import annotations

import json
import os
import sys


def loaders(root: str, num_samples: int, batch_size: int, only: str | None = None):
    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
    from fallback import ImageDataset

    index = SampleIndex.from_folder(root, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=16, color="rgb"), seed=1)
    for backend in (only,) if only else ("torch", "dali"):
        sampler = WeightedSampler(index, num_samples=num_samples, mode="sequential")  # rank, world: torch.distributed
        yield backend, index, DaliLoader(ds, batch_size=batch_size, sampler=sampler, device="cpu", backend=backend,
                                         return_meta=True)


def run_accelerate(root: str, out: str) -> None:
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    result = {}
    for num_samples, batch_size in ((13, 4), (12, 4), (13, 2), (9, 5)):
        for backend, index, loader in loaders(root, num_samples, batch_size):
            model = torch.nn.Linear(2, 2)
            model, prepared = accelerator.prepare(model, loader)
            labels, samples, remainders = [], [], []
            for _, y, meta in prepared:
                labels += accelerator.gather_for_metrics(y).tolist()
                samples += accelerator.gather_for_metrics(meta["index"]).tolist()
                remainders.append(loader.remainder)
            result[f"{backend} {num_samples} {batch_size}"] = {
                "labels": labels, "samples": samples, "remainder": remainders[-1],
                "want": index.labels[:num_samples].tolist()}
            loader.close()
    if accelerator.is_main_process:
        with open(os.path.join(out, "accelerate.json"), "w") as f:
            json.dump(result, f)
    accelerator.wait_for_everyone()


def run_lightning(root: str, out: str) -> None:
    import lightning as L
    import torch

    class Validated(L.LightningModule):
        """Builds its loader in val_dataloader(), once Lightning has joined the processes (the sampler
        reads rank and world size then), as docs/guides/lightning.md does."""

        def __init__(self, backend: str):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 3))
            self.backend, self.seen, self.loader = backend, [], None

        def val_dataloader(self):
            (self.loader,) = [loader for backend, _, loader in loaders(root, 13, 4, only=self.backend)]
            return self.loader

        def validation_step(self, batch, _):
            images, labels, meta = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(images), labels), sync_dist=True)
            self.seen.append(torch.stack([meta["index"], labels, meta["padding"].long()], 1))

        def on_validation_epoch_end(self):
            self.gathered = self.all_gather(torch.cat(self.seen)).reshape(-1, 3)  # [world * n, 3]

    result = {}
    for backend in ("torch", "dali"):
        model = Validated(backend)
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", use_distributed_sampler=False, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.validate(model, verbose=False)
        rows = model.gathered
        kept = rows[rows[:, 2] == 0]
        result[backend] = {"world": model.loader.sampler.world_size, "all": rows[:, 0].tolist(),
                           "kept": kept[:, 0].tolist(), "labels": kept[:, 1].tolist(),
                           "want": model.loader.dataset.index.labels[:13].tolist()}
        model.loader.close()
    if trainer.global_rank == 0:
        with open(os.path.join(out, "lightning.json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    {"accelerate": run_accelerate, "lightning": run_lightning}[sys.argv[1]](sys.argv[2], sys.argv[3])
