"""Reliability: bad files, accounting, exact resumption, worker faults, distributed ranks."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from bench.equivalence import compare_end_to_end
from tests.helpers import KINDS, jpeg_bytes, write
from tests.helpers.corpus import ACCEPTED, build_corpus
from dali_backend import AugmentSpec, BadImageError, ConfigError, DaliLoader, SampleIndex, WeightedSampler
from fallback import ImageDataset
from tests.helpers.levels import PRESET_MAX_LEVELS, assert_within_tolerance

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ds(defect_index):
    return ImageDataset(defect_index, AugmentSpec(size=24), seed=2)


# ------------------------------------------------------------------------------------ bad-input corpus
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    return root, build_corpus(root)


def test_corpus_index_accepts_and_rejects_with_reasons(corpus):
    root, expected = corpus
    index = SampleIndex.from_folder(root, progress=False)
    accepted = {p for p, e in expected.items() if e == ACCEPTED}
    assert set(index.paths) == accepted
    reasons = {r.path: r.reason for r in index.rejected}
    assert set(reasons) == set(expected) - accepted
    for path, reason in reasons.items():
        assert expected[path] in reason, (path, reason)


@pytest.mark.parametrize("color", ["gray", "rgb"])
def test_corpus_same_pixels_on_both_backends(corpus, color):
    root, _ = corpus
    index = SampleIndex.from_folder(root, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=(40, 56), color=color), seed=0)
    sampler = WeightedSampler(index, mode="sequential")
    stats = compare_end_to_end(ds, sampler, batch_size=5)
    assert stats["labels_equal"]
    assert stats["mean"] <= 0.05 and stats["p999"] <= 2, stats


# ------------------------------------------------------------------------------------ on_error
@pytest.fixture
def damaged(tmp_path):
    """12 files in two classes; after indexing, one is truncated and one deleted."""
    for i in range(12):
        write(tmp_path / ("a" if i < 6 else "b") / f"{i:02d}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    (tmp_path / "a" / "02.jpg").write_bytes(jpeg_bytes(seed=2)[:300])
    (tmp_path / "b" / "09.jpg").unlink()
    return index


@pytest.mark.parametrize("kind", KINDS)
def test_on_error_raise_names_path_index_label_epoch(damaged, kind):
    loader = DaliLoader(ImageDataset(damaged, AugmentSpec(size=16)), batch_size=3, **KINDS[kind])
    loader.set_epoch(5)
    with pytest.raises(BadImageError) as e:
        list(loader)
    text = str(e.value)
    assert "a/02.jpg" in text and "sample 2" in text and "label 0" in text and "epoch 5" in text
    assert "file changed since indexing" in text


def test_on_error_skip_replaces_identically_on_both_backends(damaged, caplog):
    ds = ImageDataset(damaged, AugmentSpec(size=16, dtype="uint8"), seed=7)
    runs = {}
    for kind in KINDS:
        loader = DaliLoader(ds, batch_size=5, on_error="skip", sampler=WeightedSampler(damaged, num_samples=24, seed=1),
                            **KINDS[kind])
        with caplog.at_level(logging.WARNING, logger="dali_backend"):
            batches = [(x.clone(), y.clone()) for x, y in loader]
        runs[kind] = (batches, loader.stats())
        assert any("bad files skipped" in r.getMessage() for r in caplog.records)
        caplog.clear()
    (ba, sa), (bb, sb) = runs["dali-cpu"], runs["torch"]
    assert sa["skipped"] == sb["skipped"] > 0 and sa["skipped_files"] == sb["skipped_files"]
    for bad, replacement in sa["skipped_files"]:
        assert os.path.dirname(bad) == os.path.dirname(replacement)  # same class
        assert bad.endswith(("a/02.jpg", "b/09.jpg"))
    assert len(ba) == 5
    for (xa, ya), (xb, yb) in zip(ba, bb, strict=True):
        assert torch.equal(ya, yb)
    assert_within_tolerance([x for x, _ in ba], [x for x, _ in bb], ds.spec, PRESET_MAX_LEVELS)  # uint8 levels
    assert sa["accounted"] == sa["draws"] == 24


def test_on_error_is_validated(ds):
    with pytest.raises(ConfigError, match="on_error='ignore'"):
        DaliLoader(ds, on_error="ignore")


# ------------------------------------------------------------------------------------ accounting
@pytest.mark.parametrize("kind", KINDS)
def test_accounting_with_padding_and_drop_last(ds, kind):
    for drop_last in (False, True):
        sampler = WeightedSampler(ds.index, num_samples=37, seed=3, rank=1, world_size=4, drop_last=False)
        loader = DaliLoader(ds, batch_size=4, sampler=sampler, drop_last=drop_last, **KINDS[kind])
        n = sum(len(y) for _, y in loader)
        st = loader.stats()
        assert st["draws"] == 10 and st["accounted"] == st["draws"]
        # 37 draws padded to 40: rank 1 gets positions 1, 5, ..., 37, the last one padding (cut by drop_last)
        assert st["padded"] == (0 if drop_last else 1)
        assert st["dropped"] == (2 if drop_last else 0) and n == st["yielded"] + st["padded"]


# ------------------------------------------------------------------------------------ resumption
def _batches(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.mark.parametrize("kind, workers", [("dali-cpu", 1), ("dali-cpu", 2), ("torch", 0), ("torch", 2)])
def test_exact_resumption_mid_epoch_and_at_boundaries(ds, kind, workers):
    def make():
        return DaliLoader(ds, batch_size=4, num_workers=workers, sampler=WeightedSampler(ds.index, num_samples=30, seed=6),
                          **KINDS[kind])

    reference = make()
    full = {}
    for epoch in (0, 1):
        reference.set_epoch(epoch)
        full[epoch] = _batches(reference)
    assert len(full[0]) == 8
    for epoch, cut in ((0, 0), (0, 3), (1, 7), (1, 8)):  # start, middle, last batch, epoch boundary
        first = make()
        first.set_epoch(epoch)
        taken = []
        if cut:
            for i, batch in enumerate(first):
                taken.append(batch)
                if i + 1 == cut:
                    break
        state = json.loads(json.dumps(first.state_dict()))  # survives serialisation, no pickle needed
        resumed = make()
        resumed.load_state_dict(state)
        resumed.set_epoch(epoch)  # a training loop calls this again: the resumption stays pending
        rest = _batches(resumed)
        assert len(taken) + len(rest) == len(full[epoch])
        for (xa, ya), (xb, yb) in zip(taken + rest, full[epoch], strict=True):
            assert torch.equal(ya, yb) and torch.equal(xa, xb)  # 0 missing, 0 duplicated, same order and pixels
        st = resumed.stats()
        assert st["resumed"] == min(cut * 4, 30) and st["accounted"] == st["draws"]
        resumed.set_epoch(epoch + 1)  # the next epoch is whole again
        assert len(_batches(resumed)) == 8


def test_load_state_dict_refuses_mismatches(ds):
    loader = DaliLoader(ds, batch_size=4, backend="torch")
    state = loader.state_dict()
    with pytest.raises(ConfigError, match="batch_size=4"):
        DaliLoader(ds, batch_size=5, backend="torch").load_state_dict(state)
    other = ImageDataset(ds.index.subset(range(10)), ds.spec)
    with pytest.raises(ConfigError, match="another sample index"):
        DaliLoader(other, batch_size=4, backend="torch").load_state_dict(state)


# ------------------------------------------------------------------------------------ worker faults
KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time, warnings
    warnings.filterwarnings("ignore")
    sys.path.insert(0, {tests!r})
    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler, LoaderWorkerError
    from fallback import ImageDataset
    from bench.measure import process_tree
    index = SampleIndex.from_folder({root!r}, progress=False)
    loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, num_workers=2, device="cpu",
                        backend={backend!r}, sampler=WeightedSampler(index, num_samples=100000))
    it = iter(loader)
    next(it)
    victims = [p for p in process_tree() if p != os.getpid()
               and "resource_tracker import main" not in open(f"/proc/{{p}}/cmdline").read()]
    t0 = time.monotonic()
    try:  # torch raises a killed worker from its SIGCHLD handler, wherever the main thread is: kill inside
        os.kill(victims[0], signal.SIGKILL)
        for _ in it:
            pass
    except Exception as e:
        print("RAISED", type(e).__name__, round(time.monotonic() - t0, 1), str(e)[:200], flush=True)
        os._exit(0)
    print("NO ERROR", flush=True)
""")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "dali"])
def test_killed_worker_gives_error_within_10_s(defect_root, backend, tmp_path):
    script = tmp_path / "kill_worker.py"  # a file, so that workers' command lines do not hold the script text
    script.write_text(KILL_SCRIPT.format(tests=str(ROOT), root=str(defect_root), backend=backend))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    line = next((l for l in proc.stdout.splitlines() if l.startswith(("RAISED", "NO ERROR"))), proc.stderr[-500:])
    assert line.startswith("RAISED"), line
    _, name, seconds, *_ = line.split(" ", 3)
    assert float(seconds) < 10
    assert ("died" in line or "exited unexpectedly" in line or "killed by signal" in line), line


# ------------------------------------------------------------------------------------ distributed
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_partition_the_draw_identically_on_both_backends(defect_root, tmp_path):
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "helpers" / "dist_helper.py"), str(r), "2", str(defect_root),
                               str(tmp_path), str(port)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for backend in ("torch", "dali"):
        got = [r[backend] for r in ranks]
        assert [g["rank"] for g in got] == [0, 1] and all(g["world"] == 2 for g in got)
        positions = sorted(pos for g in got for _, pos in g["draws"])
        assert positions == list(range(46))  # 45 draws padded to 46, disjoint and covering
        for g in got:
            assert g["stats"]["accounted"] == g["stats"]["draws"] == 23
    index = SampleIndex.from_folder(defect_root, progress=False)
    for r in range(2):
        assert ranks[r]["torch"]["labels"] == ranks[r]["dali"]["labels"]
        want = index.labels[[i for i, _ in ranks[r]["torch"]["draws"]]].tolist()
        assert sum(ranks[r]["torch"]["labels"], []) == want


# ------------------------------------------------------------------------------------ memory
MEMORY_SCRIPT = textwrap.dedent("""
    import gc, json, sys
    sys.path.insert(0, {tests!r})
    from bench.measure import process_tree, tree_rss_mb
    from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
    from dali_backend.core.synthetic import generate_defect_dataset
    from fallback import ImageDataset

    def anonymous_mb():
        # Pss_Anon + Pss_Shmem summed over the process tree: heap, mmap and shared memory, each page
        # split between the processes of the tree that map it. Library code (file pages) is left out:
        # its PSS moves whenever any other process on the machine maps or unmaps torch or DALI.
        total = 0
        for pid in process_tree():
            try:
                with open(f"/proc/{{pid}}/smaps_rollup") as f:
                    fields = dict(line.split(":", 1) for line in f.read().splitlines()[1:])  # after the header
                total += sum(int(fields[k].split()[0]) for k in ("Pss_Anon", "Pss_Shmem")) * 1024
            except (OSError, KeyError, ValueError):
                return None  # no smaps_rollup with these fields (not Linux >= 5.14, or a process gone)
        return total / 1e6

    root = generate_defect_dataset({root!r}, n=60, size=(160, 120), seed=3, progress=False)
    index = SampleIndex.from_folder(root, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=128), seed=0)
    anon, pss = [], []
    with DaliLoader(ds, batch_size=8, num_workers=2, sampler=WeightedSampler(index, num_samples=120), device="cpu",
                    backend={backend!r}) as loader:
        for epoch in range(10):
            loader.set_epoch(epoch)
            for _ in loader:
                pass
            gc.collect()
            anon.append(anonymous_mb())
            pss.append(tree_rss_mb())
    print("MEMORY", json.dumps({{"anon": None if None in anon else anon, "pss": pss}}), flush=True)
""")
MEMORY_WARMUP_EPOCHS = 3
MEMORY_GROWTH_PCT = 2.0


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_memory_flat_over_10_epochs(kind, tmp_path):
    """The loader's memory flat over 10 epochs once warm: after epoch 10 within 2 % of after epoch 3.

    What is measured, and why: the anonymous and shared memory (``Pss_Anon + Pss_Shmem``) of a fresh
    child process's tree, after a garbage collection each epoch. The old test (process-tree PSS of the
    pytest process, epoch 1 -> 10 within 5 %) failed in full-suite runs at 5.5-5.6 % while passing alone.
    Measured, three things moved that figure that are not the loader's: (1) the tree held other tests'
    loader workers until the collector ended them, and the PSS of the pages they shared moved to the
    processes left; (2) Python's collector, touching object headers on pages shared with the forked
    workers, unshared them (copy on write: +43 MB at the first collection with a DALI loader); (3) PSS
    of library code (torch, DALI, OpenCV) is split with every other process on the machine that maps the
    same files, so it moves when other test processes start or end (the same DALI loader's tree: 425 MB
    alone, 303-321 MB beside such processes, +2.4 % within one run). A fresh child, a collection before each
    reading and anonymous memory only remove all three. 5 runs per backend on a busy 2-core machine
    (a CPU burner and processes importing torch and DALI coming and going), epoch 3 -> 10: dali-cpu
    +0.31 to +0.58 % (258 MB), torch +0.28 to +0.80 % (225 MB). A loader keeping every batch it yields
    grows ~24 MB an epoch: +51 % (dali-cpu) and +57 % (torch) over the same 7 epochs.
    """
    script = tmp_path / "memory.py"
    script.write_text(MEMORY_SCRIPT.format(tests=str(ROOT), root=str(tmp_path / "data"),
                                           backend=KINDS[kind]["backend"]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    memory = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("MEMORY"))[6:])
    after = memory["anon"] or memory["pss"]  # PSS only where the kernel has no smaps_rollup (noisier)
    assert len(after) == 10
    warm = after[MEMORY_WARMUP_EPOCHS - 1]
    growth = (after[-1] - warm) / warm * 100
    assert growth < MEMORY_GROWTH_PCT, (round(growth, 2), [round(a, 1) for a in after])


# ------------------------------------------------------------------------------------ cache
@pytest.mark.parametrize("kind", KINDS)
def test_in_memory_cache_gives_the_same_batches_and_survives_file_loss(tmp_path, kind):
    for i in range(10):
        write(tmp_path / ("a" if i % 2 else "b") / f"{i}.jpg", jpeg_bytes(seed=i))
    index = SampleIndex.from_folder(tmp_path, progress=False)
    spec = AugmentSpec(size=16)
    plain = ImageDataset(index, spec, seed=1)
    cached = ImageDataset(index, spec, seed=1, cache=True)
    assert cached.reader.cache.nbytes == int(index.sizes.sum())
    sampler = WeightedSampler(index, num_samples=12, seed=2)
    want = _batches(DaliLoader(plain, batch_size=4, sampler=sampler, **KINDS[kind]))
    for path in tmp_path.rglob("*.jpg"):
        path.unlink()  # served from memory now
    got = _batches(DaliLoader(cached, batch_size=4, sampler=sampler, num_workers=2, **KINDS[kind]))
    assert len(want) == 3
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, want, strict=True))


def test_bad_image_error_gives_the_fix_that_fits_the_reason():
    from dali_backend.errors import BadImageError

    local = BadImageError("/data/ok/a.jpg", 3, 0, 1, "no JPEG signature")
    assert "Fix or remove the file and rebuild the index" in str(local) and "[sample 3 (label 0, epoch 1)]" in str(local)
    remote = BadImageError("s3://b/ok/a.jpg", 3, 0, 1, "unreadable (could not connect to the endpoint)")
    assert "Check that the storage is reachable" in str(remote) and "Fix or remove" not in str(remote)
    changed = BadImageError("s3://b/ok/a.jpg", 3, 0, 1, "object changed since indexing (overwritten: its ETag differs)")
    assert "rebuild the index" in str(changed)
