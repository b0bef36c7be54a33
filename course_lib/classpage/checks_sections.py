"""Sections 3 and 4 of the class page: the claims that did not hold or were not judged (grouped by reason), and each
machine against the atlas (only the values beyond its recorded range and noise band listed, the rest folded)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence

from .. import arguments
from ..runs import LESSONS
from ..runs import atlas as atlas_module
from ..runs.atlas import Group
from .figures import fmt
from .markup import _e, _with_unit
from .reading import Reading
from .summary import MIN_RECORDED, NOISE_SHARE, AtlasCell, ClaimRow, atlas_copies, atlas_rows, claim_rows

__all__ = ["claims_section", "atlas_section"]


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
    open_rows = [r for r in rows if not r.all_held]
    held = [r for r in rows if r.all_held]
    failed = sum(bool(r.not_held) for r in rows)
    unjudged = sum(bool(r.not_judged) for r in rows)
    out.append(
        f'<p class="lead">Of the room\'s {len(rows)} claim{"s" * (len(rows) != 1)}: {failed} did not hold on at '
        f"least one run, {unjudged} {'was' if unjudged == 1 else 'were'} not judged on at least one run, and "
        f"{len(held)} held on every run that has {'it' if len(held) == 1 else 'them'} (folded below).</p>"
    )
    if open_rows:
        out.append(
            "<table><tr><th>key</th><th>claim</th><th>held</th><th>did not hold</th><th>not judged</th></tr>"
            + "".join(
                f'<tr><td><code>{_e(r.key)}</code></td><td>{_e(r.text)}</td><td class="num{" ok" if r.held else ""}">'
                f'{r.held}</td><td class="num{" bad" if r.not_held else ""}">{r.not_held}</td>'
                f'<td class="num{" part" if r.not_judged else ""}">{r.not_judged}</td></tr>'
                for r in open_rows
            )
            + "</table>"
        )
    else:
        out.append("<p>Every claim held on every run.</p>")
    if held:
        out.append(
            f"<details><summary>{len(held)} claim{'s' * (len(held) != 1)} held on every run that has "
            f"{'it' if len(held) == 1 else 'them'}</summary>"
            "<table><tr><th>key</th><th>held</th></tr>"
            + "".join(
                f'<tr><td><code title="{_e(r.text)}">{_e(r.key)}</code></td><td class="num">{r.held}</td></tr>'
                for r in held
            )
            + "</table></details>"
        )
    return out + _not_held(rows) + _not_judged(rows)


def _who_list(names: list[str], limit: int = 40) -> str:
    shown = "; ".join(_e(n) for n in names[:limit])
    return shown + (f"; and {len(names) - limit} more" if len(names) > limit else "")


def _who(c) -> str:
    return c.who if c.who == c.file else f"{c.who} ({c.file})"


def _load_of(state: str) -> str:
    return "idle" if state == "idle" else "busy"


def _not_held(rows: Sequence[ClaimRow]) -> list[str]:
    """The claims that did not hold, one row per claim, machine kind, load, bound and reason (a room of 30 where
    one claim failed on one kind gives one row naming them, not 30 rows)."""
    grouped: dict[tuple, list[str]] = {}
    for r in rows:
        for c in r.cases:
            if c.status != "not held":
                continue
            no_effect = (
                "n/a"
                if c.no_effect is None
                else _with_unit(c.no_effect, c.unit) + (f" ({c.no_effect_is})" if c.no_effect_is else "")
            )
            at = (r.key, r.text, c.kind, c.state, _bound(c.low, c.high, c.unit), no_effect, c.why)
            grouped.setdefault(at, []).append(
                _who(c) if c.value is None else f"{_who(c)}: {_with_unit(c.value, c.unit)}"
            )
    if not grouped:
        return []
    out = [
        "<h3>Did not hold: where and why</h3><table><tr><th>key</th><th>claim</th><th>machine kind, load</th>"
        "<th>runs (measured)</th><th>bound</th><th>no-effect value</th><th>why</th></tr>"
    ]
    for (key, text, kind, state, bound, no_effect, why), whos in grouped.items():
        out.append(
            f"<tr><td><code>{_e(key)}</code></td><td>{_e(text)}</td><td>{_e(kind)}, {_e(state)}</td>"
            f'<td class="bad">{len(whos)}: {_who_list(whos)}</td><td>{_e(bound)}</td><td>{_e(no_effect)}</td>'
            f"<td>{_e(why or '-')}</td></tr>"
        )
    out.append("</table>")
    return out


def _not_judged(rows: Sequence[ClaimRow]) -> list[str]:
    """The claims not judged, grouped by the reason the run file gives; within a reason one row per claim, naming
    the machine kinds that did not judge it and those that did (a branch of the lesson a kind does not take shows
    as a claim no run of that kind judged)."""
    by_why: dict[str, dict[str, dict[tuple[str, str], list[str]]]] = {}
    for r in rows:
        for c in r.cases:
            if c.status == "not judged":
                where = by_why.setdefault(c.why.strip() or "no reason recorded", {}).setdefault(r.key, {})
                where.setdefault((c.kind, _load_of(c.state)), []).append(_who(c))
    if not by_why:
        return []
    text = {r.key: r for r in rows}
    out = [
        '<h3>Not judged, by reason</h3><p class="note"><strong>"Not judged" often means the claim does not apply to '
        "that machine, not that the learner skipped it.</strong> Some claims are judged only on some machines (a "
        "VNNI-only, GPU-only or quiet-machine branch of a lesson): every other machine takes another branch and "
        "reports the claim as not judged. Where other runs on the same machine kind and load judged the claim, its "
        "cell more likely did not run (a cell before it stopped, or it was skipped).</p>"
    ]
    for why, keys in sorted(by_why.items(), key=lambda kv: -sum(len(w) for k in kv[1].values() for w in k.values())):
        n = sum(len(w) for k in keys.values() for w in k.values())
        out.append(
            f"<details><summary>{_e(why)}: {len(keys)} claim{'s' * (len(keys) != 1)}, {n} time"
            f"{'s' * (n != 1)}</summary><table><tr><th>key</th><th>claim</th><th>not judged on</th>"
            "<th>judged on the same kind and load</th><th>judged elsewhere</th></tr>"
        )
        for key, where in keys.items():
            row = text[key]
            lines, same = [], []
            for (kind, load), whos in where.items():
                lines.append(
                    f'<span title="{_who_list(whos)}">{_e(kind)}, {_e(load)}: {len(whos)} '
                    f"run{'s' * (len(whos) != 1)}</span>"
                )
                if row.judged(kind, load):
                    same.append(f"{_e(kind)}, {_e(load)}: {row.judged(kind, load)}")
            elsewhere = sum(n for k, s, n in row.judged_on if (k, s) not in where)
            hint = "none: likely a branch this machine does not take" if elsewhere else "none"
            out.append(
                f"<tr><td><code>{_e(key)}</code></td><td>{_e(row.text)}</td><td>{'<br>'.join(lines)}</td>"
                f"<td>{'<br>'.join(same) or hint}</td>"
                f'<td class="num">{elsewhere or "none in this room"}</td></tr>'
            )
        out.append("</table></details>")
    return out


def _spread(values: Sequence[float], unit: str = "") -> str:
    if not values:
        return "none recorded"
    if len(values) == 1:
        return f"{_with_unit(values[0], unit)} (1 run)"
    return f"{fmt(min(values))} to {_with_unit(max(values), unit)} ({len(values)} runs)"


def _flag_row(c: AtlasCell) -> str:
    """One key on one machine kind with a value outside the atlas's range widened by its noise band."""
    lo, hi = c.widened
    if c.thin:
        n = len(c.all_recorded)
        verdict = (
            f'<td class="quiet">the atlas holds only {n} run{"s" * (n != 1)} here: too few to call anything an '
            "outlier</td>"
        )
    else:
        verdict = '<td class="bad">outlier</td>'
    values = "; ".join(f"{_e(who)}: {_e(_with_unit(v, c.unit))}" for who, v in c.flagged)
    median = _with_unit(statistics.median(c.all_recorded), c.unit)
    return (
        f'<tr><td><code>{_e(c.key)}</code></td><td>{_e(c.what)}</td><td class="wrap">{values}</td>'
        f"<td>{_e(_spread(c.all_recorded, c.unit))}, median {_e(median)}</td>"
        f'<td class="nowrap">{_e(fmt(lo))} to {_e(_with_unit(hi, c.unit))}</td>'
        f"<td>{_e(_spread(c.kind_recorded, c.unit))}</td>{verdict}</tr>"
    )


def _atlas(reading: Reading, groups_of: Callable[[str], Sequence[Group]] | None) -> list[str]:
    out = [
        '<h2 id="atlas">4. Each machine against the atlas</h2>',
        '<p class="note">The atlas is the course\'s set of recorded runs. Each value this room measured is set '
        "against the range the atlas recorded for its key (all machine kinds), widened by a noise band: "
        f"{NOISE_SHARE:.0%} of the recorded median, or half the recorded range where that is larger. Only the values "
        "outside that widened range are listed; the rest are counted in the folded summary. Where the atlas holds "
        f"fewer than {MIN_RECORDED} runs of a key, nothing is called an outlier.</p>",
    ]
    if not reading.runs:
        return out + ["<p>No runs merged yet.</p>"]
    recorded = atlas_module.atlas_runs() if groups_of is None else ()
    copies = atlas_copies(reading.runs, recorded)
    if copies:
        out.append(
            f"<p class=\"note\">{len(copies)} of the room's {len(reading.runs)} runs are the atlas's own recorded "
            "runs (the same measurements on the same machine): left out here, so the atlas is not compared with "
            f'itself. <span title="{_who_list([r.name for r in copies])}">(point here for their files)</span></p>'
        )
    machines = atlas_rows(reading.runs, groups_of, recorded)
    if not machines:
        return out + [
            "<p>Every run in this room is one of the atlas's own recorded runs: nothing left to set against it.</p>"
        ]
    verdicts = Counter(v for m in machines for c in m.cells for v in c.verdicts)
    held = f"The atlas holds {len(recorded)} recorded runs. " if groups_of is None else ""
    outside = verdicts["outside"]
    count = f"<strong>{outside} outlier{'s' * (outside != 1)}</strong>" if outside else "no outlier"
    out.append(
        f'<p class="lead">{held}Of the room\'s {sum(verdicts.values())} measured values: {count} (outside the '
        f"recorded range and its noise band, on keys the atlas holds at least {MIN_RECORDED} runs of); "
        f"{verdicts['thin']} outside the widened range where the atlas holds too few runs to say; "
        f"{verdicts['inside'] + verdicts['band']} inside it; {verdicts['no record']} on keys the atlas has no run of "
        "yet.</p>"
    )
    if verdicts["no record"] == sum(verdicts.values()):
        keys = sorted({c.key for m in machines for c in m.cells})
        return out + [
            f'<p class="note">The atlas has no recorded run of any key these runs measured ({_e(", ".join(keys))}), '
            "so nothing can be set against it yet; these runs could be added to it.</p>"
        ]
    flagged = [m for m in machines if any(c.flagged for c in m.cells)]
    if flagged:
        out.append(
            "<table><tr><th>key</th><th>what</th><th>room values outside</th><th>atlas, recorded</th>"
            "<th>widened by the noise band</th><th>atlas, this kind and load</th><th>verdict</th></tr>"
        )
        for m in flagged:  # a row per machine kind and load, then its keys: outliers first, in lesson order
            out.append(
                f'<tr><th colspan="7" class="group">{_e(m.kind)}, {_e(m.state)} ({m.runs} run'
                f"{'s' * (m.runs != 1)})</th></tr>"
            )
            out += [
                _flag_row(c) for c in sorted((c for c in m.cells if c.flagged), key=lambda c: (c.thin, _rank(c.key)))
            ]
        out.append("</table>")
    else:
        out.append("<p>No value falls outside the atlas's recorded range widened by its noise band.</p>")
    return out + _atlas_summary(machines)


def _rank(key: str) -> tuple[int, str]:
    lesson = key.split("/", 1)[0]
    order = list(LESSONS)
    return (order.index(lesson) if lesson in order else len(order), key)


def _atlas_summary(machines) -> list[str]:
    """Everything not listed, folded: per machine kind and load, how many values fell where."""
    total = Counter(v for m in machines for c in m.cells for v in c.verdicts)
    rest = total["inside"] + total["band"] + total["no record"]
    out = [
        f"<details><summary>Everything else, counted: {total['inside']} inside the recorded range, {total['band']} "
        f"within its noise band, {total['no record']} with no atlas record ({rest} values)</summary>"
        "<table><tr><th>machine kind, load</th><th>runs</th><th>values</th><th>inside the range</th>"
        "<th>within the noise band</th><th>outliers</th><th>too few recorded to say</th><th>no atlas record</th>"
        "</tr>"
    ]
    for m in machines:
        n = Counter(v for c in m.cells for v in c.verdicts)
        out.append(
            f'<tr><td>{_e(m.kind)}, {_e(m.state)}</td><td class="num">{m.runs}</td>'
            f'<td class="num">{sum(n.values())}</td><td class="num">{n["inside"]}</td><td class="num">{n["band"]}</td>'
            f'<td class="num{" bad" if n["outside"] else ""}">{n["outside"]}</td><td class="num">{n["thin"]}</td>'
            f'<td class="num">{n["no record"]}</td></tr>'
        )
    out.append("</table>")
    missing = sorted({c.key for m in machines for c in m.cells if c.verdict == "no record"}, key=_rank)
    if missing:
        out.append(
            f'<p class="note">No recorded run in the atlas yet for {len(missing)} key'
            f"{'s' * (len(missing) != 1)}: {_e(', '.join(missing))}. These runs could be added to it.</p>"
        )
    out.append("</details>")
    return out


def claims_section(reading: Reading) -> list[str]:
    """Section 3's HTML lines: claims that did not hold or were not judged, by reason (class page)."""
    arguments.instance("reading", reading, Reading, "the merged folder (classpage.read_folder)")
    return _claims(reading)


def atlas_section(reading: Reading, groups_of: Callable[[str], Sequence[Group]] | None = None) -> list[str]:
    """Section 4's HTML lines: each machine against the atlas, only values beyond the noise band listed."""
    arguments.instance("reading", reading, Reading, "the merged folder (classpage.read_folder)")
    return _atlas(reading, groups_of)
