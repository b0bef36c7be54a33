"""The class page itself: one self-contained HTML file (inline CSS and SVG, no script, nothing fetched).

Every text that comes from a file (labels, file names, claim texts, reasons, machine descriptions, units) passes
through :func:`escape` (``html.escape`` with ``quote=True``, after writing non-printing characters as escapes) and is
placed only in element text or in double-quoted attributes; nothing from a file goes into a style, a script, a
link or a tag name. :func:`write_class_page` reads a folder, writes ``index.html`` and says what it merged.
"""

from __future__ import annotations

import html
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import arguments
from ..files import write_atomic
from ..runs import LESSONS
from ..runs import atlas as atlas_module
from ..runs.atlas import Group
from .figures import fmt, strip_svg
from .reading import Reading, printable, read_folder
from .summary import VERDICTS, atlas_rows, claim_rows, guess_rows, landscape

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
summary{cursor:pointer;color:#1f5fbf}.legend span{margin-right:1.2em}"""


def escape(text: str) -> str:
    """Text from a file made safe for the page: non-printing characters written as escapes, then
    ``html.escape(..., quote=True)`` (``<``, ``>``, ``&`` and both quotes)."""
    return html.escape(printable(text), quote=True)


def _e(value: object) -> str:
    return escape(str(value))


def _num(x: float | None) -> str:
    return f'<td class="num">{_e(fmt(x))}</td>'


def _with_unit(x: float | None, unit: str) -> str:
    """``1.8x``, ``12 %``, ``150 GFLOP/s``: a unit that is a word gets a space."""
    if x is None or not unit:
        return fmt(x)
    return f"{fmt(x)}{unit}" if unit in ("x", "%") or not unit[0].isalnum() else f"{fmt(x)} {unit}"


def _counts(pairs: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{_e(v)} ({n})" for v, n in pairs)


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
        "run on one machine; a learner is a label (runs saved without one cannot be told apart). Every text on "
        "this page that comes from a file is shown as text, never run.</p>",
        '<nav><a href="#hardware">1. Hardware</a><a href="#guesses">2. Guesses</a><a href="#claims">3. Claims</a>'
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
    return out, len(land.kinds), land.learners, land.unlabelled


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
        unit = f" ({row.unit})" if row.unit else ""
        out.append(
            f'<tr><td><a href="#g-{_e(row.key)}"><code>{_e(row.key)}</code></a></td><td>{_e(row.what)}{_e(unit)}</td>'
            f'<td class="num">{made} of {len(row.points)}</td><td class="num{tone}">{judged}</td>'
            f"<td>{_e(row.direction())}</td>{_num(measured[0])}{_num(statistics.median(measured))}"
            f"{_num(measured[-1])}{_num(min(models) if models else None)}{_num(max(models) if models else None)}"
            f'<td class="num">{f"{row.model_within_2x} of {len(models)}" if models else "-"}</td></tr>'
        )
    out.append("</table>")
    return out


def _guess_detail(row) -> list[str]:
    out = [
        f'<h4 id="g-{_e(row.key)}">{_e(row.what or row.key)} <code>{_e(row.key)}</code></h4>',
        strip_svg(row, _e),
        f"<details><summary>each run ({len(row.points)})</summary><table><tr><th>who</th><th>machine kind</th>"
        f"<th>guess</th><th>measured</th><th>model</th><th>guess off by</th></tr>",
    ]
    for p in row.points:
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
    out = [
        '<h2 id="guesses">2. Guesses against the room\'s measurements and the model</h2>',
        '<p class="note">Each learner guessed before measuring on their own machine; a guess counts as within 2x '
        "when it is within a factor of 2 of that same run's measurement. The model is the lesson's analytic "
        "prediction, computed for each run's machine. Ratios, not differences: 10 for 20 is as far off as 40.</p>",
    ]
    if revealed:
        out.append(
            f'<p class="note">{revealed} run{"s" * (revealed != 1)} were made with the answers revealed '
            "(COURSE_REVEAL): no guess is expected from those.</p>"
        )
    if not rows:
        return out + ["<p>No guess keys in the merged runs.</p>"]
    out += _guess_table(rows)
    out.append(
        '<p class="legend">In the plots: <span style="color:#d95f02">&#9650; a learner\'s guess</span>'
        '<span style="color:#555">&#9679; a run\'s measurement</span><span style="color:#1f5fbf">&#9670; the '
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
                f"{n} guess{'es' * (n != 1)}, plotted</summary>"
            )
        out += _guess_detail(row)
    if lesson is not None:
        out.append("</details>")
    return out


def _bound(low: float | None, high: float | None, unit: str) -> str:
    if low is not None and high is not None:
        return f"between {_with_unit(low, unit)} and {_with_unit(high, unit)}"
    if low is not None:
        return f"above {_with_unit(low, unit)}"
    if high is not None:
        return f"below {_with_unit(high, unit)}"
    return "no bound recorded"


def _claims(reading: Reading) -> list[str]:
    rows = claim_rows(reading.runs)
    out = ['<h2 id="claims">3. Claims that did not hold or were not judged</h2>']
    if not rows:
        return out + ["<p>No claims in the merged runs.</p>"]
    out.append(
        "<table><tr><th>key</th><th>claim</th><th>held</th><th>did not hold</th><th>not judged</th></tr>"
        + "".join(
            f'<tr><td><code>{_e(r.key)}</code></td><td>{_e(r.text)}</td><td class="num{" ok" if r.held else ""}">'
            f'{r.held}</td><td class="num{" bad" if r.not_held else ""}">{r.not_held}</td>'
            f'<td class="num{" warn" if r.not_judged else ""}">{r.not_judged}</td></tr>'
            for r in rows
        )
        + "</table>"
    )
    cases = [(r, c) for r in rows for c in r.cases]
    if not cases:
        return out + ["<p>Every claim held on every machine.</p>"]
    return out + _claim_cases(cases)


def _who_list(names: list[str], limit: int = 40) -> str:
    shown = "; ".join(_e(n) for n in names[:limit])
    return shown + (f"; and {len(names) - limit} more" if len(names) > limit else "")


def _claim_cases(cases) -> list[str]:
    """The failed and unjudged cases, one row per claim, status, machine kind, load, bound and reason (a room of 30
    where one cell did not run gives one row naming them, not 30 rows)."""
    grouped: dict[tuple, list[str]] = {}
    for r, c in cases:
        no_effect = (
            "n/a"
            if c.no_effect is None
            else _with_unit(c.no_effect, c.unit) + (f" ({c.no_effect_is})" if c.no_effect_is else "")
        )
        at = (r.key, r.text, c.status, c.kind, c.state, _bound(c.low, c.high, c.unit), no_effect, c.why)
        who = c.who if c.who == c.file else f"{c.who} ({c.file})"
        grouped.setdefault(at, []).append(who if c.value is None else f"{who}: {_with_unit(c.value, c.unit)}")
    out = [
        "<h3>Where and why</h3><table><tr><th>key</th><th>claim</th><th>machine kind, load</th><th>status</th>"
        "<th>runs (measured)</th><th>bound</th><th>no-effect value</th><th>why</th></tr>"
    ]
    for (key, text, status, kind, state, bound, no_effect, why), whos in grouped.items():
        out.append(
            f"<tr><td><code>{_e(key)}</code></td><td>{_e(text)}</td><td>{_e(kind)}, {_e(state)}</td>"
            f'<td class="{"bad" if status == "not held" else "warn"}">{_e(status)} ({len(whos)})</td>'
            f"<td>{_who_list(whos)}</td><td>{_e(bound)}</td><td>{_e(no_effect)}</td>"
            f"<td>{_e(why or '-')}</td></tr>"
        )
    out.append("</table>")
    return out


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "none recorded"
    if len(values) == 1:
        return f"{fmt(values[0])} (1 run)"
    return f"{fmt(min(values))} to {fmt(max(values))} ({len(values)} runs)"


_TONES = {"inside": "ok", "kind": "warn", "new kind": "plain", "outside": "bad", "no record": "quiet"}


def _atlas_machine(m) -> list[str]:
    """One machine kind and load: a table of its keys the atlas has recorded, then the keys it has not."""
    out = [f"<h3>{_e(m.kind)}, {_e(m.state)} ({m.runs} run{'s' * (m.runs != 1)})</h3>"]
    shown = [c for c in m.cells if c.verdict != "no record"]
    if shown:
        out.append(
            "<table><tr><th>key</th><th>what</th><th>this room</th><th>atlas, this kind and load</th>"
            "<th>atlas, all runs</th><th>verdict</th><th>outliers</th></tr>"
        )
    for c in shown:
        outliers = "; ".join(f"{_e(who)}: {_e(_with_unit(v, c.unit))}" for who, v in c.outliers) or "none"
        out.append(
            f"<tr><td><code>{_e(c.key)}</code></td><td>{_e(c.what)}</td>"
            f"<td>{_e(_spread([v for _, v in c.values]))}</td><td>{_e(_spread(c.kind_recorded))}</td>"
            f'<td>{_e(_spread(c.all_recorded))}</td><td class="{_TONES[c.verdict]}">{_e(VERDICTS[c.verdict])}</td>'
            f"<td>{outliers}</td></tr>"
        )
    if shown:
        out.append("</table>")
    missing = [c.key for c in m.cells if c.verdict == "no record"]
    if missing:
        out.append(
            f'<p class="note">No recorded run in the atlas yet for {len(missing)} key'
            f"{'s' * (len(missing) != 1)}: {_e(', '.join(missing))}. These runs could be added to it.</p>"
        )
    if not m.cells:
        out.append('<p class="note">These runs measured no values.</p>')
    return out


def _atlas(reading: Reading, groups_of: Callable[[str], Sequence[Group]] | None) -> list[str]:
    machines = atlas_rows(reading.runs, groups_of)
    out = [
        '<h2 id="atlas">4. Each machine against the atlas</h2>',
        '<p class="note">The atlas is the course\'s set of recorded runs, grouped by machine kind and load. Each '
        "value this room measured is set against the spread recorded on the same kind and load, and against "
        "everything recorded; a value outside everything recorded is flagged as an outlier. A value outside its "
        "own kind's spread is worth a look, not an error: the atlas may hold few runs of that kind.</p>",
    ]
    if not machines:
        return out + ["<p>No runs merged yet.</p>"]
    verdicts = Counter(v for m in machines for c in m.cells for v in c.verdicts)
    held = f"The atlas holds {len(atlas_module.atlas_runs())} recorded runs. " if groups_of is None else ""
    out.append(
        f'<p class="lead">{held}Of the room\'s {sum(verdicts.values())} measured values: {verdicts["inside"]} inside '
        f"their kind's recorded spread, {verdicts['kind']} outside it but inside the atlas's, {verdicts['new kind']} "
        f"on a kind the atlas has not recorded, <strong>{verdicts['outside']} outside everything recorded</strong>, "
        f"{verdicts['no record']} on keys the atlas has no run of yet.</p>"
    )
    if verdicts["no record"] == sum(verdicts.values()):
        keys = sorted({c.key for m in machines for c in m.cells})
        return out + [
            f'<p class="note">The atlas has no recorded run of any key these runs measured ({_e(", ".join(keys))}), '
            "so nothing can be set against it yet; these runs could be added to it.</p>"
        ]
    for m in machines:
        out += _atlas_machine(m)
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
    """The class page of a folder read by :func:`read_folder`, as one HTML document: the room's hardware, the guesses
    against the measurements and the model, the claims that did not hold or were not judged, each machine against
    the atlas (``groups_of``, by default :func:`course_lib.runs.groups`), and the files skipped or flagged."""
    arguments.instance("reading", reading, Reading, "a Reading (read_folder)")
    arguments.optional(arguments.text, "made", made)
    made = made or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hardware, n_kinds, learners, unlabelled = _hardware(reading)
    body = (
        _header(reading, made, n_kinds, learners, unlabelled)
        + hardware
        + _guesses(reading)
        + _claims(reading)
        + _atlas(reading, groups_of)
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
