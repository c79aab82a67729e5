"""Cheap JPEG validation without decoding.

Reads the marker segments up to the first scan (a few hundred bytes for most files), takes the frame
size from the SOFn header, and checks that an end-of-image marker follows the scan data. Bytes after
the end marker are accepted (cameras append data there). 4-component (CMYK/YCCK) files are refused:
the two backends' decoders convert them differently. The trade-off: a file whose entropy data is
corrupted in the middle, or cut short and re-terminated with an end-of-image marker (it decodes with
its bottom rows flat grey), passes these checks; only ``verify="decode"`` at index time catches those.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import BinaryIO

SOI = b"\xff\xd8"
EOI = b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers carrying the image size (every SOFn except DHT C4, JPG C8, DAC CC).
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
# Markers without a length field.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
DEFAULT_MAX_PIXELS = 100_000_000


@dataclass(frozen=True)
class JpegCheck:
    """Outcome of :func:`check_jpeg`: ``reason`` is None for an acceptable file."""

    reason: str | None
    width: int = 0
    height: int = 0

    @property
    def ok(self) -> bool:
        return self.reason is None


def _describe_start(head: bytes) -> str:
    if head.startswith(PNG_SIGNATURE):
        return "PNG data, not JPEG"
    if head[:5].lower() in (b"<?xml", b"<html", b"<!doc"):
        return "text/HTML, not JPEG"
    if head[:4] in (b"GIF8", b"RIFF", b"II*\x00", b"MM\x00*") or head[:2] == b"BM":
        return f"another image format ({head[:4]!r}), not JPEG"
    return f"no JPEG signature (starts with {head[:4].hex(' ')})"


HEAD_BYTES = 65536


def check_jpeg_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> JpegCheck:
    """Validate a whole encoded JPEG held in memory (see :func:`check_jpeg`)."""
    return _check(data, len(data), max_pixels, lambda: data, data[-2:])


_KINDS = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"))


def file_kind(mode: int) -> str:
    """``"regular"``, or what else an ``st_mode`` describes (``"FIFO"``, ``"socket"``, ...)."""
    if stat.S_ISREG(mode):
        return "regular"
    return next((name for test, name in _KINDS if test(mode)), "special file")


def not_regular_reason(mode: int) -> str | None:
    """The rejection reason for a non-regular file (``"not a regular file (FIFO)"``), or None."""
    kind = file_kind(mode)
    return None if kind == "regular" else f"not a regular file ({kind})"


class NotRegularFileError(OSError):
    """Raised by :func:`open_regular` for a FIFO, socket, device or directory."""


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file (after following symlinks).

    A FIFO named ``x.jpg`` would block ``open()`` forever (even Ctrl-C cannot interrupt it), and
    reading a device has side effects, so the type is checked with ``stat`` before opening, and again
    on the open descriptor (opened non-blocking) in case the file was swapped in between.

    Raises:
        NotRegularFileError: the path is not a regular file; the message is the rejection reason.
        OSError: the file cannot be stat'ed or opened.
    """
    reason = not_regular_reason(os.stat(path).st_mode)
    if reason:
        raise NotRegularFileError(reason)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        reason = not_regular_reason(os.fstat(fd).st_mode)
        if reason:
            raise NotRegularFileError(reason)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_jpeg(path: str | os.PathLike, max_pixels: int = DEFAULT_MAX_PIXELS) -> JpegCheck:
    """Validate a JPEG file without decoding it.

    Args:
        path: file to check. Only regular files are opened: a FIFO, socket or device is refused
            with ``"not a regular file (FIFO)"`` (and never blocks).
        max_pixels: largest accepted width * height declared by the frame header.

    Returns:
        A :class:`JpegCheck`; ``reason`` says what is wrong (empty, not a JPEG, truncated, ...).
    """
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(HEAD_BYTES)
            if len(head) >= size:
                return _check(head, len(head), max_pixels, lambda: head, head[-2:])

            f.seek(size - 2)
            tail = f.read(2)

            def load_full() -> bytes:
                f.seek(0)
                return f.read()

            return _check(head, size, max_pixels, load_full, tail)
    except NotRegularFileError as e:
        return JpegCheck(str(e))
    except OSError as e:  # permissions, vanished, I/O error
        return JpegCheck(f"unreadable ({type(e).__name__}: {e.strerror or e})")


def _check(data: bytes, size: int, max_pixels: int, load_full, tail: bytes) -> JpegCheck:
    """Parse markers in ``data`` (the first bytes of a ``size``-byte file); ``load_full()`` reads all."""
    if size == 0:
        return JpegCheck("empty file (0 bytes)")
    if data[:2] != SOI:
        return JpegCheck(_describe_start(data[:16]))
    pos, width, height = 2, 0, 0
    while True:
        if pos + 65540 > len(data) and len(data) < size:
            data = load_full()  # headers run past the first block (large EXIF/ICC segments)
            size = len(data)
        # Skip fill bytes (0xFF repeated) before a marker.
        if pos >= size - 1:
            return JpegCheck(f"truncated in the headers (at byte {pos} of {size}, no scan found)")
        if data[pos] != 0xFF:
            return JpegCheck(f"corrupt marker structure at byte {pos} (0x{data[pos]:02x} where 0xFF was expected)")
        while pos < size - 1 and data[pos + 1] == 0xFF:
            pos += 1
        marker = data[pos + 1]
        pos += 2
        if marker in _STANDALONE:
            continue
        if marker == 0xD9:
            return JpegCheck("end-of-image marker before any scan (header-only file)")
        if pos + 2 > size:
            return JpegCheck(f"truncated in the headers (at byte {pos} of {size})")
        length = (data[pos] << 8) | data[pos + 1]
        if length < 2 or pos + length > size:
            return JpegCheck(f"truncated in the headers (segment 0xFF{marker:02X} at byte {pos - 2} runs past the end)")
        if marker in _SOF_MARKERS:
            if length < 8:
                return JpegCheck(f"frame header too short ({length} bytes)")
            height = (data[pos + 3] << 8) | data[pos + 4]
            width = (data[pos + 5] << 8) | data[pos + 6]
            if width == 0 or height == 0:
                return JpegCheck(f"frame header declares an empty or deferred size ({width}x{height})")
            if data[pos + 7] == 4:
                return JpegCheck("4-component (CMYK/YCCK) JPEG: OpenCV and DALI convert CMYK differently (up to "
                                 "2 levels, 14 after CLAHE), so the backends would disagree; convert it to RGB", width, height)
            if width * height > max_pixels:
                return JpegCheck(
                    f"frame header declares {width}x{height} = {width * height / 1e6:.1f} MP, "
                    f"over the limit of {max_pixels / 1e6:.1f} MP (raise max_pixels to accept it)",
                    width, height,
                )
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            if width == 0:
                return JpegCheck("scan before any frame header (no SOF marker)")
            scan_start = pos + length
            # Fast path: the file ends with EOI. Otherwise look for it (trailing bytes are allowed).
            # Inside entropy data 0xFF is always followed by 0x00 or RSTn, so the first FF D9 is EOI.
            if tail == EOI:
                return JpegCheck(None, width, height)
            if len(data) < size:
                data = load_full()
                size = len(data)
            if data.find(EOI, scan_start) >= 0:
                return JpegCheck(None, width, height)
            return JpegCheck(f"truncated (no end-of-image marker after the scan data; {size} bytes)", width, height)
        pos += length


def _exif_orientation(segment: bytes) -> int:
    """The orientation tag (1-8) of an APP1 ``Exif`` segment's payload, 1 when absent or unreadable."""
    if segment[:6] != b"Exif\x00\x00" or len(segment) < 14:
        return 1
    tiff = segment[6:]
    order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
    if order is None:
        return 1
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 1
    for k in range(int.from_bytes(tiff[ifd:ifd + 2], order)):
        entry = tiff[ifd + 2 + 12 * k: ifd + 14 + 12 * k]
        if len(entry) < 12:
            return 1
        if int.from_bytes(entry[:2], order) == 0x0112:
            value = int.from_bytes(entry[8:10], order)
            return value if 1 <= value <= 8 else 1
    return 1


def decoded_size(data: bytes | memoryview) -> tuple[int, int] | None:
    """``(height, width)`` of the image the decoders produce from ``data``: the frame header's size,
    swapped when the EXIF orientation (5-8) turns the image by 90 degrees; PNG bytes read from IHDR.

    Reads headers only (microseconds, whatever the size of APPn segments before the frame: no copy),
    so the per-draw parameters of size-dependent operations (crops) can be drawn before decoding.
    None when no frame header is found.
    """
    data = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    if bytes(data[:8]) == PNG_SIGNATURE and len(data) >= 24:
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    if bytes(data[:2]) != SOI:
        return None
    pos, orientation = 2, 1
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        while pos + 1 < len(data) and data[pos + 1] == 0xFF:
            pos += 1
        marker = data[pos + 1]
        pos += 2
        if marker in _STANDALONE:
            continue
        length = (data[pos] << 8) | data[pos + 1]
        if marker == 0xE1 and orientation == 1:  # the first Exif segment counts, as in libjpeg-turbo users
            orientation = _exif_orientation(bytes(data[pos + 2:pos + length]))
        if marker in _SOF_MARKERS and pos + 7 <= len(data):
            height, width = (data[pos + 3] << 8) | data[pos + 4], (data[pos + 5] << 8) | data[pos + 6]
            return (width, height) if orientation >= 5 else (height, width)
        if marker in (0xDA, 0xD9):
            return None
        pos += length
    return None
