"""The card itself: :func:`write_report_card` reads the results, compares them and writes the PNG and the HTML
page; :func:`card_figure` draws the chart and :func:`summary_text` says it in plain text."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .. import arguments, plots
from .compare import DEFAULT_REFERENCES, compare_table, reference_rows
from .page import _fmt, _hardware_rows, _html
from .reading import _compared, _files, _labels, _read, hardware_count

PNG_NAME = "report_card.png"
HTML_NAME = "report_card.html"


@dataclass
class ReportCard:
    """What :func:`write_report_card` made: the results compared (``labels[i]`` names ``results[i]``, read from
    ``files[i]``), the files skipped as ``(file, reason)``, the PNG and HTML paths, and :func:`compare_table`'s rows."""

    results: list[dict] = field(repr=False)
    skipped: list[tuple[str, str]]
    png: Path
    html: Path
    rows: list[dict] = field(repr=False)
    labels: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    references: list[dict] = field(default_factory=list, repr=False)

    def __str__(self) -> str:
        return summary_text(self)


def _short(acc_name: str) -> str:
    return acc_name.removeprefix("NVIDIA ").removeprefix("Google ")


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def card_figure(card: ReportCard):
    """The card's chart as a matplotlib figure and its panel axes, to show in a notebook (the PNG is this figure):
    one panel per headline figure, one bar per result, the reference accelerators as dashed lines."""
    arguments.instance("card", card, ReportCard, "a ReportCard (write_report_card)")
    rows, refs, labels = card.rows, card.references, card.labels or _labels(card.results)

    panels = []
    for row in rows:
        lines = [(f"{_short(r['name'])} {what}", v) for r in refs for what, v in r["lines"].get(row["key"], [])]
        if len(labels) == 1 and row["ahead"] is not None:
            claim = f"{_fmt(row['values'][row['ahead']])} {row['unit']}"
        else:
            claim = row["verdict"].replace(row["ahead"] or "\0", _clip(row["ahead"] or "", 24))
        panels.append(
            {
                "title": f"{row['figure']} ({row['better']} is better)\n{claim}",
                "ylabel": row["unit"],
                "labels": labels,
                "values": [row["values"][label] for label in labels],
                "references": lines,
            }
        )
    wins: dict[str, int] = {}
    compared = [row for row in rows if sum(v is not None for v in row["values"].values()) >= 2]
    for row in compared:
        if row["best"] is not None:
            wins[row["best"]] = wins.get(row["best"], 0) + 1
    leader = max(wins, key=wins.get) if wins else None
    if len(labels) == 1:
        title = f"{_clip(labels[0], 40)} on the course benchmark"
    elif leader is None:
        title = (
            f"{_compared(len(labels), hardware_count(card.results))} on the course benchmark: "
            "no figure differs beyond the spread over processes: no winner"
        )
    else:
        title = (
            f"{_compared(len(labels), hardware_count(card.results))} on the course benchmark: "
            f"{_clip(leader, 32)} is ahead beyond the spread on {wins[leader]} of {len(compared)} figures"
        )
    if refs:
        title += "\ndashed lines: catalog data-sheet peaks (ceilings, not measured)"
    return plots.reference_bars(panels, title=title)


def write_report_card(
    paths, out_dir, *, references: Iterable[str] = DEFAULT_REFERENCES, echo: Callable[[str], object] | None = print
) -> ReportCard:
    """Compare saved benchmark results: write ``report_card.png`` and ``report_card.html`` into ``out_dir``
    (notebook 07.1, "Compare machines"; ``course report-card``).

    ``paths`` is a result file, a folder (its ``*.json`` files) or a list of them. Each file that is not a
    usable result (corrupt or truncated JSON, another program's JSON, a newer schema, missing or non-numeric
    headline figures, unreadable) is skipped: ``echo`` gets "skipped <file>: <reason>" (``None`` to stay
    quiet) and the rest are compared. Results with the same label are told apart as "label (2)".
    ``references`` are catalog accelerator names drawn as reference lines. Raises ValueError for an unknown
    reference name (listing the valid ones) and when no file was usable (listing what was tried).
    """
    refs = reference_rows(references)
    if echo is not None and not callable(echo):
        raise TypeError(f"echo must be a function taking one string (e.g. print) or None, got {type(echo).__name__}")
    tried = _files(paths)
    results, files, skipped = [], [], []
    for f in tried:
        result, why = _read(f)
        if result is None:
            skipped.append((str(f), why))
            if echo is not None:
                echo(f"skipped {f}: {why}")
        else:
            results.append(result)
            files.append(str(f))
    if not results:
        what = "; ".join(f"{f}: {why}" for f, why in skipped) or "no paths were given"
        raise ValueError(
            f"no usable benchmark result in the {len(tried)} path(s) tried ({what}). "
            "Save results with `course benchmark --out <file>.json` and pass the files or their folder."
        )
    labels = _labels(results)
    rows = compare_table(results)
    out = Path(out_dir)
    for above in (out, *out.parents):
        if above.exists() and not above.is_dir():
            raise ValueError(
                f"out_dir {str(out_dir)!r} must be a folder, but {str(above)!r} is a file: give a new or "
                "existing folder for report_card.png and report_card.html"
            )
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib.pyplot as plt

    card = ReportCard(
        results=results,
        skipped=skipped,
        png=out / PNG_NAME,
        html=out / HTML_NAME,
        rows=rows,
        labels=labels,
        files=files,
        references=refs,
    )
    fig, _ = card_figure(card)
    try:
        fig.savefig(card.png, dpi=90)
    finally:
        plt.close(fig)
    card.html.write_text(
        _html(
            card.png.read_bytes(),
            rows,
            labels,
            _hardware_rows(results, labels, files),
            refs,
            skipped,
            hardware_count(results),
        ),
        encoding="utf-8",
    )
    return card


def summary_text(card: ReportCard) -> str:
    """The card as plain text for a notebook to print: the figures per result with the best one marked, the
    skipped files and where the PNG and HTML are (notebook 07.1, "Compare machines")."""
    arguments.instance("card", card, ReportCard, "a ReportCard (write_report_card)")
    labels = card.labels or _labels(card.results)
    names = [f"[{i}]" for i in range(1, len(labels) + 1)]
    lines = [
        f"{_compared(len(labels), hardware_count(card.results)).capitalize()}: "
        + "; ".join(f"{n} {label}" for n, label in zip(names, labels))
    ]
    width = max(len(f"{r['figure']} ({r['unit']})") for r in card.rows) + 2
    lines.append(f"{'figure':<{width}}" + "".join(f"{n:>11}" for n in names) + "  best")
    for r in card.rows:
        best = (
            names[labels.index(r["best"])]
            if r["best"] is not None
            else "no winner (within the spread)"
            if r["verdict"].startswith("within")
            else "no winner (no spread recorded)"
            if r["verdict"].startswith("no spread")
            else "-"
        )
        best += ", judged per step" if r["verdict"].endswith("(per step)") else ""
        cells = "".join(f"{_fmt(r['values'][label]):>11}" for label in labels)
        lines.append(f"{r['figure'] + ' (' + r['unit'] + ')':<{width}}{cells}  {best} ({r['better']} is better)")
    if card.skipped:
        lines.append(f"Skipped {len(card.skipped)} file(s):")
        lines += [f"  {f}: {why}" for f, why in card.skipped]
    lines.append(f"Report card: {card.png} and {card.html}")
    return "\n".join(lines)
