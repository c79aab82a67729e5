"""Process-tree CPU time and memory, read through psutil, memory sampled in a thread.

DataLoader workers and DALI's Python workers are child processes, so both the CPU seconds and the
memory of a loader are summed over this process and all its descendants. Memory is the proportional
set size (PSS: a page shared by forked workers is split between them instead of counted once per
process) where the platform reports it (Linux), else the resident set size. A process that exits
between listing and reading is skipped: the figures are a sample, not an exact account.
"""

from __future__ import annotations

import os
import threading
import time

import psutil

from dali_backend.util.procstats import GONE, process_memory_bytes


def _tree(pid: int | None = None) -> list[psutil.Process]:
    root = psutil.Process(pid or os.getpid())
    try:
        return [root, *root.children(recursive=True)]
    except GONE:
        return [root]


def process_tree(pid: int | None = None) -> list[int]:
    """Process ids of ``pid`` (default: this process) and all its live descendants, ``pid`` first."""
    return [p.pid for p in _tree(pid)]


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of the live process tree, plus the reaped children of the root."""
    total = 0.0
    for i, p in enumerate(_tree(pid)):
        try:
            t = p.cpu_times()
        except (*GONE, psutil.AccessDenied):
            continue
        total += t.user + t.system
        if i == 0:  # the root's waited-for children (e.g. finished workers); not known on every platform
            total += getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return total


def tree_rss_mb(pid: int | None = None) -> float:
    """Memory of the process tree in MB (10^6 bytes): PSS summed over the processes, or RSS where PSS
    is not available. The name is kept for the JSON field ``peak_rss_mb`` that reports it."""
    return sum(m for m in map(process_memory_bytes, _tree(pid)) if m is not None) / 1e6


PEAK_RSS_INTERVAL_S = 0.25  # recorded in the results: peaks shorter than this may be missed


class PeakRss:
    """Samples :func:`tree_rss_mb` every ``interval`` seconds in a thread; ``.peak`` is the maximum.

    Reading PSS parses every process's ``smaps``: ~6 ms a sample for a DALI loader, so sampling every
    50 ms cost a tenth of a core and counted as the contender's CPU. ``.cpu_seconds`` is this
    thread's own CPU time, for the caller to take out of the tree's.
    """

    def __init__(self, interval: float = PEAK_RSS_INTERVAL_S):
        self.interval, self.peak = interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cpu = 0.0
        self._lock = threading.Lock()

    @property
    def cpu_seconds(self) -> float:
        with self._lock:
            return self._cpu

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.thread_time()
            self.peak = max(self.peak, tree_rss_mb())
            with self._lock:
                self._cpu += time.thread_time() - t0
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss_mb())
