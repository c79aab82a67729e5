"""Masks and boxes move with the image: every geometric operation's ``"mask"`` and ``"boxes"`` kernel
(dali_backend/transforms/targets.py) against its image kernel, on the same drawn parameters.

The invariant (one harness for every operation): a synthetic defect drawn into an image and its mask
stays paired after the operation: the mask's foreground covers the image's defect pixels (IoU >= 0.98),
and the moved box is the bounding box of the moved mask (within 1 pixel; rotation and affine: the
box enclosing the moved corners, which for a rectangular defect is that bounding box within 2 pixels)."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import pytest

from dali_backend import transforms as T
from dali_backend.core.augment import AugmentSpec
from dali_backend.errors import ConfigError
from dali_backend.transforms.base import KERNELS, Transform, register_kernel
from dali_backend.transforms.targets import (BoxPolicy, Boxes, erase_mask, forward_matrix, move_targets,
                                             nearest_resize, rotation_matrix)

SIZE = (120, 180)  # (height, width) of the synthetic image
BACKGROUND, DEFECT, THRESHOLD = 40, 220, 130
POSITIONS = range(8)

EXACT = ["Resize((96, 128))", "Resize(90)", "Resize((100, 100), letterbox=True)", "Resize(80, max_size=110)",
         "CenterCrop(64)", "CenterCrop((150, 200))", "RandomCrop(64, padding=12)",
         "RandomCrop(160, pad_if_needed=True, fill=7)", "RandomResizedCrop(96)",
         "RandomResizedCrop((80, 112), scale=(0.5, 1.0))", "RandomHorizontalFlip()", "RandomVerticalFlip()",
         "RandomRot90()"]
WARPS = ["RandomRotation(30)", "RandomRotation((-20, 40), fill=9)",
         "RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10)",
         "RandomAffine((-10, 30), shear=(-5, 5, -8, 8), fill=7)"]


NO_EXAMPLES = {"Normalize": "Normalize((0.5, 0.4, 0.3), (0.2, 0.2, 0.2))"}  # operations without EXAMPLES needing arguments


def op_of(text: str, **extra) -> Transform:
    return eval(text, {**vars(T), **extra})  # our own literal constructor calls


def defect(shape: str) -> tuple[np.ndarray, np.ndarray]:
    """A colour image with one bright defect and its mask (class 1 on background 0)."""
    h, w = SIZE
    mask = np.zeros(SIZE, np.uint8)
    if shape == "ellipse":
        cv2.ellipse(mask, (w // 2 + 7, h // 2 - 5), (42, 27), 20.0, 0, 360, 1, -1)
    else:
        mask[31:78, 52:121] = 1
    img = np.full(SIZE + (3,), BACKGROUND, np.uint8)
    img[mask == 1] = DEFECT
    return img, mask


def bbox(mask: np.ndarray) -> np.ndarray | None:
    """The XYXY box (corner coordinates) of a mask's foreground, None when it is empty."""
    ys, xs = np.nonzero(mask)
    return None if len(ys) == 0 else np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float64)


def draws(op: Transform, mask: np.ndarray, img: np.ndarray):
    box = Boxes(bbox(mask)[None], [1], canvas=mask.shape)
    for position in POSITIONS:
        params = op.make_params(seed=3, epoch=1, position=position, image_size=SIZE)
        out_img = op.apply(img, params)
        out_mask = op.kernel_for("mask")(op, mask, params)
        out_boxes = op.kernel_for("boxes")(op, box, params)
        yield params, out_img, out_mask, out_boxes


@pytest.mark.parametrize("text", EXACT + WARPS)
def test_the_mask_covers_the_defect_after_every_geometric_operation(text):
    op = op_of(text)
    img, mask = defect("ellipse")
    compared = 0
    for params, out_img, out_mask, _ in draws(op, mask, img):
        assert out_mask.dtype == np.uint8 and out_mask.shape == out_img.shape[:2], text
        assert set(np.unique(out_mask)) <= {0, 1}  # nearest: labels never mixed
        seen, labelled = out_img[..., 0] > THRESHOLD, out_mask == 1
        union = (seen | labelled).sum()
        if union:
            compared += 1
            iou = (seen & labelled).sum() / union
            assert iou >= 0.98, f"{text} at {op.describe(params)}: IoU {iou:.4f}"
    assert compared >= len(POSITIONS) // 2, text


@pytest.mark.parametrize("text", EXACT)
def test_boxes_are_the_bounding_box_of_the_moved_mask(text):
    """A rectangular defect: its clipped box is the box of its visible part (for an ellipse it is not)."""
    op = op_of(text)
    img, mask = defect("rectangle")
    for params, out_img, out_mask, out_boxes in draws(op, mask, img):
        assert out_boxes.canvas == out_img.shape[:2]
        expected = bbox(out_mask)
        kept, dropped = BoxPolicy().apply(out_boxes)
        if expected is None:
            assert len(kept) == 0 and dropped.total == 1, f"{text}: {out_boxes.xyxy}"
            continue
        assert len(kept) == 1 and dropped.total == 0
        assert np.abs(kept.xyxy[0] - expected).max() <= 1.0, f"{text} at {op.describe(params)}: {kept.xyxy[0]} vs {expected}"


@pytest.mark.parametrize("text", EXACT)
def test_the_whole_image_box_lands_exactly_on_the_image_content(text):
    """Exact rules, to the pixel: the box of the whole input is where the input's pixels land in the
    output (letterbox bands, crop padding and all), and a full mask fills exactly that region."""
    op = op_of(text)
    img, mask = np.full(SIZE + (3,), 255, np.uint8), np.ones(SIZE, np.uint8)
    whole = Boxes([[0, 0, SIZE[1], SIZE[0]]], [1], SIZE)
    for position in POSITIONS:
        params = op.make_params(seed=3, epoch=1, position=position, image_size=SIZE)
        content = bbox(op.apply(img, params)[..., 0] > 128)
        np.testing.assert_array_equal(op.kernel_for("boxes")(op, whole, params).xyxy[0], content, err_msg=text)
        assert np.array_equal(bbox(op.kernel_for("mask")(op, mask, params)), content), text


@pytest.mark.parametrize("text", WARPS)
def test_rotated_boxes_enclose_the_moved_corners(text):
    op = op_of(text)
    img, mask = defect("rectangle")
    for params, _, out_mask, out_boxes in draws(op, mask, img):
        expected, box = bbox(out_mask), out_boxes.xyxy[0].astype(np.float64)
        assert np.all(box[:2] <= expected[:2] + 1) and np.all(box[2:] >= expected[2:] - 1), (text, box, expected)
        assert np.abs(box - expected).max() <= 2.0, f"{text} at {op.describe(params)}: {box} vs {expected}"


@pytest.mark.parametrize("angle", [17.0, -33.5, 90.0])
def test_the_rotation_box_uses_the_image_kernels_matrix(angle):
    """Same centre and sign as RandomRotation.apply: OpenCV's own matrix moves the corners the same way."""
    h, w = SIZE
    cv = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), angle, 1.0)
    corners = np.array([[52.0, 31.0], [121.0, 31.0], [52.0, 78.0], [121.0, 78.0]])
    moved_cv = (corners - 0.5) @ cv[:, :2].T + cv[:, 2] + 0.5  # OpenCV's pixel-centre coordinates around it
    moved = np.c_[corners, np.ones(4)] @ rotation_matrix(h, w, angle).T
    assert np.allclose(moved[:, :2], moved_cv, atol=1e-9)


def test_a_crop_clips_boxes_and_the_policy_counts_what_it_drops():
    op = T.CenterCrop(40)
    params = op.make_params(0, 0, 0, (100, 100))  # window [30, 70) on both axes
    boxes = Boxes([[20, 40, 50, 60], [10, 10, 31, 20], [60, 60, 61, 61], [45, 45, 55, 55]], [3, 4, 5, 6], (100, 100))
    moved = op.kernel_for("boxes")(op, boxes, params)
    np.testing.assert_allclose(moved.xyxy, [[0, 10, 20, 30], [0, 0, 1, 0], [30, 30, 31, 31], [15, 15, 25, 25]])
    np.testing.assert_allclose(moved.visible, [2 / 3, 0, 1, 1], rtol=1e-6)
    kept, dropped = BoxPolicy(min_area=1.0, min_visibility=0.7).apply(moved)
    assert kept.labels.tolist() == [5, 6] and (dropped.area, dropped.visibility) == (1, 1)
    kept, dropped = BoxPolicy(min_area=2.0).apply(moved)
    assert kept.labels.tolist() == [3, 6] and dropped.total == 2
    with pytest.raises(ConfigError, match="min_visibility"):
        BoxPolicy(min_visibility=1.5)
    with pytest.raises(ConfigError, match="labels"):
        Boxes([[0, 0, 1, 1]], [1, 2], (4, 4))


def test_padding_gets_the_masks_fill_not_the_images():
    op = T.RandomCrop(160, pad_if_needed=True, fill=7)
    img, mask = defect("rectangle")
    params = op.make_params(0, 0, 0, SIZE)
    assert (op.apply(img, params) == 7).any()
    out = op.kernel_for("mask")(op, mask + 2, params)
    assert (out == 0).sum() == 160 * 160 - SIZE[0] * min(SIZE[1], 160)
    assert (op.kernel_for("mask")(op, mask + 2, params, fill=255) == 255).sum() == (out == 0).sum()


def test_nearest_resize_takes_each_output_pixels_centre():
    mask = np.arange(6, dtype=np.uint8)[None].repeat(2, 0)
    assert nearest_resize(mask, 2, 4)[0].tolist() == [0, 2, 3, 5]  # floor((j + 0.5) * 6 / 4)
    assert nearest_resize(mask, 4, 12)[0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_operations_that_are_not_geometric_leave_targets_unchanged():
    """One rule (KIND != "geometric"), no list: every such registered operation, and a new one."""
    mask, boxes = defect("ellipse")[1], Boxes([[1, 2, 30, 40]], [1], SIZE)

    @dataclass(frozen=True, repr=False)
    class _Tint(Transform):
        pass

    others = [cls for cls in T.REGISTRY.values() if cls.KIND != "geometric"]
    assert {c.__name__ for c in others} >= {"ColorJitter", "Clahe", "Normalize", "RandomErasing"}
    for cls in [*others, _Tint]:
        op = op_of(cls.EXAMPLES[0] if cls.EXAMPLES else NO_EXAMPLES.get(cls.__name__, f"{cls.__name__}()"), _Tint=_Tint)
        assert op.kernel_for("mask")(op, mask, {}) is mask and op.kernel_for("boxes")(op, boxes, {}) is boxes


def test_random_erasing_leaves_masks_alone_unless_asked():
    op, mask = T.RandomErasing(p=1.0), defect("ellipse")[1]
    params = op.make_params(0, 0, 3, SIZE)
    top, left, h, w = (int(v) for v in params["box"])
    assert h > 0 and op.kernel_for("mask")(op, mask, params) is mask
    erased = erase_mask(op, mask, params, 255)
    assert (erased[top:top + h, left:left + w] == 255).all() and (erased == 255).sum() == h * w
    assert (mask != 255).all()  # the input is not modified
    with pytest.raises(ConfigError, match="class id in"):
        erase_mask(op, mask, params, 300)


def test_every_geometric_operation_has_its_own_kernels_and_a_case_here():
    geometric = {name for name, cls in T.REGISTRY.items() if cls.KIND == "geometric"}
    assert {t.split("(")[0] for t in EXACT + WARPS} == geometric
    for name in geometric:
        cls = T.REGISTRY[name]
        for kind in ("mask", "boxes"):
            assert cls.kernel_for(kind) is not KERNELS[(Transform, kind)], (name, kind)
        forward_matrix(op_of(cls.EXAMPLES[0]), op_of(cls.EXAMPLES[0]).make_params(0, 0, 0, SIZE), SIZE)

    @dataclass(frozen=True, repr=False)
    class _Shift(Transform):
        KIND = "geometric"

    with pytest.raises(ConfigError, match=r"_Shift is geometric but has no mask/boxes kernel.*register_kernel"):
        _Shift.kernel_for("mask")(_Shift(), np.zeros((2, 2), np.uint8), {})
    with pytest.raises(ConfigError, match=r"_Shift is geometric but has no mask/boxes kernel"):  # all background too
        move_targets([T.RandomHorizontalFlip(1.0), _Shift()], [{"flip": np.int64(1)}, {}], np.zeros((4, 4), np.uint8))


def test_a_recipe_moves_mask_and_boxes_with_one_draw():
    spec = AugmentSpec(ops=[T.RandomResizedCrop(96, scale=(0.5, 1.0)), T.RandomHorizontalFlip(),
                            T.RandomRotation(15), T.ColorJitter(0.4, 0.4), T.RandomAffine(10, scale=(0.9, 1.1))])
    img, mask = defect("ellipse")
    for position in POSITIONS:
        params = spec.make_params(5, 0, position, SIZE)
        out_img = img
        for op, p in zip(spec.transforms, params):
            out_img = out_img if op.is_identity else op.apply(out_img, p)
        out_mask, out_boxes, dropped = move_targets(spec.transforms, params, mask,
                                                    Boxes(bbox(mask)[None], [1], SIZE))
        assert out_mask.shape == out_img.shape[:2] == out_boxes.canvas
        seen, labelled = out_img[..., 0] > THRESHOLD, out_mask == 1
        if labelled.any():
            assert (seen & labelled).sum() / (seen | labelled).sum() >= 0.95  # three warps in a row
            box, expected = out_boxes.xyxy[0], bbox(out_mask)
            assert np.all(box[:2] <= expected[:2] + 1) and np.all(box[2:] >= expected[2:] - 1)
    with pytest.raises(ConfigError, match="parameter dicts"):
        move_targets(spec.transforms, params[:2], mask)


def test_register_kernel_refuses_the_image_kind_a_duplicate_and_a_non_operation():
    assert T.Resize(8).kernel_for("image") is T.Resize.apply
    with pytest.raises(ConfigError, match=r"Resize has no kernel for input kind 'heatmap'.*register_kernel"):
        T.Resize(8).kernel_for("heatmap")
    with pytest.raises(ConfigError, match="image kernel"):
        register_kernel(T.Resize, "image", print)
    with pytest.raises(ConfigError, match="already registered"):
        register_kernel(T.Resize, "mask", print)
    with pytest.raises(ConfigError, match="not an operation class"):
        register_kernel(object, "mask", print)


def test_the_attributes_read_by_the_library_are_declared_on_transform():
    """REGION and TORCHVISION have defaults on the base class (no getattr defaults); WHOLE_IMAGE, read
    nowhere, is gone."""
    for name, default in (("REGION", False), ("TORCHVISION", ()), ("GPU_TOLERANCE", None)):
        assert name in vars(Transform) and vars(Transform)[name] == default, name
    assert not hasattr(Transform, "WHOLE_IMAGE")
    assert T.RandomResizedCrop(8).REGION and not T.CenterCrop(8).REGION
