"""A ``course benchmark`` result as a readable table (printed by ``course benchmark``): each headline figure with
its coefficient of variation over the fresh processes, the flags and their likely causes, and how the run
differs from the MLPerf Training rules."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .results import HEADLINES, check_result
from .settings import CV_FLAG

__all__ = ["StartupSplit", "startup_split", "summary_text"]


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def summary_text(result: dict) -> str:
    """A readable table of a result's headline figures (printed by ``course benchmark``).

    Each figure with its coefficient of variation over the fresh processes, flagged above ``CV_FLAG``
    (time to accuracy: flagged on its time per step, with its spread's cause, the steps each seed needed,
    printed), then how the run differs from the MLPerf Training rules.
    """
    check_result(result)
    d = result["details"]
    threads = d.get("threads", result["hardware"].get("torch_threads"))
    rep = d.get("repeatability", {})
    cvs, n_proc = rep.get("cv", {}), rep.get("processes")
    machine_cv = rep.get("machine_cv") or cvs  # results written before the per-step judgement: the plain CV
    seeds = rep.get("seed_spread") or {}
    how = (
        f"{n_proc} {'fresh ' if rep.get('fresh') else ''}processes x {d.get('rounds_per_process', '?')} round(s)"
        if n_proc
        else f"{d.get('rounds', '?')} rounds"
    )
    lines = [
        f"Benchmark of {result['label']} on {result['device']} ({threads} torch thread(s), "
        f"{'quick, ' if result['quick'] else ''}{how}, {result['seconds']:.0f} s)",
        f"  {'test':<28}{'value':>12}  {'unit':<10} {'better':<7} CV over processes (flag > {CV_FLAG:.0%})",
    ]
    for key, (name, unit, higher) in HEADLINES.items():
        value = result["headline"][key]
        if key == "time_to_accuracy_s":
            name = f"time to accuracy {d.get('time_to_accuracy', {}).get('target_accuracy', '')}"
        if value is None:
            why = d.get("allreduce", {}).get("why") if key == "allreduce_gbs" else result["energy"].get("why")
            lines.append(f"  {name:<28}{'-':>12}  {why or 'not measured'}")
            continue
        cv, judged = cvs.get(key), machine_cv.get(key)
        flag = isinstance(judged, (int, float)) and judged > CV_FLAG
        mark = "" if not isinstance(cv, (int, float)) else f"{cv:.1%}"
        if mark and key == "time_to_accuracy_s" and seeds.get("steps_per_process") and isinstance(judged, (int, float)):
            steps = seeds["steps_per_process"]
            mark += (
                f" (the seeds: {min(steps)}-{max(steps)} steps per process; per step {judged:.1%}"
                f"{'  FLAGGED' if flag else ''})"
            )
        elif flag:
            mark += "  FLAGGED: not repeatable"
        lines.append(f"  {name:<28}{_fmt(value):>12}  {unit:<10} {'higher' if higher else 'lower':<7} {mark}")
        mm = d.get("matmul", {})
        if key == "matmul_gflops" and "all_cores_gflops" in mm:
            name = f"  on all {mm['all_cores']} cores"
            lines.append(
                f"  {name:<28}{_fmt(mm['all_cores_gflops']):>12}  {unit:<10} {'higher':<7} "
                f"(not a headline: other programs change it; spread {mm['all_cores_spread']:.0%})"
            )
        bw = d.get("memory_bandwidth", {})
        if key == "memory_bandwidth_gbs" and "all_cores_gbs" in bw:
            name = f"  on all {bw['all_cores']} cores"
            lines.append(f"  {name:<28}{_fmt(bw['all_cores_gbs']):>12}  {unit:<10} {'higher':<7} (not a headline)")
    lines += _notes(result, rep, seeds)
    return "\n".join(lines)


def _notes(result: dict, rep: dict, seeds: dict) -> list[str]:
    """The lines under the table: how a figure is combined, why time to accuracy varies, what was flagged."""
    d, cvs, n_proc = result["details"], rep.get("cv", {}), rep.get("processes")
    lines: list[str] = []
    if n_proc:
        lines.append(
            f"  each figure: the mean of {n_proc} processes' figures without the best and the worst "
            "(MLPerf's scoring of time to accuracy)"
        )
    tta_cv = cvs.get("time_to_accuracy_s")
    steps = seeds.get("steps_per_process") or []
    if len(set(steps)) > 1 and isinstance(tta_cv, (int, float)) and tta_cv > CV_FLAG:
        lines.append(
            f"  note: time to accuracy varies by {tta_cv:.0%} between processes chiefly because each trains "
            f"from its own seed, which sets how many steps it needs ({', '.join(map(str, steps))}); MLPerf "
            "averages several seeded runs for the same reason. Its time per step is what the machine "
            "decides, and is what the flag judges"
        )
    if rep.get("flagged"):
        names = [
            HEADLINES[k][0] + (" (per step)" if k == "time_to_accuracy_s" and seeds else "")
            for k in rep["flagged"]
            if k in HEADLINES
        ]
        lines.append(
            f"  note: {', '.join(names)} {'varies' if len(names) == 1 else 'vary'} by more than {CV_FLAG:.0%} "
            "between processes, with the seed "
            "playing no part: the machine's speed changed between the processes (another program, the "
            "CPU's clock or a virtual machine's host; for the all-reduce also where the operating system "
            "placed its two processes); run again on a quiet machine and compare"
        )
    if result["energy"].get("available"):
        lines.append(f"  energy source: {result['energy']['why']}")
    if d.get("mlperf_differences"):
        lines.append("  differences from the MLPerf Training rules (Mattson et al. 2020, MLSys):")
        lines.extend(f"    - {text}" for text in d["mlperf_differences"])
    return lines


@dataclass(frozen=True)
class StartupSplit:
    """A result's time to accuracy split into the cold start-up and the steps (:func:`startup_split`)."""

    first_epoch_s: float  # the kept runs' mean time to the end of their first epoch
    first_epoch_steps: float
    startup_s: float  # what the first epoch took beyond its steps x the step time (at least 0)
    model_s: float  # start-up + steps x step time
    measured_s: float  # the headline time to accuracy
    one_epoch_share: float  # the first epoch over the measured time: the model that ignores the step count
    step_s: float  # the step time the split used

    @property
    def startup_share(self) -> float:
        return self.startup_s / self.measured_s


def startup_split(result: dict, step_s: float | None = None) -> StartupSplit:
    """Split ``result``'s time to accuracy into start-up and steps: the start-up is what the kept cold runs' first
    epoch took beyond its steps x the step time. The step time is ``step_s`` where given (one training step of the
    benchmark's model and batch, timed alone), else each run's own warm step, timed in its process right after it
    (``steady_step_s``), so that whatever else the machine did then slowed both alike. Notebook 07.1, section 2."""
    check_result(result)
    if step_s is not None and (
        isinstance(step_s, bool) or not isinstance(step_s, (int, float)) or not math.isfinite(step_s) or step_s <= 0
    ):
        raise ValueError(f"step_s must be a positive number of seconds, got {step_s!r}")
    tta = result["details"]["time_to_accuracy"]
    kept = [tta["cold_runs"][i] for i in tta["kept_processes"]]
    needed = ("first_epoch_s",) if step_s is not None else ("first_epoch_s", "steady_step_s")
    if not kept or any(r.get(k) is None for r in kept for k in needed):
        raise ValueError(
            "this result does not record when its cold runs' first epoch ended or their warm step time (a result "
            "written by an older version of the course): run the benchmark again"
        )
    step = step_s if step_s is not None else statistics.fmean(r["steady_step_s"] for r in kept)
    first_s = statistics.fmean(r["first_epoch_s"] for r in kept)
    first_steps = statistics.fmean(r["first_epoch_steps"] for r in kept)
    startup = max(0.0, first_s - first_steps * step)
    measured = result["headline"]["time_to_accuracy_s"]
    return StartupSplit(
        first_s, first_steps, startup, startup + tta["steps"] * step, measured, first_s / measured, step
    )
