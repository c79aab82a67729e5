"""Command line: ``python -m dali_backend {demo,index,split,preview,bench}`` (also installed as ``dali-backend``).

Every user error is one line on stderr naming the argument, the value and the fix, with exit
status 2 (see :mod:`dali_backend.cli.cliargs`). Results go to stdout once; the library's own log lines
(index summaries, backend choice) go to stderr, ``-q`` hides them and ``-v`` adds debug lines.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from pathlib import Path

from .cliargs import (OneLineParser, operation_list, add_index_load_arguments, class_list, data_or_index, default_cache,
                      dir_or_url, existing_dir, fraction, index_file, int_range, keyword_rules, load_data, output_dir,
                      output_file, positive_int, run_command, size_wxh, text_encoding, verbosity_parent, milliseconds,
                      workers_count, disk_bytes, printable)
from ..errors import FallbackWarning, FilesNotIndexedWarning
from ..facade.executors import Engine, backend_choices
from ..index import check_output_path, write_atomic
from .demo import cmd_demo, demo_spec
from .pictures import MAX_PREVIEW_DRAWS, cmd_preview, save_preview
from .targetflags import (SYNTHETIC, TARGET_FLAGS, add_target_arguments, indexed_with_targets, load_data_with_targets,
                          mask_rule)

log = logging.getLogger("dali_backend.cli")

__all__ = ["build_parser", "default_cache", "demo_spec", "main", "save_preview"]



# Options of `index` that apply to one way of labelling only: (attribute, flag, the builders that take it).
_INDEX_ONLY_FOR = (
    ("split", "--split", ("folder", "manifest")),
    ("classes", "--classes", ("folder", "manifest")),
    ("path_column", "--path-column", ("manifest",)),
    ("label_column", "--label-column", ("manifest",)),
    ("split_column", "--split-column", ("manifest",)),
    ("encoding", "--encoding", ("manifest",)),
    ("allow_outside_symlinks", "--allow-outside-symlinks", ("folder", "keywords")),
)
_INDEX_HOW = {"folder": "class folders (the default)", "manifest": "--manifest",
              "keywords": "--keywords/--keyword-rules"}


def _check_index_flags(args) -> str:
    """Which builder the flags of ``index`` ask for; a ConfigError for a flag that builder does not take."""
    from ..errors import ConfigError

    keywords = args.keywords or args.keyword_rules is not None
    if args.manifest and keywords:
        raise ConfigError(f"--manifest {args.manifest} labels the files already; drop --keywords/--keyword-rules")
    how = "manifest" if args.manifest else "keywords" if keywords else "folder"
    for attr, flag, takers in _INDEX_ONLY_FOR:
        value = getattr(args, attr)
        if value is None or value is False or how in takers:
            continue
        if how == "keywords" and attr == "classes":
            raise ConfigError(f"{flag} does not apply with {_INDEX_HOW[how]}: the classes are the keys of the keyword "
                              "rules (sorted); drop --classes, or name the classes in --keyword-rules")
        if how == "keywords" and attr == "split":
            raise ConfigError(f"{flag} {args.split} does not apply with {_INDEX_HOW[how]} (keyword labelling has no "
                              f"splits); drop it, or pass the split's folder as ROOT ({args.root}/{args.split})")
        if how == "manifest" and attr == "allow_outside_symlinks":
            raise ConfigError(f"{flag} does not apply with --manifest: every manifest entry must resolve inside ROOT; "
                              "drop it, or pass as ROOT a folder that contains the files")
        where = " or ".join(_INDEX_HOW[t] for t in takers)
        raise ConfigError(f"{flag} applies to {where} only; drop it, or pass --manifest FILE (a CSV)"
                          if takers == ("manifest",) else f"{flag} applies to {where} only; drop it")
    return how


DEFAULT_VERIFY, DEFAULT_MAX_PIXELS = "header", 100_000_000  # the flags' defaults (None: not given)


def _index_from_args(args, how: str):
    """The index the flags ask for: the builder of ``how`` and the target flags' masks and boxes (or, with
    boxes alone, the annotated images: :func:`~.targetflags.indexed_with_targets`)."""
    common = {"verify": args.verify or DEFAULT_VERIFY, "max_pixels": args.max_pixels or DEFAULT_MAX_PIXELS,
              "workers": args.workers}
    labelled = how != "folder" or args.split is not None or args.classes is not None
    return indexed_with_targets(args, args.root, lambda: _plain_index(args, how, common), labelled, **common)


def _plain_index(args, how: str, common: dict):
    from ..index import SampleIndex

    if how == "manifest":
        return SampleIndex.from_manifest(args.manifest, root=args.root, split=args.split, classes=args.classes,
                                         path_column=args.path_column, label_column=args.label_column,
                                         split_column=args.split_column, encoding=args.encoding, **common)
    if how == "keywords":
        return SampleIndex.from_keywords(args.root, **({"rules": args.keyword_rules} if args.keyword_rules else {}),
                                         allow_outside_symlinks=args.allow_outside_symlinks, **common)
    return SampleIndex.from_folder(args.root, split=args.split, classes=args.classes,
                                   allow_outside_symlinks=args.allow_outside_symlinks, **common)


# Flags that say how to build an index: an update takes them from the index (its recorded source).
_BUILD_FLAGS = (*_INDEX_ONLY_FOR, ("manifest", "--manifest", ()), ("keywords", "--keywords", ()),
                ("keyword_rules", "--keyword-rules", ()), ("verify", "--verify", ()), ("max_pixels", "--max-pixels", ()),
                *((attr, flag, ()) for attr, flag in TARGET_FLAGS))  # the targets are read again as recorded


def _update_index(args) -> int:
    """``index --update INDEX``: walk the index's root again and re-check only what changed."""
    from ..errors import ConfigError
    from ..index import INDEX_CLI_FLAGS, SampleIndex, command_line
    from ..index.update import update_index

    given = [flag for attr, flag, _ in _BUILD_FLAGS if getattr(args, attr) not in (None, False)]
    if given:
        raise ConfigError(f"{', '.join(given)} cannot be combined with --update: the index records how it was built "
                          f"and is updated the same way; drop {'it' if len(given) == 1 else 'them'}, or build a new "
                          "index with them: dali-backend index ROOT --out NEW.npz ...")
    out = args.out or args.update
    report = Path(str(out) + ".rejected.csv")
    check_output_path(report, "rejected-files report")
    t0 = time.perf_counter()
    with command_line(INDEX_CLI_FLAGS):
        old = SampleIndex.load(args.update, root=args.root, check="none")  # changed files are what an update is for
        index, what = update_index(old, workers=args.workers)
    log.debug("index updated in %.2f s", time.perf_counter() - t0)
    index.save(out)
    print(printable(f"index of {len(index)} files written to {out} ({what})"))
    _print_targets(index)
    _write_rejected(index, report)
    return 0


def _write_rejected(index, report: Path) -> None:
    if index.rejected or index.ignored_files:
        write_atomic(report, lambda f: f.write(_rejected_csv(index.rejected, index.ignored_files)),
                     "rejected-files report")
        listed = " and ".join(f"{n} {what} file{'s' if n != 1 else ''}" for n, what in
                              ((len(index.rejected), "rejected"), (len(index.ignored_files), "ignored")) if n)
        print(printable(f"{listed} listed in {report}"))


def cmd_index(args) -> int:
    from ..errors import ConfigError
    from ..index import INDEX_CLI_FLAGS, command_line

    if args.update is not None:
        return _update_index(args)
    if args.root is None or args.out is None:
        missing = " and ".join(x for x, v in (("ROOT", args.root), ("--out OUT", args.out)) if v is None)
        raise ConfigError(f"index needs {missing}: dali-backend index ROOT --out index.npz (or --update INDEX to "
                          "update an index)")
    how = _check_index_flags(args)
    report = Path(str(args.out) + ".rejected.csv")
    check_output_path(report, "rejected-files report")  # --out itself was checked by output_file
    t0 = time.perf_counter()
    with command_line(INDEX_CLI_FLAGS), warnings.catch_warnings():  # library errors name this command's flags
        warnings.simplefilter("ignore", FilesNotIndexedWarning)  # said by the log line (a WARNING: shown unless -q)
        index = _index_from_args(args, how)  # the library logs the summary (stderr; hidden by -q)
    log.debug("index built in %.2f s", time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    index.save(args.out)
    print(printable(f"index of {len(index)} files written to {args.out}"))
    _print_targets(index)
    _write_rejected(index, report)
    return 0


def _print_targets(index) -> None:
    from ..index.report import targets_text

    line = targets_text(index)
    if line:
        print(line)


def _rejected_csv(rejected, ignored=()) -> bytes:
    """``path,reason`` CSV of rejected files, then ignored ones (reason ``ignored: <why>``, e.g.
    ``ignored: not .jpg/.jpeg``); a name that is not UTF-8 on disk keeps its bytes."""
    def cell(text: str) -> str:
        return '"' + text.replace('"', '""') + '"'

    lines = (["path,reason"] + [f"{cell(r.path)},{cell(r.reason)}" for r in rejected]
             + [f"{cell(r.path)},{cell('ignored: ' + r.reason)}" for r in ignored])
    return disk_bytes("\n".join(lines) + "\n")


def cmd_pack(args) -> int:
    from ..storage.pack import INDEX_NAME, pack

    index = load_data(args.data, args.root, args.no_check)
    packed = pack(index, args.out, shard_bytes=args.shard_mb << 20)
    print(printable(f"{len(packed)} samples packed into {len(packed.shards.names)} shards in {args.out}; index: "
                 f"{args.out / INDEX_NAME}"))
    return 0


def cmd_split(args) -> int:
    index = load_data(args.index, args.root, args.no_check, arg="index")
    train, val = index.split(args.val_fraction, seed=args.seed, stratify=args.stratify)
    check_output_path(args.val_out, "--val-out")  # both refused before either is written
    for out, part in ((args.train_out, train), (args.val_out, val)):
        out.parent.mkdir(parents=True, exist_ok=True)
        part.save(out)
    for name, part in (("train", train), ("val", val)):
        counts = ", ".join(f"{c} {k}" for c, k in zip(part.classes, part.class_counts()))
        print(printable(f"{name}: {len(part)} files ({counts})"))
    return 0


def cmd_diagnose(args) -> int:
    """Run ``--batches`` batches as a training loop would (waiting ``--step-ms`` per batch) and print
    ``loader.report()`` and the metrics (see :mod:`dali_backend.telemetry`)."""
    import json

    from .._own import own
    from ..core.augment import AugmentSpec
    from ..facade.loader import DaliLoader
    from ..sampling.sampler import WeightedSampler

    index = load_data_with_targets(args)
    spec = AugmentSpec(ops=args.ops) if args.ops else AugmentSpec(size=args.size)
    ds = own("fallback.dataset").ImageDataset(index, spec)
    sampler = WeightedSampler(index, num_samples=args.batches * args.batch_size, seed=0)
    with warnings.catch_warnings():  # the report names the backend and why
        warnings.simplefilter("ignore", FallbackWarning)
        loader = DaliLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                            device=args.device, backend=args.backend)
    with loader:
        for _ in loader:
            if args.step_ms > 0:
                time.sleep(args.step_ms / 1e3)
        metrics = loader.metrics()
        report = loader.report(metrics)
    print(report)
    if loader.autotune is not None:
        print(f"autotune: num_workers={loader.num_workers} (img/s by setting: {loader.autotune['table']})")
    shown = {k: v for k, v in metrics.items() if k.startswith("stage_ms.") and v is not None}
    print("ms per image: " + ", ".join(f"{k[len('stage_ms.'):]} {v:.2f} ({metrics['how'].get(k[9:], '')})"
                                       for k, v in shown.items()))
    if args.json:
        write_atomic(args.json, lambda f: f.write(json.dumps(metrics, indent=1).encode()), "metrics file")
        print(f"metrics: {args.json}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .._own import own

    add_bench_arguments = own("bench.__main__").add_arguments

    common = verbosity_parent()
    p = OneLineParser(prog="dali-backend", description="Fast, trustworthy JPEG loading for PyTorch (DALI + CPU fallback).",
                      epilog="-q/-v work before or after the subcommand.")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging: resolved arguments, backend choice, timings")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, func, help: str, **kw) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help, description=help, parents=[common], **kw)
        s.set_defaults(func=func, prog=s.prog)
        return s

    d = add("demo", cmd_demo, "generate the synthetic defect set, index it, train-style epochs, print img/s, write a preview")
    d.add_argument("--out", type=output_dir, default=Path("out/demo"), help="folder for the index and preview.png (default out/demo)")
    d.add_argument("--data", type=existing_dir, help="use this folder (root/<class>/*.jpg) instead of synthetic data")
    d.add_argument("--cache", type=output_dir, default=default_cache(),
                   help="where synthetic data is generated (default ~/.cache/dali_backend)")
    d.add_argument("--images", type=positive_int, default=400, help="synthetic images (default 400)")
    d.add_argument("--size", type=size_wxh, default=(1024, 768), help="synthetic image size WxH (default 1024x768)")
    d.add_argument("--quality", type=int_range(1, 100), default=92, help="JPEG quality 1-100 (default 92)")
    d.add_argument("--format", default="jpeg", choices=["jpeg", "png", "bmp", "tiff", "webp"],
                   help="synthetic images' format (default jpeg)")
    d.add_argument("--bit-depth", type=int, default=8, choices=[8, 12, 16],
                   help="synthetic images' bits per value: 12 or 16 with --format png or tiff (read through a Window)")
    d.add_argument("--out-size", type=positive_int, default=256, help="square output size in pixels (default 256)")
    d.add_argument("--masks", type=mask_rule, nargs="?", const=SYNTHETIC, metavar="RULE",
                   help="alone: a synthetic MVTec AD category instead, (image, mask) batches of its test split "
                        "(--images, --size, --out-size apply); with --data: pair each image with its mask by RULE "
                        "(mvtec or suffix:SUFFIX, as index --masks) and run (image, mask) batches of that data")
    d.add_argument("--epochs", type=positive_int, default=3, help="epochs to run (default 3)")
    d.add_argument("--batch-size", type=positive_int, default=32)
    d.add_argument("--workers", type=int_range(0), default=os.cpu_count() or 1, help="loader workers / DALI threads")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.add_argument("--backend", default="auto", choices=backend_choices())
    d.add_argument("--seed", type=int, default=0)
    add_target_arguments(d, masks=False)

    i = add("index", cmd_index, "index a folder, a manifest or keyword-labelled files; report rejects",
            epilog="Labels come from class folders (default), a --manifest, or --keywords in file and folder "
                   "names (default rules: ok/normal/good -> normal, scratch/scr -> scratch, dent/pit -> dent; "
                   "--keyword-rules replaces them). An ASCII keyword matches a whole word; any other keyword (e.g. "
                   "划痕) matches inside a name. Errors name these flags; rejected and ignored files are listed in "
                   "OUT.rejected.csv. --update INDEX walks the index's root again as it was built and reads only new "
                   "and changed files (samples still present keep their order, new ones are appended).")
    i.add_argument("root", type=dir_or_url, metavar="ROOT", nargs="?",
                   help="data root (ROOT/<class>/**/*.jpg, or the folder the manifest's paths are relative to): a "
                        "folder or an s3://bucket/prefix URL (credentials and endpoint from AWS_* variables or "
                        "an AWS profile); with --update, only if the data moved since indexing")
    i.add_argument("--out", type=output_file, help="index file to write (.npz); with --update, default INDEX itself")
    i.add_argument("--update", type=index_file, metavar="INDEX",
                   help="update this index file: re-walk its root, read only new and changed files, drop removed ones")
    i.add_argument("--split", help="split folder (ROOT/<split>/<class>/...) or value of the manifest's split column")
    i.add_argument("--classes", type=class_list, metavar="NAMES",
                   help="class names in id order, comma-separated (or a JSON list); class folders or manifest labels "
                        "not listed are an error (default: sorted names found)")
    i.add_argument("--manifest", help="JSON {path: class} or CSV path,label[,split] (header names are recognised)")
    i.add_argument("--path-column", metavar="NAME", help="CSV manifest: header name of the path column")
    i.add_argument("--label-column", metavar="NAME", help="CSV manifest: header name of the label column")
    i.add_argument("--split-column", metavar="NAME", help="CSV manifest: header name of the split column")
    i.add_argument("--encoding", type=text_encoding, help="manifest text encoding, e.g. gbk or cp1252 (default UTF-8)")
    i.add_argument("--keywords", action="store_true", help="label by keywords in file and folder names")
    i.add_argument("--keyword-rules", type=keyword_rules, metavar="JSON",
                   help="keyword rules as a JSON object {class: [word, ...]} (implies --keywords); "
                        "e.g. '{\"scratch\": [\"scratch\", \"划痕\"]}'")
    i.add_argument("--allow-outside-symlinks", action="store_true",
                   help="follow symlinks that leave ROOT (refused by default; not with --manifest)")
    i.add_argument("--verify", choices=["header", "decode", "none"],
                   help="header: check markers and sizes (default); decode: also decode every file; none: trust them")
    i.add_argument("--max-pixels", type=positive_int,
                   help=f"refuse files whose frame declares more pixels (default {DEFAULT_MAX_PIXELS})")
    i.add_argument("--workers", type=positive_int, default=8, help="threads reading file headers (default 8)")
    add_target_arguments(i)

    k = add("pack", cmd_pack, "write a data set into tar shards (WebDataset layout) with an index of (shard, offset, "
                              "size): one range read per sample",
            epilog="Upload OUT and load OUT/index.npz with --root s3://bucket/prefix (SampleIndex.load(..., "
                   "root=...)) to read the shards from a bucket.")
    k.add_argument("data", type=data_or_index, help="data root (a folder or an s3:// URL) or an index file")
    k.add_argument("--out", type=output_dir, required=True, help="folder for the shards and index.npz")
    k.add_argument("--shard-mb", type=positive_int, default=256, help="close a shard at this many MB of samples "
                                                                      "(default 256)")
    add_index_load_arguments(k)

    s = add("split", cmd_split, "split an index into train/val, stable as the data grows")
    s.add_argument("index", type=index_file, help="index file written by `index`")
    s.add_argument("--val-fraction", type=fraction, default=0.2, help="share of files in val, in (0, 1) (default 0.2)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--stratify", action="store_true",
                   help="exactly the val fraction of every class (rounded), instead of a per-file hash threshold "
                        "(each class's share then varies; a file keeps its side as the data grows)")
    s.add_argument("--train-out", type=output_file, required=True)
    s.add_argument("--val-out", type=output_file, required=True)
    add_index_load_arguments(s)

    v = add("preview", cmd_preview, "PNG: original, fallback and DALI outputs and their difference side by side, with "
                                    "labels, parameters and the class histogram of one sampler epoch")
    v.add_argument("data", type=data_or_index, help="data root (root/<class>/*.jpg) or an index file")
    v.add_argument("--out", type=output_file, default=Path("preview.png"), help="PNG to write (default preview.png)")
    v.add_argument("--n", type=int_range(1, MAX_PREVIEW_DRAWS), default=6,
                   help=f"draws shown, 1 to {MAX_PREVIEW_DRAWS} (default 6)")
    v.add_argument("--size", type=positive_int, default=192, help="tile size in pixels (default 192)")
    v.add_argument("--color", default="gray", choices=["gray", "rgb"])
    v.add_argument("--fit", default="stretch", choices=["stretch", "letterbox"])
    v.add_argument("--backend", default="auto", choices=["auto", Engine.TORCH.value], help="torch: skip the DALI column")
    v.add_argument("--ops", type=operation_list, default=None, help="an operation list instead of the preset (then --size/--color/--fit are "
                                               "ignored): the list you train with, e.g. 'RandomResizedCrop(192), "
                                               "RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4), Normalize(...)' "
                                               "(shown before normalisation; crop windows drawn on the original)")
    v.add_argument("--seed", type=int, default=0)
    add_index_load_arguments(v)
    add_target_arguments(v)

    g = add("diagnose", cmd_diagnose, "run a few batches with your data and settings and say in plain words what "
            "limits throughput (the training loop, storage, the loader's CPU and which stage), with the numbers "
            "and what to change")
    g.add_argument("data", type=data_or_index, help="data root (root/<class>/*.jpg) or an index file")
    g.add_argument("--batches", type=positive_int, default=30, help="batches to run (default 30)")
    g.add_argument("--batch-size", type=positive_int, default=32)
    g.add_argument("--step-ms", type=milliseconds, default=0.0,
                   help="your training step's time per batch in ms, simulated by waiting (default 0: measure what "
                        "the loader alone can deliver)")
    g.add_argument("--workers", type=workers_count, default=0,
                   help="loader workers / DALI threads, or 'auto' to calibrate (default 0: the loader's default)")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    g.add_argument("--backend", default="auto", choices=backend_choices())
    g.add_argument("--size", type=positive_int, default=224, help="square output size of the preset (default 224)")
    g.add_argument("--ops", type=operation_list, default=None,
                   help="your training's operation list instead of the preset, e.g. 'RandomResizedCrop(224), "
                        "RandomHorizontalFlip(), Normalize(...)'")
    g.add_argument("--json", type=output_file, help="also write the metrics to this JSON file")
    add_index_load_arguments(g)
    add_target_arguments(g)

    b = sub.add_parser("bench", help="the benchmark (same as python -m bench)", parents=[common],
                       description="DaliLoader against the CPU fallback, the tutorial-style loader and the ceiling.")
    add_bench_arguments(b)
    b.set_defaults(prog=b.prog)
    sub.metavar = "{" + ",".join(sub.choices) + "}"  # the usage line and errors name every subcommand
    return p


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser(), argv, log)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
