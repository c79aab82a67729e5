"""The GPU graph of every operation, defined on a CPU machine: its build errors are CI failures.

``build_pipeline(..., device="gpu", device_id=0)`` followed by ``pipe._build_graph()`` needs no GPU:
DALI places every operator and checks every argument (its refusal of GPU nodes as named arguments,
``math.min`` of constants, argument types); only ``Build()`` needs CUDA. Each operation's examples
(``bench.equivalence.EXAMPLES``) are crossed with every sizing operation, before and after it, in
gray and RGB, and the placement is checked by reading the defined graph: the decoder on ``mixed``,
every operator that touches pixels on the GPU, the per-draw parameters on the CPU.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from bench.equivalence import EXAMPLES, example_ops
from dali_backend import AugmentSpec
from dali_backend.transforms import (CenterCrop, Clahe, Grayscale, RandomCrop, RandomResizedCrop, Resize,
                                     Transform)

# Sizes that are not multiples of the CLAHE tile counts (8 and (4, 6) in the examples) on purpose:
# the padded CLAHE graph then runs on Python-int sizes, where DALI refuses math.min of constants.
SIZING = {"none": None, "Resize(h,w)": Resize((30, 20)), "Resize(n)": Resize(29), "Resize(n,max)": Resize(21, max_size=35),
          "letterbox": Resize((27, 45), letterbox=True), "CenterCrop": CenterCrop(100), "RandomCrop": RandomCrop(27),
          "RandomResizedCrop": RandomResizedCrop((23, 41))}
FINAL = CenterCrop((18, 22))  # a fixed output size after a sizing operation that may not have one
PIXEL_OPS = [(f"{name}#{k}", op) for name in sorted(EXAMPLES) for k, op in enumerate(example_ops(name))]


def op_lists() -> dict[str, list[Transform]]:
    lists = {}
    for (label, op) in PIXEL_OPS:
        for sname, sizing in SIZING.items():
            if sizing is not None:
                if 8 in op.DEPTHS or 16 in sizing.DEPTHS:  # an 8-bit sizing op before a Window is refused
                    lists[f"{sname}>{label}"] = [sizing, op, FINAL]  # op sees the sizing op's (maybe static) size
                if sizing.static_size(None) is not None:
                    lists[f"{label}>{sname}"] = [op, sizing]  # op sees the decoded (per-sample) size
            else:
                lists[f"{label}>final"] = [op, FINAL]
    return lists


OP_LISTS = op_lists()


def define_graph(spec: AugmentSpec, device: str):
    """The pipeline for ``spec`` with its graph defined (not built): DALI's argument checks have run."""
    from dali_backend.dali.graph import build_pipeline

    def source(info):  # never called: the graph is only defined
        raise AssertionError("the graph was run")

    pipe = build_pipeline(spec, source, 4, device=device, device_id=0 if device == "gpu" else None, num_threads=1,
                          py_num_workers=1)
    pipe._build_graph()
    return pipe


def graph_nodes(pipe) -> list[dict]:
    """Each defined operator as ``{"op", "device", "inputs", "outputs"}``, read from DALI's OpSpec text."""
    nodes = []
    for instance in pipe._ops:
        text = str(instance.spec)
        section, node = None, {"op": re.match(r"OpSpec for (\S+):", text).group(1), "inputs": [], "outputs": []}
        for line in text.splitlines()[1:]:
            stripped = line.strip()
            if stripped in ("Inputs:", "Outputs:", "Arguments:"):
                section = stripped[:-1].lower()
            elif section in ("inputs", "outputs"):
                node[section].append(stripped)
            elif section == "arguments" and stripped.startswith("device:"):
                node["device"] = stripped.split(":", 1)[1].strip()
        nodes.append(node)
    return nodes


def pixel_nodes(nodes: list[dict]) -> list[dict]:
    """The operators downstream of the decoder (those that touch pixels)."""
    derived, out = set(), []
    for node in nodes:  # DALI lists operators in definition order: producers first
        if node["op"].startswith("decoders__") or any(i in derived for i in node["inputs"]):
            derived.update(node["outputs"])
            out.append(node)
    return out


def check_placement(nodes: list[dict], device: str) -> None:
    """The decoder on ``mixed`` (GPU) or ``cpu``, every pixel operator on ``device``, sources on the host."""
    decoders = [n for n in nodes if n["op"].startswith("decoders__")]
    assert len(decoders) == 1, [n["op"] for n in nodes]
    assert decoders[0]["device"] == ("mixed" if device == "gpu" else "cpu")
    for node in pixel_nodes(nodes)[1:]:
        assert node["device"] == device, f"{node['op']} runs on {node['device']}, expected {device}"
    for node in nodes:
        if node["op"] == "ExternalSource":
            assert node["device"] == "cpu"  # files, labels and per-draw parameters come from the host


def registered() -> dict[str, set[str]]:
    """The operators the installed DALI wheel registers for each device (its C++ registries): what
    ``Build()`` will find. Defining a graph does not check this: ``AddOperator`` accepts an operator
    on ``gpu`` that has no GPU implementation, and only ``Build()`` on a GPU machine would fail."""
    from nvidia.dali import backend

    return {"cpu": set(backend.RegisteredCPUOps()), "gpu": set(backend.RegisteredGPUOps()),
            "mixed": set(backend.RegisteredMixedOps())}


def check_registered(nodes: list[dict]) -> None:
    """Every node's operator is registered for the device it was placed on."""
    ops = registered()
    missing = [f"{n['op']} on {n['device']}" for n in nodes if n["op"] not in ops.get(n["device"], set())]
    assert not missing, f"not registered for its device in this DALI wheel: {missing}"


@pytest.mark.parametrize("color", ["rgb", "gray"])
@pytest.mark.parametrize("name", sorted(OP_LISTS))
def test_gpu_graph_defines_for_every_operation_and_sizing(name, color):
    ops = OP_LISTS[name]
    spec = AugmentSpec(ops=([Grayscale()] if color == "gray" else []) + ops)
    nodes = graph_nodes(define_graph(spec, "gpu"))
    check_placement(nodes, "gpu")
    check_registered(nodes)


@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_preset_and_recipes_define_on_the_gpu(color):
    specs = [AugmentSpec(color=color), AugmentSpec(color=color, size=(30, 20), fit="letterbox"),
             AugmentSpec(ops=([Grayscale()] if color == "gray" else []) + [RandomResizedCrop(224), Clahe(2, (5, 3))])]
    for spec in specs:
        nodes = graph_nodes(define_graph(spec, "gpu"))
        check_placement(nodes, "gpu")
        check_registered(nodes)


def test_the_registry_check_sees_an_operator_the_gpu_build_lacks():
    """The check can fail: DALI defines a graph with ``PeekImageShape`` on the GPU (it accepts the node),
    but the wheel registers no GPU implementation of it."""
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=2, num_threads=1, device_id=0)
    def pipe():
        jpegs = fn.external_source(source=lambda: [np.zeros(4, np.uint8)] * 2, batch=True)
        return fn.peek_image_shape(jpegs.gpu(), device="gpu")

    try:
        p = pipe()
        p._build_graph()
    except RuntimeError:  # a DALI that refuses the node while defining: the gap is caught anyway
        pytest.skip("this DALI refuses an unregistered GPU operator while defining the graph")
    nodes = graph_nodes(p)
    assert any(n["op"] == "PeekImageShape" and n["device"] == "gpu" for n in nodes), nodes
    with pytest.raises(AssertionError, match="PeekImageShape on gpu"):
        check_registered(nodes)
    check_registered([n for n in nodes if n["op"] != "PeekImageShape"])


def test_every_operator_the_graphs_use_is_seen():
    """The operators the checks above read: the decoders on ``mixed``, the pixel operators on the GPU."""
    seen = set()
    for name in sorted(OP_LISTS)[::7]:
        seen |= {(n["op"], n["device"]) for n in graph_nodes(define_graph(AugmentSpec(ops=OP_LISTS[name]), "gpu"))}
    assert ("decoders__Image", "mixed") in seen or ("decoders__ImageSlice", "mixed") in seen, sorted(seen)
    assert ("Resize", "gpu") in seen and ("ExternalSource", "cpu") in seen, sorted(seen)


def test_every_operation_with_examples_is_crossed():
    from dali_backend.transforms import REGISTRY

    crossed = {label.split("#")[0] for label, _ in PIXEL_OPS}
    pixel = {name for name, cls in REGISTRY.items() if cls.KIND not in ("output", "batch") and name != "Grayscale"}
    assert pixel <= crossed, f"operations without examples: {sorted(pixel - crossed)}"
    assert len(OP_LISTS) >= 200


def test_the_placement_check_sees_a_cpu_operator_in_a_gpu_graph():
    """The check can fail: a fragment that left pixels on the CPU in a GPU graph is caught."""
    nodes = [{"op": "decoders__Image", "device": "mixed", "inputs": ["j"], "outputs": ["a"]},
             {"op": "PeekImageShape", "device": "cpu", "inputs": ["j"], "outputs": ["s"]},
             {"op": "Resize", "device": "cpu", "inputs": ["a", "s"], "outputs": ["b"]}]
    with pytest.raises(AssertionError, match="Resize runs on cpu"):
        check_placement(nodes, "gpu")
    nodes[2]["device"] = "gpu"
    check_placement(nodes, "gpu")


def test_the_gpu_clahe_is_the_padded_graph_and_the_cpu_one_the_plain_operator():
    spec = AugmentSpec(ops=[Resize((30, 20)), Clahe()])  # 30x20 is not a multiple of 8 tiles: padded on the GPU
    gpu_ops = [n["op"] for n in pixel_nodes(graph_nodes(define_graph(spec, "gpu")))]
    cpu_ops = [n["op"] for n in pixel_nodes(graph_nodes(define_graph(spec, "cpu")))]
    assert gpu_ops.count("Clahe") == 3 and "Flip" in gpu_ops and "Cat" in gpu_ops  # per channel, reflect-101 pad
    assert cpu_ops.count("Clahe") == 1 and "Flip" not in cpu_ops


@pytest.mark.parametrize("name", [n for n in sorted(OP_LISTS) if n.startswith(("Resize(h,w)>", "CenterCrop>"))])
def test_cpu_graph_defines_too(name):
    check_placement(graph_nodes(define_graph(AugmentSpec(ops=OP_LISTS[name]), "cpu")), "cpu")


@pytest.mark.parametrize("device", ["gpu", "cpu"])
@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_16_bit_specs_decode_to_uint16_and_window_on_the_device(device, color):
    """A spec with a Window: the decoder gets dtype=UINT16 (on ``mixed`` for the GPU), the Window is a
    lookup table on the device, and the uint16-exact operations before it run there too."""
    from nvidia.dali import types

    from dali_backend import Window
    from dali_backend.transforms import RandomAffine, RandomHorizontalFlip, RandomRot90, RandomRotation

    for ops in ([RandomHorizontalFlip(), RandomCrop(40), Window(0, 4095), Clahe(), Resize((30, 20))],
                [CenterCrop(64), RandomRot90(), Window(100, 60000), Clahe()],
                [RandomCrop(40), Window(percentiles=(0.5, 99.5)), Resize((30, 20))],
                # resampling at 16 bits: resize on uint16, the warps through int32 (affine.at_depth), a region crop
                [Resize(29), RandomRotation(10), RandomAffine(5, scale=(0.9, 1.1)), CenterCrop(24), Window(0, 4095),
                 Clahe()],
                [RandomResizedCrop((23, 41)), RandomRotation(10), Window(0, 65535), Clahe()]):
        spec = AugmentSpec(ops=([Grayscale()] if color == "gray" else []) + ops)
        pipe = define_graph(spec, device)
        nodes = graph_nodes(pipe)
        check_placement(nodes, device)
        if device == "gpu":
            check_registered(nodes)
        decoder = next(i for i in pipe._ops if "decoders__" in str(i.spec).splitlines()[0])
        assert f"\n    dtype: {int(types.UINT16)}\n" in str(decoder.spec), str(decoder.spec)
        window = "LookupTable" if next(op for op in ops if isinstance(op, Window)).percentiles is None else "reductions__Sum"
        assert any(n["op"].startswith(window) and n["device"] == device for n in nodes), sorted({n["op"] for n in nodes})
        if any(isinstance(op, RandomRotation) for op in ops):  # the warps' casts around them, on the device
            casts = [n for n in nodes if n["op"].startswith("Cast") and n["device"] == device]
            assert len(casts) >= 2 * sum(isinstance(op, (RandomRotation, RandomAffine)) for op in ops), casts
    eight = define_graph(AugmentSpec(ops=[CenterCrop(64), Clahe()]), device)  # an 8-bit spec: the default dtype
    decoder = next(i for i in eight._ops if "decoders__" in str(i.spec).splitlines()[0])
    assert f"\n    dtype: {int(types.UINT16)}\n" not in str(decoder.spec)


@pytest.mark.parametrize("device", ["gpu", "cpu"])
@pytest.mark.parametrize("color", ["rgb", "gray"])
def test_16_bit_float_specs_hand_over_uint16_bits_from_the_device(device, color):
    """``decode_bits=16`` without a Window: the decoder gets dtype=UINT16, every operation runs on the
    device at 16 bits, and the batch leaves as int16 of the same bits (``Reinterpret``, on the device: DALI's
    PyTorch iterator has no uint16), padded first for variable-size batches."""
    from nvidia.dali import types

    from dali_backend.transforms import RandomAffine, RandomHorizontalFlip, RandomRotation

    for ops, pad in (([RandomHorizontalFlip(), RandomCrop(40), Resize((30, 20))], None),
                     ([RandomResizedCrop((23, 41)), RandomRotation(10), RandomAffine(5, scale=(0.9, 1.1))], None),
                     ([CenterCrop(64), Resize(29, max_size=40)], 8)):
        spec = AugmentSpec(ops=([Grayscale()] if color == "gray" else []) + ops, decode_bits=16, pad_batch=pad)
        pipe = define_graph(spec, device)
        nodes = graph_nodes(pipe)
        if pad is None:  # padded batches read each image's size on the host (_Shape)
            check_placement(nodes, device)
        if device == "gpu":
            check_registered(nodes)
        decoder = next(i for i in pipe._ops if "decoders__" in str(i.spec).splitlines()[0])
        assert f"\n    dtype: {int(types.UINT16)}\n" in str(decoder.spec), str(decoder.spec)
        assert [n["device"] for n in nodes if n["op"] == "Reinterpret"] == [device]
        handed = [i for i in pipe._ops if str(i.spec).startswith("OpSpec for Reinterpret")]
        assert len(handed) == 1 and f"\n    dtype: {int(types.INT16)}\n" in str(handed[0].spec), str(handed[0].spec)
        assert not any(n["op"].startswith("LookupTable") for n in nodes)  # no Window: no 8-bit step at all
