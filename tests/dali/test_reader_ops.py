"""A graph on CPU operators lets its reader workers decode and run the leading operations whose CPU
kernel is DALI's own code (dali_backend.dali.wire.reader_ops): the batches are the bytes the graph's
own decoder and ``fn.clahe`` give, a file the decoder refuses is a bad file named as such, and the GPU
graph's head still runs here when asked (``DALI_BACKEND_CPU_GRAPH_DECODE``)."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest
import torch

from dali_backend import AugmentSpec, BadImageError, DaliLoader, SampleIndex, WeightedSampler
from dali_backend import transforms as T
from dali_backend.dali.wire import GRAPH_DECODE_ENV, reader_ops
from fallback.dataset import ImageDataset
from tests.helpers import write
from tests.helpers.targets import mvtec_index_at

pytest.importorskip("nvidia.dali")


@pytest.mark.parametrize("ops, expected", [
    ([T.Clahe(), T.Resize((32, 32))], 1),
    ([T.Clahe(), T.Clahe(3.0, (4, 4)), T.RandomRotation(5), T.Resize((32, 32))], 2),
    ([T.Resize((32, 32)), T.Clahe()], 0),  # a geometric operation first: the graph decodes
    ([T.ColorJitter(0.2), T.Clahe(), T.Resize((32, 32))], 0),  # exact on the examples, but not declared the same code
    ([T.RandomRotation(0), T.Clahe(), T.Resize((32, 32))], 2),  # an identity costs nothing either side
    ([T.RandomRotation(0), T.Resize((32, 32))], 0),  # identities alone: nothing to run in the readers
])
def test_the_readers_run_the_leading_operations_that_are_dalis_code(ops, expected, monkeypatch):
    monkeypatch.delenv(GRAPH_DECODE_ENV, raising=False)
    spec = AugmentSpec(ops=ops)
    assert reader_ops(spec, gpu=False) == expected
    assert reader_ops(spec, gpu=True) == 0  # nvJPEG and the GPU's CLAHE are other code
    monkeypatch.setenv(GRAPH_DECODE_ENV, "1")
    assert reader_ops(spec, gpu=False) == 0
    monkeypatch.setenv(GRAPH_DECODE_ENV, "off")
    assert reader_ops(spec, gpu=False) == expected


def test_no_reader_operations_on_a_region_decode_or_a_16_bit_spec():
    assert reader_ops(AugmentSpec(ops=[T.Clahe(), T.RandomResizedCrop(32)]), gpu=False) == 1
    assert reader_ops(AugmentSpec(ops=[T.RandomResizedCrop(32), T.Clahe()]), gpu=False) == 0  # decodes its window
    assert reader_ops(AugmentSpec(ops=[T.Window(0, 4095), T.Clahe(), T.Resize((32, 32))]), gpu=False) == 0


def batches(ds, monkeypatch, graph_decode: bool, num_samples: int = 24, **kw):
    """Every batch of ``ds`` through a CPU graph, decoded in the readers or (``graph_decode``) by DALI,
    and the number of reader workers the pipeline ran."""
    if graph_decode:
        monkeypatch.setenv(GRAPH_DECODE_ENV, "1")
    else:
        monkeypatch.delenv(GRAPH_DECODE_ENV, raising=False)
    sampler = WeightedSampler(ds.index, num_samples=num_samples, seed=0)
    loader = DaliLoader(ds, batch_size=8, sampler=sampler, num_workers=2, device="cpu", backend="dali", **kw)
    try:
        out = list(loader)
        readers = len(loader._executor.worker_pids())
    finally:
        loader.close()
    return out, readers


@pytest.mark.parametrize("color", ["gray", "rgb"])
def test_the_readers_give_the_graph_decoders_pixels(odd_root, monkeypatch, color):
    """Awkward images (1x1, 7x5, 2000x40, EXIF-rotated, progressive, gray and colour) through Clahe first:
    the same bytes whether DALI's decoder and fn.clahe ran them or the readers did."""
    index = SampleIndex.from_folder(odd_root, progress=False)
    spec = AugmentSpec(ops=[T.Clahe(3.0, (4, 6)), T.Resize((40, 24)), T.RandomRotation(10), T.ColorJitter(0.2, 0.2)],
                       color=color, dtype="uint8")
    ds = ImageDataset(index, spec, seed=1)
    assert reader_ops(spec, gpu=False) == 1
    ours, readers = batches(ds, monkeypatch, graph_decode=False)
    dalis, graph_readers = batches(ds, monkeypatch, graph_decode=True)
    assert (readers, graph_readers) == (2, 1)  # one reader per DALI thread when they decode
    assert len(ours) == len(dalis) == 3
    for (x, y, *_), (dx, dy, *_) in zip(ours, dalis):
        assert x.dtype == torch.uint8 and torch.equal(x, dx) and torch.equal(y, dy)


def test_masks_and_parameters_are_the_same_with_the_readers_decoding(tmp_path, monkeypatch):
    index = mvtec_index_at(tmp_path, (96, 80), n_defect=3)
    spec = AugmentSpec(ops=[T.Clahe(), T.RandomResizedCrop(48, scale=(0.6, 1.0)), T.RandomHorizontalFlip(),
                            T.RandomRotation(15)], color="rgb", dtype="uint8")
    ds = ImageDataset(index, spec, seed=2)
    ours, _ = batches(ds, monkeypatch, graph_decode=False, num_samples=16, return_meta=True)
    dalis, _ = batches(ds, monkeypatch, graph_decode=True, num_samples=16, return_meta=True)
    assert len(ours) == len(dalis) == 2
    for a, b in zip(ours, dalis):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["mask"], b["mask"])
        assert a["mask"].sum() > 0 or b["mask"].sum() == 0
        for key in ("index", "position"):
            assert a["meta"][key].tolist() == b["meta"][key].tolist()
        assert a["meta"]["params"] == b["meta"]["params"]  # every draw's parameters


def corrupt_png(path) -> None:
    """Overwrite ``path``'s PNG data with bytes that fail its checksum, keeping its size and header."""
    data = bytearray(path.read_bytes())
    at = data.index(b"IDAT") + 20
    data[at:at + 40] = bytes(b ^ 0x5A for b in data[at:at + 40])
    path.write_bytes(bytes(data))


@pytest.fixture
def png_root(tmp_path):
    rng = np.random.default_rng(0)
    for cls, n in (("good", 6), ("dent", 2)):
        for k in range(n):
            img = cv2.GaussianBlur(rng.integers(0, 256, (40, 52), dtype=np.uint8), (0, 0), 2)
            write(tmp_path / cls / f"{k}.png", cv2.imencode(".png", img)[1].tobytes())
    return tmp_path


def test_a_file_the_readers_decoder_refuses_is_named(png_root, monkeypatch):
    index = SampleIndex.from_folder(png_root, progress=False)
    corrupt_png(png_root / "good" / "3.png")  # after indexing: same size, header intact
    ds = ImageDataset(index, AugmentSpec(ops=[T.Clahe(), T.Resize((24, 24))], dtype="uint8"), seed=0)
    with pytest.raises(BadImageError, match=r"good/3\.png.*the PNG decoder refused it \(corrupt PNG data\)"):
        batches(ds, monkeypatch, graph_decode=False, num_samples=64)


def test_skip_replaces_a_file_the_readers_decoder_refuses_as_the_fallback_does(png_root, monkeypatch):
    index = SampleIndex.from_folder(png_root, progress=False)
    corrupt_png(png_root / "good" / "3.png")
    ds = ImageDataset(index, AugmentSpec(ops=[T.Clahe(), T.Resize((24, 24))], dtype="uint8"), seed=0)
    ours, _ = batches(ds, monkeypatch, graph_decode=False, num_samples=64, on_error="skip", return_meta=True)
    sampler = WeightedSampler(index, num_samples=64, seed=0)
    with DaliLoader(ds, batch_size=8, sampler=sampler, num_workers=0, device="cpu", backend="torch",
                    on_error="skip", return_meta=True) as loader:
        on_torch = list(loader)
    bad = next(i for i in range(len(index)) if index.abspath(i).endswith("good/3.png"))
    drawn = served = 0
    assert len(ours) == len(on_torch) == 8
    for (x, y, meta), (tx, ty, tmeta) in zip(ours, on_torch):
        assert torch.equal(x, tx) and torch.equal(y, ty)
        assert meta["index"].tolist() == tmeta["index"].tolist() and meta["planned"].tolist() == tmeta["planned"].tolist()
        drawn += int((meta["planned"] == bad).sum())
        served += int((meta["index"] == bad).sum())
    assert drawn > 0 and served == 0  # drawn, and each time replaced by another of its class


def test_the_first_batch_comes_out_before_the_readers_read_the_next(png_root, monkeypatch, tmp_path):
    """DALI's iterator returns a batch only after its next run received the next batch's input; with the
    readers decoding, that held the first batch back by a whole batch of their work. The readers now get
    the second batch's draws once the first is out (each read leaves a mark, from the reader processes;
    the second batch's reads take a second each until the first batch is seen), and the pass is the one
    the graph's own decoder gives."""
    import os

    from dali_backend.core.reading import SampleReader

    parent = os.getpid()
    marks = tmp_path / "reads"
    marks.mkdir()
    real_read = SampleReader.read

    def read(self, i, epoch=None):
        data = real_read(self, i, epoch)
        if os.getpid() != parent:  # the readers' reads (the dataset's probes read in this process)
            if i >= 4 and not (tmp_path / "seen").exists():
                time.sleep(1.0)  # the second batch's files read slowly until the first batch was seen
            (marks / str(int(i))).touch()
        return data

    monkeypatch.setattr(SampleReader, "read", read)  # inherited by DALI's forked readers
    monkeypatch.delenv(GRAPH_DECODE_ENV, raising=False)
    index = SampleIndex.from_folder(png_root, progress=False)
    ds = ImageDataset(index, AugmentSpec(ops=[T.Clahe(), T.Resize((24, 24))], dtype="uint8"), seed=0)
    sampler = WeightedSampler(index, mode="sequential")
    with DaliLoader(ds, batch_size=4, sampler=sampler, num_workers=2, device="cpu", backend="dali",
                    return_meta=True) as loader:
        it = iter(loader)
        first = next(it)
        read_then = {int(p.name) for p in marks.iterdir()}
        (tmp_path / "seen").touch()
        rest = list(it)
        again = list(loader)  # the pipeline's later passes: nothing held
    # the first batch's files, and not the next batch's (before, all of them: DALI waited for their reads)
    assert first[2]["index"].tolist() == [0, 1, 2, 3] and {0, 1, 2, 3} <= read_then and len(read_then) < 8
    assert len(rest) == 1 and len(again) == 2
    monkeypatch.setenv(GRAPH_DECODE_ENV, "1")
    with DaliLoader(ds, batch_size=4, sampler=WeightedSampler(index, mode="sequential"), num_workers=2, device="cpu",
                    backend="dali", return_meta=True) as loader:
        graph = list(loader)
    assert len(graph) == 2
    for (x, y, meta), (gx, gy, gmeta) in zip([first, *rest], graph):
        assert torch.equal(x, gx) and torch.equal(y, gy) and meta["index"].tolist() == gmeta["index"].tolist()


def png_loader(png_root, monkeypatch, **kw):
    monkeypatch.delenv(GRAPH_DECODE_ENV, raising=False)
    index = SampleIndex.from_folder(png_root, progress=False)
    ds = ImageDataset(index, AugmentSpec(ops=[T.Clahe(), T.Resize((24, 24))], dtype="uint8"), seed=0)
    return DaliLoader(ds, batch_size=4, sampler=WeightedSampler(index, mode="sequential"), num_workers=2,
                      device="cpu", backend="dali", return_meta=True, **kw)


def test_a_ctrl_c_during_the_first_batch_leaves_the_next_pass_whole(png_root, monkeypatch):
    """A Ctrl-C while the first batch is awaited: DALI's thread still finishes it, and holds the second run,
    which needs the next batch's draws. They were not written (only the first batch's), so the next pass
    hung on the readers; the loader's timeout turns such a hang into a failure here."""
    from dali_backend.dali.runner import DaliRunner

    real_call, calls = DaliRunner._call, []

    def call(self, keep=True):
        out = real_call(self, keep)
        calls.append(keep)
        if len(calls) == 1:  # interrupted as the wait ended: the batch is made, the caller never gets it
            self._clean_interrupt = True
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(DaliRunner, "_call", call)
    with png_loader(png_root, monkeypatch, timeout=30) as loader:
        with pytest.raises(KeyboardInterrupt):
            next(iter(loader))
        passes = [[meta["index"].tolist() for _, _, meta in loader] for _ in range(2)]
    assert passes == [[[0, 1, 2, 3], [4, 5, 6, 7]]] * 2


def test_close_with_the_second_run_held_stops_the_readers_now(png_root, monkeypatch):
    """The held run refers to the pipeline: close() drops it, so the pipeline and its reader processes go at
    close(), not when the open iterator is collected."""
    import gc

    loader = png_loader(png_root, monkeypatch)
    it = iter(loader)
    next(it)  # the second run is held now
    pids = loader._executor.worker_pids()
    assert len(pids) == 2
    loader.close()
    gc.collect()
    deadline = time.monotonic() + 20
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if _running(pid)]
        time.sleep(0.05)
    assert alive == [], "DALI's reader processes outlived close()"
    del it


def _running(pid: int) -> bool:
    import os

    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child and has exited
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
