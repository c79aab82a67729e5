"""``python -m bench``: DaliLoader against the CPU fallback, the tutorial-style loader and the ceiling.

Each contender runs in a fresh process on the same data, one after the other; the table, a JSON file
and PNG charts (matplotlib) come out. With ``--source-sizes`` the whole comparison runs once per
synthetic source size and a second chart shows each contender's ratio to the ceiling against the
size. Compare ratios from one run: the machines are noisy. ``--padding`` adds the padding fraction of
variable-size batches with and without aspect grouping (:mod:`bench.padding`).

The clip contenders (``clips-fallback``, ``clips-dali-cpu``, ``clips-dali-gpu``) run only when named
with ``--only``: clips of ``--clip-len`` 8 frames every ``--clip-step`` 4 frames, from sequences of 32
frames cut from each class's images, ``--batch-size // clip-len`` clips per batch; their img/s counts
frames (``B * T`` per batch) and is set against the same ceiling and reference (the same per-frame
work), so ``x reference`` is what clips cost over single images. See :mod:`bench.contenders`.

The arguments are defined once, in :func:`add_arguments`, and used both here and by
``dali-backend bench``; errors are handled by :func:`dali_backend.cli.cliargs.run_command` for both.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from dali_backend.cli.cliargs import (OneLineParser, add_index_load_arguments, data_or_index, default_cache, output_dir,
                                  output_file, positive_int, run_command, size_list, size_wxh, verbosity_parent)

from . import ALL_CONTENDERS, CLIP_CONTENDERS, CONTENDERS, OWN_CEILINGS, PEERS

log = logging.getLogger("bench")

# Each contender runs in a child process; it imports *our* bench even if a user's bench.py shadows it.
_CHILD = "import sys; from dali_backend._own import own; sys.exit(own('bench.__main__').main(sys.argv[1:]))"


def machine_info() -> dict:
    import cv2
    import numpy as np
    import torch

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "opencv": cv2.__version__, "numpy": np.__version__, "gpu": None}
    try:
        import nvidia.dali as dali

        info["dali"] = dali.__version__
    except ImportError:
        info["dali"] = None
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the benchmark's arguments to ``p`` (``python -m bench`` and ``dali-backend bench``)."""
    p.add_argument("--data", type=data_or_index,
                   help="folder root/<class>/*.jpg or an index file (default: synthetic 2048x1536 defect JPEGs)")
    p.add_argument("--images", type=positive_int, default=256, help="synthetic images (default 256)")
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument("--source-size", type=size_wxh, default=(2048, 1536),
                       help="synthetic image size WxH (default 2048x1536)")
    sizes.add_argument("--source-sizes", type=size_list, metavar="WxH,WxH,...",
                       help="run the whole benchmark once per synthetic size, e.g. 320x240,1024x768,2048x1536, and "
                            "chart each contender's ratio to the ceiling against the size")
    p.add_argument("--format", default="jpeg", choices=["jpeg", "png", "bmp", "tiff", "webp"],
                   help="the synthetic images' format (default jpeg; 8 bits)")
    p.add_argument("--bit-depth", type=int, default=8, choices=[8, 12, 16],
                   help="bits per value of the data (default 8); 12 or 16: synthetic --format png or tiff at that "
                        "depth, and every contender's contract after a Window(0, 2**bits - 1) (bench.contenders)")
    p.add_argument("--size", type=size_wxh, default=(256, 256), help="output size WxH (default 256x256)")
    p.add_argument("--epochs", type=positive_int, default=3, help="timed epochs after one warm-up (default 3)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, help="workers / threads (default: all cores)")
    p.add_argument("--only", nargs="*", choices=ALL_CONTENDERS, help="run only these contenders (the ceiling always "
                   "runs); the clip contenders (clips-*) run only when named here")
    p.add_argument("--peers", action="store_true", help="also run what a user would write instead (bench.peers): a "
                   "hand-written OpenCV DataLoader, albumentations, SPDL and torchdata.nodes thread pipelines, native "
                   "DALI; each peer whose package is missing is skipped with a line (pip install 'dali-backend[peers]')")
    p.add_argument("--clip-len", type=positive_int, default=8, help="clip contenders: frames per clip (default 8)")
    p.add_argument("--clip-step", type=positive_int, default=4,
                   help="clip contenders: frames between clip starts (default 4: overlapping windows)")
    p.add_argument("--json", type=output_file, help="write results here (default bench-results/bench.json)")
    p.add_argument("--png", type=output_file, help="chart file (default: next to the JSON, same name .png); with "
                                                  "--source-sizes the ratio-by-size chart")
    p.add_argument("--no-plot", action="store_true", help="no charts (runs without matplotlib)")
    p.add_argument("--breakdown", action="store_true", help="also time each stage of the contract on one core "
                   "(ms per image), to read every contender's own overhead against")
    p.add_argument("--padding", action="store_true", help="also measure variable-size batches (Resize(192, "
                   "max_size=320), pad_batch=32) on synthetic images of mixed aspect ratios: the padding fraction and "
                   "img/s without and with AspectGroupedSampler, per loader compared (bench.padding)")
    p.add_argument("--cache", type=output_dir, default=None, help="where synthetic data is generated")
    add_index_load_arguments(p)
    p.add_argument("--one", choices=ALL_CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--index", help=argparse.SUPPRESS)
    p.add_argument("--sequences", help=argparse.SUPPRESS)
    p.set_defaults(func=run)
    return p


def _child(args) -> int:
    """One contender in this process; its JSON on the last stdout line."""
    import warnings

    warnings.filterwarnings("ignore", module="nvidia")
    from .contenders import run_contender

    out_w, out_h = args.size
    res = run_contender(args.one, args.index, (out_h, out_w), args.epochs, args.batch_size, args.workers,
                        args.sequences, args.clip_len, args.clip_step, bit_depth=args.bit_depth)
    print(json.dumps(res))
    return 0


def _compile_bytecode() -> None:
    """Byte-compile this checkout's packages (``dali_backend``, ``fallback``, ``bench``) once, before the
    contenders' processes start, as a wheel install does at install time: every contender's first batch
    then includes its imports but not the compiling of an editable checkout's sources. Under
    ``PYTHONDONTWRITEBYTECODE`` (set on some CI machines) nothing else writes the bytecode, and each process
    compiled them again: about 60 ms of the fallback's first batch, against peers already compiled in
    site-packages (measured: loader creation 0.09-0.11 s, then 0.03 s)."""
    import compileall

    import dali_backend
    import fallback

    for package in (dali_backend, fallback, sys.modules[__package__]):
        try:
            compileall.compile_dir(Path(package.__file__).parent, quiet=2)
        except OSError as e:  # a read-only checkout: the processes compile as before
            log.debug("bytecode for %s not written: %s", package.__name__, e)


def _run_size(index, root, out_json: Path, png: Path | None, args, names: list[str], machine: dict) -> dict | None:
    """The comparison on one data set: every contender in its own process; writes ``out_json`` (and
    the throughput chart at ``png``); returns the JSON document. A contender that fails is reported
    (its exit status and the end of its output, in the log and in the document's ``failed``) and the
    next one runs: one failing GPU contender must not hide the others' figures."""
    from dali_backend.util.progress import track

    out_w, out_h = args.size
    index_path = out_json.with_suffix(".index.npz")
    out_json.parent.mkdir(parents=True, exist_ok=True)
    index.save(index_path)
    extra = []
    if any(n in CLIP_CONTENDERS for n in names):
        from .clipset import clip_sampler, write_sequences

        sequences = write_sequences(index, out_json.with_suffix(".sequences.csv"))
        clip_sampler(index, sequences, args.clip_len, args.clip_step)  # a ConfigError here, before any contender runs
        extra = ["--sequences", str(sequences), "--clip-len", str(args.clip_len), "--clip-step", str(args.clip_step)]
    results, failed = [], {}
    _compile_bytecode()
    for name in track(names, total=len(names), desc="bench", unit="contender"):
        cmd = [sys.executable, "-c", _CHILD, "--one", name, "--index", str(index_path), "--size", f"{out_w}x{out_h}",
               "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--workers", str(args.workers),
               "--bit-depth", str(args.bit_depth), *(extra if name in CLIP_CONTENDERS else [])]
        log.info("running %s ...", name)
        log.debug("command: %s", " ".join(cmd))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log.error("%s failed (exit status %d); the next contender runs; the end of its output:\n%s", name,
                      proc.returncode, proc.stderr[-3000:])
            failed[name] = {"exit_status": proc.returncode, "error": proc.stderr[-3000:]}
        else:
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        with open(out_json, "w") as f:  # after each contender: a run cut short keeps what it measured
            json.dump({"machine": machine, "results": results, "failed": failed, "complete": False}, f, indent=2)
        if name in failed:
            continue
        log.debug("%s: %.1f s, epochs %s img/s", name, time.perf_counter() - t0,
                  ", ".join(f"{v:.1f}" for v in results[-1]["epoch_images_per_s"]))
    ceiling = next((r["images_per_s"] for r in results if r["name"] == "ceiling"), None)
    ref = next((r for r in results if r["name"] == "reference"), None)
    for r in results:
        # The ceiling (gray decode + CLAHE, no loader) bounds what the preset's contract can reach. It is
        # no bound for the recipe (no CLAHE, its crop decoded alone): a ratio there would mean nothing.
        bounded = ceiling is not None and not r["name"].startswith("recipe-")
        r["ratio_to_ceiling"] = r["images_per_s"] / ceiling if bounded else None
        # and against the ceiling of its own executor's operators (DALI's decoder and CLAHE for dali-cpu)
        own_name = r["name"] if r["name"].startswith("ceiling") else OWN_CEILINGS.get(r["name"], "ceiling")
        own = next((o["images_per_s"] for o in results if o["name"] == own_name), None)
        r["ratio_to_own_ceiling"] = r["images_per_s"] / own if bounded and own else None
        if ref is not None and r["name"] in ("reference", *PRESET_LOADERS, *CLIP_CONTENDERS):  # the same contract
            r["ratio_to_reference"] = r["images_per_s"] / ref["images_per_s"]
            r["overhead_ms_per_image"] = 1000 * (r["cpu_s_per_image"] - ref["cpu_s_per_image"])
    from dali_backend.index.kinds import formats_text

    from .measure import PEAK_RSS_INTERVAL_S

    machine = dict(machine)
    machine["memory_sample_interval_s"] = PEAK_RSS_INTERVAL_S
    machine["data"] = {"root": str(root), "images": len(index), "mean_file_kb": float(index.sizes.mean() / 1024),
                       **size_mix(index), "output_size": [out_w, out_h], "bit_depth": args.bit_depth,
                       "formats": formats_text(index.format_ids, index.format_names, index.bit_depths)}
    tut = next((r["images_per_s"] for r in results if r["name"] == "tutorial"), None)
    print(f"\n{len(index)} images {machine['data']['source_label']} ({machine['data']['formats']}) "
          f"(~{machine['data']['mean_file_kb']:.0f} KB) -> {out_w}x{out_h}; {machine['cores']} cores ({machine['cpu']}); "
          f"GPU: {machine['gpu'] or 'none'}")
    print(f"{'name':16s} {'img/s':>8s} {'x ceiling':>9s} {'x own ceil':>10s} {'x reference':>11s} {'x tutorial':>10s} {'cpu s/img':>9s} "
          f"{'overhead ms/img':>15s} {'peak RSS MB':>11s} {'first batch s':>13s} {'RSS growth %':>12s}")
    for r in results:
        fb = "-" if r["first_batch_s"] is None else f"{r['first_batch_s']:.2f}"
        vs_tut = f"{r['images_per_s'] / tut:.1f}" if tut else "-"
        vs_ref = f"{r['ratio_to_reference']:.2f}" if "ratio_to_reference" in r else "-"
        over = f"{r['overhead_ms_per_image']:.2f}" if "overhead_ms_per_image" in r else "-"
        vs_ceil = "-" if r["ratio_to_ceiling"] is None else f"{r['ratio_to_ceiling']:.2f}"
        vs_own = "-" if r.get("ratio_to_own_ceiling") is None else f"{r['ratio_to_own_ceiling']:.2f}"
        print(f"{r['name']:16s} {r['images_per_s']:8.1f} {vs_ceil:>9s} {vs_own:>10s} {vs_ref:>11s} {vs_tut:>10s} "
              f"{r['cpu_s_per_image']:9.4f} {over:>15s} {r['peak_rss_mb']:11.0f} {fb:>13s} {r['rss_growth_pct']:12.1f}")
    for name, why in machine.get("skipped", {}).items():
        if name in PEERS:
            print(f"{name:16s} skipped: {why}")
    same = [r for r in results if "levels_difference" in r]
    if same:
        print("the same work? first batch against the fallback's pixels on the same draws, mean |difference| in "
              "levels (INTER_AREA's own in brackets): " + ", ".join(
                  f"{r['name']} {r['levels_difference']:.2f}"
                  + (f" ({r['area_resize_levels']:.2f})" if "area_resize_levels" in r else "")
                  + ("" if r["labels_match"] else " (LABELS DIFFER)") for r in same))
    for name, why in failed.items():
        last = next((line for line in reversed(why["error"].splitlines()) if line.strip()), "no output")
        print(f"{name:16s} FAILED (exit status {why['exit_status']}): {last[:200]}")
    clip_rows = [r for r in results if r["name"] in CLIP_CONTENDERS]
    if clip_rows:
        from .clipset import SEQUENCE_FRAMES

        c = clip_rows[0]
        print(f"clips-*: img/s and cpu s/img count frames: {c['clips_per_batch']} clips x {c['clip_len']} frames per "
              f"batch, a clip every {c['clip_step']} frames of sequences of {SEQUENCE_FRAMES} frames cut from each "
              f"class (a remainder joins its last); {c['clips_per_epoch']} clips = {c['frames_per_epoch']} frames per "
              f"epoch ({len(index)} images)")
    if getattr(args, "breakdown", False):
        from .contenders import stage_breakdown

        stages = stage_breakdown(index, (out_h, out_w))
        doc_stages = {k: round(v, 4) for k, v in stages.items()}
        machine["stages_ms_per_image"] = doc_stages
        print("stages, CPU ms per image on one thread (sum "
              f"{sum(stages.values()):.2f} ms): " + ", ".join(f"{k} {v:.3f}" for k, v in stages.items()))
        # the fallback's own: its CPU beyond the reference's (the same operations, as parallel, no loader)
        own = {r["name"]: r.get("overhead_ms_per_image", 1000 * r["cpu_s_per_image"] - sum(stages.values()))
               for r in results if r["name"] in ("fallback", "fallback-threads", "clips-fallback")}
        if any(r["name"] == "dali-cpu" for r in results):
            from .contenders import dali_stage_breakdown

            dali_stages = dali_stage_breakdown(index, (out_h, out_w), threads=args.workers)
            machine["dali_stages_ms_per_image"] = {k: round(v, 4) for k, v in dali_stages.items()}
            outside = stages["read"] + stages["normalize"]  # the parts of the contract outside DALI's graph
            for r in results:  # DALI's operator threads were timed in the run itself
                if r["name"].endswith("dali-cpu") and r.get("dali_operators_cpu_s_per_image") is not None:
                    own[r["name"]] = 1000 * (r["cpu_s_per_image"] - r["dali_operators_cpu_s_per_image"]) - outside
            print(f"DALI's graph on CPU operators, CPU ms per image with {args.workers} threads "
                  f"({sum(dali_stages.values()):.2f} ms; read and normalize happen outside it): "
                  + ", ".join(f"{k} {v:.3f}" for k, v in dali_stages.items()))
        machine["loader_own_ms_per_image"] = {k: round(v, 4) for k, v in own.items()}
        print("the loader's own CPU, ms per image (fallback: beyond the reference's; DALI: beyond its operator "
              "threads' CPU in the run and the read and normalize stages): "
              + ", ".join(f"{k} {v:.2f}" for k, v in own.items()))
    doc = {"machine": machine, "results": results, "failed": failed, "complete": True}
    with open(out_json, "w") as f:
        json.dump(doc, f, indent=2)
    shown = [f"results: {out_json}"]
    if png is not None and results:
        from .plots import throughput_chart

        shown.append(f"chart: {throughput_chart(results, machine, png)}")
    print("\n" + "  ".join(shown))
    return doc


PRESET_LOADERS = ("fallback", "fallback-threads", "dali-cpu", "dali-gpu")  # loaders of the reference's contract (the preset)


def size_mix(index) -> dict:
    """What the data's image sizes are, for the table, the chart and the JSON: ``source_size`` (the one
    size, or the most common), ``source_sizes`` (up to 5 ``[w, h, count]``, most common first) and
    ``source_label`` ("2048x1536", or "mixed: 2048x1536 x40, 640x480 x12 and 3 more sizes")."""
    import numpy as np

    pairs, counts = np.unique(np.stack([index.widths, index.heights], axis=1), axis=0, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    top = [[int(pairs[k][0]), int(pairs[k][1]), int(counts[k])] for k in order[:5]]
    if len(pairs) == 1:
        label = f"{top[0][0]}x{top[0][1]}"
    else:
        label = "mixed: " + ", ".join(f"{w}x{h} x{c}" for w, h, c in top[:3])
        label += f" and {len(pairs) - 3} more sizes" if len(pairs) > 3 else ""
    return {"source_size": top[0][:2], "source_sizes": top, "source_label": label}


def unavailable(names: list[str]) -> dict[str, str]:
    """Why each contender of ``names`` cannot run on this machine (DALI missing, no CUDA GPU, a peer's
    package missing)."""
    import torch

    from dali_backend.dali.devices import dali_importable

    why = {}
    no_dali = dali_importable()
    for name in names:
        if "dali" in name and no_dali:
            why[name] = no_dali
        elif name.endswith("dali-gpu") and torch.cuda.device_count() == 0:
            why[name] = "no CUDA GPU on this machine (torch.cuda.device_count() == 0)"
        elif name in PEERS:
            from .peers import missing

            if (reason := missing(name)) is not None:
                why[name] = reason
    return why


def run(args) -> int:
    """The benchmark for parsed ``args`` (see :func:`add_arguments`); 0 on success."""
    if args.one:  # child process: one contender
        return _child(args)

    from dali_backend.errors import ConfigError, IndexBuildError

    if args.data is not None and args.source_sizes:
        raise ConfigError(f"--source-sizes generates synthetic data but --data {args.data} was given; drop one of them")
    if isinstance(args.data, str):  # an s3:// URL (data_or_index): the contenders read local files
        raise ConfigError(f"--data {args.data}: this benchmark's contenders read local files; measure a bucket "
                          "against local disk with `python -m bench.storage` (a local test bucket, added latency)")
    if args.data is None and (args.root is not None or args.no_check):
        raise ConfigError("--root/--no-check apply to an index file given with --data; pass --data INDEX or drop them")
    if not args.no_plot:
        from .plots import require_matplotlib

        require_matplotlib()

    import torch

    from dali_backend import SampleIndex
    from dali_backend.cli.cliargs import load_data
    from dali_backend.core.synthetic import generate_defect_dataset

    out_json = args.json or Path("bench-results/bench.json")
    names = list(args.only or CONTENDERS)
    names += [p for p in PEERS if args.peers and p not in names]
    skipped = unavailable(names)
    skipped |= {n: f"the peers decode 8-bit files; --bit-depth {args.bit_depth} has no peer (run them at 8 bits)"
                for n in names if n in PEERS and args.bit_depth != 8}
    for name, why in skipped.items():
        if args.only or name in PEERS:  # asked for: say why it does not run (the default list skips quietly)
            log.warning("bench: skipping %s: %s", name, why)
    names = [n for n in names if n not in skipped]
    if args.only and not [n for n in names if n != "ceiling"]:
        log.error("bench: none of --only %s can run here; nothing to compare", " ".join(args.only))
        return 2
    if "ceiling" not in names:
        names = ["ceiling", *names]
    own = [OWN_CEILINGS[n] for n in names if n in OWN_CEILINGS and OWN_CEILINGS[n] not in names]
    names = [names[0], *dict.fromkeys(own), *names[1:]]  # each loader's own ceiling (DALI's operators), once
    machine = machine_info()
    machine["skipped"] = skipped
    if args.data is not None:
        index = load_data(args.data, args.root, args.no_check, progress=False, arg="--data")
        if len(index) == 0:
            raise IndexBuildError(f"--data {args.data}: no usable images (see the rejected files above); put JPEGs in "
                                  "root/<class>/, or drop --data for synthetic data")
        if index.shards is not None:  # the contenders other than the loaders open each image as a file
            raise ConfigError(f"--data {args.data}: a packed index (dali-backend pack); this benchmark's contenders "
                              "read loose files: pass the index of the folder it was packed from, or measure packed "
                              "against loose reads with `python -m bench.storage`")
        if args.bit_depth == 8 and index.bit_depths.max() > 8:  # the contracts would refuse every such image
            raise ConfigError(f"--data {args.data}: {int((index.bit_depths > 8).sum())} of {len(index)} images hold more "
                              "than 8 bits per value; pass --bit-depth 16 (or 12 for 12-bit data stored in 16)")
        png = None if args.no_plot else args.png or out_json.with_suffix(".png")
        doc = _run_size(index, index.root, out_json, png, args, names, machine)
        if args.padding:
            _padding(args, Path(args.cache or default_cache()), out_json, names)
        return 1 if doc["failed"] else 0

    sizes = args.source_sizes or [args.source_size]
    cache = Path(args.cache or default_cache())
    runs, failures = [], 0
    for w, h in sizes:
        root = cache / (f"bench-{args.images}-{w}x{h}" + ("" if args.format == "jpeg" else f"-{args.format}")
                        + ("" if args.bit_depth == 8 else f"-{args.bit_depth}bit"))
        t0 = time.perf_counter()
        generate_defect_dataset(root, n=args.images, size=(w, h), quality=92, seed=0, format=args.format,
                                bit_depth=args.bit_depth)
        log.info("data: %d synthetic %dx%d %d-bit %s files in %s (%.0f s)", args.images, w, h, args.bit_depth,
                 args.format.upper(), root, time.perf_counter() - t0)
        index = SampleIndex.from_folder(root, progress=False)
        if len(sizes) == 1:
            size_json = out_json
            png = None if args.no_plot else args.png or out_json.with_suffix(".png")
        else:
            size_json = out_json.with_name(f"{out_json.stem}-{w}x{h}.json")
            png = None if args.no_plot else size_json.with_suffix(".png")
        doc = _run_size(index, root, size_json, png, args, names, machine)
        failures += len(doc["failed"])
        runs.append({"source_size": [w, h], "output_size": list(args.size), "json": str(size_json),
                     "results": doc["results"], "failed": doc["failed"]})
    if len(sizes) > 1:
        with open(out_json, "w") as f:
            json.dump({"machine": machine, "runs": runs}, f, indent=2)
        shown = f"results by size: {out_json}"
        if not args.no_plot:
            from .plots import ratio_by_size_chart

            png = args.png or out_json.with_name(f"{out_json.stem}-sizes.png")
            shown += f"  chart: {ratio_by_size_chart(runs, machine, png)}"
        print("\n" + shown)
    if args.padding:
        _padding(args, cache, out_json, names)
    return 1 if failures else 0  # every contender ran; one that failed is reported above and in the JSON


def _padding(args, cache: Path, out_json: Path, names: list[str]) -> None:
    """``--padding``: :mod:`bench.padding`'s table for the loaders compared (the fallback without DALI),
    and its JSON beside the comparison's."""
    from .padding import run_padding

    loaders = {"fallback": "torch", "dali-cpu": "dali-cpu", "dali-gpu": "dali-gpu"}
    backends = [loaders[n] for n in names if n in loaders] or ["torch"]
    doc = run_padding(cache / f"padding-{args.images}-mixed", images=args.images, batch_size=args.batch_size,
                      workers=args.workers, epochs=args.epochs, backends=backends)
    path = out_json.with_name(f"{out_json.stem}-padding.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    print(f"\npadding results: {path}")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m bench", description="DaliLoader against the CPU fallback, the tutorial-style loader "
                      "and the ceiling.", parents=[verbosity_parent()])
    return add_arguments(p)


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, log)


if __name__ == "__main__":
    sys.exit(main())
