"""DaliLoader under Hugging Face Accelerate: prepare leaves it as it is, and register_for_checkpointing
with save_state / load_state resumes it mid-epoch (docs/guides/accelerate.md)."""

from __future__ import annotations

import pytest
import torch

from dali_backend import AugmentSpec, DaliLoader, WeightedSampler
from fallback import ImageDataset

accelerate = pytest.importorskip("accelerate")


def make_loader(index, backend):
    return DaliLoader(ImageDataset(index, AugmentSpec(size=16)), batch_size=4, device="cpu", backend=backend,
                      sampler=WeightedSampler(index, num_samples=20, seed=1), return_meta=True)


@pytest.mark.parametrize("backend", ["dali", "torch"])
def test_prepare_keeps_the_loader_and_save_state_resumes_it(defect_index, backend, tmp_path):
    whole = make_loader(defect_index, backend)
    want = [meta["index"].tolist() for _, _, meta in whole]
    whole.close()
    acc = accelerate.Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    loader = make_loader(defect_index, backend)
    model, prepared = acc.prepare(model, loader)
    assert prepared is loader  # not wrapped: the sampler already shards, the backend places batches
    acc.register_for_checkpointing(loader)
    it = iter(loader)
    got = [next(it)[2]["index"].tolist() for _ in range(2)]
    acc.save_state(str(tmp_path / "state"))
    loader.close()

    fresh = make_loader(defect_index, backend)
    acc2 = accelerate.Accelerator(cpu=True)
    acc2.register_for_checkpointing(fresh)
    acc2.load_state(str(tmp_path / "state"))
    got += [meta["index"].tolist() for _, _, meta in fresh]
    fresh.close()
    assert got == want


def test_skip_first_batches_raises_at_the_call_naming_load_state(defect_index):
    """accelerator.skip_first_batches rebuilds a torch DataLoader from the dataset (it failed at the first
    next() inside Accelerate with "'NoneType' object is not iterable"): refused at the call instead."""
    from dali_backend import ConfigError

    loader = make_loader(defect_index, "torch")
    acc = accelerate.Accelerator(cpu=True)
    with pytest.raises(ConfigError, match=r"skip_first_batches.*register_for_checkpointing.*load_state"):
        acc.skip_first_batches(loader, 2)
    with pytest.raises(ConfigError, match="load_state"):
        accelerate.skip_first_batches(loader, 2)
    assert loader.batch_sampler is None  # what every other reader (Lightning, ...) sees
    assert len(list(loader)) == 5  # the loader is unharmed
    loader.close()


@pytest.fixture(autouse=True)
def fresh_gradient_state():
    """Accelerate's GradientState is one per process: a loader another test left in it (an iterator kept
    open) must not be what these tests read, and later tests' loaders join no gradient state."""
    from accelerate.state import GradientState

    GradientState._reset_state()
    yield
    GradientState._reset_state()


@pytest.fixture
def accelerator():
    return accelerate.Accelerator(cpu=True)


def test_a_pass_tells_accelerate_its_end_and_remainder(defect_index, accelerator):
    """The protocol gather_for_metrics reads, in one process: rank 0 of 2 (13 draws, batches of 4: the
    last gathered batch holds 5 real rows of 6); the loader leaves the state when the pass ends."""
    from accelerate.state import GradientState

    sampler = WeightedSampler(defect_index, num_samples=13, rank=0, world_size=2, mode="sequential")
    loader = DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16, color="rgb")), batch_size=4, device="cpu",
                        backend="torch", sampler=sampler)
    seen = []
    for _ in loader:
        state = GradientState()
        seen.append((state.active_dataloader is loader, state.end_of_dataloader, state.remainder))
    assert seen == [(True, False, 5), (True, True, 5)]  # 7 draws on this rank: batches of 4 and 3
    assert GradientState().active_dataloader is None and not loader.end_of_dataloader
    loader.close()


def test_a_kept_iterator_of_an_older_pass_neither_stays_in_the_state_nor_takes_the_newer_pass_out(
        defect_index, accelerator):
    """A pass left suspended (its iterator kept after a break) is over when the next pass begins: the loader is
    in the state once, and the old iterator, closed during the new pass, leaves the new pass's place alone; an
    evaluation pass run inside a training pass leaves the training loader active; close() leaves the state."""
    from accelerate.state import GradientState

    def make(n):
        return DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16, color="rgb")), batch_size=4,
                          device="cpu", backend="torch", sampler=WeightedSampler(defect_index, num_samples=n, seed=0))

    train, evaluation = make(12), make(8)
    old = iter(train)
    next(old)  # a break that kept its iterator
    new = iter(train)
    next(new)
    assert GradientState().dataloader_references == [None, train]
    old.close()  # the stale pass ends now (or when collected)
    assert GradientState().active_dataloader is train
    for _ in evaluation:  # nested: the evaluation loader is active inside, the training one again after
        assert GradientState().active_dataloader is evaluation
    assert GradientState().active_dataloader is train
    assert [state for state in (GradientState().end_of_dataloader for _ in new)] == [False, True]
    assert GradientState().active_dataloader is None
    stale = iter(train)
    next(stale)
    unstarted = iter(train)  # a newer pass, not begun: the stale pass is still the one that joined
    stale.close()
    assert GradientState().dataloader_references == [None] and not train.end_of_dataloader
    del unstarted
    held = iter(train)
    next(held)
    train.close()
    assert GradientState().dataloader_references == [None]
    evaluation.close()


def test_a_loader_collected_with_its_open_pass_leaves_no_dead_place_on_top(defect_index, accelerator):
    """An evaluation loader and its suspended iterator, collected together (a cycle), clear Accelerate's weak
    reference before the pass's cleanup runs: the dead place is dropped, and the training pass is active
    again and sees its end."""
    import gc

    from accelerate.state import GradientState

    def make(n):
        return DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16, color="rgb")), batch_size=4,
                          device="cpu", backend="torch", sampler=WeightedSampler(defect_index, num_samples=n, seed=0))

    train, ends = make(12), []
    for i, _ in enumerate(train):
        if i == 0:
            evaluation = make(8)
            it = iter(evaluation)
            next(it)
            evaluation.cycle = it  # the loader and its open iterator: cyclic garbage
            del evaluation, it
            gc.collect()
        ends.append((GradientState().active_dataloader is train, GradientState().end_of_dataloader))
    assert ends == [(True, False), (True, False), (True, True)]
    assert GradientState().dataloader_references == [None]
    train.close()


def test_padding_inside_the_gathered_batch_warns_once_and_trims_nothing(defect_index, accelerator, monkeypatch):
    """13 draws over 4 processes in batches of 2: 3 padding draws inside the last gathered batch."""
    from dali_backend.facade import accelerate_state

    monkeypatch.setattr(accelerate_state, "processes", lambda: 4)  # Accelerate gathering over 4 processes
    sampler = WeightedSampler(defect_index, num_samples=13, rank=0, world_size=4, mode="sequential")
    loader = DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16, color="rgb")), batch_size=2, device="cpu",
                        backend="torch", sampler=sampler)
    with pytest.warns(UserWarning, match=r"meta\['padding'\]"):
        list(loader)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        remainders = [loader.remainder for _ in loader]
    assert set(remainders) == {-1}
    loader.close()


def test_no_padding_warning_where_accelerate_runs_another_number_of_processes(defect_index, accelerator):
    """An Accelerator of one process (left in the process, as in a notebook) gathers nothing of a loader whose
    sampler is rank 0 of 4: no warning (it was said for every such loader in the docs' examples)."""
    from dali_backend.facade import accelerate_state

    assert accelerate_state.processes() == 1
    sampler = WeightedSampler(defect_index, num_samples=13, rank=0, world_size=4, mode="sequential")
    loader = DaliLoader(ImageDataset(defect_index, AugmentSpec(size=16, color="rgb")), batch_size=2, device="cpu",
                        backend="torch", sampler=sampler)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(loader)
    loader.close()
