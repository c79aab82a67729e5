"""Shared fixtures: small generated data sets, JPEG builders, RNG hygiene."""

from __future__ import annotations

import random
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from dali_backend.synthetic import generate_defect_dataset


def cuda_available() -> bool:
    return torch.cuda.is_available()


def jpeg_bytes(h: int = 48, w: int = 64, seed: int = 0, color: bool = False, quality: int = 90) -> bytes:
    """A small textured JPEG, deterministic in its arguments."""
    rng = np.random.default_rng(seed)
    shape = (h, w, 3) if color else (h, w)
    img = cv2.GaussianBlur(rng.integers(0, 256, shape).astype(np.uint8), (0, 0), 1.5)
    ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return enc.tobytes()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture(autouse=True)
def prevent_leaking_rng():
    """Tests must not depend on, or change, global RNG state (torchvision's fixture)."""
    torch_state, py_state, np_state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    yield
    torch.set_rng_state(torch_state)
    random.setstate(py_state)
    np.random.set_state(np_state)


@pytest.fixture(scope="session")
def defect_root(tmp_path_factory) -> Path:
    """60 synthetic 160x120 colour JPEGs in normal/scratch/dent (80/13/7)."""
    return generate_defect_dataset(tmp_path_factory.mktemp("defects"), n=60, size=(160, 120), seed=3, progress=False)


@pytest.fixture(scope="session")
def defect_index(defect_root):
    from dali_backend import SampleIndex

    return SampleIndex.from_folder(defect_root, progress=False)
