"""The cost of carrying masks from an ``s3://`` root, against its images alone (issue 35, item 1).

    PYTHONPATH=. python scripts/targets_remote_cost.py [--images 96] [--latency-ms 20] [--workers 2] [--epochs 3]

One synthetic MVTec AD category (``test``: good and defect images with masks) is uploaded to a local S3
server (moto, its own process) behind this package's proxy, which adds ``--latency-ms`` to every
request; the same loader (RandomResizedCrop, flip, rotation) runs ``--epochs`` passes over the
bucket's index without targets and with its masks, after one warm-up pass, and the best pass's img/s
is reported with the GET requests of one pass. Then the same with ``cache_dir`` warm (no request).
Loopback only; a short measurement: compare the ratios within one run.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from pathlib import Path


def main() -> None:
    from bench.s3local import TEST_ENV, MotoServer, Proxy, s3_client, upload_folder
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset, SampleIndex
    from dali_backend import transforms as T
    from scripts.targets_cost import arguments, mvtec_set

    ap = arguments(__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=20.0, help="added to every request (default 20)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    tmp = Path(tempfile.mkdtemp(prefix="targets-remote-"))
    root = mvtec_set(tmp / "mvtec", args.images, args.size)
    server = MotoServer()
    proxy = Proxy(server.endpoint)
    os.environ.update(TEST_ENV)
    os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
    try:
        upload_folder(server.endpoint, root, "cost", "", client=s3_client(server.endpoint))
        plain = SampleIndex.from_folder("s3://cost/plate", split="test", progress=False)
        masks = SampleIndex.from_mvtec("s3://cost", "plate", "test", progress=False)
        spec = AugmentSpec(ops=[T.RandomResizedCrop(224, scale=(0.5, 1.0)), T.RandomHorizontalFlip(),
                                T.RandomRotation(15)], color="rgb")
        proxy.configure(latency_ms=args.latency_ms)
        print(f"{len(masks)} images ({int((masks.annotations.mask_sizes >= 0).sum())} with a mask), "
              f"{args.size[0]}x{args.size[1]}, {args.latency_ms:g} ms per request, {args.workers} workers")
        print("| backend | index | img/s | GETs per pass |")
        print("| --- | --- | --- | --- |")
        for backend in args.backends:
            for name, index, cache in (("images alone", plain, None), ("+ masks", masks, None),
                                       ("images alone, cache_dir warm", plain, tmp / f"c-{backend}-plain"),
                                       ("+ masks, cache_dir warm", masks, tmp / f"c-{backend}-masks")):
                ds = ImageDataset(index, spec, cache_dir=cache)
                loader = DaliLoader(ds, batch_size=args.batch_size, shuffle=True, seed=0, num_workers=args.workers,
                                    backend=backend, device="cpu", telemetry=False, timeout=300)
                best, gets = 0.0, 0
                try:
                    for epoch in range(args.epochs + 1):
                        loader.set_epoch(epoch)
                        proxy.stats(reset=True)
                        t0, n = time.perf_counter(), 0
                        for batch in loader:
                            n += len(batch["image"] if isinstance(batch, dict) else batch[0])
                        if epoch:  # the first pass warms up (and fills the cache)
                            best = max(best, n / (time.perf_counter() - t0))
                            gets = proxy.stats()["requests"].get("GET", 0)
                finally:
                    loader.close()
                print(f"| {backend} | {name} | {best:.0f} | {gets} |", flush=True)
    finally:
        proxy.stop()
        server.stop()


if __name__ == "__main__":
    main()
