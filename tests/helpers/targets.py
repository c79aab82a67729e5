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


def clip_index_at(folder, size: tuple[int, int], runs: int = 2, frames: int = 4) -> SampleIndex:
    """Line-camera runs with targets under ``folder``: ``images/<class>/run<r>/frame<k>.png`` for the classes
    ``good`` (no mask file: all background, no box) and ``stain`` / ``scratch`` (each frame its own
    defect, drawn into the image, its mask ``masks/.../frame<k>_mask.png`` and its box), ``runs``
    sequences of ``frames`` frames per class; indexed with masks and boxes (box class 1 + kind)."""
    from pathlib import Path

    import cv2
    import numpy as np

    from dali_backend.core.defects import DEFECTS, defect_image
    from dali_backend.targets import ImageTargets

    def write_png(path: Path, img: np.ndarray) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        assert cv2.imwrite(str(path), img), path

    root, width, height = Path(folder), int(size[0]), int(size[1])
    table = {}
    for kind in (None, *DEFECTS):
        for r in range(runs):
            for k in range(frames):
                rel = f"{kind or 'good'}/run{r}/frame{k}.png"
                img, mask = defect_image(r, kind, k, width, height)
                write_png(root / "images" / rel, img)
                boxes, labels, mask_rel = np.zeros((0, 4), np.float32), np.zeros(0, np.int64), None
                if kind is not None:
                    mask_rel = f"masks/{rel[:-4]}_mask.png"
                    write_png(root / mask_rel, mask * 255)
                    ys, xs = np.nonzero(mask)
                    boxes = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
                    labels = np.array([1 + DEFECTS.index(kind)], np.int64)
                table[rel] = ImageTargets(boxes=boxes, labels=labels, mask=f"../{mask_rel}" if mask_rel else None)
    return SampleIndex.from_folder(root / "images", progress=False).with_targets(table, num_classes=2, binary=True)
