"""Masks and boxes moved by a draw's parameters: one ``"mask"`` and one ``"boxes"`` kernel per geometric
operation, registered beside its image kernel (:func:`~dali_backend.transforms.base.register_kernel`).

The rules, and the trade-offs they make:

* **One geometry per operation.** Every kernel reads the draw's own parameters (``make_params``) and
  the output size the operation declares (:meth:`Transform.output_size`): the crops' ``start``, the
  letterbox's ``ceil(pad / 2)``, the rotation's centre and sign are never re-derived here.
* **Boxes** (:class:`Boxes`: XYXY float32 in absolute pixels of the canvas, torchvision v2's
  convention, ``[0, 0]`` the corner of the first pixel) follow ONE rule for every operation: the
  operation's forward map (a 3x3 matrix, :func:`forward_matrix`) moves the four corners, the box is
  their enclosing box, clipped to the output canvas. For resize, crops, flips, letterbox/padding,
  ``RandomResizedCrop`` and quarter turns the map keeps axes, so this is exact; for rotation and
  affine it is the box enclosing the moved corners, as torchvision does. Each box carries the
  fraction of it that survived the clips (``visible``); :class:`BoxPolicy` drops the too small or
  too hidden ones and counts them. A few boxes (up to ``FEW_BOXES``) are moved on Python floats, the same
  doubles as the numpy path: at three boxes numpy's per-call overhead was the whole cost.
* **Masks** (``H x W`` integer class ids) move by nearest neighbour, never antialiased: crops and
  flips cut and mirror exactly; resizes and warps sample each output pixel's centre in the source
  (``src = floor((x + 0.5) * in / out)``, in the float32 arithmetic of DALI's CPU ``INTERP_NN``
  operators: tests/transforms/test_target_kernels_dali.py), and the mask's own fill
  (``fill=0``: background) goes where the image is padded. The source indices are computed in numpy
  in that arithmetic; the gathers are ``np.take`` and ``cv2.remap`` on integer maps (a pure copy
  per pixel), so a mask costs about one nearest pass of its image (scripts/mask_kernels_cost.py).
* **Operations that are not geometric** (``KIND`` photometric, output or batch: colour, CLAHE,
  blur, ``Normalize``, ``RandomErasing``) leave both unchanged: one identity kernel registered on
  :class:`Transform` reads the declared ``KIND``, so a new photometric operation needs nothing here,
  and a new geometric operation without its own kernels is refused, never passed through.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from .affine import RandomAffine
from .base import Size, Transform, register_kernel
from .crop import CenterCrop, RandomCrop, RandomResizedCrop
from .erasing import RandomErasing
from .flip import RandomHorizontalFlip, RandomRot90, RandomVerticalFlip
from .resize import Resize
from .rotation import RandomRotation
from .window import crop

CROPS = (CenterCrop, RandomCrop, RandomResizedCrop)  # a window (top, left, h, w) resized to the output size
FLIPS = (RandomHorizontalFlip, RandomVerticalFlip)
MASK_FILL = 0  # the mask's value where the image is padded or warped in from outside: background
SHRT_MAX = 32767  # cv2.remap's integer maps (CV_16SC2) and its output sides stay below this


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
        small = boxes.area < self.min_area
        hidden = ~small & (boxes.visible < self.min_visibility)
        keep = ~(small | hidden)
        kept = Boxes(boxes.xyxy[keep], boxes.labels[keep], boxes.canvas, boxes.visible[keep])
        return kept, Dropped(area=int(small.sum()), visibility=int(hidden.sum()))


# ---------------------------------------------------------------------------------------- boxes
def _affine(a: float, b: float, c: float, d: float, e: float, f: float) -> np.ndarray:
    """``[[a, b, c], [d, e, f], [0, 0, 1]]``: ``x' = a x + b y + c``, ``y' = d x + e y + f``."""
    return np.array([[a, b, c], [d, e, f], [0.0, 0.0, 1.0]])


def rotation_matrix(height: int, width: int, angle: float) -> np.ndarray:
    """RandomRotation's forward map in corner coordinates: ``cv2.getRotationMatrix2D`` about OpenCV's
    centre ``(w/2 - 0.5, h/2 - 0.5)`` (counter-clockwise for a positive angle, y down), moved by the
    half pixel between OpenCV's coordinates (pixel centres at integers) and the corners'."""
    a = np.radians(angle)
    alpha, beta = np.cos(a), np.sin(a)
    cx, cy = width / 2 - 0.5, height / 2 - 0.5
    m = _affine(alpha, beta, (1 - alpha) * cx - beta * cy, -beta, alpha, beta * cx + (1 - alpha) * cy)
    shift = _affine(1, 0, 0.5, 0, 1, 0.5)  # corner = centre coordinate + 0.5
    return shift @ m @ _affine(1, 0, -0.5, 0, 1, -0.5)  # the shift's inverse


def forward_matrix(op: Transform, params: dict[str, np.ndarray], size: Size) -> np.ndarray:
    """The 3x3 map a point ``(x, y, 1)`` of the input canvas (corner coordinates) takes in the output
    of ``op`` for the draw ``params`` on an input of ``size`` (h, w).

    Raises:
        ConfigError: ``op`` is not a geometric operation this module knows.
    """
    h, w = size
    out_h, out_w = op.output_size(size, params)
    if isinstance(op, Resize):
        if op.letterbox:
            nh, nw = int(params["height"]), int(params["width"])
            return _affine(nw / w, 0, (out_w - nw + 1) // 2, 0, nh / h, (out_h - nh + 1) // 2)
        return _affine(out_w / w, 0, 0, 0, out_h / h, 0)
    if isinstance(op, CROPS):
        top, left, ch, cw = op.window(params)
        return _affine(out_w / cw, 0, 0, 0, out_h / ch, 0) @ _affine(1, 0, -left, 0, 1, -top)
    if isinstance(op, FLIPS):
        if not int(params["flip"]):
            return np.eye(3)
        return _affine(-1, 0, w, 0, 1, 0) if op.AXIS == 1 else _affine(1, 0, 0, 0, -1, h)
    if isinstance(op, RandomRot90):  # the image's order: transpose, then rows (vflip), then columns (hflip)
        m = _affine(0, 1, 0, 1, 0, 0) if int(params["transpose"]) else np.eye(3)
        if int(params["vflip"]):
            m = _affine(1, 0, 0, 0, -1, out_h) @ m
        if int(params["hflip"]):
            m = _affine(-1, 0, out_w, 0, 1, 0) @ m
        return m
    if isinstance(op, RandomRotation):
        return rotation_matrix(h, w, float(params["angle"]))
    if isinstance(op, RandomAffine):  # the parameter is the destination-to-source map, in corner coordinates
        return np.linalg.inv(np.vstack([np.asarray(params["matrix"], np.float64), [0.0, 0.0, 1.0]]))
    raise ConfigError(f"{type(op).__name__}: no forward map for boxes; add it to "
                      "dali_backend.transforms.targets.forward_matrix")


_CORNER_X, _CORNER_Y = [0, 2, 0, 2], [1, 1, 3, 3]  # columns of xyxy: the four corners' x and y
FEW_BOXES = 16  # up to this many boxes, plain Python floats: numpy's per-call overhead is the cost there


def _moved_few(xyxy: np.ndarray, matrix: np.ndarray, out_size: Size) -> tuple[list, list]:
    """:func:`move_boxes`' arithmetic on Python floats (IEEE doubles, the same operations in the same order
    as the numpy path, so the same results bit for bit): ``(rows x1 y1 x2 y2, kept fractions)``."""
    (a, b, c), (d, e, f) = matrix[0].tolist(), matrix[1].tolist()
    w, h = float(out_size[1]), float(out_size[0])
    rows, fractions = [], []
    for x1, y1, x2, y2 in xyxy.tolist():
        xs = (a * x1 + b * y1 + c, a * x2 + b * y1 + c, a * x1 + b * y2 + c, a * x2 + b * y2 + c)
        ys = (d * x1 + e * y1 + f, d * x2 + e * y1 + f, d * x1 + e * y2 + f, d * x2 + e * y2 + f)
        lx, hx, ly, hy = min(xs), max(xs), min(ys), max(ys)
        whole = max(hx - lx, 0.0) * max(hy - ly, 0.0)
        lx, hx, ly, hy = min(max(lx, 0.0), w), min(max(hx, 0.0), w), min(max(ly, 0.0), h), min(max(hy, 0.0), h)
        kept = max(hx - lx, 0.0) * max(hy - ly, 0.0)
        rows.append((lx, ly, hx, hy))
        fractions.append(kept / whole if whole > 0 else 0.0)
    return rows, fractions


def move_boxes(boxes: Boxes, matrix: np.ndarray, out_size: Size) -> Boxes:
    """``boxes`` moved by ``matrix`` (3x3 affine, corner coordinates): the box enclosing the four moved
    corners, clipped to ``out_size``; ``visible`` multiplied by the fraction the clip kept. Up to
    :data:`FEW_BOXES` boxes on Python floats (9 us for 3 boxes against 40 us for the numpy calls on
    ``[N, 4]`` arrays, whose per-call overhead is the cost at a few boxes), beyond in numpy."""
    m = np.asarray(matrix, np.float64)
    if len(boxes) <= FEW_BOXES:
        rows, fractions = _moved_few(boxes.xyxy, m, out_size)
        xyxy, fraction = np.array(rows, np.float64).reshape(-1, 4), np.array(fractions, np.float64)
    else:
        corners = boxes.xyxy.astype(np.float64)
        xs, ys = corners[:, _CORNER_X], corners[:, _CORNER_Y]  # [N, 4 corners]
        moved = np.stack([m[0, 0] * xs + m[0, 1] * ys + m[0, 2], m[1, 0] * xs + m[1, 1] * ys + m[1, 2]], 1)
        lo, hi = moved.min(axis=2), moved.max(axis=2)  # [N, (x, y)]
        side = np.maximum(hi - lo, 0.0)
        whole = side[:, 0] * side[:, 1]
        limit = np.array([out_size[1], out_size[0]], np.float64)
        lo, hi = np.minimum(np.maximum(lo, 0.0), limit), np.minimum(np.maximum(hi, 0.0), limit)
        side = np.maximum(hi - lo, 0.0)
        kept = side[:, 0] * side[:, 1]
        fraction = np.divide(kept, whole, out=np.zeros_like(kept), where=whole > 0)
        xyxy = np.concatenate([lo, hi], axis=1)
    return Boxes(xyxy.astype(np.float32), boxes.labels, out_size, (boxes.visible * fraction).astype(np.float32))


def boxes_kernel(op: Transform, boxes: Boxes, params: dict[str, np.ndarray]) -> Boxes:
    """The ``"boxes"`` kernel of every geometric operation: :func:`move_boxes` by :func:`forward_matrix`."""
    if not isinstance(boxes, Boxes):
        raise ConfigError(f"{type(op).__name__} boxes kernel: got {type(boxes).__name__}; give "
                          "dali_backend.transforms.targets.Boxes(xyxy, labels, canvas=(height, width))")
    size = boxes.canvas
    return move_boxes(boxes, forward_matrix(op, params, size), op.output_size(size, params))


# ---------------------------------------------------------------------------------------- masks
def _checked_mask(op: Transform, mask) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.ndim != 2 or mask.dtype.kind not in "iub":
        raise ConfigError(f"{type(op).__name__} mask kernel: got an array of shape {mask.shape} and dtype "
                          f"{mask.dtype}; give one H x W integer array of class ids (uint8)")
    return mask


@functools.lru_cache(maxsize=512)
def _nearest_columns(n_out: int, n_in: int) -> np.ndarray:
    """The source column of each output column of a nearest resize (read-only, cached per size pair)."""
    s = np.float32(n_in) / np.float32(n_out)
    out = np.minimum(np.floor((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * s).astype(np.intp), n_in - 1)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=512)
def _nearest_rows(n_out: int, n_in: int) -> np.ndarray:
    """The source row of each output row of a nearest resize (read-only, cached per size pair)."""
    s = np.float32(n_in) / np.float32(n_out)
    steps = np.full(n_out, s, np.float32)
    steps[0] = np.float32(0.5) * s
    out = np.minimum(np.floor(np.cumsum(steps, dtype=np.float32)).astype(np.intp), n_in - 1)  # sequential in float32
    out.flags.writeable = False
    return out


def nearest_resize(mask: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """``mask`` resized to ``out_h`` x ``out_w`` by nearest neighbour, no antialiasing, labels never mixed:
    output pixel ``j`` takes the source pixel containing its centre, ``(j + 0.5) * in / out``, in DALI's
    CPU ``fn.resize(interp_type=INTERP_NN)`` float32 arithmetic, bit for bit (measured on 400 random
    sizes up to 1500): columns ``floor((j + 0.5f) * s)``, rows by the running sum ``0.5f * s + s + ...``
    (``s = float32(in) / float32(out)``); the two differ on exact ties (40 -> 100 rows: 14 of 100).
    Two 1-D gathers (rows, then columns: ``np.take``) of indices cached per size pair: 0.04 ms at
    200 x 250 -> 224 x 224, against 0.23 ms for one 2-D fancy index and 0.13 ms for ``cv2.resize``
    of the 3-channel image (scripts/mask_kernels_cost.py)."""
    h, w = mask.shape
    return mask.take(_nearest_rows(int(out_h), h), axis=0).take(_nearest_columns(int(out_w), w), axis=1)


def _warp_sources(inverse: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """``[out_w, out_h, 2]`` float32: for output pixel ``(y, x)`` at ``[x, y]`` the floored ``(x, y)`` of its
    source, in DALI CPU's float32 arithmetic: each row starts at ``M @ (0.5, y + 0.5, 1)`` and steps by
    the matrix's first column, one float32 addition per pixel in order. Stored column by column so that
    each step is one contiguous vector addition over all rows (0.15 ms at 224 x 224, against 0.45 ms
    for ``np.cumsum`` along the rows)."""
    f = np.float32
    m = np.asarray(inverse)[:2].astype(f)
    src = np.empty((out_w, out_h * 2), f)  # column x: (source x, source y) of every row, interleaved
    y = np.arange(out_h, dtype=f) + f(0.5)
    src[0] = (m[:, 0] * f(0.5) + m[:, 1] * y[:, None] + m[:, 2]).reshape(-1)
    step = np.tile(m[:, 0], out_h)
    columns = list(src)
    for before, column in zip(columns, columns[1:]):
        np.add(before, step, out=column)
    return np.floor(src, out=src).reshape(out_w, out_h, 2)


def nearest_warp(mask: np.ndarray, inverse: np.ndarray, out_size: Size, fill: int) -> np.ndarray:
    """``mask`` warped by nearest neighbour: output pixel ``(y, x)`` takes the source pixel containing
    ``inverse @ (x + 0.5, y + 0.5, 1)`` (corner coordinates), ``fill`` where that falls outside. In the
    float32 arithmetic of DALI's CPU ``fn.warp_affine(interp_type=INTERP_NN)``, bit for bit: each row
    starts at ``M @ (0.5, y + 0.5, 1)`` and steps by the matrix's first column (a direct product
    differs on ties: 2 of 153,600 pixels over 64 draws of 40 x 60).

    The integer source indices are computed here; the gather is ``cv2.remap`` on an integer map
    (``CV_16SC2``, ``INTER_NEAREST``: a copy per pixel, ``fill`` outside), for uint8 masks and sides
    below 32767; other masks take the numpy gather of the same indices."""
    out_h, out_w = (int(v) for v in out_size)
    h, w = mask.shape
    src = _warp_sources(inverse, out_h, out_w)
    if mask.dtype == np.uint8 and max(h, w, out_h, out_w) < SHRT_MAX:
        import cv2  # here, not at the top: importing the package loads no OpenCV (tests/test_imports.py)

        np.clip(src, -1, max(h, w), out=src)  # outside stays outside, and fits int16
        out = cv2.remap(mask, src.astype(np.int16), None, cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT,
                        borderValue=int(fill))
        return np.ascontiguousarray(out.T)
    sx, sy = src[..., 0].T, src[..., 1].T
    inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
    out = np.take(mask.reshape(-1), np.where(inside, sy.astype(np.int64) * w + sx.astype(np.int64), 0))
    out[~inside] = fill
    return out


def _resize_mask(op: Resize, mask, params, fill: int = MASK_FILL):
    mask = _checked_mask(op, mask)
    if op.exact:
        return nearest_resize(mask, *op.size)
    inner = nearest_resize(mask, int(params["height"]), int(params["width"]))
    if not op.letterbox:
        return inner
    (H, W), (nh, nw) = op.size, inner.shape
    return crop(inner, -((H - nh + 1) // 2), -((W - nw + 1) // 2), H, W, fill)


def _crop_mask(op: CenterCrop | RandomCrop, mask, params, fill: int = MASK_FILL):
    return crop(_checked_mask(op, mask), *op.window(params), fill)


def _resized_crop_mask(op: RandomResizedCrop, mask, params, fill: int = MASK_FILL):
    mask = _checked_mask(op, mask)
    top, left, h, w = (int(v) for v in op.window(params))
    inside = 0 <= top and 0 <= left and top + h <= mask.shape[0] and left + w <= mask.shape[1]
    window = mask[top:top + h, left:left + w] if inside else crop(mask, top, left, h, w, fill)  # a view: no copy
    return nearest_resize(window, *op.size)


def _exact_mask(op: Transform, mask, params, fill: int = MASK_FILL):
    """Flips and quarter turns: the image kernel itself (pixels moved, never interpolated)."""
    return op.apply(_checked_mask(op, mask), params)


def warp_matrix(op: Transform, params: dict[str, np.ndarray], size: Size) -> NDArray[np.float32]:
    """The 2x3 float32 destination-to-source matrix the mask kernel of a rotation or affine samples by
    (corner coordinates): what a DALI graph gives ``fn.warp_affine(inverse_map=True, INTERP_NN)`` to
    equal it bit for bit (``fn.rotate`` builds its own matrix from the angle: 2 of 3.9 million pixels
    differed over 256 draws)."""
    return np.linalg.inv(forward_matrix(op, params, size))[:2].astype(np.float32)


def _warped_mask(op: Transform, mask, params, fill: int = MASK_FILL):
    mask = _checked_mask(op, mask)
    return nearest_warp(mask, warp_matrix(op, params, mask.shape), op.output_size(mask.shape, params), fill)


def _unmoved(op: Transform, data: Any, params: dict[str, np.ndarray], **_) -> Any:
    """Every operation that is not geometric leaves masks and boxes as they are."""
    if op.KIND == "geometric":
        raise ConfigError(f"{type(op).__name__} is geometric but has no mask/boxes kernel; register them with "
                          f"dali_backend.transforms.base.register_kernel({type(op).__name__}, 'mask', fn) "
                          "(see dali_backend.transforms.targets)")
    return data


MASK_KERNELS = {Resize: _resize_mask, CenterCrop: _crop_mask, RandomCrop: _crop_mask,
                RandomResizedCrop: _resized_crop_mask, RandomHorizontalFlip: _exact_mask, RandomVerticalFlip: _exact_mask, RandomRot90: _exact_mask,
                RandomRotation: _warped_mask, RandomAffine: _warped_mask}
for _op, _kernel in MASK_KERNELS.items():
    register_kernel(_op, "mask", _kernel)
    register_kernel(_op, "boxes", boxes_kernel)
register_kernel(Transform, "mask", _unmoved)
register_kernel(Transform, "boxes", _unmoved)


def erase_mask(op: RandomErasing, mask, params: dict[str, np.ndarray], value: int) -> np.ndarray:
    """The mask of a ``RandomErasing`` draw when asked: its box (``params`` from
    ``spec.make_batch_params``, in output pixels) set to ``value`` (e.g. an ignore id, 255). Not the
    default: erasing hides pixels, it does not change what the object is, so the registered kernel
    leaves masks (and boxes) unchanged.

    Raises:
        ConfigError: ``op`` is not a RandomErasing, or ``value`` is not a uint8 class id.
    """
    if not isinstance(op, RandomErasing):
        raise ConfigError(f"erase_mask: op={op!r}; give the RandomErasing whose draw this is")
    if not (isinstance(value, (int, np.integer)) and 0 <= value <= 255):
        raise ConfigError(f"erase_mask(value={value!r}); give a class id in [0, 255] (e.g. 255, an ignore id)")
    out = _checked_mask(op, mask).copy()
    top, left, h, w = (int(v) for v in params["box"])
    out[top:top + h, left:left + w] = value
    return out


def move_targets(ops, params: list[dict[str, np.ndarray]], mask=None, boxes: Boxes | None = None,
                 policy: BoxPolicy | None = None, fill: int = MASK_FILL):
    """A draw's targets through a chain: ``ops`` (e.g. ``spec.transforms``) with their ``params``
    (``spec.make_params(seed, epoch, position, image_size)``), each operation's mask and boxes kernel
    in turn; then ``policy`` (default ``BoxPolicy()``) on the boxes.

    Returns:
        ``(mask, boxes, dropped)``: the moved mask (None if none given), the kept boxes (None if none
        given) and the :class:`Dropped` counts.
    """
    if len(ops) != len(params):
        raise ConfigError(f"move_targets: {len(ops)} operations but {len(params)} parameter dicts; give "
                          "spec.transforms and spec.make_params(...) of the same spec")
    for op, p in zip(ops, params):
        if op.is_identity:
            continue
        if mask is not None:
            mask = type(op).kernel_for("mask")(op, mask, p, fill=fill)
        if boxes is not None:
            boxes = type(op).kernel_for("boxes")(op, boxes, p)
    dropped = Dropped()
    if boxes is not None:
        boxes, dropped = (policy or BoxPolicy()).apply(boxes)
    return mask, boxes, dropped
