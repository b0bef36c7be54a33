"""The class page itself: one self-contained HTML file (inline CSS and SVG, no script, nothing fetched).

Every text that comes from a file (labels, file names, claim texts, reasons, machine descriptions, units) passes
through :func:`escape` (``html.escape`` with ``quote=True``, after writing non-printing characters as escapes) and is
placed only in element text or in double-quoted attributes; nothing from a file goes into a style, a script, a
link or a tag name. :func:`write_class_page` reads a folder, writes ``index.html`` and says what it merged.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import arguments
from ..files import write_atomic
from ..runs import LESSONS
from ..runs.atlas import Group
from .checks_sections import atlas_section, claims_section
from .figures import fmt, strip_svg
from .markup import _counts, _e, _num, _with_unit, escape  # noqa: F401 (escape is part of this API)
from .reading import Reading, printable, read_folder
from .summary import (
    GridCell,
    guess_rows,
    landscape,
    lesson_grid,
)

__all__ = ["PAGE_NAME", "ClassPage", "escape", "class_page_html", "write_class_page"]

PAGE_NAME = "index.html"

_CSS = """body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1180px;margin:1.2em auto;
padding:0 1em;color:#222;line-height:1.4}h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;
margin-top:1.8em}h3{margin:1.3em 0 .4em}h4{margin:1em 0 .3em;font-size:1em}
table{border-collapse:collapse;margin:.4em 0 1.2em;font-size:.88em}th,td{border:1px solid #d4d4d4;padding:3px 7px;
vertical-align:top;text-align:left}th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
nav a{margin-right:1.1em}.lead{font-size:1.05em}.note{color:#555;font-size:.9em}code{font-size:.92em}
.nowrap{white-space:nowrap}.ok{background:#e7f4e7}.warn{background:#fff4d6}.bad{background:#fde2e2}.quiet{color:#777}
.bar{display:inline-block;height:.8em;background:#6a8fd0;margin-right:.4em;vertical-align:middle}
.facets{display:flex;flex-wrap:wrap;gap:0 1.5em;align-items:flex-start}.facets table{min-width:12em}
svg.strip{display:block;max-width:100%;height:auto;margin:.2em 0 .4em}details{margin:.3em 0 1em}
summary{cursor:pointer;color:#1f5fbf}.legend span{margin-right:1.2em}.part{background:#e8eef8}
table.grid td,table.grid th{padding:1px 6px}table.grid td.num{text-align:center;white-space:nowrap}
th.group{background:#fafafa;font-weight:normal;color:#444}.wrap{overflow-wrap:anywhere}code.file{overflow-wrap:anywhere;font-size:.85em}
.small{font-size:.85em}.scroll{overflow-x:auto}"""


def _header(reading: Reading, made: str, n_kinds: int, n_learners: int, unlabelled: int) -> list[str]:
    import course_lib

    merged, skipped = len(reading.runs), len(reading.skipped)
    lessons = sorted({r.run["lesson"] for r in reading.runs}, key=list(LESSONS).index)
    return [
        "<h1>Class page</h1>",
        f'<p class="lead">{merged} run file{"s" * (merged != 1)} merged from the folder <code>'
        f"{_e(reading.folder.name or reading.folder)}</code>: {n_learners} labelled learner"
        f"{'s' * (n_learners != 1)} and {unlabelled} unlabelled run{'s' * (unlabelled != 1)}, on {n_kinds} machine "
        f"kind{'s' * (n_kinds != 1)}, lessons {_e(', '.join(lessons) or 'none')}. {skipped} file"
        f"{'s' * (skipped != 1)} skipped or flagged (section 5).</p>",
        f'<p class="note">Made {_e(made)} by course_lib {_e(course_lib.__version__)}. Each run file is one lesson '
        "run on one machine; a learner is a label (a run saved without one is named by its machine kind and file "
        "name in the grid of who ran what). Every text on this page that comes from a file is shown as text, "
        "never run.</p>",
        '<nav><a href="#hardware">1. Hardware</a><a href="#who">Who ran what</a><a href="#guesses">2. Guesses</a>'
        '<a href="#claims">3. Claims</a>'
        '<a href="#atlas">4. Against the atlas</a><a href="#files">5. Skipped and flagged files</a></nav>',
    ]


def _hardware(reading: Reading) -> tuple[list[str], int, int, int]:
    land = landscape(reading.runs)
    out = ['<h2 id="hardware">1. The room\'s hardware</h2>']
    if not land.kinds:
        return out + ["<p>No runs merged yet.</p>"], 0, 0, 0
    most = max(k.runs for k in land.kinds)
    out.append(
        '<p class="note">A machine kind is the CPU, the instruction-set level PyTorch\'s kernels use ("held" where '
        "a setting holds them below the CPU's), the bf16 mode, the physical cores and the accelerator. Idle or "
        "busy is the load when the lesson ran.</p>"
        "<table><tr><th>machine kind</th><th>runs</th><th>learners</th><th>unlabelled runs</th><th>idle</th>"
        "<th>busy</th><th>lessons</th><th>torch</th><th>platform</th></tr>"
    )
    for k in land.kinds:
        width = max(2, round(120 * k.runs / most))
        out.append(
            f'<tr><td>{_e(k.kind)}</td><td class="num nowrap"><span class="bar" style="width:{width}px"></span>{k.runs}'
            f'</td><td class="num">{k.learners}</td><td class="num">{k.unlabelled}</td><td class="num">{k.idle}</td>'
            f'<td class="num{" warn" if k.busy else ""}">{k.busy}</td><td>{_e(", ".join(k.lessons))}</td>'
            f"<td>{_counts(k.torch)}</td><td>{_counts(k.platforms)}</td></tr>"
        )
    out.append('</table><h3>Runs per facet</h3><div class="facets">')
    for name, pairs in land.facets:
        rows = "".join(f'<tr><td>{_e(v)}</td><td class="num">{n}</td></tr>' for v, n in pairs)
        out.append(f"<table><tr><th>{_e(name)}</th><th>runs</th></tr>{rows}</table>")
    out.append("</div>")
    return out + _grid(reading), len(land.kinds), land.learners, land.unlabelled


def _grid_cell(cell: GridCell | None) -> str:
    if cell is None:
        return "<td></td>"
    runs = f" ({cell.runs} runs)" if cell.runs > 1 else ""
    tip = f"{cell.held} held, {cell.not_held} not held, {cell.not_judged} not judged{runs}"
    if not cell.claims:
        return f'<td class="num quiet" title="{_e(tip)}">ran{runs}</td>'
    tone = "bad" if cell.not_held else "ok" if cell.held == cell.claims else "part"
    return f'<td class="num {tone}" title="{_e(tip)}">{cell.held}/{cell.claims}{runs}</td>'


def _grid(reading: Reading) -> list[str]:
    """Who ran what: a learner x lesson grid, each cell the claims held of the claims in that lesson's run. The
    labelled learners first (their machine kinds under the label), then the unlabelled runs under their machine
    kind, each named by its file."""
    grid = lesson_grid(reading.runs)
    width = len(grid.lessons) + 1
    out = [
        '<h3 id="who">Who ran what</h3><p class="note">One row per learner (a label); a run saved without a label is '
        "its own row, named by its file under its machine kind. Each cell: the claims that held, of the claims in "
        'that lesson\'s run (point at a cell for the rest). <span class="ok">&nbsp;all held&nbsp;</span> '
        '<span class="bad">&nbsp;one did not hold&nbsp;</span> <span class="part">&nbsp;some not judged&nbsp;</span>'
        " (often a branch of the lesson this machine does not take; section 3).</p>",
        '<div class="scroll"><table class="grid"><tr><th>learner, or file</th>'
        + "".join(f'<th class="num" title="{_e(LESSONS.get(x, x))}">{_e(x)}</th>' for x in grid.lessons)
        + "</tr>",
    ]
    kind = None
    for row in grid.rows:
        cells = "".join(_grid_cell(row.cell(x)) for x in grid.lessons)
        if row.labelled:
            if kind is None:
                kind = ""
                out.append(f'<tr><th colspan="{width}" class="group">learners (labelled)</th></tr>')
            who = f'{_e(row.who)} <span class="quiet small">{_e("; ".join(row.kinds))}</span>'
        else:
            if row.kinds[0] != kind:
                kind = row.kinds[0]
                n = sum(not r.labelled and r.kinds[0] == kind for r in grid.rows)
                out.append(
                    f'<tr><th colspan="{width}" class="group">unlabelled run{"s" * (n != 1)} on {_e(kind)} '
                    f"({n})</th></tr>"
                )
            who = f'<code class="file">{_e(row.who)}</code>'
        out.append(f"<tr><td>{who}</td>{cells}</tr>")
    out.append("</table></div>")
    return out


def _guess_table(rows) -> list[str]:
    out = [
        "<table><tr><th>key</th><th>what</th><th>guesses</th><th>within 2x</th><th>typical error</th>"
        "<th>measured: min</th><th>median</th><th>max</th><th>model: min</th><th>max</th><th>model within 2x</th></tr>"
    ]
    for row in rows:
        measured = sorted(p.measured for p in row.points)
        judged = f"{row.within_2x} of {len(row.guessed)}" if row.guessed else "-"
        models = [p.model for p in row.with_model]
        made = len(row.guessed)
        share = row.within_2x / made if made else None
        tone = "" if share is None else " ok" if share >= 0.5 else " warn"
        out.append(
            f'<tr><td><a href="#g-{_e(row.key)}"><code>{_e(row.key)}</code></a></td><td>{_what(row)}</td>'
            f'<td class="num">{made} of {len(row.points)}</td><td class="num{tone}">{judged}</td>'
            f"<td>{_e(row.direction())}</td>{_num(measured[0])}{_num(statistics.median(measured))}"
            f"{_num(measured[-1])}{_num(min(models) if models else None)}{_num(max(models) if models else None)}"
            f'<td class="num">{f"{row.model_within_2x} of {len(models)}" if models else "-"}</td></tr>'
        )
    out.append("</table>")
    return out


def _what(row) -> str:
    """What a key measures, with its unit in parentheses (no space inside them)."""
    unit = row.unit.strip()
    return _e(row.what) + (f" ({_e(unit)})" if unit else "")


def _model_table(rows) -> list[str]:
    """The measured-vs-model table of a room with no guesses to show: one compact row per key."""
    out = [
        "<table><tr><th>key</th><th>what</th><th>runs</th><th>measured: min</th><th>median</th><th>max</th>"
        "<th>model: min</th><th>max</th><th>model within 2x</th></tr>"
    ]
    for row in rows:
        measured = sorted(p.measured for p in row.points)
        models = [p.model for p in row.with_model]
        share = row.model_within_2x / len(models) if models else None
        tone = "" if share is None else " ok" if share >= 0.5 else " warn"
        out.append(
            f'<tr><td><a href="#g-{_e(row.key)}"><code>{_e(row.key)}</code></a></td><td>{_what(row)}</td>'
            f'<td class="num">{len(row.points)}</td>{_num(measured[0])}{_num(statistics.median(measured))}'
            f"{_num(measured[-1])}{_num(min(models) if models else None)}{_num(max(models) if models else None)}"
            f'<td class="num{tone}">{f"{row.model_within_2x} of {len(models)}" if models else "-"}</td></tr>'
        )
    out.append("</table>")
    return out


def _guess_detail(row, guessed: bool = True) -> list[str]:
    head = "<th>guess</th><th>measured</th><th>model</th><th>guess off by</th>" if guessed else ""
    out = [
        f'<h4 id="g-{_e(row.key)}">{_e(row.what or row.key)} <code>{_e(row.key)}</code></h4>',
        strip_svg(row, _e),
        f"<details><summary>each run ({len(row.points)})</summary><table><tr><th>who</th><th>machine kind</th>"
        + (head or "<th>measured</th><th>model</th>")
        + "</tr>",
    ]
    for p in row.points:
        if not guessed:
            out.append(f"<tr><td>{_e(p.who)}</td><td>{_e(p.kind)}</td>{_num(p.measured)}{_num(p.model)}</tr>")
            continue
        off = "no guess"
        if p.guess is not None:
            ratio = (p.guess / p.measured) if p.guess > 0 and p.measured > 0 else None
            off = "exact" if p.guess == p.measured else f"{ratio:.2g}x" if ratio else fmt(p.guess - p.measured)
        tone = "" if p.guess is None else " ok" if p.within_2x else " warn"
        out.append(
            f"<tr><td>{_e(p.who)}</td><td>{_e(p.kind)}</td>{_num(p.guess)}{_num(p.measured)}{_num(p.model)}"
            f'<td class="num{tone}">{_e(off)}</td></tr>'
        )
    out.append("</table></details>")
    return out


def _guesses(reading: Reading) -> list[str]:
    rows = guess_rows(reading.runs)
    revealed = sum(r.run["revealed"] for r in reading.runs)
    guessed = any(row.guessed for row in rows)
    out = ['<h2 id="guesses">2. Guesses against the room\'s measurements and the model</h2>']
    if reading.runs and revealed == len(reading.runs):
        out.append(
            '<p class="lead">These runs were made with answers revealed: no guesses to show. Below, each key\'s '
            "measurements are set against the lesson's analytic model, computed for each run's machine.</p>"
        )
    else:
        out.append(
            '<p class="note">Each learner guessed before measuring on their own machine; a guess counts as within 2x '
            "when it is within a factor of 2 of that same run's measurement. The model is the lesson's analytic "
            "prediction, computed for each run's machine. Ratios, not differences: 10 for 20 is as far off as 40.</p>"
        )
        if revealed:
            out.append(
                f'<p class="note">{revealed} run{"s were" if revealed != 1 else " was"} made with the answers '
                "revealed (COURSE_REVEAL): no guess is expected from those.</p>"
            )
        elif rows and not guessed:
            out.append('<p class="note">No learner made a guess in these runs.</p>')
    if not rows:
        return out + ["<p>No guess keys in the merged runs.</p>"]
    out += _guess_table(rows) if guessed else _model_table(rows)
    out.append(
        '<p class="legend">In the plots: '
        + ('<span style="color:#d95f02">&#9650; a learner\'s guess</span>' if guessed else "")
        + '<span style="color:#555">&#9679; a run\'s measurement</span><span style="color:#1f5fbf">&#9670; the '
        'model for that run\'s machine</span><span style="background:#e9f5e9">&nbsp;shaded: within 2x of the median '
        "measurement&nbsp;</span> (point at a mark to see whose it is).</p>"
    )
    lesson = None
    for row in rows:  # each lesson's plots folded, so a room of 30 keeps the page short; the table above sums them up
        if row.key.split("/")[0] != lesson:
            if lesson is not None:
                out.append("</details>")
            lesson = row.key.split("/")[0]
            n = sum(r.key.split("/")[0] == lesson for r in rows)
            out.append(
                f"<details><summary><strong>Lesson {_e(lesson)}</strong> ({_e(LESSONS.get(lesson, ''))}): "
                f"{n} {'guess ' * guessed}key{'s' * (n != 1)}, plotted</summary>"
            )
        out += _guess_detail(row, guessed)
    if lesson is not None:
        out.append("</details>")
    return out


def _files(reading: Reading) -> list[str]:
    out = ['<h2 id="files">5. Skipped and flagged files</h2>']
    if reading.skipped:
        out.append("<table><tr><th>file</th><th>why</th></tr>")
        out += [f"<tr><td><code>{_e(name)}</code></td><td>{_e(why)}</td></tr>" for name, why in reading.skipped]
        out.append("</table>")
    else:
        out.append("<p>None: every file was a usable run file.</p>")
    out.append(f"<details><summary>the {len(reading.runs)} files merged</summary><table>")
    out.append("<tr><th>file</th><th>label</th><th>lesson</th><th>date</th><th>machine</th></tr>")
    for r in reading.runs:
        m = r.run["machine"]
        out.append(
            f"<tr><td><code>{_e(r.name)}</code></td><td>{_e(r.run['label'])}</td><td>{_e(r.run['lesson'])}</td>"
            f"<td>{_e(r.run['date'])}</td><td>{_e(m['cpu'])}, {_e(m['cores'])} cores, torch {_e(m['torch'])}</td></tr>"
        )
    out.append("</table></details>")
    return out


def class_page_html(
    reading: Reading, *, groups_of: Callable[[str], Sequence[Group]] | None = None, made: str | None = None
) -> str:
    """The class page of a folder read by :func:`read_folder`, as one HTML document: the room's hardware and who ran
    what, the guesses against the measurements and the model, the claims that did not hold or were not judged
    (all-held claims folded, not-judged ones grouped by reason), each machine against the atlas (``groups_of``, by
    default :func:`course_lib.runs.groups`; only values outside the recorded range widened by its noise band are
    listed, and the atlas's own runs are left out), and the files skipped or flagged."""
    arguments.instance("reading", reading, Reading, "a Reading (read_folder)")
    arguments.optional(arguments.text, "made", made)
    made = made or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hardware, n_kinds, learners, unlabelled = _hardware(reading)
    body = (
        _header(reading, made, n_kinds, learners, unlabelled)
        + hardware
        + _guesses(reading)
        + claims_section(reading)
        + atlas_section(reading, groups_of)
        + _files(reading)
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>Class page</title>",
            f"<style>{_CSS}</style></head><body>",
            *body,
            "</body></html>",
        ]
    )


@dataclass(frozen=True)
class ClassPage:
    """What :func:`write_class_page` made: the page's path, the folder read, and how long it took (seconds)."""

    path: Path
    reading: Reading
    seconds: float

    def text(self) -> str:
        """What was merged, what was skipped or flagged and why (one line each), and where the page is."""
        runs = self.reading.runs
        lines = [
            f"merged {len(runs)} run file{'s' * (len(runs) != 1)} from {printable(str(self.reading.folder))} "
            f"in {self.seconds:.2f} s"
        ]
        lines += [f"skipped {printable(name)}: {printable(why)}" for name, why in self.reading.skipped]
        lines.append(f"wrote {printable(str(self.path))}")
        return "\n".join(lines)

    __str__ = text


def write_class_page(
    folder: str | os.PathLike,
    out: str | os.PathLike = "class-page",
    *,
    groups_of: Callable[[str], Sequence[Group]] | None = None,
) -> ClassPage:
    """Merge the run files in ``folder`` into one offline page, ``out/index.html`` (``course class``). Files that
    cannot be used are skipped, and copies flagged, each by name with the reason; the rest still merge. Raises
    ``ValueError`` when ``folder`` does not exist or ``out`` is a file."""
    arguments.path("folder", folder)
    arguments.path("out", out)
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise ValueError(f"out {printable(str(target))!r} is a file; give a folder for the page")
    start = time.perf_counter()
    reading = read_folder(folder, exclude=target)
    page = class_page_html(reading, groups_of=groups_of)
    target.mkdir(parents=True, exist_ok=True)
    path = write_atomic(target / PAGE_NAME, page.encode("utf-8", errors="replace"))
    return ClassPage(path, reading, time.perf_counter() - start)
