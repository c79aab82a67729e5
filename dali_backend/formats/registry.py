"""The image-format registry: one entry per encoded format, chosen by the bytes, not the file name.

An :class:`ImageFormat` holds everything the layers ask of a format: its magic bytes (the content
decides which entry reads a file), the file names the index takes as candidates, the header reader
(size, channels, bit depth, EXIF orientation), the index-time check (headers only, never a decode),
the run-time check of served bytes, and the decoder settings per backend (the DALI graph's
``fn.decoders.image`` arguments, the fallback's ``cv2.imdecode`` flags). A format module of this
package registers itself with :func:`register` on import, and :mod:`dali_backend.formats` imports
every module of the package, so a new format is one file (JPEG, :mod:`.jpeg`, is the first entry).

A file whose bytes no entry claims is checked by the entry its extension names (the JPEG entry for
``.jpg``), so its refusal says what the bytes are ("PNG data, not JPEG"). Imports nothing heavy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..errors import ConfigError
from .files import NotRegularFileError, open_regular

DEFAULT_MAX_PIXELS = 100_000_000
HEAD_BYTES = 65536  # bytes read first from a file: the headers of every format come before the pixels
Backend = Literal["dali", "opencv"]


@dataclass(frozen=True)
class Check:
    """Outcome of an index-time check: ``reason`` is None for an acceptable file."""

    reason: str | None
    width: int = 0
    height: int = 0
    format: str = ""  # the registered format that checked the file (set by check_head)
    bit_depth: int = 8  # bits per sample of an accepted file (PNG and BMP: 1, 2, 4 or 8; see depth_refusal)

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Header:
    """What a format's header says about the image, before decoding: stored size, channels, bits per
    channel and the EXIF orientation (1: none; 5-8 turn the image by 90 degrees)."""

    width: int
    height: int
    channels: int
    bit_depth: int = 8
    orientation: int = 1

    @property
    def decoded_size(self) -> tuple[int, int]:
        """``(height, width)`` of the decoded image (after the EXIF orientation)."""
        return (self.width, self.height) if self.orientation >= 5 else (self.height, self.width)


@dataclass(frozen=True)
class Decoding:
    """The decoder settings of a format per backend.

    ``dali_cpu`` / ``dali_gpu``: extra arguments of DALI's ``fn.decoders.image`` on CPU / GPU
    (``jpeg_fancy_upsampling``...); ``opencv``: colour mode (``"gray"``, ``"rgb"``) -> the name of the
    ``cv2.imdecode`` flag (``"IMREAD_GRAYSCALE"``), or a callable ``decode(bytes, colour) -> array``
    for a format OpenCV does not read; ``opencv_16``: the decoder of 16-bit specs where OpenCV's
    ``IMREAD_ANYDEPTH`` needs a correction to give DALI's values (TIFF's colour -> gray).
    """

    dali_cpu: Mapping[str, Any] = field(default_factory=dict)
    dali_gpu: Mapping[str, Any] = field(default_factory=dict)
    opencv: Mapping[str, str] | Callable[..., Any] = field(default_factory=dict)
    # the fallback's decoder at 16 bits (a spec with a Window), where IMREAD_ANYDEPTH alone is not what
    # DALI gives: ``decode(bytes, colour) -> uint8 or uint16 array`` (None: IMREAD_ANYDEPTH, fallback.ops.decode_16)
    opencv_16: Callable[..., Any] | None = None


# check(head, size, max_pixels, load, tail): head = the first bytes of a size-byte file, load(end) its
# first end bytes or more (None: all), tail its last 2 bytes (see jpeg._check).
Checker = Callable[[bytes, int, int, Callable[[int | None], bytes], bytes], Check]


@dataclass(frozen=True)
class ImageFormat:
    """One registered format (see the module docstring)."""

    name: str
    magic: tuple[bytes, ...]  # the file starts with one of these
    extensions: tuple[str, ...]  # lower case, with the dot: the names the index takes as candidates
    read_header: Callable[[bytes | memoryview], Header | None]
    check: Checker
    served_refusal: Callable[[bytes | memoryview, tuple[int, int] | None], str | None]
    decoding: Decoding = field(default_factory=Decoding)

    def claims(self, head: bytes | memoryview) -> bool:
        """Whether ``head`` (a file's first bytes) starts with this format's magic bytes."""
        start = bytes(head[:max(len(m) for m in self.magic)])
        return any(start.startswith(m) for m in self.magic)


FORMATS: dict[str, ImageFormat] = {}


def register(fmt: ImageFormat) -> ImageFormat:
    """Add ``fmt`` to the registry (a format module calls it on import). Returns ``fmt``.

    Raises:
        ConfigError: another format has that name, magic or extension.
    """
    for other in FORMATS.values():
        if other.name == fmt.name:
            raise ConfigError(f"image format {fmt.name!r} is registered twice; give the new one another name")
        clash = set(other.extensions) & set(fmt.extensions)
        if clash or any(m.startswith(o) or o.startswith(m) for m in fmt.magic for o in other.magic):
            raise ConfigError(f"image format {fmt.name!r} claims the extension {sorted(clash)} or magic bytes of "
                              f"{other.name!r}: each file must name one format")
    if not fmt.magic or any(e != e.lower() or not e.startswith(".") for e in fmt.extensions):
        raise ConfigError(f"image format {fmt.name!r}: give magic bytes and lower-case extensions with the dot")
    FORMATS[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove a format (tests that plug one in take it out again)."""
    FORMATS.pop(name, None)


def extensions() -> tuple[str, ...]:
    """Every registered format's extensions: the file names the index takes as candidates."""
    return tuple(e for fmt in FORMATS.values() for e in fmt.extensions)


def is_image_name(name: str) -> bool:
    """Whether a file called ``name`` is a candidate sample (its extension names a registered format)."""
    return name.lower().endswith(extensions())


def by_name(name: str) -> ImageFormat:
    """The format ``name`` (``"jpeg"``). Raises :class:`ConfigError` naming the registered ones."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ConfigError(f"no image format {name!r}; registered: {', '.join(FORMATS)}") from None


def sniff(head: bytes | memoryview, filename: str | None = None) -> ImageFormat | None:
    """The format whose magic bytes ``head`` starts with; else the one ``filename``'s extension names
    (it then refuses the bytes saying what they are); else None."""
    for fmt in FORMATS.values():
        if fmt.claims(head):
            return fmt
    if filename is not None:
        low = filename.lower()
        return next((fmt for fmt in FORMATS.values() if low.endswith(fmt.extensions)), None)
    return None


OPENCV_IMREAD = {"gray": "IMREAD_GRAYSCALE", "rgb": "IMREAD_COLOR"}  # the formats OpenCV reads as DALI does


def over_limit(what: str, width: int, height: int, max_pixels: int) -> str | None:
    """Why a ``width`` x ``height`` image that ``what`` declares is over ``max_pixels``, or None."""
    if width * height <= max_pixels:
        return None
    return (f"{what} declares {width}x{height} = {width * height / 1e6:.1f} MP, over the limit of "
            f"{max_pixels / 1e6:.1f} MP (raise max_pixels to accept it)")


MAX_BIT_DEPTH = 16  # the deepest samples served: 12- and 16-bit values reach a spec's Window (dali_backend.core.depth)


def depth_refusal(format_name: str, bit_depth: int) -> str | None:
    """Why an image of ``bit_depth`` bits per sample is not served, or None: THE place where a bit depth
    is decided at index time (every entry's check and run-time check call it). Up to 16 bits are
    indexed; whether a spec keeps them is decided when a sample is served
    (:func:`dali_backend.core.depth.check_served`: a spec without a ``Window`` refuses a 16-bit image,
    since DALI's ``decoders.image`` and ``cv2.imdecode`` reduce it to 8 bits differently).
    """
    if bit_depth <= MAX_BIT_DEPTH:
        return None
    return (f"{bit_depth}-bit {format_name}: the loaders take up to 16 bits per sample; convert it to 16-bit "
            "unsigned integers")


def indexed_refusal(width: int, height: int, indexed: tuple[int, int] | None) -> str | None:
    """Why served bytes whose header says ``width`` x ``height`` are not the image indexed as ``indexed``
    (``(width, height)``; None or a 0: not recorded, not compared), or None."""
    if indexed is None or not (indexed[0] and indexed[1]) or (width, height) == (int(indexed[0]), int(indexed[1])):
        return None
    return (f"not the indexed image (changed since indexing): its header says {width}x{height}, the index "
            f"{int(indexed[0])}x{int(indexed[1])}")


def served_by_check(fmt_check: Checker, data: bytes | memoryview, indexed: tuple[int, int] | None) -> str | None:
    """The run-time check of a format whose served bytes are checked as at index time (headers and
    offsets, no size limit), then compared with the indexed size."""
    data = bytes(data)
    res = fmt_check(data, len(data), 1 << 62, lambda end: data, data[-2:])
    return res.reason or indexed_refusal(res.width, res.height, indexed)


def _unclaimed(head: bytes) -> Check:
    return Check("empty file (0 bytes)" if not head else
                 f"no registered image format's signature (starts with {bytes(head[:4]).hex(' ')})")


def check_head(head: bytes, size: int, max_pixels: int, load: Callable[[int | None], bytes], tail: bytes,
               filename: str | None = None, only: str | None = None) -> Check:
    """The index-time check of a file whose first bytes are ``head`` (see :data:`Checker`), by the
    format its bytes (or name) choose; ``only``: check as that format whatever the bytes."""
    fmt = by_name(only) if only is not None else sniff(head, filename)
    if fmt is None:
        return _unclaimed(head)
    res = fmt.check(head, size, max_pixels, load, tail)
    return res if res.format else replace(res, format=fmt.name)


def check_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS, filename: str | None = None,
                only: str | None = None) -> Check:
    """The index-time check of a whole encoded file held in memory."""
    return check_head(data, len(data), max_pixels, lambda end: data, data[-2:], filename, only)


def check_file(path: str | os.PathLike, max_pixels: int = DEFAULT_MAX_PIXELS, only: str | None = None) -> Check:
    """The index-time check of a file without decoding it: only regular files are opened (a FIFO,
    socket or device is refused with ``"not a regular file (FIFO)"`` and never blocks); the headers are
    read by the format its bytes choose (``only``: that format).

    Returns:
        A :class:`Check`; ``reason`` says what is wrong (empty, not a known format, truncated, ...).
    """
    name = os.fspath(path)
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(HEAD_BYTES)
            if len(head) >= size:
                return check_head(head, len(head), max_pixels, lambda end: head, head[-2:], name, only)
            f.seek(size - 2)
            tail = f.read(2)

            def load(end: int | None) -> bytes:  # a local file: all of it (headers past 64 KB are rare)
                f.seek(0)
                return f.read()

            return check_head(head, size, max_pixels, load, tail, name, only)
    except NotRegularFileError as e:
        return Check(str(e))
    except OSError as e:  # permissions, vanished, I/O error
        return Check(f"unreadable ({type(e).__name__}: {e.strerror or e})")


def read_header(data: bytes | memoryview) -> Header | None:
    """The header of encoded ``data`` by the format its bytes choose (None: no format, no header)."""
    fmt = sniff(data)
    return None if fmt is None else fmt.read_header(data)


def decoded_size(data: bytes | memoryview) -> tuple[int, int] | None:
    """``(height, width)`` of the image the decoders produce from ``data`` (headers only)."""
    header = read_header(data)
    return None if header is None else header.decoded_size


def served_refusal(data: bytes | memoryview, indexed: tuple[int, int] | None = None) -> str | None:
    """Why served bytes are not the indexed image or cannot be decoded alike (the run-time check)."""
    fmt = sniff(data)
    if fmt is None:
        return "no registered image format's signature" if FORMATS else "no image format is registered"
    return fmt.served_refusal(data, indexed)


def dali_decoder_args(gpu: bool) -> dict[str, Any]:
    """The extra ``fn.decoders.image`` arguments of every registered format (DALI decodes one batch
    of mixed formats with one operator; each format's arguments apply to its files only)."""
    out: dict[str, Any] = {}
    for fmt in FORMATS.values():
        out.update(fmt.decoding.dali_gpu if gpu else fmt.decoding.dali_cpu)
    return out


def opencv_decode(data: Any, colour: str) -> Any:
    """Decode encoded ``data`` (a uint8 array or bytes) as the fallback does: gray (HxW) or RGB (HxWx3)
    uint8 by the decoder of the format its bytes name (:func:`opencv_decoding`; unclaimed bytes: OpenCV's
    own guess); None when the decoder refuses the data. Imports OpenCV (only here, when called)."""
    import cv2
    import numpy as np

    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    how = opencv_decoding(buf[:16], colour) or ("IMREAD_GRAYSCALE" if colour == "gray" else "IMREAD_COLOR")
    if callable(how):  # the entry's own decoder (TIFF: DALI's gray conversion; a format OpenCV does not read)
        return how(buf, colour)
    out = cv2.imdecode(buf, getattr(cv2, how))
    return out if out is None or colour == "gray" else cv2.cvtColor(out, cv2.COLOR_BGR2RGB)


def decoder_refusal(data: Any, detail: str | None = None) -> str:
    """The reason recorded for bytes ``data`` a decoder refused: "the JPEG decoder refused it (corrupt JPEG
    data)", its format named by the bytes' signature, ``detail`` (the decoder's words) in the brackets."""
    fmt = sniff(bytes(data[:16]))
    name = fmt.name.upper() if fmt is not None else "image"
    return f"the {name} decoder refused it ({detail or f'corrupt {name} data'})"


def opencv_decoding_16(data: bytes | memoryview) -> Callable[..., Any] | None:
    """The fallback's 16-bit decoder of ``data``'s format when it has its own (``Decoding.opencv_16``), else None."""
    fmt = sniff(data)
    return None if fmt is None else fmt.decoding.opencv_16


def opencv_decoding(data: bytes | memoryview, colour: str) -> str | Callable[..., Any] | None:
    """The fallback's decoder for ``data`` in ``colour``: a ``cv2`` imread flag name, or a callable
    ``decode(bytes, colour)``; None when no format claims the bytes."""
    fmt = sniff(data)
    if fmt is None:
        return None
    dec = fmt.decoding.opencv
    return dec if callable(dec) else dec.get(colour)
