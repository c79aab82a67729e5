"""``python -m bench --format png --bit-depth 16``: every contender runs its contract after a Window (without one
the library refuses 16-bit data), the ceiling decodes at 16 bits; 16-bit ``--data`` without ``--bit-depth`` is refused."""

from __future__ import annotations

import numpy as np
import pytest

from tests.bench.test_bench import FIELDS, run_bench

cv2 = pytest.importorskip("cv2")


@pytest.mark.slow
def test_16_bit_png_runs_every_contender(tmp_path):
    """Tiny data (8 16-bit PNGs of 64x48), one process per contender: each one works (dali-gpu without a GPU is
    skipped), and the data line names the format and depth."""
    from bench import CONTENDERS
    from bench.__main__ import unavailable

    data, proc = run_bench(tmp_path, "--format", "png", "--bit-depth", "16", "--no-plot")
    assert data["failed"] == {}
    names = [r["name"] for r in data["results"]]
    runs = [n for n in CONTENDERS if n not in unavailable(list(CONTENDERS))]
    assert names == runs[:1] + ["ceiling-dali"] * ("dali-cpu" in runs) + runs[1:]  # dali-cpu's own ceiling beside
    rows = {r["name"]: r for r in data["results"]}
    if "dali-cpu" in rows:  # each loader against its own executor's ceiling, beside the OpenCV one
        assert rows["dali-cpu"]["ratio_to_own_ceiling"] == rows["dali-cpu"]["images_per_s"] / rows["ceiling-dali"]["images_per_s"]
        assert rows["ceiling-dali"]["ratio_to_own_ceiling"] == 1.0
    assert rows["fallback"]["ratio_to_own_ceiling"] == rows["fallback"]["ratio_to_ceiling"]
    assert "x own ceil" in proc.stdout
    for r in data["results"]:
        assert FIELDS <= r.keys() and r["images_per_s"] > 0
    assert data["machine"]["data"]["formats"] == "formats: png 8 (16-bit 8)"
    assert data["machine"]["data"]["bit_depth"] == 16 and "formats: png 8 (16-bit 8)" in proc.stdout


def test_the_16_bit_contracts_window_first_and_match_the_demo():
    from bench.contenders import preset_spec, recipe_spec
    from dali_backend import AugmentSpec
    from dali_backend.cli.commands import demo_spec
    from dali_backend.transforms import Window

    assert preset_spec((32, 32)) == AugmentSpec(size=(32, 32)) and preset_spec((32, 32), 16) == demo_spec(32, 16)
    assert preset_spec((32, 32), 12) == demo_spec(32, 12)
    assert recipe_spec((32, 32), 16).transforms[0] == Window(0, 65535)
    assert recipe_spec((32, 32), 16).transforms[1:] == recipe_spec((32, 32)).transforms


def test_the_16_bit_ceiling_decodes_at_16_bits_then_windows(tmp_path):
    """Two images differing only in the low 8 bits: the ceiling's 12-bit window tells them apart (a decode cut to
    8 bits would not)."""
    from bench import contenders

    low = np.full((32, 32), 0x0100, np.uint16)
    paths = []
    for k, img in enumerate((low, low + 0x00F0)):
        paths.append(str(tmp_path / f"{k}.png"))
        cv2.imwrite(paths[-1], img)
    assert cv2.imread(paths[0], cv2.IMREAD_GRAYSCALE)[0, 0] == cv2.imread(paths[1], cv2.IMREAD_GRAYSCALE)[0, 0]
    table = contenders.window_for(12).table
    a, b = (contenders._read_gray(p, table) for p in paths)
    assert a.dtype == np.uint8 and a[0, 0] == table[0x0100] and b[0, 0] == table[0x01F0] and a[0, 0] != b[0, 0]
    contenders._ceiling_init(12)
    try:
        assert contenders._CEILING[1] is not None and contenders._ceiling_work(paths[1]) >= 0
    finally:
        contenders._CEILING = None


@pytest.mark.parametrize("bits", [8, 12])
def test_the_dali_ceiling_is_the_same_work_on_dalis_operators(tmp_path, bits):
    """``ceiling-dali`` decodes (at 16 bits then the Window's table, for 12-bit data), equalises and serves every
    image once per epoch: its pixels are the OpenCV ceiling's (DALI's gray decode and CLAHE are exact against
    OpenCV's), and the low 8 bits of 12-bit data tell two images apart as in the OpenCV ceiling."""
    from bench import contenders
    from dali_backend import SampleIndex

    rng = np.random.default_rng(bits)
    (tmp_path / "a").mkdir()
    for k in range(5):
        img = rng.integers(0, 4096, (48, 64), dtype=np.uint16) if bits == 12 else rng.integers(0, 256, (48, 64), dtype=np.uint8)
        cv2.imwrite(str(tmp_path / "a" / f"{k}.png"), img)
    index = SampleIndex.from_folder(tmp_path, progress=False)
    ceiling = contenders.DaliCeiling(index, batch_size=2, workers=1, bit_depth=bits)
    try:
        for epoch in range(2):
            got = list(ceiling)
            corners = np.concatenate([x.numpy().reshape(-1) for x, _ in got])
            assert len(corners) == len(index) == sum(len(y) for _, y in got)  # every image once, from the first
            contenders._ceiling_init(bits)
            want = [int(contenders._CEILING[0](contenders._read_gray(index.abspath(i), contenders._CEILING[1]))[0, 0])
                    for i in range(len(index))]
            assert corners.tolist() == want, epoch
    finally:
        ceiling.close()
        contenders._CEILING = None


def test_16_bit_data_without_bit_depth_is_refused(tmp_path, capsys):
    from bench.__main__ import main
    from dali_backend.core.synthetic import generate_defect_dataset

    root = generate_defect_dataset(tmp_path / "d", n=4, size=(32, 24), format="png", bit_depth=16, progress=False)
    rc = main(["--data", str(root), "--no-plot", "--json", str(tmp_path / "b.json")])
    assert rc != 0
    err = capsys.readouterr().err
    assert "4 of 4 images hold more than 8 bits per value; pass --bit-depth 16" in err
