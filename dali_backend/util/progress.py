"""Progress bars (tqdm) that switch themselves off when nobody is watching."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress_enabled(requested: bool | None) -> bool:
    """``None`` means: show a bar when stderr is a terminal and logging is not turned down."""
    if requested is not None:
        return requested
    return sys.stderr.isatty() and logging.getLogger("dali_backend").getEffectiveLevel() <= logging.INFO


def track(items: Iterable[T], total: int | None, desc: str, enabled: bool | None = None, unit: str = "file") -> Iterator[T]:
    """Iterate over ``items`` with a tqdm bar when :func:`progress_enabled` says so."""
    if not progress_enabled(enabled):
        yield from items
        return
    from tqdm import tqdm  # small and well kept; handles terminals, rates and nesting for us

    yield from tqdm(items, total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)
