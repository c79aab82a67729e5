"""The command line's usage line names every subcommand, and a URL given as an output is refused with exit
2 instead of becoming a local ``./s3:`` folder (issue 32, cases 13 and 15)."""

from __future__ import annotations

import pytest

from tests.helpers import jpeg_bytes, run_cli, write
from dali_backend import SampleIndex
from dali_backend.cli import build_parser


def subcommands() -> list[str]:
    parser = build_parser()
    return list(next(a for a in parser._actions if a.dest == "command").choices)


def test_the_usage_line_names_every_subcommand(capsys):
    names = subcommands()
    assert {"demo", "index", "pack", "split", "preview", "diagnose", "bench"} <= set(names)
    rc, out, _ = run_cli(["--help"], capsys)
    usage = out.split("\n\n")[0]
    assert rc == 0 and "{" + ",".join(names) + "}" in usage.replace("\n", "").replace(" ", ""), usage
    rc, _, err = run_cli([], capsys)  # no subcommand: the error names them all too
    assert rc == 2 and "{" + ",".join(names) + "}" in err, err


@pytest.fixture
def where(tmp_path, monkeypatch):
    """A data folder and an index file; the working directory is an empty folder."""
    for i in range(6):
        write(tmp_path / "d" / ("ok" if i % 2 else "dent") / f"{i}.jpg", jpeg_bytes(seed=i))
    SampleIndex.from_folder(tmp_path / "d", progress=False).save(tmp_path / "i.npz")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


URL_OUTPUTS = {
    "pack --out": ["pack", "<d>", "--out", "s3://bucket/shards"],
    "index --out": ["index", "<d>", "--out", "s3://bucket/index.npz"],
    "index --update --out": ["index", "--update", "<i>", "--out", "s3://bucket/index.npz"],
    "split --train-out": ["split", "<i>", "--train-out", "s3://bucket/train.npz", "--val-out", "<t>/val.npz"],
    "split --val-out": ["split", "<i>", "--train-out", "<t>/train.npz", "--val-out", "gs://bucket/val.npz"],
    "preview --out": ["preview", "<i>", "--out", "s3://bucket/preview.png"],
    "demo --out": ["demo", "--out", "s3://bucket/demo"],
    "diagnose --json": ["diagnose", "<i>", "--json", "s3://bucket/metrics.json"],
}


@pytest.mark.parametrize("case", URL_OUTPUTS)
def test_a_url_output_is_refused_with_exit_2(where, case, capsys):
    fill = {"<d>": str(where / "d"), "<i>": str(where / "i.npz"), "<t>": str(where)}
    argv = [fill.get(a, a) for a in URL_OUTPUTS[case]]
    rc, out, err = run_cli(argv, capsys)
    url = next(a for a in argv if "://" in a)
    assert rc == 2, (out, err)
    assert f"{url!r} is a URL" in err and "upload" in err and len(err.strip().splitlines()) == 1, err
    assert list((where / "cwd").iterdir()) == []  # no ./s3: folder
    assert not (where / "train.npz").exists() and not (where / "val.npz").exists()
