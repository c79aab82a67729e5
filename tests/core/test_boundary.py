"""The executor boundary: the records, the DALI wire's notes, and the facade never reading a file itself."""

from __future__ import annotations

import builtins
import json
import os
import pickle
import threading

import numpy as np
import pytest

from bench.equivalence import example_ops
from tests.helpers import KINDS, jpeg_bytes, write
from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex, WeightedSampler
from dali_backend.core.boundary import BadDraw, Kind, Plan, padding_rows, plain_params, planned_rows
from dali_backend.dali.wire import NOTE_HEADER, SlotRing, note_bytes
from dali_backend.transforms import REGISTRY, Resize
from fallback import ImageDataset


# ------------------------------------------------------------------------------------ records
def test_planned_and_padding_rows_have_the_plan_columns():
    rows = planned_rows(np.array([[3, 1, 7], [4, 1, 8]]))
    assert rows.shape == (2, len(Plan)) and rows.dtype == np.int64
    assert rows[:, Plan.INDEX].tolist() == [3, 4] and rows[:, Plan.POSITION].tolist() == [7, 8]
    assert (rows[:, Plan.KIND] == Kind.DRAW).all()
    assert (padding_rows(3)[:, Plan.KIND] == Kind.PAD).all()


def test_bad_draw_round_trips_its_fields_and_error():
    bad = BadDraw("/data/a/\udcff caf\u00e9.jpg", 3, 1, 7, "file changed since indexing (size 10 -> 4 bytes)")
    again = BadDraw.from_json(bad.to_json(1024))
    assert again == bad
    e = again.error()
    assert isinstance(e, BadImageError) and (e.path, e.index, e.label, e.epoch, e.reason) == \
        (bad.path, 3, 1, 7, bad.reason)
    assert BadDraw.from_error(e) == bad


def test_bad_draw_note_shortens_a_long_reason_and_then_drops_a_path_too_long():
    bad = BadDraw("/d/x.jpg", 1, 0, 2, "why " * 2000)
    data = bad.to_json(300)
    assert len(data) <= 300
    short = BadDraw.from_json(data)
    assert short.path == bad.path and short.reason.endswith("...") and bad.reason.startswith(short.reason[:-3])
    long_path = BadDraw("/d/" + "p" * 500 + ".jpg", 1, 0, 2, "truncated")
    data = long_path.to_json(256)
    assert len(data) <= 256 and BadDraw.from_json(data).path == ""  # the receiver names it from the index


# ------------------------------------------------------------------------------------ the wire's notes
def test_slot_ring_notes_cross_processes_and_refuse_another_slots_note():
    ring = SlotRing(4, note_bytes=128)
    try:
        ring.write_note(6, b'{"a": 1}')
        attached = pickle.loads(pickle.dumps(ring))  # what a spawned worker gets
        assert attached.read_note(6) == b'{"a": 1}'
        attached.write_note(7, b"xyz")
        assert ring.read_note(7) == b"xyz"
        with pytest.raises(RuntimeError, match="no note for slot 2"):
            ring.read_note(2)  # slot 2 shares 6's place in the ring: never another slot's note
        with pytest.raises(RuntimeError, match="does not fit"):
            ring.write_note(1, b"x" * 128)
        attached.close()
    finally:
        ring.close()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_draws_parameters_always_fit_its_note(name):
    """The note's room is an upper bound for every draw of every example of every operation."""
    for op in example_ops(name):
        ops = [Resize((32, 32)), op] if op.KIND == "batch" else [op, Resize((32, 32))]
        spec = AugmentSpec(ops=ops)
        room = note_bytes(spec, 10, with_params=True) - NOTE_HEADER
        rng = np.random.default_rng(0)
        for position in range(200):
            size = (int(rng.integers(1, 5000)), int(rng.integers(1, 5000)))
            params = spec.make_params(int(rng.integers(0, 2**31)), position % 7, position, size)
            assert len(json.dumps(plain_params(params)).encode()) <= room, (op, size)


# ------------------------------------------------------------------------------------ the facade reads no file
@pytest.fixture
def watched_root(tmp_path):
    for i in range(8):
        write(tmp_path / ("ok" if i < 5 else "dent") / f"{i}.jpg", jpeg_bytes(40 + 4 * i, 56, seed=i))
    return tmp_path


def _main_process_opens(monkeypatch, root) -> list:
    """Every image file the main process opens from now on (``open`` or ``os.open``, the reader's way;
    workers are other processes), but in the torch-threads executor's threads (its workers)."""
    from fallback.threads import THREAD_PREFIX

    main, opened = os.getpid(), []

    def watch(real):
        def watching(file, *args, **kwargs):
            if os.getpid() == main and not threading.current_thread().name.startswith(THREAD_PREFIX) and str(file).startswith(str(root)) and str(file).endswith(".jpg"):
                opened.append(str(file))
            return real(file, *args, **kwargs)
        return watching

    monkeypatch.setattr(builtins, "open", watch(builtins.open))
    monkeypatch.setattr(os, "open", watch(os.open))
    return opened


@pytest.mark.parametrize("kind", KINDS)
def test_return_meta_params_come_from_the_executor_without_reading_files_again(watched_root, monkeypatch, kind):
    from dali_backend.transforms import RandomResizedCrop

    index = SampleIndex.from_folder(watched_root, progress=False)
    ds = ImageDataset(index, AugmentSpec(ops=(RandomResizedCrop(24),)), seed=3)
    opened = _main_process_opens(monkeypatch, watched_root)
    workers = 2 if kind.startswith("torch") else 0  # DALI reads in its own worker processes
    with DaliLoader(ds, batch_size=3, num_workers=workers, return_meta=True, sampler=WeightedSampler(index, seed=1),
                    **KINDS[kind]) as loader:
        metas = [m for _, _, m in loader]
    assert opened == []
    for meta in metas:
        for i, e, p, params in zip(meta["index"].tolist(), meta["epoch"].tolist(), meta["position"].tolist(),
                                   meta["params"]):
            h, w = int(index.heights[i]), int(index.widths[i])
            want = ds.spec.describe_params(plain_params(ds.spec.make_params(3, e, p, (h, w))))
            assert params == want


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_files_fields_come_from_the_worker_that_read_it(watched_root, monkeypatch, kind):
    index = SampleIndex.from_folder(watched_root, progress=False)
    (watched_root / "ok" / "2.jpg").write_bytes(jpeg_bytes(48, 56, seed=2)[:200])  # changed after indexing
    ds = ImageDataset(index, AugmentSpec(size=16, color="rgb"))  # built before the watch: what a pass opens counts
    opened = _main_process_opens(monkeypatch, watched_root)
    workers = 2 if kind.startswith("torch") else 0
    loader = DaliLoader(ds, batch_size=4, num_workers=workers, **KINDS[kind])
    loader.set_epoch(4)
    with loader, pytest.raises(BadImageError) as e:
        list(loader)
    assert opened == []  # the error was not rebuilt by reading the file in the main process
    err = e.value
    i = list(index.paths).index("ok/2.jpg")
    assert err.path == index.abspath(i) and err.index == i and err.label == index.labels[i] and err.epoch == 4
    assert "changed since indexing" in err.reason
