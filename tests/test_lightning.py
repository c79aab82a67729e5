"""DaliLoader inside PyTorch Lightning's Trainer (the README's usage example, run for real)."""

from __future__ import annotations

import pytest
import torch

from dali_backend import AugmentSpec, DaliLoader, WeightedSampler
from fallback import ImageDataset

L = pytest.importorskip("lightning")


class Classifier(L.LightningModule):
    def __init__(self, classes: int, sampler: WeightedSampler):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2), torch.nn.ReLU(),
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, classes))
        self.sampler, self.epochs_seen, self.samples = sampler, [], 0

    def on_train_epoch_start(self):
        self.sampler.set_epoch(self.current_epoch)
        self.epochs_seen.append(self.sampler.epoch)

    def training_step(self, batch, _):
        images, labels = batch
        self.samples += len(labels)
        return torch.nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


@pytest.mark.parametrize("backend", ["dali", "torch"])
def test_trainer_fits_with_daliloader(defect_index, backend):
    sampler = WeightedSampler(defect_index, num_samples=24, seed=0)
    loader = DaliLoader(ImageDataset(defect_index, AugmentSpec(size=32)), batch_size=8, sampler=sampler, device="cpu",
                        backend=backend)
    model = Classifier(len(defect_index.classes), sampler)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, use_distributed_sampler=False, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, train_dataloaders=loader)
    assert model.epochs_seen == [0, 1] and model.samples == 48
    loader.close()
