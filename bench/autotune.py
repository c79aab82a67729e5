"""``python -m bench.autotune``: is ``num_workers="auto"`` within 5 % of the best setting of a full grid?

For each backend, every candidate setting (:func:`dali_backend.facade.autotune.candidates`) runs ``--passes``
passes of ``--batches`` batches on the benchmark's synthetic data (640x480 -> 224x224, batch 16);
its best pass is its throughput. Then ``num_workers="auto"`` calibrates afresh (its cache bypassed)
and the grid's throughput of the setting it chose is compared with the grid's best. One short run;
quote ratios (2 shared cores here).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main(argv: list[str] | None = None) -> int:
    from bench.telemetry import synthetic_dataset, timed_pass
    from dali_backend import DaliLoader, WeightedSampler
    from dali_backend.facade.autotune import candidates, usable_cores

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--only", nargs="+", default=["torch", "dali-cpu"], choices=["torch", "dali-cpu"])
    p.add_argument("--json")
    args = p.parse_args(argv)
    ds, index = synthetic_dataset(args.images)
    kinds = {"torch": dict(backend="torch", device="cpu"), "dali-cpu": dict(backend="dali", device="cpu")}
    os.environ["DALI_BACKEND_AUTOTUNE"] = "refresh"  # calibrate afresh, not from an earlier run's cache
    rows = []
    for kind in args.only:
        grid = {}
        for workers in candidates(kind, usable_cores()):
            sampler = WeightedSampler(index, num_samples=args.batches * 16, seed=0)
            with DaliLoader(ds, batch_size=16, sampler=sampler, num_workers=workers, **kinds[kind]) as loader:
                timed_pass(loader, 0.0)  # warm
                grid[workers] = max(n / wall for _, wall, n in (timed_pass(loader, 0.0) for _ in range(args.passes)))
        t0 = time.perf_counter()
        with DaliLoader(ds, batch_size=16, num_workers="auto", **kinds[kind]) as loader:
            chosen, table = loader.num_workers, loader.autotune["table"]
        calibration_s = time.perf_counter() - t0
        best = max(grid, key=grid.get)
        rows.append({"kind": kind, "grid": {str(k): round(v, 1) for k, v in grid.items()}, "best": best,
                     "auto": chosen, "auto_calibration": table, "calibration_s": round(calibration_s, 1),
                     "auto_over_best": round(grid[chosen] / grid[best], 3)})
    for r in rows:
        print(f"{r['kind']:9s} grid img/s {r['grid']}  best {r['best']}  auto {r['auto']} "
              f"({r['auto_over_best']:.3f} of best; calibration {r['calibration_s']} s: {r['auto_calibration']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
