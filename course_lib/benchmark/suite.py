"""``course benchmark``: an MLPerf-style benchmark of this machine (notebook 07.1, "Benchmark this machine").

MLPerf Training times a standard task to a fixed quality target; MLPerf Inference reports latency
percentiles. This suite does both on a scale a laptop finishes in two minutes, plus the ceilings
module 01 and 03 measured:

=========================  ===============================================================================
time to accuracy           a fixed MLP (64-256-256-10, Adam, batch 32, seeded) trained on the bundled
                           digits data until its held-out accuracy reaches 0.95 (evaluated every epoch)
training throughput        samples/s of one training step of that MLP on a batch of 256
inference latency          p50 and p95 of single-example predictions (batch 1), each call timed alone
fp32 matmul                GFLOP/s of an n x n product (``bench.matmul_throughput``) on the run's threads
                           (one CPU thread by default); on a CPU also on every core, in ``details``
memory bandwidth           GB/s of copying one large buffer into another (``bench.memory_bandwidth``) on
                           the run's threads: on a CPU what one core draws by default, well below the
                           memory's ceiling (every core together draws more: in ``details``, not a
                           headline); on a GPU the whole GPU's copy
all-reduce bus bandwidth   ``dist.all_reduce`` on 2 CPU processes over gloo (NCCL across GPUs where there
                           are several) on messages of 1-16 MB, as bus bandwidth (``comm.busbw``)
energy to accuracy         joules of one time-to-accuracy run, where RAPL or nvidia-smi reports energy
=========================  ===============================================================================

How the figures are made to repeat (two runs on an idle machine agree within 15 %): a fixed number
of torch threads (recorded in the result), warm-up before anything is timed, the device
synchronised before every clock read, fixed seeds, and every test repeated in **rounds**: each round
runs every test once, so a slow minute of the machine hits all tests alike instead of one; a
headline is the median over the rounds. ``details`` keeps every round's value and its spread.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import bench, comm, data, models, validate
from ..hardware import as_device, detect, pick_device, seed_everything, synchronize
from ..train import train_step
from .energy import EnergyMeter

__all__ = ["SCHEMA", "HEADLINES", "ResultError", "Settings", "FULL", "QUICK", "run_benchmark", "save_result",
           "load_result", "check_result", "summary_text", "default_label", "default_result_path", "slug"]

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
OPTIONAL_HEADLINES = ("allreduce_gbs", "energy_j")
_TOP_KEYS = ("schema", "course_version", "created", "label", "hardware", "device", "quick", "seconds", "headline",
             "details", "energy")


class ResultError(ValueError):
    """A benchmark result file that cannot be used; the message names the file and why."""


@dataclass(frozen=True)
class Settings:
    """How much a run measures (``FULL`` for ``course benchmark``, ``QUICK`` for ``--quick``)."""

    rounds: int  # every test runs once per round; headlines come from the rounds' good end
    min_run_time: float  # seconds each timed block of the throughput, matmul and bandwidth tests lasts
    latency_calls: int  # single-example predictions timed per round
    allreduce_repeats: int  # timed all-reduces per message size per round


FULL = Settings(rounds=30, min_run_time=0.4, latency_calls=2000, allreduce_repeats=6)
QUICK = Settings(rounds=3, min_run_time=0.1, latency_calls=500, allreduce_repeats=3)
#: torch CPU threads of a run unless ``threads`` says otherwise (see ``run_benchmark``).
DEFAULT_THREADS = 1

TARGET_ACCURACY = 0.95
HIDDEN = (256, 256)
TTA_BATCH = 32
TTA_LR = 1e-3
MAX_EPOCHS = 100
THROUGHPUT_BATCH = 256
ALLREDUCE_MB = (1, 4, 16)


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


def slug(text: str) -> str:
    """'Colab Intel Xeon, 2 cores' -> 'colab-intel-xeon-2-cores' (for file names)."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:60] or "machine"


def default_result_path(label: str, when: _dt.date | None = None) -> Path:
    """``./benchmark-<label slug>-<YYYY-MM-DD>.json`` (``course benchmark --out``'s default)."""
    day = (when or _dt.date.today()).isoformat()
    return Path(f"benchmark-{slug(label)}-{day}.json")


# ----------------------------------------------------------------------------------------------
# the tests

def _seeded_mlp(seed: int, device: torch.device) -> torch.nn.Module:
    seed_everything(seed)
    return models.MLP(64, list(HIDDEN), 10).to(device)


def _time_to_accuracy(split: data.Split, seed: int, device: torch.device) -> dict:
    """Train the fixed MLP until held-out accuracy >= TARGET_ACCURACY; wall time includes evaluation."""
    model = _seeded_mlp(seed, device)
    opt = torch.optim.Adam(model.parameters(), lr=TTA_LR)
    x, y = split.x_train.to(device), split.y_train.to(device)
    xt, yt = split.x_test.to(device), split.y_test.to(device)
    gen = torch.Generator().manual_seed(seed)
    steps, acc = 0, 0.0
    synchronize(device)
    t0 = time.perf_counter()
    for epoch in range(1, MAX_EPOCHS + 1):
        model.train()
        order = torch.randperm(len(x), generator=gen).to(device)
        for i in range(0, len(order), TTA_BATCH):
            idx = order[i:i + TTA_BATCH]
            train_step(model, (x[idx], y[idx]), opt, device=device)
            steps += 1
        model.eval()
        with torch.inference_mode():
            acc = float((model(xt).argmax(1) == yt).float().mean())
        if acc >= TARGET_ACCURACY:
            break
    synchronize(device)
    seconds = time.perf_counter() - t0
    if acc < TARGET_ACCURACY:
        raise RuntimeError(f"the benchmark MLP did not reach the target accuracy {TARGET_ACCURACY} in {MAX_EPOCHS} "
                           f"epochs (held-out accuracy {acc:.3f}): this PyTorch build computes something wrong")
    return {"seconds": seconds, "steps": steps, "epochs": epoch, "accuracy": acc}


def _latencies(model: torch.nn.Module, x1: torch.Tensor, calls: int, device: torch.device) -> list[float]:
    out = []
    with torch.inference_mode():
        for _ in range(calls):
            t = time.perf_counter()
            model(x1)
            synchronize(device)
            out.append(time.perf_counter() - t)
    return out


def _allreduce(device: torch.device, repeats: int) -> dict:
    """One all-reduce sweep on fresh ranks: busbw per size (median of the repeats)."""
    from ..distributed import allreduce_benchmark, launch

    if device.type == "cuda":
        world, backend = min(torch.cuda.device_count(), 8), "nccl"
    else:
        world, backend = 2, "gloo"
    sizes = [mb * 2**20 for mb in ALLREDUCE_MB]
    rows = launch(allreduce_benchmark, world, sizes, repeats=repeats, warmup=1, backend=backend,
                  threads_per_rank=1, timeout=120)[0]
    return {str(r["bytes"]): comm.busbw(r["bytes"], r["median_s"], world) for r in rows} | {
        "world_size": world, "backend": backend}


def _allreduce_not_applicable(device: torch.device) -> str | None:
    if device.type == "cuda" and torch.cuda.device_count() < 2:
        return ("not applicable: one CUDA GPU (an all-reduce needs 2 or more GPUs for NCCL; CPU processes over "
                "gloo would measure the host, not the GPU)")
    if device.type in ("mps", "xla"):
        return f"not measured on {device.type}: the launcher runs CPU processes (gloo) or CUDA GPUs (NCCL)"
    return None


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


#: The quantile of the rounds a headline reports, from the good end (a time's 25th percentile, a
#: rate's 75th): another program can only slow a round down, so the good end of the rounds is what
#: the machine does; with at least a quarter of the rounds undisturbed, it does not move.
ROUND_QUANTILE = 0.25


def _headline(values: list[float], higher_is_better: bool) -> float:
    return float(bench.quantile(values, 1 - ROUND_QUANTILE if higher_is_better else ROUND_QUANTILE))


def _disturbed(values: list[float], higher_is_better: bool, headline: float, factor: float = 1.3) -> int:
    """Rounds more than ``factor`` worse than the headline (another program was running)."""
    if higher_is_better:
        return sum(v * factor < headline for v in values)
    return sum(v > headline * factor for v in values)


def _spread(values: list[float]) -> float:
    """(max - min) / median over rounds."""
    m = _median(values)
    return (max(values) - min(values)) / m if m else 0.0


def run_benchmark(*, quick: bool = False, device: torch.device | str | None = None, label: str | None = None,
                  seed: int = 0, progress: bool = True, threads: int | None = None) -> dict:
    """Benchmark this machine; return the result (``SCHEMA``) as a dict. Notebook 07.1, ``course benchmark``.

    ``quick`` runs 3 rounds with short blocks (~10 s on 2 cores) instead of the full 30 (~70 s idle,
    ~2 min on a busy machine);
    ``device`` defaults to ``pick_device()``; ``threads`` fixes torch's CPU threads for the whole run
    and is recorded, because the figures depend on it. The default, 1, is what made the figures
    repeat: with a thread per core, any other program taking a core makes every parallel step wait
    (a busy core slowed a 2-thread matmul 12x on a 2-core machine, a 1-thread one not at all). The
    matmul on every physical core is measured too and kept in ``details["matmul"]``.
    A Ctrl-C or an error stops the run and every process it started; nothing is written (write the
    result with :func:`save_result`).
    """
    validate.boolean("quick", quick)
    validate.boolean("progress", progress)
    seed = validate.nonnegative_int("seed", seed)
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise ValueError(f"label must be a non-empty str or None, got {label!r}")
    dev = pick_device() if device is None else as_device(device)
    info0 = detect()
    threads = DEFAULT_THREADS if threads is None else validate.positive_int("threads", threads)
    all_cores = max(1, min(info0.cpu.physical_cores, info0.cpu.usable_cores or info0.cpu.physical_cores))
    settings = QUICK if quick else FULL
    from ..train import progress_bar

    tqdm = progress_bar()

    t_start = time.perf_counter()
    old_threads = torch.get_num_threads()
    meter = EnergyMeter(dev)
    per: dict[str, list] = {k: [] for k in ("tta", "throughput", "latency", "matmul", "matmul_all_cores", "bandwidth",
                                            "bandwidth_all_cores", "allreduce")}
    not_applicable = _allreduce_not_applicable(dev)
    tests = ["time to accuracy", "throughput", "latency", "matmul", "bandwidth"] + ([] if not_applicable else
                                                                                     ["all-reduce"])
    bar = tqdm(total=settings.rounds * len(tests), desc="benchmark", disable=not progress, leave=False)
    try:
        torch.set_num_threads(threads)
        seed_everything(seed)
        split = data.load_digits(seed=seed)
        step_model = _seeded_mlp(seed, dev)
        step_opt = torch.optim.Adam(step_model.parameters(), lr=TTA_LR)
        gen = torch.Generator().manual_seed(seed)
        pick = torch.randint(0, len(split.x_train), (THROUGHPUT_BATCH,), generator=gen)
        step_batch = (split.x_train[pick].to(dev), split.y_train[pick].to(dev))
        infer_model = _seeded_mlp(seed, dev).eval()
        x1 = split.x_test[:1].to(dev)
        mm_n = 4096 if dev.type == "cuda" else 1024
        bw_bytes = 512 * 2**20 if dev.type == "cuda" else 128 * 2**20
        # warm-up: every code path once before anything is timed
        _time_to_accuracy(split, seed, dev)
        _latencies(infer_model, x1, 50, dev)
        for r in range(settings.rounds):
            bar.set_postfix_str("time to accuracy")
            with meter.window():
                per["tta"].append(_time_to_accuracy(split, seed, dev))
            bar.update()
            bar.set_postfix_str("throughput")
            t = bench.time_fn(lambda: train_step(step_model, step_batch, step_opt, device=dev), label="train step",
                              device=dev, num_threads=threads, warmup=3 if r == 0 else 1,
                              min_run_time=settings.min_run_time)
            per["throughput"].append(THROUGHPUT_BATCH / t.median_s)
            bar.update()
            bar.set_postfix_str("latency")
            per["latency"].append(_latencies(infer_model, x1, settings.latency_calls, dev))
            bar.update()
            bar.set_postfix_str("matmul")
            with bench.num_threads_set(threads):
                mm = bench.matmul_throughput([mm_n], device=dev, min_run_time=settings.min_run_time, seed=seed)[0]
                per["matmul"].append(mm.flops_per_s / 1e9)
            if dev.type == "cpu" and all_cores != threads:
                with bench.num_threads_set(all_cores):
                    mm = bench.matmul_throughput([mm_n], device=dev, min_run_time=settings.min_run_time / 2,
                                                 seed=seed)[0]
                    per["matmul_all_cores"].append(mm.flops_per_s / 1e9)
            bar.update()
            bar.set_postfix_str("bandwidth")
            with bench.num_threads_set(threads):
                per["bandwidth"].append(bench.memory_bandwidth(bw_bytes, device=dev,
                                                               min_run_time=settings.min_run_time) / 1e9)
            if dev.type == "cpu" and all_cores != threads:
                with bench.num_threads_set(all_cores):
                    per["bandwidth_all_cores"].append(bench.memory_bandwidth(
                        bw_bytes, device=dev, min_run_time=settings.min_run_time / 2) / 1e9)
            bar.update()
            if not not_applicable:
                bar.set_postfix_str("all-reduce")
                per["allreduce"].append(_allreduce(dev, settings.allreduce_repeats))
                bar.update()
    finally:
        bar.close()
        meter.close()
        torch.set_num_threads(old_threads)

    tta = [row["seconds"] for row in per["tta"]]
    samples = [s for rnd in per["latency"] for s in rnd]
    lat_p50 = [bench.quantile(rnd, 0.5) * 1e3 for rnd in per["latency"]]
    lat_p95 = [bench.quantile(rnd, 0.95) * 1e3 for rnd in per["latency"]]
    largest = str(ALLREDUCE_MB[-1] * 2**20)
    ar = [row[largest] / 1e9 for row in per["allreduce"]]
    energy = meter.result()
    # per window the meter counted (a GPU window without a power sample is not counted)
    energy_j = (energy["joules"] / meter.windows if energy["available"] and energy["joules"] is not None
                and meter.windows else None)
    series = {"time_to_accuracy_s": tta, "train_samples_per_s": per["throughput"], "latency_p50_ms": lat_p50,
              "latency_p95_ms": lat_p95, "matmul_gflops": per["matmul"], "memory_bandwidth_gbs": per["bandwidth"],
              "allreduce_gbs": ar}
    headline = {key: (_headline(values, HEADLINES[key][2]) if values else None) for key, values in series.items()}
    headline["latency_p95_ms"] = _median(lat_p95)  # a tail figure: the typical round's tail, not the best one
    headline["energy_j"] = energy_j
    disturbed = {key: _disturbed(values, HEADLINES[key][2], headline[key])
                 for key, values in series.items() if values}
    rounds = settings.rounds
    details = {
        "method": ("every test runs once per round, so a slow stretch of the machine hits all tests alike; a "
                   "round's figure is the median of its repeats (matmul and bandwidth: bench's low quantile of "
                   f"timed blocks; latency: p50/p95 of that round's calls); a headline is the {ROUND_QUANTILE:.0%} "
                   "quantile of the rounds from the good end (another program can only slow a round down), "
                   "except latency p95, a tail figure, which is the median of the rounds' p95 (its best rounds "
                   "would hide the tail; a few slow calls in 100 flip a round's p95 between two values); "
                   "warm-up before timing; device synchronised before each clock read; fixed seeds and threads"),
        "rounds": rounds, "threads": threads, "seed": seed, "settings": settings.__dict__,
        "round_quantile": ROUND_QUANTILE, "medians": {key: _median(v) for key, v in series.items() if v},
        "disturbed_rounds": disturbed,
        "time_to_accuracy": {"target_accuracy": TARGET_ACCURACY, "model": f"MLP 64-{'-'.join(map(str, HIDDEN))}-10",
                             "optimizer": f"Adam lr {TTA_LR:g}", "batch": TTA_BATCH,
                             "evaluated": (f"held-out accuracy after every epoch ({len(split.y_test)} of the "
                                           f"{len(split.y_train) + len(split.y_test)} digits images)"),
                             "test_images": len(split.y_test),
                             "steps": per["tta"][0]["steps"], "epochs": per["tta"][0]["epochs"],
                             "accuracy": per["tta"][0]["accuracy"], "per_round_s": tta, "spread": _spread(tta)},
        "train_throughput": {"batch": THROUGHPUT_BATCH, "per_round": per["throughput"],
                             "spread": _spread(per["throughput"]),
                             "how": "median time of one train_step over blocks of at least "
                                    f"{settings.min_run_time:g} s"},
        "latency": {"batch": 1, "calls": len(samples), "per_round_p50_ms": lat_p50, "per_round_p95_ms": lat_p95,
                    "spread_p50": _spread(lat_p50), "spread_p95": _spread(lat_p95)},
        "matmul": {"n": mm_n, "dtype": "fp32", "per_round": per["matmul"], "spread": _spread(per["matmul"]),
                   "how": "bench.matmul_throughput: the low quantile of timed blocks, per round",
                   **({"all_cores": all_cores, "all_cores_gflops": _median(per["matmul_all_cores"]),
                       "all_cores_per_round": per["matmul_all_cores"],
                       "all_cores_spread": _spread(per["matmul_all_cores"])} if per["matmul_all_cores"] else {})},
        "memory_bandwidth": {"buffer_bytes": bw_bytes, "kernel": "copy (bytes read + written)",
                             "threads": threads if dev.type == "cpu" else None,
                             "per_round": per["bandwidth"], "spread": _spread(per["bandwidth"]),
                             **({"all_cores": all_cores, "all_cores_gbs": _median(per["bandwidth_all_cores"]),
                                 "all_cores_per_round": per["bandwidth_all_cores"],
                                 "all_cores_spread": _spread(per["bandwidth_all_cores"])}
                                if per["bandwidth_all_cores"] else {})},
        "allreduce": ({"applicable": False, "why": not_applicable} if not_applicable else {
            "applicable": True, "world_size": per["allreduce"][0]["world_size"],
            "backend": per["allreduce"][0]["backend"], "sizes_bytes": [mb * 2**20 for mb in ALLREDUCE_MB],
            "headline_size_bytes": int(largest),
            "per_round_busbw_gbs": {str(mb * 2**20): [row[str(mb * 2**20)] / 1e9 for row in per["allreduce"]]
                                    for mb in ALLREDUCE_MB},
            "spread": _spread(ar), "threads_per_rank": 1}),
    }
    if energy_j is not None:
        details["energy"] = {"windows": meter.windows, "joules_total": energy["joules"], "seconds": energy["seconds"],
                             "per": "one time-to-accuracy run"}
    import course_lib

    return {"schema": SCHEMA, "course_version": course_lib.__version__,
            "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            "label": label.strip() if label else default_label(dev),
            "hardware": {**info0.to_dict(), "torch_threads": threads}, "device": str(dev), "quick": quick,
            "seconds": time.perf_counter() - t_start, "headline": headline, "details": details, "energy": energy}


# ----------------------------------------------------------------------------------------------
# checking, saving, loading

def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_result(result: Any, where: str = "the result") -> dict:
    """Raise :class:`ResultError` ("<where>: <why>") unless ``result`` is a usable benchmark result."""
    if not isinstance(result, dict):
        raise ResultError(f"{where}: not a course benchmark result (foreign JSON: a {type(result).__name__}, "
                          "not an object with a 'schema' key)")
    schema = result.get("schema")
    if not isinstance(schema, str) or not schema.startswith(_SCHEMA_PREFIX):
        raise ResultError(f"{where}: not a course benchmark result (foreign JSON: its 'schema' is {schema!r}, "
                          f"expected {SCHEMA!r}; `course benchmark` writes these files)")
    version = schema[len(_SCHEMA_PREFIX):]
    if not version.isdigit():
        raise ResultError(f"{where}: unknown schema {schema!r} (expected {SCHEMA!r})")
    if int(version) > _SCHEMA_VERSION:
        raise ResultError(f"{where}: written with a newer schema {schema!r} than this course_lib reads ({SCHEMA!r}); "
                          "upgrade course_lib")
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
        if value is None and key in OPTIONAL_HEADLINES:
            continue
        if not _is_number(value) or value < 0:
            raise ResultError(f"{where}: headline {key!r} must be a finite number >= 0"
                              f"{' or null' if key in OPTIONAL_HEADLINES else ''}, got {value!r}")
    if not isinstance(result["label"], str) or not isinstance(result["hardware"], dict):
        raise ResultError(f"{where}: 'label' must be a string and 'hardware' an object")
    if not isinstance(result["energy"], dict) or not isinstance(result["energy"].get("available"), bool):
        raise ResultError(f"{where}: 'energy' must be an object with a true/false 'available'")
    return result


def save_result(result: dict, path: str | os.PathLike) -> Path:
    """Write ``result`` as JSON to ``path`` atomically; return the path. Notebook 07.1, ``course benchmark``.

    The JSON goes to a temporary file in the same folder, is flushed to disk, then renamed over
    ``path`` (``os.replace``, atomic on one file system): a reader sees the old file or the new one,
    never half of one, and an error or Ctrl-C while writing leaves neither a file nor the temporary.
    """
    check_result(result)
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"path {str(target)!r} is a folder; give a file name such as {default_result_path('x')}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        # mkstemp makes the file readable by its owner only; give it the mode a plain open() would
        # (0o666 less the umask), so others in a shared workshop folder can read it too
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=2, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    return target


def _umask() -> int:
    """This process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Larger files are not read (a result is about 10 kB).
MAX_RESULT_BYTES = 10 * 2**20


def load_result(path: str | os.PathLike) -> dict:
    """Read a result written by :func:`save_result` (notebook 07.1, the report card).

    Raises :class:`ResultError` naming the file and why: it cannot be read, is larger than
    ``MAX_RESULT_BYTES``, is empty, truncated or not JSON (also JSON nested too deeply to parse), is
    foreign JSON (no course benchmark schema), has a newer schema, misses headline keys, or holds
    values that are not numbers.
    """
    p = Path(path)
    where = str(p)
    try:
        size = p.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise ResultError(f"{where}: too large for a benchmark result ({size / 2**20:.1f} MB; results are "
                              f"about 10 kB, and files over {MAX_RESULT_BYTES // 2**20} MB are not read)")
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
            raise ResultError(f"{where}: truncated (the JSON ends early, after {len(text)} characters: was the "
                              "benchmark stopped while writing, or the file cut off when copied?)") from None
        raise ResultError(f"{where}: not valid JSON ({exc.msg}: line {exc.lineno}, column {exc.colno})") from None
    except (RecursionError, MemoryError) as exc:
        raise ResultError(f"{where}: not a benchmark result (JSON nested too deeply or too large to parse: "
                          f"{type(exc).__name__})") from None
    return check_result(obj, where)


# ----------------------------------------------------------------------------------------------
# showing

def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def summary_text(result: dict) -> str:
    """A readable table of a result's headline figures (printed by ``course benchmark``)."""
    check_result(result)
    d = result["details"]
    threads = d.get("threads", result["hardware"].get("torch_threads"))
    lines = [f"Benchmark of {result['label']} on {result['device']} ({threads} torch thread(s), "
             f"{'quick, ' if result['quick'] else ''}{d.get('rounds', '?')} rounds, {result['seconds']:.0f} s)",
             f"  {'test':<28}{'value':>12}  {'unit':<10} {'better':<7} spread over rounds"]
    spreads = {"time_to_accuracy_s": d.get("time_to_accuracy", {}).get("spread"),
               "train_samples_per_s": d.get("train_throughput", {}).get("spread"),
               "latency_p50_ms": d.get("latency", {}).get("spread_p50"),
               "latency_p95_ms": d.get("latency", {}).get("spread_p95"),
               "matmul_gflops": d.get("matmul", {}).get("spread"),
               "memory_bandwidth_gbs": d.get("memory_bandwidth", {}).get("spread"),
               "allreduce_gbs": d.get("allreduce", {}).get("spread")}
    for key, (name, unit, higher) in HEADLINES.items():
        value = result["headline"][key]
        if key == "time_to_accuracy_s":
            name = f"time to accuracy {d.get('time_to_accuracy', {}).get('target_accuracy', '')}"
        if value is None:
            why = (d.get("allreduce", {}).get("why") if key == "allreduce_gbs" else result["energy"].get("why"))
            lines.append(f"  {name:<28}{'-':>12}  {why or 'not measured'}")
            continue
        sp = spreads.get(key)
        lines.append(f"  {name:<28}{_fmt(value):>12}  {unit:<10} {'higher' if higher else 'lower':<7} "
                     + (f"{sp:.0%}" if isinstance(sp, (int, float)) else ""))
        mm = d.get("matmul", {})
        if key == "matmul_gflops" and "all_cores_gflops" in mm:
            name = f"  on all {mm['all_cores']} cores"
            lines.append(f"  {name:<28}{_fmt(mm['all_cores_gflops']):>12}  {unit:<10} {'higher':<7} "
                         f"{mm['all_cores_spread']:.0%} (not a headline: other programs change it)")
        bw = d.get("memory_bandwidth", {})
        if key == "memory_bandwidth_gbs" and "all_cores_gbs" in bw:
            name = f"  on all {bw['all_cores']} cores"
            lines.append(f"  {name:<28}{_fmt(bw['all_cores_gbs']):>12}  {unit:<10} {'higher':<7} "
                         f"{bw['all_cores_spread']:.0%} (not a headline)")
    worst = max(d.get("disturbed_rounds", {}).values(), default=0)
    if worst > d.get("rounds", 0) // 4:
        lines.append(f"  note: up to {worst} of {d['rounds']} rounds ran over 30 % slower than the headline: another "
                     "program was busy; run again on a quiet machine")
    if result["energy"].get("available"):
        lines.append(f"  energy source: {result['energy']['why']}")
    return "\n".join(lines)
