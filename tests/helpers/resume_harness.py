"""Elastic resumption, simulated in one process (one loader per rank): what the tests of every sampler
that deals one global draw out over its ranks share (``WeightedSampler``, ``ClipSampler``)."""

from __future__ import annotations

import json


def save_one_rank(before: list, epoch: int, run, cut: int, saver: int) -> tuple[list, dict]:
    """Every old rank runs ``cut`` batches of ``epoch`` (together, as data-parallel training does); returns
    what they drew and rank ``saver``'s state, through JSON. The old loaders are closed."""
    drawn = []
    for loader in before:
        loader.set_epoch(epoch)
        drawn += run(loader, cut)
    state = json.loads(json.dumps(before[saver].state_dict()))
    for loader in before:
        loader.close()
    return drawn, state


def resume_on(after: list, state: dict, epoch: int, run) -> tuple[list, list[dict]]:
    """Every new rank loads the one state and runs the rest of ``epoch``; returns what they drew and their
    ``stats()``, each rank's accounting checked closed."""
    resumed = []
    for loader in after:
        loader.load_state_dict(state)
        loader.set_epoch(epoch)  # a training loop calls this again: the resumption stays pending
        resumed += run(loader)
    stats = [loader.stats() for loader in after]
    assert all(st["accounted"] == st["draws"] for st in stats), stats
    return resumed, stats
