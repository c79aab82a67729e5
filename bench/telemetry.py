"""``python -m bench.telemetry``: what the loader's telemetry costs, how close it is, and a picture of a run.

Three measurements on the benchmark's synthetic data (640x480 JPEGs -> 224x224), both backends:

1. **Overhead**: the same loader with ``telemetry=True`` and ``False``, passes alternated (on, off,
   on, off, ...) so that drift on a shared machine hits both; the ratio of their best img/s.
2. **Injected vs reported**: a training loop that waits a known time per batch, and a reader slowed
   by a known time per image; the data-wait fraction the loader reports against the one the loop
   measured around its own ``next()`` calls, and the stage the report blames.
3. **A run** (``--plot PNG``): the training step changes during the run (none, then 150 ms per
   batch, then none again); the data wait and the throughput of each half second, from
   ``data_wait_s_total`` and ``images_total`` sampled every 0.5 s with ``loader.on_metrics``.

One short run; quote ratios, not absolute numbers (2 shared cores here).
"""

from __future__ import annotations

import argparse
import json
import time


def synthetic_dataset(images: int):
    """The benchmark's synthetic data set (generated once, cached like ``python -m bench``'s)."""
    from dali_backend import AugmentSpec, SampleIndex
    from dali_backend.cli.cliargs import default_cache
    from dali_backend.core.synthetic import generate_defect_dataset
    from fallback import ImageDataset

    root = default_cache() / f"bench-{images}-640x480"
    generate_defect_dataset(root, n=images, size=(640, 480), quality=92, seed=0)
    index = SampleIndex.from_folder(root, progress=False)
    return ImageDataset(index, AugmentSpec(size=224)), index


def _loader(ds, index, kind: str, batches: int, **kw):
    from dali_backend import DaliLoader, WeightedSampler

    args = {"torch": dict(backend="torch", device="cpu", num_workers=2),
            "dali-cpu": dict(backend="dali", device="cpu")}[kind]
    sampler = WeightedSampler(index, num_samples=batches * 16, seed=0)
    return DaliLoader(ds, batch_size=16, sampler=sampler, **args, **kw)


def timed_pass(loader, step_s: float) -> tuple[float, float, int]:
    """(the loop's own data-wait fraction, wall, images)."""
    waited, n, start = 0.0, 0, time.perf_counter()
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            images, _ = next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - t0
        n += len(images)
        if step_s:
            time.sleep(step_s)
    wall = time.perf_counter() - start
    return waited / wall, wall, n


def overhead(ds, index, kind: str, passes: int, batches: int) -> dict:
    on, off = _loader(ds, index, kind, batches, telemetry=True), _loader(ds, index, kind, batches, telemetry=False)
    rates: dict[str, list[float]] = {"on": [], "off": []}
    with on, off:
        timed_pass(on, 0.0), timed_pass(off, 0.0)  # warm: workers, pipelines, page cache
        for _ in range(passes):
            for name, loader in (("on", on), ("off", off)):
                _, wall, n = timed_pass(loader, 0.0)
                rates[name].append(n / wall)
    best_on, best_off = max(rates["on"]), max(rates["off"])
    return {"kind": kind, "img_per_s_on": round(best_on, 1), "img_per_s_off": round(best_off, 1),
            "on_over_off": round(best_on / best_off, 3)}


def bookkeeping_cost() -> dict:
    """The telemetry's own work, timed directly: the facade's per-batch record (``LoaderTelemetry.batch``
    with two clock reads) and a worker's per-image stage timing (three clock reads and two dict updates)."""
    from dali_backend.telemetry import LoaderTelemetry

    tel = LoaderTelemetry("torch", None)
    tel.begin_pass()
    n = 100_000
    t0 = time.perf_counter()
    for _ in range(n):
        a = time.perf_counter()
        tel.batch(32, time.perf_counter() - a, {"read": 0.001, "decode": 0.002, "augment": 0.003}, 2)
    per_batch = (time.perf_counter() - t0) / n
    stages: dict = {}
    t0 = time.perf_counter()
    for _ in range(n):
        a = time.perf_counter()
        b = time.perf_counter()
        stages["read"] = stages.get("read", 0.0) + (b - a)
        stages["decode"] = stages.get("decode", 0.0) + (time.perf_counter() - b)
    per_image = (time.perf_counter() - t0) / n
    return {"facade_us_per_batch": round(per_batch * 1e6, 2), "worker_us_per_image": round(per_image * 1e6, 2)}


def injected(ds, index, kind: str, batches: int) -> list[dict]:
    from dali_backend.core.reading import SampleReader

    rows = []
    read = SampleReader.read
    for what, step_s, read_delay_s in (("slow training loop", 0.25, 0.0), ("balanced", 0.05, 0.0),
                                       ("slow storage", 0.0, 0.02)):
        if read_delay_s:
            SampleReader.read = lambda self, i, epoch=None, _d=read_delay_s: (time.sleep(_d), read(self, i, epoch))[1]
        try:
            with _loader(ds, index, kind, batches) as loader:  # workers fork after the patch: they inherit it
                timed_pass(loader, 0.0)
                truth, _, _ = timed_pass(loader, step_s)
                m = loader.metrics()
                verdict = loader.report(m).splitlines()[1]
        finally:
            SampleReader.read = read
        rows.append({"kind": kind, "case": what, "step_ms": step_s * 1e3, "read_delay_ms": read_delay_s * 1e3,
                     "loop_measured": round(truth, 3), "reported": round(m["data_wait_fraction"], 3),
                     "difference_points": round(100 * (m["data_wait_fraction"] - truth), 1), "verdict": verdict})
    return rows


def run_plot(ds, index, kind: str, png: str) -> dict:
    """A run whose training step changes; the recent metrics over time, plotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = [(0.0, 5.0), (0.15, 5.0), (0.0, 5.0)]  # (step s per batch, seconds)
    samples: list[tuple[float, float, float]] = []  # (time, data_wait_s_total, images_total)
    with _loader(ds, index, kind, 100_000) as loader:
        start = time.perf_counter()
        loader.on_metrics(lambda m: samples.append((time.perf_counter() - start, m["data_wait_s_total"],
                                                    m["images_total"])), every_s=0.5)
        it = iter(loader)
        for step_s, seconds in phases:
            until = time.perf_counter() + seconds
            while time.perf_counter() < until:
                next(it)
                if step_s:
                    time.sleep(step_s)
        it.close()
    # per interval between samples, from the cumulative totals (what a TensorBoard user can derive too)
    t = [b[0] for b in samples[1:]]
    wait = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(samples, samples[1:])]
    rate = [(b[2] - a[2]) / (b[0] - a[0]) for a, b in zip(samples, samples[1:])]
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    ax.plot(t, [100 * w for w in wait], color="tab:red", label="data wait, % of each 0.5 s")
    ax.set_xlabel("seconds into the run")
    ax.set_ylabel("data wait, %")
    ax.set_ylim(0, 105)
    ax2 = ax.twinx()
    ax2.plot(t, rate, color="tab:blue", label="images/s in each 0.5 s")
    ax2.set_ylabel("images/s")
    ax2.set_ylim(bottom=0)
    edge = 0.0
    for step_s, seconds in phases[:-1]:
        edge += seconds
        ax.axvline(edge, color="grey", linestyle=":", linewidth=1)
    ax.set_title(f"{kind}: training step 0 ms, then 150 ms, then 0 ms per batch of 16")
    fig.legend(loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(png)
    return {"plot": png, "samples": len(samples)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--batches", type=int, default=16, help="batches of 16 per pass (default 16)")
    p.add_argument("--passes", type=int, default=5, help="timed passes per setting for the overhead (default 5)")
    p.add_argument("--only", nargs="+", default=["torch", "dali-cpu"], choices=["torch", "dali-cpu"])
    p.add_argument("--plot", help="also run the changing-step run and write its plot here (PNG)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    ds, index = synthetic_dataset(args.images)
    out: dict = {"overhead": [], "injected": [], "bookkeeping": bookkeeping_cost()}
    for kind in args.only:
        out["overhead"].append(overhead(ds, index, kind, args.passes, args.batches))
        out["injected"] += injected(ds, index, kind, args.batches)
    print("overhead (best img/s of alternated passes):")
    for r in out["overhead"]:
        print(f"  {r['kind']:9s} on {r['img_per_s_on']:7.1f}  off {r['img_per_s_off']:7.1f}  on/off {r['on_over_off']:.3f}")
    b = out["bookkeeping"]
    print(f"bookkeeping, timed directly: {b['facade_us_per_batch']} us per batch in the facade, "
          f"{b['worker_us_per_image']} us per image in a worker")
    print("injected vs reported data wait:")
    for r in out["injected"]:
        print(f"  {r['kind']:9s} {r['case']:18s} loop {100 * r['loop_measured']:5.1f}%  reported "
              f"{100 * r['reported']:5.1f}%  ({r['difference_points']:+.1f} pts)  {r['verdict'][:90]}")
    if args.plot:
        out["run"] = run_plot(ds, index, args.only[0], args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
