"""mkdocs hooks (mkdocs.yml ``hooks:``): pages generated at build time, so that nothing is copied by hand.

* ``reference/cli.md``: the command-line reference, read from the argparse parser itself
  (:func:`dali_backend.cli.build_parser`, which also holds ``python -m bench``'s arguments): every
  command, its usage line, arguments, choices and help text. A flag added to the parser is on the
  site at the next build; ``tests/docs/test_docs.py`` checks the page lists every flag.
* ``reference/metrics.md``: every name ``loader.metrics()`` returns, its unit and meaning, from
  :data:`dali_backend.telemetry.METRICS` (and how each stage is measured, per backend).
* the table of supported operations in ``guides/torchvision.md`` (where the page says
  ``<!-- generated: torchvision-operations -->``), from the operation registry: every torchvision
  transform :meth:`AugmentSpec.from_torchvision` translates, and to what.
* ``benchmarks/*.png``: charts drawn with matplotlib from the measured tables of
  ``docs/benchmarks.md``. A table is charted when an HTML comment right above it says so::

      <!-- chart: throughput.png | title line -->     bars of the "img/s" column per contender
      <!-- chart: sizes.png | title line -->          "ratio to the ceiling" lines per source size

  so the numbers live in one place (the page) and the chart cannot disagree with them.

Runs with the checkout's own code: this file puts the repository root first on ``sys.path``
(``bench`` and ``dali_backend`` of the installed package could be another checkout's).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLI_PAGE = "reference/cli.md"
METRICS_PAGE = "reference/metrics.md"
USAGE_COLUMNS = "100"  # argparse wraps usage lines to $COLUMNS: fixed, so the page is the same on every machine


# ------------------------------------------------------------------------------ command line
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        if action.metavar is not None:
            value = f" {action.metavar}"
        elif action.choices is not None:
            value = ""
        else:
            value = f" {action.dest.upper()}"
        if action.nargs == "*":
            value = f" [{value.strip() or action.dest.upper()} ...]"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:  # noqa: SLF001 - argparse keeps them here; there is no public accessor
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            continue
        text = action.help or ""
        if action.choices is not None:
            text += ("; " if text else "") + "one of " + ", ".join(f"`{c}`" for c in action.choices)
        if action.required and action.option_strings:
            text += " (required)"
        rows.append(f"| {_flags(action)} | {_cell(text)} |")
    return rows


def _usage(parser: argparse.ArgumentParser) -> str:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = USAGE_COLUMNS
    try:
        return parser.format_usage().strip()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _command_section(level: str, title: str, parser: argparse.ArgumentParser) -> list[str]:
    out = [f"{level} `{title}`", ""]
    if parser.description:
        out += [parser.description[0].upper() + parser.description[1:] + ("" if parser.description.endswith(".") else "."),
                ""]
    out += ["```text", _usage(parser), "```", ""]
    rows = _argument_rows(parser)
    if rows:
        out += ["| argument | meaning |", "| --- | --- |", *rows, ""]
    if parser.epilog:
        out += [parser.epilog, ""]
    return out


def cli_markdown() -> str:
    """The command-line reference page, from :func:`dali_backend.cli.build_parser`."""
    from dali_backend.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    helps = {c.dest: c.help for c in sub._choices_actions}  # noqa: SLF001
    out = ["# Command line", "",
           "<!-- generated at build time from dali_backend.cli.build_parser() by scripts/docs_hooks.py: "
           "edit the parser, not this page -->", "",
           "`dali-backend` is installed with the package; `python -m dali_backend` is the same program, and "
           "`python -m bench` takes the same arguments as `dali-backend bench`. This page is generated from the "
           "argument parser when the site is built, so it lists exactly what `--help` shows.", "",
           "| command | what it does |", "| --- | --- |"]
    out += [f"| [`{name}`](#{name}) | {_cell(helps.get(name) or '')} |" for name in sub.choices]
    out += ["", "Where an index file is read (`split`, `preview`, `bench --data`), `--root DIR` loads it for data "
            "that moved since indexing and `--no-check` skips the size/mtime check "
            "(`SampleIndex.load(path, root=..., check=\"none\")`).", "",
            "`-q` (warnings and errors only) and `-v` (debug: resolved arguments, backend choice, per-batch and "
            "per-stage timings) go before or after the subcommand. Results go to stdout; log lines (index summary, "
            "backend choice) to stderr. A wrong argument or a failed command prints one line on stderr naming the "
            "argument, the value and the fix, and exits with status 2. Errors name the command's own flags "
            "(`--path-column`, not `path_column=`); where a fix needs an option the command lacks (`preview` and "
            "`bench --data` have no `--split`), the message gives the `dali-backend index` command to run instead.",
            ""]
    out += _command_section("##", "dali-backend", parser)
    for name, subparser in sub.choices.items():
        section = _command_section("##", f"dali-backend {name}", subparser)
        section[0] = f"## `{name}` {{ #{name} }}"
        out += section
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------ operations
TORCHVISION_MARK = "<!-- generated: torchvision-operations -->"
_KIND = {"geometric": "geometric: moves pixels, may change the size", "photometric": "photometric: changes values",
         "output": "output: dtype and normalisation, once per batch",
         "batch": "batch: on the normalised batch, after Normalize"}


def torchvision_table() -> str:
    """Markdown table: each operation of :mod:`dali_backend.transforms`, the torchvision transforms it
    stands for, and its kind; then the torchvision conversions that translate to nothing."""
    from dali_backend.transforms import REGISTRY
    from dali_backend.transforms.torchvision import PASS_THROUGH

    rows = ["| operation (`dali_backend.transforms`) | translates torchvision's | kind |", "| --- | --- | --- |"]
    order = list(_KIND)
    for name, cls in sorted(REGISTRY.items(), key=lambda item: (order.index(item[1].KIND), item[0])):
        names = ", ".join(f"`{t}`" for t in getattr(cls, "TORCHVISION", ())) or "(none: write it in `ops=[...]`)"
        rows.append(f"| [`{name}`](../reference/transforms.md#dali_backend.transforms.{cls.__module__.rsplit('.', 1)[-1]}"
                    f".{name}) | {names} | {_KIND.get(cls.KIND, cls.KIND)} |")
    rows.append(f"| (nothing: the loaders make tensors anyway) | {', '.join(f'`{t}`' for t in PASS_THROUGH)} | |")
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------------------ charts
_CHART = re.compile(r"<!-- chart: (?P<file>[\w.-]+\.png) \| (?P<title>.+?) -->\s*\n(?P<table>(?:\|.*\n?)+)")


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = [line.strip().strip("|").split("|") for line in text.strip().splitlines()]
    head = [c.strip() for c in lines[0]]
    return head, [[c.strip() for c in row] for row in lines[2:]]


def _number(cell: str) -> float | None:
    m = re.match(r"-?\d+(?:\.\d+)?", cell.replace("`", ""))
    return float(m.group()) if m else None


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=96, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def throughput_chart(head: list[str], rows: list[list[str]], title: str) -> bytes:
    """Horizontal bars of the ``img/s`` column, one per contender (the first cell's code name)."""
    names = [re.search(r"`([^`]+)`", r[0]).group(1) if "`" in r[0] else r[0] for r in rows]
    col = head.index("img/s")
    values = [_number(r[col]) for r in rows]
    fig = _figure(7.5, 0.9 + 0.42 * len(rows))
    ax = fig.add_subplot()
    y = list(range(len(rows)))[::-1]
    colors = ["tab:green" if "dali" in n else "tab:gray" if n in ("ceiling", "reference") else "tab:blue" for n in names]
    ax.barh(y, values, color=colors)
    ax.set_yticks(y, names)
    for yi, v in zip(y, values):
        ax.text(v, yi, f"  {v:g}", va="center", fontsize=8)
    ax.set_xlim(0, max(values) * 1.15)
    ax.set_xlabel("images/s (median of the timed epochs)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def sizes_chart(head: list[str], rows: list[list[str]], title: str) -> bytes:
    """Each contender's throughput relative to the ceiling against the source size (log scale)."""
    sizes = [tuple(int(v) for v in r[0].split("x")) for r in rows]
    pixels = [w * h for w, h in sizes]
    fig = _figure(7.5, 4.0)
    ax = fig.add_subplot()
    for name in ("reference", "fallback", "dali-cpu"):
        col = head.index(name)
        ax.plot(pixels, [_number(r[col]) for r in rows], marker="o", label=name)
    ax.axhline(1.0, color="tab:gray", linestyle="--", linewidth=1, label="ceiling (decode + CLAHE only)")
    ax.set_xscale("log")
    ax.margins(x=0.08)
    ax.set_xticks(pixels, [f"{w}x{h}" for w, h in sizes], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("source image size (log scale of pixels)")
    ax.set_ylabel("throughput / ceiling")
    ax.set_ylim(0, 1.1)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


CHARTS = {"throughput.png": throughput_chart, "sizes.png": sizes_chart}


def charts(page: Path) -> dict[str, bytes]:
    """``{file name: PNG}`` for every table of ``page`` marked with a chart comment."""
    out = {}
    for m in _CHART.finditer(page.read_text(encoding="utf-8")):
        head, rows = _table(m["table"])
        out[m["file"]] = CHARTS[m["file"]](head, rows, m["title"].replace("\\n", "\n"))
    return out


def metrics_markdown() -> str:
    """The metrics reference: the names of ``loader.metrics()`` from the telemetry module's table."""
    from dali_backend.telemetry import HOW, METRICS

    lines = ["# Metrics", "",
             "What `loader.metrics()` returns (and the exporters write, under `loader/<name>`), generated from",
             "`dali_backend.telemetry.METRICS`. A value not measured on a backend is `None` (left out by the",
             "exporters), never 0. Guide: [Is data loading my bottleneck?](../guides/telemetry.md).", "",
             "| name | unit | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {unit} | {_cell(meaning)} |" for name, (unit, meaning) in METRICS.items()]
    lines += ["", "Two more keys are strings: `backend` (the backend that ran) and `how` (how each stage was measured):", "",
              "| backend | stage | how it is measured |", "| --- | --- | --- |"]
    lines += [f"| {backend} | `{stage}` | {_cell(how)} |" for backend, stages in HOW.items() for stage, how in stages.items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ mkdocs events
def on_files(files, config):
    files.append(File.generated(config, CLI_PAGE, content=cli_markdown()))
    files.append(File.generated(config, METRICS_PAGE, content=metrics_markdown()))
    page = Path(config["docs_dir"]) / "benchmarks.md"
    for name, png in charts(page).items():
        files.append(File.generated(config, f"benchmarks/{name}", content=png))
    return files


def on_page_markdown(markdown, page, config, files):
    if TORCHVISION_MARK in markdown:
        markdown = markdown.replace(TORCHVISION_MARK, torchvision_table())
    return markdown
