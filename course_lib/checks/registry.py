"""The checks of exercises 01-03, by name: ``checks.check("03/bus_bandwidth", bus_bandwidth)``.

A check cell that listed its cases, expected values and wrong-answer messages would show the learner the formula
before they wrote it, and one that named its reference (``reference=compute.roofline_regime``) would point at the
solution (``compute.roofline_regime??``). So each exercise's fixed cases, its plausible wrong answers with what
each one means, its hint (worded as questions), its random inputs and its reference live in the library, one module
per exercise (``ex01``, ``ex02``, ``ex03``); a visible check cell holds only the key and the learner's function. The
references are private functions of those modules, written from each exercise's statement; the learner's function
is refused when it calls any function of the course library, these included (``check_function``'s ``refuse``).

``check(key, fn)`` runs the check of ``key``: ``check_function`` with the spec ``_SPECS[key]()`` builds, or
``check_prediction`` for a written prediction (``predictions._PREDICTIONS``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .core import check_function
from . import ex01, ex02, ex03
from .predictions import _PREDICTIONS, check_prediction


_SPECS: dict[str, Callable[[], dict[str, Any]]] = {**ex01.SPECS, **ex02.SPECS, **ex03.SPECS}


def check(key: str, fn: Callable, *, quiet: bool = False) -> int:
    """Run the check ``key`` (``"03/bus_bandwidth"``: exercise 03's) on ``fn``, the learner's function: its fixed
    cases, its random inputs against the exercise's reference, and a message that teaches for each plausible wrong
    answer. Returns how many checks passed; raises ``ExerciseNotDone`` or ``CheckFailed`` otherwise."""
    if key in _PREDICTIONS:
        return check_prediction(fn, key, quiet=quiet)
    if key not in _SPECS:
        raise ValueError(f"no check {key!r}; known: {', '.join(sorted([*_SPECS, *_PREDICTIONS]))}")
    return check_function(fn, quiet=quiet, **_SPECS[key]())
