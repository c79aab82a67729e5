"""TIFF: the first image file directory (IFD) read and checked without decoding.

The index-time check reads the IFD (wherever the file puts it: often after the pixels, so a file
longer than the bytes read first is loaded for it) and checks that every value, strip and tile it
points to lies inside the file. It refuses, by their tags, the layouts the two backends' decoders do
not read alike (measured, issue 34: DALI 2.4's CPU ``fn.decoders.image`` (nvImageCodec, libtiff)
against ``cv2.imdecode``, :mod:`bench.formats_table`):

* an alpha channel (ExtraSamples): OpenCV premultiplies the colour by it, DALI drops it (250 levels);
* palette images: the colour maps are reduced to 8 bits differently (1 level);
* 1-bit (bilevel) images: DALI's parser refuses a file without BitsPerSample (Pillow writes none);
* tiles smaller than 32x32: OpenCV 5.0 refuses 16x16 tiles; more than one page: the decoders read
  the first page only, so the others would be lost without a word (split the file);
* more than 8 bits per sample (:func:`~.registry.depth_refusal`), float samples, BigTIFF, and
  compressions other than none, LZW, deflate, PackBits and JPEG.

Accepted files decode to identical RGB on both backends (strips or tiles, contiguous or planar,
either byte order, every accepted compression, the Orientation tag applied by both). In gray, DALI
converts RGB with ``floor(0.299 R + 0.587 G + 0.114 B + 0.5)`` in float32 where OpenCV's own
conversion is up to 1 level off, so the fallback decodes colour TIFFs in RGB and converts them with
DALI's formula (:func:`rgb_to_gray`): equal on 1M random pixels. Planar files are the exception:
DALI's libtiff decoder passes them to nvImageCodec's OpenCV decoder, whose gray is OpenCV's.
"""

from __future__ import annotations

import numpy as np

from .registry import Check, Decoding, Header, ImageFormat, depth_refusal, over_limit, register, served_by_check

MAGIC = (b"II*\x00", b"MM\x00*")
_TYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4}
_COMPRESSION = {1: "none", 5: "LZW", 7: "JPEG", 8: "deflate", 32946: "deflate", 32773: "PackBits"}
_PHOTOMETRIC = {0: 1, 1: 1, 2: 3, 6: 3}  # white/black is zero, RGB, YCbCr (JPEG-in-TIFF) -> colour channels
MIN_TILE = 32


class _Bad(Exception):
    """The IFD is broken or refused; ``args[0]`` is the reason."""


class _Ifd:
    """The tags of a TIFF's first IFD: ``tags[tag] = tuple of values`` (offsets checked inside the file)."""

    def __init__(self, data: bytes, size: int, load):
        self.data, self.size, self.load = data, size, load
        self.order = "little" if data[:2] == b"II" else "big"
        version = self._int(2, 2)
        if version == 43:
            raise _Bad("BigTIFF: the decoders do not read it alike; save it as a classic TIFF")
        if version != 42:
            raise _Bad(f"broken TIFF header (version {version}, not 42)")
        first = self._int(4, 4)
        self.tags: dict[int, tuple[int, ...]] = {}
        count = self._int(first, 2, "the first IFD")
        for k in range(count):
            pos = first + 2 + 12 * k
            tag, kind, n = self._int(pos, 2, "an IFD entry"), self._int(pos + 2, 2), self._int(pos + 4, 4)
            width = _TYPE_SIZE.get(kind)
            if width is None:
                continue  # an unknown field type: readers skip the entry
            at = pos + 8 if n * width <= 4 else self._int(pos + 8, 4)
            if at + n * width > size:
                raise _Bad(f"truncated: tag {tag}'s values (offset {at}, {n * width} bytes) lie past the end of the "
                           f"{size}-byte file")
            if tag in _READ:
                self.tags[tag] = tuple(self._int(at + i * width, min(width, 4)) for i in range(min(n, 1 << 16)))
        self.next_ifd = self._int(first + 2 + 12 * count, 4, "the IFD's end")

    def _int(self, pos: int, width: int, what: str = "the header") -> int:
        if pos + width > self.size:
            raise _Bad(f"truncated: {what} at byte {pos} lies past the end of the {self.size}-byte file")
        if pos + width > len(self.data):
            self.data = self.load(pos + width)  # an IFD past the bytes read: a bucket's object loads up to it
        return int.from_bytes(self.data[pos:pos + width], self.order)

    def one(self, tag: int, default: int = 0) -> int:
        return self.tags.get(tag, (default,))[0]


_READ = frozenset({256, 257, 258, 259, 262, 273, 274, 277, 279, 284, 322, 323, 324, 325, 338, 339})


def _header_of(ifd: _Ifd) -> Header:
    bits = ifd.tags.get(258, (1,))
    return Header(ifd.one(256), ifd.one(257), _PHOTOMETRIC.get(ifd.one(262, 1), 0), max(bits), ifd.one(274, 1))


def _first_ifd(data: bytes | memoryview) -> _Ifd | None:
    data = bytes(data)
    try:
        return _Ifd(data, len(data), lambda end: data)
    except (_Bad, IndexError):
        return None


def read_header(data: bytes | memoryview) -> Header | None:
    """The first IFD's size, colour channels, bits per sample and Orientation, when it lies in ``data``."""
    ifd = _first_ifd(data)
    return None if ifd is None else _header_of(ifd)


def _refusal(ifd: _Ifd, size: int, max_pixels: int) -> str | None:
    width, height = ifd.one(256), ifd.one(257)
    if width == 0 or height == 0:
        return f"the IFD declares an empty size ({width}x{height})"
    bits, photometric = ifd.tags.get(258, (1,)), ifd.one(262, 1)
    if 338 in ifd.tags:
        return ("TIFF with an alpha channel (ExtraSamples): OpenCV premultiplies the colour by it, DALI drops it, so "
                "the backends would disagree; save it without alpha")
    if photometric == 3:
        return "palette TIFF: the decoders reduce its colour map differently (1 level); save it as RGB or gray"
    if photometric not in _PHOTOMETRIC:
        return f"TIFF photometric interpretation {photometric} (CMYK, Lab, ...): convert it to RGB or gray"
    if max(bits) == 1:
        return "1-bit TIFF: DALI's decoder refuses bilevel TIFFs; save it as 8-bit gray"
    refusal = depth_refusal("TIFF", max(bits))
    if refusal or max(bits) != min(bits) or max(bits) not in (8, 16):
        return refusal or f"{bits}-bit samples: the decoders read 8- and 16-bit TIFF samples; save it as 8- or 16-bit"
    if max(bits) == 16 and ifd.one(284, 1) == 2:  # measured: DALI and OpenCV differ from the second strip on
        return "16-bit planar TIFF (PlanarConfiguration 2): the decoders read it differently; save it contiguous"
    if ifd.one(339, 1) != 1:
        return f"TIFF sample format {ifd.one(339, 1)} (signed or float samples): save it as unsigned 8- or 16-bit"
    compression = ifd.one(259, 1)
    if compression not in _COMPRESSION:
        return (f"TIFF compression {compression}: the decoders read none, LZW, deflate, PackBits and JPEG alike; "
                "re-save it with one of these")
    tiled = 324 in ifd.tags
    if tiled and min(ifd.one(322), ifd.one(323)) < MIN_TILE:
        return (f"TIFF tiles of {ifd.one(322)}x{ifd.one(323)}: OpenCV refuses tiles under {MIN_TILE}x{MIN_TILE}; "
                "re-save it in strips or larger tiles")
    offsets, counts = (ifd.tags.get(324), ifd.tags.get(325)) if tiled else (ifd.tags.get(273), ifd.tags.get(279))
    what = "tile" if tiled else "strip"
    if not offsets or not counts or len(offsets) != len(counts):
        return f"TIFF without {what} offsets and byte counts (no pixel data)"
    for k, (at, n) in enumerate(zip(offsets, counts)):
        if at + n > size:
            return (f"truncated: {what} {k} (offset {at}, {n} bytes) lies past the end of the {size}-byte file "
                    f"(TIFF offsets past the end)")
    if ifd.next_ifd:
        return ("multi-page TIFF: the decoders read the first page only, so the other pages would be lost; save one "
                "page per file")
    return over_limit("the IFD", width, height, max_pixels)


def _check(head: bytes, size: int, max_pixels: int, load, tail: bytes) -> Check:
    """The index-time check: the first IFD's tags, every offset inside the file (see the module docstring)."""
    if size == 0:
        return Check("empty file (0 bytes)")
    if bytes(head[:4]) not in MAGIC:
        return Check("no TIFF signature")
    try:
        ifd = _Ifd(head, size, load)
    except _Bad as e:
        return Check(e.args[0])
    except IndexError:  # the file shrank between reads
        return Check("truncated (the file ended while its IFD was read)")
    return Check(_refusal(ifd, size, max_pixels), ifd.one(256), ifd.one(257),
                 bit_depth=max(ifd.tags.get(258, (1,))))  # for the index (Check.bit_depth)


def served_refusal(data: bytes | memoryview, indexed: tuple[int, int] | None = None) -> str | None:
    """The run-time check of served bytes: the IFD and its offsets, then the indexed size."""
    return served_by_check(_check, data, indexed)


def rgb_to_gray(rgb: np.ndarray) -> np.ndarray:
    """DALI's RGB -> gray conversion of decoded TIFFs: ``floor(0.299 R + 0.587 G + 0.114 B + 0.5)`` in float32
    (of uint8 or uint16 values: the same formula at 16 bits, measured equal)."""
    f = rgb.astype(np.float32)
    luma = f[..., 0] * np.float32(0.299) + f[..., 1] * np.float32(0.587) + f[..., 2] * np.float32(0.114)
    return np.floor(luma + np.float32(0.5)).astype(rgb.dtype)  # uint8, or uint16 for 16-bit specs


def decode(buf: np.ndarray, colour: str) -> np.ndarray | None:
    """The fallback's TIFF decoder: OpenCV, then DALI's gray conversion for a colour file in gray (but
    for planar files: DALI's libtiff decoder passes them to nvImageCodec's OpenCV one, whose gray is
    OpenCV's own)."""
    import cv2

    ifd = _first_ifd(buf)
    if colour == "gray" and ifd is not None and (_PHOTOMETRIC.get(ifd.one(262, 1)) == 1 or ifd.one(284, 1) == 2):
        return cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    if bgr is None:
        return None
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return rgb_to_gray(rgb) if colour == "gray" else rgb


def decode_16(buf: np.ndarray, colour: str) -> np.ndarray | None:
    """:func:`decode` at 16 bits (``IMREAD_ANYDEPTH``; 16-bit planar files are refused at index time)."""
    import cv2

    ifd = _first_ifd(buf)
    if colour == "gray" and ifd is not None and (_PHOTOMETRIC.get(ifd.one(262, 1)) == 1 or ifd.one(284, 1) == 2):
        return cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE | cv2.IMREAD_ANYDEPTH)
    bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH)
    if bgr is None:
        return None
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return rgb_to_gray(rgb) if colour == "gray" else rgb


TIFF = register(ImageFormat(
    name="tiff", magic=MAGIC, extensions=(".tif", ".tiff"), read_header=read_header, check=_check,
    served_refusal=served_refusal, decoding=Decoding(opencv=decode, opencv_16=decode_16)))
