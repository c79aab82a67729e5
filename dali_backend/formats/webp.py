"""WebP: the RIFF container and the bitstream header checked without decoding.

The index-time check reads the RIFF header (its size against the file's: a shorter file is
truncated), walks the chunks inside it (each one's length inside the RIFF), and reads the size from
the ``VP8 `` (lossy), ``VP8L`` (lossless) or ``VP8X`` (extended) header and the orientation from an
``EXIF`` chunk. Animated WebPs (``ANIM``) are refused: the decoders would read one frame of many.
Measured (issue 34, DALI 2.4's CPU ``fn.decoders.image`` against ``cv2.imdecode``,
:mod:`bench.formats_table`): lossless and lossy WebP, with or without alpha (dropped by both), decode
to identical pixels in RGB and in gray (both use libwebp), and both apply the EXIF orientation.
"""

from __future__ import annotations

from .jpeg import exif_orientation
from .registry import OPENCV_IMREAD, Check, Decoding, Header, ImageFormat, over_limit, register, served_by_check

MAGIC = b"RIFF"


class _Bad(Exception):
    """The container is broken or refused; ``args[0]`` is the reason."""


def _walk(data: bytes, size: int) -> tuple[int, int, int]:
    """``(width, height, orientation)`` from the chunks of a WebP file whose first bytes are ``data``."""
    if len(data) < 12 or data[8:12] != b"WEBP":
        raise _Bad(f"RIFF data, not WebP (form type {bytes(data[8:12])!r})")
    riff = int.from_bytes(data[4:8], "little") + 8
    if riff > size:
        raise _Bad(f"truncated: the RIFF header says {riff} bytes, the file has {size} (wrong RIFF size)")
    pos, width, height, orientation = 12, 0, 0, 1
    while pos + 8 <= min(riff, len(data)):  # the chunks in the bytes read (the size comes first)
        kind, length = bytes(data[pos:pos + 4]), int.from_bytes(data[pos + 4:pos + 8], "little")
        body = data[pos + 8:pos + 8 + min(length, 64)]
        if pos + 8 + length > riff:
            raise _Bad(f"truncated in the {kind.decode('latin-1')!r} chunk at byte {pos} (it runs past the RIFF size)")
        if kind == b"ANIM":
            raise _Bad("animated WebP: the decoders read one frame; save the frame wanted as a still image")
        if kind == b"VP8X" and len(body) >= 10:
            width = 1 + int.from_bytes(body[4:7], "little")
            height = 1 + int.from_bytes(body[7:10], "little")
        elif kind == b"VP8 " and not width and len(body) >= 10:
            if body[3:6] != b"\x9d\x01\x2a":
                raise _Bad("broken VP8 frame header (no start code)")
            width = int.from_bytes(body[6:8], "little") & 0x3FFF
            height = int.from_bytes(body[8:10], "little") & 0x3FFF
        elif kind == b"VP8L" and not width and len(body) >= 5:
            if body[0] != 0x2F:
                raise _Bad("broken VP8L header (no signature)")
            bits = int.from_bytes(body[1:5], "little")
            width, height = 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
        elif kind == b"EXIF":
            exif = bytes(data[pos + 8:pos + 8 + length])
            exif = exif[6:] if exif.startswith(b"Exif\x00\x00") else exif
            orientation = exif_orientation(exif) or 1
        pos += 8 + length + (length & 1)
    if not width or not height:
        raise _Bad("no VP8/VP8L/VP8X header with a size (empty or broken WebP)")
    return width, height, orientation


def read_header(data: bytes | memoryview) -> Header | None:
    """The size and EXIF orientation of WebP ``data`` (colour channels: 3, a WebP holds YUV or ARGB)."""
    data = bytes(data[:65536])
    try:
        width, height, orientation = _walk(data, 1 << 62)
    except _Bad:
        return None
    return Header(width, height, 3, 8, orientation)


def _check(head: bytes, size: int, max_pixels: int, load, tail: bytes) -> Check:
    """The index-time check (see the module docstring)."""
    if size == 0:
        return Check("empty file (0 bytes)")
    try:
        width, height, _ = _walk(bytes(head), size)
    except _Bad as e:
        return Check(e.args[0])
    return Check(over_limit("the WebP header", width, height, max_pixels), width, height)


def served_refusal(data: bytes | memoryview, indexed: tuple[int, int] | None = None) -> str | None:
    """The run-time check of served bytes: the container and the size, then the indexed size."""
    return served_by_check(_check, data, indexed)


WEBP = register(ImageFormat(
    name="webp", magic=(MAGIC,), extensions=(".webp",), read_header=read_header, check=_check,
    served_refusal=served_refusal,
    decoding=Decoding(opencv=OPENCV_IMREAD)))
