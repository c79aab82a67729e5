"""DALI's GPU outputs leave the executor only as torch-owned copies, and DALI's buffers live until
the copies have run (``dali_backend.dali.handoff``). The bookkeeping and the order of wait, copy, record
and release are tested on the CPU with fake streams, events and ``meta`` tensors; the CUDA cases delay
the consumer's or the producer's stream (``torch.cuda._sleep``, no host sync in between), where removing
the hold or the event wait changes the pixels, and delay the consumer under a real ``dali-gpu`` pass."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import needs_cuda
from dali_backend.dali.handoff import DeviceHandoff


class FakeEvent:
    """A completion marker that completes when the test says so."""

    made: list = []

    def __init__(self):
        self.done = False
        self.recorded_on = None
        self.synchronized = False
        FakeEvent.made.append(self)

    def record(self, stream):
        self.recorded_on = stream

    def query(self):
        return self.done

    def synchronize(self):
        self.synchronized = True
        self.done = True


@pytest.fixture()
def handoff():
    FakeEvent.made = []
    return DeviceHandoff(event_factory=FakeEvent)


def test_device_outputs_are_copied_and_the_producer_is_held_until_the_copy_ran(handoff):
    dali = {"images": torch.empty(2, 3, 4, 4, dtype=torch.uint8, device="meta"), "labels": torch.arange(2)}
    stream = object()
    got = handoff.take(dali, stream=stream)
    assert got["images"] is not dali["images"] and got["images"].device.type == "meta"
    assert got["labels"] is dali["labels"]  # host tensors are read synchronously: no copy
    assert len(handoff) == 1 and FakeEvent.made[0].recorded_on is stream
    assert handoff.release_finished() == 0 and len(handoff) == 1  # copy not run yet: DALI's buffer stays
    FakeEvent.made[0].done = True
    assert handoff.release_finished() == 1 and len(handoff) == 0


def test_outputs_are_released_oldest_first_and_only_when_complete(handoff):
    for _ in range(3):
        handoff.take({"images": torch.empty(1, device="meta")}, stream=object())
    first, second, third = FakeEvent.made
    second.done = True
    assert handoff.release_finished() == 0  # the oldest copy has not run: nothing after it is released either
    first.done = True
    assert handoff.release_finished() == 2 and len(handoff) == 1
    third.done = True
    handoff.take({"images": torch.empty(1, device="meta")}, stream=object())  # each take releases what finished
    assert len(handoff) == 1


def test_what_is_held_is_the_producers_memory_and_it_is_freed_after_the_copy(handoff):
    """The bookkeeping holds DALI's own output objects (not the copies handed out): they stay alive while
    the copy may still read them, and nothing keeps them once it has run."""
    import gc
    import weakref

    dali = {"images": torch.empty(2, 3, 4, 4, dtype=torch.uint8, device="meta")}
    producer = weakref.ref(dali["images"])
    got = handoff.take(dali, stream=object())
    del dali
    gc.collect()
    assert producer() is not None, "DALI's buffer was let go before the copy ran"
    assert got["images"] is not producer()
    copy = weakref.ref(got["images"])
    del got
    gc.collect()
    assert copy() is None, "the handoff keeps the copy it handed out"
    FakeEvent.made[0].done = True
    assert handoff.release_finished() == 1
    gc.collect()
    assert producer() is None, "DALI's buffer is still held after its copy ran"


def test_drain_waits_for_every_copy(handoff):
    for _ in range(2):
        handoff.take({"images": torch.empty(1, device="meta")}, stream=object())
    handoff.drain()
    assert len(handoff) == 0 and all(e.synchronized for e in FakeEvent.made)


def test_host_only_outputs_hold_nothing(handoff):
    cpu = {"images": torch.zeros(2, 3, 4, 4, dtype=torch.uint8), "labels": torch.arange(2)}
    got = handoff.take(cpu)
    assert got["images"] is cpu["images"] and len(handoff) == 0 and not FakeEvent.made


def bare_runner(done):
    """A DALI runner without a pipeline: its caller returns a batch and ``done`` (an event on the GPU,
    None on the CPU); what the runner does with them is observed through a recording hand-off."""
    import os

    from dali_backend.dali.runner import DaliRunner

    calls = []

    class Caller:
        def submit(self, fn):
            return 1

        def wait(self, rid, poll, deadline=None):
            return {"images": "dali's buffer"}, done

        def stop(self, timeout=5.0):
            return True

    class Handoff:
        def receive(self, out, ready, keep):
            calls.append(("receive", ready, keep))
            return {"images": "torch's copy"} if keep else out

        def drain(self):
            calls.append(("drain", runner.pipe is not None))

    runner = object.__new__(DaliRunner)
    runner.__dict__.update(_caller=Caller(), _handoff=Handoff() if done is not None else None, timeout=0.0,
                           closed=False, broken=None, worker_pids=[], _pid=os.getpid(), _clean_interrupt=False,
                           pipe=object(), iterator=None, ring=None, _held_runs=[], _first_alone=False)
    return runner, calls


def test_the_gpu_runner_hands_kept_batches_through_the_handoff_and_drains_before_releasing_dali():
    runner, calls = bare_runner(done="event")
    assert runner._call(keep=True) == {"images": "torch's copy"}
    assert runner._call(keep=False) == {"images": "dali's buffer"}  # a stale batch: waited for, not copied
    runner.close()
    assert calls == [("receive", "event", True), ("receive", "event", False), ("drain", True)]
    assert runner.pipe is None


def test_the_cpu_runner_has_no_handoff():
    runner, calls = bare_runner(done=None)
    assert runner._call() == {"images": "dali's buffer"}
    runner.close()
    assert calls == []


class Stream:
    """A consumer stream that logs what is queued on it."""

    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def wait_event(self, event):
        self.log.append(("wait", self.name, event.name))


def protocol_run(monkeypatch, batches: int = 3) -> list:
    """The hand-off's protocol with fake streams and events, every step logged in order: the consumer's
    ``wait`` on DALI's ready event, the ``copy``, the ``record`` of its completion event, the moment that
    event is ``done``, and the ``release`` of DALI's buffer (when its last reference goes)."""
    import gc
    import weakref

    log, made = [], []

    class Event:
        def __init__(self, name=None):
            self.name, self.done = name or f"copied{len(made)}", False
            made.append(self)

        def record(self, stream):
            log.append(("record", stream.name, self.name))

        def query(self):
            return self.done

        def synchronize(self):
            self.done = True

    copy_ = torch.Tensor.copy_

    def logged_copy(dst, src, non_blocking=False):
        log.append(("copy", getattr(src, "_batch", None)))
        return copy_(dst, src, non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", logged_copy)
    consumer = Stream(log, "consumer")
    handoff = DeviceHandoff(event_factory=Event, stream_of=lambda device: consumer)
    for k in range(batches):
        images = torch.empty(2, 3, 4, 4, dtype=torch.uint8, device="meta")  # DALI's buffer of batch k
        images._batch = k
        weakref.finalize(images, log.append, ("release", k))
        got = handoff.receive({"images": images}, Event(f"ready{k}"))
        assert got["images"] is not images and got["images"].device.type == "meta"
        del images, got
        gc.collect()
        log.append(("done", made[-1].name))  # the copy of batch k ran on the GPU
        made[-1].done = True
    handoff.drain()
    gc.collect()
    return log


def test_the_protocol_waits_copies_records_and_releases_in_order(monkeypatch):
    """The same protocol as the CUDA test below, on the CPU: for every batch the consumer's stream waits
    for DALI's ready event before the copy is queued, the copy's completion event is recorded after the
    copy, and DALI's buffer is released only after that event completed. Removing the wait or the hold
    from :mod:`dali_backend.dali.handoff` fails it."""
    log = protocol_run(monkeypatch)
    for k in range(3):
        wait, copy = log.index(("wait", "consumer", f"ready{k}")), log.index(("copy", k))
        record = next(i for i, e in enumerate(log) if e[0] == "record" and i > copy)
        done = log.index(("done", log[record][2]))
        release = log.index(("release", k))
        assert wait < copy < record < done < release, log


def test_the_protocol_check_fails_without_the_wait_or_the_hold(monkeypatch):
    """The check above can fail: a hand-off that neither waits nor holds is caught."""
    monkeypatch.setattr(Stream, "wait_event", lambda self, event: None)
    monkeypatch.setattr(DeviceHandoff, "take", lambda self, outputs, stream=None:
                        {k: torch.empty_like(t).copy_(t) for k, t in outputs.items()})
    with pytest.raises((AssertionError, ValueError)):
        test_the_protocol_waits_copies_records_and_releases_in_order(monkeypatch)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("delayed", ["consumer", "producer"])
def test_the_handoff_on_two_streams_under_a_delay(delayed):
    """The protocol on real streams, with no host sync between the steps. ``consumer``: the consumer's
    stream is busy (a queued training step) when the batch arrives, DALI frees its buffer at once and
    reuses it: without the hold the copy reads the next batch. ``producer``: DALI's stream has not
    finished the batch when it is handed over: without the event wait the copy reads it unfinished."""
    n, cycles = 1 << 22, 100_000_000  # 4 MiB; ~50 ms of GPU time
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    handoff = DeviceHandoff()
    with torch.cuda.stream(producer):
        batch = torch.zeros(n, dtype=torch.uint8, device="cuda")
        if delayed == "producer":
            torch.cuda._sleep(cycles)  # DALI still working on the batch
        batch.fill_(1)
        ready = torch.cuda.Event()
        ready.record(producer)
    with torch.cuda.stream(consumer):
        if delayed == "consumer":
            torch.cuda._sleep(cycles)  # the training step still running on the consumer's stream
        got = handoff.receive({"images": batch}, ready)["images"]
    del batch  # DALI lets its buffer go (held by the hand-off until the copy ran)
    with torch.cuda.stream(producer):
        later = torch.full((n,), 2, dtype=torch.uint8, device="cuda")  # DALI's next batch, maybe in the same block
    torch.cuda.synchronize()
    assert int(got.min()) == int(got.max()) == 1, f"the copy read {int(got.min())}..{int(got.max())}, not the batch"
    del later
    handoff.drain()


@pytest.mark.cuda
@needs_cuda
def test_a_delayed_consumer_stream_never_sees_a_later_batch(defect_index):
    """The race the hand-off removes: the consumer's stream runs far behind while DALI keeps producing
    (and reusing its buffers). Every batch must equal the same draws served without any delay."""
    from dali_backend import AugmentSpec, DaliLoader, WeightedSampler
    from fallback import ImageDataset

    ds = ImageDataset(defect_index, AugmentSpec(size=64, dtype="uint8"), seed=0)
    sampler = WeightedSampler(defect_index, num_samples=96, seed=5)

    def batches(delay: bool):
        out = []
        with DaliLoader(ds, batch_size=8, sampler=sampler, device="cuda", backend="dali",
                        prefetch_queue_depth=4) as loader:
            loader.set_epoch(0)
            for images, _ in loader:
                if delay:
                    torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time on the consumer stream before any read
                    kept = images + 0  # a consumer kernel queued behind the sleep
                else:
                    kept = images.clone()
                out.append(kept)
            torch.cuda.synchronize()
        return [b.cpu() for b in out]

    calm, delayed = batches(False), batches(True)
    assert len(calm) == len(delayed) == 12
    for k, (a, b) in enumerate(zip(calm, delayed, strict=True)):
        assert torch.equal(a, b), f"batch {k} changed under a delayed consumer stream"
