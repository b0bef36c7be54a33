"""The comparison, a pure function of loaded results: one row per headline figure with a winner called only
beyond the spread over processes, and the catalog rows drawn as reference lines."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .. import catalog
from ..benchmark.results import HEADLINES
from ..benchmark.settings import CV_FLAG
from .reading import _labels

DEFAULT_REFERENCES = ("t4", "a100-80gb", "tpu-v5e")

# headline key -> the catalog quantities drawn as reference lines: (what, Accelerator -> value in the headline's unit)
_REFERENCE_LINES: dict[str, tuple[tuple[str, Callable], ...]] = {
    "matmul_gflops": (
        ("fp32 peak", lambda a: a.peak_tflops.get("fp32") and a.peak_tflops["fp32"] * 1000),
        ("bf16 peak", lambda a: a.peak_tflops.get("bf16") and a.peak_tflops["bf16"] * 1000),
    ),
    "memory_bandwidth_gbs": (("memory bandwidth", lambda a: a.memory_bandwidth_gbs),),
    "allreduce_gbs": (("link per direction", lambda a: a.interconnect_gbs),),
}


def process_values(result: dict, key: str) -> list[float] | None:
    """A result's figure ``key`` in each of its fresh processes (``details["repeatability"]["per_process"]``), or
    ``None`` where the result holds fewer than two (a result without a recorded spread)."""
    if not isinstance(result, dict):
        raise TypeError(f"result must be a loaded benchmark result (a dict), got {type(result).__name__}")
    if key not in HEADLINES:
        raise ValueError(f"key must be one of {', '.join(HEADLINES)}, got {key!r}")
    rep = (result.get("details") or {}).get("repeatability") or {}
    values = (rep.get("per_process") or {}).get(key)
    if not isinstance(values, list):
        return None
    values = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return values if len(values) >= 2 else None


def step_times(result: dict) -> list[float] | None:
    """A result's time-to-accuracy run of each process divided by its steps (ms per step), or ``None`` where the
    result does not record its steps per process.

    Each process trains from its own seed, and the seed sets how many steps it needs; every result uses the same
    seeds, so the time per step is the part of time to accuracy that the machine decides."""
    if not isinstance(result, dict):
        raise TypeError(f"result must be a loaded benchmark result (a dict), got {type(result).__name__}")
    tta = (result.get("details") or {}).get("time_to_accuracy") or {}
    steps = tta.get("steps_per_process")
    seconds = process_values(result, "time_to_accuracy_s")
    if not isinstance(steps, list) or seconds is None or len(steps) != len(seconds):
        return None
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 for n in steps):
        return None
    return [1e3 * t / n for t, n in zip(seconds, steps)]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def compare_table(results: Sequence[dict]) -> list[dict]:
    """One row per headline figure, in ``HEADLINES`` order: ``key``, ``figure`` (its name), ``unit``, ``better``
    ("higher" or "lower"), ``values`` (machine label -> value or ``None`` where not measured; labels made
    unique as on the card), ``ahead`` (the label with the best value, or ``None`` when no result measured it),
    ``best`` (``ahead`` only where the difference exceeds the measured spread, else ``None``), ``verdict`` (the
    sentence the card shows) and ``spread`` (best over worst, >= 1; ``None`` with fewer than two values, or when
    a value is 0). A pure function of loaded results.

    A winner is called only when the processes do not overlap (the leader's worst process beats every other
    result's best process; with 5 processes each and no real difference, that happens by chance with
    probability 2 / C(10, 5) = 0.8 % per figure, if the runs were interchangeable) and the medians differ by more
    than ``CV_FLAG`` (5 %): results measured one after the other drift together (clock speeds, other programs), so
    a small difference that does not overlap is still no evidence; otherwise the row says "within the spread: no
    winner". A
    result without per-process figures (fewer than two processes) has no spread, and no winner is called.
    Time to accuracy is judged on its time per step (:func:`step_times`) where every result records its steps:
    the seed sets each process's number of steps, which would otherwise widen the spread by as much as an epoch
    (a quarter of the time here) and hide a real difference of that size.
    """
    results = list(results)
    if not all(isinstance(r, dict) and isinstance(r.get("headline"), dict) for r in results):
        raise TypeError("results must be a list of loaded benchmark results (dicts with a 'headline' dict)")
    labels = _labels(results)
    rows = []
    for key, (figure, unit, higher) in HEADLINES.items():
        values = {label: r["headline"].get(key) for label, r in zip(labels, results)}
        present = {k: float(v) for k, v in values.items() if v is not None}
        ahead = (max if higher else min)(present, key=present.get) if present else None
        lo, hi = (min(present.values()), max(present.values())) if present else (0.0, 0.0)
        spread = hi / lo if len(present) >= 2 and lo > 0 else None
        best, verdict = None, "not measured"
        if len(present) == 1:
            best, verdict = ahead, f"measured on {ahead} only"
        elif len(present) >= 2:
            runs = {label: process_values(r, key) for label, r in zip(labels, results) if label in present}
            per_step = ""
            if key == "time_to_accuracy_s":
                steps = {label: step_times(r) for label, r in zip(labels, results) if label in present}
                if all(v is not None for v in steps.values()):
                    runs, per_step = steps, " (per step)"
            if any(v is None for v in runs.values()):
                verdict = "no spread recorded (a result without per-process figures): no winner"
            else:
                mine = runs[ahead]
                others = [v for label, v in runs.items() if label != ahead]
                clear = all(min(mine) > max(v) for v in others) if higher else all(max(mine) < min(v) for v in others)
                # and by more than run-to-run drift: runs made one after the other drift together (clocks, other
                # programs), which the overlap test above cannot see
                clear = clear and all(abs(_median(mine) / _median(v) - 1) > CV_FLAG for v in others)
                best = ahead if clear else None
                verdict = (
                    f"best: {ahead}" + (f", {spread:.3g}x better than the worst" if spread else "") + per_step
                    if clear
                    else "within the spread: no winner" + per_step
                )
        rows.append(
            {
                "key": key,
                "figure": figure,
                "unit": unit,
                "better": "higher" if higher else "lower",
                "values": values,
                "ahead": ahead,
                "best": best,
                "verdict": verdict,
                "spread": spread,
            }
        )
    return rows


def reference_rows(references: Iterable[str] = DEFAULT_REFERENCES) -> list[dict]:
    """The catalog rows drawn as reference lines, with the numbers the card uses (GFLOP/s, GB/s) and their
    sources. Unknown names: ValueError listing the catalog's keys."""
    if isinstance(references, str):
        references = [references]
    rows, seen = [], set()
    for name in references:
        try:
            acc = catalog.get_accelerator(name)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"references: {exc} Valid names: {', '.join(catalog.accelerator_names())}.") from None
        if acc.key in seen:
            continue
        seen.add(acc.key)
        lines = {key: [(what, float(f(acc))) for what, f in spec if f(acc)] for key, spec in _REFERENCE_LINES.items()}
        peaks = {d: acc.peak_tflops[d] * 1000 if acc.peak_tflops.get(d) else None for d in ("fp32", "bf16")}
        rows.append(
            {
                "key": acc.key,
                "name": acc.name,
                "fp32_gflops": peaks["fp32"],
                "bf16_gflops": peaks["bf16"],
                "memory_bandwidth_gbs": float(acc.memory_bandwidth_gbs),
                "interconnect": acc.interconnect,
                "interconnect_gbs": float(acc.interconnect_gbs),
                "lines": lines,
                "source": acc.source,
                "source_date": acc.source_date,
            }
        )
    return rows
