"""Live loader telemetry: is the training loop waiting for data, and which stage of the loader costs what.

The facade times what it alone can see: how long the training loop was blocked in ``next()`` (the
*data wait*: the time from the loop asking for a batch to the batch being handed over) against the
wall time of the pass. It is host time: on ``dali-gpu`` nothing in ``next()`` synchronises with the
GPU (see :mod:`dali_backend.core.transfer`), so the training step's queued GPU work is never counted as a
wait for data. The executors time their stages where they run them and hand the seconds
over with each :class:`~dali_backend.core.boundary.Batch`: the torch executor's workers time reading,
decoding and augmenting each image (wall time in a single-threaded worker: its CPU time); DALI's
reader workers time reading each image, and DALI's operator threads, which decode and run the
operations in one engine, are measured by their CPU time (``/proc``; wall time would count their
waits). Normalisation is timed in the facade. Process CPU and memory (PSS) are read only when
:meth:`LoaderTelemetry.snapshot` is called, never per batch.

Cost: two ``perf_counter`` calls per batch in the facade and three per image in the workers
(measured with the benchmark: telemetry on vs off, see the docs' "Is data loading my bottleneck?").

Every metric's name, unit and meaning is in :data:`METRICS`; ``loader.metrics()`` returns exactly
these keys (plus ``backend`` and ``how``, strings).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable

from ..errors import ConfigError
from ..facade.executors import REGISTRY, on_gpu

log = logging.getLogger("dali_backend.metrics")

RECENT_S = 10.0  # the window of the *_recent metrics, in seconds of wall time
STAGES = ("read", "decode", "augment", "decode+augment", "normalize")
# beside the stages' seconds, each sample's intra-op threads (summed like them, read as a mean per image)
THREADS_KEY = "intra_op_threads"

# name -> (unit, meaning). The documented set: loader.metrics() returns these keys, exporters use them.
METRICS: dict[str, tuple[str, str]] = {
    "data_wait_fraction": ("fraction", "this pass: time the training loop spent waiting in next() / wall time of "
                                       "the pass (0: never waited; near 1: the loader is the bottleneck)"),
    "data_wait_s": ("s", "this pass: time the training loop spent waiting in next()"),
    "data_wait_fraction_recent": ("fraction", f"the same over the last {RECENT_S:g} s"),
    "data_wait_fraction_total": ("fraction", "the same over every pass so far"),
    "data_wait_s_total": ("s", "time spent waiting in next() over every pass so far"),
    "wall_s": ("s", "this pass: wall time from its first next() call to now"),
    "batches": ("count", "this pass: batches yielded"),
    "images": ("count", "this pass: images yielded"),
    "batches_total": ("count", "batches yielded over every pass"),
    "images_total": ("count", "images yielded over every pass"),
    "img_per_s": ("img/s", "this pass: images yielded / wall time"),
    "img_per_s_recent": ("img/s", f"images yielded in the last {RECENT_S:g} s / that time"),
    "batches_in_flight": ("count", "batches the executor held in progress or ready beyond the last one yielded "
                                   "(0 on a starving loader)"),
    "stage_ms.read": ("ms/img", "reading an image's bytes (and the cheap checks), in the reader workers"),
    "stage_ms.decode": ("ms/img", "decoding (torch executor, OpenCV, in its workers)"),
    "stage_ms.augment": ("ms/img", "the augmentation operations (torch executors, in their workers or threads)"),
    "stage_ms.decode+augment": ("ms/img", "decoding and the operations (DALI: CPU time of its operator threads)"),
    "stage_ms.normalize": ("ms/img", "normalisation and batch operations, in the training process"),
    "main_cpu_percent": ("%", "this pass: CPU use of the training process (100 = one core)"),
    "main_pss_mb": ("MB", "memory of the training process (PSS, or RSS where PSS is not known)"),
    "workers": ("count", "the executor's worker processes alive"),
    "threads": ("count", "the executor's pool threads in the training process (torch-threads; None elsewhere)"),
    "workers_cpu_percent": ("%", "this pass: CPU use of the worker processes, summed (100 = one core)"),
    "workers_pss_mb": ("MB", "memory of the worker processes (PSS), summed"),
    "intra_op_threads": ("count", "torch intra-op threads the operations ran on, in each worker or in the training "
                                  "process (torch executor; 1 in DataLoader workers and for its own in-process work; "
                                  "None where not measured)"),
}
HOW = {"torch": {"read": "wall time per image in the DataLoader workers", "decode": "same", "augment": "same",
                 "normalize": "wall time in the training process"},
       "threads": {"read": "wall time per image in the executor's threads (of the training process)",
                   "decode": "same", "augment": "same", "normalize": "wall time in the training process"},
       "dali": {"read": "wall time per image in DALI's Python reader workers",
                "decode+augment": "CPU time of DALI's operator threads (/proc) per image yielded, and of its "
                                  "reader workers' decoding and operations where they run some (CPU graphs)",
                "normalize": "wall time in the training process"}}


class _Pass:
    __slots__ = ("start", "end", "wait", "batches", "images")

    def __init__(self, start: float):
        self.start, self.end, self.wait, self.batches, self.images = start, None, 0.0, 0, 0

    def wall(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start


class LoaderTelemetry:
    """The facade's record of its passes; see the module docstring. Not thread-safe (one pass at a time)."""

    def __init__(self, backend: str, executor):
        self.backend, self.executor = backend, executor
        kind = REGISTRY.get(str(backend))  # how its stages are timed: in worker processes, in threads, or DALI's
        self._how = ("torch" if kind is not None and kind.worker_processes else
                     "threads" if kind is not None and kind.threads else "dali")
        self.current: _Pass | None = None  # the running pass, else the last one (ended), else None
        self.total_wait = self.total_wall = 0.0
        self.total_batches = self.total_images = 0
        self._recent: deque = deque()  # (time the batch was handed over, images, wait)
        self._stage_s: dict[str, float] = {}
        self._stage_images = 0
        self._in_flight = 0
        self._engine_cpu0: float | None = None
        self._engine_used = 0.0  # engine CPU seconds of executors replaced since
        self._hooks: list[list] = []  # [callback, every_s, last call time]
        self._cpu_marks: dict[int, tuple[float, float]] = {}  # pid -> (time.time(), cpu seconds) at the pass's start
        self._pass_epoch_start = time.time()

    # ------------------------------------------------------------------ recorded by the facade
    def begin_pass(self, start: float | None = None) -> None:
        """A pass began at ``start`` (``perf_counter``; default now): when the training loop asked for its
        first batch."""
        self.end_pass()
        self.current = _Pass(time.perf_counter() if start is None else start)
        if self._engine_cpu0 is None:
            self._engine_cpu0 = self._engine_cpu()
        self._cpu_marks = self._cpu_now([os.getpid(), *self._worker_pids()])
        self._pass_epoch_start = time.time() - (time.perf_counter() - self.current.start)

    def end_pass(self) -> None:
        """The pass ended (or was left); its figures stay readable until the next pass begins."""
        p = self.current
        if p is not None and p.end is None:
            p.end = time.perf_counter()
            self.total_wall += p.wall(p.end)

    def batch(self, images: int, waited: float, stages: dict[str, float], in_flight: int) -> None:
        """One batch handed to the training loop after it waited ``waited`` seconds for it."""
        p = self.current
        if p is None or p.end is not None:
            return
        now = time.perf_counter()
        p.wait += waited
        p.batches += 1
        p.images += images
        self.total_wait += waited
        self.total_batches += 1
        self.total_images += images
        for k, v in stages.items():
            self._stage_s[k] = self._stage_s.get(k, 0.0) + v
        self._stage_images += images
        self._in_flight = in_flight
        self._recent.append((now, images, waited))
        while self._recent and self._recent[0][0] < now - RECENT_S:
            self._recent.popleft()
        for hook in list(self._hooks):
            if now - hook[2] >= hook[1]:
                hook[2] = now
                try:
                    hook[0](self.snapshot())
                except Exception:  # noqa: BLE001 - an exporter must not end a training run
                    # said once, with the traceback, and the exporter dropped: training goes on without it
                    log.exception("loader metrics: the callback %r raised; it is removed and training goes on "
                                  "(fix it and attach it again with loader.on_metrics)", hook[0])
                    self._hooks.remove(hook)

    def switch_executor(self, executor) -> None:
        """The facade replaced its executor (another index, after ``update_index``): keep the engine time
        the old one used, measure the new one's from now."""
        old = self._engine_cpu()
        if old is not None and self._engine_cpu0 is not None:
            self._engine_used += old - self._engine_cpu0
        self.executor = executor
        self._engine_cpu0 = self._engine_cpu()

    def every(self, seconds: float, callback: Callable[[dict], None]) -> None:
        """Call ``callback(metrics)`` after a batch at most every ``seconds`` seconds of wall time. A
        callback that raises is logged with its traceback and removed: an exporter never ends a run."""
        self._hooks.append([callback, float(seconds), time.perf_counter()])

    # ------------------------------------------------------------------ read by the user
    def _engine_cpu(self) -> float | None:
        fn = getattr(self.executor, "engine_cpu_s", None)
        return fn() if fn is not None else None

    def snapshot(self) -> dict:
        """The metrics of :data:`METRICS` now (JSON-able)."""
        now = time.perf_counter()
        p = self.current
        wall = p.wall(now) if p is not None else 0.0
        running = p is not None and p.end is None
        out: dict = {"backend": self.backend, "how": HOW[self._how]}
        out["data_wait_s"] = p.wait if p else 0.0
        out["data_wait_fraction"] = _ratio(out["data_wait_s"], wall)
        out["wall_s"] = wall
        out["batches"], out["images"] = (p.batches, p.images) if p else (0, 0)
        out["img_per_s"] = _ratio(out["images"], wall)
        # the window: the last RECENT_S seconds of this pass (up to its end, when it ended)
        ref = now if running or p is None else p.end
        span = min(RECENT_S, wall) if p is not None else 0.0
        recent = [r for r in self._recent if r[0] >= ref - span]
        out["img_per_s_recent"] = _ratio(sum(r[1] for r in recent), span)
        out["data_wait_fraction_recent"] = _ratio(sum(r[2] for r in recent), span)
        out["data_wait_s_total"] = self.total_wait
        out["data_wait_fraction_total"] = _ratio(self.total_wait, self.total_wall + (wall if running else 0.0))
        out["batches_total"], out["images_total"] = self.total_batches, self.total_images
        out["batches_in_flight"] = self._in_flight
        stage_s = dict(self._stage_s)
        engine = self._engine_cpu()
        if engine is not None and self._engine_cpu0 is not None:
            # DALI's operator threads, and its reader workers' decoding and operations where they run some
            stage_s["decode+augment"] = stage_s.get("decode+augment", 0.0) + self._engine_used + engine - self._engine_cpu0
        for name in STAGES:
            value = stage_s.get(name)
            out[f"stage_ms.{name}"] = 1e3 * value / self._stage_images if value is not None and self._stage_images \
                else None
        threads = stage_s.get(THREADS_KEY)
        out["intra_op_threads"] = threads / self._stage_images if threads is not None and self._stage_images else None
        out.update(self._processes(now))
        return out

    def _worker_pids(self) -> list[int]:
        return list(getattr(self.executor, "worker_pids", lambda: [])() or [])

    def _pool_threads(self) -> int | None:
        return getattr(self.executor, "pool_threads", lambda: None)()

    @staticmethod
    def _cpu_now(pids: list[int]) -> dict[int, tuple[float, float]]:
        from ..util.procstats import process_cpu_seconds

        now = time.time()
        return {pid: (now, cpu) for pid in pids if (cpu := process_cpu_seconds(pid)) is not None}

    def _processes(self, now: float) -> dict:
        """CPU use over this pass (a worker started during the pass: all its CPU time is this pass's) and
        memory now."""
        from ..util.procstats import process_memory_bytes

        main, pids = os.getpid(), self._worker_pids()
        cpu_pct, mem = {}, {}
        for pid, (t1, c1) in self._cpu_now([main, *pids]).items():
            t0, c0 = self._cpu_marks.get(pid, (self._pass_epoch_start, 0.0))
            cpu_pct[pid] = 100.0 * (c1 - c0) / (t1 - t0) if t0 is not None and t1 > t0 else None
            mem[pid] = process_memory_bytes(pid)
        worker_mem = [mem[p] for p in pids if mem.get(p) is not None]
        worker_cpu = [cpu_pct[p] for p in pids if cpu_pct.get(p) is not None]
        return {"main_cpu_percent": cpu_pct.get(main), "main_pss_mb": _mb(mem.get(main)),
                "workers": len([p for p in pids if p in mem]), "threads": self._pool_threads(),
                "workers_cpu_percent": sum(worker_cpu) if worker_cpu else None,
                "workers_pss_mb": _mb(sum(worker_mem)) if worker_mem else None}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _mb(n: int | None) -> float | None:
    return None if n is None else n / 1e6


def format_line(m: dict) -> str:
    """One log line of the headline metrics."""
    def pct(v):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.0f}%"

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    stages = ", ".join(f"{k[len('stage_ms.'):]} {m[k]:.2f}" for k in m if k.startswith("stage_ms.") and m[k] is not None)
    return (f"loader {m['backend']}: data wait {pct(m['data_wait_fraction_recent'])} (pass {pct(m['data_wait_fraction'])}), "
            f"{num(m['img_per_s_recent'], '.0f')} img/s, {m['batches_in_flight']} batches ahead; ms/img: {stages or '-'}; "
            f"workers {m['workers']} at {num(m['workers_cpu_percent'], '.0f')}% CPU, {num(m['workers_pss_mb'], '.0f')} MB")


# ---------------------------------------------------------------------------------------------- verdict
WAITING_IS_FINE = 0.10  # below this share of wall time spent waiting, the training loop sets the pace
STAGE_ADVICE = {
    "read": ("storage (reading the files)",
             "put the data on a local disk or pass cache=True to ImageDataset (the whole data set in RAM) when it "
             "fits; more workers overlap more reads (num_workers); a network share also likes larger batches"),
    "decode": ("the loader's CPU: decoding JPEGs (OpenCV)",
               "more workers (num_workers, up to the cores this process may use), smaller source images, or DALI "
               "on a GPU (nvJPEG decodes there)"),
    "augment": ("the loader's CPU: the augmentation operations",
                "more workers (num_workers), fewer or cheaper operations (a crop before a resize reads fewer "
                "pixels), or DALI on a GPU"),
    "decode+augment": ("the loader's CPU: DALI's decoding and operations",
                       "more DALI threads (num_workers), smaller source images, or a GPU (device='cuda')"),
    "normalize": ("normalisation in the training process",
                  "ask for dtype='uint8' (AugmentSpec) and normalise on the GPU in the training step"),
}


def verdict(m: dict, cores: int | None = None) -> str:
    """What limits throughput, in plain words with the numbers, and what to change (``loader.report()``)."""
    wait = m["data_wait_fraction"] if m["data_wait_fraction"] is not None else m["data_wait_fraction_total"]
    if wait is None or not m["images"]:
        return "No batch yet: iterate the loader (a few batches of training) and ask again."
    rate = m["img_per_s"] or 0.0
    stages = {k[len("stage_ms."):]: v for k, v in m.items() if k.startswith("stage_ms.") and v is not None}
    costs = ", ".join(f"{k} {v:.2f}" for k, v in sorted(stages.items(), key=lambda kv: -kv[1]))
    lines = [f"{m['backend']}: {m['images']} images in {m['wall_s']:.1f} s ({rate:.0f} img/s); the training loop "
             f"waited for data {100 * wait:.0f}% of the time."]
    if wait < WAITING_IS_FINE:
        lines.append("Verdict: the training loop sets the pace, not the loader (it waited less than "
                     f"{100 * WAITING_IS_FINE:.0f}% of the time). A faster loader would not train faster; "
                     f"per-image costs, for the record (ms/img): {costs or '-'}.")
        return "\n".join(lines)
    if not stages:
        lines.append("Verdict: the loader is the bottleneck, but its stages were not measured.")
        return "\n".join(lines)
    gpu = on_gpu(m["backend"])
    if gpu:
        stages.pop("decode+augment", None)  # on the GPU: not CPU time
        if not stages:
            lines.append("Verdict: the loader is the bottleneck, and no CPU stage was measured: on the GPU the decoder "
                         "and the operations are not in these CPU figures, so the GPU decoder is the likely limit "
                         "(try hw_decoder_load=0.9, or smaller images).")
            return "\n".join(lines)
    worst = max(stages, key=stages.get)
    what, advice = STAGE_ADVICE[worst]
    lines.append(f"Verdict: the loader is the bottleneck, and its largest cost is {what}: {stages[worst]:.2f} ms per "
                 f"image (all stages, ms/img: {costs}).")
    over = oversubscription(m, cores)
    if over:
        lines.append(over)
        advice = ("no more executor threads than cores first (num_workers), then " if m.get("threads") else
                  "one torch thread per worker first (torch.set_num_threads(1) in worker_init_fn), then ") + advice
    workers, busy = m.get("workers") or 0, m.get("workers_cpu_percent")
    if workers and busy is not None:
        lines.append(f"Its {workers} worker process(es) used {busy:.0f}% CPU (100% = one core)"
                     + (f" of {cores} cores" if cores else "") + ".")
    if gpu and stages.get(worst, 0) < 1.0:
        lines.append("On the GPU the decoder and the operations are not in these CPU figures: if every stage above "
                     "is cheap, the GPU decoder is the limit (try hw_decoder_load=0.9, or smaller images).")
    lines.append(f"What to change: {advice}.")
    return "\n".join(lines)


def oversubscription(m: dict, cores: int | None) -> str | None:
    """The line naming thread oversubscription, when the operations ran on more threads than the cores
    (``max(workers, 1) x intra_op_threads > cores``, or for ``torch-threads`` its pool threads x their
    intra-op threads, the training loop's own thread not counted); None otherwise or where not measured."""
    threads = m.get("intra_op_threads")
    if not threads or not cores:
        return None
    workers, pool = m.get("workers") or 0, m.get("threads") or 0
    total = max(workers, pool, 1) * threads
    if total <= cores:
        return None
    if pool:
        return (f"Thread oversubscription: {pool} executor thread(s) x {threads:g} torch intra-op thread(s) = "
                f"{total:g} threads on {cores} cores; the threads wait for each other (and for the GIL), so the "
                f"stage costs above include that wait: num_workers={cores} or fewer for backend='torch-threads'.")
    where = f"{workers} worker process(es) x {threads:g}" if workers else f"the training process's {threads:g}"
    return (f"Thread oversubscription: {where} torch intra-op thread(s) = {total:g} threads on {cores} cores; the "
            "operations' threads wait for each other, so the stage costs above include that wait.")


def live(telemetry: LoaderTelemetry | None) -> LoaderTelemetry:
    """The loader's telemetry, or a :class:`ConfigError` for a loader made with ``telemetry=False``."""
    if telemetry is None:
        raise ConfigError("this DaliLoader was made with telemetry=False; make it with telemetry=True (the "
                          "default) for metrics(), report() and metrics hooks")
    return telemetry


def check_hook(callback, every_s: float) -> None:
    """Refuse (:class:`ConfigError`) a metrics hook that is not callable or an interval that is no number >= 0."""
    if not (isinstance(every_s, (int, float)) and not isinstance(every_s, bool) and every_s >= 0):
        raise ConfigError(f"every_s={every_s!r}; must be a number of seconds >= 0")
    if not callable(callback):
        raise ConfigError(f"callback={callback!r} is not callable; pass a function taking the metrics dict")


def report(metrics: dict) -> str:
    """:func:`verdict` of ``metrics`` for the cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return verdict(metrics, cores)


def log_line(level: int) -> Callable[[dict], None]:
    """A metrics hook logging one line of the headline metrics (logger ``dali_backend.metrics``) at ``level``."""
    return lambda m: logging.getLogger("dali_backend.metrics").log(level, "%s", format_line(m))
