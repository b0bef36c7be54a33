"""The benchmark report card: several saved ``course benchmark`` results side by side (notebook 07.1,
"Compare machines", and ``course report-card``).

A learner runs ``course benchmark`` on each machine they can reach (a laptop, a Colab CPU, a Colab T4),
collects the JSON files in one folder, and calls :func:`write_report_card` on it. The card is a PNG (one
panel per headline figure, one bar per result, the catalog's accelerators as dashed reference lines where
the catalog holds the same quantity) and one self-contained HTML page (the PNG embedded, a table of the
figures with the best result per row, each result's hardware, the files that were skipped and why, and
the reference rows with their sources).

Reference lines are data-sheet ceilings, not measurements: ``matmul_gflops`` against the dense fp32 and
bf16 peaks (TFLOP/s x 1000), ``memory_bandwidth_gbs`` against the memory bandwidth (a CPU result's figure is
one thread's copy by default, well below its own memory's ceiling), ``allreduce_gbs``
against the chip-to-chip link (GB/s per direction). A file that cannot be read as a result is skipped with
one line naming it and the reason; the other files are still compared.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import course_lib

from . import arguments, catalog, plots
from .benchmark.results import HEADLINES, ResultError, load_result
from .benchmark.settings import CV_FLAG

__all__ = [
    "ReportCard",
    "write_report_card",
    "compare_table",
    "process_values",
    "step_times",
    "card_figure",
    "reference_rows",
    "summary_text",
    "hardware_count",
    "DEFAULT_REFERENCES",
    "PNG_NAME",
    "HTML_NAME",
]

DEFAULT_REFERENCES = ("t4", "a100-80gb", "tpu-v5e")
PNG_NAME = "report_card.png"
HTML_NAME = "report_card.html"

# headline key -> the catalog quantities drawn as reference lines: (what, Accelerator -> value in the headline's unit)
_REFERENCE_LINES: dict[str, tuple[tuple[str, Callable], ...]] = {
    "matmul_gflops": (
        ("fp32 peak", lambda a: a.peak_tflops.get("fp32") and a.peak_tflops["fp32"] * 1000),
        ("bf16 peak", lambda a: a.peak_tflops.get("bf16") and a.peak_tflops["bf16"] * 1000),
    ),
    "memory_bandwidth_gbs": (("memory bandwidth", lambda a: a.memory_bandwidth_gbs),),
    "allreduce_gbs": (("link per direction", lambda a: a.interconnect_gbs),),
}


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


# --------------------------------------------------------------------------------------
# Reading results
# --------------------------------------------------------------------------------------


def _files(paths) -> list[Path]:
    """Files and folders (a folder: its ``*.json``, sorted), each file once, in the order given."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not isinstance(paths, Iterable):
        raise TypeError(f"paths must be a file or folder (str or Path) or a list of them, got {type(paths).__name__}")
    out, seen = [], set()
    for p in paths:
        if not isinstance(p, (str, Path)):
            raise TypeError(f"paths must hold str or Path entries, got {type(p).__name__} {p!r}")
        p = Path(p)
        inside = [f for f in sorted(p.glob("*.json")) if not f.is_dir()] if p.is_dir() else []
        for f in inside or [p]:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def _read(path: Path) -> tuple[dict | None, str | None]:
    """(result, None) or (None, why it was skipped). ``load_result`` does the checking; its message starts
    with the file's name, which the "skipped <file>: <reason>" line already shows."""
    if path.is_dir():
        return None, "the folder holds no .json files"
    if not path.exists():
        return None, "no such file or folder"
    try:
        return load_result(path), None
    except ResultError as exc:
        why = str(exc)
        return None, why[len(f"{path}: ") :] if why.startswith(f"{path}: ") else why


def _labels(results: Sequence[dict]) -> list[str]:
    """Each result's label, made unique: a second 'laptop' becomes 'laptop (2)'; a missing one is 'machine <i>'."""
    raw = []
    for i, r in enumerate(results, 1):
        label = " ".join(str(r.get("label") or "").split())
        raw.append(label or f"machine {i}")
    taken, out = set(raw), []
    counts: dict[str, int] = {}
    for label in raw:
        counts[label] = counts.get(label, 0) + 1
        if counts[label] == 1:
            out.append(label)
            continue
        n = counts[label]
        while f"{label} ({n})" in taken:
            n += 1
        counts[label] = n
        out.append(f"{label} ({n})")
        taken.add(out[-1])
    return out


def _hardware_key(result: dict) -> tuple:
    """What stays the same between two runs on one machine: platform, CPU, cores, RAM and accelerators (not the
    thread count, the usable cores or the free memory, which a run's settings or other programs change)."""
    hw = result.get("hardware") if isinstance(result.get("hardware"), dict) else {}
    cpu = hw.get("cpu") if isinstance(hw.get("cpu"), dict) else {}
    accs = hw.get("accelerators") if isinstance(hw.get("accelerators"), list) else []
    return (
        str(hw.get("platform")),
        str(cpu.get("model")),
        str(cpu.get("architecture")),
        str(cpu.get("physical_cores")),
        str(cpu.get("logical_cores")),
        str(hw.get("ram_bytes")),
        tuple(sorted(str(a.get("name")) for a in accs if isinstance(a, dict))),
    )


def hardware_count(results: Sequence[dict]) -> int:
    """How many different hardware descriptions the results hold (platform, CPU model, cores, RAM and
    accelerators): 1 when every result comes from one machine, e.g. at different settings or with another
    program running. Two machines of the same model count as one."""
    return len({_hardware_key(r) for r in results})


def _compared(n_results: int, n_hardware: int) -> str:
    """'2 results on the same hardware', '3 machines', or '3 results from 2 kinds of hardware'."""
    if n_results == 1:
        return "1 result"
    if n_hardware == 1:
        return f"{n_results} results on the same hardware"
    if n_hardware == n_results:
        return f"{n_results} machines"
    return f"{n_results} results from {n_hardware} kinds of hardware"


# --------------------------------------------------------------------------------------
# The comparison (pure)
# --------------------------------------------------------------------------------------


def process_values(result: dict, key: str) -> list[float] | None:
    """A result's figure ``key`` in each of its fresh processes (``details["repeatability"]["per_process"]``), or
    ``None`` where the result holds fewer than two (a result without a recorded spread)."""
    if not isinstance(result, dict):
        raise TypeError(f"result must be a loaded benchmark result (a dict), got {type(result).__name__}")
    if key not in HEADLINES:
        raise ValueError(f"key must be one of {', '.join(HEADLINES)}, got {key!r}")
    rep = (result.get("details") or {}).get("repeatability") or {}
    values = (rep.get("per_process") or {}).get(key)
    if not isinstance(values, list):
        return None
    values = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return values if len(values) >= 2 else None


def step_times(result: dict) -> list[float] | None:
    """A result's time-to-accuracy run of each process divided by its steps (ms per step), or ``None`` where the
    result does not record its steps per process.

    Each process trains from its own seed, and the seed sets how many steps it needs; every result uses the same
    seeds, so the time per step is the part of time to accuracy that the machine decides."""
    if not isinstance(result, dict):
        raise TypeError(f"result must be a loaded benchmark result (a dict), got {type(result).__name__}")
    tta = (result.get("details") or {}).get("time_to_accuracy") or {}
    steps = tta.get("steps_per_process")
    seconds = process_values(result, "time_to_accuracy_s")
    if not isinstance(steps, list) or seconds is None or len(steps) != len(seconds):
        return None
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 for n in steps):
        return None
    return [1e3 * t / n for t, n in zip(seconds, steps)]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def compare_table(results: Sequence[dict]) -> list[dict]:
    """One row per headline figure, in ``HEADLINES`` order: ``key``, ``figure`` (its name), ``unit``, ``better``
    ("higher" or "lower"), ``values`` (machine label -> value or ``None`` where not measured; labels made
    unique as on the card), ``ahead`` (the label with the best value, or ``None`` when no result measured it),
    ``best`` (``ahead`` only where the difference exceeds the measured spread, else ``None``), ``verdict`` (the
    sentence the card shows) and ``spread`` (best over worst, >= 1; ``None`` with fewer than two values, or when
    a value is 0). A pure function of loaded results.

    A winner is called only when the processes do not overlap (the leader's worst process beats every other
    result's best process; with 5 processes each and no real difference, that happens by chance with
    probability 2 / C(10, 5) = 0.8 % per figure, if the runs were interchangeable) and the medians differ by more
    than ``CV_FLAG`` (5 %): results measured one after the other drift together (clock speeds, other programs), so
    a small difference that does not overlap is still no evidence; otherwise the row says "within the spread: no
    winner". A
    result without per-process figures (fewer than two processes) has no spread, and no winner is called.
    Time to accuracy is judged on its time per step (:func:`step_times`) where every result records its steps:
    the seed sets each process's number of steps, which would otherwise widen the spread by as much as an epoch
    (a quarter of the time here) and hide a real difference of that size.
    """
    results = list(results)
    if not all(isinstance(r, dict) and isinstance(r.get("headline"), dict) for r in results):
        raise TypeError("results must be a list of loaded benchmark results (dicts with a 'headline' dict)")
    labels = _labels(results)
    rows = []
    for key, (figure, unit, higher) in HEADLINES.items():
        values = {label: r["headline"].get(key) for label, r in zip(labels, results)}
        present = {k: float(v) for k, v in values.items() if v is not None}
        ahead = (max if higher else min)(present, key=present.get) if present else None
        lo, hi = (min(present.values()), max(present.values())) if present else (0.0, 0.0)
        spread = hi / lo if len(present) >= 2 and lo > 0 else None
        best, verdict = None, "not measured"
        if len(present) == 1:
            best, verdict = ahead, f"measured on {ahead} only"
        elif len(present) >= 2:
            runs = {label: process_values(r, key) for label, r in zip(labels, results) if label in present}
            per_step = ""
            if key == "time_to_accuracy_s":
                steps = {label: step_times(r) for label, r in zip(labels, results) if label in present}
                if all(v is not None for v in steps.values()):
                    runs, per_step = steps, " (per step)"
            if any(v is None for v in runs.values()):
                verdict = "no spread recorded (a result without per-process figures): no winner"
            else:
                mine = runs[ahead]
                others = [v for label, v in runs.items() if label != ahead]
                clear = all(min(mine) > max(v) for v in others) if higher else all(max(mine) < min(v) for v in others)
                # and by more than run-to-run drift: runs made one after the other drift together (clocks, other
                # programs), which the overlap test above cannot see
                clear = clear and all(abs(_median(mine) / _median(v) - 1) > CV_FLAG for v in others)
                best = ahead if clear else None
                verdict = (
                    f"best: {ahead}" + (f", {spread:.3g}x better than the worst" if spread else "") + per_step
                    if clear
                    else "within the spread: no winner" + per_step
                )
        rows.append(
            {
                "key": key,
                "figure": figure,
                "unit": unit,
                "better": "higher" if higher else "lower",
                "values": values,
                "ahead": ahead,
                "best": best,
                "verdict": verdict,
                "spread": spread,
            }
        )
    return rows


def reference_rows(references: Iterable[str] = DEFAULT_REFERENCES) -> list[dict]:
    """The catalog rows drawn as reference lines, with the numbers the card uses (GFLOP/s, GB/s) and their
    sources. Unknown names: ValueError listing the catalog's keys."""
    if isinstance(references, str):
        references = [references]
    rows, seen = [], set()
    for name in references:
        try:
            acc = catalog.get_accelerator(name)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"references: {exc} Valid names: {', '.join(catalog.accelerator_names())}.") from None
        if acc.key in seen:
            continue
        seen.add(acc.key)
        lines = {key: [(what, float(f(acc))) for what, f in spec if f(acc)] for key, spec in _REFERENCE_LINES.items()}
        peaks = {d: acc.peak_tflops[d] * 1000 if acc.peak_tflops.get(d) else None for d in ("fp32", "bf16")}
        rows.append(
            {
                "key": acc.key,
                "name": acc.name,
                "fp32_gflops": peaks["fp32"],
                "bf16_gflops": peaks["bf16"],
                "memory_bandwidth_gbs": float(acc.memory_bandwidth_gbs),
                "interconnect": acc.interconnect,
                "interconnect_gbs": float(acc.interconnect_gbs),
                "lines": lines,
                "source": acc.source,
                "source_date": acc.source_date,
            }
        )
    return rows


def _short(acc_name: str) -> str:
    return acc_name.removeprefix("NVIDIA ").removeprefix("Google ")


# --------------------------------------------------------------------------------------
# Writing the card
# --------------------------------------------------------------------------------------


def _fmt(value) -> str:
    return "n/a" if value is None else plots.short_number(float(value))


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


def _hardware_rows(results: list[dict], labels: list[str], files: list[str]) -> list[dict]:
    out = []
    for label, r, f in zip(labels, results, files):
        hw = r.get("hardware") if isinstance(r.get("hardware"), dict) else {}
        cpu = hw.get("cpu") if isinstance(hw.get("cpu"), dict) else {}
        accs = hw.get("accelerators") if isinstance(hw.get("accelerators"), list) else []
        acc = ", ".join(str(a.get("name", "?")) for a in accs if isinstance(a, dict)) or "none"
        simd = cpu.get("vector_isa") or (
            ", ".join(map(str, cpu.get("simd", []))) if isinstance(cpu.get("simd"), list) else None
        )
        quick = r.get("quick")
        details = r.get("details") if isinstance(r.get("details"), dict) else {}
        threads = details.get("threads", hw.get("torch_threads", "?"))
        matmul = details.get("matmul") if isinstance(details.get("matmul"), dict) else {}
        all_cores = matmul.get("all_cores_gflops")
        out.append(
            {
                "label": label,
                "file": f,
                "cpu": cpu.get("model", "unknown"),
                "threads": threads if isinstance(threads, int) else "?",
                "all_cores": f"{all_cores:.4g}" if isinstance(all_cores, (int, float)) else "-",
                "cores": f"{cpu.get('physical_cores', '?')} physical / {cpu.get('logical_cores', '?')} logical",
                "simd": simd or "unknown",
                "bf16": {True: "native", False: "no"}.get(cpu.get("native_bf16"), "?"),
                "accelerators": acc,
                "device": r.get("device", "unknown"),
                "platform": hw.get("platform", "unknown"),
                "torch": hw.get("torch_version", "unknown"),
                "course": r.get("course_version", "unknown"),
                "created": r.get("created", "unknown"),
                "run": "quick" if quick is True else "full" if quick is False else "unknown",
                "energy": (r.get("energy") or {}).get("source") or "not available"
                if isinstance(r.get("energy"), dict)
                else "unknown",
            }
        )
    return out


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3;text-align:left}td.num{text-align:right}td.best{font-weight:bold;background:#e6f4e6}
img{max-width:100%}.note{color:#555;font-size:0.9em}"""


def _html(card_png: bytes, rows, labels, hw_rows, refs, skipped, n_hardware: int) -> str:
    e = lambda x: html.escape(str(x), quote=True)  # noqa: E731 - every string from a file goes through here
    created = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>Benchmark report card</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Benchmark report card</h1>",
        f'<p class="note">{e(_compared(len(labels), n_hardware))} compared, {len(skipped)} file(s) skipped; '
        f"made {e(created)} by course_lib {e(course_lib.__version__)}. A result is highlighted as "
        "best only where its worst process beats every other result's best process; otherwise the row says "
        "no winner. Time to accuracy is judged on each process's time per step: every result trains from the "
        "same seeds, and the seed sets a process's number of steps, which would otherwise blur the comparison."
        "</p>",
        f'<img alt="Headline figures per result, with catalog reference lines" '
        f'src="data:image/png;base64,{base64.b64encode(card_png).decode("ascii")}">',
        "<h2>Headline figures</h2><table><tr><th>figure</th><th>unit</th><th>better</th>"
        + "".join(f"<th>{e(label)}</th>" for label in labels)
        + "<th>best</th></tr>",
    ]
    for row in rows:
        cells = "".join(
            f'<td class="num{" best" if label == row["best"] else ""}">{e(_fmt(row["values"][label]))}</td>'
            for label in labels
        )
        best = row["verdict"]
        out.append(
            f"<tr><td>{e(row['figure'])}</td><td>{e(row['unit'])}</td><td>{e(row['better'])}</td>{cells}"
            f"<td>{e(best)}</td></tr>"
        )
    out.append(
        "</table><h2>Results and their hardware</h2><table><tr>"
        + "".join(
            f"<th>{h}</th>"
            for h in (
                "result",
                "file",
                "CPU",
                "cores",
                "SIMD",
                "native bf16",
                "torch threads",
                "fp32 matmul, all cores (GFLOP/s)",
                "accelerators",
                "device",
                "platform",
                "torch",
                "course version",
                "date",
                "run",
                "energy source",
            )
        )
        + "</tr>"
    )
    for h in hw_rows:
        out.append(
            "<tr>"
            + "".join(
                f"<td>{e(h[k])}</td>"
                for k in (
                    "label",
                    "file",
                    "cpu",
                    "cores",
                    "simd",
                    "bf16",
                    "threads",
                    "all_cores",
                    "accelerators",
                    "device",
                    "platform",
                    "torch",
                    "course",
                    "created",
                    "run",
                    "energy",
                )
            )
            + "</tr>"
        )
    out.append("</table>")
    out.append(
        '<p class="note">On a CPU the headline figures are measured with the torch thread count shown '
        "(one unless the run set <code>--threads</code>), so that they repeat when another program takes a "
        "core; the all-core matmul rate is listed for comparison. The memory bandwidth headline is then one "
        "core's copy, well below what every core together draws from memory.</p>"
    )
    out.append("<h2>Reference accelerators (catalog data sheets, not measured)</h2>")
    if refs:
        out.append(
            '<p class="note">Dense peaks and vendor figures: ceilings no real program reaches. The matmul '
            "lines are the fp32 and bf16 peaks in GFLOP/s; all-reduce is compared with the chip's link, "
            "per direction.</p><table><tr><th>accelerator</th><th>fp32 peak (GFLOP/s)</th>"
            "<th>bf16 peak (GFLOP/s)</th><th>memory bandwidth (GB/s)</th><th>interconnect (GB/s per "
            "direction)</th><th>source</th><th>checked</th></tr>"
        )
        for r in refs:
            links = "<br>".join(
                f'<a href="{e(u.strip())}">{e(u.strip())}</a>' for u in r["source"].split(";") if u.strip()
            )
            bf16 = _fmt(r["bf16_gflops"]) if r["bf16_gflops"] else "no bf16 in hardware"
            fp32 = _fmt(r["fp32_gflops"]) if r["fp32_gflops"] else "not published"
            out.append(
                f'<tr><td>{e(r["name"])}</td><td class="num">{e(fp32)}</td>'
                f'<td class="num">{e(bf16)}</td><td class="num">{e(_fmt(r["memory_bandwidth_gbs"]))}</td>'
                f"<td>{e(r['interconnect'])}: {e(_fmt(r['interconnect_gbs']))}</td><td>{links}</td>"
                f"<td>{e(r['source_date'])}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>None asked for.</p>")
    out.append("<h2>Skipped files</h2>")
    out.append(
        "<ul>" + "".join(f"<li><code>{e(f)}</code>: {e(why)}</li>" for f, why in skipped) + "</ul>"
        if skipped
        else "<p>None: every file was a usable result.</p>"
    )
    out.append("</body></html>")
    return "\n".join(out)


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
