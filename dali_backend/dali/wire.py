"""The draw schedule shared between the loader (main process) and DALI's Python workers.

DALI pipelines cannot be reset mid-epoch and their parallel ``external_source`` workers are forked
once, so the loader never lets DALI see an epoch end. DALI runs one endless stream of sample slots
(``sample_info.idx_in_epoch`` = slot number); the loader writes which draw fills each slot into a
ring buffer in shared memory, a few batches ahead of consumption. Each slot row is
``(slot, sample index, epoch, position, kind)``; ``kind`` marks real draws and padding (slots that
fill the last partial batch of an epoch, or speculative slots the loader later discards). Workers
wait for their slot to be written, so they can never read a stale plan, and every output carries its
slot row (and the index served) back so the loader verifies each sample is the draw it planned (no
silent mislabeling).
"""

from __future__ import annotations

import os
import time
from enum import IntEnum
from multiprocessing import shared_memory

import numpy as np

from ..augment import AugmentSpec
from ..errors import BadImageError
from ..jpeg import decoded_size
from ..reading import SERVED_BAD, OnError, SampleReader
from .workers import become_worker

class Kind(IntEnum):
    """What fills a slot: a real draw, or padding (the last partial batch, or speculation discarded)."""

    DRAW = 0
    PAD = 1


class Col(IntEnum):
    """The columns of a slot row: in the ring (``SLOT`` .. ``KIND``) and coming back from DALI (+ ``SERVED``)."""

    SLOT = 0
    INDEX = 1
    EPOCH = 2
    POSITION = 3
    KIND = 4
    SERVED = 5


KIND_DRAW, KIND_PAD = Kind.DRAW, Kind.PAD
ROW = Col.KIND + 1  # columns in the ring
WAIT_TIMEOUT_S = 600.0
PREFETCH_SLOTS = 32  # slots ahead whose samples a reader worker fetches concurrently (a URL root)

# A valid 8x8 gray JPEG: what padding slots decode (cheap, never a real sample).
PAD_JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a333d3c393338"
    "3740485c4e404457453738506d51575f626768673e4d71797064785c656763ffc0000b080008000801011100ffc4001f00000105010101010101"
    "00000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d010203000411051221314106135161072271"
    "14328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465"
    "666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2"
    "d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f002bffd9")
PAD_SIZE = (8, 8)


class SlotRing:
    """A ring of schedule rows in POSIX shared memory (works with fork and spawn workers)."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self._shm = shared_memory.SharedMemory(create=True, size=self.capacity * ROW * 8)
        self._owner = True
        self.rows = np.ndarray((self.capacity, ROW), dtype=np.int64, buffer=self._shm.buf)
        self.rows[:, 0] = -1

    def __getstate__(self):
        return {"capacity": self.capacity, "name": self._shm.name}

    def __setstate__(self, state):
        self.capacity = state["capacity"]
        # Attached, not owned: the creator unlinks it. (Spawned workers share the creator's resource
        # tracker, so the registration this attach makes is the creator's own and must stay.)
        self._shm = shared_memory.SharedMemory(name=state["name"])
        self._owner = False
        self.rows = np.ndarray((self.capacity, ROW), dtype=np.int64, buffer=self._shm.buf)

    def write(self, slot: int, index: int, epoch: int, position: int, kind: int) -> None:
        r = self.rows[slot % self.capacity]
        r[1:] = (index, epoch, position, kind)
        r[0] = slot  # written last: a worker that sees the slot number sees the whole row

    def read(self, slot: int, timeout: float = WAIT_TIMEOUT_S) -> np.ndarray:
        r = self.rows[slot % self.capacity]
        deadline = None
        delay = 0.0002
        while r[0] != slot:
            if r[0] > slot:
                raise RuntimeError(f"schedule slot {slot} was overwritten before it was read (ring too small)")
            now = time.monotonic()
            deadline = deadline or now + timeout
            if now > deadline:
                raise TimeoutError(f"no draw scheduled for slot {slot} after {timeout:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        return r.copy()

    def close(self) -> None:
        self.rows = None  # type: ignore[assignment]
        try:
            self._shm.close()
            if self._owner:
                self._shm.unlink()
        except (FileNotFoundError, BufferError):
            pass


class DrawSource:
    """The parallel external source's per-sample callback: a pure function of the slot's draw.

    Returns the checked encoded bytes (see :mod:`dali_backend.reading`), the label, the slot row with
    the index actually served appended (it differs from the planned one when ``on_error="skip"``
    replaced a bad file), and the draw's augmentation parameters: one array per entry of
    ``spec.wire`` (derived from the operations' parameter definitions, in that order). Operations
    whose parameters depend on the image size get the size from the served bytes' headers
    (:func:`~dali_backend.jpeg.decoded_size`: frame size turned by the EXIF orientation).

    A bad file under ``on_error="raise"`` is not raised here: DALI would raise it batches early (it
    prefetches) as text. The slot gets the padding image and ``served = SERVED_BAD``, and the loader
    raises :class:`BadImageError` with all its fields when it reaches that batch.
    """

    def __init__(self, reader: SampleReader, spec: AugmentSpec, on_error: OnError, ring: SlotRing):
        self.reader, self.spec, self.on_error, self.ring = reader, spec, on_error, ring
        self.parent = os.getpid()

    def __setstate__(self, state):  # a spawned reader worker unpickling its callback
        self.__dict__.update(state)
        become_worker(self.parent)

    def _prefetch(self, slot: int) -> None:
        """Start fetching the samples of this slot and of the next ones already scheduled (rows the
        loader wrote ahead), so one worker keeps :data:`~dali_backend.reading.PREFETCH_THREADS` requests
        in flight. Only hides latency: every sample is still served by :meth:`__call__` in slot order."""
        rows = self.ring.rows
        ahead = []
        for s in range(slot, slot + min(PREFETCH_SLOTS, self.ring.capacity)):
            r = rows[s % self.ring.capacity]
            if r[Col.SLOT] != s:
                break
            if r[Col.KIND] == KIND_DRAW:
                ahead.append(int(r[Col.INDEX]))
        self.reader.prefetch(ahead)

    def __call__(self, sample_info):
        row = self.ring.read(sample_info.idx_in_epoch)
        _, index, epoch, position, kind = (int(v) for v in row)
        pad = kind == KIND_PAD
        if not pad and self.reader.bucket is not None:
            self._prefetch(sample_info.idx_in_epoch)
        if not pad:
            try:
                served, data = self.reader.serve(index, epoch, position, self.on_error,
                                                 lambda j: self.reader.read(j, epoch))
                size = decoded_size(data) if self.spec.needs_size else None
                if size is None and self.spec.needs_size:
                    raise BadImageError(self.reader.path(served), served, int(self.reader.labels[served]), epoch,
                                        "no JPEG frame header found, so its size-dependent operations cannot be drawn")
                label = int(self.reader.labels[served])
                p = self.spec.make_params(self.reader.seed, epoch, position, size)
            except BadImageError:
                pad = True
        if pad:
            data, served = np.frombuffer(PAD_JPEG, dtype=np.uint8), (-1 if kind == KIND_PAD else SERVED_BAD)
            label, p = -1, self.spec.make_params(0, 0, 0, PAD_SIZE)
        out = [data, np.array(label, dtype=np.int64), np.append(row, served).astype(np.int64)]
        return tuple(out + self.spec.wire_arrays(p))
