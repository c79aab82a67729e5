"""What the DALI graph costs that buys nothing: AutoGraph where nothing branches, copies where none is needed.

DALI's conditionals (``enable_conditionals``) run AutoGraph over the pipeline definition and every
function it calls: about 0.85 s of a fresh process's first batch for the default contract, measured
(``bench --only dali-cpu``). Only the fragments that branch per sample on the placement are converted.
A one-channel batch reaches ``[C, H, W]`` without a copy.
"""

from __future__ import annotations

import sys

import pytest

from dali_backend import AugmentSpec
from dali_backend import transforms as T

pytest.importorskip("nvidia.dali")

from tests.dali.test_gpu_graph import check_registered, define_graph, graph_nodes  # noqa: E402


def fragment_files(monkeypatch, spec: AugmentSpec, device: str) -> dict[str, str]:
    """The file each operation's DALI fragment ran from while the graph was defined: this file when it
    was called as plain Python, AutoGraph's generated code (or its call machinery) when it was converted."""
    seen: dict[str, str] = {}
    for cls in {type(op) for op in spec.transforms}:
        def spy(self, images, params, ctx, _original=cls.dali, _name=cls.__name__):
            seen[_name] = sys._getframe().f_code.co_filename
            return _original(self, images, params, ctx)

        monkeypatch.setattr(cls, "dali", spy)
    define_graph(spec, device)
    return seen


def test_the_default_contract_on_cpu_operators_is_built_without_autograph(monkeypatch):
    """CLAHE branches only in its portable (GPU) graph: on CPU operators no fragment is converted, and the
    default contract's pipeline has DALI's conditionals off."""
    spec = AugmentSpec(size=64)
    seen = fragment_files(monkeypatch, spec, "cpu")
    assert set(seen) == {"Clahe", "Resize", "RandomRotation", "ColorJitter"}
    assert all(f == __file__ for f in seen.values()), seen
    assert define_graph(spec, "cpu")._conditionals_enabled is False


def test_on_the_gpu_only_the_branching_fragments_are_converted(monkeypatch):
    """The GPU graph of the default contract needs conditionals (the portable CLAHE's padding branch):
    CLAHE's fragment goes through AutoGraph, the others are plain calls."""
    spec = AugmentSpec(size=64)
    seen = fragment_files(monkeypatch, spec, "gpu")
    assert seen["Clahe"] != __file__
    assert {k: f for k, f in seen.items() if k != "Clahe"} == dict.fromkeys(["Resize", "RandomRotation", "ColorJitter"],
                                                                            __file__)
    assert define_graph(spec, "gpu")._conditionals_enabled is True


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_a_branching_operation_is_converted_on_every_placement(monkeypatch, device):
    """RandomRot90 turns per sample with an ``if`` on both placements: converted there, its neighbours not."""
    spec = AugmentSpec(ops=[T.Resize((32, 32)), T.RandomRot90(), T.CenterCrop(24)])
    seen = fragment_files(monkeypatch, spec, device)
    assert seen["RandomRot90"] != __file__
    assert seen["Resize"] == seen["CenterCrop"] == __file__


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("color, layout_op", [("gray", "Reshape"), ("rgb", "Transpose")])
def test_one_channel_reaches_chw_without_a_copy(device, color, layout_op):
    """A gray batch becomes ``[C, H, W]`` by a reshape (the same bytes, axes renamed), an RGB one by a
    transpose; the masks (one channel) by a reshape too. The pixels are the ones before (the loader's
    equivalence tests compare them with the fallback's)."""
    nodes = graph_nodes(define_graph(AugmentSpec(size=32, color=color), device))
    layout = [n["op"] for n in nodes if n["op"] in ("Reshape", "Transpose")]
    assert layout == [layout_op]
    check_registered(nodes)


def test_the_gpu_graphs_branching_runs_on_cpu_operators(monkeypatch, odd_root):
    """The GPU's structure, run here: CLAHE's portable graph (its per-sample padding branch, converted by
    AutoGraph) between fragments built as plain calls, on images whose sizes take both branches
    (7x5, 2000x40 and 60x90 are not whole tiles; 1024x768 is). The pixels agree with the fallback's
    within the end-to-end bound, as with CPU operators' plain CLAHE."""
    from bench.equivalence import compare_end_to_end, over_bound
    from dali_backend import SampleIndex, WeightedSampler
    from dali_backend.dali.wire import GRAPH_DECODE_ENV
    from dali_backend.transforms import clahe_graph
    from fallback import ImageDataset

    plain = clahe_graph.clahe_like_opencv
    ran = []

    def portable(images, h, w, tiles, clip_limit, channels, portable=None):
        ran.append(sys._getframe().f_code.co_filename)
        return plain(images, h, w, tiles, clip_limit, channels, portable=True)

    monkeypatch.setattr(clahe_graph, "clahe_like_opencv", portable)
    monkeypatch.setattr(T.Clahe, "branches", lambda self, gpu: True)
    monkeypatch.setenv(GRAPH_DECODE_ENV, "1")  # the GPU graph's head: DALI decodes, fn.clahe in the graph
    index = SampleIndex.from_folder(odd_root, progress=False)
    ds = ImageDataset(index, AugmentSpec(size=(31, 17), rotate_deg=10, brightness=0.2, contrast=0.2), seed=1)
    stats = compare_end_to_end(ds, WeightedSampler(index, num_samples=24, seed=0), device="cpu")
    assert ran and all(f != __file__ for f in ran)  # converted: the branch is DALI's split and merge
    assert stats["labels_equal"]
    assert not over_bound("end-to-end", stats, "cpu"), stats
