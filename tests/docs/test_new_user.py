"""Issue 20: a new user's messy factory share (Chinese folder names, .JPG/.jpeg, junk files, a CSV exported
on Windows), and the command line, summaries, errors and splits that user met."""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import jpeg_bytes, with_exif_orientation, write
from tests.helpers import run_cli
from dali_backend import AugmentSpec, ConfigError, ImageDataset, IndexBuildError, ManifestError, SampleIndex
from dali_backend.cli import build_parser
from dali_backend.index import INDEX_CLI_FLAGS
from dali_backend.core.labelling import KeywordRules
from dali_backend.transforms import Grayscale, Normalize, RandomHorizontalFlip, RandomResizedCrop, Resize

ROOT = Path(__file__).resolve().parents[2]
CN_RULES = {"normal": ["正常"], "scratch": ["划痕"], "dent": ["凹坑"]}


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def share(tmp_path) -> Path:
    """The factory share: Chinese class folders (one with a date suffix), .JPG/.jpeg names, an EXIF phone
    photo, colour and gray files, junk files and a file that is not a JPEG."""
    root = tmp_path / "共享" / "检测图片"
    files = {"正常/IMG_0001.JPG": 0, "正常/IMG_0002.jpeg": 1, "正常/手机/IMG_0003.JPG": 2,
             "划痕_2024/a.jpg": 3, "划痕_2024/b.JPG": 4, "左侧划痕区/c.jpg": 5, "凹坑/d.jpeg": 6, "凹坑/e.JPEG": 7}
    for rel, seed in files.items():
        data = jpeg_bytes(seed=seed, color=seed % 2 == 0)
        write(root / rel, with_exif_orientation(data, 6) if "手机" in rel else data)
    write(root / "凹坑" / "broken.jpg", b"not a jpeg")
    write(root / "Thumbs.db", b"junk")
    write(root / "正常" / "说明.txt", "备注".encode())
    write(root / ".DS_Store", b"junk")
    return root


# ------------------------------------------------------------------------------------ 1. keywords, any script
def test_chinese_keywords_label_folder_names_exactly_and_inside_longer_names(share):
    index = SampleIndex.from_keywords(share, CN_RULES, progress=False)
    got = {p: index.classes[k] for p, k in zip(index.paths, index.labels)}
    assert got == {"正常/IMG_0001.JPG": "normal", "正常/IMG_0002.jpeg": "normal", "正常/手机/IMG_0003.JPG": "normal",
                   "划痕_2024/a.jpg": "scratch", "划痕_2024/b.JPG": "scratch", "左侧划痕区/c.jpg": "scratch",
                   "凹坑/d.jpeg": "dent", "凹坑/e.JPEG": "dent"}
    assert [r.path for r in index.rejected] == ["凹坑/broken.jpg"]  # rejected for its content, not unlabelled


def test_keyword_matching_rules_ascii_words_other_scripts_substrings():
    rules = KeywordRules({"deep": ["深划痕"], "scratch": ["划痕", "scratch"], "dent": ["凹坑"], "ok": ["ok"],
                          "defect": ["défaut"]})
    cases = {
        "划痕_2024/1.jpg": "scratch", "2024划痕/1.jpg": "scratch", "x/左侧划痕.jpg": "scratch",
        "深划痕/1.jpg": "deep",  # the longer keyword matched at the same place wins
        "x/IMG_OK_3.jpg": "ok", "ＯＫ/1.jpg": "ok",  # full-width letters fold to ASCII (NFKC)
        "x/token.jpg": None,  # ASCII keywords stay whole words
        "划痕scratch/1.jpg": "scratch", "x/DÉFAUTS_7.jpg": "defect",  # case-folded, substring for non-ASCII
        unicodedata.normalize("NFD", "défaut") + "/1.jpg": "defect",  # a decomposed (macOS) name matches
    }
    for rel, want in cases.items():
        assert rules.label(rel)[0] == want, (rel, rules.label(rel))
    negated = KeywordRules({"normal": ["正常"], "defect": ["不正常"]})
    assert negated.label("不正常/1.jpg")[0] == "defect" and negated.label("正常/1.jpg")[0] == "normal"
    cls, reason = rules.label("x/划痕凹坑.jpg")
    assert cls is None and "ambiguous" in reason and "划痕" in reason and "凹坑" in reason
    cls, reason = rules.label("x/other.jpg")
    assert cls is None and "no keyword matched" in reason and "scratch: scratch/划痕" in reason


@pytest.mark.parametrize("rules,words", [
    ({"a": ["x-y"]}, ["'x-y'", "letters and digits"]),
    ({"a": ["ng2"]}, ["'ng2'", "ASCII keyword must be letters only"]),
    ({"a": "划痕"}, ["the string '划痕'", "list of keywords"]),
    ({"a": []}, ["'a'", "empty"]),
    ({"a": ["划痕"], "b": ["划痕"]}, ["both 'a' and 'b'"]),
])
def test_bad_keyword_rules_name_the_keyword_and_the_fix(rules, words):
    with pytest.raises(ConfigError) as e:
        KeywordRules(rules)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_cli_keyword_rules_in_chinese_and_bad_rules_name_the_flag(share, tmp_path, capsys):
    rules = '{"normal": ["正常"], "scratch": ["划痕"], "dent": ["凹坑"]}'
    rc, out, err = run_cli(["-q", "index", str(share), "--keyword-rules", rules, "--out", str(tmp_path / "k.npz")], capsys)
    assert rc == 0, err
    assert len(SampleIndex.load(tmp_path / "k.npz")) == 8
    for bad in ('{"a": ["x-y"]}', "{}"):
        rc, _, err = run_cli(["index", str(share), "--keyword-rules", bad, "--out", str(tmp_path / "x.npz")], capsys)
        assert rc == 2 and "--keyword-rules" in one_error_line(err)


# ------------------------------------------------------------------------------------ 2. a CSV saved on Windows
def _windows_csv(root: Path, encoding: str, header: str = "文件名,类别", bom: bool = False) -> Path:
    rows = [header] + [f"{p.parent.name}\\{p.name},{p.parent.name}" for p in sorted(root.glob("*/*.JPG"))]
    text = "\r\n".join(rows) + "\r\n"
    path = root / "labels.csv"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode(encoding))
    return path


@pytest.fixture
def cn_root(tmp_path) -> Path:
    root = tmp_path / "data"
    for i, cls in enumerate(["划痕", "凹坑", "正常"] * 2):
        write(root / cls / f"img{i}.JPG", jpeg_bytes(seed=i))
    return root


def test_windows_csv_with_bom_crlf_and_backslash_paths_reads(cn_root):
    path = _windows_csv(cn_root, "utf-8", header="path,label", bom=True)
    index = SampleIndex.from_manifest(path, progress=False)
    assert len(index) == 6 and not index.rejected
    assert set(index.classes) == {"划痕", "凹坑", "正常"}
    assert all("/" in p and "\\" not in p for p in index.paths)


def test_a_file_really_named_with_a_backslash_wins(tmp_path):
    write(tmp_path / "a\\b.jpg", jpeg_bytes(seed=1))  # one file in the root, a backslash in its name
    write(tmp_path / "a" / "b.jpg", jpeg_bytes(seed=2))
    write(tmp_path / "c" / "d.jpg", jpeg_bytes(seed=3))
    (tmp_path / "m.json").write_text('{"a\\\\b.jpg": "x", "c\\\\d.jpg": "y"}')
    index = SampleIndex.from_manifest(tmp_path / "m.json", progress=False)
    assert sorted(index.paths) == ["a\\b.jpg", "c/d.jpg"]


def test_gbk_csv_names_file_line_offset_and_encoding_fix(cn_root):
    path = _windows_csv(cn_root, "gbk", header="path,label")
    with pytest.raises(ManifestError) as e:
        SampleIndex.from_manifest(path, progress=False)
    text = str(e.value)
    assert str(path) in text and "line 2 is not UTF-8" in text and "at offset 12)" in text  # after "path,label\r\n"
    assert "save the manifest as UTF-8" in text and "encoding='gbk' (CLI: --encoding gbk) it reads '凹坑\\\\img1.JPG,凹坑'" in text
    index = SampleIndex.from_manifest(path, encoding="gbk", progress=False)
    assert len(index) == 6 and set(index.classes) == {"划痕", "凹坑", "正常"}
    with pytest.raises(ConfigError, match="encoding='klingon'"):
        SampleIndex.from_manifest(path, encoding="klingon", progress=False)


def test_cli_reads_a_gbk_csv_with_chinese_column_names(cn_root, tmp_path, capsys):
    path = _windows_csv(cn_root, "gbk")
    out_file = str(tmp_path / "i.npz")
    rc, _, err = run_cli(["index", str(cn_root), "--manifest", str(path), "--out", out_file], capsys)
    line = one_error_line(err)
    assert rc == 2 and "--encoding gbk" in line and "encoding=" not in line and "offset 0" in line
    rc, _, err = run_cli(["index", str(cn_root), "--manifest", str(path), "--encoding", "gbk", "--out", out_file], capsys)
    line = one_error_line(err)  # the header names no known column: the flags to pass, with the column names
    assert rc == 2 and "pass --path-column '文件名' and --label-column '类别'" in line
    assert "path_column" not in line and "label_column" not in line
    rc, _, err = run_cli(["-q", "index", str(cn_root), "--manifest", str(path), "--encoding", "gbk", "--path-column", "文件名",
                          "--label-column", "类别", "--classes", "正常,划痕,凹坑", "--out", out_file], capsys)
    assert rc == 0, err
    index = SampleIndex.load(out_file)
    assert index.classes == ("正常", "划痕", "凹坑") and list(index.class_counts()) == [2, 2, 2]


def test_manifest_whose_files_are_all_missing_says_the_paths_must_be_relative_to_the_root(cn_root, tmp_path):
    (tmp_path / "m.csv").write_text("path,label\nimgs/0.jpg,ok\nimgs/1.jpg,ok\n")
    with pytest.raises(IndexBuildError, match="No listed file exists under .*relative to it.*pass root="):
        SampleIndex.from_manifest(tmp_path / "m.csv", root=cn_root, progress=False)


# ------------------------------------------------------------------------------------ 3. every option has a flag
def _index_subparser():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices["index"], sub.choices


def test_every_builder_option_has_an_index_flag():
    index_parser, _ = _index_subparser()
    flags = {s for a in index_parser._actions for s in a.option_strings} | {"ROOT"}
    metavars = {a.metavar for a in index_parser._actions}
    for builder in (SampleIndex.from_folder, SampleIndex.from_manifest, SampleIndex.from_keywords):
        for name in inspect.signature(builder).parameters:
            # --manifest, --keyword-rules; progress is automatic; storage_options: on the command line
            # credentials and the endpoint come from AWS_* variables and profiles (never from a flag: shell history)
            if name in ("cls", "path", "rules", "progress", "storage_options"):
                continue
            if name == "targets":  # a reader's table (mvtec_masks, suffix_masks, read_coco, ...): built by these flags
                assert {"--masks", "--mask-dir", "--mask-classes", "--annotations", "--box-classes"} <= flags
                continue
            assert name in INDEX_CLI_FLAGS, (builder.__name__, name)
    for keyword, flag in INDEX_CLI_FLAGS.items():
        assert flag in flags or flag in metavars, (keyword, flag)


def test_flags_that_do_not_apply_are_refused(share, tmp_path, capsys):
    out = ["--out", str(tmp_path / "x.npz")]
    cases = [(["--keywords", "--split", "train"], "--split train does not apply with --keywords"),
             (["--path-column", "f"], "--path-column applies to --manifest only"),
             (["--keywords", "--classes", "a,b"], "--classes does not apply with --keywords"),
             (["--encoding", "gbk"], "--encoding applies to --manifest only")]
    for extra, want in cases:
        rc, _, err = run_cli(["index", str(share), *extra, *out], capsys)
        assert rc == 2 and want in one_error_line(err), err


@pytest.mark.parametrize("command", ["preview", "bench", "demo"])
def test_split_layout_error_suggests_only_flags_the_command_has(command, tmp_path, capsys):
    for split in ("train", "val"):
        for cls in ("ok", "dent"):
            write(tmp_path / "d" / split / cls / "1.jpg", jpeg_bytes(seed=1))
    argv = {"preview": ["preview", str(tmp_path / "d"), "--out", str(tmp_path / "p.png")],
            "bench": ["bench", "--data", str(tmp_path / "d"), "--no-plot"],
            "demo": ["demo", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "out")]}[command]
    rc, _, err = run_cli(argv, capsys)
    line = one_error_line(err)
    assert rc == 2 and "looks like a split layout" in line
    outside_index_commands = re.sub(r"`dali-backend index [^`]*`", "", line)
    assert "--split" not in outside_index_commands and "--classes" not in outside_index_commands
    assert "split=" not in line and "classes=" not in line
    assert f"`dali-backend index {tmp_path / 'd'} --split train --out index.npz`" in line
    if command == "demo":  # demo takes a data folder only: no index file to pass
        assert "pass that file" not in line
    else:  # or point the data argument at one split (DATA, --data)
        assert f"pass {'--data ' if command == 'bench' else ''}{tmp_path / 'd' / 'train'}" in outside_index_commands
    rc, _, err = run_cli(["index", str(tmp_path / "d"), "--out", str(tmp_path / "i.npz")], capsys)
    line = one_error_line(err)
    assert rc == 2 and "Pass --split train" in line and "pass --classes train,val" in line and "split=" not in line


def test_lookalike_class_error_in_the_cli_names_the_classes_flag(tmp_path, capsys):
    write(tmp_path / "d" / "Dent" / "1.jpg", jpeg_bytes(seed=1))
    write(tmp_path / "d" / "dent" / "2.jpg", jpeg_bytes(seed=2))
    if len(list((tmp_path / "d").iterdir())) < 2:
        pytest.skip("this file system folds case in names")
    rc, _, err = run_cli(["index", str(tmp_path / "d"), "--out", str(tmp_path / "i.npz")], capsys)
    line = one_error_line(err)
    assert rc == 2 and "--classes Dent,dent" in line and "classes=" not in line
    rc, _, err = run_cli(["-q", "index", str(tmp_path / "d"), "--classes", "Dent,dent", "--out", str(tmp_path / "i.npz")],
                         capsys)
    assert rc == 0, err


# ------------------------------------------------------------------------------------ 11. smaller items
def test_summary_lists_every_rejected_and_ignored_file_and_the_report_has_them(share, tmp_path, capsys):
    for i in range(5):
        write(share / "凹坑" / f"bad{i}.jpg", b"")
    index = SampleIndex.from_keywords(share, CN_RULES, progress=False)
    assert len(index.rejected) == 6
    summary = index.summary()
    for r in index.rejected:
        assert r.path in summary
    assert "and 3 more, all listed below" in summary.splitlines()[0]
    assert index.ignored == {"hidden": 1, "other extension": 2}
    assert [(r.path, r.reason) for r in index.ignored_files] == [
        (".DS_Store", "hidden"), ("Thumbs.db", "other extension"), ("正常/说明.txt", "other extension")]
    for r in index.ignored_files:
        assert f"    {r.path}" in summary
    index.save(tmp_path / "k.npz")
    loaded = SampleIndex.load(tmp_path / "k.npz")
    assert loaded.ignored_files == index.ignored_files and loaded.summary() == index.summary()
    assert index.subset([0]).ignored_files == index.ignored_files
    rc, out, err = run_cli(["index", str(share), "--keyword-rules", '{"normal": ["正常"], "scratch": ["划痕"], '
                            '"dent": ["凹坑"]}', "--out", str(tmp_path / "c.npz")], capsys)
    assert rc == 0, err
    assert "6 rejected files and 3 ignored files listed in" in out
    report = (tmp_path / "c.npz.rejected.csv").read_text()
    assert '"Thumbs.db","ignored: other extension"' in report and '".DS_Store","ignored: hidden"' in report
    assert report.count("\n") == 1 + 6 + 3
    assert err.count("INFO") == 1 and "listed below" not in err  # the log stays one line


def test_image_dataset_with_torchvision_arguments_says_what_to_use(share):
    index = SampleIndex.from_keywords(share, CN_RULES, progress=False)
    with pytest.raises(ConfigError) as e:
        ImageDataset(index, transform=lambda x: x)
    assert "transform=" in str(e.value) and "AugmentSpec(ops=[...])" in str(e.value)
    assert "AugmentSpec.from_torchvision(compose)" in str(e.value)
    with pytest.raises(ConfigError, match="did you mean seed="):
        ImageDataset(index, seeed=1)
    with pytest.raises(ConfigError, match="target_transform="):
        ImageDataset(index, target_transform=int)
    with pytest.raises(ConfigError, match="from_torchvision"):
        ImageDataset(index, lambda x: x)


def test_readme_quick_start_imports_only_what_it_uses():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## 30-second quick start", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    tree = ast.parse(block)
    imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for a in node.names}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert imported and imported <= used, imported - used


def test_augment_spec_repr_shows_only_the_fields_that_apply():
    from dali_backend.transforms import Clahe  # noqa: F401  (for eval)

    preset = AugmentSpec(size=128, clahe=None)
    ops = AugmentSpec(ops=[RandomResizedCrop(224), RandomHorizontalFlip()])
    gray = AugmentSpec(ops=[Grayscale(), Resize((64, 64)), Normalize((0.5,), (0.2,))], channels_last=True)
    assert repr(preset).startswith("AugmentSpec(size=(128, 128), color='gray', clahe=None, rotate_deg=5.0")
    assert "ops=" not in repr(preset) and "channels_last" not in repr(preset)
    assert "None" not in repr(ops) and "], size=" not in repr(ops) and "mean=" not in repr(ops)
    assert repr(ops) == ("AugmentSpec(ops=[RandomResizedCrop(size=(224, 224), scale=(0.08, 1.0), ratio=(0.75, "
                         "1.3333333333333333), antialias=True), RandomHorizontalFlip(p=0.5)], dtype='float32')")
    assert "mean=(0.5,), std=(0.2,)" in repr(gray) and repr(gray).endswith("channels_last=True)")
    assert "mean" not in repr(AugmentSpec(dtype="uint8"))
    namespace = {**globals(), "Clahe": Clahe}
    from dali_backend import transforms

    namespace.update(vars(transforms))
    for spec in (preset, ops, gray, AugmentSpec(), AugmentSpec(dtype="uint8", fit="letterbox")):
        assert eval(repr(spec), namespace) == spec  # noqa: S307 - our own repr


def test_error_grammar_singular_and_plural():
    with pytest.raises(ConfigError) as e:
        AugmentSpec(ops=[Resize((8, 8))], size=8)
    assert "size belongs to the preset" in str(e.value) and "express it as" in str(e.value)
    with pytest.raises(ConfigError) as e:
        AugmentSpec(ops=[Resize((8, 8))], size=8, fit="letterbox")
    assert "size, fit belong to the preset" in str(e.value) and "express them as" in str(e.value)
    with pytest.raises(ConfigError) as e:
        AugmentSpec(ops=[Grayscale(), Resize((8, 8))], mean=(0.5, 0.5), std=(0.2, 0.2))
    assert "need 1 value each (the output has 1 channel)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        AugmentSpec(ops=[Resize((8, 8))], mean=(0.5, 0.5), std=(0.2, 0.2))
    assert "need 3 values each (the output has 3 channels)" in str(e.value)


def _twenty_per_class(tmp_path) -> SampleIndex:
    for cls in ("a", "b", "c"):
        for i in range(20):
            write(tmp_path / "d" / cls / f"{i}.jpg", jpeg_bytes(h=8, w=8, seed=i))
    return SampleIndex.from_folder(tmp_path / "d", verify="none", progress=False)


def test_stratified_split_gives_every_class_its_exact_share(tmp_path):
    index = _twenty_per_class(tmp_path)
    shares = []
    for seed in range(30):  # the hash split's share per class varies (why a user saw 30 %)
        _, val = index.split(0.2, seed=seed)
        shares += list(val.class_counts())
    assert max(shares) >= 6 and min(shares) <= 2
    for seed in range(5):
        train, val = index.split(0.2, seed=seed, stratify=True)
        assert list(val.class_counts()) == [4, 4, 4] and list(train.class_counts()) == [16, 16, 16]
        assert set(train.paths).isdisjoint(val.paths)
        assert list(index.split(0.2, seed=seed, stratify=True)[1].paths) == list(val.paths)  # deterministic
    assert list(index.split(0.2, seed=0, stratify=True)[1].paths) != list(index.split(0.2, seed=1, stratify=True)[1].paths)
    assert list(index.split(0.25, seed=0, stratify=True)[1].class_counts()) == [5, 5, 5]
    assert list(index.split(0.33, seed=0, stratify=True)[1].class_counts()) == [7, 7, 7]  # 6.6 rounds to 7
    with pytest.raises(ConfigError, match="val_fraction=1.5"):
        index.split(1.5, stratify=True)


def test_cli_split_stratify(tmp_path, capsys):
    _twenty_per_class(tmp_path).save(tmp_path / "i.npz")
    rc, out, err = run_cli(["split", str(tmp_path / "i.npz"), "--stratify", "--train-out", str(tmp_path / "t.npz"),
                            "--val-out", str(tmp_path / "v.npz")], capsys)
    assert rc == 0, err
    assert "val: 12 files (a 4, b 4, c 4)" in out
    assert list(SampleIndex.load(tmp_path / "v.npz").class_counts()) == [4, 4, 4]


# ------------------------------------------------------------------------------------ 12. no hard-coded registry
# SHA-256 of the package registry's host names (the index and its file host), so that this test can look
# for them without writing them into the repository itself.
REGISTRY_HOST_SHA256 = {"a4aa2ac280bb8d1a0ce7a1be5a7bfb10292b49fe9435ad5cff19f421f3c70e41",
                        "c899567ee906851741bf7f3bde17a33777859ff9f53ff54d6f0ea54cf31ad636"}


def registry_hosts_named(text: str) -> list[str]:
    """The dotted names in ``text`` (host-like words, ``a.b``) whose SHA-256 is a registry host's."""
    words = re.findall(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+", text)
    return [w for w in words if hashlib.sha256(w.lower().encode()).hexdigest() in REGISTRY_HOST_SHA256]


def test_registry_host_check_finds_a_host_written_in_any_case():
    """The check above cannot pass vacuously: the hashes are the hosts' (built here from parts, never
    written whole), found in a URL, a bare word and upper case."""
    host = ".".join(("pypi", "org"))
    files = ".".join(("files", "pythonhosted", "org"))
    for text in (f"pip install -i https://{host}/simple x", f"see {host.upper()}.", f"https://{files}/packages/a"):
        assert registry_hosts_named(text), text
    assert not registry_hosts_named("https://download.pytorch.org/whl/cpu and example.org")

def test_bootstrap_names_no_package_index():
    """PyPI comes from pip's own configuration: never named, never replaced (no --index-url). The only
    URL is PyTorch's CPU wheel index (torch's +cpu builds, not a general registry), added as an extra
    index when reachable, so a CPU laptop on plain PyPI does not pull a multi-GB CUDA torch."""
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    for path in ("scripts/bootstrap.sh", "Makefile", ".ci/run"):
        named = registry_hosts_named((ROOT / path).read_text())
        assert not named, f"{path} names the package registry's host ({len(named)} times)"
    assert "--index-url" not in script.replace("--extra-index-url", "")
    urls = [line for line in script.splitlines() if "://" in line and not line.lstrip().startswith("#")]
    assert len(urls) == 1 and "download.pytorch.org/whl/cpu" in urls[0] and "TORCH_CPU_INDEX-" in urls[0]
    assert "TORCH_CPU_INDEX" in script
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "bootstrap.sh")], check=True)


def test_cli_error_messages_stay_one_line(share, tmp_path, capsys):
    rc, _, err = run_cli(["index", str(share), "--out", str(tmp_path / "x.npz"), "--classes", "a,a"], capsys)
    assert rc == 2 and "'a' more than once" in one_error_line(err)
    assert np.all([line.startswith("dali-backend index: error:") for line in err.splitlines() if line])


def test_a_utf16_csv_with_its_byte_order_mark_reads_without_options(tmp_path):
    """Excel's "Unicode Text" export: UTF-16 with a byte-order mark, which says the encoding itself."""
    from tests.helpers import jpeg_bytes, write

    write(tmp_path / "data" / "scratch" / "a.jpg", jpeg_bytes(seed=1))
    write(tmp_path / "data" / "normal" / "b.jpg", jpeg_bytes(seed=2))
    manifest = tmp_path / "labels.csv"
    manifest.write_bytes("path,label\r\nscratch\\a.jpg,scratch\r\nnormal/b.jpg,normal\r\n".encode("utf-16"))
    index = SampleIndex.from_manifest(manifest, root=tmp_path / "data", progress=False)
    assert len(index) == 2 and sorted(index.classes) == ["normal", "scratch"]


def test_make_demo_installs_the_package_alone_and_make_test_the_test_stack(tmp_path):
    """``make demo`` bootstraps the package with no extra (the demo runs on its own dependencies), ``make
    test`` with the test extra (issue 36: the demo installed the whole test stack, 3.1 GB)."""
    def planned(target: str) -> list[str]:
        out = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}"], capture_output=True,
                             text=True, check=True).stdout
        return [line for line in out.splitlines() if "bootstrap.sh" in line]

    assert planned("demo") == [f'scripts/bootstrap.sh {tmp_path / "venv"} ""']
    assert planned("test") == [f"scripts/bootstrap.sh {tmp_path / 'venv'} test"]
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert 'extras="${2-test}"' in script and '-e "$here${extras:+[$extras]}"' in script


def test_the_demo_imports_nothing_of_the_test_stack(tmp_path):
    """What ``make demo`` runs (a small demo, for real) needs the package's own dependencies only."""
    code = ("import sys; from dali_backend.cli import main; "
            f"rc = main(['demo', '--images', '8', '--size', '64x48', '--out-size', '32', '--epochs', '1', '--workers', "
            f"'1', '--out', {str(tmp_path / 'out')!r}, '--cache', {str(tmp_path / 'cache')!r}]); "
            "heavy = {'lightning', 'accelerate', 'ray', 'moto', 'mkdocs', 'tensorboard', 'matplotlib', 'pytest', "
            "'boto3', 'torchvision'}; print(rc, sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stdout[-2000:]
    assert (tmp_path / "out" / "preview.png").is_file()


@pytest.mark.skipif(bool(shutil.which("nvidia-smi")), reason="the script's GPU branch would install a CUDA torch")
@pytest.mark.parametrize("with_torch", [False, True], ids=["fresh-env", "cpu-torch-kept"])
def test_bootstrap_with_torchvision_refuses_a_cpu_machine_without_a_cpu_index(tmp_path, with_torch):
    """WITH_TORCHVISION=1 on a machine without a GPU and without a CPU wheel index: the registry's
    torchvision is built for its CUDA torch and fails beside a CPU one (operator torchvision::nms does
    not exist), so the script stops before installing anything and says what to do; in a fresh env and
    in one whose CPU torch it keeps (this test's own, seen through a .pth file)."""
    import torch

    if with_torch and "+cpu" not in torch.__version__:
        pytest.skip(f"needs a CPU build of torch here, not {torch.__version__}")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    if with_torch:
        (site,) = (venv / "lib").glob("python*/site-packages")
        (site / "outer.pth").write_text(str(Path(torch.__file__).parents[1]) + "\n")
    env = {**os.environ, "WITH_TORCHVISION": "1", "TORCH_CPU_INDEX": "", "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), str(venv), ""], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "torchvision::nms" in proc.stderr and "TORCH_CPU_INDEX" in proc.stderr
    assert not list((venv / "lib").glob("python*/site-packages/torch*"))  # nothing installed
