"""Synthetic data with targets: defects drawn into an image AND its mask (and boxes), for the tests,
the guides and the demo, so that no one needs MVTec AD or COCO to try masks and boxes.

* :func:`generate_mvtec`: the MVTec AD layout, ``<out>/<category>/train/good/NNN.png``,
  ``test/{good,<defect>}/NNN.png`` and ``ground_truth/<defect>/NNN_mask.png`` (0 and 255).
* :func:`generate_detection`: a flat folder of images (no class folders) and a COCO JSON file with
  one box per defect, ``bbox`` the defect's exact pixel extent.

A defect is a filled ellipse (``stain``) or a thick band (``scratch``) of one flat colour, drawn
without antialiasing: its pixels in the image are exactly the mask's foreground, so a test can find
the defect in an augmented image by its colour and compare it with the moved mask. Images are PNG
(lossless: the defect's colour and edge survive). Every file is a pure function of the arguments.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import cv2
import numpy as np

from ..errors import ConfigError
from .synthetic import metal_surface

DEFECTS = ("scratch", "stain")
DEFECT_BGR = (40, 40, 230)  # a saturated red on grey metal: found again by colour after augmentation


def defect_mask(rng: np.random.Generator, kind: str, width: int, height: int) -> np.ndarray:
    """A ``height x width`` uint8 mask (1 inside the defect) of one ``kind`` defect, large enough that its
    edge is a small part of it (an ellipse of radius 20-30 % of the shorter side, a band 16-22 % wide)."""
    mask = np.zeros((height, width), np.uint8)
    short = min(width, height)
    cx, cy = int(rng.uniform(0.3, 0.7) * width), int(rng.uniform(0.3, 0.7) * height)
    if kind == "stain":
        axes = (int(rng.uniform(0.2, 0.3) * short), int(rng.uniform(0.2, 0.3) * short))
        cv2.ellipse(mask, (cx, cy), axes, float(rng.uniform(0, 180)), 0, 360, 1, -1, cv2.LINE_8)
    elif kind == "scratch":
        length, theta = rng.uniform(0.35, 0.6) * short, rng.uniform(0, math.pi)
        dx, dy = 0.5 * length * math.cos(theta), 0.5 * length * math.sin(theta)
        thick = max(2, int(rng.uniform(0.16, 0.22) * short))
        cv2.line(mask, (int(cx - dx), int(cy - dy)), (int(cx + dx), int(cy + dy)), 1, thick, cv2.LINE_8)
    else:
        raise ConfigError(f"defect kind {kind!r}; use one of {DEFECTS}")
    return mask


def defect_image(seed: int, kind: str | None, number: int, width: int, height: int,
                 color: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(image uint8 BGR or gray, mask uint8 0/1)``: metal with one ``kind`` defect (None: good, an empty mask)."""
    code = 0 if kind is None else 1 + DEFECTS.index(kind)
    rng = np.random.default_rng([int(seed), 7, code, int(number)])
    img = np.clip(metal_surface(rng, width, height, color), 0, 200).astype(np.uint8)
    mask = np.zeros((height, width), np.uint8) if kind is None else defect_mask(rng, kind, width, height)
    img[mask > 0] = DEFECT_BGR if color else 250
    return img, mask


def _write_png(path: Path, img: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, enc = cv2.imencode(".png", img)
    if not ok:
        raise RuntimeError(f"OpenCV failed to encode {path}")
    path.write_bytes(enc.tobytes())


def _check(size, counts: dict) -> tuple[int, int]:
    width, height = int(size[0]), int(size[1])
    if width < 16 or height < 16:
        raise ConfigError(f"size={tuple(size)}; give (width, height) of at least 16 x 16 pixels")
    for name, k in counts.items():
        if not isinstance(k, int) or k < 0:
            raise ConfigError(f"{name}={k!r}; give a number of images >= 0")
    return width, height


def generate_mvtec(out: str | os.PathLike, category: str = "plate", n_train: int = 8, n_good: int = 4,
                   n_defect: int = 4, size: tuple[int, int] = (160, 128), seed: int = 0, color: bool = True) -> Path:
    """Write one MVTec AD category under ``out`` and return ``out`` (the MVTec root).

    Args:
        out: the MVTec root (created): ``<out>/<category>/...``.
        category: the category folder's name.
        n_train: defect-free training images (``train/good``).
        n_good: defect-free test images (``test/good``, no mask: all background).
        n_defect: test images per defect kind (:data:`DEFECTS`), each with its ``_mask.png`` (0/255).
        size: ``(width, height)`` of every image.
        seed: the set is a pure function of the arguments.
        color: BGR PNGs, else gray.
    """
    width, height = _check(size, {"n_train": n_train, "n_good": n_good, "n_defect": n_defect})
    cat = Path(out) / category
    for split, kind, n in [("train", None, n_train), ("test", None, n_good)] + [("test", k, n_defect) for k in DEFECTS]:
        for i in range(n):
            img, mask = defect_image(seed + (split == "train") * 1000, kind, i, width, height, color)
            _write_png(cat / split / (kind or "good") / f"{i:03d}.png", img)
            if kind is not None:
                _write_png(cat / "ground_truth" / kind / f"{i:03d}_mask.png", mask * 255)
    return Path(out)


def generate_detection(out: str | os.PathLike, n: int = 8, size: tuple[int, int] = (160, 128), seed: int = 0,
                       max_defects: int = 3) -> Path:
    """Write ``n`` images to ``<out>/images/NNN.png`` (no class folders) with 1..``max_defects`` defects each,
    and ``<out>/annotations.json`` (COCO: ``bbox`` ``[x, y, w, h]`` the exact pixel extent of each defect,
    ``category_id`` 1 for ``scratch``, 2 for ``stain``); return the JSON's path."""
    width, height = _check(size, {"n": n, "max_defects": max_defects})
    out = Path(out)
    images, annotations = [], []
    for i in range(n):
        rng = np.random.default_rng([int(seed), 11, i])
        img = np.clip(metal_surface(rng, width, height, True), 0, 200).astype(np.uint8)
        for _ in range(int(rng.integers(1, max(1, max_defects) + 1))):
            kind = DEFECTS[int(rng.integers(len(DEFECTS)))]
            mask = defect_mask(rng, kind, width, height)
            img[mask > 0] = DEFECT_BGR
            ys, xs = np.nonzero(mask)
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": 1 + DEFECTS.index(kind),
                                "bbox": [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1),
                                         int(ys.max() - ys.min() + 1)], "iscrowd": 0})
        name = f"images/{i:03d}.png"
        _write_png(out / name, img)
        images.append({"id": i + 1, "file_name": name, "width": width, "height": height})
    coco = {"images": images, "annotations": annotations,
            "categories": [{"id": 1 + k, "name": name} for k, name in enumerate(DEFECTS)]}
    path = out / "annotations.json"
    path.write_text(json.dumps(coco))
    return path
