"""What this CPU can do right now: free cores, thread pools, real fp32 and bf16 speed.

``course_lib.hardware`` reads the processor's fixed facts (model, cores, SIMD flags). Whether a
demo's claim holds also depends on things that change: how many cores other programs are using at
this moment, how many thread pools are loaded into this process and whether they fight over the
cores, and how fast fp32 and bf16 arithmetic actually run. Where PyTorch's compute routines (kernels) have
no bf16 instructions to use, a bf16 matrix product goes through fallback code that converts to float32, and
how much slower than fp32 that is depends on the fallback path, so it is measured, never assumed: a fraction of
fp32's speed where oneDNN converts inside its AVX-512 routines, tens of times slower where only AVX2 code
runs (notebook 00 prints the ratio; its atlas shows both paths on one Zen 4 chip and one Intel chip).
Every notebook starts with::

    machine = course_lib.cpu.profile()     # measures, sets the thread pools, decides
    print(machine.summary())

:func:`profile` measures the load (:func:`measure_load`), sets PyTorch's threads to the free
physical cores and limits the other libraries' pools (:func:`set_threads`), times a small fp32
and bf16 matrix product (:func:`calibrate`), and turns those into decisions (:func:`thread_plan`, a pure
function, unit-tested with made-up machines): how many threads to use, whether bf16 pays here,
and how much to shrink bf16 demos. Notebook 00 and ``course doctor`` print the summary.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from . import arguments, timing
from .hardware import CPUInfo, detect, usable_cpus

__all__ = [
    "Load",
    "ThreadPool",
    "Calibration",
    "Plan",
    "CPUProfile",
    "measure_load",
    "thread_pools",
    "set_threads",
    "limit_threads",
    "calibrate",
    "thread_plan",
    "profile",
    "free_cores",
]

_BF16_MODES = ("native", "slow", "emulated", "unknown")
_PROFILE: CPUProfile | None = None
_FREE_CORES: tuple[float, int] | None = None  # (when measured, value) without a profile


# ----------------------------------------------------------------------------------------------
# load


@dataclass(frozen=True)
class Load:
    """How busy the CPUs this process may use were over a short interval (other programs only)."""

    busy_cores: float  # cores' worth of work by other processes (and the hypervisor's steal)
    usable_cores: int  # logical CPUs this process may use
    interval_s: float

    def free_cores(self, physical_cores: int) -> int:
        """Physical cores left for us: a core counts as taken once other work fills half of it."""
        taken = min(physical_cores, math.floor(self.busy_cores + 0.5))
        return max(1, physical_cores - taken)


def measure_load(interval: float = 0.25) -> Load:
    """Measure how many of this process's usable CPUs other programs keep busy.

    Reads the per-CPU busy time (psutil, which counts a virtual machine's steal time as busy) over
    ``interval`` seconds, and subtracts what this process itself used meanwhile.
    """
    import psutil

    interval = arguments.number("interval", interval, minimum=0.05, maximum=5.0)
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        allowed = list(range(psutil.cpu_count() or 1))
    me = psutil.Process()
    me.cpu_percent(None)
    per_cpu = psutil.cpu_percent(interval=interval, percpu=True)
    own = me.cpu_percent(None) / 100
    busy = sum(per_cpu[i] for i in allowed if i < len(per_cpu)) / 100
    return Load(busy_cores=max(0.0, busy - own), usable_cores=usable_cpus(), interval_s=interval)


# ----------------------------------------------------------------------------------------------
# thread pools


@dataclass(frozen=True)
class ThreadPool:
    """One thread pool loaded into this process, as threadpoolctl sees it."""

    owner: str  # the package that shipped the library: "torch", "numpy", "scipy", "scikit_learn", ...
    api: str  # "openmp" or "blas"
    library: str  # "openmp", "openblas", "mkl", "blis", ...
    threads: int
    path: str


def _owner(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            name = parts[parts.index(marker) + 1]
            return name.removesuffix(".libs").removesuffix(".dylibs")
    return "system"


def thread_pools() -> list[ThreadPool]:
    """Every OpenMP and BLAS thread pool loaded in this process (notebook 00).

    A process that imports torch, numpy, scipy and scikit-learn typically holds two OpenMP
    runtimes and two OpenBLAS copies besides torch's own pool. PyTorch's bundled MKL is linked
    into torch itself and does not show here: ``torch.get_num_threads()`` is its thread count.
    """
    from threadpoolctl import threadpool_info

    return [
        ThreadPool(
            _owner(p.get("filepath", "")),
            p.get("user_api", "?"),
            p.get("internal_api", "?"),
            int(p.get("num_threads", 0)),
            p.get("filepath", ""),
        )
        for p in threadpool_info()
    ]


_LIMITERS: list = []


def set_threads(n: int) -> None:
    """Run PyTorch on ``n`` threads and stop the other libraries' pools from fighting it.

    PyTorch's pool (and other OpenMP runtimes) get ``n`` threads; BLAS pools outside PyTorch
    (numpy's and scipy's OpenBLAS, used by scikit-learn) get one: on a small machine their spinning
    threads and PyTorch's compete for the same cores (a logistic regression on the digits runs many
    times slower with them than with one BLAS thread). OpenBLAS copies loaded later (scipy's, when
    scikit-learn is first imported) read ``OPENBLAS_NUM_THREADS``, which is set to 1 too unless you
    set it yourself.
    """
    n = arguments.positive_int("n", n)
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(n)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    limits = {}
    for pool in thread_pools():
        if pool.owner == "torch":
            continue
        limits[pool.path] = 1 if pool.api == "blas" else n
    if limits:
        _LIMITERS.append(threadpool_limits(limits=limits))


@contextlib.contextmanager
def limit_threads(n: int) -> Iterator[None]:
    """Temporarily run every pool (PyTorch's included) on ``n`` threads."""
    n = arguments.positive_int("n", n)
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(old)


# ----------------------------------------------------------------------------------------------
# calibration


@dataclass(frozen=True)
class Calibration:
    """fp32 and bf16 matrix-product speed measured here (:func:`calibrate`)."""

    fp32_flops: float  # FLOP/s
    bf16_flops: float
    size: int  # n of the n x n products compared
    threads: int
    seconds: float  # how long the calibration took

    @property
    def bf16_ratio(self) -> float:
        """bf16 speed / fp32 speed: above 1 bf16 pays; near 0 it is emulated."""
        return self.bf16_flops / self.fp32_flops


def calibrate(threads: int | None = None) -> Calibration:
    """Time n x n matrix products in fp32 and bf16 (well under a second).

    Compares at n = 128 first; where bf16 is at least a fifth of fp32's speed the comparison is
    repeated at n = 256, where per-call overhead matters less. The two are timed in turns, three times, each kind's
    faster look kept (``timing.time_fn``'s low quantile: another program can only make a run slower).
    """
    threads = torch.get_num_threads() if threads is None else arguments.positive_int("threads", threads)
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(0)
    rates = {}
    for n in (128, 256):
        a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
        a16, b16 = a.bfloat16(), b.bfloat16()
        flops = 2 * n**3
        fns, best = {"fp32": lambda: a @ b, "bf16": lambda: a16 @ b16}, {}
        for _ in range(3):  # fp32 bf16 fp32 bf16 ...: a slow spell cannot land on one kind alone
            for kind, fn in fns.items():
                t = timing.time_fn(fn, label=kind, num_threads=threads, warmup=1, min_run_time=0.03).seconds
                best[kind] = min(best.get(kind, t), t)
        rates = {kind: flops / t for kind, t in best.items()}
        size = n
        if rates["bf16"] < 0.2 * rates["fp32"]:
            break
    return Calibration(rates["fp32"], rates["bf16"], size, threads, time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------------
# decisions


@dataclass(frozen=True)
class Plan:
    """What the notebooks do on this machine (:func:`thread_plan`).

    ``threads``: PyTorch threads (the free physical cores). ``bf16``: "native" (bf16 at least as
    fast as fp32: mixed precision pays), "slow" (it works, slower than fp32: it saves memory, not
    time), "emulated" (software emulation, far slower: bf16 demos run tiny) or "unknown".
    ``bf16_scale``: multiply a bf16 demo's size by this (1 = full size, a power of two below).
    """

    threads: int
    physical_cores: int
    free_cores: int
    busy: bool
    bf16: str
    bf16_ratio: float | None
    bf16_scale: float
    notes: tuple[str, ...] = field(default_factory=tuple)


def _share(scale: float) -> str:
    """0.03125 -> '1/32', 0.5 -> '1/2' (a bf16 demo's shrink factor, always a power of two)."""
    return f"1/{round(1 / scale)}" if 0 < scale < 1 else f"{scale:g}x"


def thread_plan(
    cpu: CPUInfo,
    load: Load | None = None,
    calibration: Calibration | None = None,
    pools: list[ThreadPool] | None = None,
) -> Plan:
    """Decide threads, bf16 handling and what to tell the learner, from facts and measurements.

    A pure function (no measuring), so every kind of machine can be tried with made-up inputs: an
    AVX2-only laptop, AVX-512 without bf16, AMX, Arm, one core, a busy machine.
    """
    if not isinstance(cpu, CPUInfo):
        raise TypeError(f"cpu must be a hardware.CPUInfo, got {type(cpu).__name__}")
    physical = max(1, cpu.physical_cores)
    free = load.free_cores(physical) if load is not None else physical
    busy = load is not None and load.busy_cores >= 0.5
    notes: list[str] = []
    if busy:
        notes.append(
            f"Other programs keep about {load.busy_cores:.1f} core(s) busy: PyTorch runs on the {free} free "
            f"physical core(s) so its threads never wait for a busy one. Timings are noisier than on an idle "
            "machine; close other programs for cleaner numbers."
        )
    if physical == 1:
        notes.append(
            "One physical core: thread-scaling and multi-process demos can only take turns here; the "
            "notebooks say so instead of asserting a speed-up."
        )
    ratio = calibration.bf16_ratio if calibration is not None else None
    if ratio is None:
        mode = "native" if cpu.native_bf16 else "unknown"
    elif ratio >= 0.8:
        mode = "native"
    elif ratio >= 0.15:
        mode = "slow"
    else:
        mode = "emulated"
    scale = 1.0 if ratio is None or ratio >= 0.5 else max(1 / 64, 2.0 ** math.floor(math.log2(2 * ratio)))
    if mode == "native" and ratio is not None:
        used = "AMX tiles" if "AMX BF16" in cpu.simd else "bf16 instructions" if cpu.native_bf16 else "a fast bf16 path"
        notes.append(
            f"bf16 matrix products run {ratio:.1f}x as fast as fp32 here ({used}): on these small products bf16 "
            + ("saves time and memory." if ratio > 1.2 else "saves memory and costs no time.")
        )
    elif mode == "slow":
        notes.append(
            f"bf16 matrix products run at {ratio:.2f}x the speed of fp32 here (the compute routines used here have "
            "no bf16 dot-product instructions: values are converted inside them). bf16 saves memory here, not time."
        )
    elif mode == "emulated":
        notes.append(
            f"bf16 matrix products: PyTorch's kernels here ({cpu.torch_capability}) have no bf16 arithmetic, so they "
            f"run through fallback code, {1 / ratio:.0f}x slower than fp32 on a {calibration.size}x{calibration.size} "
            "product. bf16 saves memory here but never time, so "
            f"bf16 demos run at {_share(scale)} of their size; on a GPU or a CPU with bf16 units they run full size."
        )
    if pools:
        others = [p for p in pools if p.owner != "torch"]
        if others:
            named = ", ".join(f"{p.owner}'s {p.library}" for p in others)
            notes.append(
                f"Besides PyTorch's own thread pool, other libraries loaded {len(others)} ({named}): each BLAS "
                "pool among them is held to one thread, so their matrix routines do not compete with PyTorch's for "
                "the cores."
            )
    return Plan(
        threads=free,
        physical_cores=physical,
        free_cores=free,
        busy=busy,
        bf16=mode,
        bf16_ratio=ratio,
        bf16_scale=scale,
        notes=tuple(notes),
    )


# ----------------------------------------------------------------------------------------------
# the profile every notebook starts with


@dataclass(frozen=True)
class CPUProfile:
    """This CPU's facts, load, thread pools, calibration and the plan made from them."""

    cpu: CPUInfo
    load: Load
    pools: tuple[ThreadPool, ...]
    calibration: Calibration | None
    plan: Plan

    def summary(self, rates: bool = True) -> str:
        """A few lines for the start of every notebook and ``course doctor``; ``rates=False`` leaves out the
        calibration's matmul rates and what they decide about bf16 (where a notebook asks for a guess first)."""
        if not isinstance(rates, bool):
            raise TypeError(f"rates must be True or False, got {type(rates).__name__}")
        c, p = self.cpu, self.plan
        lines = [
            f"CPU      : {c.model} ({c.kind})",
            f"Cores    : {p.physical_cores} physical, {p.free_cores} free right now "
            f"(other programs keep {self.load.busy_cores:.1f} core(s) busy)",
            f"Threads  : PyTorch runs {torch.get_num_threads()} thread(s); other libraries' thread pools: "
            f"{len(self.pools)}",
        ]
        if self.calibration is not None and rates:
            cal = self.calibration
            lines.append(
                f"Matmul   : fp32 {cal.fp32_flops / 1e9:.0f} GFLOP/s, bf16 {cal.bf16_flops / 1e9:.1f} GFLOP/s "
                f"({cal.size}x{cal.size}, {cal.threads} thread(s)): bf16 is {p.bf16} here"
            )
        lines += [f"  - {note}" for note in p.notes if rates or not note.startswith("bf16")]
        return "\n".join(lines)


def free_cores() -> int:
    """Free physical cores now: the profile's when a notebook made one, else measured in a tenth of
    a second and remembered for 10 s (``comm.launch`` splits them between its ranks)."""
    global _FREE_CORES
    if _PROFILE is not None:
        return _PROFILE.plan.free_cores
    now = time.monotonic()
    if _FREE_CORES is None or now - _FREE_CORES[0] > 10:
        _FREE_CORES = (now, measure_load(0.1).free_cores(detect().cpu.physical_cores))
    return _FREE_CORES[1]


def profile(refresh: bool = False, apply: bool = True, calibration: bool = True) -> CPUProfile:
    """Measure this CPU now, set the thread pools, decide (cached: later calls return the first result).

    ``refresh=True`` measures again (e.g. after closing a program that kept a core busy);
    ``apply=False`` leaves the thread settings alone; ``calibration=False`` skips the matmul timing.
    """
    global _PROFILE
    if _PROFILE is not None and not refresh:
        return _PROFILE
    info = detect().cpu
    load = measure_load()
    free = load.free_cores(info.physical_cores)
    if apply:
        set_threads(free)
    cal = calibrate(free if apply else None) if calibration else None
    pools = thread_pools()
    decided = thread_plan(info, load, cal, pools)
    _PROFILE = CPUProfile(info, load, tuple(p for p in pools if p.owner != "torch"), cal, decided)
    return _PROFILE
