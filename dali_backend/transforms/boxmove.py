"""Boxes moved by a draw's parameters: the ``"boxes"`` kernel every geometric operation registers
(:mod:`dali_backend.transforms.targets`), the :class:`Boxes` record and the :class:`BoxPolicy`.

ONE rule for every operation: the operation's forward map (an affine map, :func:`forward_affine`)
moves the four corners, the box is their enclosing box, clipped to the output canvas. For resize,
crops, flips, letterbox/padding, ``RandomResizedCrop`` and quarter turns the map keeps axes, so this
is exact; for rotation and affine it is the box enclosing the moved corners, as torchvision does.
Each box carries the fraction of it that survived the clips (``visible``).

The trade-off is speed at a few boxes: a detection sample has a handful, and numpy's per-call
overhead on ``[3, 4]`` arrays was the whole cost (0.25-0.39 ms per sample through four operations, 5-6 %
of a fallback sample; now 0.08-0.11 ms). So the maps are six Python floats, not 3x3 arrays; up to
:data:`FEW_BOXES` boxes are moved on Python floats, two corners each (those the map's signs pick: the
same doubles as the numpy path's least and greatest of four); and a chain (:func:`move_chain`) keeps
the boxes as plain rows from its first operation to its last, building one :class:`Boxes` at the end
rather than a validated record per operation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from .affine import RandomAffine
from .base import KERNELS, Size, Transform
from .crop import CenterCrop, RandomCrop, RandomResizedCrop
from .flip import RandomHorizontalFlip, RandomRot90, RandomVerticalFlip
from .resize import Resize
from .rotation import RandomRotation

CROPS = (CenterCrop, RandomCrop, RandomResizedCrop)  # a window (top, left, h, w) resized to the output size
FLIPS = (RandomHorizontalFlip, RandomVerticalFlip)
FEW_BOXES = 16  # up to this many boxes, plain Python floats: numpy's per-call overhead is the cost there
Affine = tuple[float, float, float, float, float, float]  # (a, b, c, d, e, f): x' = a x + b y + c, y' = d x + e y + f
IDENTITY: Affine = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)


@dataclass(frozen=True)
class Boxes:
    """Boxes of one image: ``xyxy`` ``[N, 4]`` float32 absolute pixels (x1, y1, x2, y2), ``labels``
    ``[N]`` int64 class ids, ``canvas`` the image's ``(height, width)``, ``visible`` ``[N]`` the
    fraction of each box's moved area still inside the canvas (1 until an operation clips it).

    Raises:
        ConfigError: shapes that do not match, or a canvas that is not two positive ints.
    """

    xyxy: NDArray[np.float32]
    labels: NDArray[np.int64]
    canvas: Size
    visible: NDArray[np.float32] | None = field(default=None)

    def __post_init__(self):
        xyxy = np.asarray(self.xyxy, np.float32).reshape(-1, 4) if np.size(self.xyxy) else np.zeros((0, 4), np.float32)
        labels = np.asarray(self.labels, np.int64).reshape(-1)
        if len(labels) != len(xyxy):
            raise ConfigError(f"Boxes: {len(xyxy)} boxes but {len(labels)} labels; give one class id per box")
        try:
            h, w = (int(v) for v in self.canvas)
        except (TypeError, ValueError):
            h = w = 0
        if h <= 0 or w <= 0:
            raise ConfigError(f"Boxes.canvas={self.canvas!r}; give the image's (height, width) in pixels")
        visible = np.ones(len(xyxy), np.float32) if self.visible is None else np.asarray(self.visible, np.float32)
        if visible.shape != (len(xyxy),):
            raise ConfigError(f"Boxes.visible has shape {visible.shape}; one fraction per box ({len(xyxy)})")
        for name, value in (("xyxy", xyxy), ("labels", labels), ("canvas", (h, w)), ("visible", visible)):
            object.__setattr__(self, name, value)

    @classmethod
    def checked(cls, xyxy: NDArray[np.float32], labels: NDArray[np.int64], canvas: Size,
                visible: NDArray[np.float32]) -> Boxes:
        """Boxes from fields a kernel made (float32 ``[N, 4]``, int64 ``[N]``, a ``(h, w)`` of ints, float32
        ``[N]``), without :meth:`__post_init__`'s conversions: they were checked when the boxes came in."""
        out = object.__new__(cls)
        for name, value in (("xyxy", xyxy), ("labels", labels), ("canvas", canvas), ("visible", visible)):
            object.__setattr__(out, name, value)
        return out

    @classmethod
    def of_index(cls, xyxy: NDArray[np.float32], labels: NDArray[np.int64], canvas: Size) -> Boxes:
        """A sample's boxes as the index holds them (``IndexTargets.boxes_of``: float32 ``[N, 4]`` and int64
        ``[N]``, checked when the index was built or loaded) on its decoded image's ``canvas`` (h, w)."""
        return cls.checked(xyxy, labels, (int(canvas[0]), int(canvas[1])), np.ones(len(labels), np.float32))

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def area(self) -> NDArray[np.float32]:
        """Each box's area in pixels (0 for an empty box)."""
        wh = np.clip(self.xyxy[:, 2:] - self.xyxy[:, :2], 0, None)
        return (wh[:, 0] * wh[:, 1]).astype(np.float32)


@dataclass(frozen=True)
class Dropped:
    """How many boxes :meth:`BoxPolicy.apply` dropped, by reason (a box failing both counts as area)."""

    area: int = 0
    visibility: int = 0

    @property
    def total(self) -> int:
        return self.area + self.visibility


@dataclass(frozen=True)
class BoxPolicy:
    """Which moved boxes survive: area at least ``min_area`` pixels and at least ``min_visibility`` of
    the box still inside the canvas (``Boxes.visible``). albumentations' ``min_area`` /
    ``min_visibility``, torchvision's ``SanitizeBoundingBoxes(min_size)`` by area.

    Raises:
        ConfigError: a negative area or a visibility outside [0, 1].
    """

    min_area: float = 1.0
    min_visibility: float = 0.0

    def __post_init__(self):
        if not (isinstance(self.min_area, (int, float)) and np.isfinite(self.min_area) and self.min_area >= 0):
            raise ConfigError(f"BoxPolicy.min_area={self.min_area!r}; give a number of pixels >= 0")
        if not (isinstance(self.min_visibility, (int, float)) and 0.0 <= self.min_visibility <= 1.0):
            raise ConfigError(f"BoxPolicy.min_visibility={self.min_visibility!r}; give a fraction in [0, 1]")

    def apply(self, boxes: Boxes) -> tuple[Boxes, Dropped]:
        """The boxes this policy keeps, and the counts of those it dropped."""
        if len(boxes) <= FEW_BOXES:  # the same float32 areas as the numpy path, without its per-call cost
            small = [a < self.min_area for a in boxes.area.tolist()]
            hidden = [not s and v < self.min_visibility for s, v in zip(small, boxes.visible.tolist())]
            if not any(small) and not any(hidden):
                return boxes, Dropped()
            keep = np.array([not (s or h) for s, h in zip(small, hidden)], bool)
            n_small, n_hidden = sum(small), sum(hidden)
        else:
            small = boxes.area < self.min_area
            hidden = ~small & (boxes.visible < self.min_visibility)
            keep = ~(small | hidden)
            n_small, n_hidden = int(small.sum()), int(hidden.sum())
        kept = Boxes.checked(boxes.xyxy[keep], boxes.labels[keep], boxes.canvas, boxes.visible[keep])
        return kept, Dropped(area=n_small, visibility=n_hidden)


# ---------------------------------------------------------------------------------------- maps
def then(first: Affine, second: Affine) -> Affine:
    """The affine map ``second(first(p))``."""
    a1, b1, c1, d1, e1, f1 = first
    a2, b2, c2, d2, e2, f2 = second
    return (a2 * a1 + b2 * d1, a2 * b1 + b2 * e1, a2 * c1 + b2 * f1 + c2,
            d2 * a1 + e2 * d1, d2 * b1 + e2 * e1, d2 * c1 + e2 * f1 + f2)


def inverse(m: Affine) -> Affine:
    """The inverse of an invertible affine map (Cramer's rule)."""
    a, b, c, d, e, f = m
    det = a * e - b * d
    ia, ib, id_, ie = e / det, -b / det, -d / det, a / det
    return (ia, ib, -(ia * c + ib * f), id_, ie, -(id_ * c + ie * f))


def rotation_affine(height: int, width: int, angle: float) -> Affine:
    """RandomRotation's forward map in corner coordinates: ``cv2.getRotationMatrix2D`` about OpenCV's
    centre ``(w/2 - 0.5, h/2 - 0.5)`` (counter-clockwise for a positive angle, y down), moved by the
    half pixel between OpenCV's coordinates (pixel centres at integers) and the corners'."""
    a = math.radians(angle)
    alpha, beta = math.cos(a), math.sin(a)
    cx, cy = width / 2 - 0.5, height / 2 - 0.5
    m = (alpha, beta, (1 - alpha) * cx - beta * cy, -beta, alpha, beta * cx + (1 - alpha) * cy)
    return then(then((1.0, 0.0, -0.5, 0.0, 1.0, -0.5), m), (1.0, 0.0, 0.5, 0.0, 1.0, 0.5))  # corner = centre + 0.5


def rotation_matrix(height: int, width: int, angle: float) -> np.ndarray:
    """:func:`rotation_affine` as a 3x3 array."""
    return as_matrix(rotation_affine(height, width, angle))


def as_matrix(m: Affine) -> np.ndarray:
    """``[[a, b, c], [d, e, f], [0, 0, 1]]`` float64."""
    return np.array([m[:3], m[3:], (0.0, 0.0, 1.0)], np.float64)


def forward_affine(op: Transform, params: dict[str, np.ndarray], size: Size) -> Affine:
    """The map a point ``(x, y)`` of the input canvas (corner coordinates) takes in the output of ``op``
    for the draw ``params`` on an input of ``size`` (h, w), as six Python floats.

    Raises:
        ConfigError: ``op`` is not a geometric operation this module knows.
    """
    h, w = size
    if isinstance(op, FLIPS):  # first: the most common, and it needs no output size
        if not int(params["flip"]):
            return IDENTITY
        return (-1.0, 0.0, float(w), 0.0, 1.0, 0.0) if op.AXIS == 1 else (1.0, 0.0, 0.0, 0.0, -1.0, float(h))
    if isinstance(op, RandomRotation):
        return rotation_affine(h, w, float(params["angle"]))
    if isinstance(op, RandomAffine):  # the parameter is the destination-to-source map, in corner coordinates
        return inverse(tuple(float(v) for v in np.asarray(params["matrix"], np.float64).reshape(-1)[:6]))
    out_h, out_w = op.output_size(size, params)
    if isinstance(op, Resize):
        if op.letterbox:
            nh, nw = int(params["height"]), int(params["width"])
            return (nw / w, 0.0, float((out_w - nw + 1) // 2), 0.0, nh / h, float((out_h - nh + 1) // 2))
        return (out_w / w, 0.0, 0.0, 0.0, out_h / h, 0.0)
    if isinstance(op, CROPS):
        top, left, ch, cw = op.window(params)
        return then((1.0, 0.0, -float(left), 0.0, 1.0, -float(top)), (out_w / cw, 0.0, 0.0, 0.0, out_h / ch, 0.0))
    if isinstance(op, RandomRot90):  # the image's order: transpose, then rows (vflip), then columns (hflip)
        m = (0.0, 1.0, 0.0, 1.0, 0.0, 0.0) if int(params["transpose"]) else IDENTITY
        if int(params["vflip"]):
            m = then(m, (1.0, 0.0, 0.0, 0.0, -1.0, float(out_h)))
        if int(params["hflip"]):
            m = then(m, (-1.0, 0.0, float(out_w), 0.0, 1.0, 0.0))
        return m
    raise ConfigError(f"{type(op).__name__}: no forward map for boxes; add it to "
                      "dali_backend.transforms.boxmove.forward_affine")


def forward_matrix(op: Transform, params: dict[str, np.ndarray], size: Size) -> np.ndarray:
    """:func:`forward_affine` as a 3x3 float64 array (the mask warps invert it)."""
    return as_matrix(forward_affine(op, params, size))


# ---------------------------------------------------------------------------------------- moves
_CORNER_X, _CORNER_Y = [0, 2, 0, 2], [1, 1, 3, 3]  # columns of xyxy: the four corners' x and y


def moved_rows(rows: list, visible: list, m: Affine, out_size: Size) -> tuple[list, list]:
    """:func:`move_boxes`' arithmetic on Python floats (IEEE doubles, the same operations in the same order
    as the numpy path, so the same results bit for bit): ``(rows x1 y1 x2 y2, visible fractions)``.

    The moved box's extremes are the two corners the map's signs pick (``x' = a x + b y + c`` is least at
    the smaller ``x`` where ``a >= 0``...): rounding is monotone, so those corners' doubles are the least
    and greatest of all four, without computing the other two."""
    a, b, c, d, e, f = m
    w, h = float(out_size[1]), float(out_size[0])
    ax = (0, 1) if a >= 0 else (1, 0)  # which of (low x, high x) gives the least / greatest x', and so on
    bx = (0, 1) if b >= 0 else (1, 0)
    dy = (0, 1) if d >= 0 else (1, 0)
    ey = (0, 1) if e >= 0 else (1, 0)
    out, fractions = [], []
    for (x1, y1, x2, y2), v in zip(rows, visible):
        xs = (x1, x2) if x1 <= x2 else (x2, x1)
        ys = (y1, y2) if y1 <= y2 else (y2, y1)
        lx, hx = a * xs[ax[0]] + b * ys[bx[0]] + c, a * xs[ax[1]] + b * ys[bx[1]] + c
        ly, hy = d * xs[dy[0]] + e * ys[ey[0]] + f, d * xs[dy[1]] + e * ys[ey[1]] + f
        whole = (hx - lx) * (hy - ly)
        lx = 0.0 if lx < 0.0 else (w if lx > w else lx)  # min(max(v, 0), w), without the calls
        hx = 0.0 if hx < 0.0 else (w if hx > w else hx)
        ly = 0.0 if ly < 0.0 else (h if ly > h else ly)
        hy = 0.0 if hy < 0.0 else (h if hy > h else hy)
        out.append((lx, ly, hx, hy))
        fractions.append(v * ((hx - lx) * (hy - ly) / whole if whole > 0 else 0.0))
    return out, fractions


def _moved_array(xyxy: np.ndarray, m: Affine, out_size: Size) -> tuple[np.ndarray, np.ndarray]:
    """The numpy path of :func:`move_boxes`: ``(xyxy float64 [N, 4], kept fraction float64 [N])``."""
    corners = xyxy.astype(np.float64)
    xs, ys = corners[:, _CORNER_X], corners[:, _CORNER_Y]  # [N, 4 corners]
    moved = np.stack([m[0] * xs + m[1] * ys + m[2], m[3] * xs + m[4] * ys + m[5]], 1)
    lo, hi = moved.min(axis=2), moved.max(axis=2)  # [N, (x, y)]
    side = np.maximum(hi - lo, 0.0)
    whole = side[:, 0] * side[:, 1]
    limit = np.array([out_size[1], out_size[0]], np.float64)
    lo, hi = np.minimum(np.maximum(lo, 0.0), limit), np.minimum(np.maximum(hi, 0.0), limit)
    side = np.maximum(hi - lo, 0.0)
    kept = side[:, 0] * side[:, 1]
    return np.concatenate([lo, hi], axis=1), np.divide(kept, whole, out=np.zeros_like(kept), where=whole > 0)


def move_boxes(boxes: Boxes, matrix: np.ndarray | Affine, out_size: Size) -> Boxes:
    """``boxes`` moved by ``matrix`` (a 3x3 or 2x3 affine array, or :data:`Affine` floats; corner
    coordinates): the box enclosing the four moved corners, clipped to ``out_size``; ``visible``
    multiplied by the fraction the clip kept. Up to :data:`FEW_BOXES` boxes on Python floats, beyond
    in numpy."""
    m = matrix if isinstance(matrix, tuple) else tuple(float(v) for v in np.asarray(matrix, np.float64)[:2].reshape(-1))
    size = (int(out_size[0]), int(out_size[1]))
    if len(boxes) <= FEW_BOXES:
        rows, visible = moved_rows(boxes.xyxy.tolist(), boxes.visible.tolist(), m, size)
        return Boxes.checked(np.array(rows, np.float32).reshape(-1, 4), boxes.labels, size,
                             np.array(visible, np.float32))
    xyxy, fraction = _moved_array(boxes.xyxy, m, size)
    return Boxes.checked(xyxy.astype(np.float32), boxes.labels, size, (boxes.visible * fraction).astype(np.float32))


def boxes_kernel(op: Transform, boxes: Boxes, params: dict[str, np.ndarray]) -> Boxes:
    """The ``"boxes"`` kernel of every geometric operation: :func:`move_boxes` by :func:`forward_affine`."""
    if not isinstance(boxes, Boxes):
        raise ConfigError(f"{type(op).__name__} boxes kernel: got {type(boxes).__name__}; give "
                          "dali_backend.transforms.boxmove.Boxes(xyxy, labels, canvas=(height, width))")
    size = boxes.canvas
    return move_boxes(boxes, forward_affine(op, params, size), op.output_size(size, params))


def move_chain(ops, params: list[dict[str, np.ndarray]], boxes: Boxes) -> Boxes:
    """``boxes`` through every operation of a chain with its draw, each operation's ``"boxes"`` kernel in
    turn: where that kernel is :func:`boxes_kernel` (every geometric operation of this package), on
    plain rows from one such operation to the next (doubles, one float32 :class:`Boxes` at the end: at
    most a float32 rounding from calling the kernels one by one); other kernels get a :class:`Boxes`."""
    if not isinstance(boxes, Boxes):
        raise ConfigError(f"move_targets: boxes is a {type(boxes).__name__}; give "
                          "dali_backend.transforms.targets.Boxes(xyxy, labels, canvas=(height, width))")
    default = KERNELS.get((Transform, "boxes"))  # non-geometric operations: boxes unchanged
    few = len(boxes) <= FEW_BOXES
    rows, visible, size = (boxes.xyxy.tolist(), boxes.visible.tolist(), boxes.canvas) if few else \
        (boxes.xyxy.astype(np.float64), boxes.visible.astype(np.float64), boxes.canvas)
    for op, p in zip(ops, params):
        if op.is_identity:
            continue
        kernel = type(op).kernel_for("boxes")
        if kernel is default and op.KIND != "geometric":
            continue
        if kernel is boxes_kernel:
            m, out = forward_affine(op, p, size), op.output_size(size, p)
            out = (int(out[0]), int(out[1]))
            if few:
                rows, visible = moved_rows(rows, visible, m, out)
            else:
                rows, fraction = _moved_array(rows, m, out)
                visible = visible * fraction
            size = out
            continue
        moved = kernel(op, Boxes(np.array(rows, np.float32), boxes.labels, size, np.array(visible, np.float32)), p)
        rows, visible, size = (moved.xyxy.tolist(), moved.visible.tolist(), moved.canvas) if few else \
            (moved.xyxy.astype(np.float64), moved.visible.astype(np.float64), moved.canvas)
        boxes = moved
    return Boxes.checked(np.array(rows, np.float32).reshape(-1, 4), boxes.labels, (int(size[0]), int(size[1])),
                         np.array(visible, np.float32).reshape(-1))
