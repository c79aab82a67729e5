"""What each backend's decoder produces, per format and variant: the agreement table of issue 34.

    python -m bench.formats_table                  # the markdown table (DALI's CPU decoder against OpenCV)
    python -m bench.formats_table --device mixed   # the same with DALI's mixed decoder (a GPU machine)
    python -m bench.formats_table --json out.json  # the rows as JSON too

Every variant is generated here (OpenCV, Pillow and tifffile writers, 61x47 random pixels), checked by
the index's header check (:func:`dali_backend.formats.registry.check_bytes`), and decoded in RGB and in
gray by DALI's ``fn.decoders.image`` (one pipeline, one batch) and by the fallback's decoder
(:func:`~dali_backend.formats.registry.opencv_decode`, the registry's per-format OpenCV settings). A
row agrees when both decoders give the same shape and the same pixels in both colour modes.
``tests/formats/test_agreement.py`` asserts the rule: every variant the index accepts agrees exactly
(lossless and lossy alike: both sides use the same codec libraries on the CPU); refused ones say why.
The "on mixed" column says where DALI's ``mixed`` decoder runs each format (nvImageCodec 0.9, the
codecs DALI 2.4 ships: nvJPEG, nvJPEG2000 and nvTIFF on the GPU; PNG, BMP and WebP only on CPU
threads, whatever the device).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable

import numpy as np

H, W = 47, 61
# Where DALI 2.4's mixed decoder (nvImageCodec) decodes each format: its GPU codecs are nvJPEG (JPEG),
# nvJPEG2000 and nvTIFF; every other format falls back to its CPU codecs (OpenCV/libpng, libwebp,
# nvbmp) on the pipeline's CPU threads, so decoding PNG costs CPU even on dali-gpu.
ON_MIXED = {"jpeg": "GPU (nvJPEG; the hardware decoder where the GPU has one)",
            "png": "CPU threads", "bmp": "CPU threads", "webp": "CPU threads",
            "tiff": "GPU (nvTIFF) for the layouts it takes, else CPU threads (libtiff)"}


def _pil(arr, fmt: str, **kw) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    (arr if isinstance(arr, Image.Image) else Image.fromarray(arr)).save(b, fmt, **kw)
    return b.getvalue()


def _tf(arr, **kw) -> bytes:
    import tifffile

    b = io.BytesIO()
    tifffile.imwrite(b, arr, **kw)
    return b.getvalue()


def _cv(ext: str, arr, *params) -> bytes:
    import cv2

    return cv2.imencode(ext, arr, list(params))[1].tobytes()


def interlaced_png(rgb: np.ndarray) -> bytes:
    """An Adam7-interlaced RGB PNG (neither OpenCV nor Pillow writes one): raw passes, filter 0."""
    import zlib

    h, w = rgb.shape[:2]
    rows = []
    for y0, x0, dy, dx in ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2),
                           (1, 0, 2, 1)):
        sub = rgb[y0::dy, x0::dx]
        rows += [b"\x00" + r.tobytes() for r in sub] if sub.size else []

    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 1])
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows)))
            + chunk(b"IEND", b""))


def variants(seed: int = 0) -> dict[str, Callable[[], bytes]]:
    """``{"PNG RGBA": writer, ...}``: one encoded file per variant of issue 34's list."""
    try:
        from PIL import Image
    except ImportError:  # a machine without Pillow (the GPU machine): OpenCV's writers only
        Image = None
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (H, W), dtype=np.uint8)
    rgba = np.dstack([rgb, gray])
    bits = gray > 127
    deep = rng.integers(0, 65536, (H, W, 3), dtype=np.uint16)
    pal = Image.fromarray(rgb).quantize(32) if Image is not None else None
    return {
        "JPEG RGB (baseline, q90)": lambda: _cv(".jpg", rgb),
        "PNG gray": lambda: _cv(".png", gray), "PNG RGB": lambda: _cv(".png", rgb),
        "PNG RGBA": lambda: _pil(rgba, "PNG"), "PNG gray+alpha": lambda: _pil(Image.fromarray(np.dstack([gray, gray[::-1]]), "LA"), "PNG"),
        "PNG palette": lambda: _pil(pal, "PNG"), "PNG 1-bit": lambda: _pil(bits, "PNG"),
        "PNG interlaced (Adam7)": lambda: interlaced_png(rgb),
        "PNG 16-bit gray": lambda: _cv(".png", deep[..., 0]), "PNG 16-bit RGB": lambda: _cv(".png", deep),
        "BMP RGB (24-bit)": lambda: _cv(".bmp", rgb), "BMP gray (8-bit palette)": lambda: _cv(".bmp", gray),
        "BMP 1-bit": lambda: _pil(bits, "BMP"), "BMP palette (8-bit)": lambda: _pil(pal, "BMP"),
        "BMP RGBA (32-bit)": lambda: _pil(rgba, "BMP"),
        "TIFF gray": lambda: _pil(gray, "TIFF"), "TIFF RGB": lambda: _pil(rgb, "TIFF"),
        "TIFF LZW (OpenCV's writer)": lambda: _cv(".tif", rgb),
        "TIFF LZW": lambda: _pil(rgb, "TIFF", compression="tiff_lzw"),
        "TIFF deflate": lambda: _pil(rgb, "TIFF", compression="tiff_deflate"),
        "TIFF PackBits": lambda: _pil(rgb, "TIFF", compression="packbits"),
        "TIFF JPEG-compressed": lambda: _pil(rgb, "TIFF", compression="jpeg"),
        "TIFF tiled 32x32": lambda: _tf(rgb, tile=(32, 32), photometric="rgb"),
        "TIFF tiled 16x16": lambda: _tf(rgb, tile=(16, 16), photometric="rgb"),
        "TIFF planar": lambda: _tf(np.moveaxis(rgb, -1, 0), planarconfig="separate", photometric="rgb"),
        "TIFF big-endian": lambda: _tf(rgb, byteorder=">"),
        "TIFF multi-page": lambda: _pil(rgb, "TIFF", save_all=True, append_images=[Image.fromarray(rgb[::-1])]),
        "TIFF RGBA": lambda: _pil(rgba, "TIFF"), "TIFF palette": lambda: _pil(pal, "TIFF"),
        "TIFF 1-bit": lambda: _pil(bits, "TIFF"),
        "TIFF 16-bit gray": lambda: _tf(deep[..., 0]), "TIFF 16-bit RGB": lambda: _tf(deep, photometric="rgb"),
        "WebP lossless": lambda: _cv(".webp", rgb, 64, 101), "WebP lossy (q80)": lambda: _cv(".webp", rgb, 64, 80),
        "WebP RGBA lossless": lambda: _pil(rgba, "WEBP", lossless=True),
        "WebP RGBA lossy": lambda: _pil(rgba, "WEBP", quality=80),
        "JPEG 2000 (.jp2)": lambda: _cv(".jp2", rgb),
    }


def dali_decode(files: list[bytes], colour: str, device: str, bits: int = 8) -> list[np.ndarray | str]:
    """Each file decoded by DALI's ``fn.decoders.image`` on ``device`` (``cpu`` or ``mixed``; ``bits=16``:
    ``dtype=UINT16``, as a spec with a Window decodes), or the error text when the batch fails (then
    each file alone, to name which)."""
    from nvidia.dali import fn, pipeline_def, types

    def run(batch: list[bytes]) -> list[np.ndarray]:
        arrays = [np.frombuffer(b, np.uint8) for b in batch]

        @pipeline_def(batch_size=len(arrays), num_threads=2, device_id=0 if device == "mixed" else None,
                      exec_dynamic=True)
        def pipe():
            enc = fn.external_source(source=lambda: arrays, batch=True, dtype=types.UINT8)
            extra = {"jpeg_fancy_upsampling": True} if device == "mixed" else {}
            extra.update({"dtype": types.UINT16} if bits == 16 else {})
            return fn.decoders.image(enc, device=device, output_type=types.GRAY if colour == "gray" else types.RGB,
                                     **extra)

        p = pipe()
        p.build()
        (out,) = p.run()
        out = out.as_cpu() if hasattr(out, "as_cpu") else out
        return [np.array(out[k]) for k in range(len(arrays))]

    try:
        return run(files)
    except Exception:  # one file the decoder refuses fails the batch: decode each alone
        results: list[np.ndarray | str] = []
        for data in files:
            try:
                results.append(run([data])[0])
            except Exception as e:  # noqa: BLE001  (the table reports the decoder's words)
                results.append(str(e).strip().splitlines()[0][:80])
        return results


def _cell(img) -> str:
    return "refused" if isinstance(img, str) else "x".join(map(str, img.shape))


def table_rows(device: str = "cpu", seed: int = 0) -> list[dict]:
    """One row per variant: the index's verdict, each decoder's output, agreement, where mixed decodes it."""
    from dali_backend.formats import registry

    files = {}
    for name, write in variants(seed).items():
        try:
            files[name] = write()
        except (ImportError, AttributeError):  # its writer (Pillow, tifffile) is not installed here: no row
            continue
    from fallback.ops import decode_16

    # 16-bit variants are compared at 16 bits (DALI's dtype=UINT16 against the fallback's decode_16): how a
    # spec with a Window reads them; a spec without one refuses them when served (dali_backend.core.depth)
    deep = [n for n, data in files.items() if getattr(registry.read_header(data), "bit_depth", 8) > 8]
    names = list(files)
    decoded = {}
    for c in ("rgb", "gray"):
        shallow = [n for n in names if n not in deep]
        by_name = dict(zip(shallow, dali_decode([files[n] for n in shallow], c, device)))
        by_name.update(zip(deep, dali_decode([files[n] for n in deep], c, device, bits=16)))
        decoded[c] = [by_name[n] for n in names]
    rows = []
    for k, name in enumerate(names):
        data = files[name]
        check = registry.check_bytes(data)
        fmt = registry.sniff(data[:16])
        header = registry.read_header(data)
        row = {"variant": name, "format": fmt.name if fmt else None, "index": check.reason or "accepted",
               "bit_depth": header.bit_depth if header else None}
        worst, same_shape, refused = 0, True, []
        for colour in ("rgb", "gray"):
            dali = decoded[colour][k]
            cv = decode_16(np.frombuffer(data, np.uint8), colour) if name in deep else registry.opencv_decode(data, colour)
            if cv is not None and cv.ndim == 2:
                cv = cv[..., None]
            row[f"dali_{colour}"], row[f"opencv_{colour}"] = _cell(dali), "refused" if cv is None else _cell(cv)
            if isinstance(dali, str) or cv is None:
                refused.append(colour)
                continue
            if dali.shape != cv.shape:
                same_shape = False
                continue
            worst = max(worst, int(np.abs(dali.astype(np.int32) - cv.astype(np.int32)).max()))
        row["max_diff"] = None if refused or not same_shape else worst
        row["agree"] = ("a decoder refuses it" if refused else "shapes differ" if not same_shape
                        else "exact" if worst == 0 else f"max {worst} levels")
        row["on_mixed"] = ON_MIXED.get(row["format"] or "", "")
        rows.append(row)
    return rows


def markdown(rows: list[dict], device: str = "cpu") -> str:
    """The table as the docs page shows it."""
    dali = "DALI cpu" if device == "cpu" else "DALI mixed"
    lines = [f"| variant | index | {dali} (RGB) | OpenCV (RGB) | agree (RGB and gray) | on `mixed` |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        index = "accepted" if r["index"] == "accepted" else f"refused: {r['index'].split(':')[0].split(';')[0]}"
        lines.append(f"| {r['variant']} | {index} | {r['dali_rgb']} | {r['opencv_rgb']} | {r['agree']} | "
                     f"{r['on_mixed']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.formats_table", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "mixed"], default="cpu", help="DALI's decoder device")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = p.parse_args(argv)
    rows = table_rows(args.device)
    print(markdown(rows, args.device))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r["variant"] for r in rows if r["index"] == "accepted" and r["agree"] != "exact"]
    if bad:
        print(f"formats_table: accepted variants whose decoders disagree: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
