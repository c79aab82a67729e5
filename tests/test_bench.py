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


def test_gpu_check_script_parses_and_its_probe_runs_on_the_cpu(tmp_path):
    """The GPU machine is lent for minutes: the check script must not fail on a typo."""
    import json

    subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_check.sh")], check=True)
    proc = subprocess.run([sys.executable, "-m", "bench.gpu_probe", "decode", "--dry-run", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "decode.json").read_text())
    assert result["ok"] and result["max_diff"] == 0 and result["shape"] == [480, 640, 3]
