"""num_workers="auto": the candidates, the choice rule, the cache (where it lives, what is read from it and
what is measured again instead: issue 32, cases 7, 9 and 14), and a real calibration on both backends.
(Whether the choice is within 5 % of the best of a full grid is measured by ``python -m bench.autotune``,
not by a timed test.)"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from tests.helpers import KINDS
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


def _scripted(monkeypatch, rates: dict, calls: list, cores: int = 8):
    monkeypatch.setattr(autotune, "usable_cores", lambda: cores)

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


# ---------------------------------------------------------------------------------------------- the cache
BATCH = 8


@pytest.fixture
def measured(monkeypatch):
    """Settings measured, from a made-up table of img/s (no real calibration), on 2 usable cores."""
    calls: list = []
    _scripted(monkeypatch, {0: 50.0, 1: 100.0, 2: 180.0}, calls, cores=2)
    return calls


def plant(ds, backend: str, entry) -> Path:
    """Write ``entry`` as the cached choice for this machine, data set and batch size."""
    path = autotune.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({autotune.cache_key(ds, BATCH, backend, 2): entry}))
    return path


def test_empty_or_relative_xdg_cache_home_means_unset(monkeypatch, tmp_path):
    from dali_backend.cli.cliargs import default_cache

    monkeypatch.setenv("HOME", str(tmp_path))
    home_cache = tmp_path / ".cache" / "dali_backend" / "autotune.json"
    for value in ("", "relative/cache"):
        monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert autotune.cache_path() == home_cache
        assert default_cache() == home_cache.parent  # the demo's synthetic data: the same rule
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert autotune.cache_path() == home_cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert autotune.cache_path() == tmp_path / "xdg" / "dali_backend" / "autotune.json"


GOOD = {"chosen": 2, "table": {"0": 50.0, "1": 100.0, "2": 180.0}, "backend": "torch", "cores": 2, "batch_size": BATCH,
        "measured_s": 4.5}

# entries that are valid JSON but not what choose_workers writes, or a choice these 2 cores cannot run
DAMAGED = {
    "no chosen": {k: v for k, v in GOOD.items() if k != "chosen"},
    "no table": {k: v for k, v in GOOD.items() if k != "table"},
    "chosen a string": {**GOOD, "chosen": "2"},
    "chosen a float": {**GOOD, "chosen": 2.5},
    "chosen a bool": {**GOOD, "chosen": True},
    "chosen null": {**GOOD, "chosen": None},
    "40 workers on 2 cores": {**GOOD, "chosen": 40, "table": {"40": 900.0}},
    "3 workers on 2 cores": {**GOOD, "chosen": 3, "table": {"3": 900.0}},
    "negative": {**GOOD, "chosen": -1, "table": {"-1": 900.0}},
    "table a list": {**GOOD, "table": [50.0, 100.0, 180.0]},
    "table of strings": {**GOOD, "table": {"0": "fast", "1": "faster", "2": "fastest"}},
    "chosen not measured": {**GOOD, "table": {"0": 50.0}},
    "not an object": [2],
    "a number": 2,
}


@pytest.mark.parametrize("what", DAMAGED)
def test_a_damaged_entry_is_measured_again(ds, cache_home, measured, what):
    plant(ds, "torch", DAMAGED[what])
    chosen, info = autotune.choose_workers(None, ds, BATCH, "torch")
    assert (chosen, info["cached"], measured) == (2, False, [0, 1, 2])
    # and replaced by a good entry, used as is by the next run
    measured.clear()
    assert autotune.choose_workers(None, ds, BATCH, "torch")[:1] == (2,) and measured == []


def test_a_good_entry_is_used_as_is(ds, cache_home, measured):
    plant(ds, "torch", {**GOOD, "chosen": 1})
    chosen, info = autotune.choose_workers(None, ds, BATCH, "torch")
    assert (chosen, info["cached"], measured) == (1, True, [])


def construct(ds, kind: str) -> DaliLoader:
    return DaliLoader(ds, batch_size=BATCH, num_workers="auto", **KINDS[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_the_constructor_measures_again_past_a_cached_count_of_40(ds, cache_home, measured, kind):
    backend = kind if kind.startswith("torch") else "dali-cpu"
    plant(ds, backend, {**GOOD, "chosen": 40, "table": {"40": 900.0}, "backend": backend})
    with construct(ds, kind) as loader:
        assert loader.num_workers == 2 and not loader.autotune["cached"] and measured
        assert sum(len(y) for _, y in loader) == len(ds)


def in_thread(fn, seconds: float):
    """``fn()``'s result, or a failure if it is still blocked after ``seconds``."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    return thread.is_alive(), out.get("result")


@pytest.mark.parametrize("kind", KINDS)
def test_a_fifo_at_the_cache_path_is_ignored_and_measured_again(ds, cache_home, measured, kind):
    path = autotune.cache_path()
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    blocked, loader = in_thread(lambda: construct(ds, kind), 60)
    if blocked:  # let the blocked open() return, so that the test process can end
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    assert not blocked, "DaliLoader(num_workers='auto') blocked on a FIFO at the autotune cache path"
    with loader:
        assert loader.num_workers == 2 and not loader.autotune["cached"] and measured
    assert path.is_fifo()  # not written through (a warning says the cache could not be written)


def test_a_directory_at_the_cache_path_is_measured_again(ds, cache_home, measured):
    autotune.cache_path().mkdir(parents=True)
    assert autotune.choose_workers(None, ds, BATCH, "torch")[0] == 2 and measured
