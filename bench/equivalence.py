"""Pixel agreement between the DALI operators and the fallback's OpenCV/torch operations.

Used by the tests (DALI on the CPU) and by the GPU check (DALI on the GPU): each operation is run
alone on the same inputs by both sides, and the whole pipeline end to end through both loaders.
Differences are measured on the uint8 scale before normalisation: mean |diff|, 99.9th percentile, max;
with ``--bit-depth 16``, also each operation that takes uint16 images (``16 in DEPTHS``) on 16-bit images,
in 16-bit levels (``transform16:`` rows, bounded by each operation's ``tolerance16()``), and both loaders end
to end on 16-bit PNGs under ``decode_bits=16`` (``end-to-end16:`` rows: the uint16 levels behind the float
output, bounded by the warps' ``tolerance16()``).
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from dali_backend.core.augment import AugmentSpec, Clahe
from dali_backend.transforms import Grayscale, RandomHorizontalFlip, RandomRotation, Resize
from dali_backend._own import own

ops = own("fallback.ops")


def diff_stats(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> dict:
    """mean / p99.9 / max of |a - b| over all pixels of paired images (shapes must agree), and how many
    differ by more than 2 levels (``above2``)."""
    diffs = []
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            raise AssertionError(f"shape mismatch {x.shape} vs {y.shape}")
        diffs.append(np.abs(x.astype(np.int32) - y.astype(np.int32)).ravel())  # uint16 images too
    d = np.concatenate(diffs) if diffs else np.zeros(0)
    if d.size == 0:
        return {"mean": 0.0, "p999": 0.0, "max": 0, "pixels": 0, "above2": 0}
    return {"mean": float(d.mean()), "p999": float(np.percentile(d, 99.9)), "max": int(d.max()), "pixels": int(d.size),
            "above2": int((d > 2).sum())}


def _run(graph_fn, inputs: list, device: str, batch_size: int):
    """Run a one-op DALI pipeline over ``inputs`` (tuples of per-sample arrays), return output arrays."""
    from nvidia.dali import pipeline_def

    n = len(inputs)
    gpu = device == "gpu"

    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=0 if gpu else None, exec_dynamic=True, enable_conditionals=True,
                  prefetch_queue_depth=1)
    def pipe():
        return graph_fn(gpu)

    outs = []
    p = pipe()
    p.build()
    for start in range(0, n, batch_size):
        chunk = inputs[start:start + batch_size]
        feed = list(zip(*chunk))
        for name_i, values in enumerate(feed):
            try:
                p.feed_input(f"in{name_i}", list(values))
            except KeyError:  # an input the graph does not use (pruned)
                pass
        (res,) = p.run()
        if gpu:
            res = res.as_cpu()
        outs += [np.array(res[i]) for i in range(len(chunk))]
    return outs


def _src(i: int, gpu: bool, layout: str | None = "HWC"):
    from nvidia.dali import fn

    x = fn.external_source(name=f"in{i}", layout=layout) if layout else fn.external_source(name=f"in{i}")
    return x.gpu() if gpu and layout else x


def test_images(seed: int = 0) -> list[np.ndarray]:
    """Textured gray images of awkward sizes (and one large), as decoded uint8 HxW."""
    from dali_backend.core.synthetic import make_image

    rng = np.random.default_rng(seed)
    imgs = [cv2.cvtColor(make_image(seed, "scratch", 0, 640, 480), cv2.COLOR_BGR2GRAY),
            cv2.cvtColor(make_image(seed, "dent", 1, 2000, 40), cv2.COLOR_BGR2GRAY)]
    for h, w in [(1, 1), (7, 5), (33, 257)]:
        imgs.append(rng.integers(0, 256, (h, w), dtype=np.uint8))
    return imgs


# Bounds per kind of row, uint8 levels (mean, p99.9, max; None: published, not bounded). Why each:
# * decode rows compare two decoders. On CPU operators DALI runs libjpeg-turbo like OpenCV: exact.
#   On the GPU nvJPEG (CUDA or the hardware engine) is another decoder: DALI's own tests allow a mean
#   difference of 4 between its CPU and mixed decoders, and 1 with fancy chroma upsampling, which the
#   loader turns on; that is the bound here.
# * op rows feed both sides the *same decoded pixels*, so they measure the operators alone: the
#   project's promise (mean <= 0.05, p99.9 <= 2) on both devices. On the GPU DALI's kernels round
#   exact ties half to even where its CPU kernels (and the fallback) round half up: at most 1 level at
#   a tie; the "op:jitter-ties" row makes half of all levels ties and says how many move.
# * end to end runs both loaders on the same files: the decoder's difference plus the operators'.
BOUNDS: dict[tuple[str, str], tuple[float | None, float | None, int | None]] = {
    ("decode", "cpu"): (0.0, 0.0, 0), ("decode", "gpu"): (1.0, None, None),
    ("op", "cpu"): (0.05, 2.0, None), ("op", "gpu"): (0.05, 2.0, None),
    ("transform", "cpu"): (0.05, 2.0, None), ("transform", "gpu"): (0.05, 2.0, None),
    ("end-to-end", "cpu"): (0.05, 2.0, None), ("end-to-end", "gpu"): (1.05, None, None),
    # decode_bits=16 through both loaders (flip, resize, rotation at 16 bits): RandomRotation.tolerance16(),
    # in 16-bit levels; on the GPU not measured yet, so no bound is promised
    ("end-to-end16", "cpu"): (None, None, RandomRotation.tolerance16()), ("end-to-end16", "gpu"): (None, None, None),
}


def bound(row: str, device: str) -> tuple[float | None, float | None, int | None]:
    """The (mean, p99.9, max) bound of row ``row`` (``"decode:rgb"``, ``"op:resize"``, ...) on ``device``;
    a ``transform16:Name#k:color`` row: the operation's declared ``tolerance16()`` (16-bit levels, DALI's CPU
    operators; the GPU's is not measured yet: no bound)."""
    kind = row.split(":", 1)[0]
    if kind == "transform16":
        from dali_backend.transforms import REGISTRY

        return (None, None, REGISTRY[row.split(":")[1].split("#", 1)[0]].tolerance16() if device == "cpu" else None)
    return BOUNDS[(kind, device)]


def over_bound(row: str, stats: dict, device: str) -> list[str]:
    """What in ``stats`` exceeds the row's bound (empty when within it)."""
    over = []
    for key, limit in zip(("mean", "p999", "max"), bound(row, device)):
        if limit is not None and stats[key] > limit:
            over.append(f"{key} {stats[key]:g} > {limit:g}")
    return over


def operation_checks(device: str = "cpu", images: list[np.ndarray] | None = None,
                     spec: AugmentSpec | None = None) -> dict:
    """``{row: () -> stats}``: decoders (``decode:*``) and operators fed the same pixels (``op:*``),
    DALI (``device``) against the fallback. On the GPU the decoder rows cover nvJPEG on CUDA
    (``hw_decoder_load=0``), the hardware engine (``1``) and a region decode."""
    from nvidia.dali import fn, types

    from dali_backend.transforms.clahe_graph import clahe_like_opencv
    from dali_backend.transforms.color import jitter_lut

    spec = spec or AugmentSpec()
    images = images if images is not None else test_images()
    gray = [im[:, :, None] for im in images]
    clahe = spec.clahe or Clahe()
    h, w = spec.height, spec.width
    small = [ops.resize(im, h, w) for im in images]
    angles = [np.array(a, np.float32) for a in np.linspace(-spec.rotate_deg or -5, spec.rotate_deg or 5, len(small))]
    bs = [np.array(v, np.float32) for v in np.linspace(0.9, 1.1, len(small))]
    cs = [np.array(v, np.float32) for v in np.linspace(1.1, 0.9, len(small))]

    def encoded(color: str) -> list[np.ndarray]:
        srcs = images if color == "gray" else [cv2.applyColorMap(im, cv2.COLORMAP_JET) for im in images]
        return [np.frombuffer(cv2.imencode(".jpg", im, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes(), np.uint8)
                for im in srcs]

    def decode_args(gpu: bool, hw_load: float | None) -> dict:
        if not gpu:
            return {"device": "cpu"}
        args = {"device": "mixed", "jpeg_fancy_upsampling": True}  # as the loader decodes
        return args | ({"hw_decoder_load": hw_load} if hw_load is not None else {})

    def decode(color: str, hw_load: float | None = None):
        data = encoded(color)
        out_type = types.GRAY if color == "gray" else types.RGB
        got = _run(lambda gpu: fn.decoders.image(_src(0, False, None), output_type=out_type,
                                                 **decode_args(gpu, hw_load)), [(e,) for e in data], device, 4)
        got = [d[:, :, 0] for d in got] if color == "gray" else got
        return diff_stats(got, [ops.decode(e, color) for e in data])

    def region(color: str):
        data = encoded(color)
        full = [ops.decode(e, color) for e in data]
        windows = [((x.shape[0] // 3, x.shape[1] // 5), (max(1, x.shape[0] // 2), max(1, x.shape[1] // 2))) for x in full]
        out_type = types.GRAY if color == "gray" else types.RGB
        got = _run(lambda gpu: fn.decoders.image_slice(_src(0, False, None), start=_src(1, False, None),
                                                       shape=_src(2, False, None), axis_names="HW", output_type=out_type,
                                                       **decode_args(gpu, None)),
                   [(e, np.array(s, np.int32), np.array(z, np.int32)) for e, (s, z) in zip(data, windows)], device, 4)
        got = [d[:, :, 0] for d in got] if color == "gray" else got
        return diff_stats(got, [x[s[0]:s[0] + z[0], s[1]:s[1] + z[1]] for x, (s, z) in zip(full, windows)])

    def clahe_op(channels: int):
        srcs = gray if channels == 1 else [np.stack([g[..., 0], 255 - g[..., 0], g[..., 0] // 2], axis=-1) for g in gray]
        shapes = [np.array(x.shape[:2], np.int32) for x in srcs]
        def graph(gpu):
            hw = _src(1, False, None)
            return clahe_like_opencv(_src(0, gpu), hw[0], hw[1], clahe.tiles, float(clahe.clip_limit), channels, portable=True)

        got = _run(graph, list(zip(srcs, shapes)), device, 4)
        want = [clahe.apply(x[..., 0] if channels == 1 else x, {}).reshape(x.shape) for x in srcs]
        return diff_stats(got, want)

    def jitter(b, c, ties: str = "up"):
        got = _run(lambda gpu: fn.brightness_contrast(_src(0, gpu), brightness=_src(1, False, None),
                                                      contrast=_src(2, False, None), contrast_center=128.0),
                   [(x[:, :, None], bb, cc) for x, bb, cc in zip(small, b, c)], device, 4)
        want = [cv2.LUT(x, jitter_lut(float(bb), float(cc), 128.0, ties)) for x, bb, cc in zip(small, b, c)]
        return diff_stats([d[:, :, 0] for d in got], want)

    def jitter_ties():
        """Contrast 1.5 about 128 makes every odd level an exact tie: CPU rounds them up (the fallback's
        model), the GPU to even. Both models are reported: on the GPU ``vs_half_even`` should be 0."""
        b, c = [np.array(1.0, np.float32)] * len(small), [np.array(1.5, np.float32)] * len(small)
        stats = jitter(b, c)
        stats["vs_half_even"] = jitter(b, c, "even")["max"]
        return stats

    checks = {"decode:gray": lambda: decode("gray"), "decode:rgb": lambda: decode("rgb"),
              "decode:region-gray": lambda: region("gray"), "decode:region-rgb": lambda: region("rgb")}
    if device == "gpu":
        checks |= {"decode:gray-cuda": lambda: decode("gray", 0.0), "decode:rgb-cuda": lambda: decode("rgb", 0.0),
                   "decode:gray-hw": lambda: decode("gray", 1.0), "decode:rgb-hw": lambda: decode("rgb", 1.0)}
    return checks | {
        "op:clahe": lambda: clahe_op(1),
        "op:clahe-rgb": lambda: clahe_op(3),
        "op:resize": lambda: diff_stats(
            [d[:, :, 0] for d in _run(lambda gpu: fn.resize(_src(0, gpu), resize_x=w, resize_y=h, antialias=True,
                                                            interp_type=types.INTERP_LINEAR),
                                      [(g,) for g in gray], device, 4)], small),
        "op:rotate": lambda: diff_stats(
            [d[:, :, 0] for d in _run(lambda gpu: fn.rotate(_src(0, gpu), angle=_src(1, False, None), keep_size=True,
                                                            fill_value=0, interp_type=types.INTERP_LINEAR),
                                      [(x[:, :, None], a) for x, a in zip(small, angles)], device, 4)],
            [RandomRotation(30).apply(x, {"angle": a}) for x, a in zip(small, angles)]),
        "op:jitter": lambda: jitter(bs, cs),
        "op:jitter-ties": jitter_ties,
    }


def _examples() -> dict[str, list[str]]:
    """Each registered operation's examples, as its class declares them (``Transform.EXAMPLES``)."""
    from dali_backend.transforms import REGISTRY

    return {name: list(cls.EXAMPLES) for name, cls in REGISTRY.items()}


EXAMPLES: dict[str, list[str]] = _examples()


def example_ops(name: str) -> list:
    """The example instances of operation ``name`` (evaluated against dali_backend.transforms)."""
    from dali_backend import transforms

    return [eval(src, vars(transforms)) for src in EXAMPLES[name]]  # noqa: S307 - fixed strings above


def run_transform_dali(op, images: list[np.ndarray], params: list[dict], device: str = "cpu") -> list[np.ndarray]:
    """``op``'s DALI fragment on decoded images (HxW or HxWx3, uint8, or uint16: the graph's 16 bits before a
    ``Window``) with the given per-draw parameters."""
    from nvidia.dali import fn, types

    from dali_backend.transforms import GraphContext

    channels = 1 if images[0].ndim == 2 else 3
    bits = 16 if images[0].dtype == np.uint16 else 8
    wire = op.wire_for(channels)

    def graph(gpu):
        x = fn.external_source(name="in0", layout="HWC")
        x = x.gpu() if gpu else x
        h, w = fn.external_source(name="in1"), fn.external_source(name="in2")
        p = {q.name: fn.external_source(name=f"in{3 + k}") for k, q in enumerate(wire)}
        return op.dali(x, p, GraphContext(gpu=gpu, channels=channels, hw=(h, w), bits=bits))

    inputs = [(im if im.ndim == 3 else im[:, :, None], np.array(im.shape[0], np.int32), np.array(im.shape[1], np.int32),
               *(q.array(pr[q.name]) for q in wire)) for im, pr in zip(images, params)]
    out = _run(graph, inputs, device, 4)
    return [o[:, :, 0] if channels == 1 else o for o in out]


def rgb_images(images: list[np.ndarray]) -> list[np.ndarray]:
    """Colourful RGB versions of gray test images."""
    return [cv2.cvtColor(cv2.applyColorMap(im if im.ndim == 2 else im[..., 0], cv2.COLORMAP_JET), cv2.COLOR_BGR2RGB)
            for im in images]


def transform_checks(device: str = "cpu", images: list[np.ndarray] | None = None, draws: int = 2) -> dict:
    """``{name: () -> stats}``: every registered operation (``REGISTRY``) with each of its examples, on
    gray and RGB images, DALI (``device``) against the fallback, ``draws`` parameter draws per image."""
    from dali_backend.transforms import REGISTRY

    images = images if images is not None else test_images()
    checks = {}
    for name in sorted(REGISTRY):
        if name not in EXAMPLES:
            raise KeyError(f"operation {name} has no examples in bench.equivalence.EXAMPLES")
        for k, op in enumerate(example_ops(name)):
            for color, imgs in (("gray", images), ("rgb", rgb_images(images))):
                def check(op=op, imgs=imgs):
                    srcs = [im for im in imgs for _ in range(draws)]
                    params = [op.make_params(7, 0, i, im.shape[:2]) for i, im in enumerate(srcs)]
                    got = run_transform_dali(op, srcs, params, device)
                    return diff_stats(got, [op.apply(im, p) for im, p in zip(srcs, params)])

                checks[f"{name}#{k}:{color}"] = check
    return checks


def test_images16(seed: int = 0) -> list[np.ndarray]:
    """uint16 HxW images: the synthetic scene at 16 and at 12 bits (values below 4096), 16-bit noise of an
    awkward size and a 1x1 image."""
    from dali_backend.core.synthetic import make_image

    rng = np.random.default_rng(seed)
    return [make_image(seed, "scratch", 0, 320, 240, color=False, bit_depth=16),
            make_image(seed, "dent", 1, 200, 150, color=False, bit_depth=12),
            rng.integers(0, 65536, (61, 77), dtype=np.uint16), rng.integers(0, 65536, (1, 1), dtype=np.uint16)]


def transform16_checks(device: str = "cpu", images: list[np.ndarray] | None = None, draws: int = 2) -> dict:
    """``{name: () -> stats}`` as :func:`transform_checks`, for the operations that take uint16 images
    (``16 in DEPTHS``, the ``Window`` aside), on 16-bit gray and RGB images: differences in 16-bit levels."""
    from dali_backend.transforms import REGISTRY, Window

    images = images if images is not None else test_images16()
    rgb = [np.dstack([im, im[::-1, ::-1], np.roll(im, 7, axis=1)]) for im in images]
    checks = {}
    for name in sorted(n for n, cls in REGISTRY.items() if 16 in cls.DEPTHS and cls is not Window):
        for k, op in enumerate(example_ops(name)):
            for color, imgs in (("gray", images), ("rgb", rgb)):
                def check(op=op, imgs=imgs):
                    srcs = [im for im in imgs for _ in range(draws)]
                    params = [op.make_params(7, 0, i, im.shape[:2]) for i, im in enumerate(srcs)]
                    got = run_transform_dali(op, srcs, params, device)
                    want = [op.apply(im, p) for im, p in zip(srcs, params)]
                    if any(g.dtype != np.uint16 or w.dtype != np.uint16 for g, w in zip(got, want)):
                        raise AssertionError(f"{op!r} on uint16 images gave {got[0].dtype} (DALI) / {want[0].dtype}")
                    return diff_stats(got, [w.reshape(g.shape) for g, w in zip(got, want)])

                checks[f"{name}#{k}:{color}"] = check
    return checks


def compare_operations(device: str = "cpu", images: list[np.ndarray] | None = None,
                       spec: AugmentSpec | None = None) -> dict[str, dict]:
    """Per-operation agreement of DALI (``device``) with the fallback on gray images (CLAHE also RGB)."""
    return {name: check() for name, check in operation_checks(device, images, spec).items()}


def compare_end_to_end(dataset, draws, device: str = "cpu", batch_size: int = 8) -> dict:
    """Run ``draws`` through DaliLoader (``device``) and the fallback with a uint8 spec; compare pixels. A spec
    with uint16 batches (``decode_bits=16``): its float output with mean 0 and std 1, compared in 16-bit levels
    (``rint(x * 65535)`` is each uint16 value: one normalisation on both sides)."""
    import dataclasses

    import torch

    from dali_backend import DaliLoader
    from dali_backend.facade.loader import FallbackLoader

    ImageDataset = own("fallback.dataset").ImageDataset

    sixteen = dataset.spec.batch_bits == 16
    c = dataset.spec.out_channels
    spec = dataclasses.replace(dataset.spec, **({"mean": (0.0,) * c, "std": (1.0,) * c} if sixteen else {"dtype": "uint8"}))
    ds = ImageDataset(dataset.index, spec, seed=dataset.seed)
    dali = DaliLoader(ds, batch_size=batch_size, sampler=draws, device="cuda" if device == "gpu" else "cpu",
                      backend="dali", num_workers=2)
    try:
        got = [(x.cpu(), y.cpu()) for x, y in dali]
    finally:
        dali.close()
    ref = list(FallbackLoader(ds, batch_size=batch_size, sampler=draws))
    labels_equal = all(torch.equal(a[1], b[1]) for a, b in zip(got, ref)) and len(got) == len(ref)

    def levels(x: torch.Tensor) -> np.ndarray:
        return np.rint(x.numpy().astype(np.float64) * 65535) if sixteen else x.numpy()

    stats = diff_stats([levels(x) for x, _ in got], [levels(x) for x, _ in ref])
    stats["labels_equal"] = labels_equal
    return stats


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.equivalence [--device cpu|gpu] [--json PATH]``: print the agreement table."""
    import argparse
    import json
    import tempfile
    import warnings

    from dali_backend import SampleIndex, WeightedSampler
    from dali_backend.core.synthetic import generate_defect_dataset
    ImageDataset = own("fallback.dataset").ImageDataset

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--images", type=int, default=48)
    p.add_argument("--size", default="1024x768")
    p.add_argument("--json")
    p.add_argument("--transforms", action="store_true",
                   help="also every operation of dali_backend.transforms with each example (gray and RGB)")
    p.add_argument("--bit-depth", type=int, choices=[8, 16], default=8,
                   help="16: also every operation that takes uint16 images on 16-bit images (transform16: rows, "
                        "16-bit levels)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", module="nvidia")
    rows: dict[str, dict] = {}
    print(f"{'comparison (DALI ' + args.device + ' vs fallback)':40s} {'mean':>9s} {'p99.9':>6s} {'max':>4s} {'pixels':>10s}"
          "  bound (decode: decoders alone; op, transform: same decoded pixels on both sides)", flush=True)

    def record(name: str, check) -> None:
        """Measure one row, print it and rewrite the JSON at once: a failing row never hides the others."""
        try:
            s = rows[name] = check()
            over = s["over_bound"] = over_bound(name, s, args.device)
            verdict = "OVER: " + ", ".join(over) if over else "within " + _bound_text(name, args.device)
            print(f"{name:40s} {s['mean']:9.5f} {s['p999']:6.2f} {s['max']:4d} {s['pixels']:10d}  {verdict}", flush=True)
        except Exception as e:  # noqa: BLE001 - reported in the table and the JSON
            rows[name] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"{name:40s} FAILED: {rows[name]['error'][:300]}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=2)

    for name, check in operation_checks(args.device).items():
        record(name, check)
    if args.transforms:
        for name, check in transform_checks(args.device).items():
            record(f"transform:{name}", check)
    if args.bit_depth == 16:
        for name, check in transform16_checks(args.device).items():
            record(f"transform16:{name}", check)
    w, h = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        root = generate_defect_dataset(tmp, n=args.images, size=(w, h), seed=5, progress=False)
        index = SampleIndex.from_folder(root, progress=False)
        for color in ("gray", "rgb"):
            ds = ImageDataset(index, AugmentSpec(color=color), seed=3)
            record(f"end-to-end:{color}",
                   lambda ds=ds: compare_end_to_end(ds, WeightedSampler(index, seed=1), device=args.device))
        if args.bit_depth == 16:  # a float output from all 16 bits, no Window (AugmentSpec(decode_bits=16))
            root16 = generate_defect_dataset(f"{tmp}/png16", n=args.images, size=(w, h), seed=5, progress=False,
                                             format="png", bit_depth=16)
            index16 = SampleIndex.from_folder(root16, progress=False)
            for color, first in (("gray", [Grayscale()]), ("rgb", [])):
                ds = ImageDataset(index16, AugmentSpec(ops=first + [RandomHorizontalFlip(), Resize((256, 256)),
                                                                    RandomRotation(5)], decode_bits=16), seed=3)
                record(f"end-to-end16:{color}",
                       lambda ds=ds: compare_end_to_end(ds, WeightedSampler(index16, seed=1), device=args.device))
    failed = [k for k, v in rows.items() if "error" in v or v.get("over_bound")]
    return 1 if failed else 0


def _bound_text(row: str, device: str) -> str:
    parts = [f"{k} <= {v:g}" for k, v in zip(("mean", "p99.9", "max"), bound(row, device)) if v is not None]
    return ", ".join(parts) + (" (16-bit levels)" if row.startswith(("transform16:", "end-to-end16:")) else "")


if __name__ == "__main__":
    raise SystemExit(main())
