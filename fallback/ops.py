"""The fallback's steps around the operations: decoding with OpenCV and running a spec's operations.

* decode: the decoder of the format's registry entry (``cv2.imdecode`` with its flags; JPEG:
  libjpeg-turbo, EXIF orientation applied, as DALI's CPU decoder; TIFF: DALI's gray conversion);
* :func:`apply_spec`: every operation's own CPU implementation (``Transform.apply``), in order, with
  the draw's parameters: the preset too (its list is ``[Clahe, Resize, RandomRotation, ColorJitter]``);
  there is no second implementation of any step here;
* :func:`one_intra_op_thread`: the loader's own work in the training process (``num_workers=0``,
  ``dali-backend diagnose``) runs on one torch intra-op thread, as in a DataLoader worker (torch sets 1
  there): on torch's default of one thread per core the exact resize's products fought the rest of the
  machine (200x200 images cost 20-31 ms in-process against 2.3-4.5 ms in a worker, loaded machine);
* :func:`resize` (re-exported): the Resize operation's kernel, DALI's CPU ``fn.resize`` to the bit
  (:mod:`dali_backend.transforms.resample`); :func:`normalize` (re-exported): the normalisation both
  backends share.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from numpy.typing import NDArray

from dali_backend.core.augment import AugmentSpec
from dali_backend.formats.registry import HEAD_BYTES, opencv_decode, opencv_decoding_16, read_header
from dali_backend.core.tensors import normalize  # noqa: F401  (re-exported: one normalisation for both backends)

Image = NDArray[np.uint8]  # HxW (gray) or HxWx3 (RGB)


def decode(data: NDArray[np.uint8] | bytes, color: str, bits: int = 8) -> Image | None:
    """Decode encoded bytes to gray (HxW) or RGB (HxWx3) uint8 by their format's registry entry
    (:func:`~dali_backend.formats.registry.opencv_decode`); None when the decoder refuses the data.
    ``bits=16`` (a spec with a Window): uint16 values, see :func:`decode_16`."""
    if bits == 16:
        return decode_16(np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview))
                         else data, color)
    return opencv_decode(data, color)


def decode_16(buf: NDArray[np.uint8], color: str) -> NDArray[np.uint16] | None:
    """Decode to uint16 gray (HxW) or RGB (HxWx3), as DALI's ``decoders.image(dtype=UINT16)``: a file of
    more than 8 bits keeps its values (``IMREAD_ANYDEPTH``, or its entry's ``Decoding.opencv_16``), an
    8-bit file is decoded as always and promoted ``x * 257``; None when the decoder refuses it."""
    import cv2

    header = read_header(buf[:HEAD_BYTES])
    if header is None or header.bit_depth <= 8:
        img = opencv_decode(buf, color)
    elif (own := opencv_decoding_16(buf[:16])) is not None:  # TIFF's colour -> gray: DALI's formula
        img = own(buf, color)
    else:
        img = cv2.imdecode(buf, (cv2.IMREAD_GRAYSCALE if color == "gray" else cv2.IMREAD_COLOR) | cv2.IMREAD_ANYDEPTH)
        if img is not None and color != "gray":
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)  # OpenCV's colour order is BGR
    if img is None:
        return None
    return img.astype(np.uint16) * np.uint16(257) if img.dtype == np.uint8 else img.astype(np.uint16, copy=False)


@contextmanager
def one_intra_op_thread() -> Iterator[None]:
    """Run the block on one torch intra-op thread, the setting torch gives DataLoader workers, and restore
    the caller's setting after (also when the block raises). For the loader's own work in the training
    process: the operations then cost what they cost in a worker."""
    import torch

    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------------------- resize
# The kernel is the Resize operation's, in the contract (dali_backend/transforms/resample.py): re-exported.
from dali_backend.transforms.resample import owned, resize  # noqa: E402,F401


# ----------------------------------------------------------------------------------------- composition
def apply_spec(decoded: Image, spec: AugmentSpec, params: list[dict]) -> NDArray[np.uint8]:
    """Every operation of ``spec.transforms`` with its drawn ``params`` (:meth:`AugmentSpec.make_params`);
    returns channel-first uint8 ``[C, H, W]`` (C = 1 or 3; uint16 where ``spec.batch_bits`` is 16)."""
    img = decoded
    for op, p in zip(spec.transforms, params, strict=True):
        if not op.is_identity:
            img = owned(op.apply(img, p))
    return img[None] if img.ndim == 2 else np.ascontiguousarray(img.transpose(2, 0, 1))
