"""The draw schedule shared between the loader (main process) and DALI's Python workers.

DALI pipelines cannot be reset mid-epoch and their parallel ``external_source`` workers are forked
once, so the loader never lets DALI see an epoch end. DALI runs one endless stream of sample slots
(``sample_info.idx_in_epoch`` = slot number); the loader writes which draw fills each slot into a
ring buffer in shared memory, a few batches ahead of consumption. Each slot row is
``(slot, sample index, epoch, position, kind)``; ``kind`` marks real draws and padding (slots that
fill the last partial batch of an epoch, or speculative slots the loader later discards). Workers
wait for their slot to be written, so they can never read a stale plan, and every output carries its
slot row (and the index served) back so the loader verifies each sample is the draw it planned (no
silent mislabeling). Beside each row the ring holds a note: what the worker must tell the loader about
that draw besides pixels, as JSON: a bad draw's fields (:class:`~dali_backend.core.boundary.BadDraw`), or,
when the loader asked for them (``return_meta``), the parameters the draw was augmented with.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from enum import IntEnum
from multiprocessing import shared_memory

import numpy as np

from ..core.augment import AugmentSpec
from ..core.boundary import BadDraw, Kind, Params, plain_params
from ..core.depth import check_served
from ..errors import BadImageError
from ..formats.registry import decoded_size, decoder_refusal, opencv_decode
from ..core.reading import SERVED_BAD, ClipTable, OnError, SampleReader
from .targetgraph import box_note_bytes, encode_note, mask_wire, moved_boxes
from .workers import become_worker

class Col(IntEnum):
    """The columns of a slot row: in the ring (``SLOT`` .. ``KIND``) and coming back from DALI (+ ``SERVED``,
    ``READ_NS``: the worker's time reading the draw's bytes and drawing its parameters, and ``WORK_NS``: its
    CPU time decoding the draw and running the spec's first operations, with ``reader_ops``; for telemetry)."""

    SLOT = 0
    INDEX = 1
    EPOCH = 2
    POSITION = 3
    KIND = 4
    SERVED = 5
    READ_NS = 6
    WORK_NS = 7


ROW = Col.KIND + 1  # columns in the ring
WAIT_TIMEOUT_S = 600.0
NOTE_HEADER = 16  # a note starts with two int64: the slot it belongs to and its length in bytes
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
# Set (truthy) to keep the decoder and every operation in a CPU graph (:func:`reader_ops` gives 0): the
# GPU graph's head as it is, run on CPU operators (the tests of that head; an A/B of the two placements).
GRAPH_DECODE_ENV = "DALI_BACKEND_CPU_GRAPH_DECODE"


def reader_ops(spec: AugmentSpec, gpu: bool) -> int:
    """How many of ``spec``'s leading operations a graph's reader workers run, having decoded each draw
    themselves with the fallback's decoder; 0: they send the encoded bytes and DALI decodes (always on
    the GPU).

    On CPU operators DALI's decoder and its ``fn.clahe`` are the same code as the fallback's (libjpeg-turbo
    through OpenCV: 0 levels apart, FACTS; OpenCV's CLAHE, which :func:`~dali_backend.transforms.color.clahe_plane`
    reproduces bit for bit), so the readers may run them, and with the compiled CLAHE kernel they cost
    less there: 2048x1536 JPEGs, decode + CLAHE 8.5 + 9.3 ms per image against DALI's 9.2 + 16.9 (one
    run). The readers run the leading operations that declare ``SAME_KERNEL_ON_CPU`` (and identities);
    none when there are none, on 16-bit specs, on a region decode (``spec.region_crop``: DALI decodes
    only the window), or with :data:`GRAPH_DECODE_ENV` set."""
    if gpu or spec.bit_depth != 8 or spec.region_crop is not None \
            or os.environ.get(GRAPH_DECODE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off"):
        return 0
    k = 0
    while k < len(spec.transforms) and (spec.transforms[k].is_identity or spec.transforms[k].SAME_KERNEL_ON_CPU):
        k += 1
    return k if any(not op.is_identity for op in spec.transforms[:k]) else 0


class SlotRing:
    """A ring of schedule rows in POSIX shared memory (works with fork and spawn workers).

    Beside each row, a cell where the first reader of a clip records the sample each of its slots
    serves (:meth:`decide`), under a byte-range lock of the ring's own shared-memory file
    (``/dev/shm``; ``fcntl`` record locks work across processes, forked or spawned, and the kernel
    releases them if a holder dies)."""

    def __init__(self, capacity: int, note_bytes: int = 1024):
        self.capacity, self.note_bytes = int(capacity), -(-int(note_bytes) // 64) * 64
        self._shm = shared_memory.SharedMemory(create=True, size=self.capacity * (ROW * 8 + self.note_bytes + 16))
        self._owner = True
        self._lock_fd: tuple[int, int] | None = None  # (pid, fd): record locks belong to a process
        self._views()
        self.rows[:, 0] = -1
        self.decided[:, 0] = -1

    def _views(self) -> None:
        self.rows = np.ndarray((self.capacity, ROW), dtype=np.int64, buffer=self._shm.buf)
        self.notes = np.ndarray((self.capacity, self.note_bytes), dtype=np.uint8, buffer=self._shm.buf,
                                offset=self.capacity * ROW * 8)
        self.decided = np.ndarray((self.capacity, 2), dtype=np.int64, buffer=self._shm.buf,
                                  offset=self.capacity * (ROW * 8 + self.note_bytes))  # (slot, sample served)

    def __getstate__(self):
        return {"capacity": self.capacity, "note_bytes": self.note_bytes, "name": self._shm.name}

    def __setstate__(self, state):
        self.capacity, self.note_bytes = state["capacity"], state["note_bytes"]
        # Attached, not owned: the creator unlinks it. (Spawned workers share the creator's resource
        # tracker, so the registration this attach makes is the creator's own and must stay.)
        self._shm = shared_memory.SharedMemory(name=state["name"])
        self._owner = False
        self._lock_fd = None
        self._views()

    def decide(self, start: int, count: int, choose: Callable[[], np.ndarray]) -> np.ndarray | None:
        """The samples slots ``start`` .. ``start + count - 1`` serve, chosen once for all processes: the
        first caller runs ``choose()`` under the lock and records its result (or, if it raises, that it
        failed, and re-raises); later callers get the record. None: the first caller's choice failed."""
        pid = os.getpid()
        if self._lock_fd is None or self._lock_fd[0] != pid:  # not inherited across fork: one per process
            self._lock_fd = (pid, os.open(f"/dev/shm/{self._shm.name}", os.O_RDWR))  # POSIX shm on Linux
        fd, cells = self._lock_fd[1], [self.decided[s % self.capacity] for s in range(start, start + count)]
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, start % self.capacity)
        try:
            if cells[0][0] == start:
                return None if cells[0][1] < 0 else np.array([c[1] for c in cells], dtype=np.int64)
            try:
                served = np.asarray(choose(), dtype=np.int64)
            except BaseException:
                cells[0][1], cells[0][0] = -1, start
                raise
            for s, cell, index in reversed(list(zip(range(start, start + count), cells, served.tolist()))):
                cell[1], cell[0] = index, s  # the slot number last, the first slot's cell last: the commit
            return served
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, start % self.capacity)

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

    def write_note(self, slot: int, payload: bytes) -> None:
        """Leave ``payload`` for the loader beside slot ``slot`` (a worker, before returning its output)."""
        note = self.notes[slot % self.capacity]
        if NOTE_HEADER + len(payload) > note.size:
            raise RuntimeError(f"a note of {len(payload)} bytes does not fit the schedule ring's {note.size - NOTE_HEADER}; "
                               "this is a bug in dali_backend, please report it")
        note[NOTE_HEADER:NOTE_HEADER + len(payload)] = np.frombuffer(payload, np.uint8)
        note[:NOTE_HEADER].view(np.int64)[:] = (slot, len(payload))

    def read_note(self, slot: int) -> bytes:
        """The note a worker left for slot ``slot`` (the loader, once DALI returned that slot's output)."""
        note = self.notes[slot % self.capacity]
        owner, size = (int(v) for v in note[:NOTE_HEADER].view(np.int64))
        if owner != slot:
            raise RuntimeError(f"no note for slot {slot} (the ring holds slot {owner}'s); this is a bug in dali_backend, "
                               "please report it")
        return note[NOTE_HEADER:NOTE_HEADER + size].tobytes()

    def close(self) -> None:
        self.rows = self.notes = self.decided = None  # type: ignore[assignment]
        if self._lock_fd is not None and self._lock_fd[0] == os.getpid():
            os.close(self._lock_fd[1])
        self._lock_fd = None
        try:
            self._shm.close()
            if self._owner:
                self._shm.unlink()
        except (FileNotFoundError, BufferError):
            pass


def note_bytes(spec: AugmentSpec, longest_path: int, with_params: bool, annotations=None) -> int:
    """The room a slot's note needs: a bad draw's fields (its path is ``longest_path`` bytes at most; a long
    reason is shortened to fit), or a draw's parameters as JSON (an upper bound: every number at its
    longest form; the parameters of an operation list have the same shapes for every draw)."""
    room = 1024 + 2 * int(longest_path)
    if with_params:
        template = plain_params(spec.make_params(0, 0, 0, (4096, 4096) if spec.needs_size else None))

        def widest(v):
            if isinstance(v, dict):
                return {k: widest(x) for k, x in v.items()}
            if isinstance(v, list):
                return [widest(x) for x in v]
            return False if isinstance(v, bool) else "x" * 24  # repr(float) is at most 24 characters

        room = max(room, 256 + len(json.dumps(widest(template))))
    return room + box_note_bytes(annotations) + NOTE_HEADER


class DrawSource:
    """The parallel external source's per-sample callback: a pure function of the slot's draw.

    Returns the checked encoded bytes (see :mod:`dali_backend.core.reading`), the label, the slot row with
    the index actually served appended (it differs from the planned one when ``on_error="skip"``
    replaced a bad file), and the draw's augmentation parameters: one array per entry of
    ``spec.wire`` (derived from the operations' parameter definitions, in that order). Operations
    whose parameters depend on the image size get the size from the served bytes' headers
    (:func:`~dali_backend.formats.jpeg.decoded_size`: frame size turned by the EXIF orientation). With
    ``with_params``, the draw's parameters are also left in the slot's note, for ``return_meta``.

    With ``reader_ops`` (:func:`reader_ops`, CPU graphs) the first output is instead the draw decoded by
    the fallback's decoder and run through the spec's first ``reader_ops`` operations (``[H, W, C]``
    uint8); a file the decoder refuses is a bad file like any other (replaced under ``skip``).

    A bad file under ``on_error="raise"`` is not raised here: DALI would raise it batches early (it
    prefetches) as text. The slot gets the padding image and ``served = SERVED_BAD``, its note the
    error's fields, and the loader raises :class:`BadImageError` with them when it reaches that batch.
    """

    def __init__(self, reader: SampleReader, spec: AugmentSpec, on_error: OnError, ring: SlotRing,
                 with_params: bool = False, clips: ClipTable | None = None, annotations=None, box_policy=None,
                 reader_ops: int = 0):
        self.reader, self.spec, self.on_error, self.ring, self.with_params = reader, spec, on_error, ring, with_params
        self.reader_ops = int(reader_ops)
        self._work_ns = [0, 0]  # this call's wall and CPU time decoding and in the readers' operations
        # an index with targets (dali.targetgraph): the mask and its steps' arrays after the parameters,
        # the moved boxes in the note
        self.annotations, self.box_policy = annotations, box_policy
        self.clips = clips if on_error == "skip" else None  # whole clips are replaced under skip
        self._clip_memo: tuple | None = None  # the last clip this process served: (key, frames, bytes or error)
        self.parent = os.getpid()

    def _serve_frame(self, slot: int, index: int, epoch: int, position: int) -> tuple[int, np.ndarray]:
        """``(served index, checked bytes)`` of the draw in ``slot`` (its pixels with ``reader_ops``): the sample
        itself (or its replacement), or with clips under ``on_error="skip"``, frame ``t`` of its clip or of the
        clip replacing it.

        A clip's frames are ``clip_len`` consecutive slots from a multiple of ``clip_len`` (the loader
        plans whole clips, and every batch, of ``batch_size * clip_len`` slots, starts at a multiple of
        its size); DALI spreads them over its reader processes. The first reader of a clip checks it and
        chooses (:meth:`~dali_backend.core.reading.SampleReader.serve_clip`) under the ring's lock and records
        the choice (:meth:`SlotRing.decide`); the others serve that record, so a frame that changes (or a
        read that fails) between two readers' checks can never mix two clips. A reader that serves
        several frames of one clip decides once."""
        if self.clips is None:
            return self.reader.serve(index, epoch, position, self.on_error, lambda j: self._load(j, epoch))
        T = self.clips.clip_len
        start = slot - slot % T
        key = (start, epoch, position)
        if self._clip_memo is None or self._clip_memo[0] != key:
            rows = np.stack([self.ring.read(s) for s in range(start, start + T)])
            if ((rows[:, Col.EPOCH] != epoch) | (rows[:, Col.POSITION] != position)
                    | (rows[:, Col.KIND] != Kind.DRAW)).any():
                raise RuntimeError(f"slots {start}..{start + T - 1} hold no whole clip; this is a bug in dali_backend, "
                                   "please report it")
            frames, read = rows[:, Col.INDEX].copy(), lambda fr: [self._load(int(j), epoch) for j in fr]
            chosen: dict = {}

            def choose() -> np.ndarray:
                chosen["served"], chosen["data"] = self.reader.serve_clip(self.clips, frames, epoch, position, read)
                return chosen["served"]

            try:
                served = self.ring.decide(start, T, choose)
                if served is None:  # the reader that chose failed: fail here too, with this reader's error
                    served, chosen["data"] = self.reader.serve_clip(self.clips, frames, epoch, position, read)
                self._clip_memo = (key, served, chosen.get("data"))
            except BadImageError as e:
                self._clip_memo = (key, None, e)
        _, served, data = self._clip_memo
        if served is None:
            raise data
        t = slot - start
        if data is None:  # another reader chose: read this frame of the clip it chose (checked as always)
            return int(served[t]), self._load(int(served[t]), epoch)
        return int(served[t]), data[t]

    def _load(self, j: int, epoch: int):
        """Sample ``j``'s checked bytes, or with ``reader_ops`` its decoded pixels (:meth:`_decoded`)."""
        data = self.reader.read(j, epoch)
        return self._decoded(data, j, epoch) if self.reader_ops else data

    def _decoded(self, data: np.ndarray, served: int, epoch: int) -> np.ndarray:
        """Sample ``served``'s bytes ``data`` decoded as the fallback decodes them (depth checked first);
        raises :class:`BadImageError` where the decoder refuses them."""
        check_served(self.spec, data, self.reader.path(served))  # 16-bit data, 8-bit spec: ConfigError
        t0 = self._work_start()
        img = opencv_decode(data, self.spec.color)
        self._work_end(t0)
        if img is None or img.size == 0:
            raise BadImageError(self.reader.path(served), served, int(self.reader.labels[served]), epoch,
                                decoder_refusal(data))
        return img

    def _run_reader_ops(self, img: np.ndarray, p: list) -> np.ndarray:
        """``img`` through the spec's first ``reader_ops`` operations with the draw's parameters ``p``, as
        the graph's ``[H, W, C]``."""
        t0 = self._work_start()
        for op, params in zip(self.spec.transforms[:self.reader_ops], p):
            if not op.is_identity:
                img = op.apply(img, params)
        img = np.ascontiguousarray(img[:, :, None] if img.ndim == 2 else img)
        self._work_end(t0)
        return img

    @staticmethod
    def _work_start() -> tuple[int, int]:
        return time.perf_counter_ns(), time.thread_time_ns()

    def _work_end(self, t0: tuple[int, int]) -> None:
        """Count the decoding or operations since ``t0``: wall time (not reading) and CPU time (Col.WORK_NS)."""
        self._work_ns[0] += time.perf_counter_ns() - t0[0]
        self._work_ns[1] += time.thread_time_ns() - t0[1]

    def __setstate__(self, state):  # a spawned reader worker unpickling its callback
        self.__dict__.update(state)
        become_worker(self.parent)

    def _prefetch(self, slot: int) -> None:
        """Start fetching the samples of this slot and of the next ones already scheduled (rows the
        loader wrote ahead), so one worker keeps :data:`~dali_backend.core.reading.PREFETCH_THREADS` requests
        in flight. Only hides latency: every sample is still served by :meth:`__call__` in slot order."""
        rows = self.ring.rows
        ahead = []
        for s in range(slot, slot + min(PREFETCH_SLOTS, self.ring.capacity)):
            r = rows[s % self.ring.capacity]
            if r[Col.SLOT] != s:
                break
            if r[Col.KIND] == Kind.DRAW:
                ahead.append(int(r[Col.INDEX]))
        self.reader.prefetch(ahead)

    def __call__(self, sample_info):
        slot = sample_info.idx_in_epoch
        row = self.ring.read(slot)
        t0, self._work_ns = time.perf_counter_ns(), [0, 0]
        _, index, epoch, position, kind = (int(v) for v in row)
        bad = None
        if kind == Kind.DRAW and self.reader.bucket is not None:
            self._prefetch(slot)
        if kind == Kind.DRAW:
            try:
                served, data = self._serve_frame(slot, index, epoch, position)
                if self.reader_ops:  # pixels, decoded where the frame was read (a clip's too: _load)
                    size = data.shape[:2]
                else:
                    check_served(self.spec, data, self.reader.path(served))  # 16-bit data, 8-bit spec: ConfigError
                    size = decoded_size(data) if self.spec.needs_size or self.annotations is not None else None
                    if size is None and (self.spec.needs_size or self.annotations is not None):
                        raise BadImageError(self.reader.path(served), served, int(self.reader.labels[served]), epoch,
                                            "no image header found, so its size-dependent operations cannot be drawn")
                label = int(self.reader.labels[served])
                p = self.spec.make_params(self.reader.seed, epoch, position, size)
                targets = self._targets(served, p, size)
                if self.reader_ops:
                    data = self._run_reader_ops(data, p)
            except BadImageError as e:
                bad = BadDraw.from_error(e)
        if kind != Kind.DRAW or bad is not None:
            data, served = np.frombuffer(PAD_JPEG, dtype=np.uint8), (-1 if bad is None else SERVED_BAD)
            label, p = -1, self.spec.make_params(0, 0, 0, PAD_SIZE)
            if self.reader_ops:
                data = self._run_reader_ops(opencv_decode(data, self.spec.color), p)
            targets = self._targets(None, p, PAD_SIZE)
            if bad is not None:
                self.ring.write_note(slot, bad.to_json(self.ring.note_bytes - NOTE_HEADER))
        elif self.with_params or targets[1] is not None:
            self.ring.write_note(slot, encode_note(plain_params(p) if self.with_params else None, targets[1]))
        wall, cpu = self._work_ns  # decoding and the readers' operations: not reading; their CPU time
        times = (max(0, time.perf_counter_ns() - t0 - wall), cpu)
        out = [data, np.array(label, dtype=np.int64), np.append(row, (served, *times)).astype(np.int64)]
        return tuple(out + self.spec.wire_arrays(p) + targets[0])

    def _targets(self, served: int | None, p: list, size: tuple[int, int]) -> tuple[list, dict | None]:
        """``(mask arrays, moved boxes or None)`` of a draw of sample ``served`` (None: padding, a bad draw) with
        parameters ``p`` on an image of ``size``: the mask (``[H, W, 1]``) and its steps' arrays when the
        index carries masks (:mod:`.targetgraph`), the boxes moved when it carries boxes."""
        t = self.annotations
        if t is None:
            return [], None
        arrays = []
        if "masks" in t.kinds:
            mask = np.zeros(size, np.uint8) if served is None else t.read_mask(self.reader, served, size)
            arrays = [mask[:, :, None]] + mask_wire(self.spec, p, size)
        boxes = None
        if "boxes" in t.kinds and served is not None:
            boxes = moved_boxes(self.spec, p, t, served, size, self.box_policy)
        return arrays, boxes


def read_params(ring: SlotRing, slot: int) -> Params:
    """The parameters a worker left in ``slot``'s note (``with_params``)."""
    return json.loads(ring.read_note(slot))["params"]


def read_bad_draw(ring: SlotRing, slot: int) -> BadDraw:
    """The bad draw a worker left in ``slot``'s note."""
    return BadDraw.from_json(ring.read_note(slot))
