"""Claims a lesson checks live: a measurement against a bound that its no-effect case fails.

Every check in a lesson notebook goes through :func:`claim`. It takes what was measured, the bound
the lesson says the effect must reach, and the value the same quantity would take if the effect were
absent (``no_effect``): a constant such as 1.0 for a speed-up, or better a control measured in the same
run (the step without its all-reduce, the model without its mask). A bound that the no-effect value
also meets is refused before anything is judged, because such a check could not fail.

The result is shown as one line (held or not, the measured value, the bound, the no-effect value) and
published as ``application/vnd.course.claim+json`` next to it, so an executed notebook carries a
machine-readable list of its claims (the test suite and the website read it). A claim that does not
hold raises :class:`ClaimFailed` with what was expected, what was measured and what to try.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from . import record

_MIME = "application/vnd.course.claim+json"

__all__ = ["BoundAcceptsNoEffect", "ClaimFailed", "Claim", "claim", "judge"]


class ClaimFailed(AssertionError):
    """A lesson's claim did not hold on this machine (the message says what was expected and measured)."""


class BoundAcceptsNoEffect(ValueError):
    """The bound also accepts the no-effect value, so the check could not fail."""


@dataclass(frozen=True)
class Claim:
    """One judged claim: the bound is ``low < measured < high`` (either end may be open)."""

    text: str
    measured: float
    low: float | None
    high: float | None
    no_effect: float
    no_effect_is: str
    unit: str
    held: bool
    key: str = ""

    def bound(self) -> str:
        u = self.unit
        if self.low is not None and self.high is not None:
            return f"between {_fmt(self.low)}{u} and {_fmt(self.high)}{u}"
        if self.low is not None:
            return f"above {_fmt(self.low)}{u}"
        return f"below {_fmt(self.high)}{u}"

    def line(self) -> str:
        mark = "held" if self.held else "DID NOT HOLD"
        return (
            f"Claim {mark}: {self.text}. Measured {_apart(self.measured, (self.low, self.high))}{self.unit}, "
            f"bound {self.bound()}; "
            f"with no effect ({self.no_effect_is}) it would be {_fmt(self.no_effect)}{self.unit}."
        )

    def _repr_pretty_(self, p, cycle) -> None:  # IPython shows the line, not the dataclass
        p.text(self.line())

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = {"text/plain": self.line(), _MIME: asdict(self)}
        if self.key:
            bundle[record.VALUE_MIME] = _entry(self)
        return bundle


def _entry(result: Claim, status: str | None = None, why: str = "") -> dict:
    """The log entry of a judged claim: its key, what it says, the measurement, the bound and the verdict."""
    return {
        "kind": "claim",
        "key": result.key,
        "text": result.text,
        "value": result.measured,
        "low": result.low,
        "high": result.high,
        "no_effect": result.no_effect,
        "no_effect_is": result.no_effect_is,
        "unit": result.unit,
        "status": status or ("held" if result.held else "not held"),
        "why": why,
    }


def _fmt(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return repr(x) if not math.isfinite(x) else "0"
    mag = abs(x)
    if mag >= 1e4 or mag < 1e-3:
        return f"{x:.3g}"
    if mag >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _apart(x: float, ends: tuple) -> str:
    """``x`` as :func:`_fmt` writes it, or with more digits (up to 8) where that would read the same as a bound's
    end it differs from: 1.397 against a bound of 1.4 prints as 1.397, not as 1.4."""
    text = _fmt(x)
    near = [e for e in ends if e is not None and e != x and _fmt(e) == text]
    for digits in range(4, 9):
        if not near or all(f"{x:.{digits}g}" != f"{e:.{digits}g}" for e in near):
            return text if not near else f"{x:.{digits}g}"
    return repr(x)


def _number(value, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError(f"{arg} must be a number, got {type(value).__name__}")
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"{arg} is NaN: the measurement failed before it could be judged")
    return number


def _inside(x: float, low: float | None, high: float | None) -> bool:
    return (low is None or x > low) and (high is None or x < high)


def judge(
    text: str,
    measured: float,
    *,
    above: float | None = None,
    below: float | None = None,
    between: tuple[float, float] | None = None,
    no_effect: float,
    no_effect_is: str = "no effect",
    unit: str = "",
    key: str = "",
) -> Claim:
    """The :class:`Claim` that :func:`claim` shows, without showing it or raising when it does not hold.
    Raises ``ValueError`` when the bound also accepts ``no_effect`` (the check could not fail)."""
    if not isinstance(text, str) or not text.strip():
        raise TypeError("text must be a non-empty string saying what the claim is")
    for arg, value in (("no_effect_is", no_effect_is), ("unit", unit), ("key", key)):
        if not isinstance(value, str):
            raise TypeError(f"{arg} must be a string, got {type(value).__name__}")
    if key:
        record.check_key(key)
    given = [b for b in (above, below, between) if b is not None]
    if len(given) != 1:
        raise ValueError("give exactly one bound: above=..., below=... or between=(low, high)")
    if between is not None:
        if not isinstance(between, (tuple, list)) or len(between) != 2:
            raise TypeError("between must be a pair (low, high)")
        low, high = _number(between[0], "between[0]"), _number(between[1], "between[1]")
        if not low < high:
            raise ValueError(f"between must be (low, high) with low < high, got {between!r}")
    else:
        low = _number(above, "above") if above is not None else None
        high = _number(below, "below") if below is not None else None
    m = _number(measured, "measured")
    n = _number(no_effect, "no_effect")
    probe = Claim(text, m, low, high, n, no_effect_is, unit, held=False, key=key)
    if _inside(n, low, high):
        raise BoundAcceptsNoEffect(
            f"the bound {probe.bound()} also accepts the no-effect value {_fmt(n)}{unit} "
            f"({no_effect_is}), so this check could not fail: tighten the bound"
        )
    return Claim(text, m, low, high, n, no_effect_is, unit, held=_inside(m, low, high), key=key)


def claim(
    text: str,
    measured: float,
    *,
    above: float | None = None,
    below: float | None = None,
    between: tuple[float, float] | None = None,
    no_effect: float,
    no_effect_is: str = "no effect",
    unit: str = "",
    hint: str = "",
    key: str = "",
) -> None:
    """Judge the lesson's claim ``text`` on this machine and show the verdict as one line: ``measured`` must lie
    ``above`` a bound, ``below`` one, or ``between`` two (strictly). ``no_effect`` is what ``measured`` would be
    if the effect were absent, and ``no_effect_is`` says what that case is ("1.0: the same speed", "the step
    without its all-reduce, measured"). Used by every check in the lesson notebooks.

    Raises :class:`ClaimFailed` when the measurement misses the bound, and also when the bound accepts
    ``no_effect`` (a control measured on this machine that cannot be told from the effect; :func:`judge`
    raises :class:`BoundAcceptsNoEffect`, a ``ValueError``, there); ``hint`` is added to that message (what the
    learner can do: rerun on an idle machine, which setting changes the result). Returns nothing, so a claim
    on a cell's last line is not shown twice; :func:`judge` returns the :class:`Claim` instead.

    ``key`` is the claim's stable name (``"04/bf16_step_speedup"``, see :mod:`course_lib.record`): the verdict is
    logged under it, with "not judged" and why where the bound accepted the no-effect value, so the lesson's run
    file and the atlas of recorded runs carry it.
    """
    if not isinstance(hint, str):
        raise TypeError(f"hint must be a string, got {type(hint).__name__}")
    try:
        result = judge(
            text,
            measured,
            above=above,
            below=below,
            between=between,
            no_effect=no_effect,
            no_effect_is=no_effect_is,
            unit=unit,
            key=key,
        )
    except BoundAcceptsNoEffect as err:  # a control measured here landed inside the bound: nothing to tell apart
        if key:
            m, n = _number(measured, "measured"), _number(no_effect, "no_effect")
            low, high = (float(b) if b is not None else None for b in (between or (above, below)))
            probe = Claim(text, m, low, high, n, no_effect_is, unit, held=False, key=key)
            record.log(
                _entry(
                    probe,
                    "not judged",
                    f"the no-effect value {_fmt(n)}{unit} ({no_effect_is}) measured here lies inside the bound",
                )
            )
        raise ClaimFailed(
            f"Claim not judged: {text}. Measured {_fmt(_number(measured, 'measured'))}{unit}, but {err}. "
            "On this machine the effect cannot be told from its absence; the cells above show why."
            + (f"\n{hint}" if hint else "")
        ) from None
    if key:
        record.log(_entry(result))
    _show(result)
    if not result.held:
        raise ClaimFailed(f"{result.line()}" + (f"\n{hint}" if hint else ""))


def _show(result: Claim) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python: one printed line
        print(result.line())
        return
    if get_ipython() is None:
        print(result.line())
    else:
        display(result)
