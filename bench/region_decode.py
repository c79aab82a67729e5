"""``python -m bench.region_decode``: what decoding only RandomResizedCrop's window saves in DALI (CPU).

Times the two graphs the pipeline can build for ``RandomResizedCrop(224)`` on 2048x1536 RGB JPEGs:
full decode + cut + resize, and region decode (``decoders.image_slice``) + resize, with the same
windows, and checks that both give the same pixels. One short run; compare the ratio, not the
absolute numbers (2 shared cores).
"""

from __future__ import annotations

import argparse
import time

import cv2
import numpy as np


def main(argv: list[str] | None = None) -> int:
    from nvidia.dali import fn, pipeline_def, types

    from dali_backend.core.synthetic import make_image
    from dali_backend.transforms import RandomResizedCrop
    from dali_backend.transforms.resize import dali_resize
    from dali_backend.transforms.window import dali_slice

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--batches", type=int, default=6)
    args = p.parse_args(argv)
    op = RandomResizedCrop(224)
    jpegs = [np.frombuffer(cv2.imencode(".jpg", make_image(k, "scratch", k, 2048, 1536), [cv2.IMWRITE_JPEG_QUALITY, 92])[1]
                           .tobytes(), np.uint8) for k in range(args.images)]
    bs = 8

    def feed(pipe, step):
        samples = [(jpegs[(step * bs + i) % len(jpegs)], op.make_params(0, 0, step * bs + i, (1536, 2048)))
                   for i in range(bs)]
        pipe.feed_input("jpegs", [s[0] for s in samples])
        pipe.feed_input("start", [s[1]["start"] for s in samples])
        pipe.feed_input("shape", [s[1]["shape"] for s in samples])

    def build(region: bool):
        @pipeline_def(batch_size=bs, num_threads=2, device_id=None, exec_dynamic=True, prefetch_queue_depth=1)
        def pipe():
            data, start, shape = (fn.external_source(name=n) for n in ("jpegs", "start", "shape"))
            if region:
                img = fn.decoders.image_slice(data, start=start, shape=shape, axis_names="HW", output_type=types.RGB)
            else:
                img = dali_slice(fn.decoders.image(data, output_type=types.RGB), start, shape)
            return dali_resize(img, 224, 224)

        pipe = pipe()
        pipe.build()
        return pipe

    results, outputs = {}, {}
    for region in (False, True):
        pipe = build(region)
        feed(pipe, 0)
        outputs[region] = [np.array(t) for t in pipe.run()[0]]  # warm-up, kept for the pixel check
        t0 = time.perf_counter()
        for step in range(1, args.batches + 1):
            feed(pipe, step)
            pipe.run()
        results[region] = (time.perf_counter() - t0) / (args.batches * bs) * 1000
    same = all(np.array_equal(a, b) for a, b in zip(outputs[False], outputs[True]))
    print(f"RandomResizedCrop(224) on 2048x1536 RGB JPEG, DALI CPU, 2 threads, {args.batches * bs} images:")
    print(f"  full decode + crop + resize: {results[False]:.2f} ms/image")
    print(f"  region decode + resize:      {results[True]:.2f} ms/image")
    print(f"  ratio full/region: {results[False] / results[True]:.2f}x; identical pixels: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
