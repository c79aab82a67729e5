"""``DaliLoader``: a drop-in for ``torch.utils.data.DataLoader`` running the contract on DALI.

It chooses a backend (DALI on the GPU, DALI on the CPU, or the torch fallback), owns epoch length
and the last partial batch, and hands batches over through DALI's PyTorch iterator. DALI never sees
an epoch end (see :mod:`dali_backend.schedule`): the loader schedules draws into an endless slot
stream a few batches ahead, pads the last partial batch with throw-away slots and trims them, and
after a ``break`` drains the few batches already scheduled before the next epoch starts. That costs a
few wasted decodes per early exit and buys exact epochs, any ``set_epoch`` order, and no pipeline
rebuilds.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Literal

import numpy as np
import torch

from .epochs import EpochLoaderMixin
from .errors import BadImageError, ConfigError, LoaderWorkerError
from .memory import release_free_memory
from .sampler import Draw, WeightedSampler
from .reading import check_on_error
from .schedule import KIND_DRAW, KIND_PAD, DrawSource, SlotRing
from .tensors import normalize

log = logging.getLogger("dali_backend")
Backend = Literal["auto", "dali", "torch"]

# A process forked while a DALI pipeline exists (a fallback DataLoader worker, say) must never run
# the pipeline's destructor: its threads do not exist there. Children keep every runner alive.
_LIVE_RUNNERS: weakref.WeakSet = weakref.WeakSet()
_CHILD_KEEPALIVE: list = []


def _keep_runners_in_child() -> None:
    _CHILD_KEEPALIVE.extend(_LIVE_RUNNERS)


os.register_at_fork(after_in_child=_keep_runners_in_child)

_sigchld_installed = False


def _install_sigchld_handler() -> None:
    """Raise in the main thread when a DALI reader worker dies (as DataLoader does for its workers).

    Without it the main thread can block forever in DALI's queue (measured: a killed reader hung the
    next batch). The previous handler (torch's, say) is chained. Only possible from the main thread.
    """
    global _sigchld_installed
    if _sigchld_installed or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGCHLD"):
        return
    previous = signal.getsignal(signal.SIGCHLD)

    def handler(signum, frame):
        if callable(previous):
            previous(signum, frame)
        for runner in list(_LIVE_RUNNERS):
            if runner.in_flight:  # only while blocked in DALI; otherwise the next batch's check reports it
                runner.check_workers()

    signal.signal(signal.SIGCHLD, handler)
    _sigchld_installed = True


def _process_dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _dali_importable() -> str | None:
    """None when DALI imports, else why not."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError as e:
        return f"DALI is not importable ({e})"
    return None


def cuda_device_count() -> int:
    """GPUs visible to this process, counted without initialising the CUDA driver.

    ``torch.cuda.device_count()`` asks NVML first (``torch.cuda.is_available()`` calls ``cuInit``
    unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``), and DALI refuses to fork its reader workers once the
    driver is initialised, so probing must not initialise it.
    """
    try:
        return int(torch.cuda.device_count())
    except Exception:  # a broken driver install: no usable GPU
        return 0


def cuda_driver_initialized() -> bool:
    """What DALI checks before forking its Python workers (``_multiproc/pool.py``)."""
    from nvidia.dali import backend as dali_backend_lib

    return bool(dali_backend_lib.IsDriverInitialized())


def local_ranks() -> tuple[int, int]:
    """``(local rank, processes on this node)`` from torchrun's environment (``(0, 1)`` otherwise)."""
    def env_int(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    world = max(1, env_int("LOCAL_WORLD_SIZE", 1))
    rank = env_int("LOCAL_RANK", -1)
    if rank < 0:
        dist = torch.distributed
        rank = dist.get_rank() % world if dist.is_available() and dist.is_initialized() else 0
    return rank, world


def _local_device_id() -> int:
    """This process's GPU: the current device once torch initialised CUDA (``set_device`` respected),
    else ``LOCAL_RANK`` modulo the GPU count. Never creates a CUDA context (``current_device()``
    before ``set_device`` would put every torchrun rank on GPU 0)."""
    if torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return local_ranks()[0] % max(1, cuda_device_count())


def choose_backend(device: str, backend: Backend) -> tuple[str, int | None, str]:
    """``(backend name, device id, reason)`` for the requested device and backend."""
    if backend not in ("auto", "dali", "torch"):
        raise ConfigError(f"backend={backend!r}; use 'auto', 'dali' or 'torch'")
    dev = str(device)
    if dev not in ("auto", "cpu", "cuda", "gpu") and not dev.startswith("cuda:"):
        raise ConfigError(f"device={device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    explicit_id = int(dev.split(":")[1]) if dev.startswith("cuda:") else None
    if backend == "torch":
        return "torch", None, "backend='torch' was requested"
    cuda = cuda_device_count() > 0
    if dev not in ("auto", "cpu") and not cuda:
        raise ConfigError(f"device={device!r} but CUDA is not available; pass device='auto' to fall back to the CPU")
    if dev == "cpu" and backend == "auto":
        return "torch", None, "device='cpu' (pass backend='dali' for DALI's CPU graph)"
    why_not_dali = _dali_importable()
    if why_not_dali:
        if backend == "dali":
            from .pipeline import import_dali

            import_dali()  # raises MissingDependencyError with the install command
        return "torch", None, why_not_dali
    if dev == "cpu":
        return "dali-cpu", None, "device='cpu', backend='dali' was requested"
    if dev == "auto":
        if cuda:
            return "dali-gpu", _local_device_id(), "CUDA is available and DALI imports"
        if backend == "dali":
            return "dali-cpu", None, "backend='dali' was requested and CUDA is not available"
        return "torch", None, "CUDA is not available"
    return "dali-gpu", explicit_id if explicit_id is not None else _local_device_id(), f"device={device!r} was requested"


def choose_start_method(requested: str | None) -> str:
    """How DALI starts its reader workers: ``fork`` (fast, works anywhere before CUDA starts) unless the
    CUDA driver is already initialised in this process, where DALI refuses to fork; then ``spawn``."""
    if requested not in (None, "fork", "spawn"):
        raise ConfigError(f"py_start_method={requested!r}; use None (automatic), 'fork' or 'spawn'")
    initialised = cuda_driver_initialized()
    if requested == "fork" and initialised:
        raise ConfigError("py_start_method='fork', but the CUDA driver is already initialised in this process (by "
                          "torch.cuda.is_available(), a CUDA tensor or another DALI pipeline) and DALI cannot fork "
                          "then; pass py_start_method=None or 'spawn', or create the DaliLoader before any CUDA work")
    if requested is None:
        return "spawn" if initialised else "fork"
    return requested


def batches_of(rows: np.ndarray, batch_size: int, drop_last: bool) -> list[np.ndarray]:
    """Cut an epoch's rows into full batches; the last partial one is padded (or dropped)."""
    n = len(rows) // batch_size * batch_size if drop_last else len(rows)
    out = []
    for start in range(0, n, batch_size):
        chunk = rows[start:start + batch_size]
        if len(chunk) < batch_size:
            pad = np.zeros((batch_size - len(chunk), 4), dtype=np.int64)
            pad[:, 3] = KIND_PAD
            chunk = np.concatenate([chunk, pad])
        out.append(chunk)
    return out


def plan_stream(key, rows: np.ndarray, sampler, batch_size: int, drop_last: bool):
    """Batches of this epoch, then a speculative next epoch (WeightedSampler: pure), else padding."""
    while True:
        for b, batch in enumerate(batches_of(rows, batch_size, drop_last)):
            yield key, b, batch
        if key is None:
            break
        sid, epoch, _ = key
        key, rows = (sid, epoch + 1, 0), _DaliRunner.weighted_rows(sampler, epoch + 1)
    pad = np.zeros((batch_size, 4), dtype=np.int64)
    pad[:, 3] = KIND_PAD
    while True:
        yield "pad", 0, pad


class _DaliRunner:
    """Runs the DALI pipeline over an endless slot stream and cuts it into exact epochs."""

    def __init__(self, dataset, sampler, batch_size: int, drop_last: bool, backend: str, device_id: int | None,
                 num_workers: int, prefetch_queue_depth: int, hw_decoder_load: float, py_start_method: str | None,
                 on_error: str):
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        from .pipeline import build_pipeline

        self.dataset, self.sampler, self.batch_size, self.drop_last = dataset, sampler, batch_size, drop_last
        self.backend = backend
        self.gpu = gpu = backend == "dali-gpu"
        self.lookahead = prefetch_queue_depth + 4  # batches written ahead of consumption
        self.ring = SlotRing(capacity=4 * self.lookahead * batch_size)
        source = DrawSource(dataset.reader, dataset.spec, on_error, self.ring)  # the dataset's reader: shares its cache
        py_start_method = choose_start_method(py_start_method)
        # torchrun starts one process per GPU on a node: share the node's cores between them
        threads = num_workers if num_workers > 0 else max(1, len(os.sched_getaffinity(0)) // local_ranks()[1])
        # Python workers only read files (checked bytes); DALI's threads decode. One reader kept up
        # with 2 decoding threads (bench: 79.9 img/s with 1 reader, 78.6 with 2, +115 MB each).
        readers = min(8, max(1, threads // 4))
        self.pipe = build_pipeline(dataset.spec, source, batch_size, device="gpu" if gpu else "cpu", device_id=device_id,
                                   num_threads=threads, py_num_workers=readers,
                                   py_start_method=py_start_method, prefetch_queue_depth=prefetch_queue_depth,
                                   hw_decoder_load=hw_decoder_load, seed=dataset.seed)
        self.pipe.build()
        pool = getattr(self.pipe, "_py_pool", None)
        self._worker_pids = list(pool.pids()) if pool is not None and hasattr(pool, "pids") else []
        self._dead_reported = False
        self.iterator = DALIGenericIterator([self.pipe], ["images", "labels", "slots"], auto_reset=False,
                                            prepare_first_batch=False)
        self.device = torch.device("cuda", device_id) if gpu else torch.device("cpu")
        self._queue: deque = deque()  # (key, batch_no, rows [B, 5]) written to the ring, not yet consumed
        self._stream = None
        self._next_slot = 0
        self._failed: BaseException | None = None
        self._pid = os.getpid()
        self.in_flight = False
        _LIVE_RUNNERS.add(self)
        _install_sigchld_handler()

    def check_workers(self) -> None:
        """Raise :class:`LoaderWorkerError` if one of this pipeline's reader workers has died."""
        if self.pipe is None or self._dead_reported or os.getpid() != self._pid or not self._worker_pids:
            return
        for pid in self._worker_pids:
            if _process_dead(pid):
                self._dead_reported = True
                self._failed = LoaderWorkerError(
                    f"DALI's Python reader worker (pid {pid}) died (killed by a signal, crashed or out of memory); "
                    "this DaliLoader cannot continue: create a new one (and check the system log for the OOM killer)")
                raise self._failed

    # ------------------------------------------------------------------ planning
    def epoch_plan(self, loader_epoch: int) -> tuple[object, np.ndarray]:
        """``(key, rows [n, 4])`` of this epoch: (index, epoch, position, kind) per draw of this rank."""
        s = self.sampler
        if isinstance(s, WeightedSampler):
            return (id(s), s.epoch, 0), self.weighted_rows(s, s.epoch)
        rows = []
        for pos, item in enumerate(s):
            if isinstance(item, Draw):
                rows.append((item.index, item.epoch, item.position, KIND_DRAW))
            else:
                rows.append((int(item), loader_epoch, pos, KIND_DRAW))
        return None, np.asarray(rows, dtype=np.int64).reshape(-1, 4)

    @staticmethod
    def weighted_rows(s: WeightedSampler, epoch: int) -> np.ndarray:
        idx, pos = s.rank_draw(epoch)
        return np.stack([idx, np.full_like(idx, epoch), pos, np.full_like(idx, KIND_DRAW)], axis=1)

    def batches_of(self, rows: np.ndarray) -> list[np.ndarray]:
        return batches_of(rows, self.batch_size, self.drop_last)

    def _fill(self) -> None:
        while len(self._queue) < self.lookahead:
            key, b, rows = next(self._stream)
            slots = np.arange(self._next_slot, self._next_slot + len(rows), dtype=np.int64)
            self._next_slot += len(rows)
            for slot, r in zip(slots, rows):
                self.ring.write(int(slot), int(r[0]), int(r[1]), int(r[2]), int(r[3]))
            self._queue.append((key, b, np.concatenate([slots[:, None], rows], axis=1)))

    # ------------------------------------------------------------------ running
    def _run_one(self, expected: np.ndarray):
        if self._failed is not None:
            raise LoaderWorkerError("the DALI pipeline failed earlier and cannot continue; create a new DaliLoader") from self._failed
        self.check_workers()
        try:
            self.in_flight = True
            out = next(self.iterator)[0]
        except StopIteration as e:
            raise RuntimeError("DALI ended the stream unexpectedly") from e
        except LoaderWorkerError:
            raise
        except Exception as e:  # DALI re-raises worker errors with their text
            self._failed = e
            self.check_workers()  # "Worker data receiving interrupted": say which worker died
            text = str(e)
            marker = "BadImageError: "
            if marker in text:
                raise BadImageError(text[text.index(marker) + len(marker):].splitlines()[0]) from e
            raise
        finally:
            self.in_flight = False
        meta = out["slots"].cpu().numpy().reshape(len(expected), -1)
        if not np.array_equal(meta[:, :5], expected):
            raise RuntimeError(f"DALI returned slots {meta[:, 0].tolist()} where {expected[:, 0].tolist()} were planned; "
                               "this is a bug in dali_backend, please report it")
        return out, meta[:, 5]

    def _restart(self, stream) -> None:
        """Switch to ``stream``: batches already scheduled still run (DALI may be decoding them); drop them."""
        stale = len(self._queue)
        self._stream = stream
        for _ in range(stale):
            self._fill()  # DALI blocks on unwritten slots while it prefetches: stay ahead at all times
            _, _, rows = self._queue.popleft()
            self._run_one(rows)  # the outputs of stale batches are dropped

    def iterate(self, loader_epoch: int, start_batch: int = 0):
        """Yield ``(images, labels, planned, served, positions)`` for the epoch's batches from ``start_batch``."""
        key, rows = self.epoch_plan(loader_epoch)
        if start_batch:
            rows = rows[start_batch * self.batch_size:]
            key = None if key is None else (key[0], key[1], start_batch)
        n_batches = len(self.batches_of(rows))
        if key is None or not self._queue or self._queue[0][0] != key or self._queue[0][1] != 0:
            # leftovers of a break, a resumption or a wrong guess: run and drop them
            self._restart(plan_stream(key, rows, self.sampler, self.batch_size, self.drop_last))
        spec = self.dataset.spec
        labels_all = self.dataset.index.labels
        for _ in range(n_batches):
            if not self.gpu:  # CPU batches churn the host heap; GPU batches live in DALI's device pools
                release_free_memory()  # the previous batch is gone by now: keep RSS flat
            self._fill()
            _, _, expected = self._queue.popleft()
            out, served = self._run_one(expected)
            keep = expected[:, 4] == KIND_DRAW
            images, labels = out["images"], out["labels"].reshape(-1)
            served = served[keep]
            want = labels_all[served]
            if not np.array_equal(labels[torch.from_numpy(keep).to(labels.device)].cpu().numpy(), want):
                raise RuntimeError("labels from DALI do not match the index; this is a bug in dali_backend, please report it")
            if not keep.all():
                images = images[torch.from_numpy(keep).to(images.device)]
            yield (normalize(images, spec), torch.from_numpy(want.copy()).to(self.device), expected[keep, 1], served,
                   expected[keep, 3])

    def close(self) -> None:
        if os.getpid() != self._pid:
            return  # a forked copy: the creator owns the pipeline and the shared memory
        self.iterator = None
        self.pipe = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None

    def __del__(self):  # the runner outlives its DaliLoader while an iteration still holds it
        try:
            self.close()
        except Exception:
            pass


class DaliLoader(EpochLoaderMixin):
    """Drop-in for ``DataLoader`` over a :class:`fallback.ImageDataset`, on DALI when it can.

    Args:
        dataset: a ``fallback.ImageDataset`` (index, augmentation spec and seed).
        batch_size: samples per batch.
        shuffle: shuffle each epoch when no ``sampler`` is given (every sample once).
        sampler: a :class:`WeightedSampler` (recommended) or any sampler of indices.
        num_workers: DALI threads (0: one per core; Python file readers: a quarter of that, 1 to 8),
            or the fallback's DataLoader workers.
        drop_last: drop the last partial batch of each epoch.
        pin_memory: pin batches (fallback only; DALI GPU batches are already on the device).
        device: ``"auto"`` (GPU when CUDA is available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        backend: ``"auto"``, ``"dali"`` (DALI even on the CPU; raises when DALI is missing) or ``"torch"``.
        seed: seed of the default sampler.
        prefetch_queue_depth: DALI batches prepared ahead.
        hw_decoder_load: share of JPEG decoding sent to the hardware decoder (A100/H100/H200).
        py_start_method: ``"fork"`` or ``"spawn"`` for DALI's reader workers (default None: fork, or
            spawn once the CUDA driver is initialised in this process, where DALI cannot fork). Workers
            start in ``__init__``: create loaders before ``model.cuda()`` or
            ``torch.cuda.is_available()`` to keep fork; spawn re-imports the main script, which then
            needs an ``if __name__ == "__main__":`` guard.
        timeout: the fallback DataLoader's batch timeout; the DALI path has none (a dead reader
            raises :class:`LoaderWorkerError` instead of hanging).
        on_error: ``"raise"`` or ``"skip"`` (default: the dataset's); see :mod:`dali_backend.reading`.

    Yields ``(images, labels)``: the spec's dtype ``[B, 3, H, W]`` (on the GPU for ``dali-gpu``) and int64
    ``[B]``. ``.backend`` is ``"dali-gpu"``, ``"dali-cpu"`` or ``"torch"``.
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False, sampler=None, num_workers: int = 0,
                 drop_last: bool = False, pin_memory: bool = False, *, device: str = "auto", backend: Backend = "auto",
                 seed: int = 0, prefetch_queue_depth: int = 2, hw_decoder_load: float = 0.65,
                 py_start_method: str | None = None, timeout: float = 0, on_error: str | None = None):
        from fallback import FallbackLoader, ImageDataset
        from fallback.loader import default_sampler

        if not isinstance(dataset, ImageDataset):
            raise ConfigError(f"DaliLoader: dataset must be a fallback.ImageDataset, got {type(dataset).__name__}; "
                              "wrap your index: ImageDataset(SampleIndex.from_folder(root), AugmentSpec())")
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ConfigError(f"DaliLoader: batch_size={batch_size!r}; must be a positive integer")
        if not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ConfigError(f"DaliLoader: num_workers={num_workers!r}; must be a non-negative integer")
        if sampler is not None and shuffle:
            raise ConfigError("DaliLoader: sampler and shuffle=True are mutually exclusive (as in DataLoader); drop one")
        if not isinstance(prefetch_queue_depth, int) or prefetch_queue_depth < 1:
            raise ConfigError(f"DaliLoader: prefetch_queue_depth={prefetch_queue_depth!r}; must be >= 1")
        if not 0.0 <= hw_decoder_load <= 1.0:
            raise ConfigError(f"DaliLoader: hw_decoder_load={hw_decoder_load!r}; must lie in [0, 1]")
        self.backend, device_id, reason = choose_backend(device, backend)
        if device == "auto" and backend == "auto":
            log.info("DaliLoader: backend %s (%s)", self.backend, reason)
        self.dataset, self.batch_size, self.num_workers = dataset, int(batch_size), int(num_workers)
        self.drop_last, self.pin_memory, self.timeout, self.epoch = drop_last, pin_memory, timeout, 0
        self.sampler = sampler if sampler is not None else default_sampler(dataset, shuffle, seed)
        self.on_error = check_on_error(on_error or dataset.on_error)
        # DataLoader attributes that training frameworks read
        self.batch_sampler = None
        self.collate_fn = None
        self.worker_init_fn = None
        self.generator = None
        self.prefetch_factor = None
        self.persistent_workers = False
        self.multiprocessing_context = None
        self._runner = None
        if self.backend == "torch":
            self._impl = FallbackLoader(dataset, batch_size=self.batch_size, sampler=self.sampler,
                                        num_workers=self.num_workers, drop_last=drop_last, pin_memory=pin_memory,
                                        timeout=timeout, on_error=self.on_error)
            self.device = torch.device("cpu")
        else:
            self._runner = _DaliRunner(dataset, self.sampler, self.batch_size, drop_last, self.backend, device_id,
                                       self.num_workers, prefetch_queue_depth, hw_decoder_load, py_start_method,
                                       self.on_error)
            self._impl = None
            self.device = self._runner.device

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (forwarded to the sampler's and the dataset's ``set_epoch``)."""
        if self._impl is not None:
            self._impl.set_epoch(epoch)
            self.epoch = self._impl.epoch
            return
        super().set_epoch(epoch)

    def stats(self) -> dict:
        """This epoch's accounting: ``yielded + padded + dropped + skipped + resumed == draws``."""
        return self._impl.stats() if self._impl is not None else super().stats()

    def state_dict(self) -> dict:
        """Epoch and batches yielded so far (torchdata ``StatefulDataLoader`` convention)."""
        return self._impl.state_dict() if self._impl is not None else super().state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume: the next iteration of the saved epoch yields exactly the batches not yet yielded."""
        if self._impl is not None:
            self._impl.load_state_dict(state)
            self.epoch = self._impl.epoch
        else:
            super().load_state_dict(state)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._impl is not None:
            return iter(self._impl)
        if self._runner is None:
            raise RuntimeError("DaliLoader is closed")
        return self._iterate_dali(self._runner)

    def _iterate_dali(self, runner: _DaliRunner):
        start = self._begin_epoch()
        for images, labels, planned, served, positions in runner.iterate(self.epoch, start):
            self._account(planned, served, positions)
            yield images, labels
        self._end_epoch()

    def close(self) -> None:
        """Stop DALI's workers and free shared memory now (also done once nothing uses them)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._impl is not None:
            self._impl.close()

    def __enter__(self) -> DaliLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"DaliLoader(backend={self.backend!r}, n={len(self.dataset)}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers}, drop_last={self.drop_last}, sampler={self.sampler!r})")
