"""What Hugging Face Accelerate asks of a loader for ``gather_for_metrics``: where a pass ends, and how
many rows of the last gathered batch are real.

Accelerate keeps the loader being iterated in its ``GradientState``; its own ``DataLoaderShard`` joins it
when a pass begins, sets ``end_of_dataloader`` while the last batch is out, and says in ``remainder`` how
many rows of the last batch gathered from all processes are real (the rest repeat the data set's start,
padding that makes every process's share equal). ``gather_for_metrics`` keeps the first ``remainder`` rows
of that batch. ``prepare`` leaves a :class:`~dali_backend.loader.DaliLoader` unwrapped, so the loader
joins the state itself (:func:`begin`, :func:`end`), duck-typed: nothing here imports Accelerate, and
nothing happens unless an ``Accelerator`` exists in this process.

The padding of a :class:`~dali_backend.sampler.WeightedSampler` is its last ``p < world_size``
positions, the last draw of the last ``p`` ranks, so in the gathered last batch (the ranks' last batches
in rank order) it is a tail, which a prefix cut drops, when ``p <= 1`` (always with 2 processes) or the
last batches hold one draw each. Otherwise (``p >= 2`` padding draws in batches of several) no prefix is
the real rows: ``remainder`` is then -1 (Accelerate keeps every row) and :func:`gathered_real` says so,
and ``meta["padding"]`` (``return_meta=True``) marks the rows to drop.
"""

from __future__ import annotations

import sys
import warnings
import weakref

import numpy as np


UNKNOWN = -1  # Accelerate's remainder for "no length": gather_for_metrics then keeps every row
_PADDING_WARNED: weakref.WeakSet = weakref.WeakSet()  # loaders that said the padding gather_for_metrics cannot cut


def gradient_state():
    """Accelerate's ``GradientState`` when an ``Accelerator`` was made in this process, else None (never
    imports Accelerate)."""
    state = sys.modules.get("accelerate.state")
    cls = getattr(state, "GradientState", None)
    if cls is None or not getattr(cls, "_shared_state", None):
        return None
    return cls()


def processes() -> int:
    """How many processes Accelerate runs (its ``PartialState``), 1 when it is not set up (never imports it)."""
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "PartialState", None), "_shared_state", None) or {}
    return int(shared.get("num_processes", 1) or 1)


def gathered_real(sampler, epoch: int, offset: int, batch_size: int, drop_last: bool) -> int | None:
    """Real rows of the last batch gathered from every rank (their last batches in rank order), when the
    padding is its tail: 0 when there is no padding (nothing to cut); None when a prefix cut cannot drop
    it (padding inside the batch).

    Args:
        sampler: the loader's :class:`~dali_backend.sampling.sampler.WeightedSampler` (rank and world size
            from it; another sampler's padding is unknown: the loader's plan says which it is).
        epoch: the pass's epoch; offset: its first global position (elastic resumption; 0 otherwise).
        batch_size: draws per batch; drop_last: the loader's (a partial last batch is dropped).
    """
    total = sampler.num_samples_at(epoch)
    last = []
    for rank in range(sampler.world_size):
        _, positions = sampler.partition_draw(epoch, offset, rank, sampler.world_size)
        if drop_last:
            positions = positions[:len(positions) // batch_size * batch_size]
        if len(positions):
            last.append(positions[(len(positions) - 1) // batch_size * batch_size:])
    if not last:
        return 0
    padding = np.concatenate(last) >= total
    if not padding.any():
        return 0
    real = int((~padding).sum())
    return real if not padding[:real].any() else None


def begin(loader, epoch: int, offset: int, weighted: bool) -> object | None:
    """Join Accelerate's gradient state for the pass of ``epoch`` from global position ``offset``, with the
    real rows of its last gathered batch as ``remainder`` (:func:`gathered_real`; ``weighted``: the loader's
    sampler is a ``WeightedSampler``, the only one whose padding is known); returns the state to
    :func:`end`, or None without an ``Accelerator``."""
    state = gradient_state()
    if state is None:
        return None
    real = gathered_real(loader.sampler, epoch, offset, loader.batch_size, loader.drop_last) if weighted else None
    loader.end_of_dataloader, loader.remainder = False, UNKNOWN if real is None else real
    # said only where Accelerate gathers over the sampler's ranks (an Accelerator left in a process that
    # now runs a loader of another world size is not gathering this loader's batches)
    if real is None and weighted and \
            loader.sampler.world_size == processes() > 1 and loader not in _PADDING_WARNED:
        _PADDING_WARNED.add(loader)  # once per loader: a training loop never gathers for metrics
        warnings.warn(
            f"DaliLoader: {loader.sampler!r} pads its last batches in the middle of the batch Accelerate gathers "
            f"({loader.sampler.num_padded} padding draws over {loader.sampler.world_size} processes, batches of "
            f"{loader.batch_size}), so gather_for_metrics cannot cut them off and counts those samples twice: "
            "drop the rows where meta['padding'] is True (return_meta=True) before gathering, or choose num_samples "
            "or a batch size that leaves at most one padding draw or one draw per last batch", stacklevel=4)
    leave(loader, state)  # an older pass of this loader, left suspended (an iterator kept after a break), is over
    state._add_dataloader(loader)
    return state


def refuse_skip_first_batches(caller) -> None:
    """:class:`ConfigError` when ``caller`` (a frame reading ``loader.batch_sampler``) is Accelerate's
    ``skip_first_batches``: it rebuilds a torch ``DataLoader`` from the dataset and the batch sampler,
    losing the sampler's draws, the backend and each draw's parameters, and that loader failed at its
    first ``next()`` deep inside Accelerate (``'NoneType' object is not iterable``). Said at the call."""
    if caller is not None and caller.f_code.co_name == "skip_first_batches" and \
            str(caller.f_globals.get("__name__", "")).startswith("accelerate"):
        from ..errors import ConfigError

        raise ConfigError(
            "accelerator.skip_first_batches(loader, n) does not work with a DaliLoader: it rebuilds a torch DataLoader "
            "from the dataset (the sampler's draws, the backend and each draw's augmentation parameters would be "
            "lost). Resume with the loader's own position instead: accelerator.register_for_checkpointing(loader) "
            "before accelerator.save_state(dir), then accelerator.load_state(dir) in the new run (or "
            "loader.load_state_dict(state)); the next pass starts exactly where the saved one stopped")


def end(loader, state, current: bool) -> None:
    """Leave the gradient state :func:`begin` joined, when the pass ending is the one that joined it last
    (``current``): a stale pass (a newer one joined; its iterator closed or collected later) leaves the
    newer pass's place alone."""
    if current:
        if state is not None:  # joined (no Accelerator then: nothing to leave)
            leave(loader, state)
        loader.end_of_dataloader = False


def leave(loader, state=None) -> None:
    """Take ``loader`` out of Accelerate's gradient state (``state``, else the process's if there is one),
    every place it holds there; the loaders iterated around it (an evaluation pass inside a training pass)
    keep theirs."""
    state = gradient_state() if state is None else state
    if state is None:
        return
    references = getattr(state, "dataloader_references", None) or []
    if loader in references:
        state._remove_dataloader(loader)
    if None in references[1:]:  # loaders collected while a pass of theirs was open (Accelerate's first is None)
        references = state.dataloader_references
        state.dataloader_references = references[:1] + [r for r in references[1:] if r is not None]
