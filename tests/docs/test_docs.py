"""The documentation's examples run, its command lines parse, and the site builds (issue 25).

Every fenced ``python`` block of ``docs/**/*.md`` and ``README.md`` is executed; the blocks of one page
run in order in one namespace (a page reads as one session), in a fresh temporary folder holding a
small synthetic data set laid out as the pages assume:

* ``data/train/<class>/*.jpg`` and ``data/val/<class>/*.jpg``: the classes ``dent``, ``normal``,
  ``scratch`` (80/13/7, :func:`dali_backend.core.synthetic.generate_defect_dataset`), small images;
* ``raw/``: files named the way a line's raw export names them, for the keyword examples (beside
  ``data/``, which holds splits only);
* ``lines/<class>/<run>/frame<N>.jpg``: a line camera's sequences for the clips guide (``normal/run1``
  10 frames, ``normal/run2`` 6, ``scratch/run3`` 8, ``scratch/run4`` 3).

Every fenced ``bash`` block's ``dali-backend ...`` / ``python -m dali_backend ...`` / ``python -m bench
...`` lines are parsed by the real argument parser in that folder (flags, choices and argument types
checked, nothing run), and run for real when an HTML comment right above the block says
``<!-- docs-test: run -->``. A block that cannot run here (a GPU, torchrun, torchvision) carries
``<!-- docs-test: skip: why -->`` right above it; such blocks are few, and each says why.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]
MAX_SKIPPED = 6  # not-run python blocks, all pages together: keep them few

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*docs-test:\s*(?P<kind>skip|run)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$")
OUR_COMMANDS = (("dali-backend",), ("python", "-m", "dali_backend"), ("python", "-m", "bench"))


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    mark: str | None  # "skip" or "run"
    reason: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        body = "\n".join(line[len(m["indent"]):] for line in m["body"].splitlines())
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m["lang"], body,
                         mark["kind"] if mark else None, (mark["reason"] or "") if mark else ""))
    return out


def commands(block: Block) -> list[list[str]]:
    """Our command lines in a shell block, as argument lists after the program (comments dropped)."""
    out = []
    for line in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        for prefix in OUR_COMMANDS:
            if tuple(words[:len(prefix)]) == prefix:
                args = words[len(prefix):]
                out.append(["bench", *args] if prefix[-1] == "bench" else args)
    return out


def make_data(folder: Path) -> None:
    from dali_backend.core.synthetic import generate_defect_dataset

    generate_defect_dataset(folder / "data" / "train", n=24, size=(64, 48), seed=0, progress=False)
    generate_defect_dataset(folder / "data" / "val", n=12, size=(64, 48), seed=1, progress=False)
    raw = folder / "raw"
    sources = sorted((folder / "data" / "train").rglob("*.jpg"))
    names = ["line1/IMG_OK_001.jpg", "line1/IMG_OK_002.jpg", "line1/good_003.jpg", "line2/scratch_004.jpg",
             "line2/划痕/005.jpg", "line2/DentLeft_006.jpg", "line2/pit_007.jpg", "line3/unsorted_008.jpg"]
    for name, src in zip(names, sources):
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        (raw / name).write_bytes(src.read_bytes())
    runs = {"normal/run1": 10, "normal/run2": 6, "scratch/run3": 8, "scratch/run4": 3}
    k = 0
    for run, frames in runs.items():
        for n in range(1, frames + 1):
            target = folder / "lines" / run / f"frame{n}.jpg"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(sources[k % len(sources)].read_bytes())
            k += 1


def parse_only(args: list[str]) -> None:
    """``args`` through the real parser (types and choices checked), without running the command."""
    from dali_backend.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(args)
    except SystemExit as e:
        if e.code:
            raise AssertionError(f"dali-backend {shlex.join(args)}: {err.getvalue().strip()}") from None


def run_cli(args: list[str]) -> None:
    from dali_backend.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code
    assert rc == 0, f"dali-backend {shlex.join(args)} exited {rc}: {err.getvalue().strip()[-2000:]}"


def strict_warnings() -> None:
    """An example must not trigger the library's warnings about its own use (an argument without effect,
    CLAHE after a resampling operation); running on the CPU fallback here is expected."""
    from dali_backend import FallbackWarning
    from dali_backend.core.augment import AmplificationWarning

    warnings.filterwarnings("error", message="DaliLoader: ")
    warnings.filterwarnings("error", category=AmplificationWarning)
    warnings.filterwarnings("ignore", category=FallbackWarning)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # num_workers=8 on a small CI machine


def close_loaders() -> None:
    """Close every loader the examples left open (some live inside a framework's objects): their
    workers would otherwise outlive the test until the interpreter exits."""
    import gc

    from dali_backend import DaliLoader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on some of torch's deprecated aliases warns
        loaders = [obj for obj in gc.get_objects() if isinstance(obj, DaliLoader)]
    for loader in loaders:
        loader.close()


def runnable(page: Path) -> list[Block]:
    """The blocks of ``page`` the test runs or parses, in page order."""
    return [b for b in blocks(page) if b.mark != "skip" and (b.lang == "python" or (b.lang == "bash" and commands(b)))]


EXAMPLE_PAGES = [p for p in PAGES if runnable(p)]


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=[str(p.relative_to(ROOT)) for p in EXAMPLE_PAGES])
def test_examples_run(page, tmp_path, monkeypatch):
    todo = runnable(page)
    make_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # num_workers="auto" caches its choice there
    namespace: dict = {"__name__": "__main__"}
    try:
        for block in todo:
            if block.lang == "python":
                with warnings.catch_warnings():
                    strict_warnings()
                    with contextlib.redirect_stdout(io.StringIO()):
                        exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102 - our own docs
            else:
                for args in commands(block):
                    (run_cli if block.mark == "run" else parse_only)(args)
    finally:
        close_loaders()


def test_every_skip_says_why_and_skips_are_few():
    skipped = [b for page in PAGES for b in blocks(page) if b.mark == "skip"]
    assert all(b.reason for b in skipped), [b.where for b in skipped if not b.reason]
    assert len([b for b in skipped if b.lang == "python"]) <= MAX_SKIPPED, [b.where for b in skipped]
    assert not [b.where for b in skipped if b.lang not in ("python", "bash")]


def test_every_page_is_in_the_nav_and_every_python_block_is_python():
    import ast

    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in DOCS.rglob("*.md"):
        assert str(page.relative_to(DOCS)) in nav, f"{page.relative_to(ROOT)}: add it to the nav of mkdocs.yml"
    for page in PAGES:
        for b in blocks(page):
            if b.lang == "python":
                ast.parse(b.code, b.where)  # a skipped block must still be valid Python


def docs_hooks():
    """scripts/docs_hooks.py, the mkdocs hooks that generate pages (needs the docs extra: mkdocs)."""
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]'; the test extra includes it)")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_hooks as hooks
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return hooks


def test_the_cli_reference_lists_every_flag_of_the_parser():
    """The command-line page is generated from the parser at build time; check what it holds."""
    cli_markdown = docs_hooks().cli_markdown
    import argparse

    from dali_backend.cli import build_parser

    page = cli_markdown()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert f"## `{name}`" in page
        for action in p._actions:
            if action.help != argparse.SUPPRESS:
                for flag in action.option_strings:
                    assert f"`{flag}" in page, f"{name} {flag} missing from the CLI reference"


def test_the_metrics_reference_names_every_metric():
    """The metrics page is generated from dali_backend.telemetry.METRICS at build time; check what it holds."""
    from dali_backend.telemetry import METRICS

    page = docs_hooks().metrics_markdown()
    assert all(f"| `{name}` |" in page for name in METRICS)


def test_operation_tables_name_every_operation():
    """The generated torchvision table of docs/guides/torchvision.md covers every registered operation."""
    torchvision_table = docs_hooks().torchvision_table
    from dali_backend.transforms import REGISTRY

    table = torchvision_table()
    assert all(f"`{name}`" in table for name in REGISTRY)


def test_the_reference_names_every_public_name():
    """Each name a package exports (``__all__``) is on the reference's index page, with its page."""
    import fallback
    from dali_backend import __all__ as top
    from dali_backend.transforms import __all__ as ops

    page = (DOCS / "reference" / "index.md").read_text(encoding="utf-8")
    missing = [name for name in [*top, *ops, *fallback.__all__] if f"`{name}`" not in page]
    assert not missing, f"docs/reference/index.md: add {missing}"


def test_the_site_builds_offline_with_warnings_as_errors(tmp_path):
    """``make docs`` as CI runs it: ``mkdocs build --strict`` (broken links, unknown references and
    docstring warnings fail), here into a temporary folder. A few seconds: not marked slow."""
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]'; the test extra includes it)")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "cli.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "throughput.png").is_file()
