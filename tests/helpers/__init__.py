"""What the tests share besides fixtures (those stay in tests/conftest.py): JPEG builders, the backends
each cross-backend test compares, the CUDA marks, the command line in-process; and, beside this
module, the helper modules (corpus, levels, reference models, the scripts subprocess tests run)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch


def cuda_available() -> bool:
    return torch.cuda.device_count() > 0  # NVML: does not initialise the driver (DALI could not fork after)


needs_cuda = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
CUDA = [pytest.mark.cuda, needs_cuda]  # marks of a CUDA-only case: pytest.param(..., marks=CUDA)
# The loaders every cross-backend test compares, as DaliLoader keywords: DALI's graph on CPU operators,
# the OpenCV executor in DataLoader worker processes, and the same work on threads of this process.
# BACKENDS adds DALI on the GPU, a case skipped without CUDA.
KINDS = {"dali-cpu": dict(device="cpu", backend="dali"), "torch": dict(device="cpu", backend="torch"),
         "torch-threads": dict(device="cpu", backend="torch-threads")}
BACKENDS = [*KINDS, pytest.param("dali-gpu", marks=CUDA)]
LOADER_ARGS = {**KINDS, "dali-gpu": dict(device="cuda", backend="dali")}  # DaliLoader keywords of each of BACKENDS


def jpeg_bytes(h: int = 48, w: int = 64, seed: int = 0, color: bool = False, quality: int = 90) -> bytes:
    """A small textured JPEG, deterministic in its arguments."""
    rng = np.random.default_rng(seed)
    shape = (h, w, 3) if color else (h, w)
    img = cv2.GaussianBlur(rng.integers(0, 256, shape).astype(np.uint8), (0, 0), 1.5)
    ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return enc.tobytes()


def set_sof_size(data: bytes, w: int, h: int) -> bytes:
    """The JPEG with its baseline frame header claiming ``w`` x ``h`` pixels (the data is unchanged)."""
    i = data.index(b"\xff\xc0")
    b = bytearray(data)
    b[i + 5:i + 7] = h.to_bytes(2, "big")
    b[i + 7:i + 9] = w.to_bytes(2, "big")
    return bytes(b)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """Insert an EXIF APP1 segment carrying ``orientation`` (1-8) right after SOI."""
    ifd = (b"II*\x00" + (8).to_bytes(4, "little") + (1).to_bytes(2, "little")
           + (0x0112).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little")
           + orientation.to_bytes(2, "little") + b"\x00\x00" + (0).to_bytes(4, "little"))
    payload = b"Exif\x00\x00" + ifd
    return jpeg[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + jpeg[2:]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``dali_backend.cli.main(argv)`` in this process: (exit status, stdout, stderr); argparse's exits included."""
    from dali_backend.cli import main

    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def storage_packages_missing() -> str | None:
    """Why the object-storage tests cannot run here (a package of the storage/test extras missing), or None."""
    import importlib.util

    missing = [m for m in ("boto3", "moto", "flask") if importlib.util.find_spec(m) is None]
    return f"needs {', '.join(missing)}: pip install -e '.[test]'" if missing else None
