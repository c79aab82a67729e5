"""Shared fixtures: small generated data sets, JPEG builders, RNG hygiene."""

from __future__ import annotations

import random
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from dali_backend.core.synthetic import generate_defect_dataset


def cuda_available() -> bool:
    return torch.cuda.device_count() > 0  # NVML: does not initialise the driver (DALI could not fork after)


needs_cuda = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
CUDA = [pytest.mark.cuda, needs_cuda]  # marks of a CUDA-only case: pytest.param(..., marks=CUDA)
# The loaders every cross-backend test compares, as DaliLoader keywords: DALI's graph on CPU operators,
# and the OpenCV executor. BACKENDS adds DALI on the GPU, a case skipped without CUDA.
KINDS = {"dali-cpu": dict(device="cpu", backend="dali"), "torch": dict(device="cpu", backend="torch")}
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


def with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """Insert an EXIF APP1 segment carrying ``orientation`` (1-8) right after SOI."""
    ifd = (b"II*\x00" + (8).to_bytes(4, "little") + (1).to_bytes(2, "little")
           + (0x0112).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little")
           + orientation.to_bytes(2, "little") + b"\x00\x00" + (0).to_bytes(4, "little"))
    payload = b"Exif\x00\x00" + ifd
    return jpeg[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + jpeg[2:]


@pytest.fixture(scope="session")
def odd_root(tmp_path_factory) -> Path:
    """Awkward images: 1x1, 7x5, 2000x40, 40x2000, EXIF-rotated, gray and colour, one large."""
    from dali_backend.core.synthetic import make_image

    root = tmp_path_factory.mktemp("odd")
    write(root / "a" / "one.jpg", jpeg_bytes(1, 1, seed=1))
    write(root / "a" / "seven_by_five.jpg", jpeg_bytes(7, 5, seed=2, color=True))
    write(root / "a" / "wide.jpg", jpeg_bytes(40, 2000, seed=3))
    write(root / "b" / "tall.jpg", jpeg_bytes(2000, 40, seed=4, color=True))
    write(root / "b" / "exif6.jpg", with_exif_orientation(jpeg_bytes(60, 90, seed=5, color=True), 6))
    write(root / "b" / "exif3.jpg", with_exif_orientation(jpeg_bytes(61, 33, seed=6), 3))
    big = make_image(7, "scratch", 0, 1024, 768)
    write(root / "c" / "big.jpg", cv2.imencode(".jpg", big, [cv2.IMWRITE_JPEG_QUALITY, 92])[1].tobytes())
    write(root / "c" / "progressive.jpg", cv2.imencode(".jpg", big[:300, :400], [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1].tobytes())
    return root


def pytest_configure(config):
    config.addinivalue_line("markers", "torchvision: about torchvision (its real-torchvision cases skip where it "
                                       "does not import; the GPU check selects them with -m torchvision)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "torchvision" in item.name.lower():
            item.add_marker(pytest.mark.torchvision)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``dali_backend.cli.main(argv)`` in this process: (exit status, stdout, stderr); argparse's exits included."""
    from dali_backend.cli import main

    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------------------ object storage (loopback)
def storage_packages_missing() -> str | None:
    """Why the object-storage tests cannot run here (a package of the storage/test extras missing), or None."""
    import importlib.util

    missing = [m for m in ("boto3", "moto", "flask") if importlib.util.find_spec(m) is None]
    return f"needs {', '.join(missing)}: pip install -e '.[test]'" if missing else None


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A local S3 server (moto, its own process) behind the latency/fault proxy of bench.s3local (its own
    process too: DALI's Pipeline.build() holds the GIL). ``AWS_ENDPOINT_URL`` points at the proxy and the
    test credentials are set for the whole session; ``s3.server``, ``s3.proxy``, ``s3.client`` (boto3,
    straight to moto)."""
    why = storage_packages_missing()
    if why:
        pytest.skip(why)
    import os
    from types import SimpleNamespace

    from bench.s3local import TEST_ENV, MotoServer, Proxy, s3_client

    server = MotoServer()
    proxy = Proxy(server.endpoint)
    saved = {k: os.environ.get(k) for k in (*TEST_ENV, "AWS_ENDPOINT_URL", "AWS_PROFILE")}
    os.environ.update(TEST_ENV)
    os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
    os.environ.pop("AWS_PROFILE", None)
    try:
        yield SimpleNamespace(server=server, proxy=proxy, client=s3_client(server.endpoint), endpoint=proxy.endpoint)
    finally:
        proxy.stop()
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def s3_defects(s3, defect_root) -> str:
    """``defect_root`` copied to ``s3://defects/sets/small``: the URL."""
    from bench.s3local import upload_folder

    upload_folder(s3.server.endpoint, defect_root, "defects", "sets/small/", client=s3.client)
    return "s3://defects/sets/small"
