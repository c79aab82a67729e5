"""Telemetry: the data wait the loader reports against the one the training loop measured itself, the
stage it blames against the one that was slowed on purpose, and the exporters read back."""

from __future__ import annotations

import json
import logging
import time

import pytest

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, ConfigError, DaliLoader, SampleIndex, WeightedSampler
from dali_backend.core.reading import SampleReader
from dali_backend.telemetry import METRICS
from fallback import ImageDataset

READ_DELAY_S = 0.015  # injected per image read
STEP_S = 0.06  # a training step of known length, longer than a batch of these tiny images takes to load


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("telemetry")
    for i in range(48):
        write(root / ("ok" if i % 3 else "dent") / f"{i:02d}.jpg", jpeg_bytes(48, 64, seed=i))
    return SampleIndex.from_folder(root, progress=False)


def _loader(index, kind, **kw):
    workers = 2 if kind.startswith("torch") else 0  # DALI: its own reader workers and threads
    return DaliLoader(ImageDataset(index, AugmentSpec(size=32)), batch_size=4, num_workers=workers,
                      sampler=WeightedSampler(index, mode="sequential"), **KINDS[kind], **kw)


def _train(loader, step_s: float) -> tuple[float, float]:
    """Iterate one pass as a training loop would, timing next() itself: (its own data-wait fraction, wall)."""
    waited, t_start = 0.0, time.perf_counter()
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - t0
        time.sleep(step_s)
    wall = time.perf_counter() - t_start
    return waited / wall, wall


def _slow_reads(monkeypatch):
    read = SampleReader.read

    def slow(self, i, epoch=None):
        time.sleep(READ_DELAY_S)
        return read(self, i, epoch)

    monkeypatch.setattr(SampleReader, "read", slow)  # before the loader forks its workers: they inherit it


@pytest.mark.parametrize("kind", KINDS)
def test_a_slow_training_loop_is_reported_as_the_limit(index, kind):
    with _loader(index, kind) as loader:
        _train(loader, 0.0)  # warm: workers and pipeline running, as after the first batches of a real run
        truth, _ = _train(loader, STEP_S)
        m = loader.metrics()
        report = loader.report()
    assert abs(m["data_wait_fraction"] - truth) <= 0.05, (m["data_wait_fraction"], truth)
    assert m["data_wait_fraction"] < 0.25  # the first batch of a pass is waited for; the rest come prefetched
    assert m["batches"] == 12 and m["images"] == 48 and m["batches_total"] == 24
    # the verdict follows the measured wait (a loaded machine can make the first batch slower)
    assert ("the training loop sets the pace" in report) == (m["data_wait_fraction"] < 0.10), report


@pytest.mark.parametrize("kind", KINDS)
def test_slow_storage_is_reported_as_the_limit(index, kind, monkeypatch):
    _slow_reads(monkeypatch)
    with _loader(index, kind) as loader:
        truth, _ = _train(loader, 0.0)
        m = loader.metrics()
        report = loader.report()
    assert abs(m["data_wait_fraction"] - truth) <= 0.05, (m["data_wait_fraction"], truth)
    assert m["data_wait_fraction"] > 0.5  # nothing else to do than wait
    stages = {k: v for k, v in m.items() if k.startswith("stage_ms.") and v is not None}
    assert stages["stage_ms.read"] >= 0.9 * READ_DELAY_S * 1e3
    assert max(stages, key=stages.get) == "stage_ms.read"
    assert "storage (reading the files)" in report and "cache=True" in report


def test_slow_decoding_is_blamed_on_decoding(index, monkeypatch):
    from fallback import ops

    decode = ops.decode
    monkeypatch.setattr(ops, "decode", lambda data, color, bits=8: time.sleep(0.01) or decode(data, color, bits))
    with _loader(index, "torch") as loader:
        _train(loader, 0.0)
        m, report = loader.metrics(), loader.report()
    assert m["stage_ms.decode"] >= 9.0 and m["stage_ms.decode"] > m["stage_ms.read"]
    assert "decoding JPEGs" in report


def test_the_dali_readers_decoding_is_counted_as_decoding_not_reading(index, monkeypatch):
    """A CPU graph's readers decode and run CLAHE (dali.wire.reader_ops): their CPU time is the
    decode+augment stage, with DALI's threads', and never the reading's."""
    pytest.importorskip("nvidia.dali")
    from dali_backend.dali import wire

    monkeypatch.delenv(wire.GRAPH_DECODE_ENV, raising=False)
    decode = wire.opencv_decode

    def slow(data, colour):
        end = time.thread_time() + 0.01  # CPU, as a decoder spends it
        while time.thread_time() < end:
            pass
        return decode(data, colour)

    monkeypatch.setattr(wire, "opencv_decode", slow)  # before the loader forks its readers: they inherit it
    with _loader(index, "dali-cpu") as loader:
        _train(loader, 0.0)
        m = loader.metrics()
    assert m["stage_ms.decode+augment"] >= 9.0 and m["stage_ms.read"] < 5.0, m


@pytest.mark.parametrize("kind", KINDS)
def test_metrics_have_the_documented_names_and_are_json(index, kind):
    with _loader(index, kind) as loader:
        before = loader.metrics()
        assert before["batches"] == 0 and before["data_wait_fraction"] is None
        _train(loader, 0.0)
        m = loader.metrics()
    assert set(m) == set(METRICS) | {"backend", "how"}
    json.dumps(m)
    assert m["backend"] == loader.backend and m["main_pss_mb"] > 10
    if kind == "torch-threads":  # no worker process: its threads' CPU and memory are the training process's
        assert m["workers"] == 0 and m["workers_pss_mb"] is None and m["main_cpu_percent"] > 0
    else:
        assert m["workers"] >= 1 and m["workers_pss_mb"] > 1
    for stage in m["how"]:
        assert f"stage_ms.{stage}" in METRICS and m[f"stage_ms.{stage}"] is not None, stage
    assert 0 <= m["data_wait_fraction"] <= 1 and m["img_per_s"] > 0


def test_hooks_run_at_their_cadence_and_arguments_are_checked(index, caplog):
    with _loader(index, "torch") as loader:
        every, never = [], []
        loader.on_metrics(every.append, every_s=0)
        loader.on_metrics(never.append, every_s=3600)
        loader.log_metrics(every_s=0)
        with caplog.at_level(logging.INFO, logger="dali_backend.metrics"):
            _train(loader, 0.0)
        assert len(every) == 12 and never == []
        assert [m["batches"] for m in every] == list(range(1, 13))
        lines = [r.getMessage() for r in caplog.records if r.name == "dali_backend.metrics"]
        assert len(lines) == 12 and lines[-1].startswith("loader torch: data wait ")
        with pytest.raises(ConfigError, match="every_s=-1"):
            loader.on_metrics(print, every_s=-1)
        with pytest.raises(ConfigError, match="not callable"):
            loader.on_metrics("print")


def test_tensorboard_scalars_read_back(index, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from dali_backend.telemetry.exporters import TensorBoardMetrics

    with _loader(index, "torch") as loader:
        loader.on_metrics(TensorBoardMetrics(tmp_path / "tb"), every_s=0)
        _train(loader, 0.0)
        final = loader.metrics()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loader/data_wait_fraction", "loader/img_per_s", "loader/stage_ms.read"} <= tags
    assert not any(t.endswith("decode+augment") for t in tags)  # not measured on this backend: not written as 0
    steps = [e.step for e in events.Scalars("loader/images")]
    assert steps == list(range(1, 13))
    assert events.Scalars("loader/images")[-1].value == final["images"] == 48


def test_lightning_callback_reaches_the_trainers_logger(index, tmp_path):
    L = pytest.importorskip("lightning")
    import csv

    import torch

    from dali_backend.telemetry.exporters import lightning_callback

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 2))

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    with _loader(index, "torch") as loader:
        trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, use_distributed_sampler=False,
                            logger=L.pytorch.loggers.CSVLogger(tmp_path), callbacks=[lightning_callback(loader, 2)],
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            log_every_n_steps=1)
        trainer.fit(Model(), train_dataloaders=loader)
    rows = list(csv.DictReader(open(next(tmp_path.rglob("metrics.csv")))))
    waits = [r["loader/data_wait_fraction"] for r in rows if r.get("loader/data_wait_fraction")]
    assert len(waits) == 6 and all(0 <= float(w) <= 1 for w in waits)
    with pytest.raises(ConfigError, match="every_n_batches=0"):
        lightning_callback(loader, 0)


def test_diagnose_command_says_what_limits_and_writes_the_metrics(index, tmp_path, capsys):
    from tests.helpers import run_cli

    out = tmp_path / "metrics.json"
    rc, stdout, _ = run_cli(["diagnose", index.root, "--batches", "6", "--batch-size", "4", "--backend", "torch",
                             "--step-ms", "5", "--json", str(out)], capsys)
    assert rc == 0, stdout
    assert stdout.startswith("torch: 24 images in ") and "Verdict: " in stdout and "ms per image: read " in stdout
    saved = json.loads(out.read_text())
    assert set(saved) == set(METRICS) | {"backend", "how"} and saved["images"] == 24
    rc, _, err = run_cli(["diagnose", index.root, "--step-ms", "-3"], capsys)
    assert rc == 2 and "'-3' is not a time in ms" in err
    rc, _, err = run_cli(["diagnose", index.root, "--workers", "many"], capsys)
    assert rc == 2 and "'many' is not a worker count" in err


def test_telemetry_off_measures_nothing_and_says_so(index):
    with _loader(index, "torch", telemetry=False) as loader:
        batches = sum(1 for _ in loader)
        with pytest.raises(ConfigError, match="telemetry=False"):
            loader.metrics()
        with pytest.raises(ConfigError, match="telemetry=False"):
            loader.on_metrics(print)
    assert batches == 12


def test_the_tqdm_bar_shows_the_data_wait(index):
    from tqdm import tqdm

    from dali_backend.telemetry.exporters import TqdmMetrics

    with _loader(index, "torch") as loader:
        bar = tqdm(loader, disable=False, file=open("/dev/null", "w"))
        loader.on_metrics(TqdmMetrics(bar), every_s=0)
        for _ in bar:
            pass
        assert "data wait " in bar.postfix and "img/s" in bar.postfix and "ahead" in bar.postfix
        bar.close()
    with pytest.raises(ConfigError, match="not a tqdm bar"):
        TqdmMetrics([])


def test_a_failing_exporter_is_said_and_dropped_not_fatal(index, caplog):
    calls = []

    def broken(metrics):
        calls.append(metrics["batches"])
        raise OSError("disk full")

    with _loader(index, "torch") as loader:
        loader.on_metrics(broken, every_s=0)
        with caplog.at_level(logging.ERROR, logger="dali_backend.metrics"):
            batches = sum(1 for _ in loader)
    assert batches == 12 and calls == [1]  # called once, then removed; the pass went on
    errors = [r for r in caplog.records if r.name == "dali_backend.metrics" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and "it is removed and training goes on" in errors[0].getMessage()
    assert "disk full" in caplog.text
