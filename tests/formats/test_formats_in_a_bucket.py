"""Every format in an ``s3://`` bucket: listed, checked by byte ranges (a TIFF whose IFD lies after its
pixels is read up to it), and served alike by both backends."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend.index import SampleIndex
from tests.formats.backends import KINDS
from tests.formats.test_nothing_lost import mixed  # noqa: F401  (the fixture)
from tests.helpers import write

cv2 = pytest.importorskip("cv2")


def test_a_mixed_bucket_indexes_and_serves_like_the_folder(s3, mixed):  # noqa: F811
    from bench.s3local import upload_folder
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset

    rgb = np.random.default_rng(4).integers(0, 256, (200, 200, 3), dtype=np.uint8)
    big_tiff = cv2.imencode(".tif", rgb)[1].tobytes()  # libtiff: the IFD at the end, past the first range
    assert int.from_bytes(big_tiff[4:8], "little") > 65536
    write(mixed / "good" / "big.tif", big_tiff)
    write(mixed / "rare" / "cut.tif", big_tiff[:-500])  # its IFD is cut off: refused
    upload_folder(s3.server.endpoint, mixed, "formats", "", client=s3.client)
    local = SampleIndex.from_folder(mixed, progress=False)
    s3.proxy.stats(reset=True)
    remote = SampleIndex.from_folder("s3://formats", progress=False)
    assert list(remote.paths) == list(local.paths) and len(remote) == 11
    assert np.array_equal(remote.widths, local.widths) and np.array_equal(remote.heights, local.heights)
    assert [(r.path, r.reason.split(" (")[0]) for r in remote.rejected] == \
        [(r.path, r.reason.split(" (")[0]) for r in local.rejected] and remote.rejected[0].path == "rare/cut.tif"
    spec = AugmentSpec(size=16, color="rgb", dtype="uint8")
    out = {}
    for kind, args in KINDS.items():
        for where, index in (("local", local), ("s3", remote)):
            loader = DaliLoader(ImageDataset(index, spec), batch_size=4, num_workers=0 if kind == "torch" else 1,
                                timeout=60, **args)
            try:
                out[kind, where] = np.concatenate([x.numpy() for x, _ in loader])
            finally:
                loader.close()
    first = out["torch", "local"]
    assert first.shape[0] == 11 and all(np.array_equal(first, v) for v in out.values())
