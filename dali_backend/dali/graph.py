"""The DALI graph of the contract: one graph, two placements.

``device="gpu"``: nvJPEG decoding (``decoders.image``, device ``mixed``) and every following operator
on the GPU. ``device="cpu"``: the same operators on the CPU with ``device_id=None`` (how CI tests the
graph). Per-draw parameters arrive from the external source as per-sample operator arguments, so DALI
itself draws no random numbers. This module imports ``nvidia.dali``; only the loader imports it, and
only when a DALI pipeline is built.
"""

from __future__ import annotations

from typing import Literal

from ..core.augment import AugmentSpec
from ..transforms import GraphContext
from ..errors import MissingDependencyError
from ..formats import registry
from .targetgraph import mask_graph, mask_wire_count
from .wire import DrawSource

DALI_INSTALL_HINT = ("pip install nvidia-dali-cuda120 (CUDA 12 drivers) or nvidia-dali-cuda130 (CUDA 13); "
                     "or use backend='torch' for the CPU fallback")


def import_dali():
    """Import DALI or raise :class:`MissingDependencyError` with the install command."""
    try:
        import nvidia.dali as dali  # noqa: F401
        import nvidia.dali.fn  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError(f"NVIDIA DALI is not importable ({e}); install it: {DALI_INSTALL_HINT}") from e
    return dali


def build_pipeline(spec: AugmentSpec, source: DrawSource, batch_size: int, *, device: Literal["cpu", "gpu"],
                   device_id: int | None, num_threads: int, py_num_workers: int, py_start_method: str = "fork",
                   prefetch_queue_depth: int = 2, hw_decoder_load: float = 0.65, seed: int = 0, masks: bool = False,
                   fill_mask: int = 0, reader_ops: int = 0):
    """Build (not yet run) the pipeline for ``spec``; outputs ``(images uint8 [B, C, H, W], labels, slots)``,
    and each image's ``[H, W, C]`` before padding when the spec pads variable-size batches (``pad_batch``).

    The graph is the spec's operations in order (``op.dali``), fed by the parameters the source
    sends: the external source's outputs and dtypes are ``spec.wire``, and each operation receives
    its own parameters by name. ``masks``: the source also sends each draw's mask and its steps'
    arrays (:mod:`.targetgraph`), and the graph outputs the moved masks ``[B, 1, H, W]`` last, ``fill_mask``
    where they are padded or warped in from outside. When the first operation that changes pixels is a crop whose window
    lies inside the image (``spec.region_crop``), only that window is decoded. ``reader_ops``
    (:func:`~dali_backend.dali.wire.reader_ops`, CPU operators only): the source sends each draw decoded
    and through the spec's first ``reader_ops`` operations (``[H, W, C]`` uint8), and the graph starts
    after them, with no decoder. The readers then prepare ``prefetch_queue_depth`` batches ahead and
    the graph's queue is one batch: DALI's first run feeds every batch of its queue before it returns
    (``Pipeline._prefetch``), which would hold the first batch back by a whole batch of decoding
    (2048x1536, the loader's first batch 0.85-0.98 s against 1.38-1.40 s, the same throughput; one run).
    """
    dali = import_dali()
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import do_not_convert

    gpu = device == "gpu"
    if reader_ops and (gpu or spec.region_crop is not None or spec.bit_depth != 8):
        raise ValueError(f"build_pipeline: reader_ops={reader_ops} on a GPU graph, a region decode or a 16-bit spec; "
                         "this is a bug in dali_backend, please report it")
    wire = spec.wire
    wire_types = {"float32": types.FLOAT, "int32": types.INT32}
    ops = spec.transforms
    region = spec.region_crop
    # Only the fragments that branch per sample on this placement go through DALI's AutoGraph pass (it
    # rewrites every function the definition calls: ~0.85 s of the first batch for the default contract,
    # none of it needed on CPU operators); the rest of the graph is built by plain calls.
    branching = [op.branches(gpu) for op in ops]
    plain = do_not_convert(_plain_fragment)

    @do_not_convert
    def head():
        """The external source, the decoder (or region decoder) and the parameters' nodes per operation."""
        n_mask = 1 + mask_wire_count(spec) if masks else 0
        jpegs, labels, slots, *values = fn.external_source(
            source=source, num_outputs=3 + len(wire) + n_mask, batch=False, parallel=True,
            # with reader_ops the readers' batches are the costly part: they are the ones prepared ahead
            **({"prefetch_queue_depth": prefetch_queue_depth} if reader_ops else {}),
            dtype=[types.UINT8, types.INT64, types.INT64] + [wire_types[p.dtype] for _, p in wire]
            + ([types.UINT8] + [types.FLOAT] * (n_mask - 1) if masks else []))
        values, mask_values = values[:len(wire)], values[len(wire):]
        params: list[dict] = [{} for _ in ops]
        for (k, p), node in zip(wire, values):  # equal lengths: num_outputs=3 + len(wire)
            params[k][p.name] = node
        if reader_ops:  # decoded, through the first reader_ops operations, by the readers (wire.reader_ops)
            images = fn.reshape(jpegs, layout="HWC")
            shape = images.shape(dtype=types.INT32)
            ctx = GraphContext(gpu=False, channels=spec.channels, hw=(shape[0], shape[1]), bits=8)
            return images, labels, slots, params, mask_values, ctx, reader_ops
        # each registered format's decoder settings (JPEG: fancy upsampling on nvJPEG, as libjpeg-turbo)
        decode_args = {"hw_decoder_load": hw_decoder_load, **registry.dali_decoder_args(True)} if gpu \
            else registry.dali_decoder_args(False)
        decode_args.update(device="mixed" if gpu else "cpu", output_type=types.GRAY if spec.color == "gray" else types.RGB)
        if spec.bit_depth == 16:  # a Window (uint16 up to it) or decode_bits=16 (8-bit files promoted x * 257)
            decode_args["dtype"] = types.UINT16
        shape = fn.peek_image_shape(jpegs, dtype=types.INT32)  # after EXIF orientation, like the decoder
        ctx = GraphContext(gpu=gpu, channels=spec.channels, hw=(shape[0], shape[1]), bits=spec.bit_depth)
        if region is None:
            return fn.decoders.image(jpegs, **decode_args), labels, slots, params, mask_values, ctx, 0
        window = params[region]
        images = fn.decoders.image_slice(jpegs, start=window["start"], shape=window["shape"], axis_names="HW",
                                         **decode_args)
        return ops[region].after_region(images, window, ctx), labels, slots, params, mask_values, ctx, region + 1

    @do_not_convert
    def tail(images, labels, slots, mask_values):
        """The outputs: CHW images (and sizes, padded, for variable-size batches), labels, slots, masks."""
        extra = ()
        if masks:  # the mask through the same geometry, by nearest neighbour (targetgraph)
            mask = fn.reshape(mask_values[0], layout="HWC")
            mask = mask_graph(fn, types, mask.gpu() if gpu else mask, spec, mask_values[1:], fill_mask)
            if spec.pad_batch is not None:
                mask = fn.pad(mask, axis_names="HW", align=[spec.pad_batch, spec.pad_batch], fill_value=fill_mask)
            extra = (_chw(fn, mask, 1),)
        if spec.pad_batch is None:
            return (_output(fn, types, images, spec), labels, slots) + extra
        # variable-size outputs: each image's size, then the batch padded to its largest (rounded up)
        sizes = images.shape(dtype=types.INT64)
        images = fn.pad(images, axis_names="HW", align=[spec.pad_batch, spec.pad_batch], fill_value=0)
        return (_output(fn, types, images, spec), labels, slots, sizes) + extra

    @dali.pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id if gpu else None,
                       py_num_workers=py_num_workers, py_start_method=py_start_method,
                       prefetch_queue_depth=1 if reader_ops else prefetch_queue_depth, seed=seed, exec_dynamic=True,
                       enable_conditionals=any(branching))
    def graph():
        images, labels, slots, params, mask_values, ctx, first = head()
        for k in range(first, len(ops)):
            if branching[k]:  # converted by AutoGraph: its per-sample ``if`` becomes DALI's split and merge
                images = ops[k].dali(images, params[k], ctx)
            elif not ops[k].is_identity:
                images = plain(ops[k], images, params[k], ctx)
        return tail(images, labels, slots, mask_values)

    return graph()


def _chw(fn, images, channels: int):
    """``[H, W, C]`` -> ``[C, H, W]``: one channel is the same bytes with the axes renamed (a reshape,
    no copy: 0.016 against 0.05-0.09 ms per 256x256 image for the transpose, DALI CPU); three are transposed."""
    if channels == 1:
        return fn.reshape(images, src_dims=[2, 0, 1], layout="CHW")
    return fn.transpose(images, perm=[2, 0, 1])


def _output(fn, types, images, spec: AugmentSpec):
    """The images as handed over, ``[C, H, W]``; uint16 batches (``spec.batch_bits`` 16) as int16 of the same
    bits (``fn.reinterpret``, no copy): DALI's PyTorch iterator has no uint16 type, and
    :func:`~dali_backend.dali.handoff.as_uint16` views them back."""
    images = _chw(fn, images, spec.channels)
    return fn.reinterpret(images, dtype=types.INT16) if spec.batch_bits == 16 else images


def _plain_fragment(op, images, params: dict, ctx: GraphContext):
    """``op``'s DALI fragment, called as plain Python inside a pipeline definition (never converted by
    AutoGraph: a fragment without per-sample ``if``)."""
    return op.dali(images, params, ctx)
