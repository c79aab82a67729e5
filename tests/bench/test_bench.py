"""The benchmark runs end to end and writes the documented JSON fields (speed is not asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"name", "images_per_s", "ratio_to_ceiling", "cpu_s_per_image", "peak_rss_mb", "first_batch_s", "rss_growth_pct"}


def run_bench(tmp_path, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    """``python -m bench`` as a user runs it, on 8 synthetic 64x48 images to 16x16; its JSON document."""
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "--images", "8", "--source-size", "64x48", "--size", "16x16",
                           "--epochs", "1", "--batch-size", "4", "--workers", "1", "--cache", str(tmp_path / "cache"),
                           "--json", str(out), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text()), proc


@pytest.mark.slow
def test_bench_smoke(tmp_path):
    """Tiny contenders (the fallback on worker processes and on threads; the ceiling always runs) end to end:
    table, JSON fields, chart; the threads' first batch is the fallback's, level for level."""
    data, proc = run_bench(tmp_path, "--only", "fallback", "fallback-threads", "--breakdown")
    assert data["complete"] is True
    assert [r["name"] for r in data["results"]] == ["ceiling", "fallback", "fallback-threads"]
    fallback, threads = data["results"][1:]  # the same pixels: the same float rounding of the normalisation undone
    assert threads["levels_difference"] == fallback["levels_difference"] < 1e-3 and threads["labels_match"]
    for r in data["results"]:
        assert FIELDS <= r.keys() and r["images_per_s"] > 0 and len(r["epoch_images_per_s"]) == 1
        assert "ratio_to_reference" not in r  # no reference ran: no ratio to it
    assert data["results"][0]["ratio_to_ceiling"] == 1.0 and data["results"][1]["ratio_to_ceiling"] > 0
    stages = data["machine"]["stages_ms_per_image"]
    assert set(stages) == {"read", "decode", "clahe", "resize", "rotate", "jitter", "normalize"}
    assert set(data["machine"]["loader_own_ms_per_image"]) == {"fallback", "fallback-threads"}
    assert "dali_stages_ms_per_image" not in data["machine"]  # only with the dali-cpu contender
    assert data["machine"]["memory_sample_interval_s"] > 0
    assert data["machine"]["cores"] >= 1 and data["machine"]["data"]["images"] == 8
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    assert "img/s" in proc.stdout
    assert "padding" not in proc.stdout and not (tmp_path / "b-padding.json").exists()  # only with --padding


@pytest.mark.slow
def test_the_dali_contender_finds_its_operator_threads_and_its_stages(tmp_path):
    """The dali-cpu contender alone (the child process the benchmark starts for it), and DALI's stage
    breakdown in this process: the loader's own CPU is read against its operator threads' CPU."""
    from bench.contenders import dali_stage_breakdown
    from dali_backend import SampleIndex
    from dali_backend.core.synthetic import generate_defect_dataset

    # images large enough that the timed epochs cost several clock ticks: the process tree's CPU is read
    # in ticks (10 ms; psutil), the operator threads' in nanoseconds (schedstat), so a run of a few
    # milliseconds could read 0 for the tree beside a few for its operators
    root = generate_defect_dataset(tmp_path / "data", n=16, size=(320, 240), seed=0, progress=False)
    index = SampleIndex.from_folder(root, progress=False)
    index.save(tmp_path / "i.npz")
    child = "import sys; from dali_backend._own import own; sys.exit(own('bench.__main__').main(sys.argv[1:]))"
    epochs = 2
    proc = subprocess.run([sys.executable, "-c", child, "--one", "dali-cpu", "--index", str(tmp_path / "i.npz"),
                           "--size", "16x16", "--epochs", str(epochs), "--batch-size", "4", "--workers", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dali = json.loads(proc.stdout.strip().splitlines()[-1])
    assert dali["name"] == "dali-cpu" and FIELDS - {"ratio_to_ceiling"} <= dali.keys() and dali["images_per_s"] > 0
    tick = 0.01 / (epochs * len(index))  # the tree's CPU per image is known to one clock tick
    assert 0 < dali["dali_operators_cpu_s_per_image"] < dali["cpu_s_per_image"] + tick  # its operator threads were found
    stages = dali_stage_breakdown(index, (16, 16), images=8, batch_size=4, threads=1, repeats=1)
    assert list(stages) == ["framework", "decode", "clahe", "resize", "rotate", "jitter"]


@pytest.mark.slow
def test_bench_every_contender_end_to_end(tmp_path):
    """Every contender this machine can run, in order (one process each: ~14 s): each one works, and the
    reference's ratio and overhead are given to the loaders of the preset's contract only. The JSON
    fields, the breakdown and the chart are the two tests above's."""
    data, _ = run_bench(tmp_path, "--no-plot")
    names = [r["name"] for r in data["results"]]
    assert names[:6] == ["ceiling", "ceiling-dali", "reference", "tutorial", "fallback", "dali-cpu"]  # dali-cpu's own
    for r in data["results"]:
        assert FIELDS <= r.keys() and r["images_per_s"] > 0
        # the reference and its overhead compare loaders of the same contract (the preset) only
        assert ({"ratio_to_reference", "overhead_ms_per_image"} <= r.keys()) == (r["name"] in ("reference", "fallback", "dali-cpu"))


def test_gpu_check_script_parses_and_its_probe_runs_on_the_cpu(tmp_path):
    """The GPU machine is lent for minutes: the check script must not fail on a typo."""
    import json

    subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_check.sh")], check=True)
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_probe", "decode", "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "decode.json").read_text())
    assert result["ok"] and result["max_diff"] == 0 and result["shape"] == [480, 640, 3]


def test_measure_counts_child_cpu_and_memory():
    """psutil-based figures: a busy child adds CPU seconds, a child holding 200 MB adds memory."""
    from bench.measure import process_tree, tree_cpu_seconds, tree_rss_mb

    code = "import time\nb = b\"x\" * 200_000_000\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(30)"
    before_cpu, before_mb = tree_cpu_seconds(), tree_rss_mb()
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        import time

        deadline = time.monotonic() + 20
        while tree_cpu_seconds() - before_cpu < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert child.pid in process_tree()
        assert tree_cpu_seconds() - before_cpu >= 0.5
        assert tree_rss_mb() - before_mb > 150
    finally:
        child.kill()
        child.wait()


def _is_png(path: Path) -> bool:
    import cv2

    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and cv2.imread(str(path)) is not None


@pytest.mark.slow
def test_bench_padding_reports_the_padding_fraction_with_and_without_grouping(tmp_path):
    """--padding: after the comparison, the padding table of variable-size batches on mixed-aspect data
    (plain and grouped, per loader compared), its JSON beside the comparison's; the default output has none."""
    data, proc = run_bench(tmp_path, "--only", "fallback", "--no-plot", "--padding")
    assert [r["name"] for r in data["results"]] == ["ceiling", "fallback"]
    doc = json.loads((tmp_path / "b-padding.json").read_text())
    assert [(r["backend"], r["sampler"]) for r in doc["results"]] == [("torch", "plain"), ("torch", "grouped")]
    assert all(0 < r["padding_fraction"] < 1 and r["images_per_s"] > 0 and r["batches"] == 2 for r in doc["results"])
    assert len(doc["data"]["source_sizes"]) == 5 and doc["data"]["images"] == 8  # landscape, portrait, square
    assert "padding %" in proc.stdout and "grouped" in proc.stdout


@pytest.mark.slow
def test_bench_several_source_sizes_writes_json_and_charts(tmp_path, capsys):
    """--source-sizes: one run per size (JSON + throughput chart each), a combined JSON and the ratio chart.
    The parent runs in this process; its 4 contender processes make it slow (~8 s)."""
    from bench.__main__ import main

    out = tmp_path / "b.json"
    rc = main(["--images", "8", "--source-sizes", "64x48,128x96", "--size", "32x32", "--epochs", "2", "--batch-size", "4",
               "--workers", "1", "--only", "fallback", "--cache", str(tmp_path / "cache"), "--json", str(out)])
    assert rc == 0, capsys.readouterr().err[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert [r["source_size"] for r in runs] == [[64, 48], [128, 96]]
    for w, h in ((64, 48), (128, 96)):
        per_size = json.loads((tmp_path / f"b-{w}x{h}.json").read_text())
        assert [r["name"] for r in per_size["results"]] == ["ceiling", "fallback"]
        assert all(len(r["epoch_images_per_s"]) == 2 for r in per_size["results"])
        assert _is_png(tmp_path / f"b-{w}x{h}.png")
    assert _is_png(tmp_path / "b-sizes.png")


def test_charts_from_results(tmp_path):
    from bench.plots import ratio_by_size_chart, throughput_chart

    machine = {"cores": 2, "cpu": "test CPU", "gpu": None,
               "data": {"images": 8, "source_size": [64, 48], "output_size": [32, 32]}}
    results = [{"name": n, "images_per_s": v, "epoch_images_per_s": [v * 0.9, v, v * 1.1], "ratio_to_ceiling": v / 100,
                "batch_size": 4} for n, v in (("ceiling", 100.0), ("fallback", 80.0), ("dali-cpu", 90.0))]
    assert _is_png(throughput_chart(results, machine, tmp_path / "a" / "t.png"))
    runs = [{"source_size": s, "output_size": [32, 32], "results": results} for s in ([320, 240], [2048, 1536])]
    assert _is_png(ratio_by_size_chart(runs, machine, tmp_path / "r.png"))


def test_missing_matplotlib_names_the_install_command(monkeypatch):
    from bench.plots import require_matplotlib
    from dali_backend.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'dali-backend\[plot\]'"):
        require_matplotlib()


def test_gpu_check_stage_limits_fit_one_device_command():
    """The stages' time limits (each `timeout`, plus its kill grace) add up to at most 480 s of the 600 s
    a device command may run, so every stage's files come back."""
    import re

    text = (ROOT / "bench" / "gpu_check.sh").read_text()
    limits = [int(n) + int(k or 0) for k, n in re.findall(r"^\s*timeout (?:-s \w+ )?(?:-k (\d+) )?(\d+) ", text, re.M)]
    grace = int(re.search(r'timeout -s INT -k (\d+) "\$limit"', text).group(1))  # cuda_tests NAME LIMIT ...
    limits += [int(n) + grace for n in re.findall(r"^\s*cuda_tests \w+ (\d+) ", text, re.M)]
    assert len(limits) >= 12, limits
    assert sum(limits) <= 480, (limits, sum(limits))
    assert "--transforms" in text and "recipe-dali-gpu" in text and "--junitxml" in text
    for covered in ("tests/facade/test_host_syncs.py", "its_gpu", "gpu_probe telemetry", "gpu_probe hwjpeg", "dmon -s um",
                    "tests/transforms/test_window.py"):
        assert covered in text, covered


def test_unavailable_contenders_are_skipped_with_the_reason(monkeypatch, caplog):
    """--only ... dali-gpu on a CPU machine: that contender is skipped with one line, the rest run."""
    import bench.__main__ as bench_main

    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    why = bench_main.unavailable(["fallback", "dali-cpu", "dali-gpu", "recipe-dali-gpu"])
    assert set(why) == {"dali-gpu", "recipe-dali-gpu"} and "no CUDA GPU" in why["dali-gpu"]
    ran = []
    monkeypatch.setattr(bench_main, "_run_size", lambda index, root, out, png, args, names, machine: ran.append(names) or {"results": [], "failed": {}})
    monkeypatch.setattr(bench_main, "machine_info", lambda: {})
    monkeypatch.setattr("dali_backend.core.synthetic.generate_defect_dataset", lambda root, **kw: root)
    monkeypatch.setattr("dali_backend.SampleIndex.from_folder", staticmethod(lambda root, **kw: None))
    args = bench_main.build_parser().parse_args(["--only", "fallback", "dali-gpu", "--no-plot"])
    with caplog.at_level("WARNING", logger="bench"):
        assert bench_main.run(args) == 0
    assert ran == [["ceiling", "fallback"]]
    assert "skipping dali-gpu: no CUDA GPU" in caplog.text
    args = bench_main.build_parser().parse_args(["--only", "dali-gpu", "--no-plot"])
    assert bench_main.run(args) == 2  # nothing left to compare


def test_the_hardware_decoders_use_is_read_from_dmons_jpg_column():
    """``nvidia-smi dmon -s um -o T``: the jpg column's samples (a driver without it: unknown, not used)."""
    from bench.gpu_probe import DMON_SAMPLE, parse_dmon

    got = parse_dmon(DMON_SAMPLE + " 12:00:03      0     40     11      0      0      -      0   2210      4      0\n")
    assert got == {"jpg_column": True, "samples": 2, "max_jpg_util_pct": 37, "busy_samples": 1}
    old = "#Time gpu sm mem enc dec fb bar1\n#HH:MM:SS Idx % % % % MB MB\n 12:00:01 0 41 12 0 0 2210 4\n"
    assert parse_dmon(old) == {"jpg_column": False, "samples": 0, "max_jpg_util_pct": None, "busy_samples": 0}
    idle = DMON_SAMPLE.replace("     37", "      0")
    assert parse_dmon(idle)["busy_samples"] == 0


def test_a_failing_contender_is_reported_and_the_next_ones_run(tmp_path, monkeypatch, capsys):
    """One contender's child process fails (as a first GPU contender may): the others still run, the table
    and the JSON name the failure with its exit status and the end of its output, and the exit status of
    the benchmark is 1."""
    import bench.__main__ as bench_main
    from dali_backend import SampleIndex
    from dali_backend.core.synthetic import generate_defect_dataset

    index = SampleIndex.from_folder(generate_defect_dataset(tmp_path / "data", n=6, size=(32, 24), seed=0,
                                                            progress=False), progress=False)
    row = {"images_per_s": 10.0, "cpu_s_per_image": 0.1, "peak_rss_mb": 100.0, "first_batch_s": 0.5,
           "rss_growth_pct": 0.0, "epoch_images_per_s": [10.0]}
    ran = []

    def child(cmd, **kw):
        name = cmd[cmd.index("--one") + 1]
        ran.append(name)
        if name == "dali-gpu":
            return subprocess.CompletedProcess(cmd, 3, "", "Traceback ...\nRuntimeError: CUDA error: no kernel image\n")
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"name": name, **row}) + "\n", "")

    monkeypatch.setattr(bench_main.subprocess, "run", child)
    names = ["ceiling", "fallback", "dali-gpu", "recipe-dali-gpu"]
    args = bench_main.build_parser().parse_args(["--no-plot"])
    out = tmp_path / "b.json"
    doc = bench_main._run_size(index, index.root, out, None, args, names, {"cores": 1, "cpu": "x", "gpu": None})
    assert ran == names
    assert [r["name"] for r in doc["results"]] == ["ceiling", "fallback", "recipe-dali-gpu"]
    assert doc["failed"]["dali-gpu"]["exit_status"] == 3 and "no kernel image" in doc["failed"]["dali-gpu"]["error"]
    assert json.loads(out.read_text())["failed"] == doc["failed"]
    assert "dali-gpu         FAILED (exit status 3): RuntimeError: CUDA error: no kernel image" in capsys.readouterr().out
    monkeypatch.setattr(bench_main, "_run_size", lambda *a: doc)
    monkeypatch.setattr(bench_main, "machine_info", lambda: {})
    monkeypatch.setattr(bench_main, "unavailable", lambda names: {})
    monkeypatch.setattr("dali_backend.core.synthetic.generate_defect_dataset", lambda root, **kw: root)
    monkeypatch.setattr("dali_backend.SampleIndex.from_folder", staticmethod(lambda root, **kw: None))
    assert bench_main.run(bench_main.build_parser().parse_args(["--no-plot"])) == 1


def test_the_size_mix_is_labelled_as_it_is():
    import numpy as np

    from bench.__main__ import size_mix

    class Index:
        widths = np.array([640, 640, 2048, 320, 640, 800])
        heights = np.array([480, 480, 1536, 240, 480, 600])

    mix = size_mix(Index)
    assert mix["source_size"] == [640, 480] and mix["source_sizes"][0] == [640, 480, 3]
    assert mix["source_label"] == "mixed: 640x480 x3, 320x240 x1, 800x600 x1 and 1 more sizes"
    Index.widths, Index.heights = np.array([64, 64]), np.array([48, 48])
    assert size_mix(Index)["source_label"] == "64x48"


@pytest.mark.slow
def test_clip_contenders_count_frames(tmp_path):
    """clips-fallback and clips-dali-cpu (named with --only; ~10 s): 8 images, the class of 6 one
    sequence, clips of 3 frames every frame (4 clips), 6 frames per batch (2 clips): each epoch counts
    2 batches x 2 clips x 3 frames, and the ratios to the ceiling and the reference are given."""
    data, proc = run_bench(tmp_path, "--only", "reference", "clips-fallback", "clips-dali-cpu", "--clip-len", "3",
                           "--clip-step", "1", "--batch-size", "6", "--no-plot")
    rows = {r["name"]: r for r in data["results"]}
    assert list(rows) == ["ceiling", "ceiling-dali", "reference", "clips-fallback", "clips-dali-cpu"]  # DALI's own ceiling
    own = rows["clips-dali-cpu"]["ratio_to_own_ceiling"]
    assert own == rows["clips-dali-cpu"]["images_per_s"] / rows["ceiling-dali"]["images_per_s"]
    for name in ("clips-fallback", "clips-dali-cpu"):
        r = rows[name]
        assert (r["clip_len"], r["clip_step"], r["clips_per_batch"], r["clips_per_epoch"]) == (3, 1, 2, 4)
        assert r["frames_per_epoch"] == r["batches_per_epoch"] * r["clips_per_batch"] * r["clip_len"] == 12
        assert r["images_per_s"] > 0 and r["ratio_to_ceiling"] > 0 and r["ratio_to_reference"] > 0
    assert "clips-*: img/s and cpu s/img count frames: 2 clips x 3 frames per batch" in proc.stdout
    assert (tmp_path / "b.sequences.csv").read_text().startswith("path,sequence,frame\n")


def test_a_clip_longer_than_every_sequence_is_refused_before_any_contender_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "--images", "8", "--source-size", "64x48", "--only",
                           "clips-fallback", "--clip-len", "40", "--cache", str(tmp_path / "cache"), "--json",
                           str(tmp_path / "b.json"), "--no-plot"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--clip-len 40" in proc.stderr and "at most 6" in proc.stderr
    assert "running" not in proc.stderr and not (tmp_path / "b.json").exists()
