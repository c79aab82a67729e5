"""``SampleIndex.update()`` and ``dali-backend index --update``: only new and changed files are read,
and the result holds what a fresh build would (issue 24, item 3)."""

from __future__ import annotations

import os

import pytest

from tests.helpers import jpeg_bytes, run_cli, write
from dali_backend import ConfigError, SampleIndex
from dali_backend.index import build as build_module
from dali_backend.index import update as update_module


def records(index: SampleIndex) -> set[tuple]:
    """Everything a sample is, by path and class name (independent of positions and class ids)."""
    return {(p, index.classes[lab], int(s), int(m), int(w), int(h)) for p, lab, s, m, w, h in
            zip(index.paths, index.labels.tolist(), index.sizes, index.mtimes, index.widths, index.heights)}


@pytest.fixture
def root(tmp_path):
    data = tmp_path / "data"
    for i in range(12):
        write(data / ("ok" if i % 3 else "dent") / f"{i:02d}.jpg", jpeg_bytes(seed=i))
    write(data / "ok" / "deep" / "nested.jpg", jpeg_bytes(seed=40))
    write(data / "dent" / "broken.jpg", jpeg_bytes(seed=41)[:200])  # refused: cut short
    return data


def change_files(data) -> dict[str, str]:
    """Add, remove, rewrite and repair files; returns what happened to which relative path."""
    write(data / "ok" / "12.jpg", jpeg_bytes(seed=12))
    write(data / "ok" / "deep" / "new.jpg", jpeg_bytes(seed=13))
    write(data / "scratch" / "00.jpg", jpeg_bytes(seed=14))  # a new class
    (data / "ok" / "04.jpg").unlink()
    write(data / "ok" / "05.jpg", jpeg_bytes(h=30, w=20, seed=5))  # rewritten: another size
    (data / "dent" / "06.jpg").write_bytes(b"not a jpeg")  # now refused
    write(data / "dent" / "broken.jpg", jpeg_bytes(seed=41))  # repaired
    (data / "ok" / "notes.txt").write_text("ignored")
    return {"added": ["ok/12.jpg", "ok/deep/new.jpg", "scratch/00.jpg", "dent/broken.jpg"],
            "changed": ["ok/05.jpg", "dent/06.jpg"], "removed": ["ok/04.jpg", "dent/06.jpg"]}


@pytest.fixture
def reads(monkeypatch):
    """The files whose headers are read (an update's checks are the build's: index.build.FileChecks)."""
    seen = []
    real = build_module.registry.check_file  # the format registry's index-time check

    def counting(path, max_pixels):
        seen.append(path)
        return real(path, max_pixels)

    monkeypatch.setattr(build_module.registry, "check_file", counting)
    return seen


def test_update_equals_a_fresh_build(root, reads):
    old = SampleIndex.from_folder(root, progress=False)
    what = change_files(root)
    reads.clear()
    new, report = update_module.update_index(old)
    updated = list(reads)
    fresh = SampleIndex.from_folder(root, progress=False)
    assert records(new) == records(fresh)
    assert new.rejected == fresh.rejected and new.ignored_files == fresh.ignored_files and new.ignored == fresh.ignored
    assert [r.path for r in new.rejected] == ["dent/06.jpg"]
    # only what is new, changed or was refused before was read
    assert sorted(os.path.relpath(p, root) for p in updated) == sorted(what["added"] + what["changed"])
    assert (report.unchanged, report.added, report.rechecked, report.removed) == (10, 4, 1, 2)
    assert report.new_classes == ("scratch",)
    # order: survivors in their old order, then the new files in walk order; class ids kept
    survivors = [p for p in old.paths if p not in what["removed"]]
    assert list(new.paths) == survivors + ["dent/broken.jpg", "ok/12.jpg", "ok/deep/new.jpg", "scratch/00.jpg"]
    assert new.classes == ("dent", "ok", "scratch") and new.classes[:2] == old.classes
    assert new.update().fingerprint == new.fingerprint  # nothing changed since: the same index


def test_positions_stay_when_nothing_is_removed(root):
    old = SampleIndex.from_folder(root, progress=False)
    write(root / "dent" / "zz.jpg", jpeg_bytes(seed=77))
    write(root / "dent" / "aa.jpg", jpeg_bytes(seed=78))  # sorts first in a fresh build; appended here
    new = old.update()
    assert list(new.paths[:len(old)]) == list(old.paths) and list(new.paths[len(old):]) == ["dent/aa.jpg", "dent/zz.jpg"]
    assert (new.labels[:len(old)] == old.labels).all()


def test_keyword_and_manifest_indexes_update_the_way_they_were_built(tmp_path):
    raw = tmp_path / "raw"
    write(raw / "line1" / "ok_1.jpg", jpeg_bytes(seed=1))
    write(raw / "line1" / "scratch_2.jpg", jpeg_bytes(seed=2))
    kw = SampleIndex.from_keywords(raw, {"normal": ["ok"], "scratch": ["scratch"]}, progress=False)
    write(raw / "line2" / "ok_3.jpg", jpeg_bytes(seed=3))
    write(raw / "line2" / "odd_4.jpg", jpeg_bytes(seed=4))  # no keyword: refused, as a fresh build would
    fresh = SampleIndex.from_keywords(raw, {"normal": ["ok"], "scratch": ["scratch"]}, progress=False)
    new = kw.update()
    assert records(new) == records(fresh) and new.rejected == fresh.rejected

    manifest = tmp_path / "m.csv"
    manifest.write_text("path,label\nline1/ok_1.jpg,good\n")
    man = SampleIndex.from_manifest(manifest, root=raw, progress=False)
    manifest.write_text("path,label\nline1/ok_1.jpg,good\nline2/odd_4.jpg,bad\n")
    new = man.update()
    assert records(new) == records(SampleIndex.from_manifest(manifest, root=raw, progress=False))
    assert new.classes == ("good", "bad")  # "bad" is new: appended, "good" keeps id 0


def test_the_source_is_saved_and_a_derived_index_is_refused(root, tmp_path):
    old = SampleIndex.from_folder(root, progress=False)
    old.save(tmp_path / "i.npz")
    loaded = SampleIndex.load(tmp_path / "i.npz")
    assert loaded.source == old.source and loaded.source["builder"] == "folder"
    train, _ = old.split(0.3)
    assert train.source is None
    with pytest.raises(ConfigError, match=r"records no source.*update the index it came from and split it again"):
        train.update()


def test_cli_index_update(root, tmp_path, capsys):
    out = tmp_path / "index.npz"
    assert run_cli(["index", str(root), "--out", str(out)], capsys)[0] == 0
    change_files(root)
    rc, stdout, err = run_cli(["index", "--update", str(out), "--workers", "2"], capsys)
    assert rc == 0, err
    assert f"index of 15 files written to {out} (10 unchanged (not re-read), 4 added, 1 changed" in stdout
    assert "1 rejected file and 1 ignored file listed in" in stdout
    assert records(SampleIndex.load(out)) == records(SampleIndex.from_folder(root, progress=False))
    rc, _, err = run_cli(["index", "--update", str(out), "--verify", "decode"], capsys)
    assert rc == 2 and "--verify cannot be combined with --update" in err
    rc, _, err = run_cli(["index", "--out", str(tmp_path / "x.npz")], capsys)
    assert rc == 2 and "index needs ROOT" in err
    moved = tmp_path / "moved"
    root.rename(moved)
    other = tmp_path / "other.npz"
    rc, stdout, err = run_cli(["index", "--update", str(out), str(moved), "--out", str(other)], capsys)
    assert rc == 0, err
    assert SampleIndex.load(other).root == str(moved) and "15 unchanged" in stdout
    assert SampleIndex.load(other).source == SampleIndex.load(out, check="none").source


def test_one_file_under_two_paths_is_refused_as_a_fresh_build_does(root):
    old = SampleIndex.from_folder(root, progress=False)
    os.link(root / "ok" / "01.jpg", root / "ok" / "zz_link.jpg")  # same class: the later path is a duplicate
    os.link(root / "dent" / "00.jpg", root / "ok" / "zz_other.jpg")  # two labels: both paths refused
    new = old.update()
    fresh = SampleIndex.from_folder(root, progress=False)
    assert records(new) == records(fresh) and new.rejected == fresh.rejected
    assert {r.path for r in new.rejected} == {"ok/zz_link.jpg", "ok/zz_other.jpg", "dent/00.jpg", "dent/broken.jpg"}
