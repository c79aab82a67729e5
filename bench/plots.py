"""The benchmark's charts, drawn with matplotlib (the ``plot`` extra), imported only when a chart is drawn.

Figures are built on matplotlib's object API with the Agg canvas (no pyplot, no display, no global
backend switch), so drawing works on headless machines and inside other programs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

INSTALL_HINT = "pip install 'dali-backend[plot]' (or pip install matplotlib)"


def require_matplotlib() -> None:
    """Raise :class:`~dali_backend.errors.MissingDependencyError` with the install command when
    matplotlib is missing (checked before the benchmark runs, not after)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        from dali_backend.errors import MissingDependencyError

        raise MissingDependencyError(f"the benchmark charts need matplotlib ({e}); install it with {INSTALL_HINT}, "
                                     "or pass --no-plot for the table and JSON only") from e


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _machine_line(machine: dict) -> str:
    return f"{machine.get('cores')} cores ({machine.get('cpu') or 'unknown CPU'}), GPU: {machine.get('gpu') or 'none'}"


def throughput_chart(results: Sequence[dict], machine: dict, path: Path) -> Path:
    """Horizontal bars of images/s per contender: the median of the timed epochs, whiskers from the
    slowest to the fastest epoch, each bar labelled with its ratio to the ceiling.

    Args:
        results: the benchmark's result rows (``name``, ``images_per_s``, ``epoch_images_per_s``,
            ``ratio_to_ceiling``).
        machine: ``machine_info()`` with ``data`` (``images``, ``source_size``, ``output_size``).
        path: PNG to write (its folder is created).

    Returns:
        ``path``.
    """
    names = [r["name"] for r in results]
    median = [r["images_per_s"] for r in results]
    epochs = [r.get("epoch_images_per_s") or [r["images_per_s"]] for r in results]
    lo = [m - min(e) for m, e in zip(median, epochs)]
    hi = [max(e) - m for m, e in zip(median, epochs)]
    n_epochs = max(len(e) for e in epochs)
    fig = _figure(8.0, 1.6 + 0.5 * len(results))
    ax = fig.add_subplot()
    y = list(range(len(results)))[::-1]
    from . import PEERS

    colors = ["tab:orange" if n in PEERS else "tab:green" if n.startswith(("dali", "clips-dali"))
              else "tab:gray" if n == "ceiling" else "tab:blue" for n in names]  # orange: what a user would write
    ax.barh(y, median, xerr=[lo, hi], color=colors, capsize=4, error_kw={"elinewidth": 1})
    ax.set_yticks(y, names)
    for yi, m, h, r in zip(y, median, hi, results):
        ratio, unit = r.get("ratio_to_ceiling"), "frames/s" if "clip_len" in r else "img/s"  # clips count frames
        ax.text(m + h, yi, f"  {m:.0f} {unit}" + (f" ({ratio:.2f}x ceiling)" if ratio is not None else ""), va="center",
                fontsize=8)
    ax.set_xlim(0, max(m + h for m, h in zip(median, hi)) * 1.45 or 1.0)
    clips = "\nclip contenders (clips-*): frames/s" if any("clip_len" in r for r in results) else ""
    ax.set_xlabel(f"throughput (images/s): median of {n_epochs} timed epoch{'s' * (n_epochs != 1)}, "
                  f"whiskers slowest to fastest epoch{clips}")
    data = machine.get("data", {})
    (sw, sh), (ow, oh) = data.get("source_size", ("?", "?")), data.get("output_size", ("?", "?"))
    source = data.get("source_label", f"{sw}x{sh}")
    ax.set_title(f"{data.get('images', '?')} JPEGs {source} -> {ow}x{oh}, batch {results[0].get('batch_size', '?')}\n"
                 f"{_machine_line(machine)}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def ratio_by_size_chart(runs: Sequence[dict], machine: dict, path: Path) -> Path:
    """Throughput relative to the ceiling contender against source image size, one line per contender.

    Args:
        runs: one dict per source size with ``source_size`` ``[w, h]`` and ``results`` (rows with
            ``name`` and ``ratio_to_ceiling``).
        machine: ``machine_info()`` (for the title).
        path: PNG to write.

    Returns:
        ``path``.
    """
    runs = sorted(runs, key=lambda r: r["source_size"][0] * r["source_size"][1])
    pixels = [r["source_size"][0] * r["source_size"][1] for r in runs]
    fig = _figure(8.0, 4.8)
    ax = fig.add_subplot()
    names = [n for n in dict.fromkeys(row["name"] for r in runs for row in r["results"]) if n != "ceiling"]
    for name in names:
        pts = [(px, row["ratio_to_ceiling"]) for px, r in zip(pixels, runs) for row in r["results"]
               if row["name"] == name and row["ratio_to_ceiling"] is not None]
        ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=name)
    ax.axhline(1.0, color="tab:gray", linestyle="--", linewidth=1, label="ceiling (decode + CLAHE only)")
    ax.set_xscale("log")
    ax.set_xticks(pixels, [f"{w}x{h}\n{w * h / 1e6:.2g} MP" for w, h in (r["source_size"] for r in runs)], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("source image size (pixels, log scale)")
    ax.set_ylabel("throughput / ceiling throughput")
    ax.set_ylim(bottom=0)
    out = runs[0].get("output_size") or machine.get("data", {}).get("output_size", ("?", "?"))
    ax.set_title(f"throughput relative to the ceiling by source size (-> {out[0]}x{out[1]})\n{_machine_line(machine)}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
