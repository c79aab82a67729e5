"""``verify="decode"``: decoding every file in each colour mode a loader may use (JPEG with libjpeg-turbo
in strict mode, every other format with OpenCV, the fallback's decoder; the format is the bytes')."""

from __future__ import annotations

import numpy as np

from ..errors import MissingDependencyError
from ..formats import registry
from ..formats.jpeg import open_regular






# The colour modes verify="decode" decodes every file in: (simplejpeg colorspace, OpenCV imread flag name).
# Both, because the index does not know which mode its loaders will decode in, and a file can decode in
# one mode only: lossless JPEG (1 component: gray only, 3: RGB only). The header check refuses those,
# the one such layout the experiments of issue 18 found, but the check is meant to run every decode a
# loader will. The cost, one worker, 50 colour files: 160x120 takes 6.0 ms gray only (before issue 18),
# 7.0 ms RGB only, 10.4 ms both (header check alone 2.4 ms); 640x480 takes 50.7 / 63.7 / 110.6 ms
# (header 4.9 ms). RGB first: it reconstructs every component, so it reports corrupt scan data first.
_DECODE_CHECK_MODES = (("RGB", "IMREAD_COLOR"), ("GRAY", "IMREAD_GRAYSCALE"))


def decode_check(path: str) -> str | None:
    """Decode ``path`` fully, in colour and in gray (:data:`_DECODE_CHECK_MODES`); ``None`` if it decodes
    cleanly in both, else the reason.
    """
    try:
        with open_regular(path) as f:
            data = f.read()
    except OSError as e:  # not a regular file any more, vanished, unreadable
        return str(e) if e.strerror is None else f"unreadable ({type(e).__name__}: {e.strerror})"
    return decode_check_bytes(data)


def decode_check_bytes(data: bytes) -> str | None:
    """:func:`decode_check` of a file's bytes held in memory (an object downloaded from a bucket)."""
    try:
        import simplejpeg
    except ImportError as e:  # a declared dependency; only verify="decode" needs it
        raise MissingDependencyError("verify='decode' needs the simplejpeg package: pip install 'simplejpeg>=1.7'") from e
    if not data:
        return "empty file (0 bytes)"
    fmt = registry.sniff(data[:16])
    if fmt is not None and fmt.name != "jpeg":
        return _opencv_reason(fmt.name, data)
    for colorspace, flag in _DECODE_CHECK_MODES:
        reason = _decode_reason(simplejpeg, data, colorspace, flag)
        if reason:
            return reason
    return None


def _decode_reason(simplejpeg, data: bytes, colorspace: str, flag: str) -> str | None:
    """Why ``data`` does not decode cleanly in ``colorspace`` (``"RGB"`` or ``"GRAY"``), or None.

    libjpeg-turbo (through ``simplejpeg``, strict mode) turns its recoverable-error warnings into
    errors: a scan cut short and re-terminated with an end-of-image marker decodes in OpenCV with
    only a warning on stderr (the missing rows come out flat grey), so OpenCV alone cannot see it.
    Files that TurboJPEG's API refuses outright (exotic sampling layouts) get a second opinion from
    OpenCV's libjpeg, with imread flag ``flag``: accepted if it decodes them.
    """
    try:
        simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=True)
        return None
    except ValueError as strict_error:
        message = str(strict_error).strip()
    try:
        simplejpeg.decode_jpeg(data, colorspace=colorspace, strict=False)
    except ValueError:
        pass  # a hard error, not a warning: let OpenCV decide below
    else:
        return f"corrupt or truncated scan data: {message}"
    import cv2  # only for verify="decode"

    if cv2.imdecode(np.frombuffer(data, dtype=np.uint8), getattr(cv2, flag)) is None:
        mode = "colour" if colorspace == "RGB" else "gray"
        return (f"decoder refused the file in {mode} (corrupt entropy data or unsupported JPEG; "
                f"libjpeg-turbo: {message})")
    return None




def _opencv_reason(name: str, data: bytes) -> str | None:
    """Why OpenCV does not decode ``data`` (a ``name`` file, not JPEG) in colour and in gray, or None."""
    import cv2  # only for verify="decode"

    buf = np.frombuffer(data, dtype=np.uint8)
    for mode, flag in (("colour", cv2.IMREAD_COLOR), ("gray", cv2.IMREAD_GRAYSCALE)):
        if cv2.imdecode(buf, flag) is None:
            return f"decoder refused the file in {mode} (corrupt or unsupported {name.upper()} data; OpenCV)"
    return None
