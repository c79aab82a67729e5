"""A colour data set decoded to gray without a word: the preset's default ``color="gray"`` meets colour files.

The preset decodes gray (``AugmentSpec(size=256)``: CLAHE on luma, the defect-inspection default), so a
colour data set loses its chroma silently: a hue-only defect's contrast fell from 0.649 to 0.118 in a
user's run. :func:`warn_if_colour_dropped` reads the frame headers of a few files (the first of each
class, at most :data:`PROBED`; 64 KiB each, local files only: no network read in a constructor) and
warns once per index when one of them has 3 components. A spec that asks for gray (``color="gray"``,
or a ``Grayscale`` in an operation list) is left alone: that is a choice, not a default.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import ColorDroppedWarning
from ..formats.registry import read_header

PROBED = 16  # files whose headers are read: one per class first, then spread over the index
_HEAD = 65536  # bytes read from each: the frame header comes before the scan data
_WARNED: set[str] = set()  # index fingerprints already warned about in this process


def probe_positions(labels: np.ndarray, limit: int = PROBED) -> list[int]:
    """Up to ``limit`` sample positions: the first of each class, then evenly spread ones."""
    labels = np.asarray(labels)
    if not len(labels):
        return []
    _, first = np.unique(labels, return_index=True)
    spread = np.linspace(0, len(labels) - 1, num=min(limit, len(labels))).astype(np.int64)
    out = list(dict.fromkeys([int(p) for p in np.sort(first)] + [int(p) for p in spread]))
    return out[:limit]


def colour_files(index, positions) -> list[str]:
    """The relative paths among ``positions`` whose image header declares 3 channels."""
    found = []
    for p in positions:
        try:
            with open(index.abspath(p), "rb") as f:
                header = read_header(f.read(_HEAD))
        except OSError:
            continue  # the loader reports unreadable files where they are read, with their own errors
        if header is not None and header.channels == 3:
            found.append(index.paths[p])
    return found


def gray_by_default(spec) -> bool:
    """The preset with ``color`` left at its default (gray), not asked for."""
    return spec.ops is None and spec.color == "gray" and not getattr(spec, "color_given", True)


def warn_if_colour_dropped(index, spec) -> None:
    """:class:`ColorDroppedWarning` once per index when ``spec`` decodes gray by default and a probed
    file of ``index`` is in colour."""
    if not gray_by_default(spec) or index.is_remote or index.fingerprint in _WARNED:
        return
    found = colour_files(index, probe_positions(index.labels))
    if not found:
        return
    _WARNED.add(index.fingerprint)
    warnings.warn(ColorDroppedWarning(
        f"ImageDataset: the index holds colour images ({found[0]!r}"
        f"{f' and {len(found) - 1} more of the {PROBED} files probed' if len(found) > 1 else ''}) and "
        f"AugmentSpec(size={spec.size}) decodes them to gray (the preset's default color='gray'): pass AugmentSpec(..., color=\"rgb\") to "
        "keep the colour, or color=\"gray\" to say that gray is meant (no warning then)"), stacklevel=3)
