#!/usr/bin/env python
"""Hand-written mutants of the library's promises, each run against the tests that should catch it.

    .venv/bin/python scripts/mutants.py                 # every mutant (make mutants); minutes
    .venv/bin/python scripts/mutants.py -k sampler -k jpeg   # the mutants whose name holds a word
    .venv/bin/python scripts/mutants.py --list          # the mutants and their tests, nothing run
    .venv/bin/python scripts/mutants.py --check         # every snippet still found once (seconds)

Each mutant is one small, plausible bug: (file, the exact original snippet, the mutated snippet, the
test selection that should fail). The script copies the repository once to a temporary folder
(without .git, virtual environments and caches), applies one mutant at a time *to the copy*, runs
its selection there with this interpreter in a subprocess (``-x``, a timeout), and restores the
file in a ``finally`` block, also on Ctrl-C. The working tree is never touched: others may be
editing it. A mutant is *caught* when its tests fail, *survived* when they pass; a survivor must
either get a test or be shown equivalent (no observable change) in its ``equivalent`` note.

Why hand-written and not mutmut: mutmut makes thousands of syntactic mutants (operators, constants)
anywhere in the code and runs the suite (~4 minutes here) per mutant, mutating files in place
(unsafe in a shared working tree); most survivors would be noise to triage (log wording, error
paths). The audit behind this list asked the opposite question: for each promise in the README, does
a plausible bug that breaks it fail a named test? So each mutant below names its promise and the tests
meant to hold it, and the run takes minutes.

A snippet that is no longer found (the code was rewritten) is reported as ``stale``: update the
mutant. A selection that fails before any mutant is applied stops the run (a broken baseline would
"catch" everything).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", ".venv", ".venv-*", "__pycache__", ".pytest_cache", "*.egg-info", "out",
                                "bench-results", ".gpu", ".whl", "build", "dist")


@dataclass(frozen=True)
class Mutant:
    name: str
    promise: str
    path: str                 # relative to the repository root
    original: str             # must occur exactly once in the file
    mutated: str
    tests: tuple[str, ...]    # pytest selection (node ids or files), run with -x
    equivalent: str | None = None  # for a survivor: why no test can see it


M = Mutant
MUTANTS: list[Mutant] = [
    # ------------------------------------------------------------------ sampler: slices, padding, weights, epochs
    M("sampler-contiguous-rank-slices", "ranks take draw[rank::world_size]",
      "dali_backend/sampling/sampler.py",
      "return padded[rank::world_size].astype(np.int64), positions[rank::world_size]",
      "return (padded[rank * per_rank:(rank + 1) * per_rank].astype(np.int64), "
      "positions[rank * per_rank:(rank + 1) * per_rank])",
      ("tests/sampling/test_sampler.py", "tests/facade/test_reliability.py::test_accounting_with_padding_and_drop_last")),
    M("sampler-pads-with-the-end", "padding repeats the start of the draw (DistributedSampler)",
      "dali_backend/sampling/sampler.py",
      "padded = np.tile(global_draw, reps)[:padded_len]",
      "padded = np.concatenate([global_draw, np.repeat(global_draw[-1:], padded_len - total)])",
      ("tests/sampling/test_sampler.py",)),
    M("sampler-weights-not-balanced", "balanced: every class the same total weight",
      "dali_backend/sampling/sampler.py",
      "per_class = np.where(counts > 0, 1.0 / counts, 0.0)",
      "per_class = np.where(counts > 0, 1.0 / np.sqrt(counts), 0.0)",
      ("tests/sampling/test_sampler.py",)),
    M("sampler-same-order-every-epoch", "a new epoch draws anew (seed, epoch)",
      "dali_backend/sampling/sampler.py",
      "rng = np.random.default_rng([_SAMPLER_STREAM, int(seed), int(epoch)])",
      "rng = np.random.default_rng([_SAMPLER_STREAM, int(seed)])",
      ("tests/sampling/test_sampler.py",)),
    M("sampler-drop-last-rounds-up", "drop_last trims to a multiple of world_size",
      "dali_backend/sampling/sampler.py",
      "        per_rank = total // world_size\n",
      "        per_rank = math.ceil(total / world_size)\n",
      ("tests/sampling/test_sampler.py",)),
    # ------------------------------------------------------------------ per-draw parameters
    M("params-ignore-position", "each draw its own parameters (seed, epoch, position)",
      "dali_backend/transforms/base.py",
      "p3 = _mix(_mix(_mix(_hashmix(position, 3), c6), c9), c12)",
      "p3 = _mix(_mix(_mix(_hashmix(0, 3), c6), c9), c12)",
      ("tests/fallback/test_fallback.py::test_draws_get_their_own_parameters", "tests/core/test_augment.py")),
    M("params-shared-offsets", "an operation's numbers depend on its offset only",
      "dali_backend/core/augment.py",
      "p = {} if op.is_identity else op.sample(u[off:off + op.UNIFORMS], size)",
      "p = {} if op.is_identity else op.sample(u[:op.UNIFORMS], size)",
      ("tests/transforms/test_transforms.py::test_operation_blocks_are_independent",)),
    M("dali-params-by-sample-index", "DALI's workers draw parameters at the draw's position",
      "dali_backend/dali/wire.py",
      "p = self.spec.make_params(self.reader.seed, epoch, position, size)",
      "p = self.spec.make_params(self.reader.seed, epoch, index, size)",
      ("tests/core/test_semantics.py::test_plain_dataloader_and_both_backends_give_the_same_pixels",)),
    # ------------------------------------------------------------------ the draw's epoch
    M("fallback-uses-the-datasets-epoch", "a Draw's parameters come from the draw's epoch, not ds.set_epoch",
      "fallback/dataset.py",
      "return draw.index, None if plain else draw.epoch, draw.epoch, draw.position",
      "return draw.index, None if plain else draw.epoch, default_epoch, draw.position",
      ("tests/sampling/test_sampler_epoch.py",)),
    M("loader-ignores-the-samplers-epoch", "sampler.set_epoch(e) alone selects epoch e",
      "dali_backend/facade/epochs.py",
      'return int(getattr(self.sampler, "epoch", self.epoch))',
      "return int(self.epoch)",
      ("tests/sampling/test_sampler_epoch.py",)),
    # ------------------------------------------------------------------ resize, rotation, letterbox, flips
    M("resize-wraps-at-the-border", "resize replicates the edge (DALI)",
      "dali_backend/transforms/resample.py",
      "idx = np.clip(first[:, None] + np.arange(support)[None, :], 0, in_size - 1)",
      "idx = np.mod(first[:, None] + np.arange(support)[None, :], in_size)",
      ("tests/fallback/test_fallback.py::test_resize_replicates_the_border", "tests/fallback/test_fallback.py::test_resize_equals_dalis_resize")),
    M("resize-taps-half-pixel-off", "resize samples at pixel centres ((x + 0.5) * scale - 0.5)",
      "dali_backend/transforms/resample.py",
      "origin = _F32(_F32(_F32(_F32(0.5) * scale) - _F32(0.5)) - anchor)",
      "origin = _F32(_F32(_F32(0.5) * scale) - anchor)",
      ("tests/fallback/test_fallback.py::test_resize_equals_dalis_resize",)),
    M("rotation-about-the-corner-pixel", "rotation about ((w - 1) / 2, (h - 1) / 2)",
      "dali_backend/transforms/rotation.py",
      "m = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), angle, 1.0)",
      "m = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)",
      ("tests/fallback/test_fallback.py::test_rotation_is_counter_clockwise_about_the_pixel_centre",)),
    M("rotation-clockwise-on-dali", "rotation counter-clockwise on both backends",
      "dali_backend/transforms/rotation.py",
      "return fn.rotate(images, angle=params[\"angle\"], keep_size=True",
      "return fn.rotate(images, angle=-params[\"angle\"], keep_size=True",
      ("tests/fallback/test_fallback.py::test_rotation_is_counter_clockwise_about_the_pixel_centre",)),
    M("letterbox-floor-offset", "letterbox content ceil(pad / 2) from the top and left",
      "dali_backend/transforms/resize.py",
      "return crop(inner, -((H - nh + 1) // 2), -((W - nw + 1) // 2), H, W)",
      "return crop(inner, -((H - nh) // 2), -((W - nw) // 2), H, W)",
      ("tests/dali/test_dali_loader.py::test_letterbox_keeps_aspect_and_pads_centred",)),
    M("letterbox-size-truncates", "letterbox size rounds h * s and w * s to the nearest",
      "dali_backend/transforms/resize.py",
      "return (max(int(np.floor(f(height) * s + f(0.5))), 1), max(int(np.floor(f(width) * s + f(0.5))), 1))",
      "return (max(int(np.floor(f(height) * s)), 1), max(int(np.floor(f(width) * s)), 1))",
      ("tests/dali/test_dali_loader.py::test_letterbox_keeps_aspect_and_pads_centred",)),
    M("dali-hflip-is-vertical", "RandomHorizontalFlip mirrors left-right on DALI too",
      "dali_backend/transforms/flip.py",
      'kw = {"horizontal": params["flip"], "vertical": 0} if self.AXIS == 1 else {"horizontal": 0, "vertical": params["flip"]}',
      'kw = {"horizontal": 0, "vertical": params["flip"]} if self.AXIS == 1 else {"horizontal": params["flip"], "vertical": 0}',
      ("tests/transforms/test_transforms.py::test_flips_of_one_pixel_wide_images_work_on_both_backends",)),
    # ------------------------------------------------------------------ CLAHE padding (the GPU graph)
    M("clahe-pads-only-when-both-uneven", "the GPU graph pads to whole tiles as OpenCV (either side uneven)",
      "dali_backend/transforms/clahe_graph.py",
      "uneven = (h % ty != 0) | (w % tx != 0)",
      "uneven = (h % ty != 0) & (w % tx != 0)",
      ("tests/transforms/test_clahe_graph.py::test_gpu_kernel_model_in_the_products_padded_graph_is_within_one_level",)),
    M("clahe-reflect-repeats-the-edge", "the padding is reflect-101 (the edge row is not repeated)",
      "dali_backend/transforms/clahe_graph.py",
      "edge = _min(rows - 1, 1)  # 1: reflect-101 skips the edge row; 0: a single row repeats",
      "edge = 0",
      ("tests/transforms/test_clahe_graph.py",)),
    # ------------------------------------------------------------------ jitter, normalisation
    M("jitter-ties-round-down", "jitter rounds exact ties half up (DALI's CPU kernel)",
      "dali_backend/transforms/color.py",
      'rounded = np.floor(y + f32(0.5)) if ties == "up" else np.rint(y)',
      'rounded = np.ceil(y - f32(0.5)) if ties == "up" else np.rint(y)',
      ("tests/transforms/test_rounding.py", "tests/fallback/test_fallback.py::test_jitter_is_the_documented_formula_rounded_half_up")),
    M("jitter-contrast-centre-127", "contrast about 128 (both backends, so no equivalence test sees it)",
      "dali_backend/transforms/color.py",
      "    contrast_center: float = 128.0\n",
      "    contrast_center: float = 127.0\n",
      ("tests/fallback/test_fallback.py::test_jitter_is_the_documented_formula_rounded_half_up",)),
    M("imagenet-std-typo", "default normalisation is ImageNet's (torchvision's) constants",
      "dali_backend/core/augment.py",
      "IMAGENET_STD = (0.229, 0.224, 0.225)",
      "IMAGENET_STD = (0.229, 0.456, 0.225)",
      ("tests/core/test_normalisation.py",)),
    M("normalise-without-255", "out = (x / 255 - mean) / std",
      "dali_backend/core/augment.py",
      "return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)",
      "return (1.0 / (256.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)",
      ("tests/core/test_normalisation.py",)),
    # ------------------------------------------------------------------ run-time file checks
    M("no-end-of-image-check", "a file overwritten at its size with a random tail is refused",
      "dali_backend/formats/jpeg.py",
      "if bytes(data[-2:]) != EOI and bytes(data).find(EOI) < 0:",
      "if False:",
      ("tests/core/test_overwritten_files.py",)),
    M("no-signature-check", "a file without the JPEG signature is refused, with that reason",
      "dali_backend/formats/jpeg.py",
      "return \"no JPEG signature\"",
      "pass",
      ("tests/core/test_overwritten_files.py",)),
    M("size-check-only-for-growth", "a file that changed size since indexing is refused",
      "dali_backend/core/reading.py",
      "if data.size != self.sizes[i]:",
      "if data.size > self.sizes[i]:",
      ("tests/facade/test_reliability.py::test_on_error_raise_names_path_index_label_epoch",)),
    # ------------------------------------------------------------------ on_error, labels
    M("skip-replaces-from-any-class", "skip: the replacement is of the same class",
      "dali_backend/core/reading.py",
      "same = np.flatnonzero(self.labels == self.labels[i])",
      "same = np.arange(len(self.labels))",
      ("tests/facade/test_reliability.py::test_on_error_skip_replaces_identically_on_both_backends",)),
    M("raise-behaves-as-skip", "on_error='raise' raises (nothing replaced silently)",
      "dali_backend/core/reading.py",
      '            if on_error != "skip":\n                raise\n',
      '            if on_error not in ("skip", "raise"):\n                raise\n',
      ("tests/facade/test_reliability.py::test_on_error_raise_names_path_index_label_epoch",)),
    M("labels-in-reverse-folder-order", "class ids follow the sorted class folders",
      "dali_backend/index/build.py",
      "    for label, name in enumerate(classes):\n        folder = base / name\n",
      "    for label, name in enumerate(classes[::-1]):\n        folder = base / name\n",
      ("tests/index/test_index.py",)),
    M("dali-label-of-the-planned-sample", "the label is the served sample's",
      "dali_backend/dali/wire.py",
      "label = int(self.reader.labels[served])",
      "label = int(self.reader.labels[index])",
      ("tests/facade/test_reliability.py::test_on_error_skip_replaces_identically_on_both_backends",),
      equivalent="a replacement is always of the planned sample's class (reading.replacements), so "
                 "labels[served] == labels[index] for every draw; only the mutant above makes them differ"),
    # ------------------------------------------------------------------ split
    M("split-keys-depend-on-position", "a file keeps its side of the split when others are added",
      "dali_backend/index/core.py",
      "u = split_keys(self._paths, seed)",
      "u = (split_keys(self._paths, seed) + np.arange(len(self)) * 0.618) % 1.0",
      ("tests/index/test_index.py::test_split_is_deterministic_and_stable_as_data_grows",)),
    M("stratified-split-rounds-down", "stratify: each class's val count rounded half up",
      "dali_backend/index/core.py",
      "k = int(np.floor(members.size * float(val_fraction) + 0.5))",
      "k = int(np.floor(members.size * float(val_fraction)))",
      ("tests/docs/test_new_user.py::test_stratified_split_gives_every_class_its_exact_share",)),
    # ------------------------------------------------------------------ accounting, drop_last, resumption
    M("padding-counted-as-yielded", "stats: distributed padding is counted as padded",
      "dali_backend/facade/epochs.py",
      "padded = (positions >= num_samples) & ~skipped",
      "padded = (positions > num_samples) & ~skipped",
      ("tests/facade/test_reliability.py::test_accounting_with_padding_and_drop_last",)),
    M("drop-last-ignored-by-the-loader", "drop_last cuts the last partial batch",
      "dali_backend/facade/epochs.py",
      "return rows[:len(rows) // size * size] if self.drop_last else rows",
      "return rows",
      ("tests/dali/test_dali_loader.py::test_epochs_lengths_and_order",)),
    M("resume-one-batch-early", "load_state_dict resumes exactly after the batches done",
      "dali_backend/facade/epochs.py",
      "self._resume = (epoch, int(done), plan)",
      "self._resume = (epoch, max(int(done) - 1, 0), plan)",
      ("tests/facade/test_reliability.py::test_exact_resumption_mid_epoch_and_at_boundaries",)),
    M("set-epoch-cancels-resumption", "set_epoch(same epoch) keeps a pending resumption",
      "dali_backend/facade/epochs.py",
      "if self._resume is not None and self._resume[0] != self.epoch:",
      "if self._resume is not None:",
      ("tests/facade/test_reliability.py::test_exact_resumption_mid_epoch_and_at_boundaries",)),
    # ------------------------------------------------------------------ handoff, memory
    M("handoff-releases-before-the-copy-ran", "DALI's GPU output is held until the copy completed",
      "dali_backend/dali/handoff.py",
      "while self._pending and self._pending[0][0].query():",
      "while self._pending:",
      ("tests/dali/test_handoff.py",)),
    M("handoff-holds-the-copies", "the handoff holds the producer's objects, not the copies",
      "dali_backend/dali/handoff.py",
      "self._pending.append((event, outputs))",
      "self._pending.append((event, owned))",
      ("tests/dali/test_handoff.py",)),
    M("loader-keeps-every-batch", "memory flat over epochs",
      "dali_backend/facade/loader.py",
      "        images = apply_batch_ops(normalize(batch.images, spec), spec, per_draw)\n",
      "        images = apply_batch_ops(normalize(batch.images, spec), spec, per_draw)\n"
      "        self.__dict__.setdefault('_leak', []).append(images)\n",
      ("tests/facade/test_reliability.py::test_memory_flat_over_10_epochs",)),
]


# ---------------------------------------------------------------------------------------------- running
def copy_repository(dst: Path) -> Path:
    tree = dst / "repo"
    shutil.copytree(ROOT, tree, ignore=IGNORE, symlinks=True)
    return tree


def child_env(tree: Path) -> dict:
    env = dict(os.environ)
    # the copy's packages, not the editable install's (which points at the working tree); no .pyc files:
    # a mutated file and its restored original could share a size and a second of mtime
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str]:
    """(``passed`` / ``failed`` / ``error`` / ``timeout``, seconds, the output's tail)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", *tests]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=child_env(tree), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "timeout", time.monotonic() - t0, out[-1500:]
    except BaseException:  # Ctrl-C: take the tests (and their workers) down with us
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    status = {0: "passed", 1: "failed"}.get(proc.returncode, "error")
    return status, time.monotonic() - t0, out[-1500:]


def apply(tree: Path, m: Mutant) -> str:
    """Write the mutant into the copy; returns the original text (to restore)."""
    path = tree / m.path
    text = path.read_text()
    count = text.count(m.original)
    if count != 1:
        raise LookupError(f"{m.path}: original snippet found {count} times")
    path.write_text(text.replace(m.original, m.mutated))
    return text


def check_snippets(tree: Path, mutants: list[Mutant]) -> list[str]:
    problems = []
    for m in mutants:
        text = (tree / m.path).read_text()
        if text.count(m.original) != 1:
            problems.append(f"{m.name}: {m.path}: original snippet found {text.count(m.original)} times")
    return problems


def verify_isolation(tree: Path) -> None:
    """The child imports the copy's packages, never the working tree's."""
    code = "import dali_backend, fallback, bench; print(dali_backend.__file__, fallback.__file__, bench.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=child_env(tree), capture_output=True, text=True,
                         check=True).stdout.split()
    if not all(Path(p).resolve().is_relative_to(tree.resolve()) for p in out):
        raise SystemExit(f"mutants: the copy imports {out}, not its own packages; refusing to run")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-k", action="append", default=[], help="run only mutants whose name contains this (repeatable)")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--check", action="store_true", help="check every snippet is found once, run nothing")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per test run (default 300)")
    p.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the selections")
    args = p.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.k or any(k in m.name for k in args.k)]
    if args.list:
        for m in mutants:
            print(f"{m.name:40s} {m.path:38s} {' '.join(m.tests)}")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="mutants-"))
    results: list[tuple[Mutant, str, float]] = []
    try:
        tree = copy_repository(tmp)
        problems = check_snippets(tree, mutants)
        if args.check:
            print("\n".join(problems) or f"all {len(mutants)} snippets found once")
            return 1 if problems else 0
        verify_isolation(tree)
        if not args.no_baseline:
            selection = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
            status, secs, out = run_tests(tree, selection, args.timeout * 2)
            print(f"baseline (no mutant, {len(selection)} selections): {status} in {secs:.0f} s", flush=True)
            if status != "passed":
                print(out)
                print("mutants: the tests fail without any mutant; fix that first")
                return 2
        for m in mutants:
            try:
                original = apply(tree, m)
            except LookupError as e:
                results.append((m, "stale", 0.0))
                print(f"{m.name:40s} stale ({e})", flush=True)
                continue
            try:
                status, secs, out = run_tests(tree, m.tests, args.timeout)
            finally:
                (tree / m.path).write_text(original)
            verdict = {"failed": "caught", "passed": "SURVIVED", "timeout": "caught (timeout)"}.get(status, "ERROR")
            if verdict == "SURVIVED" and m.equivalent:
                verdict = "survived (equivalent)"
            results.append((m, verdict, secs))
            print(f"{m.name:40s} {verdict:22s} {secs:5.0f} s", flush=True)
            if verdict == "ERROR":
                print(out)
    except KeyboardInterrupt:
        print("\ninterrupted; the copy is removed (the working tree was never changed)")
        return 130
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    caught = sum(v.startswith("caught") for _, v, _ in results)
    equivalent = [m for m, v, _ in results if v == "survived (equivalent)"]
    bad = [(m, v) for m, v, _ in results if v in ("SURVIVED", "ERROR", "stale")]
    print(f"\n{caught} of {len(results)} mutants caught; {len(equivalent)} equivalent "
          f"(no observable change); {len(bad)} need attention")
    for m in equivalent:
        print(f"  equivalent: {m.name}: {m.equivalent}")
    for m, v in bad:
        print(f"  {v}: {m.name} ({m.promise}; {m.path}; tests: {' '.join(m.tests)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
