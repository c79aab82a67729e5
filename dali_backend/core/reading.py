"""Reading a sample's bytes at run time, with the checks and the replacement rule both backends share.

A file can change or vanish after indexing. Before bytes reach a decoder (DALI's cannot skip a bad
sample: the whole pipeline dies), cheap checks run: the size equals the indexed size, then the served
check of the format the bytes name (:mod:`dali_backend.formats.registry`; for JPEG: the data starts
with SOI, its headers hold nothing the index refuses (a frame type, precision or EXIF layout the two
backends' decoders cannot both read alike: :func:`~dali_backend.formats.jpeg.header_refusal`), its frame
header declares the indexed width and height, and an end-of-image marker follows). That one rule
(:meth:`SampleReader.problem`) judges whatever served the bytes: a file, a shard member, an object,
a disk-cache entry (one that fails it is dropped and the source read instead) or the RAM cache.
``on_error="raise"`` turns a failure into
:class:`BadImageError` naming the path, sample index, label and epoch. ``on_error="skip"`` replaces
the draw by another sample *of the same class*, chosen by a pure function of (seed, epoch, position),
so both backends pick the same replacement and the class balance is kept; the replacement keeps the
draw's position (and so its augmentation parameters) and is counted and reported.

A URL root (``s3://...``) is read through :class:`~dali_backend.storage.client.Bucket`: each GET is
conditional on the ETag recorded at indexing, and the response's ETag is compared with it (an object
overwritten since is refused, ``BadImageError`` "object changed since indexing"); a shard's ranges are
conditional on the shard's ETag (listed at loading, or the first served); retried with backoff on throttling and transient
errors, and the client is created in each worker process (fork-safe). With ``cache_dir`` the bytes go
through a :class:`~dali_backend.storage.cache.DiskCache` keyed by (URL, ETag, size), or (path, mtime,
size) for a folder.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import weakref
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..errors import BadImageError, ConfigError
from ..formats import registry
from ..storage.cache import DiskCache

log = logging.getLogger("dali_backend")
OnError = Literal["raise", "skip"]
SERVED_BAD = -2  # the "served" index of a draw whose file was bad under on_error="raise" (both executors)
MAX_REPLACEMENTS = 32
_CLIP_REPLACE_STREAM = 0xC119
PREFETCH_THREADS = 16  # concurrent GETs per reader process (a URL root): what hides the network's latency
MAX_PREFETCHED = 256  # fetched-ahead samples held per process at most (oldest dropped first)
# the fetched-ahead tables of every reader, changed by one thread at a time: the torch-threads executor's
# threads prefetch their batches at once (unlocked, two evicting the same oldest entry raised KeyError);
# a new lock in a forked child (one held by a parent's thread at the fork would never be released there)
_AHEAD_LOCK = threading.Lock()


def _new_ahead_lock() -> None:
    global _AHEAD_LOCK
    _AHEAD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_ahead_lock)
_REPLACE_STREAM = 0x5C1
T = TypeVar("T")


def check_on_error(on_error: str) -> OnError:
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error={on_error!r}; use 'raise' (default: stop and name the file) or 'skip' "
                          "(replace the draw by another sample of its class, counted and reported)")
    return on_error  # type: ignore[return-value]


class ClipTable:
    """The clips of a :class:`~dali_backend.sampling.clips.ClipSampler` as plain arrays, for the readers of
    ``on_error="skip"``: which clip a planned run of frames is, its class, and the clips of that class
    that may replace it (cheap to fork or pickle: about 8 bytes per frame and 16 per clip).

    Args:
        frames: sample indices, sequence by sequence, in frame order (``Sequences.frames``).
        starts: each clip's first frame, as a place in ``frames`` (ascending).
        labels: each clip's class id.
        clip_len: frames per clip.
        stride: places in ``frames`` between a clip's consecutive frames.
    """

    def __init__(self, frames: NDArray[np.int64], starts: NDArray[np.int64], labels: NDArray[np.int64],
                 clip_len: int, stride: int):
        self.frames, self.starts, self.labels = frames, starts, labels
        self.clip_len, self.stride = int(clip_len), int(stride)
        self.place = np.full(int(frames.max(initial=-1)) + 1, -1, np.int64)  # sample -> its place in frames
        self.place[frames] = np.arange(len(frames), dtype=np.int64)

    def clip_frames(self, clip: int) -> NDArray[np.int64]:
        """The ``clip_len`` sample indices of clip number ``clip``, in frame order."""
        return self.frames[self.starts[clip] + np.arange(self.clip_len, dtype=np.int64) * self.stride]

    def clip_of(self, frames: NDArray[np.int64]) -> int:
        """The clip number whose frames are ``frames``; RuntimeError if no clip is (a bug: the loader
        plans only clips)."""
        first = int(frames[0])
        place = int(self.place[first]) if 0 <= first < len(self.place) else -1
        c = int(np.searchsorted(self.starts, place))
        if place < 0 or c >= len(self.starts) or self.starts[c] != place \
                or not np.array_equal(self.clip_frames(c), frames):
            raise RuntimeError(f"frames {np.asarray(frames).tolist()} are no clip of the sampler; this is a bug in "
                               "dali_backend, please report it")
        return c

    def replacements(self, clip: int, seed: int, epoch: int, position: int) -> NDArray[np.int64]:
        """Clips that may replace ``clip`` drawn at (epoch, position): of its class, in an order that is
        a pure function of (seed, epoch, position), at most :data:`MAX_REPLACEMENTS`."""
        same = np.flatnonzero(self.labels == self.labels[clip])
        same = same[same != clip]
        if same.size == 0:
            return same
        rng = np.random.default_rng([_CLIP_REPLACE_STREAM, int(seed), int(epoch), int(position)])
        return same[rng.permutation(same.size)[:MAX_REPLACEMENTS]]


class EncodedCache:
    """Every file's encoded bytes in one block of POSIX shared memory (the tutorial's ``cache_images``).

    Costs the data set's size on disk in RAM (``nbytes``, logged when built), once for all workers of
    both backends: forked workers share the pages, spawned ones attach by name. Worth it when the
    files sit on slow or network storage and fit in memory; reads then cost a memcpy. Files that
    cannot be read while building are left out and read from disk (and checked) when drawn.
    """

    def __init__(self, paths: list[str], sizes: NDArray[np.int64],
                 fetch: Callable[[int], NDArray[np.uint8] | bytes | None] | None = None):
        self.offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.offsets[1:])
        self.present = np.zeros(len(sizes), dtype=bool)
        self.nbytes = int(self.offsets[-1])
        self._shm = shared_memory.SharedMemory(create=True, size=max(1, self.nbytes))
        self._finalizer = weakref.finalize(self, EncodedCache._release, self._shm, os.getpid())
        buf = np.ndarray((max(1, self.nbytes),), dtype=np.uint8, buffer=self._shm.buf)
        if fetch is not None:  # objects in a bucket: fetched concurrently, checked later like any read
            from concurrent.futures import ThreadPoolExecutor

            def fill(i: int) -> None:
                data = fetch(i)
                if data is not None and len(data) == sizes[i]:
                    buf[self.offsets[i]:self.offsets[i + 1]] = np.frombuffer(data, dtype=np.uint8)
                    self.present[i] = True

            with ThreadPoolExecutor(32) as pool:
                list(pool.map(fill, range(len(sizes))))
        for i, path in enumerate(paths if fetch is None else ()):
            try:
                with open(path, "rb") as f:
                    n = f.readinto(memoryview(buf[self.offsets[i]:self.offsets[i + 1]]))
                self.present[i] = n == sizes[i]
            except OSError:
                pass
        self.buf = buf
        log.info("cached %d of %d files in shared memory: %.1f MB", int(self.present.sum()), len(sizes), self.nbytes / 1e6)

    def release(self) -> None:
        """Give the shared memory back now (its name is unlinked at once, its pages once no view of them
        is left); every later ``get`` misses, so reads go to the files."""
        self.present = np.zeros_like(self.present)
        self.buf = None
        self._finalizer()

    @staticmethod
    def _release(shm, owner_pid: int) -> None:
        try:  # unlinked first: a view still alive (BufferError on close) must not keep the name in /dev/shm
            if os.getpid() == owner_pid:
                shm.unlink()
        except FileNotFoundError:
            pass
        try:
            shm.close()
        except BufferError:
            pass

    def __getstate__(self):
        return {"name": self._shm.name, "offsets": self.offsets, "present": self.present, "nbytes": self.nbytes}

    def __setstate__(self, state):
        self.offsets, self.present, self.nbytes = state["offsets"], state["present"], state["nbytes"]
        self._shm = shared_memory.SharedMemory(name=state["name"])  # attached; the creator unlinks
        self.buf = np.ndarray((max(1, self.nbytes),), dtype=np.uint8, buffer=self._shm.buf)

    def get(self, i: int) -> NDArray[np.uint8] | None:
        if not self.present[i]:
            return None
        return self.buf[self.offsets[i]:self.offsets[i + 1]]


def read_regular_file(path: str) -> NDArray[np.uint8]:
    """The bytes of ``path`` if it is a regular file; never blocks on a FIFO, socket or device."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a socket or device"
            raise OSError(0, f"not a regular file: {kind}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return np.frombuffer(f.read(), dtype=np.uint8)
    finally:
        os.close(fd)


def read_range(path: str, start: int, size: int) -> bytes:
    """``size`` bytes of the regular file ``path`` from ``start`` (fewer where the file ends sooner)."""
    from ..formats.jpeg import open_regular

    with open_regular(path) as f:
        return os.pread(f.fileno(), size, start)


class SampleReader:
    """Reads checked bytes of indexed samples. Plain arrays only: cheap to fork or pickle to workers.

    ``refused`` maps sample indices to the reason a decoder refused them at run time (found by the
    DALI loader when its pipeline failed); such samples are bad files like any other. It is filled in
    the main process only, between pipeline builds, so every reader worker started afterwards sees it.
    """

    def __init__(self, root: str, path_data: NDArray[np.uint8], path_offsets: NDArray[np.int64],
                 labels: NDArray[np.int64], sizes: NDArray[np.int64], seed: int, cache: EncodedCache | None = None,
                 bucket=None, etags=None, mtimes: NDArray[np.int64] | None = None, disk: DiskCache | None = None,
                 shards=None, frames: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None):
        self.root, self.path_data, self.path_offsets = root, path_data, path_offsets
        self.labels, self.sizes, self.seed, self.cache = labels, sizes, int(seed), cache
        self.bucket, self.etags, self.mtimes, self.disk = bucket, etags, mtimes, disk
        self.shards = shards  # index.shards: packed samples, each one range of a shard
        self.frames = frames  # (widths, heights) of the indexed frame headers: a served one must match
        self.refused: dict[int, str] = {}
        self._shard_etags: dict[int, str] = {}  # a bucket's shards: the ETag first served, where none was listed
        # fetched ahead with each sample (a URL root): ``fetch_with(reader, i)``, its mask file's bytes for an
        # index with masks (IndexTargets.mask_ahead), taken by fetched_with
        self.fetch_with: Callable | None = None
        self._ahead_pid: int | None = None
        self._pool = None
        self._ahead: dict = {}
        self._with: dict = {}

    def __getstate__(self):  # spawned workers: never the fetching threads or their results
        state = self.__dict__.copy()
        state.update(_ahead_pid=None, _pool=None, _ahead={}, _with={})
        return state

    def prefetch(self, indices) -> None:
        """Start fetching samples ``indices`` in this process's threads (a URL root only; a no-op for a
        folder or samples held in RAM): the executors call it with a batch's draws, so a batch waits
        for the network about once, not once per sample. :meth:`read` takes the results; what it does
        not take is dropped after :data:`MAX_PREFETCHED` newer ones."""
        if self.bucket is None:
            return
        with _AHEAD_LOCK:
            self._prefetch(indices)

    def _prefetch(self, indices) -> None:
        pid = os.getpid()
        if self._ahead_pid != pid:  # threads do not survive a fork: new ones, and nothing of the parent's
            from concurrent.futures import ThreadPoolExecutor

            self._pool, self._ahead, self._with, self._ahead_pid = ThreadPoolExecutor(PREFETCH_THREADS), {}, {}, pid
        for i in indices:
            i = int(i)
            if self.fetch_with is not None and i not in self._with and i not in self.refused:
                self._with[i] = self._pool.submit(self.fetch_with, self, i)
                while len(self._with) > MAX_PREFETCHED:
                    self._with.pop(next(iter(self._with)))
            if i in self._ahead or i in self.refused or (self.cache is not None and self.cache.present[i]):
                continue
            self._ahead[i] = self._pool.submit(self._fetch, i)
            while len(self._ahead) > MAX_PREFETCHED:
                self._ahead.pop(next(iter(self._ahead)))

    def _fetched(self, i: int):
        """``_fetch(i)``'s result: from a prefetch started earlier in this process, or fetched now."""
        with _AHEAD_LOCK:
            future = self._ahead.pop(i, None) if self._ahead_pid == os.getpid() else None
        return future.result() if future is not None else self._fetch(i)

    def fetched_with(self, i: int, fetch: Callable[[], T]) -> T:
        """``fetch_with(self, i)``'s result from a prefetch started earlier in this process (its exception
        raised here), or ``fetch()`` now."""
        with _AHEAD_LOCK:
            future = self._with.pop(i, None) if self._ahead_pid == os.getpid() else None
        return future.result() if future is not None else fetch()

    @classmethod
    def for_index(cls, index, seed: int, cache: bool = False, cache_dir: str | os.PathLike | None = None,
                  cache_limit_bytes: int | None = None) -> SampleReader:
        disk = DiskCache(cache_dir, cache_limit_bytes) if cache_dir is not None else None
        if cache_dir is None and cache_limit_bytes is not None:
            raise ConfigError("cache_limit_bytes bounds the disk cache: pass cache_dir= too (a folder on a local disk)")
        reader = cls(index.root, index.paths.data, index.paths.offsets, index.labels, index.sizes, seed, None,
                     index.bucket(), index.etags, index.mtimes, disk, index.shards, (index.widths, index.heights))
        if index.annotations is not None and "masks" in index.annotations.kinds:
            reader.fetch_with = index.annotations.mask_ahead  # a mask's GET rides with its image's
        if cache:
            fetch = None
            if reader.bucket is not None or reader.shards is not None:
                def fetch(i: int) -> bytes | None:
                    data, reason = reader._fetch(i)
                    return None if reason else data
            reader.cache = EncodedCache([index.abspath(i) for i in range(len(index))], index.sizes, fetch)
        return reader

    def rel(self, i: int) -> str:
        return self.path_data[self.path_offsets[i]:self.path_offsets[i + 1]].tobytes().decode("utf-8", "surrogateescape")

    def path(self, i: int) -> str:
        """The file's path, or the object's URL; for a packed sample ``SHARD:relative/path.jpg``."""
        if self.shards is not None:
            return f"{os.path.join(self.root, self.shards.names[self.shards.ids[i]])}:{self.rel(i)}"
        return os.path.join(self.root, self.rel(i))

    def _version(self, i: int) -> str:
        """What identifies the indexed version of sample ``i`` in the disk cache: its ETag, or its mtime."""
        if self.shards is not None:
            sid = int(self.shards.ids[i])
            return f"shard:{self.shards.version(sid)}:{int(self.shards.offsets[i])}"
        if self.etags is not None and self.etags[i]:
            return self.etags[i]
        return f"mtime:{int(self.mtimes[i])}" if self.mtimes is not None else ""

    def _fetch(self, i: int) -> tuple[bytes | NDArray[np.uint8] | None, str | None]:
        """``(bytes, None)`` or ``(None, why not)``: from the disk cache, the bucket or the file."""
        from ..storage.client import ObjectChanged, ObjectMissing

        name, version = self.path(i), self._version(i)
        if self.disk is not None:
            data = self.disk.get(name, version, int(self.sizes[i]))
            if data is not None:
                wrong = self.problem(i, data)
                if wrong is None:
                    return data, None
                self.disk.drop(name, version, int(self.sizes[i]), wrong)  # not the indexed sample: a miss
        try:
            if self.shards is not None:  # one range of one shard
                shard = self.shards.names[self.shards.ids[i]]
                start, size = int(self.shards.offsets[i]), int(self.sizes[i])
                if self.bucket is not None:
                    data = self.shard_range(int(self.shards.ids[i]), start, size)
                else:
                    data = read_range(os.path.join(self.root, shard), start, size)
            elif self.bucket is not None:
                etag = self.etags[i] if self.etags is not None and self.etags[i] else None
                data = self.bucket.get(self.rel(i), etag)[0]
            else:
                data = read_regular_file(name)
        except ObjectChanged:
            return None, "object changed since indexing (overwritten: its ETag differs)"
        except ObjectMissing:
            return None, "missing (no such object)"
        except OSError as e:  # StorageError too: its message names the URL and the reason after the retries
            text = str(e).split(": ", 1)[1] if self.bucket is not None and ": " in str(e) else (e.strerror or str(e))
            return None, f"unreadable ({text})"
        if self.disk is not None and len(data) == self.sizes[i]:  # only what the checks can pass is kept
            self.disk.put(name, version, bytes(data))
        return data, None

    def shard_range(self, sid: int, start: int, size: int) -> bytes:
        """``size`` bytes of shard ``sid`` in the bucket, conditional on its ETag: the one listed when the
        index was loaded, else the first this process was served (so a shard rewritten meanwhile is
        :class:`~dali_backend.storage.client.ObjectChanged`)."""
        if not size:
            return b""
        known = self.shards.etags[sid] if self.shards.etags else ""
        etag = known or self._shard_etags.get(sid)
        data, info = self.bucket.get(self.shards.names[sid], etag or None, start, start + size)
        if not etag and info.etag:
            self._shard_etags[sid] = info.etag
        return data

    def problem(self, i: int, data: NDArray[np.uint8] | None, error: OSError | str | None = None) -> str | None:
        """What is wrong with sample ``i``'s bytes, or None."""
        if isinstance(error, str):
            return error
        if error is not None:
            return f"unreadable ({error.strerror or error})"
        data = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else data
        if data.size != self.sizes[i]:
            return f"file changed since indexing (size {self.sizes[i]} -> {data.size} bytes)"
        indexed = None if self.frames is None else (self.frames[0][i], self.frames[1][i])
        fmt = registry.sniff(data[:16], self.rel(i))  # its name speaks for unclaimed bytes
        return "no registered image format's signature" if fmt is None else fmt.served_refusal(data, indexed)

    def read(self, i: int, epoch: int | None = None) -> NDArray[np.uint8]:
        """Checked bytes of sample ``i`` (from the cache when there is one); raises :class:`BadImageError`."""
        if i in self.refused:
            raise BadImageError(self.path(i), i, int(self.labels[i]), epoch, self.refused[i])
        data, err = (self.cache.get(i) if self.cache is not None else None), None
        if data is None:
            if self.bucket is not None or self.disk is not None or self.shards is not None:
                data, err = self._fetched(i)
            else:
                try:
                    data = read_regular_file(self.path(i))
                except OSError as e:
                    err = e
        reason = self.problem(i, data, err)
        if reason:
            raise BadImageError(self.path(i), i, int(self.labels[i]), epoch, reason)
        return np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else data

    def replacements(self, i: int, epoch: int, position: int) -> NDArray[np.int64]:
        """Candidates replacing sample ``i`` at (epoch, position): same class, a pure function of both."""
        same = np.flatnonzero(self.labels == self.labels[i])
        same = same[same != i]
        if same.size == 0:
            return same
        rng = np.random.default_rng([_REPLACE_STREAM, self.seed, int(epoch), int(position)])
        return same[rng.permutation(same.size)[:MAX_REPLACEMENTS]]

    def serve(self, i: int, epoch: int, position: int, on_error: OnError, load: Callable[[int], T]) -> tuple[int, T]:
        """``(served index, load(served index))``: ``i`` itself, or under ``skip`` its replacement."""
        try:
            return i, load(i)
        except BadImageError:
            if on_error != "skip":
                raise
            first = f"{self.path(i)}"
        for cand in self.replacements(i, epoch, position):
            try:
                return int(cand), load(int(cand))
            except BadImageError:
                continue
        raise BadImageError(first, i, int(self.labels[i]), epoch,
                            f"unusable, and no usable replacement among {MAX_REPLACEMENTS} samples of its class")

    def serve_clip(self, table: ClipTable, frames: NDArray[np.int64], epoch: int, position: int,
                   load: Callable[[NDArray[np.int64]], list[T]]) -> tuple[NDArray[np.int64], list[T]]:
        """``(served frames, load(served frames))`` for the clip of ``frames`` drawn at (epoch, position)
        under ``on_error="skip"``: the clip itself when every frame loads, else the first clip of
        :meth:`ClipTable.replacements` whose every frame loads. ``load`` loads all frames of a clip and
        raises :class:`BadImageError` for the first bad one. Every frame of a clip is served by the same
        rule, in whichever process reads it, so the whole clip is replaced and never mixed."""
        try:
            return frames, load(frames)
        except BadImageError as e:
            first = e
        clip = table.clip_of(frames)
        for cand in table.replacements(clip, self.seed, epoch, position):
            cand_frames = table.clip_frames(int(cand))
            try:
                return cand_frames, load(cand_frames)
            except BadImageError:
                continue
        raise BadImageError(first.path, first.index, first.label, epoch,
                            f"{first.reason}; its clip {clip} has no usable replacement among {MAX_REPLACEMENTS} "
                            "clips of its class")
