"""Hostile inputs around the index (issue 18): output paths that are not files, FIFOs given as index
files, failed saves, odd names, look-alike class names, manifest edge cases, crafted index files.

Anything that could block on a FIFO runs in a child process with a timeout.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import tracemalloc
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import jpeg_bytes, write
from dali_backend import IndexBuildError, IndexFileError, ManifestError, SampleIndex
from dali_backend.cli import main
from dali_backend.cli.cliargs import path_kind
from dali_backend.errors import OutputFileError
from dali_backend.index import check_output_path

ROOT = Path(__file__).resolve().parents[2]
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")


@pytest.fixture
def data(tmp_path) -> Path:
    """Four JPEGs in two classes and one empty file (rejected at indexing)."""
    for i in range(4):
        write(tmp_path / "d" / ("ok" if i % 2 else "dent") / f"{i}.jpg", jpeg_bytes(seed=i))
    write(tmp_path / "d" / "ok" / "empty.jpg", b"")
    return tmp_path / "d"


@pytest.fixture
def index(data) -> SampleIndex:
    return SampleIndex.from_folder(data, progress=False)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


def _identity(path: str | Path) -> tuple:
    st = os.lstat(path)
    return st.st_mode, st.st_ino, st.st_dev, st.st_rdev, st.st_size


def _run_cli_in_child(cases: list[list[str]], timeout: float = 120) -> list[tuple[int, str]]:
    """``main(argv)`` for every case in one child process: ``[(exit status, stderr), ...]``.

    A regression that opens a FIFO would block forever; the timeout turns it into a failure.
    """
    code = textwrap.dedent("""
        import contextlib, io, json, sys
        from dali_backend.cli import main
        results = []
        for argv in json.loads(sys.argv[1]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    rc = main(argv)
                except SystemExit as e:
                    rc = e.code
            results.append([rc, err.getvalue()])
        print(json.dumps(results))
    """)
    out = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], capture_output=True, text=True, cwd=ROOT,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr
    return [tuple(r) for r in json.loads(out.stdout.splitlines()[-1])]


# ------------------------------------------------------------------ 5. outputs that are not regular files
@needs_fifo
def test_save_refuses_a_fifo_a_directory_and_links_to_them(index, tmp_path):
    fifo, folder = tmp_path / "pipe.npz", tmp_path / "dir.npz"
    os.mkfifo(fifo)
    folder.mkdir()
    (tmp_path / "link.npz").symlink_to(fifo)
    for path, kind in ((fifo, "FIFO"), (folder, "directory"), (tmp_path / "link.npz", "FIFO")):
        before = _identity(path)
        with pytest.raises(OutputFileError, match=kind) as e:
            index.save(path)
        message = str(e.value)
        assert str(path) in message and "regular file" in message and "Pass the path of a file" in message
        assert _identity(path) == before
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and folder.is_dir() and (tmp_path / "link.npz").is_symlink()
    assert _leftovers(tmp_path) == []


@pytest.fixture
def dev_guard(monkeypatch):
    """Creating, replacing or renaming anything under /dev raises in this process, so that a regression in
    the refusal fails the test instead of replacing /dev/null (tests may run as root)."""
    def under_dev(path) -> bool:
        return os.path.realpath(os.fsdecode(path)).startswith("/dev/")

    def guarded(real, target: int, writes=lambda *args: True):
        def call(*args, **kwargs):
            if writes(*args) and under_dev(args[target]):
                raise AssertionError(f"{real.__name__}{args[:2]} would touch /dev")
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(os, "replace", guarded(os.replace, 1))
    monkeypatch.setattr(os, "rename", guarded(os.rename, 1))
    monkeypatch.setattr(os, "open", guarded(os.open, 0, lambda path, flags, *a: flags & (os.O_WRONLY | os.O_RDWR
                                                                                           | os.O_CREAT)))


def test_save_refuses_dev_null_without_touching_it(index, tmp_path, dev_guard):
    if not os.path.exists("/dev/null") or not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        pytest.skip("no /dev/null character device")
    link = tmp_path / "null.npz"
    link.symlink_to("/dev/null")
    before = _identity("/dev/null")
    assert check_output_path(tmp_path / "fresh.npz") == str(tmp_path / "fresh.npz")
    for path in ("/dev/null", link):
        with pytest.raises(OutputFileError, match="character device"):
            check_output_path(path)
        with pytest.raises(OutputFileError, match="character device"):
            index.save(path)
    assert _identity("/dev/null") == before and link.is_symlink()
    assert _leftovers(tmp_path) == [] and not [n for n in os.listdir("/dev") if n.startswith("null.tmp")]


def test_save_replaces_a_regular_file_and_writes_through_a_symlink(index, tmp_path):
    real = tmp_path / "real.npz"
    real.write_bytes(b"old")
    (tmp_path / "link.npz").symlink_to(real)
    index.save(tmp_path / "link.npz")
    assert (tmp_path / "link.npz").is_symlink() and len(SampleIndex.load(real)) == len(index)
    index.save(real)
    assert len(SampleIndex.load(real)) == len(index) and _leftovers(tmp_path) == []


@needs_fifo
def test_cli_refuses_special_output_paths_with_one_line(data, index, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    os.mkfifo(tmp_path / "r.npz.rejected.csv")
    index.save(tmp_path / "i.npz")
    cases = {
        "index --out FIFO": (["index", str(data), "--out", str(fifo)], [str(fifo), "FIFO"]),
        "rejected report is a FIFO": (["index", str(data), "--out", str(tmp_path / "r.npz")],
                                      ["rejected-files report", "r.npz.rejected.csv", "FIFO"]),
        "split --val-out FIFO": (["split", str(tmp_path / "i.npz"), "--train-out", str(tmp_path / "t.npz"),
                                  "--val-out", str(fifo)], ["--val-out", str(fifo), "FIFO"]),
        "preview --out FIFO": (["preview", str(data), "--out", str(fifo), "--backend", "torch"], ["--out", "FIFO"]),
    }
    results = _run_cli_in_child([argv for argv, _ in cases.values()])
    for (name, (_, words)), (rc, err) in zip(cases.items(), results, strict=True):
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (name, err)
        for word in words:
            assert word in err, (name, word, err)
    assert not (tmp_path / "r.npz").exists() and not (tmp_path / "t.npz").exists()  # refused before writing
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISFIFO(os.stat(tmp_path / "r.npz.rejected.csv").st_mode)


# ------------------------------------------------------------------ 6. a FIFO given as the index file
@needs_fifo
def test_fifo_as_index_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "index.npz"
    os.mkfifo(fifo)
    assert path_kind(fifo) == "FIFO" and path_kind(tmp_path / "nothing") is None  # stat only, never opened
    cases = [
        ["split", str(fifo), "--train-out", str(tmp_path / "t.npz"), "--val-out", str(tmp_path / "v.npz")],
        ["preview", str(fifo), "--out", str(tmp_path / "p.png")],
        ["bench", "--data", str(fifo)],
    ]
    for argv, (rc, err) in zip(cases, _run_cli_in_child(cases, timeout=60), strict=True):
        assert rc == 2 and len(err.strip().splitlines()) == 1, (argv, err)
        assert str(fifo) in err and "FIFO" in err, (argv, err)


# ------------------------------------------------------------------ 9. failed saves, odd names, long CSV fields
@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_disk_full_leaves_no_temp_file_and_names_the_path(index, tmp_path, monkeypatch, failing):
    path = tmp_path / "idx.npz"
    path.write_bytes(b"the previous index")
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if failing == "write":
        def savez(f, **arrays):
            f.write(b"PK\x03\x04 half an archive")
            raise full
        monkeypatch.setattr(np, "savez", savez)
    else:
        monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(full))
    with pytest.raises(OutputFileError) as e:
        index.save(path)
    message = str(e.value)
    assert str(path) in message and os.strerror(errno.ENOSPC) in message and "Free disk space" in message
    assert isinstance(e.value, OSError)
    assert path.read_bytes() == b"the previous index" and _leftovers(tmp_path) == []


def test_cli_disk_full_is_one_line_naming_the_path(data, tmp_path, monkeypatch, capsys):
    def savez(f, **arrays):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", savez)
    out = tmp_path / "idx.npz"
    assert main(["-q", "index", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "WARNING dali_backend: 1 file under" in err  # the empty file (issue 34: said at build time, even with -q)
    err = "\n".join(line for line in err.splitlines() if not line.startswith("WARNING dali_backend: 1 file under"))
    assert len(err.strip().splitlines()) == 1 and str(out) in err and os.strerror(errno.ENOSPC) in err
    assert not out.exists() and _leftovers(tmp_path) == []


def test_save_onto_a_directory_leaves_no_temp_file(index, tmp_path):
    (tmp_path / "idx.npz").mkdir()
    with pytest.raises(OutputFileError, match="directory"):
        index.save(tmp_path / "idx.npz")
    assert _leftovers(tmp_path) == [] and (tmp_path / "idx.npz").is_dir()


def _make_bytes_dir(path: Path) -> None:
    try:
        os.makedirs(os.fsencode(path))
    except (OSError, UnicodeError) as e:  # macOS (APFS) and Windows refuse names that are not UTF-8
        pytest.skip(f"this file system refuses non-UTF-8 names ({e})")


def test_non_utf8_class_folder_round_trips(tmp_path, capsys):
    root = tmp_path / "d"
    bad = root / os.fsdecode(b"bad\xff")
    _make_bytes_dir(bad)
    write(bad / "a.jpg", jpeg_bytes(seed=1))
    write(bad / "broken.jpg", b"")
    write(root / "ok" / "b.jpg", jpeg_bytes(seed=2))
    index = SampleIndex.from_folder(root, progress=False)
    assert os.fsdecode(b"bad\xff") in index.classes
    index.save(tmp_path / "i.npz")
    back = SampleIndex.load(tmp_path / "i.npz")
    assert back.classes == index.classes and list(back.paths) == list(index.paths)
    assert back.fingerprint == index.fingerprint and all(os.path.exists(back.abspath(i)) for i in range(len(back)))
    assert [r.path for r in back.rejected] == [os.fsdecode(b"bad\xff/broken.jpg")]

    assert main(["-q", "index", str(root), "--out", str(tmp_path / "c.npz")]) == 0
    assert b'"bad\xff/broken.jpg"' in (tmp_path / "c.npz.rejected.csv").read_bytes()  # the name's own bytes
    assert main(["-q", "split", str(tmp_path / "c.npz"), "--train-out", str(tmp_path / "t.npz"),
                 "--val-out", str(tmp_path / "v.npz")]) == 0
    assert "bad\\xff" in capsys.readouterr().out


def test_csv_field_over_the_limit_is_a_manifest_error_naming_the_line(tmp_path, capsys):
    write(tmp_path / "a.jpg", jpeg_bytes(seed=0))
    manifest = tmp_path / "m.csv"
    manifest.write_text('path,label\na.jpg,ok\n"b.jpg,ok\n' + "x" * 140_000 + "\n")
    with pytest.raises(ManifestError) as e:
        SampleIndex.from_manifest(manifest, progress=False)
    assert str(manifest) in str(e.value) and "line 3" in str(e.value) and "quote" in str(e.value)
    assert main(["-q", "index", str(tmp_path), "--manifest", str(manifest), "--out", str(tmp_path / "i.npz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "line 3" in err and "Traceback" not in err


# ------------------------------------------------------------------ 11. look-alike class names, manifest spaces
def _make_class_dirs(root: Path, *names: str) -> None:
    for name in names:
        try:
            (root / name).mkdir(parents=True)
        except FileExistsError:
            pytest.skip("this file system folds case or Unicode normalisation in names")
        write(root / name / "x.jpg", jpeg_bytes(seed=len(name)))


NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")


@pytest.mark.parametrize("names,what,spelled", [
    ((NFC, NFD), "Unicode normalisation", ["caf\\xe9", "cafe\\u0301"]),
    (("Dent", "dent"), "case", ["'Dent'", "'dent'"]),
])
def test_lookalike_class_folders_are_refused_unless_classes_names_both(tmp_path, names, what, spelled):
    _make_class_dirs(tmp_path / "d", *names)
    with pytest.raises(IndexBuildError, match=f"differ only in {what}") as e:
        SampleIndex.from_folder(tmp_path / "d", progress=False)
    for word in [*spelled, "Rename one folder", "classes="]:
        assert word in str(e.value), (word, str(e.value))
    index = SampleIndex.from_folder(tmp_path / "d", classes=sorted(names), progress=False)
    assert index.classes == tuple(sorted(names)) and list(index.class_counts()) == [1, 1]


def test_lookalike_class_folders_across_splits_are_refused(tmp_path):
    _make_class_dirs(tmp_path / "d" / "train", "Dent")
    _make_class_dirs(tmp_path / "d" / "val", "dent")
    with pytest.raises(IndexBuildError, match="'Dent' and 'dent'"):
        SampleIndex.from_folder(tmp_path / "d", split="train", progress=False)


def test_lookalike_manifest_labels_are_refused_unless_classes_names_both(tmp_path):
    for i in range(2):
        write(tmp_path / f"{i}.jpg", jpeg_bytes(seed=i))
    (tmp_path / "m.csv").write_text(f"path,label\n0.jpg,{NFC}\n1.jpg,{NFD}\n")
    with pytest.raises(ManifestError, match="differ only in Unicode normalisation") as e:
        SampleIndex.from_manifest(tmp_path / "m.csv", progress=False)
    assert "m.csv" in str(e.value) and "classes=" in str(e.value)
    index = SampleIndex.from_manifest(tmp_path / "m.csv", classes=[NFC, NFD], progress=False)
    assert list(index.class_counts()) == [1, 1]


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_manifest_path_with_spaces_is_used_as_written_when_that_file_exists(tmp_path, suffix):
    write(tmp_path / " lead.jpg", jpeg_bytes(seed=0))  # a name that really starts with a space
    write(tmp_path / "trail.jpg", jpeg_bytes(seed=1))  # listed with spaces around it
    entries = {" lead.jpg": "ok", "  trail.jpg ": "ok", " gone.jpg": "ok"}
    manifest = tmp_path / f"m{suffix}"
    if suffix == ".json":
        manifest.write_text(json.dumps(entries))
    else:
        manifest.write_text("path,label\n" + "".join(f"{p},{lab}\n" for p, lab in entries.items()))
    index = SampleIndex.from_manifest(manifest, progress=False)
    assert sorted(index.paths) == [" lead.jpg", "trail.jpg"]
    assert [(r.path, r.reason) for r in index.rejected] == [("gone.jpg", "missing file")]


# ------------------------------------------------------------------ 12. crafted index files
def _crafted_index(path: Path, n: int, like: Path, lengths: str) -> None:
    """An index file of deflated zeros declaring ``n`` samples (``lengths="consistent"``: every array agrees;
    ``"labels only"``: only labels is huge), with the metadata of the real index ``like``."""
    with np.load(like) as z:
        meta = z["meta"]
    dtypes = {"path_offsets": "<i8", "labels": "<i8", "sizes": "<i8", "mtimes": "<i8", "widths": "<i4",
              "heights": "<i4"}
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("path_data.npy", _npy_header("|u1", 0))
        zf.writestr("meta.npy", _npy_header("|u1", meta.size) + meta.tobytes())
        for name, dt in dtypes.items():
            count = (n + (name == "path_offsets")) if lengths == "consistent" or name == "labels" else 4
            with zf.open(f"{name}.npy", "w", force_zip64=True) as m:
                m.write(_npy_header(dt, count))
                left = count * np.dtype(dt).itemsize
                while left:
                    m.write(chunk[:min(left, len(chunk))])
                    left -= min(left, len(chunk))


def _npy_header(descr: str, count: int) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": (count,)})
    return buf.getvalue()


@pytest.mark.parametrize("lengths", ["consistent", "labels only"])
def test_crafted_index_of_deflated_zeros_is_refused_fast_without_memory(index, tmp_path, lengths):
    index.save(tmp_path / "real.npz")
    path = tmp_path / "crafted.npz"
    n = 10_000_000  # 400 MB of arrays when inflated
    _crafted_index(path, n, tmp_path / "real.npz", lengths)
    assert path.stat().st_size < 4 << 20
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(IndexFileError) as e:
            SampleIndex.load(path)
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 2.0 and peak < 16 << 20, (elapsed, peak)
    assert str(path) in str(e.value) and "rebuild" in str(e.value)
    assert ("refused before inflating" if lengths == "consistent" else "entries for") in str(e.value)


def test_real_compressed_index_still_loads(index, tmp_path):
    """A saved index recompressed with np.savez_compressed (inflates a few times) is no false alarm."""
    index.save(tmp_path / "i.npz")
    with np.load(tmp_path / "i.npz") as z:
        arrays = {k: z[k] for k in z.files}
    np.savez_compressed(tmp_path / "c.npz", **arrays)
    assert SampleIndex.load(tmp_path / "c.npz").fingerprint == index.fingerprint
