"""Checks of a prediction that a learner writes as a function returning their answer.

The answer is kept here only as a hash (of the key and the sorted names), and so is each plausible wrong answer, with
what it means: neither the check cell nor this module shows which set is right. ``check_prediction(fn, key)`` runs
``fn`` (which must not call the course library), compares the hash of what it returns with the answer's, and explains
a wrong answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .core import CheckFailed, Checked, _call, _refuse_evasion


def _digest(key: str, names: Any) -> str:
    """The hash a set of names is kept as: sha256 of ``key``, a colon and the names sorted and joined by commas."""
    return hashlib.sha256(f"{key}:{','.join(sorted(names))}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Prediction:
    names: tuple[str, ...]  # the names an answer may hold
    answer: str  # _digest of the right set
    wrong: dict[str, str]  # _digest of a wrong set -> what it means
    hint: str


_PREDICTIONS: dict[str, _Prediction] = {}  # key -> its prediction; none at present


def check_prediction(fn: Callable[[], Any], key: str, *, hint: str | None = None, quiet: bool = False) -> int:
    """Check ``fn()``, a learner's written prediction, against the answer of ``key`` (one of ``_PREDICTIONS``),
    without showing it; a wrong answer gets what it means. ``fn`` must not call the course library. ``hint``: the
    prediction's own hint unless given. Returns 1."""
    if not callable(fn):
        raise TypeError(f"fn must be the function you wrote, got {type(fn).__name__}")
    if not isinstance(key, str) or key not in _PREDICTIONS:
        raise ValueError(f"no prediction {key!r}; known: {', '.join(sorted(_PREDICTIONS))}")
    prediction = _PREDICTIONS[key]
    hint = prediction.hint if hint is None else hint
    name = getattr(fn, "__name__", "your function")
    more = f"\nHint: {hint}" if hint else ""
    _refuse_evasion(fn, name, hint)
    got = _call(fn, (), name, hint, own_code=True)
    if (
        not isinstance(got, (set, frozenset))
        or not all(isinstance(g, str) for g in got)
        or not got <= set(prediction.names)
    ):
        raise CheckFailed(f"{name}() returned {got!r}: return a set of names from {sorted(prediction.names)}." + more)
    digest = _digest(key, got)
    if digest != prediction.answer:
        shown = "{" + ", ".join(map(repr, sorted(got))) + "}" if got else "set()"
        why = prediction.wrong.get(digest)
        raise CheckFailed(f"{name}() returned {shown}, which is not it." + (f"\n{why}" if why else "") + more)
    if not quiet:
        print(f"\u2713 {name}: right")
    return Checked(1)
