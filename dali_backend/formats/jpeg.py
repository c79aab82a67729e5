"""Cheap JPEG validation without decoding.

Reads the marker segments up to the first scan (a few hundred bytes for most files), takes the frame
size from the SOFn header, and checks that an end-of-image marker follows the scan data. Bytes after
the end marker are accepted (cameras append data there). Files the two backends' decoders (OpenCV's
``cv2.imdecode`` and DALI's ``fn.decoders.image``) cannot both read, or would read differently, are
refused by their headers: 4-component (CMYK/YCCK) files, frame types or precisions other than 8-bit
sequential or progressive (:func:`frame_refusal`), and EXIF segments whose orientations disagree
(:func:`orientation_refusal`). The trade-off: a file whose entropy data is
corrupted in the middle, or cut short and re-terminated with an end-of-image marker (it decodes with
its bottom rows flat grey), passes these checks; only ``verify="decode"`` at index time catches those.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .files import NotRegularFileError, file_kind, not_regular_reason, open_regular  # noqa: F401 (re-exported)
from .registry import DEFAULT_MAX_PIXELS, HEAD_BYTES, Decoding, Header, ImageFormat, check_file, register  # noqa: F401
from .registry import Check as JpegCheck  # the registry's check outcome (the name every caller knows)

SOI = b"\xff\xd8"
EOI = b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers carrying the image size (every SOFn except DHT C4, JPG C8, DAC CC).
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
# Markers without a length field.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
# The coding process each SOFn marker announces.
_PROCESS = {0xC0: "baseline", 0xC1: "extended sequential", 0xC2: "progressive", 0xC3: "lossless",
            0xC5: "hierarchical sequential", 0xC6: "hierarchical progressive", 0xC7: "hierarchical lossless",
            0xC9: "arithmetic-coded sequential", 0xCA: "arithmetic-coded progressive",
            0xCB: "arithmetic-coded lossless", 0xCD: "hierarchical arithmetic-coded sequential",
            0xCE: "hierarchical arithmetic-coded progressive", 0xCF: "hierarchical arithmetic-coded lossless"}
# Processes both decoders read, at 8-bit precision with 1 or 3 components, in gray and in colour.
_READABLE_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})
_LOSSLESS_SOF = 0xC3


def _describe_start(head: bytes) -> str:
    if head.startswith(PNG_SIGNATURE):
        return "PNG data, not JPEG"
    if head[:5].lower() in (b"<?xml", b"<html", b"<!doc"):
        return "text/HTML, not JPEG"
    if head[:4] in (b"GIF8", b"RIFF", b"II*\x00", b"MM\x00*") or head[:2] == b"BM":
        return f"another image format ({head[:4]!r}), not JPEG"
    return f"no JPEG signature (starts with {head[:4].hex(' ')})"


def check_jpeg_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> JpegCheck:
    """Validate a whole encoded JPEG held in memory (see :func:`check_jpeg`)."""
    return _check(data, len(data), max_pixels, lambda end: data, data[-2:])


def check_jpeg(path: str | os.PathLike, max_pixels: int = DEFAULT_MAX_PIXELS) -> JpegCheck:
    """Validate a JPEG file without decoding it.

    Args:
        path: file to check. Only regular files are opened: a FIFO, socket or device is refused
            with ``"not a regular file (FIFO)"`` (and never blocks).
        max_pixels: largest accepted width * height declared by the frame header.

    Returns:
        A :class:`JpegCheck`; ``reason`` says what is wrong (empty, not a JPEG, truncated, ...).
    """
    return check_file(path, max_pixels, only="jpeg")


class _Malformed(Exception):
    """The marker structure is broken; ``args[0]`` says how (a :class:`JpegCheck` reason)."""


class _Segments:
    """The one walk over a JPEG's marker segments, from SOI to the first scan, shared by the index's
    strict check (:func:`check_jpeg`) and the run-time header reads (:func:`read_frame_header`).

    Iterating yields ``(marker, pos, length)`` for each segment with a length field (``pos``: the
    offset of that field), the start of scan (``0xDA``) last; fill bytes and standalone markers are
    skipped. A broken structure raises :class:`_Malformed` with the reason. ``data`` holds the first
    bytes of a ``size``-byte file; ``load(end)`` returns its first ``end`` bytes or more (None: all of
    it) when a header runs past ``data`` (without ``load``, ``data`` is all there is), and
    :meth:`ensure` makes a range present before a segment's payload is read.
    """

    def __init__(self, data: bytes | bytearray | memoryview, size: int | None = None, load=None):
        self.data, self.size, self.load = data, len(data) if size is None else size, load

    def ensure(self, end: int) -> None:
        """``data[:end]`` present, as far as the file goes (it may have changed size meanwhile)."""
        if self.load is not None and end > len(self.data) and len(self.data) < self.size:
            self.data = self.load(min(end, self.size))
            if len(self.data) >= self.size or len(self.data) < end:
                self.size = len(self.data)

    def __iter__(self):
        pos = 2
        while True:
            self.ensure(pos + 4)
            data, size = self.data, self.size
            if pos >= size - 1:
                raise _Malformed(f"truncated in the headers (at byte {pos} of {size}, no scan found)")
            if data[pos] != 0xFF:
                raise _Malformed(f"corrupt marker structure at byte {pos} (0x{data[pos]:02x} where 0xFF was expected)")
            while pos < size - 1 and data[pos + 1] == 0xFF:  # fill bytes (0xFF repeated) before a marker
                pos += 1
                self.ensure(pos + 4)
                data, size = self.data, self.size
            if pos >= size - 1:  # fill bytes to the end (erased flash reads as 0xFF)
                raise _Malformed(f"truncated in the headers (at byte {pos} of {size}, no scan found)")
            marker = data[pos + 1]
            pos += 2
            if marker in _STANDALONE:
                continue
            if marker == 0xD9:
                raise _Malformed("end-of-image marker before any scan (header-only file)")
            if pos + 2 > size:
                raise _Malformed(f"truncated in the headers (at byte {pos} of {size})")
            length = (data[pos] << 8) | data[pos + 1]
            if length < 2 or pos + length > size:
                raise _Malformed(f"truncated in the headers (segment 0xFF{marker:02X} at byte {pos - 2} runs past "
                                 "the end)")
            yield marker, pos, length
            if marker == 0xDA:
                return
            pos += length


def _check(data: bytes, size: int, max_pixels: int, load, tail: bytes) -> JpegCheck:
    """Check the markers of ``data`` (the first bytes of a ``size``-byte file): :class:`_Segments`.

    ``load(end)`` returns the file's first ``end`` bytes or more (``end=None``: all of it); it is called
    only when a header the check reads runs past ``data`` (large EXIF/ICC segments), or to look for the
    end-of-image marker when the file does not end with it. A local file loads whole; an object in a
    bucket loads a longer byte range, so the check reads the headers, not the image.
    """
    if size == 0:
        return JpegCheck("empty file (0 bytes)")
    if data[:2] != SOI:
        return JpegCheck(_describe_start(data[:16]))
    walk = _Segments(data, size, load)
    width = height = 0
    orientations: list[int] = []
    try:
        for marker, pos, length in walk:
            if marker == 0xE1:
                walk.ensure(pos + length)
                tag = _exif_orientation(walk.data[pos + 2:pos + length])
                if tag is not None:
                    orientations.append(tag)
            if marker in _SOF_MARKERS:
                if length < 8:
                    return JpegCheck(f"frame header too short ({length} bytes)")
                walk.ensure(pos + 8)
                d = walk.data
                height, width = (d[pos + 3] << 8) | d[pos + 4], (d[pos + 5] << 8) | d[pos + 6]
                if width == 0 or height == 0:
                    return JpegCheck(f"frame header declares an empty or deferred size ({width}x{height})")
                refusal = frame_refusal(marker, d[pos + 2], d[pos + 7])
                if refusal:
                    return JpegCheck(refusal, width, height)
                if width * height > max_pixels:
                    return JpegCheck(
                        f"frame header declares {width}x{height} = {width * height / 1e6:.1f} MP, "
                        f"over the limit of {max_pixels / 1e6:.1f} MP (raise max_pixels to accept it)",
                        width, height,
                    )
            if marker == 0xDA:  # start of scan: entropy-coded data follows
                if width == 0:
                    return JpegCheck("scan before any frame header (no SOF marker)")
                refusal = orientation_refusal(orientations)
                if refusal:
                    return JpegCheck(refusal, width, height)
                scan_start = pos + length
                # Fast path: the file ends with EOI. Otherwise look for it (trailing bytes are allowed).
                # Inside entropy data 0xFF is always followed by 0x00 or RSTn, so the first FF D9 is EOI.
                if tail == EOI:
                    return JpegCheck(None, width, height)
                d = walk.data if len(walk.data) >= walk.size else load(None)
                if d.find(EOI, scan_start) >= 0:
                    return JpegCheck(None, width, height)
                return JpegCheck(f"truncated (no end-of-image marker after the scan data; {len(d)} bytes)", width,
                                 height)
        raise AssertionError("unreachable: the walk ends at the first scan or raises")  # pragma: no cover
    except _Malformed as e:
        return JpegCheck(e.args[0])
    except IndexError:  # the file shrank between reads
        return JpegCheck(f"truncated in the headers (the file ended at byte {len(walk.data)} while being read)")


def frame_refusal(marker: int, precision: int, components: int) -> str | None:
    """Why the decoders cannot read a frame of this SOFn ``marker``, sample ``precision`` and number of
    ``components`` alike, or None.

    Measured (issue 18) with ``cv2.imdecode`` and DALI's CPU ``fn.decoders.image``, both libjpeg-turbo:
    both read 8-bit baseline, extended (SOF1), progressive and arithmetic-coded (SOF9, SOF10) frames of
    1 or 3 components, in gray and in colour, to identical pixels. Both refuse (as "corrupt JPEG data"
    at run time) 12- and 16-bit precision in every process, hierarchical frames (SOF5-7, SOF13-15),
    lossless arithmetic coding (SOF11) and 2 components. Lossless frames (SOF3) of 8 bits or fewer
    decode only in their own colour mode (1 component: gray only, 3: RGB only; libjpeg-turbo converts
    no colours losslessly), so a loader in the other mode would fail on them.
    """
    process, sof = _PROCESS.get(marker, "unknown"), f"SOF{marker - 0xC0}"
    name = f"{process} JPEG ({sof})"
    if marker not in _READABLE_SOF and marker != _LOSSLESS_SOF:
        return (f"{name} is not supported by the decoders (OpenCV and DALI both refuse it); "
                "re-encode it as baseline JPEG")
    if precision != 8:
        return (f"{precision}-bit precision ({process} JPEG, {sof}): the decoders read 8-bit JPEG only (OpenCV and "
                "DALI both refuse it); convert it to 8-bit baseline JPEG")
    if components == 4:
        return ("4-component (CMYK/YCCK) JPEG: OpenCV and DALI convert CMYK differently (up to 2 levels, 14 after "
                "CLAHE), so the backends would disagree; convert it to RGB")
    if components not in (1, 3):
        return (f"{components}-component JPEG: the decoders read 1 (gray) or 3 (colour) components only; "
                "convert it to gray or RGB")
    if marker == _LOSSLESS_SOF:
        own, other = ("gray", "RGB") if components == 1 else ("RGB", "gray")
        return (f"{name} is not supported by the decoders: they read a {components}-component lossless file "
                f"as {own} only (no colour conversion in lossless mode), so a {other} loader would fail on it; "
                "re-encode it as baseline JPEG")
    return None


def _exif_orientation(segment: bytes | memoryview) -> int | None:
    """The orientation tag of an APP1 segment's payload: 1-8 as written, 1 for a value out of that range
    (no rotation, as both decoders read it); None when the segment is not ``Exif`` or holds no readable
    tag (the decoders skip such segments). The value is the tag's first two bytes whatever its type.
    """
    if bytes(segment[:6]) != b"Exif\x00\x00" or len(segment) < 14:
        return None
    tiff = segment[6:]
    order = {b"II": "little", b"MM": "big"}.get(bytes(tiff[:2]))
    if order is None:
        return None
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return None
    for k in range(int.from_bytes(tiff[ifd:ifd + 2], order)):
        entry = tiff[ifd + 2 + 12 * k: ifd + 14 + 12 * k]
        if len(entry) < 12:
            return None
        if int.from_bytes(entry[:2], order) == 0x0112:
            value = int.from_bytes(entry[8:10], order)
            return value if 1 <= value <= 8 else 1
    return None


def exif_orientation(tiff: bytes | memoryview) -> int | None:
    """The orientation tag of EXIF data that starts with its TIFF header (a PNG eXIf chunk, a WebP
    EXIF chunk): as :func:`_exif_orientation` reads an APP1 segment."""
    return _exif_orientation(b"Exif\x00\x00" + bytes(tiff))


_COUNT = {2: "two", 3: "three", 4: "four"}


def orientation_refusal(orientations: Sequence[int]) -> str | None:
    """Why EXIF orientation tags (in file order, one per EXIF segment that has one) make the decoders
    rotate the image differently, or None.

    Measured (issue 18): both decoders read the EXIF segments before the first scan, before or after
    the frame header and whichever APPn comes first; segments after the first scan are ignored.
    OpenCV applies the first orientation tag, DALI the last, and neither can be told otherwise, so a
    file whose tags differ is refused; several tags with one value are read alike and accepted.
    """
    if len(set(orientations)) <= 1:
        return None
    count = _COUNT.get(len(orientations), str(len(orientations)))
    values = ", then ".join(map(str, orientations))
    return (f"{count} EXIF segments with different orientations: decoders disagree (orientation {values}; "
            f"OpenCV applies the first, {orientations[0]}, DALI the last, {orientations[-1]}), so the backends "
            "would rotate the image differently; keep one EXIF segment or re-save the file")


@dataclass(frozen=True)
class FrameHeader:
    """What :func:`read_frame_header` finds before the first scan."""

    marker: int  # the SOFn marker (0xC0 baseline, 0xC2 progressive, ...)
    precision: int
    components: int
    height: int  # as stored, before the EXIF orientation
    width: int
    orientations: tuple[int, ...]  # the EXIF orientation tags, in file order

    @property
    def orientation(self) -> int:
        """The EXIF orientation DALI applies (the last tag; files whose tags differ are refused)."""
        return self.orientations[-1] if self.orientations else 1


def read_frame_header(data: bytes | memoryview) -> FrameHeader | None:
    """The frame header of JPEG ``data`` and the EXIF orientation tags before its first scan, where the
    decoders read them (EXIF before or after the frame header alike); None when no frame header comes
    before the first scan or a broken structure. Reads headers only, without copying them
    (:class:`_Segments`: the walk the index's check makes, keeping what it found before a break).
    """
    data = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    if bytes(data[:2]) != SOI:
        return None
    frame, orientations = None, []
    try:
        for marker, pos, length in _Segments(data):
            if marker == 0xE1:
                tag = _exif_orientation(data[pos + 2:pos + length])
                if tag is not None:
                    orientations.append(tag)
            if marker in _SOF_MARKERS and frame is None and length >= 8:
                frame = (marker, data[pos + 2], data[pos + 7], (data[pos + 3] << 8) | data[pos + 4],
                         (data[pos + 5] << 8) | data[pos + 6])
    except _Malformed:
        pass  # what came before the break stands (the decoders read as far)
    return None if frame is None else FrameHeader(*frame, tuple(orientations))


def header_refusal(data: bytes | memoryview, indexed: tuple[int, int] | None = None) -> str | None:
    """Why the decoders cannot read ``data`` alike, judged from its headers (frame type, precision,
    components, EXIF orientations: what :func:`check_jpeg` refuses besides the marker structure and
    the size), or None. For bytes served at run time: a file may have changed since it was indexed.

    Args:
        data: the encoded bytes.
        indexed: ``(width, height)`` of the frame header as indexed (``0`` for either: not recorded,
            not compared); a frame of another size is not the indexed image, whatever its bytes' size.
    """
    header = read_frame_header(data)
    if header is None:
        return "no frame header (SOF marker) before the scan data"
    refusal = frame_refusal(header.marker, header.precision, header.components) \
        or orientation_refusal(header.orientations)
    if refusal or indexed is None or not (indexed[0] and indexed[1]):
        return refusal
    if (header.width, header.height) != (int(indexed[0]), int(indexed[1])):
        return (f"not the indexed image (changed since indexing): its frame header says {header.width}x"
                f"{header.height}, the index {int(indexed[0])}x{int(indexed[1])}")
    return None


def decoded_size(data: bytes | memoryview) -> tuple[int, int] | None:
    """``(height, width)`` of the image the decoders produce from ``data``: the frame header's size,
    swapped when the EXIF orientation (5-8) turns the image by 90 degrees; PNG bytes read from IHDR.

    Reads headers only, up to the first scan, as the decoders do: an EXIF segment after the frame
    header counts (microseconds, whatever the size of APPn segments: no copy), so the per-draw
    parameters of size-dependent operations (crops) can be drawn before decoding. None when no frame
    header is found.
    """
    data = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    if bytes(data[:8]) == PNG_SIGNATURE and len(data) >= 24:
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    header = read_frame_header(data)
    if header is None:
        return None
    return (header.width, header.height) if header.orientation >= 5 else (header.height, header.width)


def read_header(data: bytes | memoryview) -> Header | None:
    """The registry's header of JPEG ``data``: frame size, components, precision, EXIF orientation."""
    frame = read_frame_header(data)
    if frame is None:
        return None
    return Header(frame.width, frame.height, frame.components, frame.precision, frame.orientation)


def served_refusal(data: bytes | memoryview, indexed: tuple[int, int] | None = None) -> str | None:
    """The run-time check of served bytes: the signature, :func:`header_refusal`, an end-of-image marker."""
    data = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    if bytes(data[:2]) != SOI:
        return "no JPEG signature"
    refusal = header_refusal(data, indexed)  # same size, other headers or frame size: not the indexed image
    if refusal:
        return refusal
    if bytes(data[-2:]) != EOI and bytes(data).find(EOI) < 0:
        return "truncated (no end-of-image marker)"
    return None


# The registry's first entry. DALI: nvJPEG upsamples chroma differently from libjpeg-turbo unless asked
# for "fancy" upsampling; OpenCV: libjpeg-turbo, EXIF orientation applied, as DALI's CPU decoder.
JPEG = register(ImageFormat(
    name="jpeg", magic=(SOI,), extensions=(".jpg", ".jpeg"), read_header=read_header, check=_check,
    served_refusal=served_refusal,
    decoding=Decoding(dali_gpu={"jpeg_fancy_upsampling": True},
                      opencv={"gray": "IMREAD_GRAYSCALE", "rgb": "IMREAD_COLOR"})))
