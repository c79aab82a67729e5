"""BMP: the file and DIB headers checked without decoding.

The index-time check reads the 14-byte file header and the DIB header: the file size field against
the file's size (a shorter file is truncated), a non-empty size, the pixel data offset and, for
uncompressed files, the rows it needs inside the file. Measured (issue 34, DALI 2.4's CPU
``fn.decoders.image`` against ``cv2.imdecode``, :mod:`bench.formats_table`): 1-, 4-, 8-bit (palette or
gray), 24-bit and 32-bit (alpha dropped by both) uncompressed BMPs decode to identical pixels in RGB
and in gray. RLE-compressed and 16-bit-per-pixel BMPs could not be written to measure them, so they
are refused (re-save uncompressed at 24 bits). Nothing here is slow: the headers are 54-138 bytes.
"""

from __future__ import annotations

from .registry import OPENCV_IMREAD, Check, Decoding, Header, ImageFormat, over_limit, register, served_by_check

MAGIC = b"BM"
_ACCEPTED_BITS = (1, 4, 8, 24, 32)
_BITFIELDS = 3


def _fields(data: bytes) -> dict[str, int] | None:
    """The header fields, or None when the headers are cut short."""
    if len(data) < 26 or not data.startswith(MAGIC):
        return None
    def le(a: int, b: int, signed: bool = False) -> int:
        return int.from_bytes(data[a:b], "little", signed=signed)

    dib = le(14, 18)
    if dib == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes
        return dict(file_size=le(2, 6), offset=le(10, 14), dib=dib, width=le(18, 20), height=le(20, 22),
                    bits=le(24, 26), compression=0, colours=0)
    if len(data) < 54:
        return None
    return dict(file_size=le(2, 6), offset=le(10, 14), dib=dib, width=le(18, 22, True), height=le(22, 26, True),
                bits=le(28, 30), compression=le(30, 34), colours=le(46, 50))


def _gray_palette(data: bytes, f: dict[str, int]) -> bool:
    """Whether a palette image's colours are all gray (a gray BMP, as OpenCV writes 8-bit ones)."""
    entry = 3 if f["dib"] == 12 else 4
    n = f["colours"] or (1 << f["bits"])
    start = 14 + f["dib"]
    table = data[start:start + entry * n]
    if len(table) < entry * n:
        return False
    return all(table[k] == table[k + 1] == table[k + 2] for k in range(0, len(table), entry))


def read_header(data: bytes | memoryview) -> Header | None:
    """The DIB header's size (bottom-up or top-down alike), colour channels and bits per sample."""
    data = bytes(data[:2048])
    f = _fields(data)
    if f is None:
        return None
    channels = 1 if f["bits"] <= 8 and _gray_palette(data, f) else 3
    return Header(f["width"], abs(f["height"]), channels, min(f["bits"], 8))


def _check(head: bytes, size: int, max_pixels: int, load, tail: bytes) -> Check:
    """The index-time check (see the module docstring)."""
    if size == 0:
        return Check("empty file (0 bytes)")
    f = _fields(bytes(head[:64]))
    if f is None:
        return Check(f"truncated in the BMP headers ({size} bytes)")
    width, height = f["width"], abs(f["height"])
    if f["file_size"] > size:
        return Check(f"truncated: the BMP header says {f['file_size']} bytes, the file has {size}", width, height)
    if width <= 0 or height == 0:
        return Check(f"the BMP header declares an empty size ({f['width']}x{f['height']})", width, height)
    if f["bits"] not in _ACCEPTED_BITS:
        return Check(f"{f['bits']}-bit-per-pixel BMP: not measured on both decoders; re-save it at 24 bits", width,
                     height)
    if f["compression"] not in (0, _BITFIELDS):
        return Check(f"compressed BMP (compression {f['compression']}, RLE): not measured on both decoders; re-save "
                     "it uncompressed", width, height)
    if (too_big := over_limit("the BMP header", width, height, max_pixels)):
        return Check(too_big, width, height)
    needed = f["offset"] + ((width * f["bits"] + 31) // 32) * 4 * height
    if f["offset"] >= size or needed > size:
        return Check(f"truncated: the pixel rows need {needed} bytes from offset {f['offset']}, the file has {size}",
                     width, height)
    return Check(None, width, height)


def served_refusal(data: bytes | memoryview, indexed: tuple[int, int] | None = None) -> str | None:
    """The run-time check of served bytes: the headers and the rows they need, then the indexed size."""
    return served_by_check(_check, data, indexed)


BMP = register(ImageFormat(
    name="bmp", magic=(MAGIC,), extensions=(".bmp",), read_header=read_header, check=_check,
    served_refusal=served_refusal,
    decoding=Decoding(opencv=OPENCV_IMREAD)))
