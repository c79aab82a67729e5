"""The operation vocabulary: parameters, validation, the derived wire, per-operation equivalence of
DALI (CPU) with the fallback, random compositions end to end, and the torchvision translation."""

from __future__ import annotations

import dataclasses
import math
import pathlib

import cv2
import numpy as np
import pytest

from bench.equivalence import EXAMPLES, compare_end_to_end, diff_stats, example_ops, rgb_images, run_transform_dali
from bench.equivalence import test_images as make_test_images
from dali_backend import AugmentSpec, ConfigError, DaliLoader, SampleIndex, WeightedSampler, draw_params
from dali_backend import transforms as T
from dali_backend.formats.jpeg import decoded_size
from tests.helpers import preset_reference
from fallback import ImageDataset, ops

GOAL_MEAN, GOAL_P999 = 0.05, 2.0
# What each operation reaches, DALI (CPU) against the fallback, in uint8 levels: declared on its class
# (Transform.TOLERANCE), published in the table of docs/guides/torchvision.md (test_docs_table_matches_the_registry).
TOLERANCE = {name: cls.TOLERANCE for name, cls in T.REGISTRY.items() if cls.TOLERANCE is not None}
CASES = [(name, k) for name in sorted(T.REGISTRY) for k in range(len(EXAMPLES.get(name, [])))]


def small_images() -> list[np.ndarray]:
    imgs = make_test_images()
    return [imgs[0][::4, ::4].copy(), imgs[1][:, ::10].copy(), *imgs[2:]]  # awkward sizes, small


# ----------------------------------------------------------------------------------- registry and params
def test_every_registered_operation_has_examples_and_a_tolerance():
    assert {"Resize", "CenterCrop", "RandomResizedCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "RandomRotation",
            "ColorJitter", "Normalize", "Clahe"} <= set(T.REGISTRY)
    for name in T.REGISTRY:
        assert name in EXAMPLES, f"add examples for {name} to bench.equivalence.EXAMPLES"
        assert not EXAMPLES[name] or name in TOLERANCE, f"add {name}'s tolerance to TOLERANCE and docs/guides/torchvision.md"


@pytest.mark.parametrize("name, k", CASES)
def test_make_params_is_pure_and_matches_its_definition(name, k):
    op = example_ops(name)[k]
    a = [op.make_params(3, 1, pos, (37, 53)) for pos in range(20)]
    assert all(set(p) == {q.name for q in op.wire} for p in a)
    for p in a:
        for q in op.wire:
            assert q.array(p[q.name]).dtype == np.dtype(q.dtype)
    b = [op.make_params(3, 1, pos, (37, 53)) for pos in range(20)]
    assert all(all(np.array_equal(x[n], y[n]) for n in x) for x, y in zip(a, b, strict=True))
    if op.is_random:
        assert any(any(not np.array_equal(a[0][n], p[n]) for n in p) for p in a[1:])


def test_the_preset_draws_todays_numbers_and_its_wire_is_derived():
    spec = AugmentSpec(rotate_deg=10, brightness=0.2, contrast=0.3, fit="letterbox")
    assert [type(op).__name__ for op in spec.transforms] == ["Clahe", "Resize", "RandomRotation", "ColorJitter"]
    assert [(k, p.name) for k, p in spec.wire] == [(1, "height"), (1, "width"), (2, "angle"), (3, "brightness"), (3, "contrast")]
    for pos in range(50):
        params = spec.make_params(1, 2, pos, (480, 640))
        old = draw_params(spec, 1, 2, pos)
        assert (float(params[2]["angle"]), float(params[3]["brightness"]), float(params[3]["contrast"])) == tuple(old)
    jitter_only = AugmentSpec(rotate_deg=0)
    assert [p.name for _, p in jitter_only.wire] == ["brightness", "contrast"]
    p = jitter_only.make_params(4, 0, 9, None)
    assert (1.0, float(p[3]["brightness"]), float(p[3]["contrast"])) == (1.0, *tuple(draw_params(jitter_only, 4, 0, 9))[1:])


def test_preset_through_ops_equals_the_reference_augment():
    img = make_test_images()[0]
    for spec in (AugmentSpec(size=(48, 64), fit="letterbox"), AugmentSpec(size=40, rotate_deg=20), AugmentSpec(clahe=None)):
        for pos in range(3):
            want = preset_reference.augment(img, spec, draw_params(spec, 5, 0, pos))
            got = ops.apply_spec(img, spec, spec.make_params(5, 0, pos, img.shape[:2]))
            assert np.array_equal(got, want)


def test_operation_blocks_are_independent():
    """An operation's numbers do not depend on the operations before it, only on its offset."""
    a = AugmentSpec(ops=[T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.3)])
    b = AugmentSpec(ops=[T.RandomResizedCrop(32, scale=(0.5, 1)), T.RandomHorizontalFlip(), T.ColorJitter(0.3)])
    for pos in range(10):
        pa, pb = a.make_params(0, 0, pos, (100, 80)), b.make_params(0, 0, pos, (100, 80))
        assert pa[1] == pb[1] and pa[2] == pb[2]
        assert pa[2] == T.ColorJitter(0.3).make_params(0, 0, pos, None, offset=41)


def test_random_resized_crop_follows_torchvisions_rule():
    op = T.RandomResizedCrop(224, scale=(0.08, 1.0))
    areas = []
    for pos in range(300):
        p = op.make_params(0, 0, pos, (1536, 2048))
        (top, left), (h, w) = p["start"], p["shape"]
        assert 0 <= top <= 1536 - h and 0 <= left <= 2048 - w
        assert 0.08 * 0.9 <= h * w / (1536 * 2048) <= 1.0 and 3 / 4 * 0.9 <= w / h <= 4 / 3 * 1.1
        areas.append(h * w / (1536 * 2048))
    assert min(areas) < 0.15 and max(areas) > 0.8
    # a strip no attempt can fit (ratio range excludes it) falls back to the centre crop of the clamped ratio
    p = T.RandomResizedCrop(8, scale=(0.99, 1.0), ratio=(1.0, 1.0)).sample(np.full(40, 0.5), (10, 1000))
    assert p["shape"].tolist() == [10, 10] and p["start"].tolist() == [0, 495]


def test_resize_and_center_crop_sizes_follow_torchvision():
    assert T.Resize(256).sample(None, (480, 640))["height"] == 256
    assert int(T.Resize(256).sample(None, (480, 640))["width"]) == int(256 * 640 / 480)
    p = T.Resize(100, max_size=120).sample(None, (100, 300))
    assert (int(p["height"]), int(p["width"])) == (40, 120)
    assert T.CenterCrop(4).sample(None, (9, 10))["start"].tolist() == [int(round(2.5)), 3]
    assert T.CenterCrop(12).sample(None, (9, 10))["start"].tolist() == [-1, -1]


@pytest.mark.parametrize("make, match", [
    (lambda: T.Resize(0), "Resize.size"), (lambda: T.Resize(10, letterbox=True), "letterbox"),
    (lambda: T.Resize((10, 10), max_size=5), "max_size"), (lambda: T.CenterCrop((1, 2, 3)), "CenterCrop.size"),
    (lambda: T.RandomCrop(8, padding=(1, 2, 3)), "padding"), (lambda: T.RandomCrop(8, padding_mode="reflect"), "padding_mode"),
    (lambda: T.RandomResizedCrop(8, scale=(0.5, 0.1)), "scale"), (lambda: T.RandomHorizontalFlip(1.5), "p=1.5"),
    (lambda: T.RandomRotation(10, interpolation="nearest"), "bilinear"), (lambda: T.RandomRotation(10, expand=True), "expand"),
    (lambda: T.ColorJitter(hue=0.7), "hue"), (lambda: T.ColorJitter(brightness=-1), "brightness"),
    (lambda: T.GaussianBlur(4), "odd"), (lambda: T.Clahe(clip_limit=0), "clip_limit"), (lambda: T.Grayscale(2), "1 or 3"),
    (lambda: T.Normalize((0.5, 0.5), (1, 1)), "1 or 3"), (lambda: T.ToDtype("int8"), "dtype"),
    (lambda: AugmentSpec(ops=[T.Resize(32)]), "output size depends"),
    (lambda: AugmentSpec(ops=[T.Normalize((0.5,), (0.5,)), T.Resize((8, 8))]), "after every pixel operation"),
    (lambda: AugmentSpec(ops=[T.ColorJitter(0.1), T.Grayscale(), T.Resize((8, 8))]), "Grayscale must come before"),
    (lambda: AugmentSpec(ops=[T.Resize((8, 8))], rotate_deg=3), "rotate_deg"),
    (lambda: AugmentSpec(ops=[T.Resize((8, 8)), "flip"]), r"ops\[1\]"),
    (lambda: AugmentSpec(ops=[T.Grayscale(), T.Resize((8, 8)), T.Normalize((0.1, 0.2, 0.3), (1, 1, 1))]), "1 channel\\)"),
])
def test_invalid_operations_are_refused_naming_the_argument(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_ops_spec_derives_color_size_channels_dtype_and_eval():
    spec = AugmentSpec(ops=[T.Grayscale(), T.RandomResizedCrop((24, 32)), T.RandomHorizontalFlip(),
                            T.ToDtype("bfloat16"), T.Normalize((0.5,), (0.25,))])
    assert (spec.color, spec.out_channels, spec.height, spec.width, spec.dtype) == ("gray", 1, 24, 32, "bfloat16")
    assert spec.mean == (0.5,) and [type(o).__name__ for o in spec.ops] == ["Grayscale", "RandomResizedCrop",
                                                                              "RandomHorizontalFlip"]
    assert dataclasses.replace(spec, dtype="uint8").dtype == "uint8"  # the folded output stage does not conflict
    ev = spec.eval()
    assert not ev.is_random and [type(o).__name__ for o in ev.ops] == ["Grayscale", "Resize", "CenterCrop"]
    assert ev.ops[1] == T.Resize(37) and ev.ops[2] == T.CenterCrop((24, 32))  # 32 / 0.875, torchvision's eval
    assert (ev.height, ev.width) == (24, 32)
    assert AugmentSpec(ops=[T.CenterCrop(8)]).color == "rgb" and spec.region_crop == 1


def test_decoded_size_reads_headers_and_exif_like_the_decoder(tmp_path):
    from tests.helpers.corpus import build_corpus

    build_corpus(tmp_path)
    seen = 0
    for p in sorted(tmp_path.rglob("*")):
        data = p.read_bytes() if p.is_file() else b""
        try:
            img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
        except cv2.error:
            img = None
        if img is not None:
            seen += 1
            assert decoded_size(data) == img.shape[:2], p.name
    assert seen >= 20


# ----------------------------------------------------------------------------------- equivalence per operation
@pytest.mark.parametrize("color", ["gray", "rgb"])
@pytest.mark.parametrize("name, k", CASES)
def test_each_operation_agrees_with_the_fallback(name, k, color):
    op = example_ops(name)[k]
    imgs = small_images() if color == "gray" else rgb_images(small_images())
    srcs = [im for im in imgs for _ in range(2)]
    params = [op.make_params(7, 0, i, im.shape[:2]) for i, im in enumerate(srcs)]
    got = run_transform_dali(op, srcs, params)
    want = [op.apply(im, p) for im, p in zip(srcs, params)]
    s = diff_stats(got, want)
    assert s["max"] <= TOLERANCE[name], (name, k, color, s)
    assert s["mean"] <= GOAL_MEAN and s["p999"] <= GOAL_P999, (name, s)


# ----------------------------------------------------------------------------------- random compositions
def random_ops(rng: np.random.Generator) -> list:
    """A random but valid op list: optional gray, optional CLAHE, one sizing op, flips/turns, photometric."""
    ops_: list = []
    if rng.random() < 0.3:
        ops_.append(T.Grayscale(3))
    sizing = [T.RandomResizedCrop((24, 32)), T.Resize((30, 20)), T.Resize((28, 28), letterbox=True)]
    if rng.random() < 0.3:
        ops_.append(T.Clahe())
    if rng.random() < 0.4:
        ops_ += [T.Resize(40), T.CenterCrop(32)]
    else:
        ops_.append(sizing[int(rng.integers(len(sizing)))])
    pool = [T.RandomHorizontalFlip(), T.RandomVerticalFlip(), T.RandomRot90(), T.RandomRotation(15),
            T.RandomCrop(24, padding=2), T.ColorJitter(0.3, 0.3, 0.3, 0.05), T.GaussianBlur(3, (0.5, 1.5))]
    for i in rng.permutation(len(pool))[: int(rng.integers(1, 4))]:
        ops_.append(pool[i])
    if any(isinstance(o, T.RandomRot90) for o in ops_):
        ops_.append(T.CenterCrop(20))  # odd turns of a non-square image vary the size
    return ops_


@pytest.mark.parametrize("seed", range(8))
def test_random_compositions_agree_end_to_end(odd_root, seed):
    rng = np.random.default_rng([seed, 99])
    ops_ = random_ops(rng)
    index = SampleIndex.from_folder(odd_root, progress=False)
    ds = ImageDataset(index, AugmentSpec(ops=ops_), seed=seed)
    stats = compare_end_to_end(ds, WeightedSampler(index, num_samples=12, seed=seed))
    assert stats["labels_equal"], ops_
    assert stats["mean"] <= GOAL_MEAN and stats["p999"] <= GOAL_P999 and stats["max"] <= 2, (ops_, stats)


# Resampling operations that are not bit-exact between the backends (1 level at most, alone); a ColorJitter
# after one multiplies that level by its gain: the bound published for those lists is 1 + ceil(G), G the
# product over the jitters after the first of them of (1 + b)(1 + c)(1 + s)(1 + h) (the half-widths of
# their ranges), on at most AMPLIFIED_SHARE of the pixels (docs/concepts/equivalence.md#compositions).
# Resize and the crops are bit-exact, so a jitter after them adds nothing: max 2 holds.
INEXACT_RESAMPLING = (T.RandomRotation, T.RandomAffine, T.GaussianBlur)
AMPLIFIED_SHARE = 5e-5  # share of pixels above 2 levels allowed where a jitter follows inexact resampling


def jitter_gain(ops_: list) -> float:
    """G of the jitters after the first inexact resampling operation (1.0: none, max 2 holds)."""
    first = next((k for k, op in enumerate(ops_) if isinstance(op, INEXACT_RESAMPLING)), len(ops_))
    gain = 1.0
    for op in ops_[first + 1:]:
        if isinstance(op, T.ColorJitter):
            gain *= float(np.prod([1 + op._ranges[name][1] for name in ("brightness", "contrast", "saturation", "hue")]))
    return gain


def jitter_after_resampling(ops_: list) -> bool:
    """A ColorJitter after a RandomRotation, RandomAffine or GaussianBlur (the compositions above max 2)."""
    return jitter_gain(ops_) > 1.0


def big_random_ops(rng: np.random.Generator) -> list:
    """The recipes of full-size training: mostly colour, a 224 crop or resize of a large source, then flips,
    rotation, affine, blur and jitter (hue included) in any order, so rotation after a crop and jitter
    after rotation both occur."""
    ops_: list = [T.Grayscale(3)] if rng.random() < 0.2 else []
    sizing = [[T.RandomResizedCrop(224)], [T.Resize((224, 224))], [T.Resize(256), T.CenterCrop(224)]]
    ops_ += sizing[int(rng.integers(len(sizing)))]
    pool = [T.RandomHorizontalFlip(), T.RandomRotation(10), T.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1)),
            T.ColorJitter(0.2, 0.2, 0.2, 0.05), T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.GaussianBlur(3, (0.5, 1.5))]
    for i in rng.permutation(len(pool))[: int(rng.integers(1, 4))]:
        ops_.append(pool[i])
    return ops_


@pytest.fixture(scope="module")
def big_colour_index(tmp_path_factory):
    """Six 900x900 colour JPEGs (brushed metal with defects), as an inspection camera writes them."""
    from dali_backend.synthetic import generate_defect_dataset

    root = generate_defect_dataset(tmp_path_factory.mktemp("big"), n=6, size=(900, 900), seed=5, progress=False)
    return SampleIndex.from_folder(root, progress=False)


@pytest.mark.parametrize("seed", [*range(6), 32])
def test_random_compositions_on_big_colour_sources_stay_within_the_published_bounds(big_colour_index, seed):
    """Issue 36: RandomResizedCrop(224) + flip + RandomRotation(10) + ColorJitter(0.2, 0.2, 0.2, 0.05) on
    900x900 colour JPEGs reached 3 levels where the guide said 2. The published bound is max 2, except a
    jitter after inexact resampling: 1 + ceil(G) on at most 5e-5 of the pixels (seed 5 draws such a list,
    max 3; seed 32 two jitters after a rotation, max 4)."""
    ops_ = big_random_ops(np.random.default_rng([seed, 36]))
    stats = compare_end_to_end(ImageDataset(big_colour_index, AugmentSpec(ops=ops_), seed=seed),
                               WeightedSampler(big_colour_index, num_samples=6, seed=seed))
    assert stats["labels_equal"] and stats["mean"] <= GOAL_MEAN and stats["p999"] <= GOAL_P999, (ops_, stats)
    if jitter_after_resampling(ops_):
        bound = 1 + math.ceil(jitter_gain(ops_))
        assert stats["max"] <= bound and stats["above2"] <= AMPLIFIED_SHARE * stats["pixels"], (ops_, bound, stats)
    else:
        assert stats["max"] <= 2, (ops_, stats)


def test_the_issue_recipe_is_the_one_named_above_max_2(big_colour_index):
    """The issue's list is a jitter after rotation (named in the docs: G = 1.2 ** 3 * 1.05, bound 3); the
    same jitter before the rotation stays within 2 levels."""
    recipe = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.RandomRotation(10), T.ColorJitter(0.2, 0.2, 0.2, 0.05)]
    assert jitter_gain(recipe) == pytest.approx(1.2 ** 3 * 1.05) and 1 + math.ceil(jitter_gain(recipe)) == 3
    before = [recipe[3], *recipe[:3]]
    assert not jitter_after_resampling(before)
    stats = compare_end_to_end(ImageDataset(big_colour_index, AugmentSpec(ops=before), seed=0),
                               WeightedSampler(big_colour_index, num_samples=6, seed=0))
    assert stats["labels_equal"] and stats["max"] <= 2 and stats["above2"] == 0, stats


def test_region_decode_recipe_agrees_exactly_in_gray(odd_root):
    """RandomResizedCrop first: the DALI graph decodes only the window; pixels as the fallback's full decode + crop."""
    index = SampleIndex.from_folder(odd_root, progress=False)
    spec = AugmentSpec(ops=[T.Grayscale(3), T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4)])
    assert spec.region_crop == 1
    stats = compare_end_to_end(ImageDataset(index, spec, seed=4), WeightedSampler(index, num_samples=16, seed=2))
    assert stats["labels_equal"] and stats["max"] <= 1 and stats["mean"] <= GOAL_MEAN, stats


# ----------------------------------------------------------------------------------- torchvision translation
def _standin(name: str, **attrs):
    """An object with torchvision's class name and the attributes torchvision stores."""
    return type(name, (), {})() if not attrs else type(name, (), attrs)()


class _Mode:
    def __init__(self, value):
        self.value = value


def test_from_torchvision_translates_standins_attribute_by_attribute():
    bilinear = _Mode("bilinear")
    compose = _standin("Compose", transforms=[
        _standin("RandomResizedCrop", size=[224, 224], scale=(0.08, 1.0), ratio=(0.75, 4 / 3), interpolation=bilinear,
                 antialias=True),
        _standin("RandomHorizontalFlip", p=0.5),
        _standin("ColorJitter", brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation=(0.6, 1.4), hue=None),
        _standin("ToImage"),
        _standin("ToDtype", dtype="torch.float32", scale=True),
        _standin("Normalize", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], inplace=False),
    ])
    spec = AugmentSpec.from_torchvision(compose)
    assert [type(o).__name__ for o in spec.ops] == ["RandomResizedCrop", "RandomHorizontalFlip", "ColorJitter"]
    assert spec.ops[0] == T.RandomResizedCrop(224, scale=(0.08, 1.0), ratio=(0.75, 4 / 3))
    assert spec.ops[2]._ranges["brightness"][1] == pytest.approx(0.4) and not spec.ops[2]._fixed("saturation")
    assert (spec.dtype, spec.mean, spec.color, spec.height) == ("float32", (0.485, 0.456, 0.406), "rgb", 224)
    eval_compose = [_standin("Resize", size=[256], max_size=None, interpolation=bilinear, antialias=True),
                    _standin("CenterCrop", size=[224, 224]), _standin("Grayscale", num_output_channels=3),
                    _standin("ToTensor")]
    spec = AugmentSpec.from_torchvision(eval_compose)
    assert spec.ops == (T.Resize(256), T.CenterCrop(224), T.Grayscale(3)) and spec.color == "gray"


def test_from_torchvision_lists_every_unsupported_transform_at_once():
    compose = _standin("Compose", transforms=[
        _standin("RandomResizedCrop", size=[32, 32], scale=(0.5, 1.0), ratio=(0.75, 4 / 3), interpolation=_Mode("bicubic")),
        _standin("AutoAugment"), _standin("RandomHorizontalFlip", p=0.5), _standin("RandomErasing"),
        _standin("RandomRotation", degrees=[-10.0, 10.0], interpolation=_Mode("nearest"), expand=False, center=None, fill=0),
    ])
    with pytest.raises(ConfigError) as e:
        AugmentSpec.from_torchvision(compose)
    msg = str(e.value)
    for part in ("[0] RandomResizedCrop (interpolation", "[1] AutoAugment", "[3] RandomErasing", "[4] RandomRotation",
                 "4 transform(s)"):
        assert part in msg, msg
    assert "RandomHorizontalFlip" not in msg.split("Supported")[0]


def test_from_real_torchvision_v1_and_v2():
    tv = pytest.importorskip("torchvision")
    from torchvision.transforms import v2

    for mod in (tv.transforms, v2):
        compose = mod.Compose([mod.RandomResizedCrop(64, antialias=True), mod.RandomHorizontalFlip(),
                               mod.ColorJitter(0.2, 0.2, 0.2, 0.02), mod.RandomRotation(10, interpolation=mod.InterpolationMode.BILINEAR),
                               mod.Normalize([0.5] * 3, [0.2] * 3)])
        spec = AugmentSpec.from_torchvision(compose)
        assert [type(o).__name__ for o in spec.ops] == ["RandomResizedCrop", "RandomHorizontalFlip", "ColorJitter",
                                                       "RandomRotation"]
    with pytest.raises(ConfigError, match="AutoAugment"):
        AugmentSpec.from_torchvision(v2.Compose([v2.AutoAugment(), v2.CenterCrop(8)]))


def test_channels_last_and_bfloat16_output(defect_index):
    import torch

    from fallback import FallbackLoader

    spec = AugmentSpec(ops=[T.CenterCrop(16), T.ToDtype("bfloat16")], channels_last=True)
    x, _ = next(iter(FallbackLoader(ImageDataset(defect_index, spec), batch_size=2)))
    assert x.dtype == torch.bfloat16 and x.shape == (2, 3, 16, 16) and x.is_contiguous(memory_format=torch.channels_last)
    assert pathlib.Path(T.__file__).parent.name == "transforms"


# ------------------------------------------------------------------------------------ found by a hostile test
@pytest.mark.parametrize("make, match", [
    (lambda: T.RandomCrop(10, padding=1.5), "RandomCrop.*invalid arguments"),
    (lambda: T.GaussianBlur(3.0), "GaussianBlur.*invalid arguments"),
    (lambda: T.GaussianBlur(3, sigma="x"), "GaussianBlur.*invalid arguments"),
    (lambda: T.Normalize("abc", (1, 1, 1)), "Normalize.*invalid arguments"),
    (lambda: T.RandomResizedCrop(8, ratio=(1.0, float("inf"))), "ratio must hold finite numbers"),
    (lambda: T.GaussianBlur(3, sigma=float("inf")), "sigma must hold finite numbers"),
    (lambda: T.Normalize((0.5, float("nan"), 0.5), (1, 1, 1)), "mean must hold finite numbers"),
])
def test_wrong_argument_types_and_non_finite_numbers_are_config_errors(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


@pytest.mark.parametrize("flips", ["h", "v", "hv"])
@pytest.mark.parametrize("kind", ["dali-cpu", "torch"])
def test_flips_of_one_pixel_wide_images_work_on_both_backends(tmp_path, kind, flips):
    """A 1x10 row and a 10x1 column through RandomHorizontalFlip(1) / RandomVerticalFlip(1): the pixels
    are the decoded image reversed along the flipped axis (a flip along the axis of length 1 changes
    nothing), exactly, on both backends; the crop keeps the size fixed without resampling."""
    from tests.helpers import jpeg_bytes, write

    write(tmp_path / "row" / "a" / "row.jpg", jpeg_bytes(1, 10, seed=1, color=True))
    write(tmp_path / "col" / "a" / "col.jpg", jpeg_bytes(10, 1, seed=2, color=True))
    device, backend = ("cpu", "dali") if kind == "dali-cpu" else ("cpu", "torch")
    flip_ops = ([T.RandomHorizontalFlip(1.0)] if "h" in flips else []) + ([T.RandomVerticalFlip(1.0)] if "v" in flips else [])
    for name, hw in (("row", (1, 10)), ("col", (10, 1))):
        index = SampleIndex.from_folder(tmp_path / name, progress=False)
        spec = AugmentSpec(ops=[*flip_ops, T.CenterCrop(hw), T.ToDtype("uint8")])
        loader = DaliLoader(ImageDataset(index, spec), batch_size=1, device=device, backend=backend)
        (x, _), = list(loader)
        loader.close()
        src = ops.decode((tmp_path / name / "a" / f"{name}.jpg").read_bytes(), "rgb")
        assert src.shape == (*hw, 3) and len(np.unique(src.reshape(-1, 3), axis=0)) > 3  # varied pixels
        want = src[:, ::-1] if "h" in flips else src
        want = want[::-1] if "v" in flips else want
        assert x.shape == (1, 3, *hw)
        np.testing.assert_array_equal(x[0].numpy().transpose(1, 2, 0), want, err_msg=f"{name} {flips}")


def test_from_torchvision_reports_unreadable_arguments_and_keeps_antialias():
    class RandomResizedCrop:
        size, scale, ratio, antialias = (8, 8), (0.5, 1.0), (0.75, 1.33), False

    class Resize:
        size, max_size, antialias = None, 64, True

    class CenterCrop:
        size = "abc"

    spec_ops = AugmentSpec.from_torchvision([RandomResizedCrop()]).transforms
    assert spec_ops[0].antialias is False
    with pytest.raises(ConfigError, match=r"\[0\] Resize .*\[1\] CenterCrop"):
        AugmentSpec.from_torchvision([Resize(), CenterCrop()])


def test_docs_table_matches_the_registry():
    """The per-operation table of docs/guides/torchvision.md (moved there from the README) names every
    operation with its declared tolerance (its max column), so adding an operation means its class
    (examples, tolerance) and one row of that table, nothing else."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "torchvision.md").read_text(encoding="utf-8")
    head = "| operation | mean abs diff (worst example) | max |"
    rows = text[text.index(head):].split("\n\n", 1)[0].splitlines()[2:]
    listed = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for name in cells[0].split("(")[0].replace(",", " ").split():
            listed[name] = cells[-1]
    for name, tolerance in TOLERANCE.items():
        assert name in listed, f"docs/guides/torchvision.md: add {name} to the per-operation table"
        assert listed[name] == str(tolerance), f"docs/guides/torchvision.md says max {listed[name]} for {name}, its class {tolerance}"
