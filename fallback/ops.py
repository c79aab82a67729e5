"""The fallback's steps around the operations: decoding with OpenCV and running a spec's operations.

* decode: the decoder of the format's registry entry (``cv2.imdecode`` with its flags; JPEG:
  libjpeg-turbo, EXIF orientation applied, as DALI's CPU decoder; TIFF: DALI's gray conversion);
* :func:`apply_spec`: every operation's own CPU implementation (``Transform.apply``), in order, with
  the draw's parameters: the preset too (its list is ``[Clahe, Resize, RandomRotation, ColorJitter]``);
  there is no second implementation of any step here;
* :func:`resize` (re-exported): the Resize operation's kernel, DALI's CPU ``fn.resize`` to the bit
  (:mod:`dali_backend.transforms.resample`); :func:`normalize` (re-exported): the normalisation both
  backends share.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from dali_backend.core.augment import AugmentSpec
from dali_backend.formats.registry import opencv_decode
from dali_backend.core.tensors import normalize  # noqa: F401  (re-exported: one normalisation for both backends)

Image = NDArray[np.uint8]  # HxW (gray) or HxWx3 (RGB)


def decode(data: NDArray[np.uint8] | bytes, color: str) -> Image | None:
    """Decode encoded bytes to gray (HxW) or RGB (HxWx3) uint8 by their format's registry entry
    (:func:`~dali_backend.formats.registry.opencv_decode`); None when the decoder refuses the data."""
    return opencv_decode(data, color)


# ----------------------------------------------------------------------------------------- resize
# The kernel is the Resize operation's, in the contract (dali_backend/transforms/resample.py): re-exported.
from dali_backend.transforms.resample import owned, resize  # noqa: E402,F401


# ----------------------------------------------------------------------------------------- composition
def apply_spec(decoded: Image, spec: AugmentSpec, params: list[dict]) -> NDArray[np.uint8]:
    """Every operation of ``spec.transforms`` with its drawn ``params`` (:meth:`AugmentSpec.make_params`);
    returns channel-first uint8 ``[C, H, W]`` (C = 1 or 3)."""
    img = decoded
    for op, p in zip(spec.transforms, params, strict=True):
        if not op.is_identity:
            img = owned(op.apply(img, p))
    return img[None] if img.ndim == 2 else np.ascontiguousarray(img.transpose(2, 0, 1))
