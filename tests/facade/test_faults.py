"""Reliability, second pass: checkpoints, decoder-rejected files, FIFOs, process deaths, Ctrl-C, forks.

Every attack that could hang runs in a child process with a timeout (pytest's test_dataloader style);
each applies to both backends where both have the code path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, ConfigError, DaliLoader, SampleIndex, WeightedSampler
from dali_backend.dali.wire import GRAPH_DECODE_ENV
from dali_backend.errors import LoaderClosedError, StaleIteratorError
from fallback import ImageDataset
from tests.helpers.levels import PRESET_MAX_LEVELS, assert_within_tolerance

ROOT = Path(__file__).resolve().parents[2]


def corrupt_huffman(data: bytes) -> bytes:
    """Intact markers and frame, a Huffman table libjpeg calls bogus: passes the header check."""
    b = bytearray(data)
    i = b.index(b"\xff\xc4")
    for k in range(9, 16):
        b[i + 5 + k] = 0xFF
    return bytes(b)


def run_script(tmp_path: Path, body: str, timeout: float = 90, **fmt) -> subprocess.CompletedProcess:
    script = tmp_path / "attack.py"  # a file: workers' command lines then do not hold the script text
    head = textwrap.dedent("""
        import os, signal, sys, threading, time, warnings
        warnings.filterwarnings("ignore")
        sys.path.insert(0, {tests!r})
        from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
        from fallback import ImageDataset
    """).format(tests=str(ROOT))
    script.write_text(head + textwrap.dedent(body).format(**fmt))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture()
def small_root(tmp_path):
    """24 files in 3 classes, one with 2 batches of 4 per class order."""
    for c in range(3):
        for k in range(8):
            write(tmp_path / "data" / f"c{c}" / f"{k}.jpg", jpeg_bytes(40, 48, seed=100 * c + k))
    return tmp_path / "data"


def make(kind: str, root: Path, **kw) -> DaliLoader:
    index = SampleIndex.from_folder(root, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=16), seed=1)
    kw.setdefault("batch_size", 4)
    return DaliLoader(ds, **KINDS[kind], **kw)


def batches(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


# ------------------------------------------------------------------------------------ 1. checkpoints
@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_after_set_epoch_resumes_the_whole_new_epoch(small_root, kind):
    sampler = lambda: WeightedSampler(SampleIndex.from_folder(small_root, progress=False), seed=3)  # noqa: E731
    a = make(kind, small_root, sampler=sampler())
    a.set_epoch(0)
    list(a)
    a.set_epoch(1)
    sd = a.state_dict()
    assert (sd["epoch"], sd["batches_done"]) == (1, 0)
    want = batches(a)
    b = make(kind, small_root, sampler=sampler())
    b.load_state_dict(json.loads(json.dumps(sd)))
    b.set_epoch(1)
    got = batches(b)
    assert len(got) == len(want) == 6
    assert all(torch.equal(x, y) and torch.equal(l, m) for (x, l), (y, m) in zip(got, want, strict=True))
    assert b.stats()["resumed"] == 0 and b.stats()["yielded"] == 24
    a.close(), b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_epoch_broken_off_does_not_shorten_the_next(small_root, kind):
    loader = make(kind, small_root, sampler=WeightedSampler(SampleIndex.from_folder(small_root, progress=False), seed=3))
    loader.set_epoch(0)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert loader.state_dict()["batches_done"] == 3
    loader.set_epoch(1)
    assert loader.state_dict()["batches_done"] == 0
    other = make(kind, small_root, sampler=WeightedSampler(SampleIndex.from_folder(small_root, progress=False), seed=3))
    other.load_state_dict(loader.state_dict())
    other.set_epoch(1)
    assert len(batches(other)) == 6
    loader.close(), other.close()


@pytest.mark.parametrize("change, match", [
    (lambda sd: sd.update(batches_done=-1), r"batches_done=-1; must lie in \[0, 6\]"),
    (lambda sd: sd.update(batches_done=7), r"batches_done=7"),
    (lambda sd: sd.update(batches_done="2"), r"batches_done='2'"),
    (lambda sd: sd.update(epoch=-3), r"epoch=-3"),
    (lambda sd: sd.pop("sampler"), r"lacks \['sampler'\]"),
    (lambda sd: sd.pop("epoch"), r"lacks \['epoch'\]"),
    (lambda sd: sd["sampler"].update(seed=99), r"seed 99 -> 3"),
    (lambda sd: sd["sampler"].update(augment_seed=5), r"augment_seed 5 -> 1"),
    (lambda sd: sd.update(version=1), r"version 1"),
])
def test_bad_states_are_refused(small_root, change, match):
    loader = make("torch", small_root, sampler=WeightedSampler(SampleIndex.from_folder(small_root, progress=False), seed=3))
    sd = json.loads(json.dumps(loader.state_dict()))
    change(sd)
    with pytest.raises(ConfigError, match=match):
        loader.load_state_dict(sd)
    with pytest.raises(ConfigError, match="expected the dict"):
        loader.load_state_dict([1, 2])


# ------------------------------------------------------------------------------------ 2 and 11. bad files
@pytest.fixture()
def huffman_root(small_root):
    """c1/3.jpg has a corrupt Huffman table: the header check passes, both decoders refuse it."""
    path = small_root / "c1" / "3.jpg"
    path.write_bytes(corrupt_huffman(path.read_bytes()))
    return small_root


@pytest.fixture(params=["readers", "graph"])
def dali_decodes(request, monkeypatch):
    """Both heads of a CPU graph: the readers decode (and run CLAHE), or DALI's decoder does (the GPU
    graph's head, and the loader's recovery when DALI's decoder refuses a file: executor.py)."""
    if request.param == "graph":
        monkeypatch.setenv(GRAPH_DECODE_ENV, "1")
    else:
        monkeypatch.delenv(GRAPH_DECODE_ENV, raising=False)
    return request.param


@pytest.mark.parametrize("kind", KINDS)
def test_decoder_rejected_file_raises_at_its_batch_with_all_fields(huffman_root, kind, dali_decodes):
    if kind != "dali-cpu" and dali_decodes == "graph":
        pytest.skip("the graph's decoder is a DALI setting")
    loader = make(kind, huffman_root)  # sequential: the bad file is sample 11, in batch 2 (0-based)
    assert loader.dataset.index.paths[11] == "c1/3.jpg"
    for epoch in range(2):  # and again next epoch: the loader stays usable
        loader.set_epoch(epoch)
        got = []
        with pytest.raises(BadImageError) as info:
            for x, _ in loader:
                got.append(x)
        e = info.value
        assert len(got) == 2, "the good batches before the bad file are yielded"
        assert e.path.endswith(os.path.join("c1", "3.jpg")) and e.index == 11 and e.label == 1 and e.epoch == epoch
        assert "refused" in e.reason or "decode" in e.reason, e.reason
        assert "3.jpg" in str(e)
    loader.close()


def test_decoder_rejected_file_is_skipped_identically_on_both_backends(huffman_root, dali_decodes):
    out = {}
    for kind in KINDS:
        loader = make(kind, huffman_root, on_error="skip", sampler=WeightedSampler(
            SampleIndex.from_folder(huffman_root, progress=False), seed=4, num_samples=48))
        out[kind] = [batches(loader) for epoch in range(2) if loader.set_epoch(epoch) is None]
        st = loader.stats()
        assert st["skipped"] >= 1 and st["accounted"] == st["draws"]
        assert all("3.jpg" in bad for bad, _ in st["skipped_files"])
        loader.close()
    assert len(out["torch"]) == 2
    spec = AugmentSpec(size=16)  # make()'s
    for ea, eb in zip(out["dali-cpu"], out["torch"], strict=True):
        assert len(ea) == len(eb) == 12
        for (x, y), (u, v) in zip(ea, eb, strict=True):
            assert torch.equal(y, v)
        assert_within_tolerance([x for x, _ in ea], [u for u, _ in eb], spec, PRESET_MAX_LEVELS)


@pytest.mark.parametrize("kind", KINDS)
def test_changed_file_error_keeps_its_fields(small_root, kind):
    loader = make(kind, small_root)
    (small_root / "c0" / "5.jpg").write_bytes(b"not a jpeg any more")
    with pytest.raises(BadImageError) as info:
        list(loader)
    e = info.value
    assert (e.index, e.label, e.epoch) == (5, 0, 0) and e.path.endswith("5.jpg") and "changed" in e.reason
    loader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_next_after_close_is_a_clear_error(small_root, kind):
    loader = make(kind, small_root)
    it = iter(loader)
    next(it)
    loader.close()
    with pytest.raises(LoaderClosedError, match="closed"):
        next(it)
    with pytest.raises(LoaderClosedError, match="closed"):
        iter(loader)


# ------------------------------------------------------------------------------------ 6. FIFO after indexing
@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_fifo_replacing_an_indexed_file_is_named_not_waited_on(small_root, tmp_path, kind):
    proc = run_script(tmp_path, """
        index = SampleIndex.from_folder({root!r}, progress=False)
        os.remove({victim!r}); os.mkfifo({victim!r})
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, device="cpu", backend={backend!r})
        try:
            list(loader)
        except Exception as e:
            print("RAISED", type(e).__name__, getattr(e, "reason", ""), flush=True)
        os._exit(0)
    """, timeout=60, root=str(small_root), victim=str(small_root / "c2" / "1.jpg"), backend=KINDS[kind]["backend"])
    assert "RAISED BadImageError" in proc.stdout and "FIFO" in proc.stdout, proc.stdout + proc.stderr[-2000:]


# ------------------------------------------------------------------------------------ 7. the trainer dies
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_dead_trainer_leaves_no_worker_and_no_shared_memory(small_root, tmp_path, sig):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time, warnings
        warnings.filterwarnings("ignore")
        from dali_backend import AugmentSpec, DaliLoader, SampleIndex, WeightedSampler
        from fallback import ImageDataset
        index = SampleIndex.from_folder({str(small_root)!r}, progress=False)
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, device="cpu", backend="dali",
                            sampler=WeightedSampler(index, num_samples=10**6))
        it = iter(loader)
        next(it)
        r = loader._runner
        print("PIDS", *r.worker_pids, flush=True)
        print("SHM", r.ring._shm.name, flush=True)
        for _ in it:
            time.sleep(0.01)
    """)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    pids, shm = [], None
    deadline = time.monotonic() + 60
    while shm is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("PIDS"):
            pids = [int(p) for p in line.split()[1:]]
        elif line.startswith("SHM"):
            shm = line.split()[1]
    assert pids and shm, "the child did not start"
    assert os.path.exists(f"/dev/shm/{shm.lstrip('/')}")
    proc.send_signal(sig)
    proc.wait(10)
    deadline = time.monotonic() + 10
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive and not os.path.exists(f"/dev/shm/{shm.lstrip('/')}"):
            break
        time.sleep(0.1)
    assert not alive, f"reader workers {alive} outlived the trainer"
    assert not os.path.exists(f"/dev/shm/{shm.lstrip('/')}"), "the schedule ring was left in /dev/shm"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# ------------------------------------------------------------------------------------ 8. Ctrl-C
@pytest.mark.slow
def test_ctrl_c_inside_dali_iterations_leaves_the_loader_usable(small_root, tmp_path):
    proc = run_script(tmp_path, """
        import random
        index = SampleIndex.from_folder({root!r}, progress=False)
        ds = ImageDataset(index, AugmentSpec(size=16))
        sampler = WeightedSampler(index, seed=2, num_samples=64)
        ref = DaliLoader(ds, batch_size=4, sampler=sampler, device="cpu", backend="torch")
        ref.set_epoch(5)
        want = [y.tolist() for _, y in ref]
        loader = DaliLoader(ds, batch_size=4, sampler=sampler, device="cpu", backend="dali")
        ok = 0
        rng = random.Random(0)
        for trial in range(12):
            loader.set_epoch(trial % 3)
            timer = threading.Timer(rng.uniform(0.0, 0.15), lambda: os.kill(os.getpid(), signal.SIGINT))
            timer.start()
            try:
                for _ in loader:
                    time.sleep(0.005)
                time.sleep(0.2)  # the interrupt may land after the epoch
            except KeyboardInterrupt:
                pass
            timer.cancel()
            loader.set_epoch(5)
            got = [y.tolist() for _, y in loader]
            ok += got == want and loader.stats()["accounted"] == loader.stats()["draws"]
        print("OK", ok, flush=True)
        os._exit(0)
    """, timeout=150, root=str(small_root))
    assert "OK 12" in proc.stdout, proc.stdout + proc.stderr[-3000:]


# ------------------------------------------------------------------------------------ 9. worker dies, other thread
@pytest.mark.slow
def test_dead_reader_reaches_an_iterating_thread_within_seconds(small_root, tmp_path):
    proc = run_script(tmp_path, """
        index = SampleIndex.from_folder({root!r}, progress=False)
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=2, device="cpu", backend="dali",
                            sampler=WeightedSampler(index, num_samples=10**6))
        result = {{}}
        def work():
            it = iter(loader)
            next(it)
            threading.Timer(0.5, lambda: os.kill(loader._runner.worker_pids[0], signal.SIGKILL)).start()
            t0 = time.monotonic()
            try:
                for _ in it:
                    pass
            except Exception as e:
                result["e"] = (type(e).__name__, round(time.monotonic() - t0 - 0.5, 2))
        t = threading.Thread(target=work)
        t.start()
        t.join(30)
        print("RESULT", result.get("e"), "alive" if t.is_alive() else "done", flush=True)
        loader.set_epoch(1)
        n = 0
        for _, y in loader:  # the next pass starts new workers
            n += len(y)
            if n >= 20:
                break
        print("NEXT", n, flush=True)
        os._exit(0)
    """, timeout=90, root=str(small_root))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), proc.stderr[-2000:])
    assert "LoaderWorkerError" in line and "done" in line, line
    assert float(line.split(",")[1].split(")")[0]) < 5
    assert "NEXT 20" in proc.stdout, proc.stdout + proc.stderr[-2000:]


# ------------------------------------------------------------------------------------ 10. fork after iterating
@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_forked_child_exits_normally(small_root, tmp_path, kind):
    proc = run_script(tmp_path, """
        index = SampleIndex.from_folder({root!r}, progress=False)
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, num_workers=2, device="cpu",
                            backend={backend!r})
        list(loader)
        codes = []
        for how in ("exit", "return"):
            pid = os.fork()
            if pid == 0:
                if how == "exit":
                    sys.exit(7)
                sys.exit(0)
            t0 = time.monotonic()
            _, status = os.waitpid(pid, 0)
            codes.append((os.waitstatus_to_exitcode(status), round(time.monotonic() - t0, 1)))
        print("CODES", codes, flush=True)
        print("PARENT", len(list(loader)), flush=True)
    """, timeout=60, root=str(small_root), backend=KINDS[kind]["backend"])
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CODES")), proc.stderr[-2000:])
    codes = eval(line.split(" ", 1)[1])  # noqa: S307 - our own output
    assert [c for c, _ in codes] == [7, 0] and all(t < 5 for _, t in codes), line
    assert "PARENT 6" in proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]


# ------------------------------------------------------------------------------------ issue 12: meta, timeouts
def test_return_meta_identifies_every_sample_identically_on_both_backends(small_root):
    index = SampleIndex.from_folder(small_root, progress=False)
    out = {}
    for kind in KINDS:
        loader = make(kind, small_root, sampler=WeightedSampler(index, seed=5, num_samples=10), return_meta=True)
        loader.set_epoch(2)
        out[kind] = list(loader)
        loader.close()
    assert len(out["torch"]) == 3
    assert_within_tolerance([x for x, _, _ in out["dali-cpu"]], [x for x, _, _ in out["torch"]], AugmentSpec(size=16),
                            PRESET_MAX_LEVELS)
    for (xa, ya, ma), (xb, yb, mb) in zip(out["dali-cpu"], out["torch"], strict=True):
        assert torch.equal(ya, yb)
        for key in ("index", "planned", "epoch", "position"):
            assert torch.equal(ma[key], mb[key]), key
        assert ma["path"] == mb["path"] and ma["params"] == mb["params"]
        assert (ma["epoch"] == 2).all() and len(ma["path"]) == len(ya)
        assert all(index.abspath(int(i)) == p for i, p in zip(ma["index"], ma["path"], strict=True))
        assert torch.equal(torch.from_numpy(index.labels[ma["index"].numpy()]), ya)
        assert set(ma["params"][0]) >= {"angle", "brightness", "contrast"}


@pytest.mark.parametrize("kind, kwargs, name", [
    ("dali-cpu", dict(pin_memory=True), "pin_memory"),
    ("dali-cpu", dict(hw_decoder_load=0.9), "hw_decoder_load"),
    ("torch", dict(prefetch_queue_depth=4), "prefetch_queue_depth"),
    ("torch", dict(py_start_method="spawn"), "py_start_method"),
    ("torch", dict(prefetch_factor=4), "prefetch_factor"),
])
def test_arguments_a_backend_ignores_warn(small_root, kind, kwargs, name):
    with pytest.warns(UserWarning, match=f"{name}=.*has no effect on the {kind} backend"):
        make(kind, small_root, **kwargs).close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_timeout_is_honoured_on_both_backends(small_root, tmp_path, kind):
    proc = run_script(tmp_path, """
        from dali_backend.core.reading import SampleReader
        real = SampleReader.read
        def slow(self, i, epoch=None):
            if i == 6:
                time.sleep(30)
            return real(self, i, epoch)
        SampleReader.read = slow  # before the workers start: they inherit it
        index = SampleIndex.from_folder({root!r}, progress=False)
        loader = DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, num_workers=1, device="cpu",
                            backend={backend!r}, timeout=2)
        t0 = time.monotonic()
        try:
            list(loader)
        except Exception as e:
            print("RAISED", type(e).__name__, round(time.monotonic() - t0, 1), flush=True)
        os._exit(0)
    """, timeout=60, root=str(small_root), backend=KINDS[kind]["backend"])
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RAISED")), proc.stderr[-2000:])
    assert line.startswith("RAISED LoaderTimeoutError"), line
    assert float(line.split()[2]) < 12


# ------------------------------------------------------------------------------------ found by a hostile test
@pytest.mark.slow
def test_index_and_dataset_pickle_so_spawned_torch_workers_work(small_root):
    import copy
    import pickle

    index = SampleIndex.from_folder(small_root, progress=False)
    again = pickle.loads(pickle.dumps(index))
    assert again.fingerprint == index.fingerprint and list(again.paths) == list(index.paths)
    assert copy.deepcopy(index).fingerprint == index.fingerprint
    with pytest.raises(AttributeError, match="immutable"):
        again.root = "/elsewhere"
    loader = make("torch", small_root, num_workers=2, multiprocessing_context="spawn")
    assert sum(len(y) for _, y in loader) == 24
    loader.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", [-1, 24])
def test_sampler_index_out_of_range_is_refused_alike(small_root, kind, bad):
    loader = make(kind, small_root, sampler=[0, bad, 1])
    with pytest.raises(IndexError, match=f"sample index {bad}, outside \\[0, 24\\)"):
        list(loader)
    loader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_batch_transform_is_not_counted(small_root, kind):
    def fail(images, labels):
        raise ZeroDivisionError("user code")

    loader = make(kind, small_root, batch_transform=fail)
    with pytest.raises(ZeroDivisionError):
        list(loader)
    assert loader.stats()["yielded"] == 0 and loader.state_dict()["batches_done"] == 0
    loader.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_stale_iterator_does_not_use_up_an_epoch(small_root, kind):
    loader = make(kind, small_root)
    with pytest.raises(StaleIteratorError):
        for _ in zip(loader, loader):
            pass
    assert loader.stats() == {}  # the stale iterator started nothing
    assert len(list(loader)) == 6 and loader.stats()["epoch"] == 0  # epoch 0 was not used up
    loader.close()


def test_resuming_a_sampler_that_changes_its_order_is_refused(small_root):
    from torch.utils.data import RandomSampler

    index = SampleIndex.from_folder(small_root, progress=False)
    first = make("torch", small_root, sampler=RandomSampler(range(len(index))))
    for i, _ in enumerate(first):
        if i == 1:
            break
    state = first.state_dict()
    other = make("torch", small_root, sampler=RandomSampler(range(len(index))))
    other.load_state_dict(state)
    with pytest.raises(ConfigError, match="plans another order"):
        list(other)
    first.close(), other.close()
