"""The benchmark runs end to end and writes the documented JSON fields (speed is not asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {"name", "images_per_s", "ratio_to_ceiling", "cpu_s_per_image", "peak_rss_mb", "first_batch_s", "rss_growth_pct"}


def test_bench_smoke(tmp_path):
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "--images", "12", "--source-size", "128x96", "--size", "32x32",
                           "--epochs", "1", "--batch-size", "4", "--workers", "2", "--cache", str(tmp_path / "cache"),
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    names = [r["name"] for r in data["results"]]
    assert names[:4] == ["ceiling", "tutorial", "fallback", "dali-cpu"]
    for r in data["results"]:
        assert FIELDS <= r.keys() and r["images_per_s"] > 0
    assert data["results"][0]["ratio_to_ceiling"] == 1.0
    assert data["machine"]["cores"] >= 1 and data["machine"]["data"]["images"] == 12
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert "img/s" in proc.stdout


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
