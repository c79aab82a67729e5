"""The command line: help, demo, index, split, preview, bench wiring; one-line errors; -q/-v."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import jpeg_bytes, write
from tests.helpers import run_cli
from dali_backend import SampleIndex
from dali_backend.cli import main
from dali_backend.cli.pictures import letterbox_tile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_root(tmp_path) -> Path:
    """Ten tiny JPEGs in two class folders."""
    for i in range(10):
        write(tmp_path / "d" / ("ok" if i % 2 else "dent") / f"{i}.jpg", jpeg_bytes(seed=i))
    return tmp_path / "d"


def test_help_lists_subcommands(capsys):
    """In this process (``main`` is what ``python -m dali_backend`` and the console script call)."""
    rc, out, _ = run_cli(["--help"], capsys)
    assert rc == 0
    for cmd in ("demo", "index", "split", "preview", "bench"):
        assert cmd in out
    for cmd in ("demo", "index", "split", "preview", "bench"):
        rc, sub, _ = run_cli([cmd, "--help"], capsys)
        assert rc == 0 and sub.startswith("usage") and cmd in sub.splitlines()[0], sub[:200]


def test_the_module_entry_point_runs_main():
    """``python -m dali_backend`` reaches ``main`` (one process: the help texts are checked in-process above)."""
    out = subprocess.run([sys.executable, "-m", "dali_backend", "--help"], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.startswith("usage") and "preview" in out.stdout


def test_demo_prints_throughput_and_writes_preview(tmp_path, capsys):
    rc = main(["-q", "demo", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), "--images", "24",
               "--size", "96x64", "--epochs", "2", "--batch-size", "8", "--out-size", "32", "--workers", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.count("img/s") == 2 and "class balance drawn" in text
    png = tmp_path / "out" / "preview.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(SampleIndex.load(tmp_path / "out" / "index.npz")) == 24


def test_index_and_split_commands(tmp_path, small_root, capsys):
    write(small_root / "ok" / "bad.jpg", b"")
    assert main(["index", str(small_root), "--out", str(tmp_path / "i.npz")]) == 0
    assert "bad.jpg" in (tmp_path / "i.npz.rejected.csv").read_text()
    assert main(["split", str(tmp_path / "i.npz"), "--train-out", str(tmp_path / "t.npz"),
                 "--val-out", str(tmp_path / "v.npz"), "--val-fraction", "0.3"]) == 0
    assert len(SampleIndex.load(tmp_path / "t.npz")) + len(SampleIndex.load(tmp_path / "v.npz")) == 10


def test_index_creates_missing_output_folders(tmp_path, small_root, capsys):
    out = tmp_path / "missing" / "dir" / "x.npz"
    assert main(["index", str(small_root), "--out", str(out)]) == 0
    assert len(SampleIndex.load(out)) == 10


# Each case: argv (placeholders filled from the fixtures), words the one error line must contain.
# <d>: a data folder, <empty>: an empty folder, <file>: a plain file, <csv>: a manifest CSV, <t>: tmp_path,
# <idx>: an index file of <d>.
ERROR_CASES = {
    "out under a file": (["index", "<d>", "--out", "<file>/x.npz"], ["--out", "<file>", "is a file"]),
    "out is a folder": (["index", "<d>", "--out", "<t>"], ["--out", "is a folder", "file name"]),
    "index root missing": (["index", "<t>/nosuch", "--out", "<t>/x.npz"], ["root", "nosuch", "does not exist"]),
    "keyword rules bad json": (["index", "<d>", "--out", "<t>/x.npz", "--keyword-rules", "{bad json"],
                               ["--keyword-rules", "{bad json", "not valid JSON"]),
    "keyword rules not object": (["index", "<d>", "--out", "<t>/x.npz", "--keyword-rules", "[1]"],
                                 ["--keyword-rules", "[1]", "not an object"]),
    "keyword rules not lists": (["index", "<d>", "--out", "<t>/x.npz", "--keyword-rules", '{"dent": "pit"}'],
                                ["--keyword-rules", "'pit'", "list of keywords"]),
    "manifest and keywords": (["index", "<d>", "--out", "<t>/x.npz", "--manifest", "<csv>", "--keywords"],
                              ["--manifest", "drop --keywords"]),
    "demo epochs 0": (["demo", "--epochs", "0"], ["--epochs", "0", ">= 1"]),
    "demo quality": (["demo", "--quality", "101"], ["--quality", "101", "1 to 100"]),
    "demo size": (["demo", "--size", "0x5"], ["--size", "0x5", ">= 1"]),
    "bench data missing": (["bench", "--data", "nosuch"], ["--data", "nosuch", "does not exist"]),
    "bench data empty": (["bench", "--data", "<empty>"], ["--data", "<empty>", "no class folders"]),
    "bench one number": (["bench", "--source-size", "640"], ["--source-size", "640", "WIDTHxHEIGHT"]),
    "bench sizes twice": (["bench", "--source-sizes", "64x48,64x48"], ["--source-sizes", "listed twice"]),
    "bench data and sizes": (["bench", "--data", "<d>", "--source-sizes", "64x48,96x64"], ["--source-sizes", "drop one"]),
    "bench root without data": (["bench", "--root", "<d>"], ["--root", "--data"]),
    "preview n negative": (["preview", "<d>", "--n", "-3"], ["--n", "-3", "1 to 64"]),
    "preview n zero": (["preview", "<d>", "--n", "0"], ["--n", "0", "1 to 64"]),
    "preview n too many": (["preview", "<d>", "--n", "65"], ["--n", "65", "1 to 64"]),
    "preview root on folder": (["preview", "<d>", "--root", "<d>"], ["--root", "index file", "drop --root"]),
    "preview bad ops": (["preview", "<d>", "--ops", "RandomResizedCrop(32), Shear(3)"], ["--ops", "Shear(3)", "not an operation"]),
    "split csv": (["split", "<csv>", "--train-out", "<t>/a.npz", "--val-out", "<t>/b.npz"],
                  ["index", "<csv>", "not an index file", "dali-backend index"]),
    "split folder": (["split", "<d>", "--train-out", "<t>/a.npz", "--val-out", "<t>/b.npz"],
                     ["index", "is a folder", "dali-backend index"]),
    "split fraction": (["split", "<idx>", "--train-out", "<t>/a.npz", "--val-out", "<t>/b.npz", "--val-fraction", "1.5"],
                       ["--val-fraction", "1.5", "between 0 and 1"]),
    "quiet and verbose": (["-v", "index", "<d>", "--out", "<t>/x.npz", "-q"], ["-q/--quiet", "-v/--verbose"]),
}


@pytest.mark.parametrize("case", ERROR_CASES)
def test_cli_errors_are_one_line_with_exit_status_2(case, tmp_path, small_root, capsys):
    argv, words = ERROR_CASES[case]
    (tmp_path / "empty").mkdir()
    (tmp_path / "plain.txt").write_text("x")
    (tmp_path / "m.csv").write_text("ok/1.jpg,ok\n")
    SampleIndex.from_folder(small_root, progress=False).save(tmp_path / "i.npz")
    fill = {"d": str(small_root), "empty": str(tmp_path / "empty"), "file": str(tmp_path / "plain.txt"),
            "csv": str(tmp_path / "m.csv"), "t": str(tmp_path), "idx": str(tmp_path / "i.npz")}

    def sub(text: str) -> str:
        for key, value in fill.items():
            text = text.replace(f"<{key}>", value)
        return text

    rc, out, err = run_cli([sub(a) for a in argv], capsys)
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    for word in words:
        assert sub(word) in lines[0], (word, lines[0])


def test_bench_without_matplotlib_says_how_to_install(monkeypatch, small_root, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc, _, err = run_cli(["bench", "--data", str(small_root)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "pip install 'dali-backend[plot]'" in err and "--no-plot" in err


def test_no_import_cycle_between_cli_and_bench():
    """bench's parser comes from bench; the shared helpers from dali_backend.cli.cliargs: bench never imports
    the commands, dali_backend.cli.commands (so the CLI can import bench without a cycle)."""
    code = "import sys, bench.__main__, bench.contenders, bench.plots, bench.measure; print('dali_backend.cli.commands' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    for path in (ROOT / "bench").glob("*.py"):
        assert "dali_backend.cli " not in path.read_text() and "dali_backend.cli\n" not in path.read_text(), path
    assert "cli" not in (ROOT / "dali_backend" / "cli" / "cliargs.py").read_text().split('"""', 2)[2].split("def ")[0]


@pytest.mark.parametrize("position", ["before", "after"])
@pytest.mark.parametrize("flag", ["-v", "-q", None])
def test_verbosity_flags_before_or_after_subcommand(flag, position, tmp_path, small_root, capsys):
    cmd = ["index", str(small_root), "--out", str(tmp_path / "i.npz")]
    argv = cmd if flag is None else [flag, *cmd] if position == "before" else [*cmd, flag]
    rc, out, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert ("DEBUG" in err) == (flag == "-v")
    assert ("INFO" in err) == (flag != "-q")
    if flag != "-q":  # the summary once: the library's log line, not repeated on stdout
        assert err.count("indexed 10 files") == 1 and "indexed 10 files" not in out
    assert "written to" in out


@pytest.mark.parametrize("rules", [None, '{"good": ["good"], "bad": ["bad", "broken"]}'])
def test_index_keywords_flag_keeps_the_data_root(rules, tmp_path, capsys):
    names = ["good_1", "good_2", "bad_3"] if rules else ["ok_1", "scratch_2", "dent_3"]
    if rules:
        names.append("broken_4")
    for i, n in enumerate(names):
        write(tmp_path / "d" / f"{n}.jpg", jpeg_bytes(seed=i))
    argv = ["index", "--keywords", str(tmp_path / "d"), "--out", str(tmp_path / "k.npz")]
    rc, _, err = run_cli(argv + (["--keyword-rules", rules] if rules else []), capsys)
    assert rc == 0, err
    index = SampleIndex.load(tmp_path / "k.npz")
    assert len(index) == len(names)
    assert set(index.classes) == ({"good", "bad"} if rules else {"normal", "scratch", "dent"})


# (what happens to the data after indexing, extra flags, expected exit status)
MOVED_CASES = [
    ("moved", [], 2),
    ("moved", ["--root", "<new>"], 0),
    ("touched", [], 2),
    ("touched", ["--no-check"], 0),
]


@pytest.mark.parametrize("change,flags,rc_want", MOVED_CASES)
@pytest.mark.parametrize("command", ["split", "preview"])
def test_index_file_flags_root_and_no_check(command, change, flags, rc_want, tmp_path, small_root, capsys):
    SampleIndex.from_folder(small_root, progress=False).save(tmp_path / "i.npz")
    new = tmp_path / "moved"
    if change == "moved":
        shutil.move(str(small_root), new)
    else:
        f = small_root / "ok" / "1.jpg"
        os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    flags = [a.replace("<new>", str(new)) for a in flags]
    if command == "split":
        argv = ["split", str(tmp_path / "i.npz"), "--train-out", str(tmp_path / "t.npz"), "--val-out", str(tmp_path / "v.npz")]
    else:
        argv = ["preview", str(tmp_path / "i.npz"), "--out", str(tmp_path / "p.png"), "--n", "2", "--size", "32",
                "--backend", "torch"]
    rc, _, err = run_cli(argv + flags, capsys)
    assert rc == rc_want, err
    if rc_want == 2:
        assert len(err.strip().splitlines()) == 1 and "i.npz" in err


def test_preview_writes_four_columns_and_histogram(defect_root, tmp_path, capsys):
    out = tmp_path / "p.png"
    assert main(["-q", "preview", str(defect_root), "--out", str(out), "--n", "3", "--size", "64"]) == 0
    assert "original, fallback, dali-cpu, |fallback - dali| x16" in capsys.readouterr().out
    import cv2

    img = cv2.imread(str(out))
    assert img.shape[1] == 4 * 64 and img.shape[0] > 3 * 64


def test_preview_original_is_letterboxed_not_stretched():
    img = np.full((120, 160), 255, np.uint8)  # 4:3 into a square tile: 48 rows of image, 8 of fill above and below
    tile = letterbox_tile(img, 64, 64, fill=48)
    assert tile.shape == (64, 64)
    assert (tile[:8] == 48).all() and (tile[-8:] == 48).all() and (tile[8:56] == 255).all()


def test_bench_subcommand_uses_the_same_parser(capsys):
    """``dali-backend bench`` and ``python -m bench`` (its ``main``, in this process) offer the same arguments."""
    from bench.__main__ import main as bench_main

    for run in (lambda: main(["bench", "--help"]), lambda: bench_main(["--help"])):
        try:
            rc = run()
        except SystemExit as e:
            rc = e.code
        out = capsys.readouterr().out
        assert rc == 0 and "--images" in out and "--source-sizes" in out
        assert "--no-check" in out and "-v, --verbose" in out


def test_preview_with_an_operation_list_shows_each_tiles_parameters(tmp_path, small_root, capsys, monkeypatch):
    import cv2

    from dali_backend import pictures

    texts = []
    real = pictures.draw_text
    monkeypatch.setattr(pictures, "draw_text", lambda img, text, *a, **k: (texts.append(text), real(img, text, *a, **k)))
    out = tmp_path / "p.png"
    rc = main(["-q", "preview", str(small_root), "--out", str(out), "--n", "2",
               "--ops", "RandomResizedCrop(40), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)"])
    assert rc == 0 and cv2.imread(str(out)) is not None
    assert any(t.startswith("ops: RandomResizedCrop > RandomHorizontalFlip > ColorJitter") for t in texts), texts
    tiles = [t for t in texts if "RandomResizedCrop(start=" in t]
    assert len(tiles) == 2 and all("RandomHorizontalFlip(flip=" in t and "ColorJitter(b=" in t for t in tiles), tiles
