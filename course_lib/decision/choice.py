"""Which candidates of the decision guide are out and why, and the one it picks: the cheapest feasible (or the
lowest energy), or, when none is feasible, the one the smallest change of deadline or budget makes feasible."""

from __future__ import annotations

from .assumptions import STATES_FRACTION, TOTAL_FRACTION
from .candidates import _Job, _micro
from .options import _WHERE, Option, _gb, _hours, _money, _num, _rank


def _why_not(o: Option, job: _Job, privacy: str, budget: float | None, deadline: float | None) -> str:
    """Why an option is out ('' if it is feasible)."""
    if not o.fits:
        room = STATES_FRACTION if job.activation_bytes is None else TOTAL_FRACTION
        why = f"needs {o.memory_bytes / 1e9:.3g} GB per device, more than {room:.0%} of {o.device_bytes / 1e9:.3g} GB"
        if job.activation_bytes is not None and job.batch_size > 1:
            why += (
                f", even with gradient accumulation down to one sample per micro-batch "
                f"({_gb(_micro(job, job.batch_size))} of activations): shard, add devices, or checkpoint "
                f"activations"
            )
        return why
    if privacy == "regulated" and o.where == "cloud":
        return "regulated data may not leave the premises"
    if o.usd is None:
        return "no price in the table"
    if deadline is not None and o.hours > deadline:
        return f"{o.hours:.3g} h is past the {deadline:g} h deadline"
    if budget is not None and o.usd > budget:
        return f"{o.usd:,.0f} USD is over the {budget:,.0f} USD budget"
    return ""


def _relax(pool: list[Option], budget: float | None, deadline: float | None, energy: str) -> tuple[Option | None, str]:
    """The option the smallest change of deadline or budget makes feasible, and that change in words."""
    if not pool:
        return None, ""
    changes = []
    if deadline is not None:
        ok = [o for o in pool if budget is None or o.usd <= budget]
        if ok:
            o = min(ok, key=lambda o: (o.hours, _rank(o, energy)))
            changes.append((o.hours / deadline, o, f"allow {o.hours:.3g} h instead of {deadline:g} h"))
    if budget is not None:
        ok = [o for o in pool if deadline is None or o.hours <= deadline]
        if ok:
            o = min(ok, key=lambda o: (o.usd, o.hours))
            changes.append((o.usd / budget, o, f"raise the budget from {budget:,.0f} to {o.usd:,.0f} USD"))
    if not changes:  # neither alone is enough: change both, by the smallest factor
        o = min(pool, key=lambda o: max(o.hours / deadline, o.usd / budget))
        changes.append(
            (0, o, f"allow {o.hours:.3g} h instead of {deadline:g} h and {o.usd:,.0f} USD instead of {budget:,.0f} USD")
        )
    _, o, text = min(changes, key=lambda c: c[0])
    return o, f"Smallest change: {text} ({o.devices} x {o.name}, {_WHERE[o.where]})."


def _choose(
    options: list[Option], privacy: str, budget: float | None, deadline: float | None, energy: str
) -> tuple[Option | None, str, str]:
    """(the choice, the smallest change that makes it feasible or "", the sentence on how it was chosen). The
    cheapest feasible option (``energy="low"``: the one with the fewest kWh), on the fewest devices within 2 % of
    its cost; with none feasible, ``_relax``'s, or None when no option fits at all."""
    feasible = [o for o in options if o.feasible]
    if not feasible:
        pool = [o for o in options if o.fits and o.usd is not None and (privacy != "regulated" or o.where != "cloud")]
        best, relax = _relax(pool, budget, deadline, energy)
        return best, relax, "No option meets every constraint. " + relax
    best = min(feasible, key=lambda o: _rank(o, energy))
    if energy == "any":  # more devices only when they pay: within 2 % of the cheapest, the fewest
        best = min(
            (o for o in feasible if (o.hardware, o.where) == (best.hardware, best.where) and o.usd <= 1.02 * best.usd),
            key=lambda o: (o.devices, o.usd),
        )
    other = min(
        (o for o in feasible if (o.hardware, o.where) != (best.hardware, best.where)),
        key=lambda o: _rank(o, "any"),
        default=None,
    )  # energy "low": the cheapest; else the next
    other_text = (
        ""
        if other is None
        else (
            f"{other.devices} x {other.name} ({_WHERE[other.where]}): "
            f"{_money(other.usd)}, {_hours(other.hours)}, {_num(other.kwh, 'kWh')}"
        )
    )
    chosen_from = (
        f"{'Lowest energy' if energy == 'low' else 'Cheapest'} of {len(feasible)} feasible options (of "
        f"{len(options)} candidates)"
        + (f"; {'the cheapest' if energy == 'low' else 'next'}: {other_text}" if other else "")
        + "."
        + (" Options without a published power figure (recent TPUs) come last." if energy == "low" else "")
    )
    return best, "", chosen_from
