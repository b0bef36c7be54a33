"""What a ``course benchmark`` run measures and by which rules: its sizes (``FULL``, ``QUICK``), the fixed
time-to-accuracy task, the repeatability flag, and how the run differs from the MLPerf Training rules."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Settings",
    "FULL",
    "QUICK",
    "DEFAULT_THREADS",
    "TARGET_ACCURACY",
    "HIDDEN",
    "TTA_BATCH",
    "TTA_LR",
    "MAX_EPOCHS",
    "THROUGHPUT_BATCH",
    "ALLREDUCE_MB",
    "CV_FLAG",
    "MLPERF_DIFFERENCES",
]


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How much a run measures (``FULL`` for ``course benchmark``, ``QUICK`` for ``--quick``)."""

    rounds: int  # rounds per process: every test runs once per round
    min_run_time: float  # seconds each timed block of the throughput, matmul and bandwidth tests lasts
    latency_calls: int  # single-example predictions timed per round
    allreduce_repeats: int  # timed all-reduces per message size per round
    processes: int = 5  # fresh processes, one after the other; each starts with a cold time-to-accuracy run


FULL = Settings(rounds=6, min_run_time=0.4, latency_calls=2000, allreduce_repeats=6, processes=5)
QUICK = Settings(rounds=1, min_run_time=0.05, latency_calls=500, allreduce_repeats=3, processes=5)
#: torch CPU threads of a run unless ``threads`` says otherwise (see ``suite.run_benchmark``).
DEFAULT_THREADS = 1

TARGET_ACCURACY = 0.95
HIDDEN = (256, 256)
TTA_BATCH = 32
TTA_LR = 1e-3
MAX_EPOCHS = 100
THROUGHPUT_BATCH = 256
ALLREDUCE_MB = (1, 4, 16)

#: A headline whose coefficient of variation over the fresh processes exceeds this is flagged (time to
#: accuracy: its time per step, which the seed does not change). The course's choice, not an MLPerf rule:
#: MLCommons says even its multi-run averages vary very roughly +/- 2.5 % (image) to +/- 5 % (other tasks).
CV_FLAG = 0.05

#: How this benchmark differs from the MLPerf Training rules (Mattson et al. 2020, MLSys), and why.
MLPERF_DIFFERENCES = (
    "quality target: 95 % held-out accuracy on the bundled digits (1,797 images), not a reference model on "
    "ImageNet-scale data, so that a laptop reaches it in under a second; MLPerf fixes a model, data set and "
    "target per task",
    "timing: from model creation in a process that has not trained yet (torch already imported, data already in "
    "memory: reading 1,797 bundled images takes milliseconds; on a GPU the CUDA context already made), so the "
    "first steps' start-up (thread pools, kernel choice, Adam's state; on a GPU cuBLAS) is timed; MLPerf starts "
    "the clock when the training data are first touched and lets system and model initialisation run untimed, "
    "within a time limit",
    "runs: one time-to-accuracy run per fresh process, 5 processes, each with its own seed, scored as the mean "
    "after dropping the fastest and the slowest, as MLPerf scores its 5 image-classification runs",
    "hyper-parameters: fixed (Adam, lr 1e-3, batch 32); MLPerf lets submitters tune a listed few",
    "evaluation: after every epoch on the whole held-out set; MLPerf fixes how often and on what it evaluates",
    "other figures (throughput, latency, matmul, copy, all-reduce) are micro-benchmarks MLPerf Training does not "
    "have: each process reports the median of its rounds, the headline is the same trimmed mean over processes",
    "repeatability: the coefficient of variation over the 5 processes is printed and flagged above 5 %, a "
    "threshold the course chose (MLPerf sets none; MLCommons notes that even its averages of several runs vary "
    "very roughly +/- 2.5 % for image benchmarks and +/- 5 % for the others); time to accuracy is flagged on its "
    "time per step, since the seed changes its number of steps; nothing here is audited or reviewed as MLPerf "
    "submissions are",
)
