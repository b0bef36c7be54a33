"""Checks of a prediction that a learner writes as a function returning their answer (exercise 01's bf16 question).

The answer is kept here only as a hash (of the key and the sorted names), and so is each plausible wrong answer, with
what it means: neither the check cell nor this module shows which set is right. ``check_prediction(fn, key)`` runs
``fn`` (which must not call the course library), compares the hash of what it returns with the answer's, and explains
a wrong answer. tests/test_exercise_01.py works the answer out from the catalog and the course's cost models and
checks that it has this hash.
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


_PREDICTIONS: dict[str, _Prediction] = {
    # Exercise 01, section 5: which of the add (1 FLOP per 3 elements) and the 256 x 256 and 4096 x 4096 products
    # are memory-bound on an A100 in bf16
    "01/a100_bf16_memory_bound": _Prediction(
        names=("add", "matmul 256", "matmul 4096"),
        answer="bbf1589712fa6684",
        wrong={
            "d101879cf5bc0988": "That is the answer in fp32. In bf16 the peak rises 16x while the bandwidth stays, "
            "so the ridge point moves up 16x; halving the bytes only doubles each intensity. Compare again.",
            "b8ec9d1895af6b86": "Halving the bytes doubles every intensity, the 4096 x 4096 product's too: work out "
            "its intensity in bf16 (2n^3 FLOPs over 3n^2 elements of 2 bytes) and compare it with the new ridge "
            "point.",
            "3c051bc6d4a9ab3c": "An add does one FLOP for every 6 bytes it moves in bf16 (8 where the CPU reads the "
            "destination line first): no processor's ridge point is that low, in any precision.",
            "d0ec29075c37847c": "The add did not stop being memory-bound: its intensity only doubled.",
            "d97a8d4ae9c8a0d6": "The larger product has the higher intensity: if one of the two products falls "
            "below the ridge point, it is the smaller one.",
            "7a434b5489893147": "Upside down: the larger a product, the higher its intensity (n^3 FLOPs over n^2 "
            "bytes), so the 4096 x 4096 product is the last to become memory-bound, and the add, at 1/8 to 1/6 "
            "FLOP/byte, is the first.",
            "853fdf44a66e67ea": "The add did not stop being memory-bound (its intensity only doubled), and the "
            "larger product has the higher intensity: if one product falls below the ridge point, it is the smaller "
            "one.",
        },
        hint="Where is the A100's ridge point in bf16, given its catalog row? Where does each intensity move when an "
        "element takes 2 bytes instead of 4? Which operations lie below the ridge?",
    ),
}


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
