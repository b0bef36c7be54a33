"""What a ``course benchmark`` result holds and how it is kept: the schema (``SCHEMA``, ``HEADLINES``) as
dataclasses built by keyword, the JSON object they make (:func:`as_json`), and checking, saving and loading
result files (:func:`save_result`, atomic; :func:`load_result`, which names the file and what is wrong with it).
Saved files are plain JSON of schema ``course-benchmark/1``; results saved by earlier versions load unchanged."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import torch

from .. import arguments
from ..files import write_atomic
from ..hardware import as_device, detect

__all__ = [
    "SCHEMA",
    "HEADLINES",
    "ResultError",
    "Headline",
    "SeedSpread",
    "Repeatability",
    "TimeToAccuracy",
    "TrainThroughput",
    "Latency",
    "Matmul",
    "MemoryBandwidth",
    "AllReduce",
    "EnergyWindows",
    "Details",
    "Result",
    "as_json",
    "check_result",
    "save_result",
    "load_result",
    "default_label",
    "default_result_path",
]

SCHEMA = "course-benchmark/1"
_SCHEMA_PREFIX = "course-benchmark/"
_SCHEMA_VERSION = 1

#: headline key -> (label, unit, higher is better), in the order the result and the report card show them.
HEADLINES: dict[str, tuple[str, str, bool]] = {
    "time_to_accuracy_s": ("time to accuracy", "s", False),
    "train_samples_per_s": ("training throughput", "samples/s", True),
    "latency_p50_ms": ("inference latency p50", "ms", False),
    "latency_p95_ms": ("inference latency p95", "ms", False),
    "matmul_gflops": ("fp32 matmul", "GFLOP/s", True),
    "memory_bandwidth_gbs": ("memory bandwidth", "GB/s", True),
    "allreduce_gbs": ("all-reduce bus bandwidth", "GB/s", True),
    "energy_j": ("energy to accuracy", "J", False),
}
#: headlines that may be null (the machine cannot measure them: one GPU, no energy counters).
_OPTIONAL_HEADLINES = ("allreduce_gbs", "energy_j")


class ResultError(ValueError):
    """A benchmark result file that cannot be used; the message names the file and why."""


def _optional() -> Any:
    """A field left out of the JSON object while it is None (keys a result holds only on some machines)."""
    return field(default=None, metadata={"omitted_when_none": True})


@dataclass(frozen=True, kw_only=True)
class Headline:
    """The headline figures, one per key of ``HEADLINES`` in its order (None: not measured here)."""

    time_to_accuracy_s: float
    train_samples_per_s: float
    latency_p50_ms: float
    latency_p95_ms: float
    matmul_gflops: float
    memory_bandwidth_gbs: float
    allreduce_gbs: float | None
    energy_j: float | None


@dataclass(frozen=True, kw_only=True)
class SeedSpread:
    """How much of time to accuracy's spread the seeds make: each process's steps, and its time per step."""

    steps_per_process: list[int]
    steps_cv: float | None
    step_ms_per_process: list[float]


@dataclass(frozen=True, kw_only=True)
class Repeatability:
    """Every headline's figure in each process, its coefficient of variation, and which are flagged."""

    per_process: dict[str, list[float]]
    cv: dict[str, float | None]
    machine_cv: dict[str, float | None]  # as ``cv``, time to accuracy judged on its time per step
    flag_above: float
    flagged: list[str]
    processes: int
    fresh: bool
    judged_per_step: list[str]
    seed_spread: SeedSpread


@dataclass(frozen=True, kw_only=True)
class TimeToAccuracy:
    """The task, and every process's cold run (the MLPerf run) and warm runs."""

    target_accuracy: float
    model: str
    optimizer: str
    batch: int
    evaluated: str
    test_images: int
    steps: float  # mean over the kept processes
    epochs: float
    accuracy: float  # the lowest of the cold runs
    cold_runs: list[dict]
    kept_processes: list[int]
    steps_per_process: list[int]
    ms_per_step_per_process: list[float]
    seeds: list[int]
    per_round_s: list[float]
    warm_runs_s: list[float]
    spread: float


@dataclass(frozen=True, kw_only=True)
class TrainThroughput:
    batch: int
    per_round: list[float]
    spread: float
    how: str


@dataclass(frozen=True, kw_only=True)
class Latency:
    batch: int
    calls: int
    per_round_p50_ms: list[float]
    per_round_p95_ms: list[float]
    spread_p50: float
    spread_p95: float


@dataclass(frozen=True, kw_only=True)
class Matmul:
    """The fp32 matmul on the run's threads; on a CPU also on every core (``all_cores_*``, not a headline)."""

    n: int
    dtype: str
    per_round: list[float]
    spread: float
    how: str
    all_cores: int | None = _optional()
    all_cores_gflops: float | None = _optional()
    all_cores_per_round: list[float] | None = _optional()
    all_cores_spread: float | None = _optional()


@dataclass(frozen=True, kw_only=True)
class MemoryBandwidth:
    """The copy on the run's threads; on a CPU also on every core (``all_cores_*``, not a headline)."""

    buffer_bytes: int
    kernel: str
    threads: int | None  # None on an accelerator
    per_round: list[float]
    spread: float
    all_cores: int | None = _optional()
    all_cores_gbs: float | None = _optional()
    all_cores_per_round: list[float] | None = _optional()
    all_cores_spread: float | None = _optional()


@dataclass(frozen=True, kw_only=True)
class AllReduce:
    """The all-reduce sweep, or (``applicable`` False) why it was not measured."""

    applicable: bool
    why: str | None = _optional()
    world_size: int | None = _optional()
    backend: str | None = _optional()
    sizes_bytes: list[int] | None = _optional()
    headline_size_bytes: int | None = _optional()
    per_round_busbw_gbs: dict[str, list[float]] | None = _optional()
    spread: float | None = _optional()
    threads_per_rank: int | None = _optional()


@dataclass(frozen=True, kw_only=True)
class EnergyWindows:
    """The energy of the time-to-accuracy runs (where the machine reports energy)."""

    windows: int
    joules_total: float
    seconds: float
    per: str = "one time-to-accuracy run"


@dataclass(frozen=True, kw_only=True)
class Details:
    """How the headline figures were measured and combined, with every process's and round's figures."""

    method: str
    mlperf_differences: list[str]
    processes: int
    fresh_processes: bool
    rounds: int
    rounds_per_process: int
    threads: int
    seed: int
    settings: dict
    medians: dict[str, float]
    repeatability: Repeatability
    time_to_accuracy: TimeToAccuracy
    train_throughput: TrainThroughput
    latency: Latency
    matmul: Matmul
    memory_bandwidth: MemoryBandwidth
    allreduce: AllReduce
    energy: EnergyWindows | None = _optional()


@dataclass(frozen=True, kw_only=True)
class Result:
    """One benchmark run: what ran where, the headline figures and their details (``as_json`` makes the JSON)."""

    schema: str
    course_version: str
    created: str
    label: str
    hardware: dict
    device: str
    quick: bool
    seconds: float
    headline: Headline
    details: Details
    energy: dict  # ``energy.EnergyMeter.result()`` over all the processes


_TOP_KEYS = tuple(f.name for f in fields(Result))


def as_json(result: Result) -> dict:
    """The JSON object of ``result``, as ``save_result`` writes it and ``load_result`` reads it: each dataclass an
    object with its fields in order, a field that is None left out where the schema holds it only on some machines."""
    if not isinstance(result, Result):
        raise TypeError(f"result must be a benchmark.results.Result, got {type(result).__name__}")
    return _jsonable(result)


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _jsonable(getattr(value, f.name))
            for f in fields(value)
            if not (f.metadata.get("omitted_when_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


# ----------------------------------------------------------------------------------------------
# checking, saving, loading


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_result(result: Any, where: str = "the result") -> dict:
    """Raise :class:`ResultError` ("<where>: <why>") unless ``result`` is a usable benchmark result."""
    if not isinstance(result, dict):
        raise ResultError(
            f"{where}: not a course benchmark result (foreign JSON: a {type(result).__name__}, "
            "not an object with a 'schema' key)"
        )
    schema = result.get("schema")
    if not isinstance(schema, str) or not schema.startswith(_SCHEMA_PREFIX):
        raise ResultError(
            f"{where}: not a course benchmark result (foreign JSON: its 'schema' is {schema!r}, "
            f"expected {SCHEMA!r}; `course benchmark` writes these files)"
        )
    version = schema[len(_SCHEMA_PREFIX) :]
    if not version.isdigit():
        raise ResultError(f"{where}: unknown schema {schema!r} (expected {SCHEMA!r})")
    if int(version) > _SCHEMA_VERSION:
        raise ResultError(
            f"{where}: written with a newer schema {schema!r} than this course_lib reads ({SCHEMA!r}); "
            "upgrade course_lib"
        )
    missing = [k for k in _TOP_KEYS if k not in result]
    if missing:
        raise ResultError(f"{where}: a course benchmark result with missing keys: {', '.join(missing)}")
    head = result["headline"]
    if not isinstance(head, dict):
        raise ResultError(f"{where}: 'headline' must be an object, got {type(head).__name__}")
    missing = [k for k in HEADLINES if k not in head]
    if missing:
        raise ResultError(f"{where}: missing headline keys: {', '.join(missing)}")
    for key in HEADLINES:
        value = head[key]
        if value is None and key in _OPTIONAL_HEADLINES:
            continue
        if not _is_number(value) or value < 0:
            raise ResultError(
                f"{where}: headline {key!r} must be a finite number >= 0"
                f"{' or null' if key in _OPTIONAL_HEADLINES else ''}, got {value!r}"
            )
    if not isinstance(result["label"], str) or not isinstance(result["hardware"], dict):
        raise ResultError(f"{where}: 'label' must be a string and 'hardware' an object")
    if not isinstance(result["energy"], dict) or not isinstance(result["energy"].get("available"), bool):
        raise ResultError(f"{where}: 'energy' must be an object with a true/false 'available'")
    return result


def save_result(result: dict, path: str | os.PathLike) -> Path:
    """Write ``result`` (a checked JSON object, as ``suite.run_benchmark`` returns it) to ``path`` atomically
    (``files.write_atomic``: a reader sees the old file or the new one, never half of one, and an error or Ctrl-C
    while writing leaves neither a file nor a temporary one); return the path. Notebook 07.1, ``course benchmark``.
    """
    check_result(result)
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"path {str(target)!r} is a folder; give a file name such as {default_result_path('x')}")
    text = json.dumps(result, indent=2, allow_nan=False) + "\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(target, text)


#: Larger files are not read (a result is about 10 kB).
_MAX_RESULT_BYTES = 10 * 2**20


def load_result(path: str | os.PathLike) -> dict:
    """Read a result written by :func:`save_result`.

    Raises :class:`ResultError` naming the file and why: it cannot be read, is larger than
    ``_MAX_RESULT_BYTES``, is empty, truncated or not JSON (also JSON nested too deeply to parse), is
    foreign JSON (no course benchmark schema), has a newer schema, misses headline keys, or holds
    values that are not numbers.
    """
    p = Path(path)
    where = str(p)
    try:
        size = p.stat().st_size
        if size > _MAX_RESULT_BYTES:
            raise ResultError(
                f"{where}: too large for a benchmark result ({size / 2**20:.1f} MB; results are "
                f"about 10 kB, and files over {_MAX_RESULT_BYTES // 2**20} MB are not read)"
            )
        raw = p.read_bytes()
    except OSError as exc:
        raise ResultError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ResultError(f"{where}: not a text file (not UTF-8), so not a benchmark result") from None
    if not text.strip():
        raise ResultError(f"{where}: the file is empty")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        # an unterminated string runs to the end of the text: the file was cut off inside it
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise ResultError(
                f"{where}: truncated (the JSON ends early, after {len(text)} characters: was the "
                "benchmark stopped while writing, or the file cut off when copied?)"
            ) from None
        raise ResultError(f"{where}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno})") from None
    except (RecursionError, MemoryError) as exc:
        raise ResultError(
            f"{where}: not a benchmark result (JSON nested too deeply or too large to parse: {type(exc).__name__})"
        ) from None
    return check_result(obj, where)


# ----------------------------------------------------------------------------------------------
# labels and file names


def _short_cpu(model: str) -> str:
    text = re.sub(r"\((R|TM|tm|r)\)|\bCPU\b|\bProcessor\b|@.*$|\d+-Core", " ", model)
    return " ".join(text.split()) or "unknown CPU"


def default_label(device: torch.device | str | None = None) -> str:
    """'<platform> <CPU model>, <n> cores', or the GPU's name on a GPU (``course benchmark --label``'s default)."""
    dev = as_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    info = detect()
    n = info.cpu.physical_cores
    return f"{info.platform} {_short_cpu(info.cpu.model)}, {n} core{'' if n == 1 else 's'}"


def _slug(text: str) -> str:
    """'Colab Intel Xeon, 2 cores' -> 'colab-intel-xeon-2-cores' (for file names)."""
    text = arguments.text("text", text)
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:60] or "machine"


def default_result_path(label: str, when: _dt.date | None = None) -> Path:
    """``./benchmark-<label slug>-<YYYY-MM-DD>.json`` (``course benchmark --out``'s default)."""
    label = arguments.text("label", label)
    day = (when or _dt.date.today()).isoformat()
    return Path(f"benchmark-{_slug(label)}-{day}.json")
