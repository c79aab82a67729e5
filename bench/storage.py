"""``python -m bench.storage``: the same data set from local disk, from a bucket (cold: every read over the
network), from a bucket through a warm ``cache_dir``, and packed into shards in the bucket (cold and
warm), with a fixed latency added to every request.

The bucket is local: moto's S3 server in its own process behind :mod:`bench.s3local`'s proxy, which adds
``--latency-ms`` to every request and counts requests and bytes (what indexing costs per image). On a
machine with few cores moto's own CPU (a few ms per request) competes with decoding: a real object
store does not take that from the loader, so the cold figure here is a lower bound. For shards it is
lower still: moto reads and copies the whole object for every ranged GET (``FakeKey.value``), so each
one-sample range read of a shard costs the server the shard's size; S3 serves a range without that.

Each configuration runs 1 + ``--epochs`` epochs on one loader and reports the median of the timed ones
(the first builds the pipeline and starts workers; with ``cache_dir`` it fills the cache, and its rate
is shown apart).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from dali_backend.cli.cliargs import OneLineParser, default_cache, positive_int, run_command, size_wxh, verbosity_parent

log = logging.getLogger("bench")


def _epochs(index, args, cache_dir: str | None) -> list[float]:
    """Images per second of each epoch of one loader: the first (start, cache fill), then ``--epochs``."""
    from dali_backend import AugmentSpec, DaliLoader, ImageDataset

    kind = {"torch": dict(device="cpu", backend="torch"), "dali-cpu": dict(device="cpu", backend="dali")}[args.backend]
    ds = ImageDataset(index, AugmentSpec(size=args.size[::-1]), cache_dir=cache_dir)
    loader = DaliLoader(ds, batch_size=args.batch_size, shuffle=True, seed=0, num_workers=args.workers, timeout=300,
                        **kind)
    rates = []
    try:
        for epoch in range(1 + args.epochs):
            loader.set_epoch(epoch)
            t0, n = time.perf_counter(), 0
            for _, labels in loader:
                n += len(labels)
            rates.append(n / (time.perf_counter() - t0))
    finally:
        loader.close()
    return rates


def run(args) -> int:
    from bench.s3local import TEST_ENV, MotoServer, Proxy, upload_folder
    from dali_backend import SampleIndex
    from dali_backend.core.synthetic import generate_defect_dataset

    w, h = args.source_size
    root = generate_defect_dataset(default_cache() / f"bench-storage-{w}x{h}-{args.images}", n=args.images,
                                   size=(w, h), seed=0, progress=False)
    os.environ.update(TEST_ENV)
    moto = MotoServer()
    proxy = Proxy(moto.endpoint)
    try:
        upload_folder(moto.endpoint, root, "bench", "data/")
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        local = SampleIndex.from_folder(root, progress=False)
        proxy.configure(latency_ms=args.latency_ms)
        proxy.stats(reset=True)
        t0 = time.perf_counter()
        remote = SampleIndex.from_folder("s3://bench/data", progress=False)
        index_s = time.perf_counter() - t0
        st = proxy.stats(reset=True)
        n = len(remote)
        result = {"images": n, "source_size": f"{w}x{h}", "mean_file_bytes": int(local.sizes.mean()),
                  "latency_ms": args.latency_ms, "backend": args.backend, "workers": args.workers,
                  "index_seconds": round(index_s, 2), "index_requests_per_image": round(sum(st["requests"].values()) / n, 2),
                  "index_bytes_per_image": int(sum(st["bytes"].values()) / n)}
        result["local"] = _epochs(local, args, None)
        proxy.stats(reset=True)
        result["bucket_cold"] = _epochs(remote, args, None)
        st = proxy.stats(reset=True)
        result["cold_requests_per_image"] = round(sum(st["requests"].values()) / (n * (1 + args.epochs)), 2)
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
            result["bucket_cache_fill_then_warm"] = _epochs(remote, args, cache)
        # the same images packed into shards (dali-backend pack), read from the bucket: one range each
        from dali_backend.storage.pack import INDEX_NAME, pack

        with tempfile.TemporaryDirectory(prefix="bench-packed-") as packed_dir:
            result["shards_local"] = _epochs(pack(local, packed_dir), args, None)
            os.environ["AWS_ENDPOINT_URL"] = moto.endpoint  # the upload without added latency
            upload_folder(moto.endpoint, packed_dir, "bench", "packed/")
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
            shards = SampleIndex.load(Path(packed_dir) / INDEX_NAME, root="s3://bench/packed")
            proxy.stats(reset=True)
            result["shards_cold"] = _epochs(shards, args, None)
            st = proxy.stats(reset=True)
            result["shards_cold_requests_per_image"] = round(sum(st["requests"].values()) / (n * (1 + args.epochs)), 2)
            with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
                result["shards_cache_fill_then_warm"] = _epochs(shards, args, cache)
    finally:
        proxy.stop()
        moto.stop()
    import statistics

    med = {k: statistics.median(result[k][1:]) for k in ("local", "bucket_cold", "bucket_cache_fill_then_warm",
                                                         "shards_cold", "shards_cache_fill_then_warm", "shards_local")}
    result["median"] = med
    base = med["local"]
    lines = [f"{n} images {w}x{h} (~{result['mean_file_bytes'] // 1024} KB), {args.backend}, {args.workers} workers, "
             f"{args.latency_ms:g} ms added per request",
             f"indexing the bucket: {result['index_requests_per_image']} requests and "
             f"{result['index_bytes_per_image']} bytes per image ({index_s:.2f} s)",
             f"| data | img/s (median of {args.epochs} epochs) | vs local |", "| --- | --- | --- |",
             f"| local disk | {base:.1f} | 1.00 |",
             f"| bucket, cold (no cache) | {med['bucket_cold']:.1f} | {med['bucket_cold'] / base:.2f} |",
             f"| bucket, warm cache_dir | {med['bucket_cache_fill_then_warm']:.1f} | "
             f"{med['bucket_cache_fill_then_warm'] / base:.2f} |",
             f"| shards on local disk | {med['shards_local']:.1f} | {med['shards_local'] / base:.2f} |",
             f"| shards in the bucket, cold | {med['shards_cold']:.1f} | {med['shards_cold'] / base:.2f} |",
             f"| shards in the bucket, warm cache_dir | {med['shards_cache_fill_then_warm']:.1f} | "
             f"{med['shards_cache_fill_then_warm'] / base:.2f} |",
             f"requests per image read: loose objects {result['cold_requests_per_image']}, shards "
             f"{result['shards_cold_requests_per_image']}",
             f"(first epochs, pipeline start included: local {result['local'][0]:.1f}, cold "
             f"{result['bucket_cold'][0]:.1f}, cache fill {result['bucket_cache_fill_then_warm'][0]:.1f} img/s)"]
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m bench.storage", description=__doc__.split("\n\n")[0], parents=[verbosity_parent()])
    p.add_argument("--images", type=positive_int, default=256)
    p.add_argument("--source-size", type=size_wxh, default=(640, 480), help="synthetic image size WxH")
    p.add_argument("--size", type=size_wxh, default=(224, 224), help="output size WxH")
    p.add_argument("--latency-ms", type=float, default=20.0, help="added to every request by the proxy")
    p.add_argument("--backend", choices=("torch", "dali-cpu"), default="torch")
    p.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--epochs", type=positive_int, default=3, help="timed epochs after the first (default 3)")
    p.add_argument("--json", help="also write the results here")
    p.set_defaults(func=run)
    return run_command(p, argv, log)


if __name__ == "__main__":
    sys.exit(main())
