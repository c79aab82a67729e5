"""16-bit sources: the Window operation's rule on every uint16 value, both backends equal, the order
of operations around it, and the refusal of a spec that would cut 16 bits to 8 (dali_backend.core.depth)."""

from __future__ import annotations

from fractions import Fraction

import cv2
import numpy as np
import pytest

from dali_backend import AugmentSpec, ConfigError, Window
from dali_backend import transforms as T
from dali_backend.core.depth import check_served
from fallback import ops
from tests.helpers import CUDA

WINDOWS = [(0, 65535), (0, 4095), (3000, 40000), (100, 101), (1, 511), (65000, 65535)]
ALL16 = np.arange(65536, dtype=np.uint16).reshape(256, 256)


def reference(x: int, low: int, high: int) -> int:
    """The documented rule, in exact fractions: (x - low) * 255 / (high - low) rounded half up, clipped."""
    v = Fraction((x - low) * 255, high - low)
    return min(max(int((v + Fraction(1, 2)).__floor__()), 0), 255)


@pytest.mark.parametrize("low, high", WINDOWS)
def test_the_table_is_the_documented_rule(low, high):
    table = Window(low, high).table
    xs = sorted({0, low, high, 65535, *range(max(low - 3, 0), min(low + 600, 65536)),
                 *np.random.default_rng(low).integers(0, 65536, 300).tolist()})
    assert [int(table[x]) for x in xs] == [reference(x, low, high) for x in xs]
    assert table[low] == 0 and table[high] == 255


def test_ties_round_up():
    assert Window(0, 510).table[1] == 1  # 0.5 -> 1
    assert Window(0, 510).table[3] == 2  # 1.5 -> 2 (half up, not half to even)
    assert list(Window(0, 65535).table[np.arange(256) * 257]) == list(range(256))  # 8-bit files: unchanged


def dali_window(op: Window, images: list[np.ndarray], bits: int, device: str = "cpu") -> list[np.ndarray]:
    """``op``'s DALI fragment on HxWxC images of ``bits`` bits, one channel count (CPU operators, or
    ``device="gpu"``)."""
    from nvidia.dali import fn, pipeline_def, types

    gpu = device == "gpu"

    @pipeline_def(batch_size=len(images), num_threads=1, device_id=0 if gpu else None)
    def pipe():
        x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
        shape = x.shape(dtype=types.INT32)  # each image's size, as the graph's decoded-size nodes
        ctx = T.GraphContext(gpu=gpu, channels=images[0].shape[2], hw=(shape[0], shape[1]), bits=bits)
        return op.dali(x.gpu() if gpu else x, {}, ctx)

    p = pipe()
    p.build()
    (out,) = p.run()
    out = out.as_cpu() if gpu else out
    return [np.array(out[i]) for i in range(len(images))]


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=CUDA)])
@pytest.mark.parametrize("low, high", WINDOWS)
def test_both_backends_equal_on_every_uint16_value(low, high, device):
    op = Window(low, high)
    gray, rgb = ALL16[:, :, None], np.dstack([ALL16, ALL16[::-1], ALL16.T])
    got_gray, got_rgb = dali_window(op, [gray, rgb], 16, device)
    assert got_gray.dtype == np.uint8 and np.array_equal(got_gray[:, :, 0], op.apply(ALL16, {}))
    assert np.array_equal(got_rgb, op.apply(rgb, {}))
    eight = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)  # alone on 8-bit images: promoted x * 257
    (got8,) = dali_window(op, [eight], 8, device)
    assert np.array_equal(got8, op.apply(eight, {})) and np.array_equal(op.apply(eight, {}), op.table[eight.astype(np.int64) * 257])


@pytest.mark.parametrize("args", [(5, 5), (10, 3), (-1, 10), (0, 65536), (0.5, 100), (True, 9)])
def test_invalid_windows_are_refused_with_the_fix(args):
    with pytest.raises(ConfigError, match=r"Window"):
        Window(*args)


# --------------------------------------------------------------------------------- order and refusal
def test_only_uint16_exact_operations_may_precede_the_window():
    ok = AugmentSpec(ops=[T.RandomHorizontalFlip(), T.RandomRot90(), T.CenterCrop(40), T.Resize((40, 40)),
                          T.RandomRotation(5), Window(0, 4095), T.Clahe(), T.Resize((32, 32))])
    assert ok.bit_depth == 16 and AugmentSpec(ops=[T.Resize((8, 8))]).bit_depth == 8 and AugmentSpec().bit_depth == 8
    for before in (T.Clahe(), T.ColorJitter(0.2), T.GaussianBlur(3)):
        with pytest.raises(ConfigError, match=rf"{type(before).__name__} runs on 8-bit values.*move Window\(low=0, "
                                              rf"high=4095\) before {type(before).__name__}"):
            AugmentSpec(ops=[before, Window(0, 4095), T.CenterCrop(8)])
    with pytest.raises(ConfigError, match="more than one Window"):
        AugmentSpec(ops=[Window(), Window(), T.CenterCrop(8)])


def png16(img: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", img if img.ndim == 2 else img[:, :, ::-1])
    assert ok
    return buf.tobytes()


@pytest.mark.parametrize("spec, names", [
    (AugmentSpec(), "Clahe.*the preset holds no Window"),
    (AugmentSpec(ops=[T.CenterCrop(8), T.Clahe()]), r"Clahe runs on 8-bit values.*add Window\(low=\.\.\., high=\.\.\.\) before Clahe"),
    (AugmentSpec(ops=[T.RandomHorizontalFlip(), T.CenterCrop(8)]), "its output is 8-bit.*as the last pixel operation"),
])
def test_a_16_bit_file_under_a_spec_without_window_is_refused_with_the_fix(spec, names):
    from dali_backend.formats import registry

    data = png16(np.full((8, 8), 1000, np.uint16))
    if registry.read_header(data) is None:
        pytest.skip("no PNG entry in the format registry yet (issue 34: the formats branch)")
    with pytest.raises(ConfigError, match=rf"x\.png: a 16-bit image, and the spec has no Window: {names}"):
        check_served(spec, np.frombuffer(data, np.uint8), "x.png")
    check_served(AugmentSpec(ops=[Window(0, 4095), T.Clahe(), T.CenterCrop(8)]), np.frombuffer(data, np.uint8), "x.png")


def test_the_refusal_reasons_name_the_operation_and_the_fix():
    assert AugmentSpec().depth_refusal(8) is None
    assert AugmentSpec(ops=[Window(), T.CenterCrop(8)]).depth_refusal(16) is None
    assert "Clahe" in AugmentSpec(ops=[T.RandomVerticalFlip(), T.Clahe(), T.CenterCrop(8)]).depth_refusal(16)
    assert "Window(0, 4095)" in AugmentSpec(ops=[T.CenterCrop(8)]).depth_refusal(12)


# --------------------------------------------------------------------------------- decode + operations
def dali_spec_graph(spec: AugmentSpec, blobs: list[bytes], params: list[list[dict]],
                    device: str = "cpu") -> list[np.ndarray]:
    """Decode (at the spec's depth, as dali_backend.dali.graph does) and run the spec's fragments: DALI's
    CPU operators, or ``device="gpu"`` (the decoder on ``mixed``)."""
    from nvidia.dali import fn, pipeline_def, types

    gpu = device == "gpu"

    wire = spec.wire
    feed = [(np.frombuffer(b, np.uint8), *spec.wire_arrays(p)) for b, p in zip(blobs, params)]

    @pipeline_def(batch_size=len(blobs), num_threads=1, device_id=0 if gpu else None, exec_dynamic=True,
                  enable_conditionals=True)
    def pipe():
        data, *values = fn.external_source(source=lambda: [list(c) for c in zip(*feed)], num_outputs=1 + len(wire),
                                           batch=True)
        per_op: list[dict] = [{} for _ in spec.transforms]
        for (k, q), node in zip(wire, values):
            per_op[k][q.name] = node
        args = {"dtype": types.UINT16} if spec.bit_depth == 16 else {}
        img = fn.decoders.image(data, device="mixed" if gpu else "cpu",
                                output_type=types.GRAY if spec.color == "gray" else types.RGB, **args)
        shape = fn.peek_image_shape(data, dtype=types.INT32)
        ctx = T.GraphContext(gpu=gpu, channels=spec.channels, hw=(shape[0], shape[1]), bits=spec.bit_depth)
        for op, p in zip(spec.transforms, per_op):
            if not op.is_identity:
                img = op.dali(img, p, ctx)
        return img

    p = pipe()
    p.build()
    (out,) = p.run()
    out = out.as_cpu() if gpu else out
    return [np.array(out[i]) for i in range(len(blobs))]


def both_backends(spec: AugmentSpec, blobs: list[bytes], device: str = "cpu") -> tuple[list[np.ndarray], list[np.ndarray]]:
    fallback, params = [], []
    for pos, b in enumerate(blobs):
        img = ops.decode(b, spec.color, spec.bit_depth)
        p = spec.make_params(7, 0, pos, img.shape[:2])
        params.append(p)
        fallback.append(ops.apply_spec(img, spec, p).transpose(1, 2, 0))
    return dali_spec_graph(spec, blobs, params, device), fallback


def textured(seed: int, shape, high: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high + 1, shape).astype(np.uint16)


SPECS16 = {
    "gray 12-bit": AugmentSpec(ops=[T.Grayscale(), T.RandomHorizontalFlip(), T.RandomCrop(40), Window(0, 4095),
                                    T.Clahe(2.0, (4, 4)), T.Resize((24, 24))], dtype="uint8"),
    "rgb 16-bit": AugmentSpec(ops=[T.RandomRot90(), T.CenterCrop(40), Window(2000, 60000), T.ColorJitter(0.3, 0.3),
                                   T.Clahe()], dtype="uint8"),
}


@pytest.mark.parametrize("name", sorted(SPECS16))
def test_16_bit_pngs_give_equal_pixels_on_both_backends(name):
    spec = SPECS16[name]
    rgb = spec.color == "rgb"
    top = 4095 if "12-bit" in name else 65535
    imgs = [textured(s, (48, 56, 3) if rgb else (48, 56), top) for s in range(4)]
    eight = textured(9, (48, 56, 3) if rgb else (48, 56), 255).astype(np.uint8)  # an 8-bit file in the same batch
    dali, fallback = both_backends(spec, [png16(i) for i in imgs] + [png16(eight)])
    for d, f in zip(dali, fallback, strict=True):
        assert d.dtype == np.uint8 and np.array_equal(d, f)


def test_16_bit_values_survive_to_the_window():
    """Two images that differ only in their low 8 bits give different outputs (nothing cut before the Window)."""
    spec = AugmentSpec(ops=[T.Grayscale(), T.RandomVerticalFlip(), T.CenterCrop(32), Window(0x1200, 0x12FF)], dtype="uint8")
    a = 0x1200 + textured(1, (32, 32), 255)
    b = 0x1200 + textured(2, (32, 32), 255)
    assert np.array_equal(a >> 8, b >> 8)  # the same high byte everywhere: an 8-bit decode cannot tell them apart
    (da, db), (fa, fb) = both_backends(spec, [png16(a), png16(b)])
    assert np.array_equal(da, fa) and np.array_equal(db, fb)
    assert not np.array_equal(da, db)
    assert np.array_equal(np.sort(da.ravel()), np.sort((a - 0x1200).astype(np.uint8).ravel()))  # a flip: values kept


def test_8_bit_files_through_a_full_window_are_unchanged():
    img = textured(3, (20, 30, 3), 255).astype(np.uint8)
    spec = AugmentSpec(ops=[Window(0, 65535), T.CenterCrop((20, 30))], dtype="uint8")
    dali, fallback = both_backends(spec, [png16(img), cv2.imencode(".jpg", img)[1].tobytes()])
    assert np.array_equal(dali[0], img) and np.array_equal(fallback[0], img)
    assert np.array_equal(dali[1], fallback[1])


@pytest.mark.parametrize("color", ["gray", "rgb"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=CUDA)])
def test_lossless_16_bit_files_are_exact_through_the_window_on_every_device(color, device):
    """PNG and TIFF at 16 bits: decoded (on ``mixed``: nvImageCodec's CPU codecs), flipped, cropped and
    windowed, equal to the fallback bit for bit (no CLAHE or jitter here: their GPU bounds are theirs)."""
    import io

    tifffile = pytest.importorskip("tifffile")
    spec = AugmentSpec(ops=([T.Grayscale()] if color == "gray" else []) + [T.RandomHorizontalFlip(), T.RandomRot90(),
                            T.CenterCrop((40, 36)), Window(700, 52000)], dtype="uint8")
    imgs = [textured(s, (44, 50, 3), 65535) for s in range(3)]
    blobs = [png16(i) for i in imgs] + [png16(imgs[0][..., 0])]
    for im in imgs[:2]:
        b = io.BytesIO()
        tifffile.imwrite(b, im, photometric="rgb")
        blobs.append(b.getvalue())
    dali, fallback = both_backends(spec, blobs, device)
    for d, f in zip(dali, fallback, strict=True):
        assert np.array_equal(d, f)


PERCENTILES = [(0.5, 99.5), (0, 100), (2.25, 50), (99.99, 100)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=CUDA)])
@pytest.mark.parametrize("pct", PERCENTILES)
def test_percentile_windows_are_equal_on_both_backends(pct, device):
    """Each image's own bounds (numpy's "lower" percentile of all its values), the same rule after."""
    op = Window(percentiles=pct)
    rng = np.random.default_rng(int(pct[0] * 100))
    imgs = [rng.integers(0, 4096, (37, 41, 1)).astype(np.uint16), rng.integers(0, 65536, (20, 30, 3)).astype(np.uint16),
            np.full((5, 6, 1), 777, np.uint16), np.dstack([ALL16, ALL16.T, ALL16[::-1]])]
    gray, rgb = [i for i in imgs if i.shape[2] == 1], [i for i in imgs if i.shape[2] == 3]
    for img, got in zip(gray + rgb, dali_window(op, gray, 16, device) + dali_window(op, rgb, 16, device), strict=True):
        flat = img.ravel()
        low, high = (int(np.percentile(flat, p, method="lower")) for p in pct)
        low, high = min(low, 65534), min(max(high, min(low, 65534) + 1), 65535)
        want = np.clip(np.floor((np.clip(img.astype(np.float64), low, high) - low) * 255 / (high - low) + 0.5), 0, 255)
        assert np.array_equal(op.apply(img, {}), want.astype(np.uint8)), pct
        assert np.array_equal(got, op.apply(img, {})), pct
    eight = [np.arange(256, dtype=np.uint8).reshape(16, 16, 1)]
    assert np.array_equal(dali_window(op, eight, 8, device)[0], op.apply(eight[0], {}))


def test_percentile_windows_through_a_spec_on_both_backends():
    spec = AugmentSpec(ops=[T.RandomCrop(40), Window(percentiles=(1, 99)), T.Clahe(2.0, (4, 4))], dtype="uint8")
    imgs = [textured(s, (48, 56, 3), 65535) // (s + 1) for s in range(3)]
    dali, fallback = both_backends(spec, [png16(i) for i in imgs])
    for d, f in zip(dali, fallback, strict=True):
        assert np.array_equal(d, f) and f.max() > 200


@pytest.mark.parametrize("kwargs", [{"percentiles": (5, 5)}, {"percentiles": (0.001, 50)}, {"percentiles": (1, 101)},
                                    {"percentiles": 3}, {"low": 0, "percentiles": (1, 99)}])
def test_invalid_percentiles_are_refused(kwargs):
    with pytest.raises(ConfigError, match="Window"):
        Window(**kwargs)
