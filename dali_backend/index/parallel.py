"""Checking many files in threads without one ``Future`` per file.

``ThreadPoolExecutor.map(fn, items)`` submits every item at once: a ``Future`` (with its condition
variable) per file, ~1.5 kB each, alive until the map is consumed. Measured on 100 000 files: the
header check peaked at 237 MB RSS (56 MB before), an update at 260 MB. Handing each thread a chunk
of items keeps a few dozen futures alive instead (an update: 123 MB, and 1.9x faster).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..util.progress import progress_enabled

T = TypeVar("T")
CHUNK = 2048  # at most this many items per task
TASKS_PER_WORKER = 4  # at least this many tasks per thread when there are few items (I/O latency overlaps)


def map_in_chunks(fn: Callable[[int], T], n: int, workers: int, progress: bool | None, desc: str) -> list[T]:
    """``[fn(0), ..., fn(n - 1)]`` in ``workers`` threads, a chunk of items per task (few futures alive)."""
    size = max(1, min(CHUNK, -(-n // (max(1, workers) * TASKS_PER_WORKER))))

    def run(start: int) -> list:
        return [fn(i) for i in range(start, min(start + size, n))]

    bar = None
    if progress_enabled(progress):
        from tqdm import tqdm

        bar = tqdm(total=n, desc=desc, unit="file", leave=False, dynamic_ncols=True)
    out: list = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for part in pool.map(run, range(0, n, size)):
            out += part
            if bar is not None:
                bar.update(len(part))
    if bar is not None:
        bar.close()
    return out
