"""DaliLoader inside PyTorch Lightning's Trainer (docs/guides/lightning.md's usage, run for real)."""

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


class Recorder(Classifier):
    """Records the sample indices of every training batch (the loader yields meta)."""

    def __init__(self, classes, sampler):
        super().__init__(classes, sampler)
        self.batches = []

    def training_step(self, batch, _):
        images, labels, meta = batch
        self.batches.append(meta["index"].tolist())
        return torch.nn.functional.cross_entropy(self.net(images), labels)


@pytest.mark.parametrize("backend", ["dali", "torch"])
def test_mid_epoch_checkpoint_resumes_the_loader_exactly(defect_index, backend, tmp_path):
    """ModelCheckpoint in the middle of an epoch, then fit(ckpt_path=...) with a new loader: Lightning
    saves and restores the loader through its state_dict(), and the rest of the epoch is exactly the
    batches an uninterrupted run yields after that point."""
    def run(max_steps, ckpt_path=None, callbacks=()):
        sampler = WeightedSampler(defect_index, num_samples=40, seed=3)
        loader = DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16)), batch_size=8, sampler=sampler,
                            device="cpu", backend=backend, return_meta=True)
        model = Recorder(len(defect_index.classes), sampler)
        trainer = L.Trainer(max_epochs=1, max_steps=max_steps, accelerator="cpu", devices=1, logger=False,
                            use_distributed_sampler=False, enable_checkpointing=bool(callbacks), callbacks=list(callbacks),
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
        try:
            trainer.fit(model, train_dataloaders=loader, ckpt_path=ckpt_path)
        finally:
            loader.close()
        return model.batches

    whole = run(-1)
    assert len(whole) == 5
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1)
    first = run(2, callbacks=[checkpoint])
    assert first == whole[:2]
    (saved,) = (tmp_path / "ckpt").glob("*step=2*.ckpt")
    assert run(-1, ckpt_path=str(saved)) == whole[2:]
