"""``python -m bench --peers``: every peer that runs does the contract's work, a missing one is skipped.

The bound: the fallback's resize is the contract's exact triangle filter, the peers written with
OpenCV or albumentations resize with ``INTER_AREA``. That filter alone moves the pixels by
``area_resize_levels`` (measured on the same draws: the contract's own operations with ``INTER_AREA``
in place of its resize; ~2 levels at 640x480 -> 256, ~5 at 64x48 -> 16 on the synthetic textures),
so such a peer is held to that plus half a level (its other operations are the contract's to
within rounding); the DALI peer (the contract's filter) to one level, the contract's DALI tolerance.
Leaving out one operation (no rotation, no jitter) moves the mean by more than a level.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import PEERS

ROOT = Path(__file__).resolve().parents[2]
SLACK = 0.5  # levels beyond what the resize filter alone moves (rounding of the rotation and the jitter table)


def bench(tmp_path, *args: str, env: dict | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    """``python -m bench`` on 8 synthetic 64x48 images to 16x16, one epoch; its JSON document."""
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "--images", "8", "--source-size", "64x48", "--size", "16x16",
                           "--epochs", "1", "--batch-size", "4", "--workers", "1", "--cache", str(tmp_path / "cache"),
                           "--json", str(out), "--no-plot", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc


def check_same_work(r: dict) -> None:
    """``r`` (a contender's result) did the contract's work on its first batch (module docstring's bound)."""
    assert r["labels_match"], r["name"]
    bound = r["area_resize_levels"] + SLACK if "area_resize_levels" in r else 1.0
    assert 0 <= r["levels_difference"] <= bound, (r["name"], r["levels_difference"], bound)


@pytest.mark.slow
def test_every_peer_that_runs_does_the_contracts_work(tmp_path):
    """The fallback and every peer (one process each, ~45 s on a loaded machine): the first batch's pixels
    against the fallback's on the same draws, printed and in the JSON; a peer not installed is skipped."""
    data, proc = bench(tmp_path, "--only", "fallback", "--peers")
    ran = [r["name"] for r in data["results"]]
    skipped = data["machine"]["skipped"]
    assert ran == ["ceiling", "fallback", *[p for p in PEERS if p not in skipped]]
    assert set(skipped) <= set(PEERS)
    by_name = {r["name"]: r for r in data["results"]}
    assert by_name["fallback"]["levels_difference"] < 1e-3  # itself, through the normalisation and back (float32)
    for name in ran[1:]:
        check_same_work(by_name[name])
        assert by_name[name]["first_batch_s"] > 0 and by_name[name]["peak_rss_mb"] > 0
    line = next(x for x in proc.stdout.splitlines() if "against the fallback's pixels" in x)
    assert all(f"{name} {by_name[name]['levels_difference']:.2f}" in line for name in ran[1:]), line


@pytest.mark.slow
def test_a_peer_whose_package_is_missing_is_skipped_with_a_line(tmp_path):
    """albumentations hidden (a package of that name that fails to import, first on the path): its row
    is a line saying why and how to install it; the other peer named runs."""
    hidden = tmp_path / "hide" / "albumentations"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    import os

    env = dict(os.environ, PYTHONPATH=f"{hidden.parent}{os.pathsep}{ROOT}")
    data, proc = bench(tmp_path, "--only", "opencv-loader", "albumentations", env=env)
    assert [r["name"] for r in data["results"]] == ["ceiling", "opencv-loader"]
    assert "hidden by the test" in data["machine"]["skipped"]["albumentations"]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("albumentations"))
    assert "skipped" in line and "dali-backend[peers]" in line


def test_missing_names_the_module_and_the_install(monkeypatch):
    from bench.peers import missing

    assert missing("opencv-loader") is None
    monkeypatch.setitem(sys.modules, "torchdata.nodes", None)  # import of it raises ImportError
    why = missing("torchdata-nodes")
    assert why is not None and "torchdata.nodes" in why and "pip install 'dali-backend[peers]'" in why


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    from dali_backend import SampleIndex
    from dali_backend.core.synthetic import generate_defect_dataset

    root = generate_defect_dataset(tmp_path_factory.mktemp("peers") / "data", n=6, size=(96, 72), seed=0, progress=False)
    return SampleIndex.from_folder(root, progress=False)


@pytest.mark.parametrize("name", ["opencv-loader", "spdl-threads", "torchdata-nodes"])
def test_a_peer_in_process_does_the_contracts_work(tiny_index, name):
    """One peer's loader in this process, two epochs (the second's draws differ): every batch's pixels
    against the fallback's on the same draws, within the bound."""
    from bench.contenders import contract_sampler, levels_difference
    from bench.peers import AREA_RESIZE, area_resize_difference, missing, peer_loader
    from dali_backend import AugmentSpec

    if (why := missing(name)) is not None:
        pytest.skip(why)
    size = (24, 24)
    loader = peer_loader(name, tiny_index, AugmentSpec(size=size), contract_sampler(tiny_index), batch_size=4, workers=0
                         if name == "opencv-loader" else 2)
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        draws = contract_sampler(tiny_index).draws(epoch)
        batches = list(loader)
        assert [len(y) for _, y in batches] == [4, 2]
        for k, (x, y) in enumerate(batches):
            mine = draws[4 * k:4 * k + len(y)]
            assert y.tolist() == [int(tiny_index.labels[d.index]) for d in mine]
            area = area_resize_difference(tiny_index, AugmentSpec(size=size), mine) if name in AREA_RESIZE else 0.5
            assert levels_difference(x, tiny_index, size, mine) <= area + SLACK
    loader.close()
