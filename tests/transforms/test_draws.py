"""A draw's uniforms are numpy's ``default_rng([AUG_STREAM, seed, epoch, position]).random(n)`` (the
contract), derived without constructing a generator per draw."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dali_backend import AugmentSpec
from dali_backend.transforms import base
from dali_backend.transforms.base import AUG_STREAM, uniforms


def reference(seed: int, epoch: int, position: int, n: int) -> np.ndarray:
    return np.random.default_rng([AUG_STREAM, seed, epoch, position]).random(n)


EDGES = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (2**32 - 1, 2**32 - 1, 2**32 - 1), (2**31, 7, 2**32 - 1)]
BEYOND = [(2**32, 0, 5), (0, 2**40, 1), (3, 1, 2**32), (2**64 + 3, 2, 9)]  # more than one 32-bit word: numpy's path


@pytest.mark.parametrize("n", [1, 7, 40])
def test_uniforms_are_numpys_on_many_draws(n):
    rng = np.random.default_rng(11)
    draws = EDGES + BEYOND + [(s, e, p) for s in (0, 1, 5) for e in (0, 1, 3) for p in range(150)]
    draws += [tuple(int(v) for v in rng.integers(0, 2**32, 3)) for _ in range(1500)]
    for seed, epoch, position in draws:
        assert np.array_equal(uniforms(seed, epoch, position, n), reference(seed, epoch, position, n)), \
            (seed, epoch, position, n)


def test_no_generator_is_constructed_per_draw(monkeypatch):
    calls = []
    real = np.random.default_rng

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(base.np.random, "default_rng", counting)
    for position in range(50):
        uniforms(0, 1, position, 12)
    assert calls == []


def test_a_negative_number_is_refused_as_numpy_refuses_it():
    with pytest.raises(ValueError):
        uniforms(-1, 0, 0, 3)


def test_spec_parameters_are_the_same_on_many_positions():
    """make_params of the preset and of the ImageNet recipe with the cheap draw against numpy's."""
    from dali_backend.transforms import ColorJitter, RandomHorizontalFlip, RandomResizedCrop

    specs = [AugmentSpec(size=(64, 64)), AugmentSpec(ops=[RandomResizedCrop(32), RandomHorizontalFlip(),
                                                          ColorJitter(0.4, 0.4, 0.4)])]
    for spec in specs:
        budgets = [op.UNIFORMS for op in spec.transforms]  # each operation's block follows the ones before it
        offsets, n = np.cumsum([0] + budgets)[:-1], sum(budgets)
        for position in range(0, 3000, 7):
            got = spec.make_params(3, 2, position, (480, 640))
            u = reference(3, 2, position, n)
            size = (480, 640)
            for op, off, p in zip(spec.transforms, offsets, got, strict=True):
                want = {} if op.is_identity else op.sample(u[off:off + op.UNIFORMS], size)
                assert p.keys() == want.keys() and all(np.array_equal(p[k], want[k]) for k in p), (position, op)
                size = op.output_size(size, p) if not op.is_identity else size


def test_threads_draw_their_own_numbers():
    results: dict[int, list] = {}

    def work(t: int):
        results[t] = [uniforms(t, 0, p, 9) for p in range(300)]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t, got in results.items():
        for p, u in enumerate(got):
            assert np.array_equal(u, reference(t, 0, p, 9))
