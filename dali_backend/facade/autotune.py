"""``num_workers="auto"``: choose the loader's worker count from a short calibration on the user's data.

Each candidate (torch backend: 0, 1, 2, 4, ... worker processes; DALI: 1, 2, 4, ... operator threads)
runs batches of the real data set, spec and batch size with its own temporary loader for about
:data:`MEASURE_S` seconds; the first batch (start-up) is not timed. The search goes up while throughput improves and stops at the
time budget; the choice is the *smallest* setting within :data:`WITHIN` of the best measured (more
workers cost memory and cores the training step may need). Candidates never exceed the cores this
process may use divided by the processes torchrun started on this node.

The choice is cached per machine and data set (``$XDG_CACHE_HOME/dali_backend/autotune.json``, or
``~/.cache/dali_backend/`` when that is unset or empty: host, cores, local ranks, backend, index
fingerprint, spec, batch size), so later runs start at once; pass ``DALI_BACKEND_AUTOTUNE=refresh`` to
measure again. A cache that is not a regular file, not JSON, or whose entry lacks a field, has a field of
another type, or chose a setting this machine's cores do not allow, is measured again.
Every measurement is logged (INFO) and kept on the loader as ``loader.autotune``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
from pathlib import Path

log = logging.getLogger("dali_backend")

WITHIN = 0.05  # the smallest setting within 5 % of the best throughput wins
BATCHES = 4  # timed batches per candidate at least (after one untimed) ...
MEASURE_S = 1.5  # ... and at least this many seconds of them (or MAX_BATCHES), so that noise averages out
MAX_BATCHES = 200
BUDGET_S = 30.0  # calibration stops trying larger settings after this much time
CACHE_FILE = "autotune.json"


def usable_cores() -> int:
    """Cores this process may run on, shared among the local ranks torchrun started."""
    from ..dali.devices import local_ranks

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // local_ranks()[1])


def candidates(backend: str, cores: int) -> list[int]:
    """Settings to try, smallest first: worker processes (torch, 0 = in the training process), the
    thread executor's threads (0 = the calling thread) or DALI threads."""
    from .executors import executor_kind

    kind = executor_kind(backend)
    out, n = ([0] if kind.worker_processes or kind.threads else []), 1
    while n <= cores:
        out.append(n)
        n *= 2
    if out[-1] != cores:
        out.append(cores)
    return out


def cache_home() -> Path:
    """This library's folder in the user's cache: ``$XDG_CACHE_HOME/dali_backend``, where an empty or
    relative ``XDG_CACHE_HOME`` counts as unset (the XDG rule): ``~/.cache/dali_backend``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "dali_backend"


def cache_path() -> Path:
    return cache_home() / CACHE_FILE


def cache_key(dataset, batch_size: int, backend: str, cores: int) -> str:
    from ..dali.devices import local_ranks

    what = [socket.gethostname(), os.cpu_count(), cores, local_ranks()[1], backend, dataset.index.fingerprint,
            repr(dataset.spec), int(batch_size)]
    return hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:32]


def _read_cache() -> dict:
    """The cache's entries; ``{}`` for none yet, a damaged one, or anything but a regular file at the
    path (a FIFO would block ``open()``): measured again and rewritten."""
    from ..formats.jpeg import open_regular

    try:
        with open_regular(cache_path()) as f:
            data = json.loads(f.read().decode("utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError) as e:
        if not isinstance(e, FileNotFoundError):
            log.info("autotune: its cache %s cannot be used (%s); measuring again", cache_path(), e)
        return {}


def _entry_problem(entry, backend: str, cores: int) -> str | None:
    """Why a cached ``entry`` cannot be used on this machine (None: it can): its fields and types are
    those :func:`choose_workers` writes, and its choice is one of this machine's candidates (so never
    more workers than the usable cores)."""
    if not isinstance(entry, dict):
        return f"an entry of type {type(entry).__name__}, not an object"
    chosen, table = entry.get("chosen"), entry.get("table")
    if isinstance(chosen, bool) or not isinstance(chosen, int):
        return f"chosen={chosen!r}, not an integer"
    if chosen not in candidates(backend, cores):
        return f"chosen={chosen} is not a setting for {cores} usable cores ({candidates(backend, cores)})"
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, (int, float))
                                              and not isinstance(v, bool) for k, v in table.items()):
        return f"table={table!r}, not a mapping of settings to img/s"
    if str(chosen) not in table:
        return f"chosen={chosen} was not measured (table {table})"
    return None


def _write_cache(entries: dict) -> None:
    from ..index import write_atomic

    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda f: f.write(json.dumps(entries, indent=1).encode()), what="autotune cache")
    except Exception as e:  # noqa: BLE001 - a cache that cannot be written only costs a calibration next time
        log.warning("autotune: could not write its cache %s (%s); the next run calibrates again", path, e)


def measure(make_loader, dataset, batch_size: int, workers: int, batches: int = BATCHES,
            seconds: float = MEASURE_S) -> float:
    """Images per second of a temporary loader (``make_loader(workers, sampler)``, the facade's) over at
    least ``batches`` timed batches and ``seconds`` seconds (at most :data:`MAX_BATCHES`)."""
    from ..sampling.sampler import WeightedSampler

    sampler = WeightedSampler(dataset.index, num_samples=(MAX_BATCHES + 1) * batch_size, seed=0)
    with make_loader(workers, sampler) as loader:
        it = iter(loader)
        next(it)  # start-up: workers, pipeline, first decode
        t0, n, done = time.perf_counter(), 0, 0
        for images, _ in it:
            n, done = n + len(images), done + 1
            if done >= batches and time.perf_counter() - t0 >= seconds:
                break
        rate = n / (time.perf_counter() - t0)
        it.close()
        return rate


def choose_workers(make_loader, dataset, batch_size: int, backend: str,
                   budget_s: float = BUDGET_S) -> tuple[int, dict]:
    """``(the chosen setting, {"table": {setting: img/s}, "cached": bool, ...})``; see the module docstring.

    ``make_loader(workers, sampler)`` builds a loader like the one being tuned, with that setting."""
    cores = usable_cores()
    key = cache_key(dataset, batch_size, backend, cores)
    cache = _read_cache()
    problem = _entry_problem(cache[key], backend, cores) if key in cache else None
    if problem:
        log.info("autotune: the cached entry for this machine and data set cannot be used (%s); measuring again",
                 problem)
    if key in cache and not problem and os.environ.get("DALI_BACKEND_AUTOTUNE") != "refresh":
        entry = cache[key]
        log.info("autotune: num_workers=%d for this machine and data set (cached in %s; measured %s)",
                 entry["chosen"], cache_path(), entry["table"])
        return int(entry["chosen"]), {**entry, "cached": True}
    table: dict[int, float] = {}
    start = time.perf_counter()
    for workers in candidates(backend, cores):
        table[workers] = measure(make_loader, dataset, batch_size, workers)
        log.info("autotune: num_workers=%d: %.1f img/s", workers, table[workers])
        best = max(table.values())
        if table[workers] < best * (1 - WITHIN) and len(table) > 2:
            break  # past the peak
        if time.perf_counter() - start > budget_s:
            log.info("autotune: time budget of %.0f s spent; choosing among what was measured", budget_s)
            break
    best = max(table.values())
    chosen = min(w for w, rate in table.items() if rate >= best * (1 - WITHIN))
    entry = {"chosen": chosen, "table": {str(w): round(r, 1) for w, r in table.items()}, "backend": backend,
             "cores": cores, "batch_size": int(batch_size), "measured_s": round(time.perf_counter() - start, 1)}
    log.info("autotune: chose num_workers=%d (%.1f img/s; best %.1f; the smallest within %.0f%% of the best)",
             chosen, table[chosen], best, 100 * WITHIN)
    cache[key] = entry
    _write_cache(cache)
    return chosen, {**entry, "cached": False}


def tune_workers(loader_class, dataset, batch_size: int, chosen: str, **kwargs) -> tuple[int, dict]:
    """``num_workers="auto"``: :func:`choose_workers` with temporary ``loader_class(dataset, batch_size,
    sampler=..., num_workers=..., **kwargs)`` loaders like the one being made, on the ``chosen`` backend."""

    def make_loader(workers: int, sampler):
        return loader_class(dataset, batch_size, sampler=sampler, num_workers=workers, **kwargs)

    return choose_workers(make_loader, dataset, batch_size, chosen)
