"""Variable-size batches (issue 23: 4): the aspect ratio kept (shorter side, ``max_size``, no crop), each
batch padded with 0 to its largest height and width (rounded up to a multiple), the valid sizes
``[B, 2]`` returned; the same on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import KINDS, LOADER_ARGS, jpeg_bytes, needs_cuda, write
from dali_backend import AugmentSpec, ConfigError, DaliLoader, SampleIndex
from dali_backend.sampling.clips import ClipSampler
from dali_backend.transforms import ColorJitter, Normalize, RandomErasing, RandomHorizontalFlip, Resize
from dali_backend.transforms.resize import shorter_side_size
from fallback import ImageDataset
from tests.helpers.levels import assert_within_tolerance

# (height, width) of each file; a_big sorts first: sample 0, which DALI pads the last partial batch with
SIZES = {"a_big.jpg": (90, 120), "b.jpg": (24, 32), "c.jpg": (40, 30), "d.jpg": (17, 50), "e.jpg": (33, 33),
         "f.jpg": (20, 60), "g.jpg": (48, 36)}


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> SampleIndex:
    root = tmp_path_factory.mktemp("sizes")
    for k, (name, (h, w)) in enumerate(SIZES.items()):
        write(root / "ok" / name, jpeg_bytes(h, w, seed=k, color=k % 2 == 0))
    return SampleIndex.from_folder(root, progress=False)


def spec(multiple: int, dtype: str = "uint8") -> AugmentSpec:
    return AugmentSpec(ops=[Resize(16, max_size=28), RandomHorizontalFlip(), ColorJitter(0.3, 0.3)], color="rgb",
                       pad_batch=multiple, dtype=dtype)


def run(index, sp, kind, batch_size=3, **kw):
    loader = DaliLoader(ImageDataset(index, sp, seed=4), batch_size=batch_size, **KINDS[kind], **kw)
    try:
        return list(loader)
    finally:
        loader.close()


@pytest.mark.parametrize("multiple", [1, 8])
def test_both_backends_pad_alike_and_return_the_valid_sizes(index, multiple):
    sp = spec(multiple)
    runs = {kind: run(index, sp, kind) for kind in KINDS}  # sequential: batches of 3, 3, 1
    for kind, batches in runs.items():
        assert [len(b[1]) for b in batches] == [3, 3, 1], kind
        seen = 0
        for images, labels, sizes in batches:
            assert sizes.dtype == torch.int64 and sizes.shape == (len(labels), 2)
            want = [shorter_side_size(*SIZES[index.paths[seen + k].split("/")[-1]], 16, 28) for k in range(len(labels))]
            assert sizes.tolist() == [list(s) for s in want], kind
            h, w = (-(-sizes.max(dim=0).values // multiple) * multiple).tolist()
            assert images.shape == (len(labels), 3, h, w), (kind, images.shape)  # the largest, rounded up
            for k, (vh, vw) in enumerate(sizes.tolist()):
                assert images[k, :, vh:].eq(0).all() and images[k, :, :, vw:].eq(0).all()  # padding is 0
                assert images[k, :, :vh, :vw].float().mean() > 20  # the image is in the top-left corner
            seen += len(labels)
    # the last batch holds one sample: DALI padded it with sample 0 (the largest), and trimmed that away
    assert runs["dali-cpu"][-1][0].shape == runs["torch"][-1][0].shape
    for (x, _, s), (u, _, t) in zip(runs["dali-cpu"], runs["torch"], strict=True):
        assert torch.equal(s, t)
    assert_within_tolerance([x for x, _, _ in runs["dali-cpu"]], [u for u, _, _ in runs["torch"]], sp, 0)


def test_normalised_padding_and_meta(index):
    sp = AugmentSpec(ops=[Resize(16, max_size=28), Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))], color="rgb",
                     pad_batch=4)
    for kind in KINDS:
        images, labels, sizes, meta = run(index, sp, kind, batch_size=7, return_meta=True)[0]
        assert images.dtype == torch.float32 and meta["path"][0].endswith("a_big.jpg") and len(meta["path"]) == 7
        # padding is the normalised value of level 0, (0 - 0.5) / 0.25, on both backends
        pad = images[1, :, sizes[1, 0]:]
        assert pad.numel() and torch.equal(pad, torch.full_like(pad, -2.0))


def test_clips_of_variable_size_frames(tmp_path):
    root = Path(tmp_path)
    for k in range(1, 5):
        write(root / "ok" / "run" / f"f{k}.jpg", jpeg_bytes(30, 40, seed=k))
        write(root / "ok" / "tall" / f"f{k}.jpg", jpeg_bytes(50, 20, seed=10 + k))
    index = SampleIndex.from_folder(root, progress=False)
    got = {}
    for kind in KINDS:
        sampler = ClipSampler(index, clip_len=2, step=2, mode="sequential")
        got[kind] = run(index, spec(8), kind, batch_size=4, sampler=sampler)
        (clips, labels, sizes), = got[kind]
        assert clips.shape == (4, 2, 3, 32, 24) and sizes.shape == (4, 2, 2)  # [B, T, 2]
        assert sizes.tolist() == [[[16, 21]] * 2] * 2 + [[[28, 11]] * 2] * 2
    assert torch.equal(got["dali-cpu"][0][0], got["torch"][0][0])


def test_padding_options_are_checked():
    with pytest.raises(ConfigError, match=r"pad_batch=0.*\[1, 4096\]"):
        AugmentSpec(ops=[Resize(16)], pad_batch=0)
    with pytest.raises(ConfigError, match="needs an operation list"):
        AugmentSpec(size=16, pad_batch=8)
    with pytest.raises(ConfigError, match="RandomErasing needs one output size"):
        AugmentSpec(ops=[Resize(16), RandomErasing()], pad_batch=8)
    with pytest.raises(ConfigError, match="or pass pad_batch="):
        AugmentSpec(ops=[Resize(16)])
    assert AugmentSpec(ops=[Resize(16)], pad_batch=8).variable_size
    assert "pad_batch=8" in repr(AugmentSpec(ops=[Resize(16)], pad_batch=8))


@pytest.mark.parametrize("multiple", [1, 32])
def test_the_gpu_graph_of_padded_batches_is_defined(multiple):
    """The GPU variant of the padded graph passes DALI's definition checks here (no CUDA needed): the
    decoder on mixed, the operations and the pad on the GPU, the sizes read from the GPU data."""
    from tests.dali.test_gpu_graph import check_placement, define_graph, graph_nodes

    nodes = graph_nodes(define_graph(spec(multiple), "gpu"))
    shapes = [n for n in nodes if n["op"] == "_Shape"]
    assert len(shapes) == 1 and shapes[0]["device"] == "cpu"  # a GPU tensor's shape is host metadata
    check_placement([n for n in nodes if n["op"] != "_Shape"], "gpu")
    pads = [n for n in nodes if n["op"] == "Pad"]
    assert len(pads) == 1 and pads[0]["device"] == "gpu"


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("multiple", [1, 32])
def test_padded_batches_on_the_gpu_equal_the_fallback(index, multiple):
    """The GPU check's case: fn.pad on the GPU gives the fallback's shapes and valid sizes, 0 padding, and
    pixels within the GPU's published bound."""
    from bench.equivalence import over_bound
    from tests.helpers.levels import level_stats

    sp = spec(multiple)
    gpu_loader = DaliLoader(ImageDataset(index, sp, seed=4), batch_size=3, **LOADER_ARGS["dali-gpu"])
    try:
        gpu = [(x.cpu(), y.cpu(), s.cpu()) for x, y, s in gpu_loader]
    finally:
        gpu_loader.close()
    cpu = run(index, sp, "torch")
    for (x, y, s), (u, v, t) in zip(gpu, cpu, strict=True):
        assert x.shape == u.shape and torch.equal(y, v) and torch.equal(s, t)
        for k, (vh, vw) in enumerate(s.tolist()):
            assert x[k, :, vh:].eq(0).all() and x[k, :, :, vw:].eq(0).all()
    stats = level_stats([x for x, _, _ in gpu], [u for u, _, _ in cpu], sp)
    assert not over_bound("end-to-end", stats, "gpu"), stats
