"""num_workers="auto": the candidates, the choice rule, the cache, and a real calibration on both backends.
(Whether the choice is within 5 % of the best of a full grid is measured by ``python -m bench.autotune``,
not by a timed test.)"""

from __future__ import annotations

import json

import pytest

from conftest import KINDS
from dali_backend import AugmentSpec, ConfigError, DaliLoader
from dali_backend import autotune
from fallback import ImageDataset


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("DALI_BACKEND_AUTOTUNE", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def ds(defect_index):
    return ImageDataset(defect_index, AugmentSpec(size=24), seed=1)


def test_candidates_start_small_and_stop_at_the_usable_cores():
    assert autotune.candidates("torch", 2) == [0, 1, 2]
    assert autotune.candidates("dali-cpu", 2) == [1, 2]
    assert autotune.candidates("torch", 6) == [0, 1, 2, 4, 6]
    assert autotune.candidates("dali-gpu", 1) == [1]


def test_usable_cores_are_shared_between_local_ranks(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    import os

    assert autotune.usable_cores() == max(1, len(os.sched_getaffinity(0)) // 2)


def _scripted(monkeypatch, rates: dict, calls: list):
    monkeypatch.setattr(autotune, "usable_cores", lambda: 8)

    def measure(make_loader, dataset, batch_size, workers, batches=autotune.BATCHES):
        calls.append(workers)
        return rates[workers]

    monkeypatch.setattr(autotune, "measure", measure)


def test_the_smallest_setting_within_5_percent_of_the_best_wins_and_is_cached(ds, cache_home, monkeypatch):
    calls: list = []
    _scripted(monkeypatch, {0: 100.0, 1: 180.0, 2: 200.0, 4: 196.0, 8: 150.0}, calls)
    chosen, info = autotune.choose_workers(None, ds, 8, "torch")
    assert chosen == 2 and not info["cached"] and info["table"] == {"0": 100.0, "1": 180.0, "2": 200.0, "4": 196.0,
                                                                    "8": 150.0}
    calls.clear()
    _scripted(monkeypatch, {0: 100.0, 1: 100.0, 2: 100.0, 4: 100.0, 8: 100.0}, calls)
    chosen, info = autotune.choose_workers(None, ds, 8, "torch")
    assert (chosen, info["cached"], calls) == (2, True, [])  # the machine and data set were measured before
    monkeypatch.setenv("DALI_BACKEND_AUTOTUNE", "refresh")
    chosen, info = autotune.choose_workers(None, ds, 8, "torch")
    assert chosen == 0 and not info["cached"]  # all equal: the smallest
    assert json.loads((cache_home / "dali_backend" / "autotune.json").read_text())


def test_the_search_stops_past_the_peak_and_at_the_budget(ds, cache_home, monkeypatch):
    calls: list = []
    _scripted(monkeypatch, {0: 100.0, 1: 300.0, 2: 200.0, 4: 150.0, 8: 900.0}, calls)
    assert autotune.choose_workers(None, ds, 8, "torch")[0] == 1
    assert calls == [0, 1, 2]  # 2 fell below the best: larger settings are not tried
    calls.clear()
    _scripted(monkeypatch, {0: 100.0, 1: 110.0, 2: 120.0, 4: 130.0, 8: 140.0}, calls)
    monkeypatch.setenv("DALI_BACKEND_AUTOTUNE", "refresh")
    assert autotune.choose_workers(None, ds, 8, "torch", budget_s=0.0)[0] == 0 and calls == [0]


def test_a_damaged_cache_is_measured_again(ds, cache_home, monkeypatch):
    (cache_home / "dali_backend").mkdir()
    (cache_home / "dali_backend" / "autotune.json").write_text("{not json")
    calls: list = []
    _scripted(monkeypatch, {0: 50.0, 1: 100.0, 2: 101.0, 4: 20.0, 8: 20.0}, calls)
    assert autotune.choose_workers(None, ds, 8, "torch")[0] == 1 and calls


@pytest.mark.parametrize("kind", KINDS)
def test_a_real_calibration_chooses_a_working_setting(ds, cache_home, kind):
    with DaliLoader(ds, batch_size=8, num_workers="auto", **KINDS[kind]) as loader:
        assert loader.num_workers in autotune.candidates(loader.backend, autotune.usable_cores())
        assert str(loader.num_workers) in loader.autotune["table"] and not loader.autotune["cached"]
        assert sum(len(y) for _, y in loader) == len(ds)


def test_num_workers_is_checked(ds):
    with pytest.raises(ConfigError, match="num_workers='fast'.*'auto'"):
        DaliLoader(ds, num_workers="fast", backend="torch")
