"""A synthetic industrial defect data set: brushed-metal surfaces, some scratched, some dented.

Used by the tests, the demo and the benchmark, so that nobody needs to download data. Images are
deterministic functions of (seed, class, number); the folder layout is ``out/<class>/<class>_NNNNN.jpg``
with the classes ``normal``, ``scratch`` and ``dent`` in the proportions asked for (default 80/13/7,
the imbalance of a real inspection line). Other formats (``format="png"``, ``"bmp"``, ``"tiff"``,
``"webp"``) and 12- or 16-bit PNG/TIFF (``bit_depth``; 12 bits stored in 16, values below 4096) hold
the same scenes: a 16-bit image is the scene before its rounding to 8 bits, ``round(v * 257)``, so
it has values an 8-bit file cannot hold. The default (JPEG, 8 bits) is unchanged byte for byte.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from ..errors import ConfigError
from ..util.progress import track

log = logging.getLogger("dali_backend")
CLASSES = ("normal", "scratch", "dent")
DEFAULT_FRACTIONS = (0.80, 0.13, 0.07)
# format -> (file extension, the bit depths OpenCV writes it at)
FORMATS = {"jpeg": (".jpg", (8,)), "png": (".png", (8, 12, 16)), "bmp": (".bmp", (8,)),
           "tiff": (".tif", (8, 12, 16)), "webp": (".webp", (8,))}


def class_counts(n: int, fractions: Sequence[float]) -> list[int]:
    """Split ``n`` by ``fractions`` (largest remainders), each class getting at least one when n allows."""
    f = np.asarray(fractions, dtype=np.float64)
    raw = f / f.sum() * n
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts))[: n - counts.sum()]:
        counts[i] += 1
    for i in range(len(counts)):  # keep rare classes present in small sets
        if counts[i] == 0 and n >= len(counts):
            j = int(np.argmax(counts))
            counts[j] -= 1
            counts[i] += 1
    return counts.tolist()


def metal_surface(rng: np.random.Generator, width: int, height: int, color: bool) -> np.ndarray:
    """Brushed metal: streaks along x, a slow illumination gradient, a slight steel tint."""
    streak_w = max(2, width // 32)
    noise = rng.normal(0.0, 1.0, size=(height, streak_w)).astype(np.float32)
    streaks = cv2.resize(noise, (width, height), interpolation=cv2.INTER_LINEAR)
    fine = rng.normal(0.0, 1.0, size=(height, width)).astype(np.float32)
    fine = cv2.blur(fine, (9, 1))
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    gradient = (np.cos(angle) * xx / width + np.sin(angle) * yy / height) * rng.uniform(20, 45)
    base = rng.uniform(105, 150)
    gray = base + 14.0 * streaks + 6.0 * fine + gradient
    if not color:
        return gray
    tint = np.array([rng.uniform(0.97, 1.0), rng.uniform(0.98, 1.01), rng.uniform(1.0, 1.05)], dtype=np.float32)
    return gray[:, :, None] * tint[None, None, :]  # BGR


def add_scratches(rng: np.random.Generator, img: np.ndarray) -> None:
    h, w = img.shape[:2]
    for _ in range(int(rng.integers(1, 4))):
        x0, y0 = rng.uniform(0.1, 0.9) * w, rng.uniform(0.1, 0.9) * h
        length, theta = rng.uniform(0.15, 0.6) * min(w, h), rng.uniform(0, math.pi)
        x1, y1 = x0 + length * math.cos(theta), y0 + length * math.sin(theta)
        thickness = max(1, int(round(min(w, h) * rng.uniform(0.002, 0.006))))
        level = float(rng.choice([-1.0, 1.0]) * rng.uniform(45, 80))
        mask = np.zeros((h, w), np.float32)
        cv2.line(mask, (int(x0), int(y0)), (int(x1), int(y1)), 1.0, thickness, cv2.LINE_AA)
        img += (mask * level)[..., None] if img.ndim == 3 else mask * level


def add_dent(rng: np.random.Generator, img: np.ndarray) -> None:
    h, w = img.shape[:2]
    cx, cy = rng.uniform(0.2, 0.8) * w, rng.uniform(0.2, 0.8) * h
    r = rng.uniform(0.04, 0.12) * min(w, h)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    dx, dy = (xx - cx) / r, (yy - cy) / r
    bowl = np.exp(-(dx * dx + dy * dy))
    light = rng.uniform(0, 2 * math.pi)
    shade = (np.cos(light) * dx + np.sin(light) * dy) * bowl * rng.uniform(40, 70) - bowl * 15.0
    img += shade[..., None] if img.ndim == 3 else shade


def make_image(seed: int, cls: str, number: int, width: int, height: int, color: bool = True,
               bit_depth: int = 8) -> np.ndarray:
    """One image (uint8, BGR when ``color``; uint16 for ``bit_depth`` 12 or 16) as a pure function of its
    arguments: the same scene at every depth, ``round(v * (2**bits - 1) / 255)`` of its float levels ``v``."""
    rng = np.random.default_rng([int(seed), CLASSES.index(cls), int(number)])
    img = metal_surface(rng, width, height, color)
    if cls == "scratch":
        add_scratches(rng, img)
    elif cls == "dent":
        add_dent(rng, img)
    if bit_depth == 8:
        return np.clip(img, 0, 255).astype(np.uint8)
    top = (1 << bit_depth) - 1
    return np.rint(np.clip(img, 0, 255) * np.float32(top / 255.0)).astype(np.uint16)


def encode(img: np.ndarray, fmt: str, quality: int = 92) -> bytes:
    """``img`` (BGR or gray, uint8 or uint16) encoded as ``fmt`` (a key of :data:`FORMATS`) by OpenCV;
    ``quality`` for JPEG and WebP (WebP above 100: lossless)."""
    ext = FORMATS[fmt][0]
    flags = {"jpeg": [cv2.IMWRITE_JPEG_QUALITY, quality], "webp": [cv2.IMWRITE_WEBP_QUALITY, quality]}.get(fmt, [])
    ok, enc = cv2.imencode(ext, img, flags)
    if not ok:
        raise RuntimeError(f"OpenCV failed to encode a {img.dtype} image of shape {img.shape} as {fmt}")
    return enc.tobytes()


def generate_defect_dataset(out: str | os.PathLike, n: int = 300, size: tuple[int, int] = (640, 480),
                            fractions: Sequence[float] = DEFAULT_FRACTIONS, quality: int = 92, seed: int = 0,
                            color: bool = True, workers: int | None = None, progress: bool | None = None,
                            format: str = "jpeg", bit_depth: int = 8) -> Path:
    """Write ``n`` images (JPEGs by default) to ``out/<class>/`` and return ``out``; reuses a complete earlier run.

    Args:
        out: destination folder (created).
        n: number of images in all.
        size: ``(width, height)`` of every image.
        fractions: share of ``normal``, ``scratch``, ``dent``.
        quality: JPEG quality 1-100.
        seed: the set is a pure function of the arguments.
        color: colour (3-channel) JPEGs, else grayscale.
        workers: encoding threads (default: CPU count).
        format: ``"jpeg"`` (default), ``"png"``, ``"bmp"``, ``"tiff"`` or ``"webp"``.
        bit_depth: 8 (default), or 12 / 16 for ``"png"`` and ``"tiff"`` (uint16 files; 12 bits: values
            below 4096). Read them with a spec holding a ``Window`` (``Window(0, 4095)`` for 12 bits).
    """
    if format not in FORMATS:
        raise ConfigError(f"format={format!r}; use one of {', '.join(FORMATS)}")
    if bit_depth not in FORMATS[format][1]:
        raise ConfigError(f"bit_depth={bit_depth!r} for format={format!r}; {format} is written at "
                          f"{' or '.join(map(str, FORMATS[format][1]))} bits (12 and 16 bits: png or tiff)")
    if n < 1:
        raise ConfigError(f"n={n}; must be at least 1 image")
    if len(fractions) != len(CLASSES) or any(f < 0 for f in fractions) or sum(fractions) <= 0:
        raise ConfigError(f"fractions={tuple(fractions)}; give {len(CLASSES)} non-negative shares for {CLASSES}")
    width, height = (int(size[0]), int(size[1]))
    if width < 1 or height < 1:
        raise ConfigError(f"size={size}; must be (width, height) >= 1")
    if not 1 <= quality <= 100:
        raise ConfigError(f"quality={quality}; must lie in [1, 100]")
    out = Path(out)
    params = {"n": n, "size": [width, height], "fractions": [float(f) for f in fractions], "quality": quality,
              "seed": seed, "color": color, "version": 1}
    if (format, bit_depth) != ("jpeg", 8):  # the default's marker stays as it was (earlier runs are reused)
        params.update(format=format, bit_depth=bit_depth)
    marker = out / ".synthetic.json"
    if marker.is_file():
        try:
            if json.loads(marker.read_text()) == params:
                return out
        except (OSError, ValueError):
            pass
    counts = class_counts(n, fractions)
    jobs = [(cls, i) for cls, k in zip(CLASSES, counts) for i in range(k)]
    for cls in CLASSES:
        (out / cls).mkdir(parents=True, exist_ok=True)

    def write(job: tuple[str, int]) -> None:
        cls, i = job
        img = make_image(seed, cls, i, width, height, color, bit_depth)
        (out / cls / f"{cls}_{i:05d}{FORMATS[format][0]}").write_bytes(encode(img, format, quality))

    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        for _ in track(pool.map(write, jobs), total=len(jobs), desc="generating", enabled=progress, unit="img"):
            pass
    marker.write_text(json.dumps(params))
    log.info("generated %d synthetic images (%s) in %s", n, ", ".join(f"{c} {k}" for c, k in zip(CLASSES, counts)), out)
    return out
