"""What the class page shows, computed from the merged runs: pure functions, no files and no HTML.

``landscape`` counts the room's machines; ``guess_rows`` sets each guess key's guesses against the room's
measurements and the analytic model; ``claim_rows`` lists the claims that did not hold or were not judged, with
why; ``atlas_rows`` sets each machine kind's values against the atlas of recorded runs (its recorded range
widened by a noise band, the atlas's own runs left out) and flags the outliers; ``lesson_grid`` says who ran which
lesson and how many of its claims held.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..runs import LESSONS, groups, kind_of, state_of
from ..runs import atlas as atlas_module
from ..runs.atlas import Group
from .reading import Loaded

__all__ = [
    "KindRow",
    "Landscape",
    "landscape",
    "GridCell",
    "GridRow",
    "LessonGrid",
    "lesson_grid",
    "factor",
    "GuessPoint",
    "GuessRow",
    "guess_rows",
    "ClaimCase",
    "ClaimRow",
    "claim_rows",
    "AtlasCell",
    "MachineAtlas",
    "atlas_rows",
    "atlas_copies",
    "noise_band",
    "VERDICTS",
    "NOISE_SHARE",
    "MIN_RECORDED",
]


def _check_runs(runs: object) -> tuple[Loaded, ...]:
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence):
        raise TypeError(f"runs must be a list of Loaded runs (read_folder(...).runs), got {type(runs).__name__}")
    for r in runs:
        if not isinstance(r, Loaded):
            raise TypeError(f"runs must hold Loaded runs (read_folder(...).runs), got a {type(r).__name__}")
    return tuple(runs)


def _load(m: dict) -> str:
    """'idle' or 'busy': the load runs are grouped by (the atlas groups the same way)."""
    return "busy" if m.get("busy") else "idle"


def _lesson_rank(key: str) -> tuple[int, str]:
    lesson = key.split("/", 1)[0]
    order = list(LESSONS)
    return (order.index(lesson) if lesson in order else len(order), key)


def _unit(unit: str) -> str:
    """A unit as the page shows it: without the space a run file may keep in front of it (" MiB")."""
    return unit.strip() if isinstance(unit, str) else ""


def _ranked(counter: Counter) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


# ----------------------------------------------------------------------------------------------
# 1. the room's hardware


@dataclass(frozen=True)
class KindRow:
    """One machine kind in the room: its runs, learners (distinct labels), load, lessons, torch builds, platforms."""

    kind: str
    runs: int
    learners: int
    unlabelled: int
    idle: int
    busy: int
    lessons: tuple[str, ...]
    torch: tuple[tuple[str, int], ...]
    platforms: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Landscape:
    """The room's hardware: totals, one :class:`KindRow` per machine kind (most runs first), and per facet (CPU,
    kernel level, bf16 mode, cores, accelerator, load, torch, platform, lesson) how many runs show each value."""

    runs: int
    learners: int
    unlabelled: int
    kinds: tuple[KindRow, ...]
    facets: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]


_FACETS = (
    ("CPU", lambda r: r["machine"]["cpu"] or "unknown"),
    ("kernel ISA level", lambda r: r["machine"]["isa"] + (" (held)" if r["machine"]["held"] else "")),
    ("bf16 mode", lambda r: r["machine"]["bf16"]),
    ("cores", lambda r: str(r["machine"]["cores"])),
    ("accelerator", lambda r: r["machine"]["accelerator"] or "none"),
    ("load", lambda r: state_of(r["machine"])),
    ("torch", lambda r: r["machine"]["torch"]),
    ("platform", lambda r: r["machine"].get("platform") or "unknown"),
    ("lesson", lambda r: r["lesson"]),
)


def landscape(runs: Sequence[Loaded]) -> Landscape:
    """How many runs and learners per machine kind (:func:`course_lib.runs.kind_of`), idle or busy
    (:func:`course_lib.runs.state_of`), with the torch builds, platforms and lessons seen. A learner is a label;
    runs without one are counted apart (they cannot be told apart)."""
    runs = _check_runs(runs)
    by_kind: dict[str, list[dict]] = {}
    for r in runs:
        by_kind.setdefault(kind_of(r.run["machine"]), []).append(r.run)
    rows = []
    for kind, members in by_kind.items():
        labels = {r["label"] for r in members if r["label"]}
        busy = sum(bool(r["machine"]["busy"]) for r in members)
        rows.append(
            KindRow(
                kind=kind,
                runs=len(members),
                learners=len(labels),
                unlabelled=sum(not r["label"] for r in members),
                idle=len(members) - busy,
                busy=busy,
                lessons=tuple(sorted({r["lesson"] for r in members}, key=list(LESSONS).index)),
                torch=_ranked(Counter(r["machine"]["torch"] for r in members)),
                platforms=_ranked(Counter(r["machine"].get("platform") or "unknown" for r in members)),
            )
        )
    rows.sort(key=lambda k: (-k.runs, k.kind))
    facets = tuple((name, _ranked(Counter(get(r.run) for r in runs))) for name, get in _FACETS)
    facets = tuple(
        (name, tuple(sorted(pairs, key=lambda kv: _lesson_rank(kv[0] + "/"))) if name == "lesson" else pairs)
        for name, pairs in facets
    )
    return Landscape(
        runs=len(runs),
        learners=len({r.run["label"] for r in runs if r.run["label"]}),
        unlabelled=sum(not r.run["label"] for r in runs),
        kinds=tuple(rows),
        facets=facets,
    )


@dataclass(frozen=True)
class GridCell:
    """One learner's runs of one lesson: how many runs, and their claims held, not held and not judged."""

    runs: int
    held: int
    not_held: int
    not_judged: int

    @property
    def claims(self) -> int:
        return self.held + self.not_held + self.not_judged


@dataclass(frozen=True)
class GridRow:
    """One learner (a label), or one unlabelled run (its machine kind and file name): a :class:`GridCell` per lesson
    they ran."""

    who: str
    labelled: bool
    kinds: tuple[str, ...]
    files: tuple[str, ...]
    cells: tuple[tuple[str, GridCell], ...]

    def cell(self, lesson: str) -> GridCell | None:
        return dict(self.cells).get(lesson)


@dataclass(frozen=True)
class LessonGrid:
    """Who ran what: the lessons run in the room (in course order) and one :class:`GridRow` per learner, labelled
    learners first (by label), then the unlabelled runs (by machine kind and file name)."""

    lessons: tuple[str, ...]
    rows: tuple[GridRow, ...]


def lesson_grid(runs: Sequence[Loaded]) -> LessonGrid:
    """A learner x lesson grid: a learner is a label; a run without one is its own row, named by its machine kind
    and file name (runs without a label cannot be told apart otherwise). Each cell counts the claims held."""
    runs = _check_runs(runs)
    found: dict[tuple[bool, str], list[Loaded]] = {}
    for r in runs:
        label = r.run["label"]
        found.setdefault((True, label) if label else (False, f"{kind_of(r.run['machine'])}\n{r.name}"), []).append(r)
    rows = []
    for (labelled, key), members in sorted(found.items(), key=lambda kv: (not kv[0][0], kv[0][1].casefold())):
        per_lesson: dict[str, list[dict]] = {}
        for r in members:
            per_lesson.setdefault(r.run["lesson"], []).append(r.run)
        cells = []
        for lesson in sorted(per_lesson, key=lambda x: _lesson_rank(x + "/")):
            statuses = Counter(
                e["status"] for run in per_lesson[lesson] for e in run["entries"] if e["kind"] == "claim"
            )
            cells.append(
                (
                    lesson,
                    GridCell(len(per_lesson[lesson]), statuses["held"], statuses["not held"], statuses["not judged"]),
                )
            )
        kinds = tuple(dict.fromkeys(kind_of(r.run["machine"]) for r in members))
        who = key if labelled else key.split("\n", 1)[1]
        rows.append(GridRow(who, labelled, kinds, tuple(r.name for r in members), tuple(cells)))
    lessons = tuple(sorted({r.run["lesson"] for r in runs}, key=lambda x: _lesson_rank(x + "/")))
    return LessonGrid(lessons, tuple(rows))


# ----------------------------------------------------------------------------------------------
# 2. guesses against measurements and the model


def factor(value: float | None, reference: float) -> float | None:
    """How many times ``value`` is off ``reference`` (1.0 is exact, 2.0 is a factor of 2 either way), or None where a
    ratio means nothing (a value or reference of zero or below, or no value): the rule guesses are scored by."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"value must be a number or None, got {type(value).__name__}")
    if isinstance(reference, bool) or not isinstance(reference, (int, float)):
        raise TypeError(f"reference must be a number, got {type(reference).__name__}")
    if value > 0 and reference > 0:
        return max(value / reference, reference / value)
    return 1.0 if value == reference else None


@dataclass(frozen=True)
class GuessPoint:
    """One run's guess (None where the learner made none), its measurement and its model value."""

    who: str
    kind: str
    guess: float | None
    measured: float
    model: float | None

    @property
    def within_2x(self) -> bool:
        f = factor(self.guess, self.measured)
        return f is not None and f <= 2.0


@dataclass(frozen=True)
class GuessRow:
    """One guess key over the room: what it measures, its unit, and every run's :class:`GuessPoint`."""

    key: str
    what: str
    unit: str
    points: tuple[GuessPoint, ...]

    @property
    def guessed(self) -> tuple[GuessPoint, ...]:
        return tuple(p for p in self.points if p.guess is not None)

    @property
    def within_2x(self) -> int:
        return sum(p.within_2x for p in self.guessed)

    @property
    def with_model(self) -> tuple[GuessPoint, ...]:
        return tuple(p for p in self.points if p.model is not None)

    @property
    def model_within_2x(self) -> int:
        return sum((f := factor(p.model, p.measured)) is not None and f <= 2.0 for p in self.with_model)

    def direction(self) -> str:
        """The typical error of the room's guesses: how many too high, too low, and the median factor."""
        pts = self.guessed
        if not pts:
            return "no guesses made"
        high = sum(p.guess > p.measured for p in pts)
        low = sum(p.guess < p.measured for p in pts)
        ratios = [p.guess / p.measured for p in pts if p.guess > 0 and p.measured > 0]
        counts = f"{high} too high, {low} too low"
        if not ratios:
            return counts
        mid = statistics.median(ratios)
        if 0.8 <= mid <= 1.25:
            return f"{counts}; typical guess about right (median {mid:.2g}x the measurement)"
        if mid > 1:
            return f"{counts}; typically too high (median {mid:.2g}x the measurement)"
        return f"{counts}; typically too low (median {1 / mid:.2g}x below the measurement)"


def _common(texts: list[str]) -> str:
    found = [t for t in texts if t]
    return Counter(found).most_common(1)[0][0] if found else ""


def guess_rows(runs: Sequence[Loaded]) -> tuple[GuessRow, ...]:
    """Every guess key in the room, in lesson order: each run's guess, measurement and model value (each learner
    guessed their own machine's measurement, so within 2x is judged against it)."""
    runs = _check_runs(runs)
    found: dict[str, list[tuple[Loaded, dict]]] = {}
    for r in runs:
        for e in r.run["entries"]:
            if e["kind"] == "guess":
                found.setdefault(e["key"], []).append((r, e))
    rows = []
    for key in sorted(found, key=_lesson_rank):
        pairs = found[key]
        points = tuple(
            GuessPoint(r.who, kind_of(r.run["machine"]), e["guess"], e["value"], e["model"]) for r, e in pairs
        )
        rows.append(
            GuessRow(key, _common([e["what"] for _, e in pairs]), _common([_unit(e["unit"]) for _, e in pairs]), points)
        )
    return tuple(rows)


# ----------------------------------------------------------------------------------------------
# 3. claims that did not hold or were not judged


@dataclass(frozen=True)
class ClaimCase:
    """One run's claim that did not hold or was not judged: where, and why (measured value, bound, no-effect)."""

    who: str
    file: str
    kind: str
    state: str
    status: str
    value: float | None
    low: float | None
    high: float | None
    no_effect: float | None
    no_effect_is: str
    unit: str
    why: str


@dataclass(frozen=True)
class ClaimRow:
    """One claim key over the room: what it says, how many runs held it, did not, or did not judge it, the cases
    that did not hold or were not judged, and where it was judged: ``(machine kind, "idle" or "busy", runs)``."""

    key: str
    text: str
    held: int
    not_held: int
    not_judged: int
    cases: tuple[ClaimCase, ...]
    judged_on: tuple[tuple[str, str, int], ...] = ()

    @property
    def all_held(self) -> bool:
        """Every run that has this claim held it (none did not hold, none left it not judged)."""
        return not self.not_held and not self.not_judged

    def judged(self, kind: str, load: str) -> int:
        """How many runs on ``kind`` under ``load`` ("idle" or "busy") judged this claim (held or not)."""
        return sum(n for k, s, n in self.judged_on if k == kind and s == load)


def claim_rows(runs: Sequence[Loaded]) -> tuple[ClaimRow, ...]:
    """Every claim key in the room, in lesson order, with its counts and its failed or unjudged cases."""
    runs = _check_runs(runs)
    found: dict[str, list[tuple[Loaded, dict]]] = {}
    for r in runs:
        for e in r.run["entries"]:
            if e["kind"] == "claim":
                found.setdefault(e["key"], []).append((r, e))
    rows = []
    for key in sorted(found, key=_lesson_rank):
        pairs = found[key]
        statuses = Counter(e["status"] for _, e in pairs)
        cases = tuple(
            ClaimCase(
                who=r.who,
                file=r.name,
                kind=kind_of(r.run["machine"]),
                state=state_of(r.run["machine"]),
                status=e["status"],
                value=e["value"],
                low=e["low"],
                high=e["high"],
                no_effect=e["no_effect"],
                no_effect_is=e["no_effect_is"],
                unit=_unit(e["unit"]),
                why=e["why"],
            )
            for r, e in pairs
            if e["status"] != "held"
        )
        text = _common([e["text"] for _, e in pairs])
        judged = Counter(
            (kind_of(r.run["machine"]), _load(r.run["machine"])) for r, e in pairs if e["status"] != "not judged"
        )
        judged_on = tuple((k, s, n) for (k, s), n in sorted(judged.items()))
        rows.append(
            ClaimRow(key, text, statuses["held"], statuses["not held"], statuses["not judged"], cases, judged_on)
        )
    return tuple(rows)


# ----------------------------------------------------------------------------------------------
# 4. each machine against the atlas

#: The noise band a recorded range is widened by: this share of the recorded median's magnitude, or half the
#: recorded range where that is larger (runs of one machine differ by this much from one day to the next).
NOISE_SHARE = 0.25
#: Fewer recorded runs of a key than this, and nothing is called an outlier against them.
MIN_RECORDED = 3

#: What a room value is, set against the atlas's recorded range of its key (the page lists the last three).
VERDICTS = {
    "inside": "inside the range the atlas recorded",
    "band": "outside the recorded range, but within its noise band",
    "outside": "outside the recorded range and its noise band: an outlier, or something the atlas has not seen",
    "thin": "outside the recorded range and its noise band, but the atlas holds too few runs to call it an outlier",
    "no record": "the atlas holds no run of this key yet",
}


def noise_band(recorded: Sequence[float]) -> float:
    """How far outside the recorded range a value may lie and still count as noise: :data:`NOISE_SHARE` of the
    recorded median's magnitude, or the recorded range's half-width where that is larger (0.0 for no values)."""
    if isinstance(recorded, (str, bytes)) or not isinstance(recorded, Sequence):
        raise TypeError(f"recorded must be a list of numbers (the atlas's values), got {type(recorded).__name__}")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in recorded):
        raise TypeError("recorded must hold numbers only (the atlas's values)")
    if not recorded:
        return 0.0
    return max(NOISE_SHARE * abs(statistics.median(recorded)), (max(recorded) - min(recorded)) / 2)


@dataclass(frozen=True)
class AtlasCell:
    """One key on one machine kind and load: the room's values ``(who, value)``, the atlas's values on the same
    kind and load, the whole atlas's values, and each room value's verdict (a key of :data:`VERDICTS`) against the
    whole atlas's range widened by :func:`noise_band`."""

    key: str
    what: str
    unit: str
    values: tuple[tuple[str, float], ...]
    kind_recorded: tuple[float, ...]
    all_recorded: tuple[float, ...]
    verdicts: tuple[str, ...]

    @property
    def band(self) -> float:
        return noise_band(self.all_recorded)

    @property
    def widened(self) -> tuple[float, float] | None:
        """The recorded range widened by the noise band, or None where nothing is recorded."""
        if not self.all_recorded:
            return None
        return min(self.all_recorded) - self.band, max(self.all_recorded) + self.band

    @property
    def thin(self) -> bool:
        """The atlas holds fewer than :data:`MIN_RECORDED` runs of this key: too few to call anything an outlier."""
        return len(self.all_recorded) < MIN_RECORDED

    @property
    def outliers(self) -> tuple[tuple[str, float], ...]:
        return tuple(v for v, verdict in zip(self.values, self.verdicts) if verdict == "outside")

    @property
    def flagged(self) -> tuple[tuple[str, float], ...]:
        """The values outside the widened range: the outliers, and those the atlas holds too few runs to judge."""
        return tuple(v for v, verdict in zip(self.values, self.verdicts) if verdict in ("outside", "thin"))

    @property
    def verdict(self) -> str:
        """The worst verdict of the cell's values."""
        for worst in ("outside", "thin", "band", "inside"):
            if worst in self.verdicts:
                return worst
        return "no record"


@dataclass(frozen=True)
class MachineAtlas:
    """One machine kind and load in the room, its runs, and an :class:`AtlasCell` per key it measured."""

    kind: str
    state: str
    runs: int
    cells: tuple[AtlasCell, ...]


def _verdict(value: float, everything: tuple[float, ...]) -> str:
    if not everything:
        return "no record"
    lo, hi = min(everything), max(everything)
    tol = 1e-9 * max(1.0, abs(lo), abs(hi))
    if lo - tol <= value <= hi + tol:
        return "inside"
    band = noise_band(everything)
    if lo - band - tol <= value <= hi + band + tol:
        return "band"
    return "thin" if len(everything) < MIN_RECORDED else "outside"


def _measured(run: dict) -> dict[str, tuple[float, str, str]]:
    """key -> (value, what, unit) for each key the run measured (the first entry of a key, as the atlas reads it)."""
    out: dict[str, tuple[float, str, str]] = {}
    for e in run["entries"]:
        if e.get("value") is not None and e["key"] not in out:
            out[e["key"]] = (e["value"], e.get("what") or e.get("text", ""), _unit(e["unit"]))
    return out


def _identity(run: dict) -> str:
    return json.dumps([run.get("entries"), run.get("machine")], sort_keys=True, default=str)


def _recorded(recorded: Sequence[dict] | None, groups_of: object) -> tuple[dict, ...]:
    if recorded is None:
        return atlas_module.atlas_runs() if groups_of is None else ()
    if isinstance(recorded, (str, bytes, dict)) or not isinstance(recorded, Sequence):
        raise TypeError(
            f"recorded must be a list of run files (runs.atlas.atlas_runs()), got {type(recorded).__name__}"
        )
    return tuple(r for r in recorded if isinstance(r, dict))


def atlas_copies(runs: Sequence[Loaded], recorded: Sequence[dict] | None = None) -> tuple[Loaded, ...]:
    """The room's runs that are the atlas's own recorded runs (the same entries and machine; the label and date may
    differ): set against the atlas, they would only be compared with themselves. ``recorded`` is the atlas's runs,
    by default :func:`course_lib.runs.atlas.atlas_runs`."""
    runs = _check_runs(runs)
    known = {_identity(r) for r in _recorded(recorded, None)}
    return tuple(r for r in runs if _identity(r.run) in known)


def atlas_rows(
    runs: Sequence[Loaded],
    groups_of: Callable[[str], Sequence[Group]] | None = None,
    recorded: Sequence[dict] | None = None,
) -> tuple[MachineAtlas, ...]:
    """Each machine kind and load in the room (most runs first), each key it measured set against the atlas
    (``groups_of(key)``, by default :func:`course_lib.runs.groups`: the recorded values per kind and load): inside
    the recorded range, within its noise band, or outside both (an outlier where the atlas holds at least
    :data:`MIN_RECORDED` runs of the key). The room's runs that are the atlas's own (:func:`atlas_copies` of
    ``recorded``, by default the atlas's runs where ``groups_of`` is left out, else none) are left out."""
    runs = _check_runs(runs)
    if groups_of is not None and not callable(groups_of):
        raise TypeError(f"groups_of must be a function of a key (like runs.groups), got {type(groups_of).__name__}")
    copies = {id(r) for r in atlas_copies(runs, _recorded(recorded, groups_of))}
    if groups_of is None:
        groups_of = groups
    machines: dict[tuple[str, str], list[Loaded]] = {}
    for r in runs:
        if id(r) not in copies:
            machines.setdefault((kind_of(r.run["machine"]), _load(r.run["machine"])), []).append(r)
    found: dict[str, tuple[Group, ...]] = {}
    out = []
    for (kind, state), members in machines.items():
        values: dict[str, list[tuple[str, float]]] = {}
        about: dict[str, tuple[str, str]] = {}
        for r in members:
            for key, (value, what, unit) in _measured(r.run).items():
                values.setdefault(key, []).append((r.who, value))
                about.setdefault(key, (what, unit))
        cells = []
        for key in sorted(values, key=_lesson_rank):
            if key not in found:
                found[key] = tuple(groups_of(key))
            everything = tuple(v for g in found[key] for v in g.values)
            mine = tuple(
                v for g in found[key] if g.kind == kind and (g.state == "idle") == (state == "idle") for v in g.values
            )
            verdicts = tuple(_verdict(v, everything) for _, v in values[key])
            cells.append(AtlasCell(key, *about[key], tuple(values[key]), mine, everything, verdicts))
        out.append(MachineAtlas(kind, state, len(members), tuple(cells)))
    out.sort(key=lambda m: (-m.runs, m.kind, m.state))
    return tuple(out)
