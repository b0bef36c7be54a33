"""Plots with the course's conventions: units on every axis, a title that states the claim,
readable at notebook width, modest resolution. Used by every notebook from 01 on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from .compute import StepRoofline

_FIGSIZE = (7.0, 4.0)
_DPI = 90


def _text(name: str, text: object) -> str:
    """A label or title: a string (TypeError otherwise) that is not blank (ValueError): every plot states its
    claim and units."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a string, got {type(text).__name__}: every plot states its claim and units")
    if not text.strip():
        raise ValueError(f"{name} must not be empty: every plot states its claim and units")
    return text


def new_figure(
    title: str,
    xlabel: str,
    ylabel: str,
    *,
    logx: bool = False,
    logy: bool = False,
    figsize: tuple[float, float] = _FIGSIZE,
):
    """A figure and axes with labelled axes (include units, e.g. 'matrix size n') and a title."""
    for name, text in (("title", title), ("xlabel", xlabel), ("ylabel", ylabel)):
        _text(name, text)
    fig, ax = plt.subplots(figsize=figsize, dpi=_DPI)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    return fig, ax


def measured_vs_predicted(
    x: Sequence[float],
    measured: Mapping[str, Sequence[float]],
    predicted: Mapping[str, Sequence[float]] | None = None,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
):
    """Measured series as markers and predicted series as dashed lines on one axes."""
    fig, ax = new_figure(title, xlabel, ylabel, logx=logx, logy=logy)
    for label, ys in measured.items():
        if len(ys) != len(x):
            raise ValueError(f"measured[{label!r}] has {len(ys)} values but x has {len(x)}")
        ax.plot(x, ys, "o-", label=f"{label} (measured)")
    for label, ys in (predicted or {}).items():
        if len(ys) != len(x):
            raise ValueError(f"predicted[{label!r}] has {len(ys)} values but x has {len(x)}")
        ax.plot(x, ys, "--", label=f"{label} (predicted)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, ax


def roofline_plot(
    peak_flops: float,
    bandwidth: float,
    points: Mapping[str, tuple[float, float]],
    *,
    title: str = "Roofline of this machine",
    intensity_range: tuple[float, float] = (1e-2, 1e3),
):
    """The roofline min(peak, I x bandwidth) with measured (intensity, FLOP/s) points on it.

    Axes in FLOP/byte and GFLOP/s, both logarithmic.
    """
    import numpy as np

    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops and bandwidth must be > 0, got {peak_flops!r}, {bandwidth!r}")
    lo, hi = intensity_range
    if not 0 < lo < hi:
        raise ValueError(f"intensity_range must be (low, high) with 0 < low < high, got {intensity_range!r}")
    fig, ax = new_figure(title, "arithmetic intensity (FLOP / byte)", "achieved GFLOP/s", logx=True, logy=True)
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.plot(
        xs,
        np.minimum(peak_flops, xs * bandwidth) / 1e9,
        "k-",
        lw=2,
        label=f"roofline: {peak_flops / 1e9:.0f} GFLOP/s peak, {bandwidth / 1e9:.1f} GB/s",
    )
    ax.axvline(peak_flops / bandwidth, color="grey", ls=":", label=f"ridge {peak_flops / bandwidth:.1f} FLOP/B")
    for label, (intensity, flops) in points.items():
        ax.plot([intensity], [flops / 1e9], "o", ms=8, label=label)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig, ax


def bar_chart(
    labels: Sequence[str], values: Sequence[float], *, title: str, xlabel: str, ylabel: str, logy: bool = False
):
    """Bars, one per label, with the value written on each bar."""
    if len(labels) != len(values):
        raise ValueError(f"labels ({len(labels)}) and values ({len(values)}) must have the same length")
    fig, ax = new_figure(title, xlabel, ylabel, logy=logy)
    bars = ax.bar(range(len(values)), values, color="tab:blue")
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
    ax.bar_label(bars, fmt="%.3g", fontsize=7)
    fig.tight_layout()
    return fig, ax


def estimate_vs_measured(
    labels: Sequence[str],
    estimated: Sequence[float],
    measured: Sequence[float],
    *,
    title: str,
    unit: str = "MiB",
    tolerance: float = 0.1,
):
    """Grouped bars of estimate and measurement per configuration, with the tolerance band drawn
    around each measurement (an estimate against a measured peak)."""
    import numpy as np

    if not (len(labels) == len(estimated) == len(measured)) or not labels:
        raise ValueError(
            f"labels, estimated and measured need the same non-zero length, got "
            f"{len(labels)}, {len(estimated)}, {len(measured)}"
        )
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    height = max(_FIGSIZE[1], 0.3 * len(labels) + 1.5)
    fig, ax = new_figure(title, f"peak memory ({unit})", "configuration", figsize=(_FIGSIZE[0], height))
    y = np.arange(len(labels))
    ax.barh(y - 0.2, measured, 0.4, label="measured", color="tab:blue")
    ax.barh(y + 0.2, estimated, 0.4, label="estimated", color="tab:orange")
    m = np.asarray(measured, float)
    ax.errorbar(m, y - 0.2, xerr=tolerance * m, fmt="none", ecolor="k", capsize=3, label=f"measured ± {tolerance:.0%}")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig, ax


def tradeoff_chart(rows: Sequence, *, title: str, size_field: str = "file_bytes"):
    """Every compressed variant as a point: size (KiB, log scale) against latency (ms), each point
    labelled with its name and held-out accuracy. ``rows`` are ``compression.compare.Row``."""
    rows = list(rows)
    if not rows:
        raise ValueError(f"rows must be a non-empty list of compare.Row (name, {size_field}, latency_s, accuracy)")
    if not all(hasattr(r, a) for r in rows for a in ("name", size_field, "latency_s", "accuracy")):
        raise TypeError(f"rows must be compare.Row objects (name, {size_field}, latency_s, accuracy)")
    fig, ax = new_figure(
        title, f"size ({size_field.replace('_bytes', '').replace('_', ' ')}, KiB)", "forward latency (ms)", logx=True
    )
    accs = [r.accuracy for r in rows]
    points = ax.scatter(
        [getattr(r, size_field) / 2**10 for r in rows],
        [r.latency_s * 1e3 for r in rows],
        c=accs,
        cmap="viridis",
        s=60,
        edgecolors="k",
        vmin=min(accs) - 0.005,
        vmax=max(accs) + 0.005,
    )
    for r in rows:
        ax.annotate(
            f"{r.name}\n{r.accuracy:.1%}",
            (getattr(r, size_field) / 2**10, r.latency_s * 1e3),
            fontsize=7,
            xytext=(5, 4),
            textcoords="offset points",
        )
    fig.colorbar(points, ax=ax, label="held-out accuracy")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    return fig, ax


def timeline_chart(
    timelines: Mapping[str, Sequence[Sequence[tuple[str, int, float, float]]]],
    *,
    title: str,
    unit: str = "ms",
    annotate: bool = True,
):
    """Who computes when (notebook 06.2: pipeline schedules): one row of horizontal bars per rank, for each
    timeline in ``timelines`` (name -> per rank a list of ``(pass, micro_batch, start_s, end_s)``, pass
    ``"F"`` forward or ``"B"`` backward). Forward passes blue, backward orange, the micro-batch written on
    bars wide enough; idle time is the pale gap between bars. Times are shifted so that each timeline
    starts at 0, and shown in ``unit`` ("ms" or "s")."""
    scale = {"ms": 1e3, "s": 1.0}
    if unit not in scale:
        raise ValueError(f"unit must be 'ms' or 's', got {unit!r}")
    if not isinstance(timelines, Mapping):
        raise TypeError(
            f"timelines must be a mapping: name -> per rank a list of (pass, micro_batch, start_s, "
            f"end_s), got {type(timelines).__name__}"
        )
    if not timelines:
        raise ValueError(
            "timelines must be a non-empty mapping: name -> per rank a list of (pass, micro_batch, start_s, end_s)"
        )
    rows = [(name, r, rank) for name, ranks in timelines.items() for r, rank in enumerate(ranks)]
    if not rows or any(not rank for _, _, rank in rows):
        raise ValueError("every rank needs at least one (pass, micro_batch, start_s, end_s) interval")
    height = max(2.5, 0.45 * len(rows) + 1.8)
    fig, ax = new_figure(title, f"time since the first pass ({unit})", "rank", figsize=(_FIGSIZE[0], height))
    colors = {"F": "tab:blue", "B": "tab:orange"}
    labels = []
    for y, (name, r, rank) in enumerate(rows):
        t0 = min(iv[2] for rk in timelines[name] for iv in rk)
        end = max(iv[3] for rk in timelines[name] for iv in rk)
        ax.barh(y, (end - t0) * scale[unit], left=0, height=0.8, color="0.93", edgecolor="0.8")
        for kind, micro, a, b in rank:
            if kind not in colors:
                raise ValueError(f"pass must be 'F' or 'B', got {kind!r}")
            left, width = (a - t0) * scale[unit], (b - a) * scale[unit]
            ax.barh(y, width, left=left, height=0.8, color=colors[kind], edgecolor="white", linewidth=0.5)
            if annotate and width > 0.025 * (end - t0) * scale[unit]:
                ax.text(left + width / 2, y, str(micro), ha="center", va="center", fontsize=7, color="white")
        labels.append(f"{name}\nrank {r}")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(len(rows) + 0.4, -0.6)  # first timeline on top, a free strip at the bottom for the legend
    ax.grid(True, axis="x", alpha=0.3)
    ax.grid(False, axis="y")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (colors["F"], colors["B"], "0.93")]
    ax.legend(handles, ["forward", "backward", "idle"], fontsize=8, loc="lower right", ncol=3)
    fig.tight_layout()
    return fig, ax


def _plain(text: str) -> str:
    """Text shown literally: a '$' in a machine's label would otherwise start matplotlib's math mode."""
    return str(text).replace("$", r"\$")


def _short_number(value: float) -> str:
    """3 significant digits without scientific notation for the sizes benchmarks produce (312,000; 15.8; 0.42)."""
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 1:
        return f"{value:.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else f"{value:.2f}"
    return f"{value:#.3g}"


def reference_bars(panels: Sequence[Mapping], *, title: str, ncols: int = 2, log_spread: float = 10.0):
    """Small multiples: one panel of bars per quantity, one bar per machine (same colour in every panel),
    the value written on each bar, and dashed horizontal reference lines labelled with their name
    (the report card, with catalog peaks as references).

    Each panel is a mapping with ``title``, ``ylabel`` (the unit), ``labels`` (one per bar), ``values`` (numbers,
    ``None`` where a machine did not measure it), optional ``references`` (``(text, value)`` pairs) and optional
    ``log`` (``None``: a log axis when the largest positive number shown, bars and references together, is more
    than ``log_spread`` times the smallest). Returns the figure and the list of panel axes.
    """
    panels = _checked_panels(panels, ncols)
    _text("title", title)
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 2.9 * nrows + 0.7), dpi=_DPI, squeeze=False)
    axes = [ax for row in grid for ax in row]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, p in zip(axes, panels):
        _reference_panel(ax, p, colors, log_spread)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(_plain(title), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig, axes[: len(panels)]


def _checked_panels(panels: Sequence[Mapping], ncols: int) -> list[Mapping]:
    """``reference_bars``' panels as a list, each checked (TypeError, ValueError), and ``ncols`` checked."""
    panels = list(panels)
    if not panels:
        raise ValueError("panels must be a non-empty list of mappings with title, ylabel, labels and values")
    for i, p in enumerate(panels):
        if not isinstance(p, Mapping):
            raise TypeError(
                f"panels[{i}] must be a mapping with title, ylabel, labels and values, got {type(p).__name__}"
            )
        missing = {"title", "ylabel", "labels", "values"} - set(p)
        if missing:
            raise ValueError(f"panels[{i}] lacks {sorted(missing)}: each needs title, ylabel, labels and values")
        if len(p["labels"]) != len(p["values"]):
            raise ValueError(f"panels[{i}] has {len(p['labels'])} labels but {len(p['values'])} values")
    if not isinstance(ncols, int) or isinstance(ncols, bool):
        raise TypeError(f"ncols must be an int, got {type(ncols).__name__}")
    if ncols < 1:
        raise ValueError(f"ncols must be >= 1, got {ncols!r}")
    return panels


def _reference_panel(ax, p: Mapping, colors: list[str], log_spread: float) -> None:
    """One panel of ``reference_bars``: the bars with their values, "not measured" marks, the reference lines."""
    from matplotlib import transforms

    values = [None if v is None else float(v) for v in p["values"]]
    refs = [(str(t), float(v)) for t, v in p.get("references", ()) if v is not None and v > 0]
    shown = [v for v in values if v is not None and v > 0] + [v for _, v in refs]
    log = p.get("log")
    if log is None:
        log = bool(shown) and max(shown) / min(shown) > log_spread
    ax.set_title(_plain(p["title"]), fontsize=9)
    ax.set_ylabel(_plain(p["ylabel"]), fontsize=8)
    x = list(range(len(values)))
    present = [i for i, v in enumerate(values) if v is not None]
    bars = ax.bar(
        [x[i] for i in present],
        [values[i] for i in present],
        color=[colors[i % len(colors)] for i in present],
        width=0.6,
    )
    ax.bar_label(bars, labels=[_short_number(values[i]) for i in present], fontsize=7, padding=2)
    where = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    for i in x:
        if values[i] is None and present:
            ax.text(i, 0.04, "not\nmeasured", transform=where, ha="center", va="bottom", fontsize=7, color="0.4")
    if log:
        ax.set_yscale("log")
    if shown:
        _reference_lines(ax, refs, shown, log)
    else:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            "no machine measured this",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="0.4",
        )
    ax.set_xticks(x, _bar_names(p["labels"]), fontsize=7)
    ax.set_xlim(-0.6, len(values) - 0.4)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(True, axis="y", which="major", alpha=0.3)


def _reference_lines(ax, refs: list[tuple[str, float]], shown: list[float], log: bool) -> None:
    """The y range that holds every value ``shown``, and the dashed reference lines with their labels, each label
    placed at least 7.5 % of the height above the one below it."""
    import math

    lo, hi = (min(shown) / 3, max(shown) * 4) if log else (0.0, max(shown) * 1.22)
    ax.set_ylim(lo, hi)
    frac = (
        (lambda v: (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)))
        if log
        else (lambda v: (v - lo) / (hi - lo))
    )
    placed = -1.0
    for text, value in sorted(refs, key=lambda r: r[1]):
        ax.axhline(value, color="0.3", ls="--", lw=1, label=text)
        y = max(frac(value), placed + 0.075)
        placed = y
        ax.text(
            0.99,
            y,
            _plain(text),
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=6.5,
            color="0.2",
            bbox=dict(facecolor="white", alpha=0.7, edgecolor="none", pad=0.5),
        )


def _bar_names(labels) -> list[str]:
    """Each bar's label wrapped at 16 characters, at most two lines (an ellipsis marks the cut)."""
    import textwrap

    names = []
    for text in map(str, labels):
        wrapped = textwrap.wrap(text, 16) or [""]
        names.append(_plain("\n".join(wrapped[:2]) + ("…" if len(wrapped) > 2 else "")))
    return names


def resource_use(runs: Mapping, *, title: str = "Resource use during training"):
    """CPU use (% of one core) and resident memory (MiB) against time for each labelled run, side by
    side; a third panel shows GPU memory when a run sampled one. Returns (fig, axes)."""
    if not isinstance(runs, Mapping) or not runs:
        raise ValueError("runs must be a non-empty mapping of label -> benchmark.monitor.ResourceSampler")
    mib = 2**20
    gpu = any(r.device.type == "cuda" for r in runs.values())
    fig, axes = plt.subplots(1, 3 if gpu else 2, figsize=(10.0 if gpu else 8.0, 3.4), dpi=90)
    for label, r in runs.items():
        t = r.series("t")
        axes[0].plot(t[1:], r.series("process_cpu_percent")[1:], "o-", ms=3, label=label)
        axes[1].plot(t, [b / mib for b in r.series("rss_bytes")], "o-", ms=3, label=label)
        if gpu:
            axes[2].plot(t, [(b or 0) / mib for b in r.series("gpu_allocated_bytes")], "o-", ms=3, label=label)
    labels = [("CPU use of this process", "% of one core"), ("Resident memory (RSS)", "MiB")]
    labels += [("GPU memory allocated", "MiB")] if gpu else []
    for ax, (what, unit) in zip(axes, labels):
        ax.set_title(what, fontsize=10)
        ax.set_xlabel("time since start (s)")
        ax.set_ylabel(unit)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig, axes


def atlas_strips(rows: Sequence[Mapping], *, title: str = "This run among the recorded runs"):
    """One strip per quantity: each recorded run a dot coloured by its machine kind, this run a red star
    (``runs.compare(...).plot()``). Each row: ``label`` (with units), ``value`` (this run), ``groups`` (machine kind ->
    values)."""
    _text("title", title)
    if not rows:
        raise ValueError("rows must hold at least one quantity")
    kinds = list(dict.fromkeys(k for r in rows for k in r["groups"]))
    colours = {k: f"C{i % 10}" for i, k in enumerate(kinds)}
    fig, axes = plt.subplots(
        len(rows), 1, figsize=(7.0, 0.6 + 0.9 * len(rows) + 0.22 * len(kinds)), dpi=_DPI, squeeze=False
    )
    for ax, row in zip(axes[:, 0], rows):
        for kind, values in row["groups"].items():
            ax.plot(list(values), [0] * len(values), "o", alpha=0.65, color=colours[kind], label=kind)
        ax.plot([row["value"]], [0], "*", color="crimson", markersize=13, label="this run")
        ax.set_yticks([])
        ax.set_xlabel(_text("label", row["label"]), fontsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0, 0].set_title(title, fontsize=11)
    handles = {}
    for ax in axes[:, 0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.tight_layout()
    fig.legend(handles.values(), handles.keys(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=1)
    return fig


def text_table(rows: Sequence[Mapping[str, object]], *, formats: Mapping[str, str] | None = None) -> str:
    """Rows (dicts with the same keys) as an aligned text table, for printing where a plot would say less
    (notebook 01: the step's models, the accelerator catalog, chips per dollar). The first column is left-aligned,
    the others right-aligned; None prints as "-"; numbers use ``formats[column]`` (a format spec such as ".0f"), else
    integers print whole and other numbers with 3 significant digits (whole from 1000 on); other values with ``str``."""
    if not rows or any(not isinstance(r, Mapping) for r in rows):
        raise TypeError("rows must be a non-empty sequence of mappings (column name -> value)")
    columns = list(rows[0])
    if any(list(r) != columns for r in rows):
        raise ValueError(f"every row must have the columns {columns}, in that order")
    formats = dict(formats or {})

    def cell(column: str, value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        if column in formats:
            return format(value, formats[column])
        return str(value) if isinstance(value, int) else format(value, ".3g" if abs(value) < 1000 else ".0f")

    cells = [[cell(c, r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [columns] + cells
    return "\n".join(
        "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(line, widths))) for line in lines
    )


def step_parts_table(roof: StepRoofline, peak_flops: float, top: int = 4) -> str:
    """The ``top`` slowest parts of the smallest batch's step, timed alone (``compute.step_roofline``), as a
    ``text_table``: each product with its shape and share of ``peak_flops``, the update with its bytes (notebook 01,
    section 6)."""
    from . import compute, timing

    if not isinstance(roof, compute.StepRoofline):
        raise TypeError(f"roof must be a compute.StepRoofline (from compute.step_roofline), got {type(roof).__name__}")
    b = roof.batches[0]
    shapes, rows = compute.mlp_step_products(b, roof.width), []
    for name, sec in sorted(roof.parts[b].items(), key=lambda kv: -kv[1])[:top]:
        m, k, n = shapes.get(name, (0, 0, 0))
        what = f"({m} x {k}) @ ({k} x {n})" if m else "12 bytes per parameter"
        share = f"{2 * m * k * n / sec / peak_flops:.1%}" if m else "-"
        rows.append({f"batch {b}, part": name, "alone": timing.format_seconds(sec), "shape": what, "share of P": share})
    return text_table(rows)


def duration_bars(hours: Mapping[str, float], *, title: str, xlabel: str):
    """``bar_chart`` of durations in hours on a log axis, each bar labelled readably ("6.6 days", "1.3 h"), with room
    above the tallest label (notebook 01, section 7: time to train)."""
    from .compute import format_duration

    if not isinstance(hours, Mapping) or not all(isinstance(v, (int, float)) for v in hours.values()):
        raise TypeError(f"hours must map labels to numbers of hours, got {type(hours).__name__}")
    if not isinstance(title, str) or not isinstance(xlabel, str):
        raise TypeError("title and xlabel must be strings")
    if not hours or any(not v > 0 for v in hours.values()):
        raise ValueError("hours must map each label to a positive number of hours")
    fig, ax = bar_chart(
        list(hours), list(hours.values()), logy=True, title=title, xlabel=xlabel, ylabel="hours (log scale)"
    )
    ax.set_ylim(bottom=min(hours.values()) / 10, top=8 * max(hours.values()))  # the shortest bar a decade tall
    for label, h in zip(ax.texts, hours.values()):
        label.set_text(format_duration(h * 3600))
    return fig, ax
