"""Targets of an image, read and checked: boxes with class ids from COCO JSON, YOLO txt, Pascal VOC XML or
a one-row-per-box CSV, and the mask file paired with each image (the MVTec AD rule, a suffix/folder
rule). Every reader returns ONE table: relative image path -> :class:`ImageTargets`.

The contract, no executor: pure path -> records work (json, xml, csv of the standard library; numpy),
nothing decoded but a mask's PNG when it is checked. Bad targets are refused with a
:class:`~dali_backend.errors.TargetError` naming the file, the line or field, the value and the fix:
a box misplaced by a parser bug would train silently on the wrong pixels, so nothing is clipped or
skipped on the way in (clipping belongs to the augmentation's :class:`~dali_backend.transforms.targets.BoxPolicy`).

A table joins an index with :meth:`SampleIndex.with_targets <dali_backend.index.SampleIndex.with_targets>`
(or ``targets=`` of a builder; :mod:`dali_backend.index.targets`); readers record their call
(:class:`TargetTable`) so that ``update`` can read them again. The kernels that move masks and boxes
with a draw are in :mod:`dali_backend.transforms.targets`.
"""

from __future__ import annotations

from .boxes import read_box_csv, read_coco, read_voc, read_yolo
from .masks import check_mask, load_mask, mvtec_masks, suffix_masks
from .records import ImageTargets, TargetTable, check_boxes, merge_sources

__all__ = ["ImageTargets", "TargetTable", "check_boxes", "merge_sources", "read_coco", "read_yolo", "read_voc", "read_box_csv",
           "mvtec_masks", "suffix_masks", "check_mask", "load_mask"]
