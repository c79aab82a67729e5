"""A float output from all 16 bits, without a Window (issue 34, item 3): ``AugmentSpec(decode_bits=16)``
runs operations that take uint16 values on uint16, both executors hand uint16 batches to the one
normalisation (``x / 65535``, then mean/std), and the backends agree: bit-exact through flips, crops and
resizes, within each warp's ``TOLERANCE16`` (16-bit levels). A spec that would cut 16 bits to 8 is refused."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from dali_backend import AugmentSpec, ConfigError, DaliLoader, ImageDataset, SampleIndex, Window
from dali_backend import transforms as T
from dali_backend.core.depth import check_served
from dali_backend.core.tensors import normalize
from tests.helpers import KINDS, jpeg_bytes, write
from tests.transforms.test_window_loaders import mixed_tree  # noqa: F401  (a fixture: 16- and 8-bit files)

MEAN, STD = 0.4, 0.2


def png16(a: np.ndarray) -> bytes:
    return cv2.imencode(".png", a if a.ndim == 2 else a[:, :, ::-1])[1].tobytes()


def loaded(index, spec, kind, batch_size: int = 6) -> tuple[np.ndarray, ...]:
    """Every batch of one pass, concatenated (images, and the sizes of variable-size batches)."""
    loader = DaliLoader(ImageDataset(index, spec, seed=3), batch_size=batch_size, shuffle=False, **KINDS[kind])
    try:
        parts = [tuple(t.numpy() for t in b) for b in loader]
    finally:
        loader.close()
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0])) if k != 1)


OPS = {
    "flips-crop": [T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.RandomRot90(), T.RandomCrop((24, 30))],
    "resize": [T.CenterCrop((28, 36)), T.Resize((20, 24))],
    "resized-crop": [T.RandomResizedCrop((18, 26))],
    "rotation": [T.RandomRotation(15), T.CenterCrop((24, 30))],
    "affine": [T.RandomAffine(10, translate=(0.1, 0.1), scale=(0.8, 1.2)), T.Resize((20, 24))],
}


@pytest.mark.parametrize("color", ["gray", "rgb"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_both_backends_give_the_same_floats_from_16_bits(mixed_tree, name, color):  # noqa: F811
    index = SampleIndex.from_folder(mixed_tree, progress=False)
    c = 1 if color == "gray" else 3
    spec = AugmentSpec(ops=([T.Grayscale()] if c == 1 else []) + OPS[name] + [T.Normalize((MEAN,) * c, (STD,) * c)],
                       decode_bits=16)
    assert spec.bit_depth == spec.batch_bits == 16
    (dali,), (torch_,) = loaded(index, spec, "dali-cpu"), loaded(index, spec, "torch")
    assert dali.dtype == torch_.dtype == np.float32 and dali.shape == torch_.shape and dali.shape[:2] == (len(index), c)
    levels = np.abs(dali.astype(np.float64) - torch_) * STD * 65535  # the difference in 16-bit levels
    bound = max(type(op).tolerance16() for op in OPS[name])
    if bound == 0:
        assert np.array_equal(dali, torch_)  # one normalisation of equal uint16 pixels: bitwise equal floats
    else:
        assert levels.max() <= bound + 1e-3 and levels.mean() < 1, (levels.max(), levels.mean())
    assert len(np.unique(np.rint((torch_ * STD + MEAN) * 65535))) > 4096  # more levels than 12 bits, let alone 8


@pytest.fixture(scope="module")
def low_bits_pair(tmp_path_factory):
    """Two 16-bit gray images equal in their high 8 bits (``b``: ``a`` with its low byte replaced), and ``a``."""
    root = tmp_path_factory.mktemp("lowbits16")
    rng = np.random.default_rng(5)
    high = rng.integers(0, 256, (32, 40), dtype=np.uint16) << 8
    a, b = high | rng.integers(0, 256, high.shape, dtype=np.uint16), high | rng.integers(0, 256, high.shape, dtype=np.uint16)
    write(root / "x" / "a.png", png16(a))
    write(root / "x" / "b.png", png16(b))
    return SampleIndex.from_folder(root, progress=False), a


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_low_8_bits_reach_the_float_output(low_bits_pair, kind):
    """Crop only, mean 0, std 1: the output is each file's values over 65535, to the float; the two images
    that differ only in their low bytes give different outputs."""
    index, a = low_bits_pair
    (x,) = loaded(index, AugmentSpec(ops=[T.Grayscale(3), T.CenterCrop((32, 40))], decode_bits=16), kind)
    assert x.shape == (2, 3, 32, 40)
    assert np.array_equal(np.rint(x[0, 0].astype(np.float64) * 65535), a)  # x / 65535: every 16-bit level kept
    assert np.count_nonzero(x[0] != x[1]) > x[0].size // 2
    assert np.array_equal(x[:, 0], x[:, 2])  # gray replicated to 3 channels, as for 8-bit batches


def test_eight_bit_files_are_promoted_to_the_same_scale(tmp_path):
    """An 8-bit JPEG under decode_bits=16 (promoted x * 257) gives x / 255 on both backends, as under an 8-bit spec
    (within float32 rounding), and a uint16 batch is normalised by x / 65535."""
    write(tmp_path / "a" / "p.jpg", jpeg_bytes(24, 32, seed=2))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    ops = [T.Grayscale(), T.CenterCrop((24, 32))]
    eight = loaded(index, AugmentSpec(ops=ops), "torch")[0]
    for kind in KINDS:
        sixteen = loaded(index, AugmentSpec(ops=ops, decode_bits=16), kind)[0]
        assert np.abs(sixteen - eight).max() < 1e-6
    spec = AugmentSpec(ops=ops, mean=(MEAN,), std=(STD,), decode_bits=16)
    batch = torch.from_numpy(np.array([[[[0, 257, 65535]]]], np.uint16))
    assert torch.allclose(normalize(batch, spec)[0, :, 0], (torch.tensor([0.0, 1 / 255, 1.0]) - MEAN) / STD)


def test_variable_size_batches_are_padded_at_16_bits(mixed_tree):  # noqa: F811
    index = SampleIndex.from_folder(mixed_tree, progress=False)
    spec = AugmentSpec(ops=[T.Grayscale(), T.Resize(20, max_size=40)], decode_bits=16, pad_batch=8)
    (dali, dali_sizes), (torch_, torch_sizes) = loaded(index, spec, "dali-cpu", 4), loaded(index, spec, "torch", 4)
    assert np.array_equal(dali_sizes, torch_sizes) and np.array_equal(dali, torch_)
    assert dali.shape[-2] % 8 == 0 and len(np.unique(dali)) > 256


# --------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("spec_args, message", [
    ({"ops": [T.Grayscale(), T.Clahe(), T.CenterCrop(8)]}, r"decode_bits=16\): Clahe runs on 8-bit values, and the "
     r"spec has no Window; put Window\(low=\.\.\., high=\.\.\.\) before Clahe"),
    ({"ops": [T.CenterCrop(8), T.ColorJitter(0.2)]}, "ColorJitter runs on 8-bit values"),
    ({"ops": [T.CenterCrop(8)], "dtype": "uint8"}, r"a uint8 output cannot hold 16-bit values; use dtype='float32'"),
    ({"ops": [T.CenterCrop(8), T.ToDtype("uint8")]}, "a uint8 output cannot hold 16-bit values"),
    ({"size": 64}, "the preset runs Clahe and ColorJitter"),
])
def test_a_16_bit_float_spec_that_would_cut_to_8_bits_is_refused_with_the_fix(spec_args, message):
    with pytest.raises(ConfigError, match=message):
        AugmentSpec(**spec_args, decode_bits=16)


def test_decode_bits_takes_16_or_none_and_keeps_its_place():
    for bad in (12, 32, True, "16"):
        with pytest.raises(ConfigError, match="AugmentSpec.decode_bits="):
            AugmentSpec(ops=[T.CenterCrop(8)], decode_bits=bad)
    with pytest.raises(ConfigError, match="decode_bits=8\\): the Window in ops takes 16-bit values"):
        AugmentSpec(ops=[Window(), T.CenterCrop(8)], decode_bits=8)
    spec = AugmentSpec(ops=[T.RandomHorizontalFlip(), T.RandomResizedCrop(16)], decode_bits=16)
    assert eval(repr(spec), {**vars(T), "AugmentSpec": AugmentSpec}) == spec and "decode_bits=16" in repr(spec)
    assert spec.eval().decode_bits == 16 and spec.eval().batch_bits == 16
    windowed = AugmentSpec(ops=[Window(0, 4095), T.CenterCrop(8)], decode_bits=16)  # redundant: the Window decides
    assert windowed.bit_depth == 16 and windowed.batch_bits == 8
    assert AugmentSpec(ops=[T.CenterCrop(8)]).batch_bits == AugmentSpec(ops=[T.CenterCrop(8)]).bit_depth == 8


def test_a_16_bit_file_under_an_8_bit_float_spec_names_decode_bits():
    data = np.frombuffer(png16(np.full((8, 8), 1000, np.uint16)), np.uint8)
    with pytest.raises(ConfigError, match=r"x\.png: a 16-bit image, and the spec has no Window: its output is 8-bit.*"
                                          r"AugmentSpec\(\.\.\., decode_bits=16\)"):
        check_served(AugmentSpec(ops=[T.RandomHorizontalFlip(), T.CenterCrop(8)]), data, "x.png")
    check_served(AugmentSpec(ops=[T.RandomHorizontalFlip(), T.CenterCrop(8)], decode_bits=16), data, "x.png")


def test_the_end_to_end_rows_compare_16_bit_levels(low_bits_pair):
    """bench.equivalence's end-to-end16 rows (run by bench/gpu_check.sh on DALI's GPU operators): the levels
    behind a decode_bits=16 float output, bounded on the CPU by the rotation's TOLERANCE16, none on the GPU."""
    from bench.equivalence import _bound_text, bound, compare_end_to_end
    from dali_backend import WeightedSampler

    assert bound("end-to-end16:gray", "cpu") == (None, None, T.RandomRotation.tolerance16())
    assert bound("end-to-end16:rgb", "gpu") == (None, None, None)
    assert _bound_text("end-to-end16:gray", "cpu") == "max <= 128 (16-bit levels)"
    index, _ = low_bits_pair
    spec = AugmentSpec(ops=[T.Grayscale(), T.RandomHorizontalFlip(), T.Resize((24, 20)), T.Normalize((MEAN,), (STD,))],
                       decode_bits=16)
    stats = compare_end_to_end(ImageDataset(index, spec, seed=3), WeightedSampler(index, seed=1), batch_size=2)
    assert stats["labels_equal"] and stats["pixels"] == 2 * 24 * 20 and stats["max"] == 0  # resize: exact
    rotated = AugmentSpec(ops=[T.Grayscale(), T.RandomRotation((9, 9)), T.CenterCrop(24)], decode_bits=16)
    stats = compare_end_to_end(ImageDataset(index, rotated, seed=3), WeightedSampler(index, seed=1), batch_size=2)
    assert 0 < stats["max"] <= 128 and stats["mean"] < 2  # levels of 65535 (x / 65535 undone), not floats
