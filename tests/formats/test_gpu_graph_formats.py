"""The GPU graph with each format's decoder settings, defined on a CPU machine (``_build_graph()``: DALI
checks every argument and placement without CUDA; see tests/dali/test_gpu_graph.py)."""

from __future__ import annotations

import pytest

from dali_backend import AugmentSpec
from dali_backend.formats import registry
from dali_backend.transforms import Grayscale, RandomResizedCrop, Resize
from tests.dali.test_gpu_graph import check_placement, check_registered, define_graph, graph_nodes

SPECS = {"preset": lambda: AugmentSpec(size=32),
         "region": lambda: AugmentSpec(ops=[RandomResizedCrop(24), Resize((20, 20))], color="rgb"),
         "gray-resize": lambda: AugmentSpec(ops=[Grayscale(), Resize((20, 20))])}


@pytest.mark.parametrize("spec", sorted(SPECS))
@pytest.mark.parametrize("fmt", sorted(registry.FORMATS))
def test_the_gpu_graph_defines_with_each_formats_decoder_settings(fmt, spec, monkeypatch):
    only = registry.FORMATS[fmt].decoding
    monkeypatch.setattr(registry, "dali_decoder_args", lambda gpu: dict(only.dali_gpu if gpu else only.dali_cpu))
    nodes = graph_nodes(define_graph(SPECS[spec](), "gpu"))
    check_placement(nodes, "gpu")
    check_registered(nodes)


def test_every_registered_formats_settings_reach_the_mixed_decoder():
    pipe = define_graph(SPECS["preset"](), "gpu")
    decoder = next(str(op.spec) for op in pipe._ops if str(op.spec).startswith("OpSpec for decoders__"))
    for fmt in registry.FORMATS.values():
        for name in fmt.decoding.dali_gpu:
            assert f"{name}:" in decoder, (fmt.name, name)
    assert {"jpeg", "png", "tiff", "bmp", "webp"} <= set(registry.FORMATS)
