"""Timing and counting: how long does it take, how much work is it, how fast is that?

Built on ``torch.utils.benchmark.Timer`` (warm-up, repeated blocks, device synchronisation) and
``torch.utils.flop_counter.FlopCounterMode``. Used from notebook 01 (matmul throughput,
thread scaling, roofline, CPU vs GPU step time) onwards.

Timing rules this module follows, because a shared 2-core machine drifts by up to 2x and other
programs steal cores at random moments:

* warm up before timing (first calls pay for allocation, caches, lazy initialisation);
* synchronise the device before reading the clock (GPU work is asynchronous);
* report a **low quantile** of many repetitions (:func:`representative`, the 20th percentile, as
  ``Timing.seconds``): another program can only make a repetition slower, never faster, so the fast
  end of the distribution is what the code costs. The median is kept for reference;
* measure again when the repetitions spread widely, and flag the result ``noisy`` when they still
  do: the machine was too busy to measure well;
* compare alternatives interleaved (A B A B ...), never one block after the other.
"""

from __future__ import annotations

import contextlib
import io
import logging
import statistics
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch


def _import_quietly():
    """``torch.utils.benchmark`` imports ``cpp_extension``, which logs "No CUDA runtime is found" at import on a CUDA
    build of torch run without a GPU (the default ``pip install torch`` on Linux): a warning about nothing here."""
    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)  # newer torch logs it; torch 2.6 prints it to stderr
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from torch.utils import benchmark
    finally:
        log.setLevel(level)
    return benchmark


_torch_benchmark = _import_quietly()

from . import arguments, names
from .hardware import as_device, synchronize

#: The quantile of repetitions reported as the time of a call (interference only adds time).
LOW_QUANTILE = 0.2
#: Relative spread ((p75 - p20) / p20) above which a measurement is repeated, then flagged noisy.
NOISY_SPREAD = 0.5


def to_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'fp32' / 'bf16' / torch.float16 ... -> torch.dtype; ValueError for unknown names."""
    return names.torch_dtype(dtype)


def bytes_per_element(dtype: str | torch.dtype) -> int:
    """Bytes one element of ``dtype`` occupies (fp32: 4, bf16: 2, int8: 1)."""
    return names.bytes_per_element(dtype)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation between sorted values)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("values must not be empty")
    k = (len(xs) - 1) * arguments.fraction("q", q, allow_zero=True, allow_one=True)
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def representative(times: list[float]) -> float:
    """The time of an operation from its repeated timings: the ``LOW_QUANTILE`` (20th percentile) of ``times``.

    The course's one policy for "how long does it take" on a noisy machine: another program can only make a
    repetition slower, never faster, so the fast end of the distribution is what the code costs; a low quantile
    rather than the fastest value, so that no single repetition sets the figure alone. Latency percentiles
    (p50, p95) are figures of their own, not this. ValueError for no times."""
    return quantile(times, LOW_QUANTILE)


def relative_spread(values: list[float]) -> float:
    """How widely repetitions spread: (p75 - p20) / p20 (``Timing.spread``; above ``NOISY_SPREAD``: noisy)."""
    low = representative(values)
    return (quantile(values, 0.75) - low) / low if low > 0 else 0.0


@dataclass(frozen=True)
class Timing:
    """Result of ``time_fn`` / ``compare_interleaved``: the time of one call, in seconds.

    ``seconds`` is the low quantile of the repetitions (the number to compare), ``median_s`` the
    median, ``min_s`` the fastest, ``spread`` the relative spread (p75 - p20) / p20, and ``noisy``
    says the spread stayed above ``NOISY_SPREAD`` after measuring again: the machine was busy.
    """

    label: str
    seconds: float
    median_s: float
    min_s: float
    spread: float
    repeats: int
    num_threads: int
    device: str
    noisy: bool = False

    def __str__(self) -> str:
        flag = ", NOISY: the machine was busy" if self.noisy else ""
        return (
            f"{self.label}: {format_seconds(self.seconds)} (median {format_seconds(self.median_s)}, "
            f"spread {self.spread:.0%}, {self.repeats} runs, {self.num_threads} thread(s), {self.device}{flag})"
        )


def format_seconds(s: float) -> str:
    """1.2e-5 -> '12 us'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _summary(label: str, times: list[float], threads: int, device: str, noisy: bool) -> Timing:
    return Timing(
        label=label,
        seconds=representative(times),
        median_s=statistics.median(times),
        min_s=min(times),
        spread=relative_spread(times),
        repeats=len(times),
        num_threads=threads,
        device=device,
        noisy=noisy,
    )


def _block_times(call: Callable[[], None], threads: int, min_run_time: float) -> list[float]:
    timer = _torch_benchmark.Timer(stmt="call()", globals={"call": call}, num_threads=threads)
    return list(timer.blocked_autorange(min_run_time=min_run_time).times)


def time_fn(
    fn: Callable[[], object],
    *,
    label: str = "fn",
    device: torch.device | str | None = None,
    num_threads: int | None = None,
    warmup: int = 2,
    min_run_time: float = 0.2,
) -> Timing:
    """The time of one call of ``fn()`` (notebook 07.1: a benchmark's single timings).

    ``fn`` takes no arguments (wrap yours in a lambda). It is called ``warmup`` times first, then
    in blocks for at least ``min_run_time`` seconds by ``torch.utils.benchmark.Timer``, with the
    device synchronised after each call and ``num_threads`` CPU threads (default: torch's current
    setting, which ``course_lib.cpu.profile()`` sets to the free cores; the Timer alone would use 1).
    When the blocks spread widely it measures once more; ``Timing.noisy`` flags a spread that stayed.
    """
    arguments.function("fn", fn)
    min_run_time = arguments.positive("min_run_time", min_run_time)
    warmup = arguments.nonnegative_int("warmup", warmup)
    threads = torch.get_num_threads() if num_threads is None else arguments.positive_int("num_threads", num_threads)
    dev = as_device(device)

    def call() -> None:
        fn()
        synchronize(dev)

    with num_threads_set(threads):
        for _ in range(warmup):
            call()
    times = _block_times(call, threads, min_run_time)
    noisy = relative_spread(times) > NOISY_SPREAD
    if noisy:  # measure again; keep both (the low quantile of the union is still a fair estimate)
        times += _block_times(call, threads, min_run_time)
        noisy = relative_spread(times) > NOISY_SPREAD
    return _summary(label, times, threads, str(dev), noisy)


def compare_interleaved(
    fns: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 5,
    device: torch.device | str | None = None,
    num_threads: int | Mapping[str, int] | None = None,
    min_run_time: float = 0.05,
    warmup: int = 1,
) -> dict[str, Timing]:
    """Time several alternatives interleaved (A B A B ...); return one ``Timing`` each.

    Use this whenever an assertion compares two timings: slow drifts of the machine then hit every
    alternative alike (notebook 01: thread scaling, CPU vs GPU; later modules too). Each round
    times every alternative once (``time_fn``; ``warmup`` calls before an alternative's first round only); an
    alternative's ``seconds`` is the low quantile of
    its per-round times. If any alternative's rounds spread widely, as many rounds again are run
    for all of them; ``noisy`` flags a spread that stayed. ``num_threads`` is one thread count for
    all, or a mapping name -> thread count (``thread_scaling`` uses that).
    """
    if not isinstance(fns, Mapping) or not fns:
        raise ValueError("fns must be a non-empty mapping of name -> callable")
    for name, fn in fns.items():
        arguments.function(f"fns[{name!r}]", fn)
    rounds = arguments.positive_int("rounds", rounds)
    per: dict[str, list[Timing]] = {k: [] for k in fns}

    def run(n: int) -> None:
        for _ in range(n):
            for name, fn in fns.items():
                threads = num_threads.get(name) if isinstance(num_threads, Mapping) else num_threads
                warm = warmup if not per[name] else 0  # warm each alternative up once, not every round
                per[name].append(
                    time_fn(fn, label=name, device=device, num_threads=threads, warmup=warm, min_run_time=min_run_time)
                )

    run(rounds)
    if rounds > 1 and any(relative_spread([t.seconds for t in ts]) > NOISY_SPREAD for ts in per.values()):
        run(rounds)
    out = {}
    for name, ts in per.items():
        values = [t.seconds for t in ts]
        noisy = len(values) > 1 and relative_spread(values) > NOISY_SPREAD
        summary = _summary(name, values, ts[0].num_threads, ts[0].device, noisy)
        out[name] = Timing(
            **{
                **summary.__dict__,
                "median_s": statistics.median(t.median_s for t in ts),
                "min_s": min(t.min_s for t in ts),
                "repeats": sum(t.repeats for t in ts),
            }
        )
    return out


def any_noisy(timings: Mapping[str, Timing] | list[Timing]) -> bool:
    """Whether any timing was flagged noisy (notebooks mention it in their assertion messages)."""
    values = timings.values() if isinstance(timings, Mapping) else timings
    return any(t.noisy for t in values)


@contextlib.contextmanager
def num_threads_set(n: int) -> Iterator[None]:
    """Temporarily run torch's CPU ops on ``n`` threads (thread scaling)."""
    arguments.positive_int("n (number of threads)", n)
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def count_flops(fn: Callable[..., object], *args, **kwargs) -> int:
    """Floating-point operations PyTorch performs in ``fn(*args, **kwargs)``.

    Uses ``torch.utils.flop_counter.FlopCounterMode``, which counts matmuls, convolutions
    and attention where it has a formula for the attention kernel (2 FLOPs per multiply-add); elementwise ops are
    not counted, nor is PyTorch's CPU flash-attention kernel, which it has no formula for (torch 2.13).
    Pass a module as ``fn`` to count its forward pass.
    """
    arguments.function("fn", fn)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m x k) @ (k x n) product: one multiply and one add per term, 2*m*n*k."""
    return 2 * arguments.positive_int("m", m) * arguments.positive_int("n", n) * arguments.positive_int("k", k)


def achieved_flops(flops: float, seconds: float) -> float:
    """FLOP/s achieved: work done divided by time taken."""
    return arguments.nonnegative("flops", flops) / arguments.positive("seconds", seconds)


def achieved_bandwidth(nbytes: float, seconds: float) -> float:
    """Bytes/s achieved: bytes moved to and from memory divided by time taken."""
    return arguments.nonnegative("nbytes", nbytes) / arguments.positive("seconds", seconds)


def format_rate(value: float, unit: str = "FLOP/s") -> str:
    """1.8e11 -> '180 GFLOP/s'."""
    value = arguments.number("value", value, allow_inf=True)
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
    noisy: bool = False

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds


def matmul_throughput(
    sizes: list[int],
    *,
    dtype: str | torch.dtype = "fp32",
    device: torch.device | str = "cpu",
    min_run_time: float = 0.1,
    seed: int = 0,
    num_threads: int | None = None,
) -> list[Throughput]:
    """Time an n x n @ n x n product, written into an existing output, for each n (notebook 01).

    Small n: the fixed cost of a call dominates. Large n: the arithmetic does, and FLOP/s
    approaches the machine's peak. ``num_threads``: CPU threads (default: torch's current setting).
    """
    sizes = arguments.int_list("sizes", sizes)
    num_threads = None if num_threads is None else arguments.positive_int("num_threads", num_threads)
    torch_dtype = to_dtype(dtype)
    device = as_device(device)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        a = torch.randn(n, n, generator=gen).to(device=device, dtype=torch_dtype)
        b = torch.randn(n, n, generator=gen).to(device=device, dtype=torch_dtype)
        c = torch.empty(n, n, device=device, dtype=torch_dtype)
        t = time_fn(
            lambda: torch.mm(a, b, out=c),
            label=f"matmul {n}",
            device=device,
            min_run_time=min_run_time,
            num_threads=num_threads,
        )
        out.append(Throughput(n, t.seconds, matmul_flops(n, n, n), t.noisy))
    return out


STREAM_KERNELS = {  # name: (arrays read + written per element, FLOPs per element), after McCalpin's STREAM
    "copy": (2, 0),
    "scale": (2, 1),
    "add": (3, 1),
    "triad": (3, 2),
}


def copy_kernel(src: torch.Tensor, dst: torch.Tensor) -> Callable[[], object]:
    """A function doing ``dst = src`` that really moves the bytes on every backend.

    ``dst.copy_(src)`` does on a CPU, a CUDA GPU and MPS. XLA (TPU) records operations lazily and may
    satisfy a copy by pointing ``dst`` at ``src``'s buffer, doing no work at all, which would make any
    bandwidth look infinite; there the copy is a multiplication by a 1 sent to the device as data (a
    value the compiler cannot see, so it cannot fold the multiplication away).
    """
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor):
        raise TypeError("src and dst must be tensors")
    if src.device.type == "xla":
        one = torch.ones((), dtype=src.dtype).to(src.device)
        return lambda: torch.mul(src, one, out=dst)
    return lambda: dst.copy_(src)


def stream_bandwidth(
    n_bytes: int = 128 * 2**20, *, kernel: str = "copy", device: torch.device | str = "cpu", min_run_time: float = 0.2
) -> float:
    """Bytes/s of one STREAM kernel on arrays of ``n_bytes`` each, written into existing buffers.

    copy ``c = a``, scale ``b = s*c``, add ``c = a + b``, triad ``a = b + s*c`` (memory
    bandwidth). Bytes counted: every array read or written once per element. The buffers
    are preallocated, so the measurement sees memory traffic, not page faults. Pick ``n_bytes``
    well above the last-level cache (default 128 MiB) to measure main memory.
    """
    kernel = arguments.choice("kernel", kernel, STREAM_KERNELS)
    n = arguments.integer("n_bytes", n_bytes, minimum=1024) // 4
    device = as_device(device)
    a, b, c = (torch.full((n,), float(v), device=device) for v in (1, 2, 3))
    ops = {
        "copy": copy_kernel(a, c),
        "scale": lambda: torch.mul(c, 3.0, out=b),
        "add": lambda: torch.add(a, b, out=c),
        "triad": lambda: torch.add(b, c, alpha=3.0, out=a),
    }
    t = time_fn(ops[kernel], label=kernel, device=device, min_run_time=min_run_time)
    return achieved_bandwidth(STREAM_KERNELS[kernel][0] * n * 4, t.seconds)


def memory_bandwidth(
    n_bytes: int = 128 * 2**20, *, device: torch.device | str = "cpu", min_run_time: float = 0.2
) -> float:
    """Bytes/s of copying one buffer into another existing one (reads + writes counted).

    The STREAM copy kernel (``stream_bandwidth(kernel="copy")``), used as "the" memory bandwidth
    of a roofline.
    """
    return stream_bandwidth(n_bytes, kernel="copy", device=device, min_run_time=min_run_time)


def host_to_device_bandwidth(
    n_bytes: int = 64 * 2**20, *, pinned: bool = False, device: torch.device | str = "cuda", min_run_time: float = 0.2
) -> float:
    """Bytes/s of copying a host tensor into an existing accelerator tensor (notebook 03).

    ``pinned=True`` uses page-locked host memory, which the GPU's copy engine reads directly;
    pageable memory is first staged through a pinned buffer by the driver. CUDA only: pinned
    memory needs an accelerator, so on a CPU-only machine this raises ValueError.
    """
    arguments.integer("n_bytes", n_bytes, minimum=1024)
    if not torch.cuda.is_available():
        raise ValueError(
            f"device must be an available CUDA device for host-to-device copies, got {device!r} "
            "on a machine without CUDA"
        )
    dev = as_device(device)
    if dev.type != "cuda":
        raise ValueError(f"device must be a CUDA device for host-to-device copies, got {device!r}")
    host = torch.ones(n_bytes // 4, pin_memory=pinned)
    target = torch.empty(n_bytes // 4, device=dev)
    t = time_fn(lambda: target.copy_(host, non_blocking=pinned), label="h2d", device=dev, min_run_time=min_run_time)
    return achieved_bandwidth(n_bytes // 4 * 4, t.seconds)


def thread_scaling(
    fn: Callable[[], object], thread_counts: list[int], *, rounds: int = 5, min_run_time: float = 0.05
) -> dict[int, Timing]:
    """The time of ``fn`` on each number of CPU threads, measured interleaved (notebook 01).

    Rounds alternate the thread counts (1 2 1 2 ...) so the machine's drift hits all alike. Ask
    only for as many threads as there are free cores (``course_lib.cpu.profile().plan.free_cores``):
    a thread waiting for a core another program holds makes every step of a parallel kernel wait.
    """
    thread_counts = arguments.int_list("thread_counts", thread_counts)
    timings = compare_interleaved(
        {f"{t} threads": fn for t in thread_counts},
        rounds=rounds,
        num_threads={f"{t} threads": t for t in thread_counts},
        min_run_time=min_run_time,
    )
    return {t: timings[f"{t} threads"] for t in thread_counts}


def fork_join_cost(threads: int, *, rounds: int = 5) -> tuple[float, float, float]:
    """The fixed cost ``s`` of splitting one operation over ``threads`` CPU threads (notebook 01, section 3's
    fork-join model, t_p = t_1 / p + s), measured directly: one pass of ``add_`` over an array large enough that
    PyTorch splits it over every thread (32 Ki elements, its grain, or more per thread), on one thread and on
    ``threads``, interleaved. Returns (t_1, t_p, s = t_p - t_1 / p) in seconds; ``s`` is clamped at 0."""
    import torch

    threads = arguments.positive_int("threads", threads)
    x = torch.ones(max(1 << 17, 2 * 32768 * threads))
    fns = {"1": lambda: x.add_(1.0), "p": lambda: x.add_(1.0)}
    t = compare_interleaved(fns, rounds=rounds, num_threads={"1": 1, "p": threads}, min_run_time=0.05)
    t1, tp = t["1"].seconds, t["p"].seconds
    return t1, tp, max(0.0, tp - t1 / threads)


def fork_join_held_out(threads: int, split_s: float, *, rounds: int = 5) -> dict[int, dict[str, float]]:
    """The fork-join model tested away from where its ``s`` was measured (notebook 01, section 3): ``add_`` on
    arrays of one grain (32 Ki elements) and of four grains per thread, which PyTorch splits over every thread, on
    one thread and on ``threads``, interleaved. Returns ``{elements: {"t1", "tp", "model": t1 / p + s,
    "split_free": t1 / p}}`` in seconds; ``split_free`` is the model with splitting costing nothing."""
    import torch

    threads = arguments.positive_int("threads", threads)
    split_s = arguments.nonnegative("split_s", split_s)
    if threads < 2:
        raise ValueError(f"threads must be at least 2 for a split to cost anything, got {threads}")
    arrays = {n: torch.ones(n) for n in (32768 * threads, 4 * 32768 * threads)}
    fns = {f"{n} {k}": (lambda x=x: x.add_(1.0)) for n, x in arrays.items() for k in ("1", "p")}
    t = compare_interleaved(
        fns,
        rounds=rounds,
        num_threads={f"{n} {k}": 1 if k == "1" else threads for n in arrays for k in ("1", "p")},
        min_run_time=0.05,
    )
    out = {}
    for n in arrays:
        t1, tp = t[f"{n} 1"].seconds, t[f"{n} p"].seconds
        out[n] = {"t1": t1, "tp": tp, "model": t1 / threads + split_s, "split_free": t1 / threads}
    return out
