"""Checks for the exercise notebooks: does your function give the right answers?

Each exercise ends with a call such as::

    checks.check_function(arithmetic_intensity, cases=[((2, 2, 2), 0.333)],
                          reference=compute.matmul_intensity, random_inputs=make_inputs)

It runs small fixed cases with known answers, then compares against a reference on random
inputs, and stops at the first difference with a message saying what was expected, what your
function returned, and a hint. An unfinished exercise (one that still raises
NotImplementedError) gets its own friendly message.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any


class CheckFailed(AssertionError):
    """Your function returned a wrong answer (the message says which and why)."""


class ExerciseNotDone(CheckFailed):
    """The exercise still raises NotImplementedError: write your code in place of that line."""


def _close(got: Any, expected: Any, rtol: float, atol: float) -> bool:
    if isinstance(expected, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(expected)
                and all(_close(g, e, rtol, atol) for g, e in zip(got, expected)))
    if isinstance(expected, dict):
        return (isinstance(got, dict) and got.keys() == expected.keys()
                and all(_close(got[k], expected[k], rtol, atol) for k in expected))
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        try:
            g = float(got)
        except (TypeError, ValueError):
            return False
        return math.isclose(g, float(expected), rel_tol=rtol, abs_tol=atol)
    return got == expected


def _call(fn: Callable, args: tuple, name: str, hint: str) -> Any:
    try:
        return fn(*args)
    except NotImplementedError as exc:
        raise ExerciseNotDone(
            f"{name} is not written yet: replace the `raise NotImplementedError(...)` line with your code."
            + (f"\nHint: {hint}" if hint else "") + (f"\n({exc})" if str(exc) else "")
        ) from None
    except Exception as exc:
        raise CheckFailed(f"{name}{args!r} raised {type(exc).__name__}: {exc}"
                          + (f"\nHint: {hint}" if hint else "")) from exc


def check_function(fn: Callable, cases: Sequence[tuple[tuple, Any]] = (), *, reference: Callable | None = None,
                   random_inputs: Callable[[random.Random], tuple] | None = None, n_random: int = 25,
                   rtol: float = 1e-6, atol: float = 0.0, hint: str = "", seed: int = 0,
                   quiet: bool = False) -> int:
    """Check ``fn`` on fixed ``cases`` ((args, expected) pairs) and on random inputs against ``reference``.

    ``random_inputs(rng)`` returns one args tuple. Returns the number of cases checked; raises
    ``ExerciseNotDone`` or ``CheckFailed`` with an explanation otherwise.
    """
    if not callable(fn):
        raise TypeError(f"fn must be the function you wrote, got {type(fn).__name__}")
    if (reference is None) != (random_inputs is None):
        raise ValueError("reference and random_inputs go together: give both or neither")
    if not cases and reference is None:
        raise ValueError("give fixed cases, a reference with random_inputs, or both")
    name = getattr(fn, "__name__", "your function")
    checked = 0
    for args, expected in cases:
        args = tuple(args)
        got = _call(fn, args, name, hint)
        if not _close(got, expected, rtol, atol):
            raise CheckFailed(f"{name}{args!r}: expected {expected!r}, got {got!r}"
                              + (f"\nHint: {hint}" if hint else ""))
        checked += 1
    if reference is not None:
        rng = random.Random(seed)
        for _ in range(n_random):
            args = tuple(random_inputs(rng))
            expected = reference(*args)
            got = _call(fn, args, name, hint)
            if not _close(got, expected, rtol, atol):
                raise CheckFailed(f"{name}{args!r}: expected {expected!r} (from the reference), got {got!r}"
                                  + (f"\nHint: {hint}" if hint else ""))
            checked += 1
    if not quiet:
        print(f"\u2713 {name}: all {checked} checks passed")
    return checked


def check_value(name: str, got: Any, expected: Any, *, rtol: float = 1e-6, atol: float = 0.0, hint: str = "",
                quiet: bool = False) -> None:
    """Check one computed value (for exercises that ask for a number rather than a function)."""
    if got is NotImplemented or got is None:
        raise ExerciseNotDone(f"{name} is not computed yet: assign your answer to it."
                              + (f"\nHint: {hint}" if hint else ""))
    if not _close(got, expected, rtol, atol):
        raise CheckFailed(f"{name}: expected {expected!r}, got {got!r}" + (f"\nHint: {hint}" if hint else ""))
    if not quiet:
        print(f"\u2713 {name} is right: {got!r}")
