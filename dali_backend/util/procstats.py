"""What the loader's processes use, read from the operating system: CPU seconds of DALI's operator
threads, and a process's memory (PSS). Shared by the loader's telemetry and the benchmark.

Linux ``/proc`` and psutil; elsewhere the readers return None rather than a guess.
"""

from __future__ import annotations

import os

import psutil

GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)


def dali_operator_cpu_seconds() -> float | None:
    """CPU seconds of this process's live DALI operator threads (named ``[DALI][TP<n>]Exec`` by DALI's
    thread pool): the time DALI's operators ran. None where no such thread is found (not Linux, a DALI
    that names its threads otherwise, or no pipeline alive). DALI's executor threads (``[DALI]
    Executor``) are not counted; they used ~0.01 s in a 1000-image run (measured).

    Read from ``/proc/self/task/<tid>/schedstat`` (nanoseconds on the CPU) where the kernel has it,
    else from ``stat`` (clock ticks, 10 ms: too coarse for short runs).
    """
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    total, found = 0.0, False
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for tid in tids:
        task = f"/proc/self/task/{tid}"
        try:
            with open(f"{task}/comm") as f:
                if not f.read().startswith("[DALI][TP"):
                    continue
            try:
                with open(f"{task}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e9
            except OSError:
                with open(f"{task}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
            found = True
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total if found else None  # no such thread: not measurable (not 0, which would blame the loader)


def process_memory_bytes(p: psutil.Process | int) -> int | None:
    """PSS of one process (a ``psutil.Process`` or a pid) where available, else its RSS; ``None`` when it
    is gone or unreadable."""
    if not isinstance(p, psutil.Process):
        try:
            p = psutil.Process(p)
        except (*GONE, psutil.AccessDenied):
            return None
    try:
        pss = getattr(p.memory_full_info(), "pss", None)
        if pss is not None:
            return int(pss)
    except psutil.AccessDenied:
        pass
    except GONE:
        return None
    try:
        return int(p.memory_info().rss)
    except (*GONE, psutil.AccessDenied):
        return None


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far; ``None`` when it is gone or unreadable."""
    try:
        t = psutil.Process(pid).cpu_times()
    except (*GONE, psutil.AccessDenied):
        return None
    return t.user + t.system

