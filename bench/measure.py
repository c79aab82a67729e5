"""Process-tree CPU time and resident memory, read from /proc (Linux), sampled in a thread.

DataLoader workers and DALI's Python workers are child processes, so both the CPU seconds and the
memory of a loader are summed over this process and all its descendants.
"""

from __future__ import annotations

import os
import threading
import time

_CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def process_tree(pid: int | None = None) -> list[int]:
    pid = pid or os.getpid()
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children(p)
    return seen


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of the live process tree (plus reaped children of the root)."""
    total = 0.0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
            total += (utime + stime + (cutime + cstime if p == (pid or os.getpid()) else 0)) / _CLK
        except (OSError, ValueError, IndexError):
            pass
    return total


def _pss_bytes(p: int) -> int | None:
    try:
        with open(f"/proc/{p}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def tree_rss_mb(pid: int | None = None) -> float:
    """Memory of the process tree in MB: proportional set size (pages shared by forked workers are
    split between them, not counted once per process), or RSS where PSS is not available."""
    total = 0
    for p in process_tree(pid):
        pss = _pss_bytes(p)
        if pss is not None:
            total += pss
            continue
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e6


class PeakRss:
    """Samples :func:`tree_rss_mb` every ``interval`` seconds in a thread; ``.peak`` is the maximum."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.peak = interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_mb())
            time.sleep(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss_mb())
