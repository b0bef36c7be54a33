"""Checks of a prediction that a learner writes as a function returning their answer (exercise 01's bf16 question).

The answer, and what each plausible wrong answer means, are computed here from the catalog and the course's cost
models, not in the notebook: a check cell that computed the answer would hand it over to anyone who ran its
expression. ``check_prediction(fn, key)`` runs ``fn`` (which must not call the course library), compares what it
returns with the answer for ``key`` without showing it, and explains a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .core import CheckFailed, Checked, _call, _close, _explanation

_BF16_OPS = ("add", "matmul 256", "matmul 4096")


def _a100_bf16_memory_bound() -> tuple[set[str], dict, tuple[str, ...]]:
    """Exercise 01, section 5: which of the add (1 FLOP per 3 elements) and the 256 x 256 and 4096 x 4096 products
    are memory-bound on an A100 in bf16. Returns (answer, {wrong answer: why}, the names an answer may hold)."""
    from .. import catalog, compute

    a100 = catalog.get_accelerator("a100-80gb")
    peak, bandwidth = a100.peak_flops("bf16"), a100.memory_bandwidth_gbs * 1e9
    ops = {
        "add": compute.elementwise_intensity(dtype="bf16"),
        "matmul 256": compute.matmul_intensity(256, 256, 256, "bf16"),
        "matmul 4096": compute.matmul_intensity(4096, 4096, 4096, "bf16"),
    }
    answer = {name for name, i in ops.items() if i * bandwidth < peak}
    wrong = {
        frozenset({"add"}): "That is the answer in fp32. In bf16 the peak rises 16x while the bandwidth stays, so "
        "the ridge point moves up 16x; halving the bytes only doubles each intensity. Compare again.",
        frozenset(_BF16_OPS): "Halving the bytes doubles every intensity, the 4096 x 4096 product's too: work out "
        "its intensity in bf16 (2n^3 FLOPs over 3n^2 elements of 2 bytes) and compare it with the new ridge point.",
        frozenset(): "An add does one FLOP for every three 2-byte elements it moves: no processor's ridge point is "
        "that low, in any precision.",
        frozenset({"matmul 256"}): "The add did not stop being memory-bound: its intensity only doubled.",
        frozenset({"add", "matmul 4096"}): "The larger product has the higher intensity: if one of the two products "
        "falls below the ridge point, it is the smaller one.",
    }
    return answer, wrong, _BF16_OPS


_PREDICTIONS: dict[str, Callable[[], tuple[Any, dict, tuple[str, ...]]]] = {
    "01/a100_bf16_memory_bound": _a100_bf16_memory_bound,
}


def check_prediction(fn: Callable[[], Any], key: str, *, hint: str = "", quiet: bool = False) -> int:
    """Check ``fn()``, a learner's written prediction, against the answer of ``key`` (one of ``_PREDICTIONS``),
    without showing it; a wrong answer gets what it means. ``fn`` must not call the course library. Returns 1."""
    if not callable(fn):
        raise TypeError(f"fn must be the function you wrote, got {type(fn).__name__}")
    if not isinstance(key, str) or key not in _PREDICTIONS:
        raise ValueError(f"no prediction {key!r}; known: {', '.join(sorted(_PREDICTIONS))}")
    answer, wrong, names = _PREDICTIONS[key]()
    name = getattr(fn, "__name__", "your function")
    more = f"\nHint: {hint}" if hint else ""
    got = _call(fn, (), name, hint, own_code=True)
    if not isinstance(got, (set, frozenset)) or not got <= set(names):
        raise CheckFailed(f"{name}() returned {got!r}: return a set of names from {sorted(names)}." + more)
    if not _close(got, answer, 0.0, 0.0):
        shown = "{" + ", ".join(map(repr, sorted(got))) + "}" if got else "set()"
        raise CheckFailed(f"{name}() returned {shown}, which is not it." + _explanation(wrong, got, 0, 0) + more)
    if not quiet:
        print(f"\u2713 {name}: right")
    return Checked(1)
