"""The command line: help, demo, index, split."""

from __future__ import annotations

import subprocess
import sys

from conftest import jpeg_bytes, write
from dali_backend import SampleIndex
from dali_backend.cli import main


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "dali_backend", "--help"], capture_output=True, text=True, check=True)
    for cmd in ("demo", "index", "split", "preview", "bench"):
        assert cmd in out.stdout
    for cmd in ("demo", "index", "split", "preview"):
        sub = subprocess.run([sys.executable, "-m", "dali_backend", cmd, "--help"], capture_output=True, text=True, check=True)
        assert "usage" in sub.stdout


def test_demo_prints_throughput_and_writes_preview(tmp_path, capsys):
    rc = main(["-q", "demo", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), "--images", "24",
               "--size", "96x64", "--epochs", "2", "--batch-size", "8", "--out-size", "32", "--workers", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.count("img/s") == 2 and "class balance drawn" in text
    png = tmp_path / "out" / "preview.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(SampleIndex.load(tmp_path / "out" / "index.npz")) == 24


def test_index_and_split_commands(tmp_path, capsys):
    for i in range(10):
        write(tmp_path / "d" / ("ok" if i % 2 else "dent") / f"{i}.jpg", jpeg_bytes(seed=i))
    write(tmp_path / "d" / "ok" / "bad.jpg", b"")
    assert main(["index", str(tmp_path / "d"), "--out", str(tmp_path / "i.npz")]) == 0
    assert "bad.jpg" in (tmp_path / "i.npz.rejected.csv").read_text()
    assert main(["split", str(tmp_path / "i.npz"), "--train-out", str(tmp_path / "t.npz"),
                 "--val-out", str(tmp_path / "v.npz"), "--val-fraction", "0.3"]) == 0
    assert len(SampleIndex.load(tmp_path / "t.npz")) + len(SampleIndex.load(tmp_path / "v.npz")) == 10
    assert main(["index", str(tmp_path / "missing"), "--out", str(tmp_path / "x.npz")]) == 2  # typed error, exit 2


def test_preview_writes_three_columns_and_histogram(defect_root, tmp_path, capsys):
    out = tmp_path / "p.png"
    assert main(["-q", "preview", str(defect_root), "--out", str(out), "--n", "3", "--size", "64"]) == 0
    assert "original, fallback, dali-cpu" in capsys.readouterr().out
    import cv2

    img = cv2.imread(str(out))
    assert img.shape[1] == 3 * 64 and img.shape[0] > 3 * 64


def test_bench_subcommand_passes_arguments_through():
    out = subprocess.run([sys.executable, "-m", "dali_backend", "bench", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--images" in out.stdout and "--json" in out.stdout
