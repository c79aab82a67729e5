"""Each validation sample counted once across processes (issue 36, row 1): Accelerate's own
``gather_for_metrics`` over a DaliLoader cuts the padding of the last gathered batch (the loader tells
Accelerate the remainder), and under Lightning ``meta["padding"]`` marks the rows to drop. Both run
under ``torchrun --nproc_per_node 2`` (CPU, gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dali_backend import SampleIndex, WeightedSampler
from dali_backend.facade.accelerate_state import gathered_real

ROOT = Path(__file__).resolve().parents[2]


def torchrun(what: str, root, out) -> dict:
    port = 29500 + os.getpid() % 2000
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(port), str(ROOT / "tests" / "helpers" / "gather_helper.py"), what, str(root), str(out)],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((Path(out) / f"{what}.json").read_text())


@pytest.mark.slow
def test_accelerate_gather_for_metrics_counts_each_sample_once(defect_root, tmp_path):
    pytest.importorskip("accelerate")
    got = torchrun("accelerate", defect_root, tmp_path)
    remainders = {"13 4": 5, "12 4": 0, "13 2": 1, "9 5": 9}  # real rows of the last gathered batch (0: no padding)
    assert len(got) == 8
    for key, run in got.items():
        backend, n, b = key.split()
        assert sorted(run["samples"]) == list(range(int(n))), key  # 13 images: 13 gathered, sample 0 once
        assert Counter(run["labels"]) == Counter(run["want"]), key
        assert run["remainder"] == remainders[f"{n} {b}"], key


@pytest.mark.slow
def test_lightning_validation_drops_the_padding_rows_meta_marks(defect_root, tmp_path):
    pytest.importorskip("lightning")
    got = torchrun("lightning", defect_root, tmp_path)
    assert set(got) == {"torch", "dali"}
    for backend, run in got.items():
        assert run["world"] == 2, backend
        assert sorted(run["all"]) == [0] + list(range(13)), backend  # gathered as is: the padding repeats sample 0
        assert sorted(run["kept"]) == list(range(13)), backend
        assert Counter(run["labels"]) == Counter(run["want"]), backend


def sampler(index, n, rank=0, world=2, **kw):
    return WeightedSampler(index, num_samples=n, rank=rank, world_size=world, mode="sequential", **kw)


@pytest.mark.parametrize("n, world, batch, want", [
    (13, 2, 4, 5), (12, 2, 4, 0), (13, 2, 2, 1), (13, 2, 7, 13), (1, 2, 3, 1),
    (13, 4, 1, 1),  # 3 padding draws, one draw per last batch: a tail
    (15, 4, 4, 15), (15, 4, 3, 3),  # one padding draw
    (13, 4, 2, None),  # 3 padding draws inside the gathered batch: no prefix cut drops them
    (13, 1, 4, 0)])
def test_gathered_real_is_the_prefix_of_real_rows_or_none(defect_index, n, world, batch, want):
    got = gathered_real(sampler(defect_index, n, world=world), 0, 0, batch, drop_last=False)
    assert got == want
    # against the layout itself: the ranks' last batches concatenated in rank order
    last = []
    for r in range(world):
        _, pos = sampler(defect_index, n, r, world).rank_draw(0)
        last += pos[(len(pos) - 1) // batch * batch:].tolist()
    real = [p < n for p in last]
    if want is None:
        assert real != sorted(real, reverse=True)
    elif want:
        assert real == [True] * want + [False] * (len(real) - want)
    else:
        assert all(real)


def test_drop_last_and_a_resumption_offset_cut_before_the_last_batch(defect_index):
    assert gathered_real(sampler(defect_index, 13), 0, 0, 4, drop_last=True) == 0  # per rank 7 -> 4: no padding left
    assert gathered_real(sampler(defect_index, 13), 0, 8, 4, drop_last=False) == 5  # from position 8: 3 + 3, one pad


def test_no_accelerator_no_gradient_state():
    """Without an Accelerator in the process the loader joins nothing (and imports nothing)."""
    code = ("import sys; from dali_backend.facade.accelerate_state import gradient_state; "
            "assert gradient_state() is None and 'accelerate' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
