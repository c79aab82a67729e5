"""DALI's failure text, read by one function (dali_backend.dali.failures): each form DALI 2.4 produces,
captured from it, and a live failure of this machine's DALI."""

from __future__ import annotations

import numpy as np
import pytest

from dali_backend.dali.failures import parse_dali_failure

DECODER = ("Critical error in pipeline:\nCritical error in pipeline:\nError in CPU operator "
           "`nvidia.dali.fn.decoders.image`,\nwhich was used in the pipeline definition with the following "
           "traceback:\n\n  File \"graph.py\", line 10, in graph\n    images = fn.decoders.image(jpegs)\n\n"
           "encountered:\n\nnvImageCodec failure: '#3'\nCurrent pipeline object is no longer valid.\n"
           "Current pipeline object is no longer valid.")
REGION = DECODER.replace("decoders.image`", "decoders.image_slice`")
GPU = DECODER.replace("CPU operator", "MIXED operator")
NAMED = DECODER.replace("nvImageCodec failure: '#3'", "Failed to decode sample #5 : Huffman table missing")
WORKER = ("\n\nException traceback received from worker thread:\n\nTraceback (most recent call last):\n  File "
          "\"worker.py\", line 467, in worker\n    data_batch = callback(scheduled)\n  File \"wire.py\", line 20, in "
          "__call__\n    raise ValueError(\"reader exploded on /data/x.jpg\")\nValueError: reader exploded on /data/x.jpg\n")
OTHER = DECODER.replace("decoders.image", "resize").replace("nvImageCodec failure: '#3'", "Invalid output size")


@pytest.mark.parametrize("text, operator, sample, reason", [
    (DECODER, "decoders.image", None, "nvImageCodec failure: '#3'"),
    (REGION, "decoders.image_slice", None, "nvImageCodec failure: '#3'"),
    (GPU, "decoders.image", None, "nvImageCodec failure: '#3'"),
    (NAMED, "decoders.image", 5, "Failed to decode sample #5 : Huffman table missing"),
    (WORKER, None, None, "ValueError: reader exploded on /data/x.jpg"),
    (OTHER, "resize", None, "Invalid output size"),
])
def test_each_form(text, operator, sample, reason):
    failure = parse_dali_failure(text)
    assert (failure.operator, failure.sample, failure.reason) == (operator, sample, reason)
    assert failure.from_decoder == (operator is not None and operator.startswith("decoders."))


def test_a_live_decoder_failure_of_this_dali_is_recognised():
    import cv2
    import nvidia.dali as dali
    from nvidia.dali import fn, types

    good = np.frombuffer(cv2.imencode(".jpg", np.full((32, 48), 128, np.uint8))[1].tobytes(), np.uint8)

    @dali.pipeline_def(batch_size=2, num_threads=1, device_id=None, exec_dynamic=True)
    def graph():
        jpegs = fn.external_source(source=lambda: [good, good[:100]], batch=True, dtype=types.UINT8)
        return fn.decoders.image(jpegs, device="cpu")

    pipe = graph()
    pipe.build()
    with pytest.raises(RuntimeError) as caught:
        pipe.run()
    failure = parse_dali_failure(str(caught.value))
    assert failure.from_decoder and failure.operator == "decoders.image" and failure.reason
