"""Shared fixtures: small generated data sets, JPEG builders, RNG hygiene."""

from __future__ import annotations

import random
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from dali_backend.core.synthetic import generate_defect_dataset
from tests.helpers import jpeg_bytes, storage_packages_missing, with_exif_orientation, write


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


# ------------------------------------------------------------------------------ object storage (loopback)
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
