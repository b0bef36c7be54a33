"""The atlas of recorded runs: for every key a lesson discusses, the values measured on real machines.

The atlas is a folder of run files (``course_lib/tables/atlas/<lesson>/*.json``), each one lesson run on one
machine, written by ``tools/record_atlas.py`` from executed notebooks, never typed. A lesson shows where this
run falls among them with :func:`compare`: per machine kind (CPU, kernel level, bf16 mode, cores, accelerator)
and load (idle or busy), the recorded spread, and this run's value, judged against its own kind and load only
(kinds differ: a range pooled over them would hide an outlier); where its kind has no recorded run, the others are
shown as context and the learner is invited to add their run.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import record
from .runfile import LESSONS, RunFileError, kind_of, load_run, machine

__all__ = ["ATLAS", "Group", "atlas_runs", "claim_keys", "records", "groups", "verdict", "compare", "Comparison"]

ATLAS = Path(__file__).resolve().parents[1] / "tables" / "atlas"


@functools.lru_cache(maxsize=None)
def atlas_runs(folder: str | None = None) -> tuple[dict, ...]:
    """Every run file in the atlas (a damaged one is left out, never trusted), oldest first."""
    root = Path(folder) if folder else ATLAS
    out = []
    for path in sorted(root.glob("*/*.json")):
        try:
            out.append(load_run(path))
        except RunFileError:
            continue
    return tuple(sorted(out, key=lambda r: r["date"]))


def claim_keys(lesson: str) -> dict[str, str]:
    """The claims the atlas has recorded for ``lesson``: key -> what the claim says."""
    if lesson not in LESSONS:
        raise ValueError(f"lesson must be one of {', '.join(LESSONS)}, got {lesson!r}")
    found = {}
    for run in atlas_runs():
        if run["lesson"] == lesson:
            for e in run["entries"]:
                if e["kind"] == "claim":
                    found[e["key"]] = e["text"]
    return found


def records(key: str, what: str | None = None) -> list[tuple[float, dict]]:
    """(value, machine) for every recorded run of ``key`` that measured it (a claim not judged is left out); with
    ``what``, only the runs whose description of the quantity is the same (the same set-up: a value measured at
    another batch size on another machine says so in its description, and is another experiment)."""
    record.check_key(key)
    out = []
    for run in atlas_runs():
        for e in run["entries"]:
            if e["key"] == key and e.get("value") is not None:
                said = e.get("what") or e.get("text") or ""
                if what is None or not what or not said or _same_quantity(said, what, e["kind"] == "claim"):
                    out.append((e["value"], run["machine"]))
                break
    return out


def _same_quantity(said: str, what: str, claim: bool) -> bool:
    """Whether two descriptions name one quantity. A claim's text ends with the quantity it judges, in brackets
    ("... (fp32 / bf16 time)"): a claim reworded around the same quantity is the same experiment. Any other
    description, or a claim without that ending, must match in full."""
    if said == what:
        return True
    if not claim:
        return False
    ends = [re.search(r"\(([^()]*)\)\s*$", t) for t in (said, what)]
    return all(ends) and ends[0].group(1) == ends[1].group(1)


@dataclass(frozen=True)
class Group:
    """The recorded values of one key on one machine kind in one state (idle or busy)."""

    kind: str
    state: str
    values: tuple[float, ...]
    unit: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}, {self.state}"

    def spread(self) -> str:
        lo, hi = min(self.values), max(self.values)
        n = len(self.values)
        if n == 1:
            return f"{_fmt(lo)}{self.unit}"
        return f"{_fmt(lo)} to {_fmt(hi)}{self.unit} ({n} runs)"


def groups(key: str, what: str | None = None) -> list[Group]:
    """The recorded values of ``key`` (of the same set-up, with ``what``) per machine kind and load, in the order
    first recorded."""
    found: dict[tuple[str, str], list[float]] = {}
    for value, m in records(key, what):
        found.setdefault((kind_of(m), "busy" if m.get("busy") else "idle"), []).append(value)
    return [Group(k, s, tuple(v)) for (k, s), v in found.items()]


#: How far beyond the recorded range a value may fall and still count as the same effect: a quarter of the recorded
#: median's size. Timings on shared 2-core machines swing by more than that between runs (tests read it).
NOISE = 0.25
#: Below this many recorded runs there is no spread to speak of: the verdict gives the ratio to them instead.
FEW = 3


def _unit(unit: str) -> str:
    """A unit as it follows a number: " MiB", " points", "x", "%" (a guess's unit is written without the space)."""
    unit = unit.rstrip()
    if not unit or unit.startswith(" ") or unit in ("x", "×", "%"):
        return unit
    return f" {unit}"


#: The lessons whose atlas header (what it holds, what counts as different) this kernel has printed: once each.
_LEGENDS_SHOWN: set[tuple[str, ...]] = set()


def short_kind(label: str) -> str:
    """A kind and load as a reader names it: "Intel Xeon, AVX512, 2 cores, busy"; a setting's narrower kernels are
    "held to AVX2 by a setting", or, on an AVX-512 chip whose bf16 instructions a setting hid, "AVX512, bf16 hidden
    by a setting"."""
    kind, _, state = label.rpartition(", ")
    parts = kind.split(" · ") if kind else [label]
    isa = parts[1].replace(" kernels", "").replace(" (forced, same chip)", "") if len(parts) > 1 else ""
    if len(parts) > 2 and "(forced, same chip)" in parts[1]:
        bf16_hidden = isa.startswith("AVX512") and parts[2] == "no native bf16"
        isa = f"{isa}, bf16 hidden by a setting" if bf16_hidden else f"held to {isa} by a setting"
    rest = [parts[3]] if len(parts) > 3 else []
    rest += parts[4:]  # an accelerator
    return ", ".join([parts[0]] + ([isa] if isa else []) + rest + ([state] if kind and state else []))


def _extremes(others: list[Group], unit: str) -> str:
    """The other kinds' lowest and highest recorded values, each with its kind; one kind: its spread."""
    if not others:
        return ""
    if len(others) == 1:
        return f"{short_kind(others[0].label)} {others[0].spread()}"
    lo = min(others, key=lambda g: min(g.values))
    hi = max(others, key=lambda g: max(g.values))
    n = sum(len(g.values) for g in others)
    return (
        f"{_fmt(min(lo.values))}{unit} ({short_kind(lo.label)}) to {_fmt(max(hi.values))}{unit} "
        f"({short_kind(hi.label)}), {n} runs on {len(others)} kinds"
    )


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


@dataclass(frozen=True)
class Row:
    key: str
    what: str
    unit: str
    value: float
    groups: tuple[Group, ...]
    other_setups: int = 0


def _same(a: float, b: float) -> bool:
    """Equal to rounding: sums taken in another order (another thread count) move the last digits, not the fourth."""
    return abs(a - b) <= 1e-4 * max(abs(a), abs(b), 1e-12)


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return _fmt(lo) if _same(lo, hi) else f"{_fmt(lo)} to {_fmt(hi)}"


def _near(value: float, med: float) -> bool:
    """Within the noise allowance of ``med``: a quarter of its size either way."""
    return abs(value - med) <= NOISE * abs(med)


def _versus(value: float, med: float, unit: str) -> str:
    """``value`` against ``med``: a ratio where both are positive, else the difference."""
    return f"{value / med:.2g}x" if med > 0 and value > 0 else f"{_fmt(value - med)}{unit} from"


def _widened(lo: float, hi: float, med: float) -> tuple[float, float]:
    """The range ``lo``-``hi`` widened by a quarter of the median's size, never across zero."""
    band = NOISE * abs(med)
    low = lo * (1 - NOISE) if lo > 0 and lo - band <= 0 else lo - band
    high = hi * (1 - NOISE) if hi < 0 and hi + band >= 0 else hi + band
    return low, high


def verdict(
    value: float,
    recorded: list[float],
    unit: str = "",
    mine: list[float] | None = None,
    kin: list[float] | None = None,
) -> str:
    """Where ``value`` falls, judged against this run's own machine kind and load only (``mine``), since kinds
    differ: within the noise allowance (:data:`NOISE`) of their median where they are fewer than :data:`FEW`, else
    inside their range widened by it. Without a run of this kind and load, the other runs (``recorded``; ``kin``:
    this kind under the other load) are context, not a verdict, and said to be. A number the same in every recorded
    run is said to be one the machine does not change."""
    if not recorded:
        return "no run of this measurement (same size and settings) recorded yet: yours would be the first"
    lo, hi = min(recorded), max(recorded)
    n = len(recorded)
    runs = f"{n} recorded run{'s' * (n != 1)}"
    if all(_same(v, lo) for v in recorded):
        if _same(value, lo):
            return f"the same as all {runs}: none of the recorded machines changes this number"
        if n >= FEW:
            return f"differs from the {runs}, which all gave {_fmt(lo)}{unit}: another torch release or thread count?"
    noise = f"±{NOISE:.0%}"  # the noise allowance, named in the legend
    if mine:
        med, m = statistics.median(mine), len(mine)
        theirs = f"your kind's {'run' if m == 1 else f'{m} runs'} ({_span(mine)}{unit})"
        if m < FEW:
            if not (med > 0 and value > 0) and not _same(value, med):  # a signed value near zero: no ratio
                return f"{_versus(value, med, unit)} {theirs}; too few runs to know its spread"
            if min(mine) <= value <= max(mine):
                return f"inside {theirs}"
            if _fmt(value) in (_fmt(min(mine)), _fmt(max(mine))):  # outside only beyond the digits shown
                return f"at the edge of {theirs}"
            if _near(value, med):
                return f"just outside {theirs}, within the {noise} noise allowance of their median: no clear difference"
            return (
                f"{_versus(value, med, unit)} {theirs}: beyond {noise}, but {m} run{'s' * (m != 1)} "
                "cannot show its spread: rerun"
            )
        low, high = _widened(min(mine), max(mine), med)
        if min(mine) <= value <= max(mine):
            return f"inside {theirs}"
        if _fmt(value) in (_fmt(min(mine)), _fmt(max(mine))):  # outside only beyond the digits shown
            return f"at the edge of {theirs}"
        if low <= value <= high:
            return f"just outside {theirs}, within the {noise} noise allowance: no clear difference"
        return (
            f"OUTSIDE {theirs} even with {noise} ({_fmt(low)} to {_fmt(high)}{unit}): rerun this section; a value "
            "that repeats is this machine's own (its caches, its clock), one that moves came from a busy moment"
        )
    low, high = _widened(lo, hi, statistics.median(recorded))
    if lo <= value <= hi:
        where = "inside the others"
    elif low <= value <= high:
        where = f"within the {noise} noise allowance of the others ({_fmt(low)} to {_fmt(high)}{unit})"
    else:
        where = f"OUTSIDE the others even with {noise} ({_fmt(low)} to {_fmt(high)}{unit})"
    same = f"; your kind, other load: {_span(kin)}{unit}" if kin else ""
    return f"context only (no run of your kind and load): {where}{same}"


@dataclass(frozen=True)
class Comparison:
    """This run's values set among the atlas's (:func:`compare`): shows as text, and as a plot where asked."""

    rows: tuple[Row, ...]
    this_kind: str
    this_state: str
    atlas_size: str = ""
    legend: tuple[str, ...] = ()  # every kind and load the lesson's runs were recorded on, in recorded order

    def _mine(self, row: Row, same_state: bool = True) -> list[float]:
        return [
            v
            for g in row.groups
            if g.kind == self.this_kind and (g.state == self.this_state) == same_state
            for v in g.values
        ]

    def text(self) -> str:
        """One line per value: what it is, this run's value and its verdict against its own kind and load; then the
        other kinds' lowest and highest recorded values, each named. The first comparison of a lesson in a kernel
        opens with what the atlas holds and what counts as different; ``.by_kind()`` lists every kind's spread."""
        mine_label = f"{self.this_kind}, {self.this_state}"
        lines = []
        if self.legend and tuple(self.legend) not in _LEGENDS_SHOWN:
            lines.append(
                f"{self.atlas_size}. Yours: {short_kind(mine_label)}. Beyond your kind's range widened by "
                f"±{NOISE:.0%} (timings on shared machines swing that much) a value counts as different; "
                "'by a setting': the same chip told by an environment setting to use narrower instructions, "
                "standing in for an older CPU (oneDNN's setting leaves MKL's float32 products free)."
            )
            _LEGENDS_SHOWN.add(tuple(self.legend))
        for row in self.rows:
            recorded = [v for g in row.groups for v in g.values]
            mine, kin = self._mine(row), self._mine(row, same_state=False)
            said = verdict(row.value, recorded, row.unit, mine, kin)
            others = [g for g in row.groups if g.label != mine_label] if mine else list(row.groups)
            context = "" if self._constant(recorded, row.value) else _extremes(others, row.unit)
            n = row.other_setups
            left = (  # said only where nothing is compared: then it says why
                f"; {n} run{'s' * (n != 1)} measured another way (another size, setting or bound), not compared"
                if n and not recorded
                else ""
            )
            lines.append(
                f"{row.what or row.key}: {_fmt(row.value)}{row.unit} here, {said}"
                + (f". Other kinds: {context}" if context else "")
                + left
            )
        if any("(no run of your kind and load)" in line for line in lines):
            lines.append(
                "Values above with no run of your kind and load: save your run (last cell) and hand it in, "
                "so your kind can join the atlas."
            )
        return "\n".join(lines)

    def by_kind(self) -> str:
        """:meth:`text`, then every kind and load's recorded spread, value by value."""
        lines = [self.text()]
        for row in self.rows:
            if len(self.rows) > 1:
                lines.append(f"{row.what or row.key}, by kind:")
            lines += [f"    {short_kind(g.label)}: {g.spread()}" for g in row.groups]
        return "\n".join(lines)

    @staticmethod
    def _constant(recorded: list[float], value: float) -> bool:
        """Every recorded value and this run's the same: the kinds' rows would repeat one number."""
        return bool(recorded) and all(_same(v, value) for v in recorded)

    def __repr__(self) -> str:
        return self.text()

    __str__ = text

    def plot(self):
        """A strip plot: one panel per key, each recorded run a dot coloured by machine kind, this run a star."""
        from .. import plots

        return plots.atlas_strips(
            [
                {
                    "label": (row.what or row.key) + (f" ({row.unit.strip()})" if row.unit.strip() else ""),
                    "value": row.value,
                    "groups": {g.label: g.values for g in row.groups},
                }
                for row in self.rows
            ]
        )


def _as_entry(item, logged: dict) -> dict:
    if isinstance(item, str):
        record.check_key(item)
        found = [e for e in logged.values() if e["key"] == item and e.get("value") is not None]
        if not found:
            raise ValueError(
                f"{item} has not been measured in this session: run the cells above (its claim or guess) first"
            )
        return found[-1]
    if isinstance(item, tuple) and 2 <= len(item) <= 4:
        key, value, *rest = item
        unit, what = (list(rest) + ["", ""])[:2]
        return record.value(key, value, unit=unit, what=what)
    raise TypeError(
        "compare takes keys already logged ('04/bf16_speedup') or (key, value[, unit[, what]]) tuples, got "
        f"{type(item).__name__}"
    )


def compare(*items, this_machine: dict | None = None) -> Comparison:
    """This run's values among the atlas's. Each item is a key this session has logged (a claim's or a guess's)
    or a ``(key, value, unit, what)`` tuple, which is logged here (so the lesson's run file carries it). The
    result shows as text: per machine kind and load, the recorded spread; this run's value; and its verdict against
    its own kind and load (:func:`verdict`), or the other kinds as context where its own has none. ``.plot()``
    draws it."""
    if not items:
        raise TypeError("give at least one key or (key, value, unit, what) tuple")
    logged = {(e["kind"], e["key"]): e for e in record.entries()}
    rows = []
    for item in items:
        e = _as_entry(item, logged)
        if not math.isfinite(e["value"]):
            raise ValueError(f"{e['key']}: not a finite value")
        what = e.get("what") or e.get("text", "")
        same, every = groups(e["key"], what), records(e["key"])
        n_same = sum(len(g.values) for g in same)
        unit = _unit(e.get("unit", ""))
        same = [Group(g.kind, g.state, g.values, unit) for g in same]
        rows.append(Row(e["key"], what, unit, e["value"], tuple(same), len(every) - n_same))
    m = this_machine if this_machine is not None else machine()
    lessons = {record.lesson_of(r.key) for r in rows}
    held = [r for r in atlas_runs() if r["lesson"] in lessons]
    legend = tuple(
        dict.fromkeys(f"{kind_of(r['machine'])}, {'busy' if r['machine'].get('busy') else 'idle'}" for r in held)
    )
    size = (
        f"The atlas holds {len(held)} recorded run{'s' * (len(held) != 1)} of this lesson, on {len(legend)} machine "
        f"kind{'s' * (len(legend) != 1)} and loads"
    )
    return Comparison(tuple(rows), kind_of(m), "busy" if m.get("busy") else "idle", size, legend)


def known_keys(lessons: Iterable[str] = LESSONS) -> set[str]:
    """Every key the atlas holds for ``lessons``."""
    wanted = set(lessons)
    return {e["key"] for r in atlas_runs() if r["lesson"] in wanted for e in r["entries"]}
