"""PNG: the chunk structure and the header CRCs checked without decoding.

The index-time check walks the chunks: the signature, IHDR first (13 bytes: size, bit depth, colour
type, a legal combination of them), each chunk's length inside the file, the CRC of every chunk
except the pixel data (IDAT, whose CRCs a decoder checks), one run of IDAT chunks, PLTE for a palette
image, and IEND. When the file is longer than the bytes read first (a 64 KiB head), the walk stops at
the pixel data and accepts a file that ends with IEND's CRC (as JPEG's check accepts an end-of-image
marker); otherwise it loads the file and walks it to the end to name the break ("truncated in IDAT").
The trade-off: a pixel chunk corrupted in the middle of a long file passes the check; ``verify="decode"``
catches it.

Measured (issue 34, DALI 2.4 CPU ``fn.decoders.image`` against ``cv2.imdecode``, :mod:`bench.formats_table`):
gray, RGB, palette, 1/2/4-bit gray, gray+alpha, RGBA and interlaced PNGs decode to identical pixels in
RGB and in gray; both drop the alpha channel (no compositing) and both apply the eXIf chunk's EXIF
orientation. 16-bit PNGs decode to 8 bits differently (up to 1 level apart), so they are refused
until a declared conversion exists (:func:`~.registry.depth_refusal`). Animated PNGs (acTL) are refused.
"""

from __future__ import annotations

import zlib

from .jpeg import exif_orientation
from .registry import (OPENCV_IMREAD, Check, Decoding, Header, ImageFormat, depth_refusal, indexed_refusal,
                       over_limit, register)

SIGNATURE = b"\x89PNG\r\n\x1a\n"
IEND_TAIL = b"\x60\x82"  # the last two bytes of IEND's CRC (AE 42 60 82): a whole file ends with them
# colour type -> (name, colour channels after the alpha is dropped, legal bit depths)
_COLOUR = {0: ("gray", 1, (1, 2, 4, 8, 16)), 2: ("RGB", 3, (8, 16)), 3: ("palette", 3, (1, 2, 4, 8)),
           4: ("gray+alpha", 1, (8, 16)), 6: ("RGBA", 3, (8, 16))}


def read_header(data: bytes | memoryview) -> Header | None:
    """The IHDR chunk of PNG ``data`` (size, colour channels, bit depth) and the orientation of an eXIf
    chunk among the bytes given; None without a readable IHDR."""
    head = bytes(data[:33])
    if len(head) < 33 or not head.startswith(SIGNATURE) or head[12:16] != b"IHDR":
        return None
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    colour = _COLOUR.get(head[25])
    channels = colour[1] if colour else 0
    orientation = 1
    pos = bytes(data[:65536]).find(b"eXIf")
    if pos >= 4:
        length = int.from_bytes(bytes(data[pos - 4:pos]), "big")
        orientation = exif_orientation(bytes(data[pos + 4:pos + 4 + length])) or 1
    return Header(width, height, channels, head[24], orientation)


def _ihdr_refusal(body: bytes) -> str | None:
    width, height = int.from_bytes(body[0:4], "big"), int.from_bytes(body[4:8], "big")
    depth, colour, compression, filtering, interlace = body[8:13]
    if width == 0 or height == 0:
        return f"IHDR declares an empty size ({width}x{height})"
    if colour not in _COLOUR:
        return f"IHDR declares colour type {colour}, not a PNG colour type (0, 2, 3, 4 or 6)"
    name, _, depths = _COLOUR[colour]
    if depth not in depths:
        return f"IHDR declares {depth}-bit {name}, not a legal PNG bit depth for {name} ({depths})"
    if compression or filtering or interlace > 1:
        return (f"IHDR declares compression {compression}, filter {filtering}, interlace {interlace}: not a PNG "
                "method the decoders read")
    return None


def _check(head: bytes, size: int, max_pixels: int, load, tail: bytes) -> Check:
    """The index-time check (see the module docstring); ``load(end)``: the file's first bytes or all."""
    if size == 0:
        return Check("empty file (0 bytes)")
    if not head.startswith(SIGNATURE):
        return Check("no PNG signature")
    data, pos, width, height = head, 8, 0, 0
    seen: list[bytes] = []
    orientations: list[int] = []
    while True:
        if pos + 8 > len(data) and len(data) < size:
            if b"IDAT" in seen and tail == IEND_TAIL:
                break  # past the head inside the pixel data of a file that ends with IEND: accepted
            data = load(None)
        if pos + 8 > len(data):
            return Check(f"truncated (no IEND chunk: the file ends at byte {len(data)} after "
                         f"{seen[-1].decode('latin-1') if seen else 'the signature'})", width, height)
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), bytes(data[pos + 4:pos + 8])
        name = kind.decode("latin-1")
        if not kind.isalpha():
            return Check(f"broken PNG chunk structure at byte {pos} (chunk type {kind!r})", width, height)
        end = pos + 12 + length
        if end > size:
            return Check(f"truncated in the {name} chunk at byte {pos} (it needs {end} bytes, the file has {size})",
                         width, height)
        if end > len(data) and kind != b"IDAT":
            data = load(None)
        body = bytes(data[pos + 8:pos + 8 + length])
        if kind != b"IDAT" and zlib.crc32(kind + body) != int.from_bytes(data[end - 4:end], "big"):
            return Check(f"bad CRC in the {name} chunk at byte {pos} (corrupt header)", width, height)
        if not seen and (kind != b"IHDR" or length != 13):
            return Check(f"not a PNG: the first chunk is {name} of {length} bytes, not IHDR of 13", width, height)
        if kind == b"IHDR" and not seen:
            width, height = int.from_bytes(body[0:4], "big"), int.from_bytes(body[4:8], "big")
            refusal = _ihdr_refusal(body) or depth_refusal("PNG", body[8])
            if refusal:
                return Check(refusal, width, height)
            if (too_big := over_limit("IHDR", width, height, max_pixels)):
                return Check(too_big, width, height)
        elif kind == b"acTL":
            return Check("animated PNG (acTL chunk): the decoders read the first frame only; save the frame "
                         "wanted as a still PNG", width, height)
        elif kind == b"eXIf":
            orientations.append(exif_orientation(body) or 1)
        elif kind == b"IDAT" and seen[-1] != b"IDAT" and b"IDAT" in seen:
            return Check(f"IDAT chunks not consecutive (another chunk at byte {pos} splits them)", width, height)
        elif kind == b"IDAT" and head[25] == 3 and b"PLTE" not in seen:
            return Check("palette PNG without a PLTE chunk before the pixel data", width, height)
        elif kind == b"IEND":
            if b"IDAT" not in seen:
                return Check("no IDAT chunk (no pixel data) before IEND", width, height)
            break
        seen.append(kind)
        pos = end
    if len(set(orientations)) > 1:
        return Check(f"eXIf chunks with different orientations ({orientations}): keep one", width, height)
    return Check(None, width, height)


def served_refusal(data: bytes | memoryview, indexed: tuple[int, int] | None = None) -> str | None:
    """The run-time check of served bytes: the signature and IHDR, the indexed size, the end of IEND."""
    header = read_header(data)
    if header is None:
        return "no PNG signature and IHDR chunk"
    refusal = depth_refusal("PNG", header.bit_depth)
    if refusal:
        return refusal
    refusal = indexed_refusal(header.width, header.height, indexed)
    if refusal:
        return refusal
    if bytes(data[-2:]) != IEND_TAIL and bytes(data).rfind(b"IEND") < 0:
        return "truncated (no IEND chunk)"
    return None


# Both backends read PNG with libpng-based decoders (DALI's nvImageCodec on CPU threads, even on mixed);
# no argument is needed for equal pixels.
PNG = register(ImageFormat(
    name="png", magic=(SIGNATURE,), extensions=(".png",), read_header=read_header, check=_check,
    served_refusal=served_refusal,
    decoding=Decoding(opencv=OPENCV_IMREAD)))
