"""Scoring a learner's prediction against the measurement (``score_guess``, after every prediction cell).

Before a measurement the learner writes a number (``my_guess = None  # GB/s?``); the cell after the measurement
scores it. Ratios, not differences: a guess of 10 GB/s for 20 GB/s is as far off as 40 GB/s (a factor of 2 either
way).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from .. import record


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x == 0 or 0.01 <= abs(x) < 1e5 else f"{x:.2e}"


@dataclass(frozen=True)
class GuessScore:
    """A learner's guess set against the measurement and the analytic model (``score_guess``)."""

    what: str
    unit: str
    guess: float | None
    measured: float
    model: float | None
    model_name: str
    name: str
    answer_name: str = "measured here"
    key: str = ""
    close_within: float | None = None
    changed_to: float | None = None  # a later value of the guess, written after the answer was shown: not scored

    @staticmethod
    def _factor(value: float, reference: float) -> float | None:
        """How many times ``value`` is off ``reference`` (>= 1), or None where a ratio means nothing."""
        if value > 0 and reference > 0:
            return max(value / reference, reference / value)
        return None

    @property
    def factor(self) -> float | None:
        """How many times the guess is off the measurement (1.0 is exact); None without a guess."""
        return None if self.guess is None else self._factor(self.guess, self.measured)

    @property
    def model_factor(self) -> float | None:
        """How many times the model is off the measurement; None without a model."""
        return None if self.model is None else self._factor(self.model, self.measured)

    @property
    def direction(self) -> str | None:
        """ "high", "low" or "exact" (the guess against the measurement); None without a guess."""
        if self.guess is None:
            return None
        return "exact" if self.guess == self.measured else ("high" if self.guess > self.measured else "low")

    @property
    def verdict(self) -> str:
        f = self.factor
        if self.guess is None:
            return "no guess"
        if self.guess == self.measured:
            return "exactly right"
        near = self.close_within is not None and abs(self.guess - self.measured) <= self.close_within
        # close_within, where given, is what the measurement tells apart (an exact count: a tight one); else 25 %
        tells_apart = near if self.close_within is not None else f is not None and f <= 1.25
        if self.model is not None and self.guess == self.model:
            return f"exactly the model's answer ({self.model_name})" + (
                ", and within what this measurement can tell apart" if tells_apart else ", not the measurement's"
            )
        if near:
            return "spot on (within what this measurement can tell apart)"
        if f is None:
            return "off by " + _fmt(abs(self.guess - self.measured)) + (f" {self.unit}" if self.unit else "")
        if f <= 1.25 and self.close_within is None:
            return "spot on"
        if f <= 2:
            return "close (within 2x)"
        if f <= 10:
            return "right order of magnitude"
        return "off by more than 10x"

    @property
    def _width(self) -> int:
        """The label column: wide enough for the longest label, at least 24 characters."""
        return max(24, len(self.model_name) + 2, len(self.answer_name) + 2, len(f"your guess ({self.name})") + 2)

    def _line(self, label: str, value: float) -> str:
        u = f" {self.unit}" if self.unit else ""
        f = self._factor(value, self.measured)
        answer = "the measurement" if self.answer_name == "measured here" else "the answer"
        if value == self.measured or (f is not None and f < 1.005):
            rel = f"equal to {answer}"
        elif f is not None:
            rel = f"{f:.2f}x" if f < 10 else f"{f:.3g}x"
            rel += f" {'above' if value > self.measured else 'below'} {answer}"
        else:
            rel = f"{_fmt(value - self.measured)}{u} from {answer}"
        if rel != f"equal to {answer}" and self.close_within is not None:
            if abs(value - self.measured) <= self.close_within:  # nearer than the measurement can tell apart
                rel += ": within what it can tell apart"
        return f"  {label:<{self._width}}{_fmt(value)}{u}  ({rel})"

    def text(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        lines = [f"{self.what}:", f"  {self.answer_name:<{self._width}}{_fmt(self.measured)}{u}"]
        if self.model is not None:
            lines.append(self._line(self.model_name, self.model))
        if self.guess is None:
            lines.append(
                f"  No guess yet. Set `{self.name}` to a number in the prediction cell, rerun it and this "
                "cell, and see how close you were."
            )
        else:
            lines.append(self._line(f"your guess ({self.name})", self.guess))
            lines.append(f"  Verdict: {self.verdict}.")
            if self.changed_to is not None:
                lines.append(
                    f"  Scored: your first guess, locked when its measurement first ran; `{self.name}` now holds "
                    f"{_fmt(self.changed_to)}, written after the answer was shown (restart the kernel to guess afresh)."
                )
            if self.model is not None and self.factor is not None and self.model_factor is not None:
                if self.model_factor < self.factor:
                    lines.append(
                        f"  The {self.model_name} was closer than your guess: work it through by hand "
                        "and see which input you had wrong."
                    )
                else:
                    lines.append(f"  Your guess beat the {self.model_name}: ask what it leaves out.")
        return "\n".join(lines)

    __str__ = text

    def __repr__(self) -> str:
        return self.text()

    def entry(self) -> dict:
        """The log entry (:mod:`course_lib.record`): the key, the guess, the answer, the model and the verdict."""
        return {
            "kind": "guess",
            "key": self.key,
            "what": self.what,
            "guess": self.guess,
            "value": self.measured,
            "model": self.model,
            "unit": self.unit,
            "factor": self.factor,
            "verdict": self.verdict,
        }

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        bundle = {"text/plain": self.text()}
        if self.key:
            bundle[record.VALUE_MIME] = self.entry()
        return bundle


#: The one setting that shows answers without a guess: the website build and the test run set it.
REVEAL_SETTING = "COURSE_REVEAL"


#: Each guess as it stood when its measurement cell first ran (name -> value): the one that is scored, so that a
#: guess edited after the answer was shown does not count. A kernel restart clears it.
LOCKED: dict[str, float] = {}


def revealing() -> bool:
    """Whether a measurement cell shows its answer without a guess (``COURSE_REVEAL=1``; see :func:`guess_first`)."""
    return os.environ.get(REVEAL_SETTING, "").strip().lower() in ("1", "true", "yes", "on")


class GuessFirst(Exception):
    """A measurement cell was run before its guess was written (the prediction lock, :func:`guess_first`)."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this message instead of a traceback
        return [str(self)]


def guess_first(**guesses: Any) -> None:
    """The prediction lock, at the top of each cell that measures what the learner predicted:
    ``checks.guess_first(guess_ratio=guess_ratio)``. A guess still ``None`` stops the cell before it shows
    anything, with a message that says to write the guess and run the cell again, so "Run all" stops at each
    prediction instead of printing every answer. With ``COURSE_REVEAL=1`` (set by the website build and the
    tests, and by a learner who wants the answers without guessing) it prints one line saying so and goes on.
    A guess that is not a number raises ``TypeError`` at once. The first number each guess holds here is locked
    (:data:`LOCKED`): :func:`score_guess` scores it, even after the variable is edited once the answer was shown.
    """
    if not guesses:
        raise TypeError("name the guess: checks.guess_first(guess_ratio=guess_ratio)")
    missing = []
    for name, guess in guesses.items():
        value = _as_number(guess, name, allow_none=True)
        if value is None:
            missing.append(name)
        else:
            LOCKED.setdefault(name, value)  # the first value only: a later edit is shown, not scored
    if not missing:
        return
    names = ", ".join(f"`{n}`" for n in missing)
    if revealing():
        print(f"(No guess in {names}: this copy was run with its answers shown; make your guess before reading on.)")
        return
    raise GuessFirst(
        f"Guess first: set {names} in the prediction cell above to a number, run that cell, then run this one again."
        f"\n(To see every answer without guessing, run `%env {REVEAL_SETTING}=1` in a cell; the guess will not be "
        "scored.)"
    )


def _as_number(value: Any, name: str, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError(
            f"{name} must be a number{' or None' if allow_none else ''}, got {type(value).__name__}"
            f" {value!r}" + (" (write it without quotes, e.g. 20 not '20')" if isinstance(value, str) else "")
        )
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return x


def score_guess(
    guess: float | None,
    measured: float,
    *,
    model: float | None = None,
    unit: str = "",
    what: str = "Your prediction",
    model_name: str = "model",
    name: str = "my_guess",
    answer_name: str = "measured here",
    key: str = "",
    close_within: float | None = None,
) -> GuessScore:
    """Score the learner's ``guess`` against ``measured`` (and the analytic ``model``, if any).

    Used after every prediction cell in the notebooks. Returns a ``GuessScore`` that displays as a
    short report: the measurement, what the model said and how far off it was, the guess and how far
    off it was (a factor, and which way), or, with ``guess=None``, how to make one. ``name`` is the
    variable the learner fills in, so the message can point at it; ``answer_name`` labels the answer (a
    computed one, such as a cost model's, says so instead of "measured here"). ``key`` is the stable name the
    guess is logged under (:mod:`course_lib.record`: the lesson's run file, the class page); ``close_within`` is an
    absolute difference this measurement cannot tell apart from none (for answers near 0, where a ratio means
    nothing).
    """
    g = _as_number(guess, "guess", allow_none=True)
    m = _as_number(measured, "measured", allow_none=False)
    mo = _as_number(model, "model", allow_none=True)
    for arg, value in (
        ("unit", unit),
        ("what", what),
        ("model_name", model_name),
        ("name", name),
        ("answer_name", answer_name),
    ):
        if not isinstance(value, str):
            raise TypeError(f"{arg} must be a string, got {type(value).__name__}")
    if key:
        record.check_key(key)
    near = None if close_within is None else _as_number(close_within, "close_within", allow_none=False)
    if near is not None and near < 0:
        raise ValueError(f"close_within must be >= 0, got {close_within!r}")
    first = LOCKED.get(name)
    changed = g if g is not None and first is not None and g != first else None
    if changed is not None:
        g = first
    score = GuessScore(
        what=what,
        unit=unit,
        guess=g,
        measured=m,
        model=mo,
        model_name=model_name,
        name=name,
        answer_name=answer_name,
        key=key,
        close_within=near,
        changed_to=changed,
    )
    if key:
        record.log(score.entry())
    return score
