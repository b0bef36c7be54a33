"""Timing and counting: how long does it take, how much work is it, how fast is that?

Built on ``torch.utils.benchmark.Timer`` (warm-up, medians, device synchronisation) and
``torch.utils.flop_counter.FlopCounterMode``. Used from notebook 01 (matmul throughput,
thread scaling, roofline, CPU vs GPU step time) onwards.

Timing rules this module follows, because a shared 2-core machine drifts by up to 2x:
* warm up before timing (first calls pay for allocation, caches, lazy initialisation);
* report medians of many repetitions, not means or single runs;
* synchronise the device before reading the clock (GPU work is asynchronous);
* compare alternatives interleaved (A B A B ...), never one block after the other.
"""
from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch.utils import benchmark

from .hardware import synchronize

DTYPE_NAMES = {
    "fp64": torch.float64, "float64": torch.float64,
    "fp32": torch.float32, "float32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16,
    "int8": torch.int8,
}


def to_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'fp32' / 'bf16' / torch.float16 ... -> torch.dtype; ValueError for unknown names."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if not isinstance(dtype, str) or dtype.lower() not in DTYPE_NAMES:
        raise ValueError(f"dtype {dtype!r} is not known; accepted values are {sorted(DTYPE_NAMES)}")
    return DTYPE_NAMES[dtype.lower()]


def bytes_per_element(dtype: str | torch.dtype) -> int:
    """Bytes one element of ``dtype`` occupies (fp32: 4, bf16: 2, int8: 1)."""
    return torch.empty((), dtype=to_dtype(dtype)).element_size()


@dataclass(frozen=True)
class Timing:
    """Result of ``time_fn``: median and spread of the time per call, in seconds."""

    label: str
    median_s: float
    iqr_s: float
    repeats: int
    num_threads: int
    device: str

    def __str__(self) -> str:
        return (f"{self.label}: median {format_seconds(self.median_s)} "
                f"(IQR {format_seconds(self.iqr_s)}, {self.repeats} runs, "
                f"{self.num_threads} thread(s), {self.device})")


def format_seconds(s: float) -> str:
    """1.2e-5 -> '12.0 us'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _check_positive(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def time_fn(fn: Callable[[], object], *, label: str = "fn", device: torch.device | str | None = None,
            num_threads: int | None = None, warmup: int = 2, min_run_time: float = 0.2) -> Timing:
    """Median time of one call of ``fn()`` (notebook 01: matmul throughput, step time).

    ``fn`` takes no arguments (wrap yours in a lambda). It is called ``warmup`` times first,
    then repeatedly for at least ``min_run_time`` seconds by ``torch.utils.benchmark.Timer``,
    with the device synchronised after each call and ``num_threads`` CPU threads (default:
    torch's current setting; the Timer itself would default to 1).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_positive("min_run_time", min_run_time)
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    threads = torch.get_num_threads() if num_threads is None else num_threads
    _check_positive("num_threads", threads)
    dev = torch.device(device) if device is not None else torch.device("cpu")

    def call() -> None:
        fn()
        synchronize(dev)

    with num_threads_set(threads):
        for _ in range(warmup):
            call()
    timer = benchmark.Timer(stmt="call()", globals={"call": call}, num_threads=threads, label=label)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(label=label, median_s=m.median, iqr_s=m.iqr, repeats=len(m.times),
                  num_threads=threads, device=str(dev))


def compare_interleaved(fns: Mapping[str, Callable[[], object]], *, rounds: int = 5,
                        device: torch.device | str | None = None, num_threads: int | Mapping[str, int] | None = None,
                        min_run_time: float = 0.05, warmup: int = 1) -> dict[str, Timing]:
    """Time several alternatives interleaved (A B A B ...) and return each one's median.

    Use this whenever an assertion compares two timings: slow drifts of the machine then hit
    every alternative alike (notebook 01: thread scaling, CPU vs GPU; later modules too).
    The reported median is the median over rounds of each round's median. ``num_threads`` is
    one thread count for all, or a mapping name -> thread count (``thread_scaling`` uses that).
    """
    if not fns:
        raise ValueError("fns must name at least one callable")
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    per: dict[str, list[Timing]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            threads = num_threads.get(name) if isinstance(num_threads, Mapping) else num_threads
            per[name].append(time_fn(fn, label=name, device=device, num_threads=threads,
                                     warmup=warmup, min_run_time=min_run_time))
    out = {}
    for name, ts in per.items():
        medians = [t.median_s for t in ts]
        q = statistics.quantiles(medians, n=4) if len(medians) > 1 else [medians[0]] * 3
        out[name] = Timing(label=name, median_s=statistics.median(medians), iqr_s=q[2] - q[0],
                           repeats=sum(t.repeats for t in ts), num_threads=ts[0].num_threads,
                           device=ts[0].device)
    return out


@contextlib.contextmanager
def num_threads_set(n: int) -> Iterator[None]:
    """Temporarily run torch's CPU ops on ``n`` threads (notebook 01: thread scaling)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n (number of threads) must be an int >= 1, got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def count_flops(fn: Callable[..., object], *args, **kwargs) -> int:
    """Floating-point operations PyTorch performs in ``fn(*args, **kwargs)``.

    Uses ``torch.utils.flop_counter.FlopCounterMode``, which counts matmuls, convolutions
    and attention (2 FLOPs per multiply-add); elementwise ops are not counted.
    Pass a module as ``fn`` to count its forward pass.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m x k) @ (k x n) product: one multiply and one add per term, 2*m*n*k."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    return 2 * m * n * k


def achieved_flops(flops: float, seconds: float) -> float:
    """FLOP/s achieved: work done divided by time taken."""
    if flops < 0:
        raise ValueError(f"flops must be >= 0, got {flops!r}")
    _check_positive("seconds", seconds)
    return flops / seconds


def achieved_bandwidth(nbytes: float, seconds: float) -> float:
    """Bytes/s achieved: bytes moved to and from memory divided by time taken."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
    _check_positive("seconds", seconds)
    return nbytes / seconds


def format_rate(value: float, unit: str = "FLOP/s") -> str:
    """1.8e11 -> '180 GFLOP/s'."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@dataclass(frozen=True)
class Throughput:
    """One point of a throughput sweep."""

    size: int
    seconds: float
    flops: int

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds


def matmul_throughput(sizes: list[int], *, dtype: str | torch.dtype = "fp32", device: torch.device | str = "cpu",
                      min_run_time: float = 0.1, seed: int = 0) -> list[Throughput]:
    """Time an n x n @ n x n product, written into an existing output, for each n (notebook 01).

    Small n: the fixed cost of a call dominates. Large n: the arithmetic does, and FLOP/s
    approaches the machine's peak.
    """
    if not sizes:
        raise ValueError("sizes must list at least one matrix size")
    torch_dtype = to_dtype(dtype)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"sizes must be positive ints, got {n!r}")
        a = torch.randn(n, n, generator=gen).to(device=device, dtype=torch_dtype)
        b = torch.randn(n, n, generator=gen).to(device=device, dtype=torch_dtype)
        c = torch.empty(n, n, device=device, dtype=torch_dtype)
        t = time_fn(lambda: torch.mm(a, b, out=c), label=f"matmul {n}", device=device, min_run_time=min_run_time)
        out.append(Throughput(n, t.median_s, matmul_flops(n, n, n)))
    return out


STREAM_KERNELS = {  # name: (arrays read + written per element, FLOPs per element), after McCalpin's STREAM
    "copy": (2, 0), "scale": (2, 1), "add": (3, 1), "triad": (3, 2),
}


def stream_bandwidth(n_bytes: int = 128 * 2**20, *, kernel: str = "copy", device: torch.device | str = "cpu",
                     min_run_time: float = 0.2) -> float:
    """Bytes/s of one STREAM kernel on arrays of ``n_bytes`` each, written into existing buffers.

    copy ``c = a``, scale ``b = s*c``, add ``c = a + b``, triad ``a = b + s*c`` (notebooks 01 and 03:
    memory bandwidth). Bytes counted: every array read or written once per element. The buffers
    are preallocated, so the measurement sees memory traffic, not page faults. Pick ``n_bytes``
    well above the last-level cache (default 128 MiB) to measure main memory.
    """
    if kernel not in STREAM_KERNELS:
        raise ValueError(f"kernel {kernel!r} is not known; accepted values are {sorted(STREAM_KERNELS)}")
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, int) or n_bytes < 1024:
        raise ValueError(f"n_bytes must be an int >= 1024, got {n_bytes!r}")
    n = n_bytes // 4
    a, b, c = (torch.full((n,), float(v), device=device) for v in (1, 2, 3))
    ops = {"copy": lambda: c.copy_(a), "scale": lambda: torch.mul(c, 3.0, out=b),
           "add": lambda: torch.add(a, b, out=c), "triad": lambda: torch.add(b, c, alpha=3.0, out=a)}
    t = time_fn(ops[kernel], label=kernel, device=device, min_run_time=min_run_time)
    return achieved_bandwidth(STREAM_KERNELS[kernel][0] * n * 4, t.median_s)


def memory_bandwidth(n_bytes: int = 128 * 2**20, *, device: torch.device | str = "cpu",
                     min_run_time: float = 0.2) -> float:
    """Bytes/s of copying one buffer into another existing one (reads + writes counted).

    The STREAM copy kernel (``stream_bandwidth(kernel="copy")``), used as "the" memory bandwidth
    of a roofline (notebook 01).
    """
    return stream_bandwidth(n_bytes, kernel="copy", device=device, min_run_time=min_run_time)


def host_to_device_bandwidth(n_bytes: int = 64 * 2**20, *, pinned: bool = False, device: torch.device | str = "cuda",
                             min_run_time: float = 0.2) -> float:
    """Bytes/s of copying a host tensor into an existing accelerator tensor (notebook 03).

    ``pinned=True`` uses page-locked host memory, which the GPU's copy engine reads directly;
    pageable memory is first staged through a pinned buffer by the driver. CUDA only: pinned
    memory needs an accelerator, so on a CPU-only machine this raises ValueError.
    """
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"device must be an available CUDA device for host-to-device copies, got {device!r}")
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, int) or n_bytes < 1024:
        raise ValueError(f"n_bytes must be an int >= 1024, got {n_bytes!r}")
    host = torch.ones(n_bytes // 4, pin_memory=pinned)
    target = torch.empty(n_bytes // 4, device=dev)
    t = time_fn(lambda: target.copy_(host, non_blocking=pinned), label="h2d", device=dev, min_run_time=min_run_time)
    return achieved_bandwidth(n_bytes // 4 * 4, t.median_s)


def thread_scaling(fn: Callable[[], object], thread_counts: list[int], *, rounds: int = 5,
                   min_run_time: float = 0.05) -> dict[int, Timing]:
    """Median time of ``fn`` on each number of CPU threads, measured interleaved (notebook 01).

    Rounds alternate the thread counts (1 2 1 2 ...) so the machine's drift hits all alike.
    """
    if not thread_counts:
        raise ValueError("thread_counts must list at least one thread count")
    for t in thread_counts:
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ValueError(f"thread_counts must be positive ints, got {t!r}")
    timings = compare_interleaved({f"{t} threads": fn for t in thread_counts}, rounds=rounds,
                                  num_threads={f"{t} threads": t for t in thread_counts}, min_run_time=min_run_time)
    return {t: timings[f"{t} threads"] for t in thread_counts}
