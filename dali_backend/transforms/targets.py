"""Masks and boxes moved by a draw's parameters: one ``"mask"`` and one ``"boxes"`` kernel per geometric
operation, registered beside its image kernel (:func:`~dali_backend.transforms.base.register_kernel`).

The rules, and the trade-offs they make:

* **One geometry per operation.** Every kernel reads the draw's own parameters (``make_params``) and
  the output size the operation declares (:meth:`Transform.output_size`): the crops' ``start``, the
  letterbox's ``ceil(pad / 2)``, the rotation's centre and sign are never re-derived here.
* **Boxes** (:class:`Boxes`: XYXY float32 in absolute pixels of the canvas, torchvision v2's
  convention, ``[0, 0]`` the corner of the first pixel) follow ONE rule for every operation, in
  :mod:`dali_backend.transforms.boxmove`: the operation's forward map moves the four corners, the box
  is their enclosing box, clipped to the output; :class:`BoxPolicy` drops the too small or too hidden
  ones and counts them. A chain moves them as plain rows between its operations (0.08-0.09 ms per
  sample for three boxes through crop, flip, rotation and affine: 1.2-1.9 % of a fallback sample).
* **Masks** (``H x W`` integer class ids) move by nearest neighbour, never antialiased: crops and
  flips cut and mirror exactly; resizes and warps sample each output pixel's centre in the source
  (``src = floor((x + 0.5) * s)``, with the scale or matrix rounded onto a grid on which every float32
  sum is exact, :func:`nearest_scale` and :func:`grid_matrix`, so that DALI's CPU and GPU ``INTERP_NN``
  operators and these kernels agree; where the grid is out of reach, large outputs, in DALI CPU's float32
  arithmetic: tests/transforms/test_target_kernels_dali.py), and the mask's own fill
  (``fill``, the dataset's ``fill_mask``: 0, background, or an ignore id) goes where the image is padded.
  What a mask costs, per operation (:func:`move_mask`; scripts/mask_kernels_cost.py):

  - consecutive crops, flips and resizes (``RandomResizedCrop`` + flip, ``Resize`` + ``CenterCrop``,
    letterbox) compose as 1-D integer source maps, one per axis, and cost ONE gather together
    (``np.take`` of rows, then of columns): about one plain nearest pass;
  - each rotation or affine is a pass of its own: the integer source map, then ``cv2.remap``. Its matrix
    is put on an exact grid first (:func:`warp_matrix`, :func:`grid_matrix`: rounded by at most
    :data:`WARP_TOLERANCE` of a pixel, 0.014 at 224 x 224), where every float32 sum the warp forms is
    exact: DALI's CPU warp (running sums along each row), its GPU warp (a product per pixel, FMA or
    not) and the kernel's direct sums (two vector additions) give the same source pixels, so the class
    ids are equal on every backend, GPU included (by the arithmetic; its tests need a CUDA machine).
    Draws too far from the grid (none at 224 x 224 or 256 x 256; most from about 400 x 400, by their
    matrices) keep the plain matrix and DALI CPU's running sums (:func:`warp_sources`: a Python loop over the
    columns, shared by the warps of up to :data:`WARP_JOBS` consecutive samples, :func:`move_masks`);
    DALI's GPU then differs from them on rare ties.
    The warps are not composed with each other nor with what precedes them: DALI's graph applies them
    one by one, so the class ids are equal on both backends only step by step, and a warp composed
    analytically would sample source labels where an earlier step put fill.

  So a mask costs its decode, one pass for the separable steps, and one pass per warp (a mask all
  background, a sample without a mask file, none: it stays all background); docs/guides/targets.md
  ("What carrying them costs") has the figures.
* **Operations that are not geometric** (``KIND`` photometric, output or batch: colour, CLAHE,
  blur, ``Normalize``, ``RandomErasing``) leave both unchanged: one identity kernel registered on
  :class:`Transform` reads the declared ``KIND``, so a new photometric operation needs nothing here,
  and a new geometric operation without its own kernels is refused, never passed through.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from .affine import RandomAffine
from .base import Size, Transform, register_kernel
from .boxmove import (CROPS, FEW_BOXES, FLIPS, BoxPolicy, Boxes, Dropped, boxes_kernel, forward_affine, forward_matrix,
                      move_boxes, move_chain, rotation_matrix)
from .crop import CenterCrop, RandomCrop, RandomResizedCrop
from .erasing import RandomErasing
from .flip import RandomHorizontalFlip, RandomRot90, RandomVerticalFlip
from .resize import Resize
from .rotation import RandomRotation
from .window import crop

__all__ = ["CROPS", "FEW_BOXES", "FLIPS", "MASK_FILL", "BoxPolicy", "Boxes", "Dropped", "boxes_kernel", "erase_mask",
           "forward_affine", "forward_matrix", "grid_matrix", "move_boxes", "move_masks", "move_targets", "nearest_resize",
           "nearest_scale", "nearest_warp", "on_grid", "resize_extent", "rotation_matrix", "warp_matrix"]
MASK_FILL = 0  # the mask's value where the image is padded or warped in from outside: background
SHRT_MAX = 32767  # cv2.remap's integer maps (CV_16SC2) and its output sides stay below this


# ---------------------------------------------------------------------------------------- masks
def _checked_mask(op: Transform | str, mask) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.ndim != 2 or mask.dtype.kind not in "iub":
        where = op if isinstance(op, str) else f"{type(op).__name__} mask kernel"
        raise ConfigError(f"{where}: got an array of shape {mask.shape} and dtype {mask.dtype}; give one H x W "
                          "integer array of class ids (uint8)")
    return mask


WARP_TOLERANCE = 1 / 32
"""How far the exact grids may move a mask's sampling points (OpenCV's warps resolve 1/32 of a pixel too):
:func:`warp_matrix` a warp's, in source pixels at the farthest output pixel (:func:`grid_matrix`);
:func:`nearest_scale` a resize's, in output pixels at the last one."""


def nearest_scale(n_in: int, n_out: int, tolerance: float | None = None) -> float | None:
    """The scale, source pixels per output pixel, a mask's nearest resize of ``n_in`` to ``n_out`` pixels
    samples by: ``n_in / n_out`` rounded down onto the grid of ``2**-k`` (``k = 23 - e``, ``n_in < 2**e``) on
    which every source position ``s (j + 0.5)`` (all below ``n_in``) and every running sum of ``s`` is
    exact in float32, so that DALI's CPU resize (a running sum down the rows, a product across the
    columns), its GPU resize (``floor(j s + 0.5 s)``, FMA or not) and the fallback give the same source
    pixels. None where that moves the last output pixel's sampling point by more than ``tolerance``
    (default :data:`WARP_TOLERANCE`) of an output pixel (``(n_in - s n_out) n_out / n_in``: 0.0068 at
    320 -> 224 and at 2048 -> 224); then the plain scale ``float32(n_in) / float32(n_out)`` is used. No
    output side up to 362 misses the grid; larger ones more and more often (with ``n_in`` up to 4096:
    11 % of sides of 400-512, 50 % of 512-768, 90 % of 1024-2048). Rounded down, the source stays inside (no clamping),
    and an exact tie (an output centre on the boundary of two source pixels) takes the lower one.

    Raises:
        ConfigError: ``n_in`` or ``n_out`` not a whole number (an ``int`` or numpy integer).
    """
    try:
        n_in, n_out = operator.index(n_in), operator.index(n_out)  # numpy ints as Python ints: no overflow
    except TypeError:
        raise ConfigError(f"nearest_scale(n_in={n_in!r}, n_out={n_out!r}): give whole numbers of pixels") from None
    tolerance = WARP_TOLERANCE if tolerance is None else tolerance
    if n_in < 1 or n_out < 1:
        return None
    k = 23 - math.frexp(n_in)[1]
    if k < 0:
        return None
    s = ((n_in << k) // n_out) / 2 ** k  # floor(n_in / n_out * 2**k) / 2**k, in integers: exact
    return s if s > 0 and (n_in - s * n_out) * n_out / n_in <= tolerance else None


def resize_extent(n_in: int, n_out: int) -> float:
    """The source extent a DALI graph gives ``fn.resize(roi_start=0, roi_end=extent, roi_relative=False,
    INTERP_NN)`` so that its scale is :func:`nearest_scale`'s (``s n_out``, exact in float32: DALI divides
    it by ``n_out`` back to ``s``), or ``n_in`` (the whole image: DALI's own scale) off the grid."""
    s = nearest_scale(n_in, n_out)
    return float(n_in) if s is None else s * n_out


@functools.lru_cache(maxsize=1024)
def _nearest_sources(n_out: int, n_in: int, axis: str) -> np.ndarray:
    """The source row (``axis="rows"``) or column of each output one of a nearest resize (read-only, cached
    per size pair): ``floor(s (j + 0.5))`` on :func:`nearest_scale`'s grid (exact, the same for both axes),
    else DALI CPU's float32 arithmetic: columns ``floor((j + 0.5f) * s)``, rows by the running sum
    ``0.5f * s + s + ...``."""
    grid = nearest_scale(n_in, n_out)
    if grid is not None:
        out = np.floor(grid * (np.arange(n_out) + 0.5)).astype(np.intp)
    else:
        s = np.float32(n_in) / np.float32(n_out)
        if axis == "rows":
            steps = np.full(n_out, s, np.float32)
            steps[0] = np.float32(0.5) * s
            exact = np.cumsum(steps, dtype=np.float32)  # sequential, in float32
        else:
            exact = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * s
        out = np.minimum(np.floor(exact).astype(np.intp), n_in - 1)
    out.flags.writeable = False
    return out


def _nearest_columns(n_out: int, n_in: int) -> np.ndarray:
    return _nearest_sources(n_out, n_in, "columns")


def _nearest_rows(n_out: int, n_in: int) -> np.ndarray:
    return _nearest_sources(n_out, n_in, "rows")


def nearest_resize(mask: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """``mask`` resized to ``out_h`` x ``out_w`` by nearest neighbour, no antialiasing, labels never mixed:
    output pixel ``j`` takes the source pixel containing its centre, ``(j + 0.5) * s``, per axis with the
    scale ``s`` of :func:`nearest_scale` (``in / out`` on an exact grid, within 1/32 of a pixel: what DALI's
    ``fn.resize(INTERP_NN)`` gives with :func:`resize_extent`'s ROI, on its CPU and GPU alike), else in
    DALI CPU's float32 arithmetic without a ROI, bit for bit (measured on 400 random sizes up to 1500):
    columns ``floor((j + 0.5f) * s)``, rows by the running sum ``0.5f * s + s + ...`` (``s = float32(in) /
    float32(out)``; the two differ on exact ties, 40 -> 100 rows: 14 of 100, as DALI's GPU may).
    Two 1-D gathers (rows, then columns: ``np.take``) of indices cached per size pair: 0.04 ms at
    200 x 250 -> 224 x 224, against 0.23 ms for one 2-D fancy index and 0.13 ms for ``cv2.resize``
    of the 3-channel image (scripts/mask_kernels_cost.py)."""
    h, w = mask.shape
    return mask.take(_nearest_rows(int(out_h), h), axis=0).take(_nearest_columns(int(out_w), w), axis=1)


def _fraction_bits(v: float) -> int:
    """The binary places ``v`` needs after the point: ``v`` is a multiple of ``2**-bits`` (0 for integers)."""
    if v == 0 or v.is_integer():
        return 0
    mantissa, exponent = math.frexp(v)
    m = int(mantissa * 2 ** 53)
    return 53 - exponent - ((m & -m).bit_length() - 1)


def on_grid(inverse: np.ndarray, out_size: Size) -> bool:
    """Whether every value a warp by the 2x3 ``inverse`` (float32) to ``out_size`` forms is exact in float32:
    ``m0 (x + 0.5) + m1 (y + 0.5) + m2`` per row, its partial sums in any order, and DALI CPU's running
    sums along each row. True when ``m0`` and ``m1`` are multiples of ``2**-k`` and ``m2`` of
    ``2**-(k + 1)`` for a ``k`` at which every such value, a multiple of ``2**-(k + 1)``, stays below
    ``2**(23 - k)``. Then the source pixel of each output pixel is the real arithmetic's, whatever the
    order of operations or the FMA: DALI's CPU warp (a float32 addition per pixel along each row),
    its GPU warp (a product per pixel) and the direct sums here agree bit for bit."""
    out_h, out_w = (int(v) for v in out_size)
    rows = np.asarray(inverse, np.float32)[:2]
    if not np.isfinite(rows).all():
        return False
    for a, b, c in rows.tolist():
        k = max(_fraction_bits(a), _fraction_bits(b), _fraction_bits(c) - 1)
        if (abs(a) * out_w + abs(b) * out_h + abs(c)) * 2.0 ** (k + 1) >= 2 ** 24:
            return False
    return True


def grid_matrix(inverse: np.ndarray, out_size: Size, tolerance: float = WARP_TOLERANCE) -> NDArray[np.float32]:
    """``inverse`` (2x3) as float32, rounded onto the finest grid on which a warp to ``out_size`` is exact
    (:func:`on_grid`) where that moves no output pixel's source by more than ``tolerance`` pixels: ``m0``
    and ``m1`` to multiples of ``2**-k``, ``m2`` of ``2**-(k + 1)``, ``k = 23 - e`` for the smallest ``e``
    with ``|m0| out_w + |m1| out_h + |m2| + 1 < 2**e``, which moves a source by at most ``(out_w + out_h)
    2**-(k + 1) + 2**-(k + 2)``: 0.014 pixels at 224 x 224, 1/32 at about 400 x 400. Draws beyond it keep
    the plain float32 matrix (DALI's CPU and GPU warps then differ on rare ties, the fallback
    following the CPU's)."""
    out_h, out_w = (int(v) for v in out_size)
    m = np.asarray(inverse, np.float64)[:2]
    if not np.isfinite(m).all():
        return m.astype(np.float32)
    q = np.empty((2, 3))
    for r, (a, b, c) in enumerate(m.tolist()):
        k = 23 - math.frexp(abs(a) * out_w + abs(b) * out_h + abs(c) + 1)[1]
        if (out_w + out_h) * 2.0 ** -(k + 1) + 2.0 ** -(k + 2) > tolerance:
            return m.astype(np.float32)
        q[r] = round(a * 2 ** k) / 2 ** k, round(b * 2 ** k) / 2 ** k, round(c * 2 ** (k + 1)) / 2 ** (k + 1)
    q = q.astype(np.float32)
    return q if on_grid(q, out_size) else m.astype(np.float32)


WARP_SPAN = 256
"""Output columns per run of DALI 2.4's CPU warp (``WarpCPU`` for an affine map, dali/kernels/imgproc/
warp_cpu.h): each row is cut into runs of 256 columns; a run's start is the previous run's plus
``float32(256 m0)``, and within a run each pixel's source is the previous one's plus ``m0`` (one run per
row differed from DALI's operator on columns from 256 on: tests/transforms/test_target_kernels_dali.py)."""


def warp_sources(jobs: list[tuple[np.ndarray, int, int]]) -> list[np.ndarray]:
    """Per job ``(inverse, out_h, out_w)`` (every job of one output size) a ``[out_w, out_h, 2]`` float32 array:
    for output pixel ``(y, x)`` at ``[x, y]`` the floored ``(x, y)`` of its source, in DALI CPU's float32
    arithmetic: a row starts at ``(m2 + m0 0.5) + m1 (y + 0.5)`` (DALI's order: the translation first) and
    steps by the matrix's first column ``m0``, one float32 addition per pixel in order, in runs of
    :data:`WARP_SPAN` columns, each run starting from the previous run's start plus ``256 m0``. Stored column by column so that each step is one vector addition over all rows of
    all jobs: the loop's cost is its Python steps, one per column (0.15-0.27 ms at 224 x 224, against
    0.45 ms for ``np.cumsum`` along the rows), so the warps of a chain share one loop.
    Needed only for a matrix off the grid (:func:`on_grid`): on it the sums are exact in any order.

    Raises:
        ConfigError: jobs of different output sizes.
    """
    f = np.float32
    sizes = {(int(h), int(w)) for _, h, w in jobs}
    if len(sizes) != 1:
        raise ConfigError(f"warp_sources: output sizes {sorted(sizes)}; give jobs of one (out_h, out_w)")
    ((out_h, out_w),) = sizes
    n = 2 * out_h  # one job's values in a column: (source x, source y) of every row
    src = np.empty((out_w, len(jobs) * n), f)  # column x of every job, side by side: one vector per step
    step = np.empty(len(jobs) * n, f)
    span = np.empty(len(jobs) * n, f)
    y = np.arange(out_h, dtype=f) + f(0.5)
    for k, (inverse, _, _) in enumerate(jobs):
        m = np.asarray(inverse)[:2].astype(f)
        src[0, k * n:(k + 1) * n] = ((m[:, 2] + m[:, 0] * f(0.5)) + m[:, 1] * y[:, None]).reshape(-1)  # DALI's order
        step[k * n:(k + 1) * n] = np.tile(m[:, 0], out_h)
        span[k * n:(k + 1) * n] = np.tile(f(WARP_SPAN) * m[:, 0], out_h)
    for x in range(1, out_w):  # along each run one step per column; a run starts from the last one's start
        np.add(src[x - 1] if x % WARP_SPAN else src[x - WARP_SPAN], step if x % WARP_SPAN else span, out=src[x])
    np.floor(src, out=src)
    return [src[:, k * n:(k + 1) * n].reshape(out_w, out_h, 2) for k in range(len(jobs))]  # views, no copy


_SCRATCH = threading.local()


def _scratch(n: int) -> NDArray[np.float32]:
    """``n`` float32 values of this thread's scratch space, kept between calls: a fresh 400 KB array per
    warp paid its page faults (0.08 ms at 224 x 224, most of the warp), one kept pays them once."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < n:
        buf = _SCRATCH.buf = np.empty(n, np.float32)
    return buf[:n]


def _grid_sources(inverse: np.ndarray, out_h: int, out_w: int) -> tuple[np.ndarray, np.ndarray]:
    """The floored source ``(x, y)`` of every output pixel, ``[out_h, out_w]`` float32 each, for a matrix on
    the grid (:func:`on_grid`): ``m1 (y + 0.5) + m2`` per row plus ``m0 (x + 0.5)`` per column, exact. Views
    of this thread's scratch space (:func:`_scratch`): valid until its next call."""
    f = np.float32
    m = np.asarray(inverse, f)[:2]
    x, y = np.arange(out_w, dtype=f) + f(0.5), np.arange(out_h, dtype=f) + f(0.5)
    maps = _scratch(2 * out_h * out_w).reshape(2, out_h, out_w)
    for r in (0, 1):  # the columns' terms copied down, the rows' added: 0.013 ms against 0.021 for np.add.outer
        np.copyto(maps[r], m[r, 0] * x)
        np.add(maps[r], (m[r, 1] * y + m[r, 2])[:, None], out=maps[r])
    np.floor(maps, out=maps)
    return maps[0], maps[1]


def nearest_warp(mask: np.ndarray, inverse: np.ndarray, out_size: Size, fill: int,
                 sources: np.ndarray | None = None) -> np.ndarray:
    """``mask`` warped by nearest neighbour: output pixel ``(y, x)`` takes the source pixel containing
    ``inverse @ (x + 0.5, y + 0.5, 1)`` (corner coordinates), ``fill`` where that falls outside. In the
    float32 arithmetic of DALI's CPU ``fn.warp_affine(interp_type=INTERP_NN)``, bit for bit: running sums
    along each row, in runs of :data:`WARP_SPAN` columns (:func:`warp_sources`; a direct product differs
    on ties: 2 of 153,600 pixels over 64 draws of 40 x 60), unless the matrix is on the grid
    (:func:`on_grid`, as :func:`warp_matrix` puts the kernels' own): then every sum is exact, the direct
    sums here are that, and DALI's GPU warp (a product per pixel) gives the same too.

    The gather is ``cv2.remap`` (``INTER_NEAREST``: a copy per pixel, ``fill`` outside), for uint8 masks
    and sides below 32767; other masks take the numpy gather of the same indices. ``sources``: the
    indices off the grid, where :func:`warp_sources` computed them already (with other warps of a chain)."""
    out_h, out_w = (int(v) for v in out_size)
    h, w = mask.shape
    direct = sources is None and on_grid(inverse, (out_h, out_w))
    if direct:  # upright maps: [out_h, out_w]
        sx, sy = _grid_sources(inverse, out_h, out_w)
    else:       # DALI CPU's running sums: [out_w, out_h], transposed
        src = warp_sources([(inverse, out_h, out_w)])[0] if sources is None else sources
    if mask.dtype == np.uint8 and max(h, w, out_h, out_w) < SHRT_MAX:
        import cv2  # here, not at the top: importing the package loads no OpenCV (tests/test_imports.py)

        if direct:  # integral float maps: cv2 rounds them to themselves, saturated (outside stays outside)
            return cv2.remap(mask, sx, sy, cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT, borderValue=int(fill))
        # integral floats to int16, saturated (outside stays outside): 0.013 ms at 224 x 224, clip + astype 0.034
        ints, _ = cv2.convertMaps(src, None, cv2.CV_16SC2, nninterpolation=True)
        out = cv2.remap(mask, ints, None, cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT, borderValue=int(fill))
        return np.ascontiguousarray(out.T)
    if not direct:
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
    equal it bit for bit. The inverse of the image's map put on the exact grid of its output size
    (:func:`grid_matrix`: within :data:`WARP_TOLERANCE` of a pixel), so that DALI's CPU and GPU warps and
    the fallback's direct sums give the same class ids. Against the unrounded matrix, at 224 x 224:
    0.0054 % of the pixels of drawn defect masks take a neighbour's id (0.15 % of a noise mask, every
    pixel an edge)."""
    return grid_matrix(np.linalg.inv(forward_matrix(op, params, size)), op.output_size(size, params))


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


def _window(index: np.ndarray, start: int, n: int) -> np.ndarray:
    """Entries ``start .. start + n`` of a 1-D source map, -1 (the fill) where that runs outside it."""
    if 0 <= start and start + n <= len(index):
        return index[start:start + n]
    pos = np.arange(start, start + n)
    return np.where((pos >= 0) & (pos < len(index)), index[np.clip(pos, 0, len(index) - 1)], -1)


def _separable(op: Transform, params: dict, rows: np.ndarray, cols: np.ndarray):
    """``op``'s mask kernel as 1-D source maps: ``(rows, cols)`` composed with ``op`` (row ``i`` of the
    result is source row ``rows[i]``, -1 the fill), or None where ``op`` is not a crop, flip or resize
    with this module's own kernel. Composing integer maps is exact: the one gather they give equals the
    kernels applied one by one (tests/transforms/test_target_kernels.py)."""
    kernel = type(op).kernel_for("mask")
    if kernel is _exact_mask and isinstance(op, FLIPS):
        if int(params["flip"]):
            return (rows, cols[::-1]) if op.AXIS == 1 else (rows[::-1], cols)
        return rows, cols
    if kernel is _crop_mask or kernel is _resized_crop_mask:
        top, left, h, w = (int(v) for v in op.window(params))
        rows, cols = _window(rows, top, h), _window(cols, left, w)
        if kernel is _crop_mask:
            return rows, cols
        size = op.size
    elif kernel is _resize_mask:
        size = op.size if op.exact else (int(params["height"]), int(params["width"]))
    else:
        return None
    rows, cols = rows[_nearest_rows(int(size[0]), len(rows))], cols[_nearest_columns(int(size[1]), len(cols))]
    if kernel is _resize_mask and op.letterbox:
        (H, W), (nh, nw) = op.size, size
        rows, cols = _window(rows, -((H - nh + 1) // 2), H), _window(cols, -((W - nw + 1) // 2), W)
    return rows, cols


def gathered(mask: np.ndarray, rows: np.ndarray, cols: np.ndarray, fill: int) -> np.ndarray:
    """``mask[rows][:, cols]`` by two 1-D gathers, ``fill`` on the rows and columns mapped to -1."""
    out = mask.take(np.maximum(rows, 0), axis=0).take(np.maximum(cols, 0), axis=1)
    if len(rows) and rows.min() < 0:
        out[rows < 0] = fill
    if len(cols) and cols.min() < 0:
        out[:, cols < 0] = fill
    return out


def move_mask(ops, params: list[dict[str, np.ndarray]], mask, fill: int = MASK_FILL) -> np.ndarray:
    """``mask`` through a chain, each operation's ``"mask"`` kernel in turn, except that consecutive
    crops, flips and resizes (``RandomResizedCrop`` then a flip, ``Resize`` then ``CenterCrop``) are
    composed as 1-D source maps per axis and gathered once: the same class ids as one by one (integer
    maps compose exactly), one pass instead of one per operation. Warps (rotation, affine) stay their
    own pass each: DALI's graph applies them one by one, and a warp composed analytically with what
    precedes it would sample labels where the earlier step put fill. :func:`move_masks` moves many."""
    return move_masks([(ops, params, mask)], fill)[0]


def move_masks(chains, fill: int = MASK_FILL) -> list[np.ndarray]:
    """:func:`move_mask` of each ``(ops, params, mask)`` of ``chains`` (a batch's samples), the same class
    ids as one by one; the source indices of the warps of consecutive samples, up to :data:`WARP_JOBS`
    warps and :data:`WARP_PIXELS` output pixels, are computed in shared :func:`warp_sources` loops (one per
    output size) and used at once, where one sample's warps paid the loop's Python steps alone
    (scripts/mask_kernels_cost.py). A mask all ``fill`` (a sample without a mask file, e.g. MVTec's
    ``good``: all background) costs no pass: through this module's kernels each output pixel is a source
    pixel or fill, so it comes out all ``fill`` at the chain's output size (a chain with a kernel
    registered elsewhere runs as usual)."""
    chains = list(chains)
    masks = [_checked_mask("move_targets", mask) for _, _, mask in chains]
    # a mask all ``fill`` (a sample without a mask file: all background) stays all ``fill`` through this
    # module's kernels (each output pixel is a source pixel or fill): no pass at all, nor warp matrices
    blank = [not (mask.any() if fill == 0 else (mask != fill).any()) for mask in masks]
    plans = [_plan(_mask_steps(ops, params), 0, mask.shape, matrices=not b)
             for (ops, params, _), mask, b in zip(chains, masks, blank)]
    uniform = {c: np.full(plan.shape, fill, mask.dtype) for c, (plan, mask, b) in enumerate(zip(plans, masks, blank))
               if b and plan.shape is not None}
    plans = [_plan(plan.steps, 0, mask.shape) if b and c not in uniform else plan  # a kernel of its own: run it
             for c, (plan, mask, b) in enumerate(zip(plans, masks, blank))]
    warps = [[] if c in uniform else [(j, e) for j, e in enumerate(plan.entries)  # off the grid: a shared loop
                                      if e[0] == "warp" and not on_grid(e[3], e[4])] for c, plan in enumerate(plans)]
    out: list[np.ndarray] = []

    def run(group: list[int]) -> None:  # consecutive samples whose warps fit one loop (per output size)
        jobs: dict[tuple, list] = {}  # output size -> [((chain, entry), (inverse, out_h, out_w))]
        for c in group:
            for j, e in warps[c]:
                jobs.setdefault(e[4], []).append(((c, j), (e[3], *e[4])))
        sources: dict[tuple, np.ndarray] = {}
        for same in jobs.values():
            sources.update(zip([key for key, _ in same], warp_sources([job for _, job in same])))
        out.extend(uniform[c] if c in uniform else _run_plan(plans[c], masks[c], sources, c, fill) for c in group)

    group, n, pixels = [], 0, 0
    for c, more in enumerate(warps):
        area = sum(e[4][0] * e[4][1] for _, e in more)
        if group and (n + len(more) > WARP_JOBS or pixels + area > WARP_PIXELS):
            run(group)
            group, n, pixels = [], 0, 0
        group.append(c)
        n, pixels = n + len(more), pixels + area
    if group:
        run(group)
    return out


WARP_JOBS = 8  # warps per warp_sources loop: fewer pay more Python steps each, more outgrow the caches
WARP_PIXELS = 8 * 224 * 224  # and their output pixels (8 bytes each while the group runs): large warps alone


class _MaskPlan(NamedTuple):
    """A chain's mask steps (``_mask_steps``) planned for an input size: ``entries`` are ``("gather", rows,
    cols, in_shape, k)`` (consecutive crops, flips and resizes composed), ``("kernel", op, p, kernel, k)``,
    ``("warp", op, p, inverse, out, in_shape, k)`` and ``("later", k)`` (the steps from ``k`` on, planned when
    the mask reaches them: after a kernel registered elsewhere, whose output size is known once it ran);
    ``k`` the entry's first step. ``shape``: the output size where every step is this module's own kernel
    (else None)."""

    steps: list
    entries: list[tuple]
    shape: Size | None


def _mask_steps(ops, params: list[dict[str, np.ndarray]]) -> list[tuple]:
    """``(op, params, mask kernel)`` of each operation of a chain that can move a mask."""
    steps = [(op, p, type(op).kernel_for("mask")) for op, p in zip(ops, params)]
    return [(op, p, k) for op, p, k in steps if not (op.is_identity or (k is _unmoved and op.KIND != "geometric"))]


def _plan(steps: list[tuple], first: int, shape: Size, matrices: bool = True) -> _MaskPlan:
    """:class:`_MaskPlan` of ``steps[first:]`` for an input of ``shape`` (``matrices=False``: the warps'
    matrices left None, for a plan whose output size is all that is needed)."""
    entries: list[tuple] = []
    rows = cols = None  # pending 1-D maps over the rows and columns of the input of step ``start``
    start = first
    for k in range(first, len(steps)):
        op, p, kernel = steps[k]
        if op.KIND == "geometric":
            maps = _separable(op, p, *((rows, cols) if rows is not None else (np.arange(shape[0]), np.arange(shape[1]))))
            if maps is not None:
                start = start if rows is not None else k
                rows, cols = maps
                continue
        if rows is not None:
            entries.append(("gather", rows, cols, shape, start))
            shape, rows, cols = (len(rows), len(cols)), None, None
        own = kernel in MASK_KERNELS.values()
        out = op.output_size(shape, p) if own else None
        if out is None:  # a kernel registered elsewhere: the rest is planned on what it gives
            entries.append(("kernel", op, p, kernel, k))
            if k + 1 < len(steps):
                entries.append(("later", k + 1))
            return _MaskPlan(steps, entries, None)
        out = tuple(int(v) for v in out)
        entries.append(("warp", op, p, warp_matrix(op, p, shape) if matrices else None, out, shape, k)
                       if kernel is _warped_mask
                       else ("kernel", op, p, kernel, k))
        shape = out
    if rows is not None:
        entries.append(("gather", rows, cols, shape, start))
        shape = (len(rows), len(cols))
    return _MaskPlan(steps, entries, shape)


def _run_plan(plan: _MaskPlan, mask: np.ndarray, sources: dict[tuple, np.ndarray], chain: int,
              fill: int) -> np.ndarray:
    """A mask through its :class:`_MaskPlan`, the warps' ``sources`` computed beside other chains' (keyed
    ``(chain, entry)``); from an entry whose input is not the size planned (an operation's ``output_size``
    not what its kernel gave) the rest is planned again on the mask itself."""
    for j, e in enumerate(plan.entries):
        if e[0] == "kernel":
            mask = e[3](e[1], mask, e[2], fill=fill)
            continue
        if e[0] == "later" or mask.shape != e[-2]:
            again = _plan(plan.steps, e[-1], _checked_mask(plan.steps[e[-1]][0], mask).shape)
            return _run_plan(again, mask, {}, chain, fill)
        if e[0] == "gather":
            mask = gathered(mask, e[1], e[2], fill)
        else:
            mask = nearest_warp(_checked_mask(e[1], mask), e[3], e[4], fill, sources.get((chain, j)))
    return mask


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
    if mask is not None:
        mask = move_mask(ops, params, mask, fill)
    dropped = Dropped()
    if boxes is not None:
        boxes, dropped = (policy or BoxPolicy()).apply(move_chain(ops, params, boxes))
    return mask, boxes, dropped
