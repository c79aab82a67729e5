"""Indexes with targets built from the synthetic generators (dali_backend.core.defects)."""

from __future__ import annotations

from dali_backend.core.defects import generate_detection, generate_mvtec
from dali_backend.index import SampleIndex
from dali_backend.targets import read_coco


def mvtec_index_at(folder, size: tuple[int, int], n_good: int = 2, n_defect: int = 2) -> SampleIndex:
    """The ``test`` split of one synthetic MVTec AD category under ``folder``, with its masks."""
    root = generate_mvtec(folder, n_train=1, n_good=n_good, n_defect=n_defect, size=size)
    return SampleIndex.from_mvtec(root, "plate", "test")


def detection_index_at(folder, size: tuple[int, int], n: int) -> SampleIndex:
    """A flat COCO-annotated folder of ``n`` synthetic images under ``folder``, with its boxes."""
    return SampleIndex.from_annotations(folder, read_coco(generate_detection(folder, n=n, size=size), folder))
