"""The DALI path's first batch: what its pipeline build costs, and that it is not paid where it buys nothing.

DALI's conditionals (``enable_conditionals``) run AutoGraph over the pipeline definition and every
function it calls: about 0.85 s of a fresh process's first batch for the default contract, measured
(``bench --only dali-cpu``). Only the fragments that branch per sample on the placement are converted.
"""

from __future__ import annotations

import sys

import pytest

from dali_backend import AugmentSpec
from dali_backend import transforms as T

pytest.importorskip("nvidia.dali")


def define_graph(spec: AugmentSpec, device: str):
    from dali_backend.dali.graph import build_pipeline

    def source(info):  # never called: the graph is only defined
        raise AssertionError("the graph was run")

    pipe = build_pipeline(spec, source, 4, device=device, device_id=0 if device == "gpu" else None, num_threads=1,
                          py_num_workers=1)
    pipe._build_graph()
    return pipe


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
