"""Combining a ``course benchmark`` run's processes into one result: each process's figure, the headline as
MLPerf scores its runs (:func:`olympic_mean`), the repeatability over the processes
(:func:`coefficient_of_variation`, flagged above ``settings.CV_FLAG``), and the details, as the dataclasses of
``results``."""

from __future__ import annotations

import datetime as _dt
import math
import statistics
import time
from dataclasses import dataclass

import torch

from ..hardware import HardwareInfo
from .results import (
    HEADLINES,
    SCHEMA,
    AllReduce,
    Details,
    EnergyWindows,
    Headline,
    Latency,
    Matmul,
    MemoryBandwidth,
    Repeatability,
    Result,
    SeedSpread,
    TimeToAccuracy,
    TrainThroughput,
    default_label,
)
from .settings import (
    ALLREDUCE_MB,
    CV_FLAG,
    HIDDEN,
    MLPERF_DIFFERENCES,
    TARGET_ACCURACY,
    THROUGHPUT_BATCH,
    TTA_BATCH,
    TTA_LR,
    Settings,
)

__all__ = ["Run", "combine", "olympic_mean", "coefficient_of_variation"]

#: How a result's figures are made, stored in every result (``details["method"]``).
_METHOD = (
    "the work is split over fresh processes run one after the other; each starts with a cold "
    "time-to-accuracy run from its own seed, then runs every test once per round (a slow stretch "
    "of the machine hits all tests alike); a process's figure is its cold run's time (time to "
    "accuracy) or the median of its rounds (the others: each round's figure is the median of its "
    "repeats, timing's low quantile of timed blocks for matmul and copy, p50/p95 of that round's "
    "calls for latency); a headline is the mean of the processes' figures after dropping the best "
    "and the worst, as MLPerf scores time to accuracy; the coefficient of variation over the "
    f"processes is flagged above {CV_FLAG:.0%} (time to accuracy: its time per step, since the seed "
    "sets the number of steps); the device synchronised before each clock read; "
    "fixed seeds and threads"
)


@dataclass(frozen=True, kw_only=True)
class Run:
    """What a run was asked to do and where: the input of :func:`combine` besides the processes' measurements."""

    settings: Settings
    processes: int
    fresh: bool  # every process's share ran in a fresh process
    device: torch.device
    info: HardwareInfo  # ``hardware.detect()`` at the start
    threads: int  # torch CPU threads of the headline figures
    all_cores: int  # the threads of the all-core matmul and copy (CPU only)
    seed: int
    label: str | None  # None: ``results.default_label``
    quick: bool
    not_applicable: str | None  # why the all-reduce was not measured, or None
    started: float  # ``time.perf_counter()`` at the start


def olympic_mean(values: list[float]) -> float:
    """The mean after dropping the fastest and the slowest value (3 or more values; fewer: the plain mean).

    MLPerf Training scores a system by the time to the quality target over 5 (or 10) runs, dropping the
    fastest and the slowest before averaging (Mattson et al. 2020, MLSys).
    """
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("values must hold at least one number, got none")
    if not all(math.isfinite(v) for v in xs):
        raise ValueError(f"values must be finite numbers, got {values!r}")
    xs.sort()
    kept = xs[1:-1] if len(xs) >= 3 else xs
    return float(sum(kept) / len(kept))


def coefficient_of_variation(values: list[float]) -> float | None:
    """Sample standard deviation over mean (``None`` for fewer than 2 values or a zero mean).

    ``course benchmark`` prints it for every headline over its fresh processes and flags it above
    ``CV_FLAG`` (5 %), a threshold the course chose: MLPerf sets no such bar, and MLCommons notes that even
    its averaged results vary by very roughly +/- 2.5 % (image benchmarks) to +/- 5 % (the others) from
    run to run.
    """
    xs = [float(v) for v in values]
    if not all(math.isfinite(v) for v in xs):
        raise ValueError(f"values must be finite numbers, got {values!r}")
    if len(xs) < 2:
        return None
    m = statistics.fmean(xs)
    return float(statistics.stdev(xs) / abs(m)) if m else None


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _spread(values: list[float]) -> float:
    """(max - min) / median."""
    m = _median(values)
    return (max(values) - min(values)) / m if m else 0.0


def combine(shares: list[dict], sweeps: list[list[dict]], run: Run) -> Result:
    """The result of a run from each process's share (``suite``'s in-process tests) and its all-reduce sweeps."""
    cold = [s["tta"][0] for s in shares]
    per_process = _per_process(shares, sweeps, run.not_applicable)
    energy, windows, energy_j = _energy(shares)
    if energy_j is not None and all(s["windows"] for s in shares):
        per_process["energy_j"] = [s["energy"]["joules"] / s["windows"] for s in shares]
    means = {key: olympic_mean(values) for key, values in per_process.items()}
    headline = Headline(
        **{key: means.get(key) for key in HEADLINES if key != "energy_j"}, energy_j=means.get("energy_j", energy_j)
    )
    flat = {
        k: [v for s in shares for v in s[k]]
        for k in (
            "throughput",
            "latency_p50_ms",
            "latency_p95_ms",
            "matmul",
            "matmul_all_cores",
            "bandwidth",
            "bandwidth_all_cores",
        )
    }
    settings = run.settings
    details = Details(
        method=_METHOD,
        mlperf_differences=list(MLPERF_DIFFERENCES),
        processes=run.processes,
        fresh_processes=run.fresh,
        rounds=settings.rounds * run.processes,
        rounds_per_process=settings.rounds,
        threads=run.threads,
        seed=run.seed,
        settings=settings.__dict__,
        medians={key: _median(v) for key, v in per_process.items()},
        repeatability=_repeatability(per_process, cold, run),
        time_to_accuracy=_time_to_accuracy(shares, per_process),
        train_throughput=TrainThroughput(
            batch=THROUGHPUT_BATCH,
            per_round=flat["throughput"],
            spread=_spread(per_process["train_samples_per_s"]),
            how=f"median time of one train_step over blocks of at least {settings.min_run_time:g} s",
        ),
        latency=Latency(
            batch=1,
            calls=settings.latency_calls * settings.rounds * run.processes,
            per_round_p50_ms=flat["latency_p50_ms"],
            per_round_p95_ms=flat["latency_p95_ms"],
            spread_p50=_spread(per_process["latency_p50_ms"]),
            spread_p95=_spread(per_process["latency_p95_ms"]),
        ),
        matmul=_matmul(shares[0], flat, per_process, run.all_cores),
        memory_bandwidth=_memory_bandwidth(shares[0], flat, per_process, run),
        allreduce=_allreduce(sweeps, per_process, run.not_applicable),
        energy=None
        if energy_j is None
        else EnergyWindows(windows=windows, joules_total=energy["joules"], seconds=energy["seconds"]),
    )
    import course_lib

    return Result(
        schema=SCHEMA,
        course_version=course_lib.__version__,
        created=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        label=run.label.strip() if run.label else default_label(run.device),
        hardware={**run.info.to_dict(), "torch_threads": run.threads},
        device=str(run.device),
        quick=run.quick,
        seconds=time.perf_counter() - run.started,
        headline=headline,
        details=details,
        energy=energy,
    )


def _per_process(shares: list[dict], sweeps: list[list[dict]], not_applicable: str | None) -> dict[str, list[float]]:
    """Each headline's figure in each process: the cold run's time to accuracy, the median of the rounds for the
    others (all-reduce: the largest message's bus bandwidth)."""
    # The median of the rounds, not timing.representative: every file of schema course-benchmark/1 makes a
    # process's figure this way, and the report card compares results saved by earlier versions with new ones.
    per_process = {
        "time_to_accuracy_s": [s["tta"][0]["seconds"] for s in shares],
        "train_samples_per_s": [_median(s["throughput"]) for s in shares],
        "latency_p50_ms": [_median(s["latency_p50_ms"]) for s in shares],
        "latency_p95_ms": [_median(s["latency_p95_ms"]) for s in shares],
        "matmul_gflops": [_median(s["matmul"]) for s in shares],
        "memory_bandwidth_gbs": [_median(s["bandwidth"]) for s in shares],
    }
    if not not_applicable:
        largest = str(ALLREDUCE_MB[-1] * 2**20)
        per_process["allreduce_gbs"] = [_median([row[largest] / 1e9 for row in sw]) for sw in sweeps]
    return per_process


def _energy(shares: list[dict]) -> tuple[dict, int, float | None]:
    """(the meters' report summed over the processes, the time-to-accuracy runs measured, joules per run or None)."""
    energy = dict(shares[0]["energy"])
    windows = sum(s["windows"] for s in shares)
    if energy.get("available"):
        joules = [s["energy"].get("joules") for s in shares]
        energy["joules"] = None if None in joules else float(sum(joules))
        energy["seconds"] = float(sum(s["energy"].get("seconds") or 0.0 for s in shares))
    energy_j = (
        energy["joules"] / windows if energy.get("available") and energy.get("joules") is not None and windows else None
    )
    return energy, windows, energy_j


def _repeatability(per_process: dict[str, list[float]], cold: list[dict], run: Run) -> Repeatability:
    """The coefficient of variation of every figure over the processes, time to accuracy judged per step (the seed
    sets each cold run's step count; the time per step is what the machine changes)."""
    cv = {key: coefficient_of_variation(values) for key, values in per_process.items()}
    steps_pp = [c["steps"] for c in cold]
    step_ms_pp = [1e3 * c["seconds"] / c["steps"] for c in cold]
    machine_cv = dict(cv) | {"time_to_accuracy_s": coefficient_of_variation(step_ms_pp)}
    return Repeatability(
        per_process=per_process,
        cv=cv,
        machine_cv=machine_cv,
        flag_above=CV_FLAG,
        flagged=[key for key, value in machine_cv.items() if value is not None and value > CV_FLAG],
        processes=run.processes,
        fresh=run.fresh,
        judged_per_step=["time_to_accuracy_s"],
        seed_spread=SeedSpread(
            steps_per_process=steps_pp, steps_cv=coefficient_of_variation(steps_pp), step_ms_per_process=step_ms_pp
        ),
    )


def _time_to_accuracy(shares: list[dict], per_process: dict[str, list[float]]) -> TimeToAccuracy:
    """The task and its runs; steps and epochs are means over the processes the headline keeps."""
    cold = [s["tta"][0] for s in shares]
    order = sorted(range(len(cold)), key=lambda i: cold[i]["seconds"])
    kept = order[1:-1] if len(cold) >= 3 else order
    s0 = shares[0]
    return TimeToAccuracy(
        target_accuracy=TARGET_ACCURACY,
        model=f"MLP 64-{'-'.join(map(str, HIDDEN))}-10",
        optimizer=f"Adam lr {TTA_LR:g}",
        batch=TTA_BATCH,
        evaluated=f"held-out accuracy after every epoch ({s0['test_images']} of the {s0['images']} digits images)",
        test_images=s0["test_images"],
        steps=statistics.fmean(cold[i]["steps"] for i in kept),
        epochs=statistics.fmean(cold[i]["epochs"] for i in kept),
        accuracy=min(c["accuracy"] for c in cold),
        cold_runs=cold,
        kept_processes=kept,
        steps_per_process=[c["steps"] for c in cold],
        ms_per_step_per_process=[1e3 * c["seconds"] / c["steps"] for c in cold],
        seeds=[c["seed"] for c in cold],
        per_round_s=[row["seconds"] for s in shares for row in s["tta"]],
        warm_runs_s=[row["seconds"] for s in shares for row in s["tta"][1:]],
        spread=_spread(per_process["time_to_accuracy_s"]),
    )


def _matmul(s0: dict, flat: dict[str, list[float]], per_process: dict[str, list[float]], all_cores: int) -> Matmul:
    every = flat["matmul_all_cores"]  # empty unless on a CPU with more cores than the run's threads
    return Matmul(
        n=s0["mm_n"],
        dtype="fp32",
        per_round=flat["matmul"],
        spread=_spread(per_process["matmul_gflops"]),
        how="timing.matmul_throughput: the low quantile of timed blocks, per round",
        all_cores=all_cores if every else None,
        all_cores_gflops=_median(every) if every else None,
        all_cores_per_round=every or None,
        all_cores_spread=_spread(every) if every else None,
    )


def _memory_bandwidth(
    s0: dict, flat: dict[str, list[float]], per_process: dict[str, list[float]], run: Run
) -> MemoryBandwidth:
    every = flat["bandwidth_all_cores"]
    return MemoryBandwidth(
        buffer_bytes=s0["bw_bytes"],
        kernel="copy (bytes read + written)",
        threads=run.threads if run.device.type == "cpu" else None,
        per_round=flat["bandwidth"],
        spread=_spread(per_process["memory_bandwidth_gbs"]),
        all_cores=run.all_cores if every else None,
        all_cores_gbs=_median(every) if every else None,
        all_cores_per_round=every or None,
        all_cores_spread=_spread(every) if every else None,
    )


def _allreduce(sweeps: list[list[dict]], per_process: dict[str, list[float]], not_applicable: str | None) -> AllReduce:
    if not_applicable:
        return AllReduce(applicable=False, why=not_applicable)
    sizes = [mb * 2**20 for mb in ALLREDUCE_MB]
    return AllReduce(
        applicable=True,
        world_size=sweeps[0][0]["world_size"],
        backend=sweeps[0][0]["backend"],
        sizes_bytes=sizes,
        headline_size_bytes=sizes[-1],
        per_round_busbw_gbs={str(n): [row[str(n)] / 1e9 for sw in sweeps for row in sw] for n in sizes},
        spread=_spread(per_process["allreduce_gbs"]),
        threads_per_rank=1,
    )
