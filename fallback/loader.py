"""The tuned CPU loader: a torch ``DataLoader`` that moves uint8 through worker IPC.

Workers return augmented single-channel (gray) or RGB uint8 images; channel replication and
normalisation run once per batch in the main process. A gray float32 3x256x256 sample is 786 KB,
its uint8 single channel 64 KB: 12x less to pickle, copy through shared memory and collate. The
numbers equal ``ImageDataset.__getitem__``'s exactly (same ops, same normalise function).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from dali_backend.epochs import EpochLoaderMixin
from dali_backend.errors import BadImageError, ConfigError, LoaderClosedError, LoaderTimeoutError, LoaderWorkerError
from dali_backend.reading import check_on_error
from dali_backend.memory import release_free_memory
from dali_backend.sampler import Draw, WeightedSampler
from dali_backend.schedule import SERVED_BAD

from . import ops
from .dataset import ImageDataset, resolve_item


class _Uint8View(Dataset):
    """Returns the dataset's uint8 samples (and which sample was served) instead of normalised tensors.

    A bad file under ``on_error="raise"`` is not raised in the worker (torch would re-raise it as text,
    losing its fields): the sample comes back blank with ``served = SERVED_BAD`` and the error's fields,
    and the loader raises :class:`BadImageError` when it reaches that batch, as the DALI path does.
    """

    def __init__(self, dataset: ImageDataset, on_error: str):
        self.dataset, self.on_error = dataset, on_error

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item):
        self._served = getattr(self, "_served", 0) + 1
        if self._served % 16 == 0:
            release_free_memory()  # keep worker RSS flat (full-resolution temporaries)
        index, _, epoch, position = resolve_item(item, self.dataset.epoch)
        try:
            image, label, meta = self.dataset.load_draw(item, self.on_error)
            return image, label, np.append(meta, epoch), None
        except BadImageError as e:
            spec = self.dataset.spec
            blank = np.zeros((1 if spec.color == "gray" else 3, spec.height, spec.width), np.uint8)
            return blank, -1, np.array([index, SERVED_BAD, position, epoch], np.int64), (e.path, e.index, e.label,
                                                                                       e.epoch, e.reason)


def _collate_uint8(samples: list[tuple]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, list]:
    images = torch.from_numpy(np.stack([s[0] for s in samples]))
    labels = torch.tensor([s[1] for s in samples], dtype=torch.int64)
    return images, labels, np.stack([s[2] for s in samples]), [s[3] for s in samples if s[3] is not None]


class _EpochDraws(Sampler[Draw]):
    """Wraps the loader's sampler: plain ints get (epoch, position); a resumed epoch starts late."""

    def __init__(self, inner, loader: FallbackLoader):
        # a weak reference: a cycle would leave the DataLoader's workers to the garbage collector,
        # whose teardown order makes their shutdown wait 5 s per worker (measured: 10 s for 2)
        self.inner, self.loader = inner, weakref.proxy(loader)

    def __iter__(self) -> Iterator[Draw]:
        epoch, skip = self.loader.epoch, self.loader._start_batch * self.loader.batch_size
        for pos, i in enumerate(self.inner):
            if pos >= skip:
                yield i if isinstance(i, Draw) else Draw(int(i), epoch, pos)

    def __len__(self) -> int:
        return len(self.inner)


def default_sampler(dataset: ImageDataset, shuffle: bool, seed: int) -> WeightedSampler:
    """DataLoader's defaults in our terms: a shuffle or the index order, every sample once."""
    return WeightedSampler(dataset.index, seed=seed, mode="uniform" if shuffle else "sequential", replacement=False)


class FallbackLoader(EpochLoaderMixin):
    """DataLoader-compatible iterable yielding ``(images [B, 3, H, W], labels [B] int64)`` on the CPU.

    Args mirror ``torch.utils.data.DataLoader``; ``sampler`` defaults to every sample once (shuffled
    when ``shuffle``), and may be a :class:`WeightedSampler` or any sampler of integer indices.
    ``on_error`` (default: the dataset's) is ``"raise"`` or ``"skip"``; ``return_meta`` as in ``DaliLoader``.
    ``stats()``, ``state_dict()``
    and ``load_state_dict()`` come from :class:`~dali_backend.epochs.EpochLoaderMixin`.
    """

    backend = "torch"

    def __init__(self, dataset: ImageDataset, batch_size: int = 1, shuffle: bool = False, sampler=None,
                 num_workers: int = 0, drop_last: bool = False, pin_memory: bool = False, seed: int = 0,
                 prefetch_factor: int | None = None, persistent_workers: bool | None = None,
                 timeout: float = 0, multiprocessing_context=None, on_error: str | None = None,
                 return_meta: bool = False):
        if not isinstance(dataset, ImageDataset):
            raise ConfigError(f"dataset must be a fallback.ImageDataset, got {type(dataset).__name__}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r}; must be a positive integer")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"num_workers={num_workers!r}; must be a non-negative integer")
        if sampler is not None and shuffle:
            raise ConfigError("sampler and shuffle=True are mutually exclusive (as in DataLoader); drop one")
        self.dataset, self.batch_size, self.num_workers = dataset, batch_size, num_workers
        self.drop_last, self.pin_memory, self.epoch = drop_last, pin_memory, 0
        self.sampler = sampler if sampler is not None else default_sampler(dataset, shuffle, seed)
        self.on_error = check_on_error(on_error or dataset.on_error)
        self._start_batch = 0
        self._closed = False
        self.return_meta = bool(return_meta)
        self._draws = _EpochDraws(self.sampler, self)
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        self._loader = DataLoader(
            _Uint8View(dataset, self.on_error), batch_size=batch_size, sampler=self._draws, num_workers=num_workers,
            collate_fn=_collate_uint8, drop_last=drop_last, pin_memory=pin_memory, timeout=timeout,
            prefetch_factor=prefetch_factor if num_workers > 0 else None,
            persistent_workers=persistent_workers and num_workers > 0,
            multiprocessing_context=multiprocessing_context if num_workers > 0 else None,
        )

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:
            raise LoaderClosedError("this loader was closed; create a new one to iterate again")
        return self._iterate()

    def _iterate(self):
        spec = self.dataset.spec
        self._start_batch = self._begin_epoch()
        batches = iter(self._loader)
        try:
            while True:
                try:
                    images, labels, meta, errors = next(batches)
                except StopIteration:
                    break
                except (ConnectionError, EOFError) as e:  # a worker died while its pipe was being read
                    raise self._worker_died(e) from e
                except RuntimeError as e:
                    if "exited unexpectedly" in str(e):
                        raise self._worker_died(e) from e
                    if "timed out after" in str(e):
                        raise LoaderTimeoutError(f"no batch within timeout={self._loader.timeout:g} s ({e}); raise "
                                                 "timeout=, or 0 for none") from e
                    raise
                if errors:
                    raise BadImageError(*errors[0])
                release_free_memory()  # the previous batch is gone by now: keep RSS flat
                self._account(meta[:, 0], meta[:, 1], meta[:, 2])
                if self.return_meta:
                    yield ops.normalize(images, spec), labels, self._batch_meta(meta[:, 0], meta[:, 1], meta[:, 3],
                                                                                meta[:, 2])
                else:
                    yield ops.normalize(images, spec), labels
                if self._closed:
                    raise LoaderClosedError("the loader was closed while this iterator was open; start a new pass "
                                            "with a new loader")
        except BaseException:
            # Stop the workers now: a traceback keeps this frame alive in a reference cycle, and the
            # collector's teardown would stall 5 s per worker. The next epoch starts fresh workers.
            self._stop_workers()
            raise
        self._end_epoch()

    def _worker_died(self, error: BaseException) -> LoaderWorkerError:
        """The clear error for a DataLoader worker that died, whichever way torch noticed it."""
        it = getattr(self._loader, "_iterator", None)
        workers = list(getattr(it, "_workers", []) or [])
        deadline = time.monotonic() + 2.0
        dead = []
        while not dead and time.monotonic() < deadline:  # the pipe can break before the process is reaped
            dead = [w.pid for w in workers if not w.is_alive()]
            if not dead:
                time.sleep(0.05)
        who = f"pid {', '.join(map(str, dead))}" if dead else "a worker"
        return LoaderWorkerError(f"DataLoader worker ({who}) died (killed by a signal, crashed or out of memory: "
                                 f"{type(error).__name__}: {str(error)[:200]}); this pass stops here and the next one "
                                 "starts new workers (check the system log for the OOM killer)")

    def _stop_workers(self) -> None:
        it = getattr(self._loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self._loader._iterator = None

    def close(self) -> None:
        """Stop the worker processes now (otherwise they stop when the loader is garbage collected).

        Iterators still open raise :class:`LoaderClosedError` on their next batch."""
        self._closed = True
        self._stop_workers()

    def __enter__(self) -> FallbackLoader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"FallbackLoader(n={len(self.dataset)}, batch_size={self.batch_size}, num_workers={self.num_workers}, "
                f"sampler={self.sampler!r})")
