"""The mask graph on the GPU, defined on a CPU machine: its build errors are CI failures.

``build_pipeline(..., device="gpu", masks=True)`` then ``_build_graph()`` runs DALI's argument checks
for the mask steps (``fn.resize`` / ``fn.warp_affine`` with nearest interpolation, ``fn.slice`` for crops)
without a GPU; the defined graph is read back to check that the mask's operators run on the GPU, beside
the image's."""

from __future__ import annotations

import pytest

from dali_backend import AugmentSpec
from dali_backend import transforms as T

pytest.importorskip("nvidia.dali")

RECIPES = {
    "crop+flip+rotation+affine": [T.RandomResizedCrop(64, scale=(0.6, 1.0)), T.RandomHorizontalFlip(),
                                  T.RandomRotation(15), T.RandomAffine(10, translate=(0.05, 0.05), scale=(0.9, 1.1),
                                                                       shear=5)],
    "letterbox+flip": [T.Resize((36, 48), letterbox=True), T.RandomVerticalFlip(0.5)],
    "padded crop+rot90+resize": [T.RandomCrop(40, padding=6), T.RandomRot90(), T.Resize((32, 32))],
    "centre crop+affine": [T.CenterCrop((40, 50)), T.RandomAffine(20, scale=(0.7, 1.3), shear=10)],
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_the_mask_graph_is_defined_on_both_devices(recipe, device):
    from dali_backend.dali.graph import build_pipeline
    from tests.dali.test_gpu_graph import graph_nodes

    spec = AugmentSpec(ops=RECIPES[recipe], color="rgb", dtype="uint8")

    def source(info):  # never called: the graph is only defined
        raise AssertionError("the graph was run")

    pipe = build_pipeline(spec, source, 4, device=device, device_id=0 if device == "gpu" else None, num_threads=1,
                          py_num_workers=1, masks=True)
    pipe._build_graph()
    nodes = graph_nodes(pipe)
    nn = [n for n in nodes if n["op"] in ("Resize", "WarpAffine", "Slice")]
    assert nn, [n["op"] for n in nodes]  # the mask steps are in the graph
    for node in nodes:
        if node["op"] == "ExternalSource":
            assert node["device"] == "cpu"
        elif node["op"] in ("Resize", "WarpAffine", "Slice"):  # a crop of the mask is a slice
            assert node["device"] == device, f"{node['op']} runs on {node['device']}, expected {device}"
