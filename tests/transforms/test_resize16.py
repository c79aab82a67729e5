"""Geometric operations on 16-bit values, before the Window (issue 34, item 3): the fallback's resize is
DALI's CPU ``fn.resize`` to the bit on uint16 too, the warps agree within their declared 16-bit bound, the
low 8 bits of a 16-bit image survive a resize and a rotation to a narrow Window on both backends, and the
GPU graph of such a spec is defined (and placed) on a CPU machine."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from bench.equivalence import transform16_checks
from dali_backend import AugmentSpec, ConfigError, SampleIndex, Window
from dali_backend import transforms as T
from dali_backend.core.depth import sixteen_bit_operations
from dali_backend.transforms import resample
from dali_backend.transforms.resize import dali_resize
from tests.helpers import KINDS, write
from tests.transforms.test_window_loaders import batches

SIZES = [((240, 320), (256, 256)), ((1536, 2048), (256, 256)), ((480, 640), (224, 224)), ((37, 53), (64, 29)),
         ((256, 256), (255, 257)), ((100, 3), (7, 40)), ((64, 64), (32, 32)), ((31, 97), (13, 13)), ((64, 64), (128, 128))]


def dali_resized(images: list[np.ndarray], h: int, w: int, antialias: bool) -> list[np.ndarray]:
    """DALI's CPU ``fn.resize`` (the Resize operation's fragment) on HxWxC images."""
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=None)
    def pipe():
        return dali_resize(fn.external_source(source=lambda: images, batch=True, layout="HWC"), h, w, antialias=antialias)

    p = pipe()
    p.build()
    (out,) = p.run()
    return [np.array(out[i]) for i in range(len(images))]


@pytest.mark.parametrize("src, dst", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("antialias", [True, False])
def test_the_uint16_resize_is_dalis_to_the_bit(src, dst, channels, antialias):
    """Noise over the whole 16-bit range (every SSE block and scalar tail gets ties), 12-bit data and a
    checkerboard; the reference arithmetic (resize_exact) and the fast path both equal DALI's output."""
    rng = np.random.default_rng(src[0] * 7 + dst[1] + channels)
    shape = src + (channels,)
    images = [rng.integers(0, 65536, shape, dtype=np.uint16), rng.integers(0, 4096, shape, dtype=np.uint16),
              (np.indices(shape).sum(axis=0) % 2 * 65535).astype(np.uint16)]
    for img, want in zip(images, dali_resized(images, *dst, antialias)):
        assert want.dtype == np.uint16
        fast = resample.resize(img, *dst, antialias=antialias)
        assert fast.dtype == np.uint16 and np.array_equal(fast.reshape(want.shape), want), (src, dst)
        if src[0] * src[1] < 100_000:  # the plain-numpy reference is slow at 2048x1536
            assert np.array_equal(resample.resize_exact(img, *dst, antialias=antialias).reshape(want.shape), want)


def test_an_image_of_another_type_is_refused_by_name():
    with pytest.raises(ConfigError, match="got a float32 image; the resize kernel takes uint8 or uint16"):
        resample.resize(np.zeros((8, 8), np.float32), 4, 4)


def test_the_geometric_operations_take_16_bit_values():
    assert {"Resize", "RandomResizedCrop", "RandomRotation", "RandomAffine"} <= set(sixteen_bit_operations())
    assert T.Resize.tolerance16() == T.RandomResizedCrop.tolerance16() == 0  # exact
    assert T.RandomRotation.tolerance16() == T.RandomAffine.tolerance16() == 128  # 16-bit levels
    assert T.Clahe.tolerance16() is None and T.ColorJitter.tolerance16() is None  # 8-bit operations


CHECKS = transform16_checks()


def test_the_16_bit_rows_are_bounded_by_each_operations_declaration():
    from bench.equivalence import _bound_text, bound

    assert bound("transform16:RandomRotation#1:rgb", "cpu") == (None, None, 128)
    assert bound("transform16:Resize#0:gray", "cpu") == (None, None, 0)
    assert bound("transform16:Resize#0:gray", "gpu") == (None, None, None)  # not measured on a GPU yet: published only
    assert _bound_text("transform16:Resize#0:gray", "cpu") == "max <= 0 (16-bit levels)"
    assert bound("end-to-end:gray", "cpu") == (0.05, 2.0, None)  # the 8-bit rows keep their bounds


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_16_bit_operation_is_within_its_declared_bound(name):
    """DALI's CPU operators against the fallback on uint16 images (bench.equivalence --bit-depth 16)."""
    op = T.REGISTRY[name.split("#")[0]]
    stats = CHECKS[name]()
    assert stats["max"] <= op.tolerance16(), (name, stats)


def png16(a: np.ndarray) -> bytes:
    return cv2.imencode(".png", a)[1].tobytes()


@pytest.fixture(scope="module")
def low_bits_pair(tmp_path_factory):
    """Two 16-bit gray images equal in their high 8 bits: ``b`` is ``a`` with its low byte replaced."""
    root = tmp_path_factory.mktemp("lowbits")
    rng = np.random.default_rng(11)
    high = (rng.integers(40, 44, (48, 64), dtype=np.uint16) << 8)  # high bytes 40..43: values 10240..11263
    a, b = high | rng.integers(0, 256, high.shape, dtype=np.uint16), high | rng.integers(0, 256, high.shape, dtype=np.uint16)
    assert np.array_equal(a >> 8, b >> 8) and not np.array_equal(a, b)
    write(root / "x" / "a.png", png16(a))
    write(root / "x" / "b.png", png16(b))
    return SampleIndex.from_folder(root, progress=False)


@pytest.mark.parametrize("geometry", [[T.Resize((24, 32))], [T.RandomRotation((10, 10))],
                                      [T.RandomAffine((5, 5), scale=(0.8, 0.8))],
                                      [T.Resize((40, 40)), T.RandomRotation((-7, -7)), T.RandomResizedCrop(24)]],
                         ids=["resize", "rotation", "affine", "resize-rotate-crop"])
def test_low_8_bits_survive_the_geometry_to_a_narrow_window(low_bits_pair, geometry):
    """A resize or warp at 16 bits, then Window(10240, 11263) (the 1024 values the images hold, 4 values a
    level): the two images, equal in their high 8 bits, stay different on both backends. The backends agree:
    exactly through resizes, within 1 level through the warps (measured; their 16-bit difference is a few
    levels here, a fraction of the window's step)."""
    spec = AugmentSpec(ops=[T.Grayscale(), *geometry, Window(10240, 11263), T.CenterCrop(20)], dtype="uint8")
    out = {kind: batches(low_bits_pair, spec, kind) for kind in KINDS}
    for kind, x in out.items():
        assert x.shape[:2] == (2, 1) and x.dtype == np.uint8
        assert np.count_nonzero(x[0] != x[1]) > x[0].size // 4, kind  # the low bits made them differ
        assert x.max() - x.min() > 100, kind  # and the window spreads them over the 8-bit range
    assert np.array_equal(out["torch-threads"], out["torch"])  # the same OpenCV work, on threads
    d = np.abs(out["dali-cpu"].astype(int) - out["torch"])
    exact = all(type(op).tolerance16() == 0 for op in geometry)
    assert d.max() == 0 if exact else (d.max() <= 1 and d.mean() < 0.05), (d.max(), d.mean())
