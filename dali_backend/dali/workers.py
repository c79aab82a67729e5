"""Process hygiene of the loaders' workers: they outlive nobody, ignore Ctrl-C, and forks leave them be.

DALI starts its Python reader workers itself (fork, or spawn once CUDA is initialised), so this
module hooks both ways in: forked workers through ``os.register_at_fork`` while a loader is starting
its pipeline (:func:`starting_workers`), spawned ones when they unpickle the draw source. Each worker
then

* exits within half a second once its parent is gone (SIGKILL, SIGTERM, a crash of the trainer):
  otherwise it would live on with parent 1 and keep DALI's shared memory and the resource tracker
  alive; once the workers are gone the tracker unlinks the loader's shared memory;
* ignores SIGINT: Ctrl-C in a terminal reaches the whole process group, and the main process (which
  gets ``KeyboardInterrupt`` and keeps its loader usable) must not lose its workers to it.

And a process made by a plain ``os.fork()`` after iterating (any backend) forgets the parent's worker
processes, so that its exit does not terminate them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

POLL_S = 0.5
_starting = threading.local()


def _watch(parent: int) -> None:
    while True:
        time.sleep(POLL_S)
        if os.getppid() != parent:
            os._exit(0)  # the parent is gone; nothing of ours is worth flushing


def become_worker(parent: int) -> None:
    """Run in a new reader worker: exit with the parent, leave SIGINT to the parent."""
    if os.getpid() == parent:
        return
    with contextlib.suppress(ValueError, OSError):  # ValueError: not the main thread
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch, args=(parent,), name="dali-backend-parent-watch", daemon=True).start()


def _after_fork_in_child() -> None:
    parent = getattr(_starting, "parent", None)
    if parent is not None:
        _starting.parent = None
        become_worker(parent)


@contextlib.contextmanager
def starting_workers():
    """Processes forked by this thread inside the block are reader workers (DALI forks in ``build()``)."""
    _starting.parent = os.getpid()
    try:
        yield
    finally:
        _starting.parent = None


def _forget_parents_children() -> None:
    """In a process made by a plain ``os.fork()``: the parent's worker processes are not ours.

    ``multiprocessing`` resets its list of children only in processes it starts itself; after a plain
    fork, its exit hook would terminate (and try to join) the parent's DataLoader and DALI workers.
    """
    import multiprocessing.process as mp_process

    for proc in list(getattr(mp_process, "_children", ())):
        if getattr(proc, "_parent_pid", os.getpid()) != os.getpid():
            mp_process._children.discard(proc)


os.register_at_fork(after_in_child=_after_fork_in_child)
os.register_at_fork(after_in_child=_forget_parents_children)


class WorkerInit:
    """Wraps a DALI reader callback so ``worker_init_fn(worker_id)`` runs once in each reader worker
    (DataLoader's argument). Ids are 0..n-1: consecutive ``multiprocessing`` identities modulo n."""

    def __init__(self, source, worker_init_fn, num_workers: int):
        self.source, self.worker_init_fn, self.num_workers = source, worker_init_fn, max(1, num_workers)
        self._pid = os.getpid()

    def __call__(self, sample_info):
        if self._pid != os.getpid():
            self._pid = os.getpid()
            import multiprocessing

            identity = multiprocessing.current_process()._identity
            self.worker_init_fn((identity[-1] - 1) % self.num_workers if identity else 0)
        return self.source(sample_info)
