"""Benchmarking discipline, shown by measurement (notebook 07.1, "What goes wrong when you time carelessly").

Each function measures one mistake next to the careful way and returns plain numbers that a
notebook can print, plot and assert on; each takes a few seconds on 2 cores.

=====================  ==========================================================================
``warmup_effect``      the first training step in a fresh process against the median of the
                       warmed-up steps after it (thread pools, kernel choice, lazily made optimizer
                       state, memory from the operating system; on a GPU also the CUDA context)
``sync_effect``        timing work that runs asynchronously without waiting for it: on a GPU a
                       matmul timed without ``torch.cuda.synchronize``; on a CPU the same mistake with
                       work handed to a background thread (a future), timed without ``.result()``
``repeats_effect``     single measurements against medians of repeated ones: how far sets of the
                       same size (one call, or one median, per group) disagree
``busy_effect``        the same matmul on an idle machine and while a busy-loop process keeps one
                       core busy, measured interleaved (idle, busy, idle, busy, ...)
``busy_cores``         a ``with`` block during which ``n`` busy-loop processes keep ``n`` cores busy
                       (always stopped at its end), to time anything on a busy machine
=====================  ==========================================================================
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from .. import arguments, hardware, timing
from ..hardware import as_device, synchronize
from ..procs import Children

__all__ = [
    "WarmupEffect",
    "SyncEffect",
    "RepeatsEffect",
    "BusyEffect",
    "BusyMechanism",
    "warmup_effect",
    "sync_effect",
    "busy_mechanism",
    "repeats_effect",
    "busy_effect",
    "busy_cores",
]


def _ratio(values: list[float]) -> float:
    return max(values) / min(values) if min(values) > 0 else float("inf")


# ----------------------------------------------------------------------------------------------
# warm-up


@dataclass(frozen=True)
class WarmupEffect:
    """``first_s``: the first step in a fresh process; ``warm_s``: the median of the steps after the
    first ``skip``; ``ratio`` = first / warm; ``times``: every step, in order."""

    first_s: float
    warm_s: float
    ratio: float
    times: list[float]
    device: str


_XLA_WARMUPS = itertools.count()


def _steps_in_fresh_process(channel, device: str, width: int, batch: int, steps: int, threads: int) -> None:
    """Runs in a child: build a model and Adam, time ``steps`` training steps, send the times."""
    torch.set_num_threads(threads)
    channel.send(_step_times(torch.device(device), width, batch, steps))


def _step_times(dev: torch.device, width: int, batch: int, steps: int) -> list[float]:
    """Seconds of each of ``steps`` training steps of a new model and Adam on ``dev``."""
    from ..models import MLP
    from ..train import train_step

    torch.manual_seed(0)
    model = MLP(64, [width, width], 10).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xy = (torch.randn(batch, 64, device=dev), torch.randint(0, 10, (batch,), device=dev))
    times = []
    for _ in range(steps):
        synchronize(dev)
        t = time.perf_counter()
        train_step(model, xy, opt, device=dev)
        synchronize(dev)
        times.append(time.perf_counter() - t)
    return times


def warmup_effect(
    device: torch.device | str | None = None,
    *,
    steps: int = 30,
    skip: int = 5,
    width: int = 512,
    batch: int = 256,
    threads: int = 1,
    timeout: float = 60.0,
) -> WarmupEffect:
    """Time every training step of a fresh process: the first one against the warmed-up median.

    The steps run in a new child process (forked from a server that has imported torch but run
    nothing), so the first step pays what a first step pays in a fresh script or kernel: thread
    pools started, kernels chosen, Adam's state allocated, memory taken from the operating system,
    and on a GPU the CUDA context. The child runs ``threads`` torch threads (default 1, so that
    another program on a core does not slow the warmed-up steps too and hide the effect). On a TPU
    (XLA) the steps run in this process, since a child cannot open the chip the kernel holds: a new model's
    first step there pays the compilation of its graph. Notebook 07.1, "Warm-up".
    """
    dev = as_device(device)
    steps = arguments.integer("steps", steps, minimum=3)
    skip = arguments.integer("skip", skip, minimum=1, maximum=steps - 2)
    arguments.positive_int("width", width)
    arguments.positive_int("batch", batch)
    threads = arguments.positive_int("threads", threads)
    arguments.seconds("timeout", timeout)
    if dev.type == "xla":  # a child process cannot open the TPU this kernel holds: a new model here instead
        # XLA keeps compiled graphs for the process, keyed by their shapes: a width not used before makes this
        # call's first step compile again, as a fresh process's would, when the cell is run a second time
        width += next(_XLA_WARMUPS)
        times = _step_times(dev, width, batch, steps)  # its first step pays XLA's compilation of the step's graph
        warm = statistics.median(times[skip:])
        return WarmupEffect(times[0], warm, times[0] / warm, times, str(dev))

    def on_event(event) -> bool:
        if event.kind == "error":
            raise RuntimeError(f"the warm-up child failed: {event.value[1]}")
        if event.kind == "exit":
            raise RuntimeError(f"the warm-up child exited with code {event.value}: {kids.log_tail(0)}")
        return True  # its times

    with Children("course-warmup") as kids:
        kids.start(_steps_in_fresh_process, str(dev), width, batch, steps, threads)
        run = kids.supervise(on_event, timeout=timeout)
    if not run.done:
        raise TimeoutError(f"the warm-up child did not finish within timeout={timeout:g} s")
    times = run.messages[0][0]
    warm = statistics.median(times[skip:])
    return WarmupEffect(times[0], warm, times[0] / warm, times, str(dev))


# ----------------------------------------------------------------------------------------------
# synchronisation


@dataclass(frozen=True)
class SyncEffect:
    """``no_wait_s``: the clock read right after launching the work; ``wait_s``: after waiting for it
    (medians over ``repeats``); ``ratio`` = wait / no_wait; ``how``: what was launched, and how;
    ``n`` and ``matmuls``: the size and number of the products launched each time."""

    no_wait_s: float
    wait_s: float
    ratio: float
    repeats: int
    how: str
    device: str
    n: int = 0
    matmuls: int = 0


_ASYNC_DEVICES = ("cuda", "mps", "xla")


def _one_product_s(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, dev: torch.device) -> float:
    """Seconds for one ``torch.mm`` waited for to the end (median of 3, after one to warm up)."""
    times = []
    for i in range(4):
        synchronize(dev)
        t = time.perf_counter()
        torch.mm(a, b, out=c)
        synchronize(dev)
        if i:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def sync_effect(
    device: torch.device | str | None = None,
    *,
    n: int | None = None,
    matmuls: int | None = None,
    repeats: int = 7,
    target_s: float = 0.05,
    max_matmuls: int = 256,
) -> SyncEffect:
    """Time ``matmuls`` n x n products without waiting for them to finish, then waiting. Notebook 07.1,
    "Synchronisation".

    On a CUDA GPU, kernels are queued and the CPU returns at once: without ``torch.cuda.synchronize()``
    the clock measures the queueing. A CPU runs its operations to the end before returning, so the
    same mistake is shown with the work handed to a background thread (a ``concurrent.futures``
    future, as a data loader or an asynchronous step would), timed without and with ``.result()``.

    The work is sized so that waiting for it takes about ``target_s`` seconds on any device: ``n``
    defaults to 1024 (4096 on a CUDA GPU), and ``matmuls`` (by default) is worked out from one
    product timed first, waited for to the end: ``target_s`` / its time, at least 1 and at most
    ``max_matmuls`` (the GPU's launch queue holds about a thousand kernels; a full queue would make
    the launch itself wait). Launching a few kernels or submitting to a thread takes tens of
    microseconds, so the ratio is in the hundreds wherever the work is ~50 ms, also on the fastest GPU.
    """
    dev = as_device(device)
    n = (4096 if dev.type == "cuda" else 1024) if n is None else arguments.positive_int("n", n)
    repeats = arguments.positive_int("repeats", repeats)
    target_s = arguments.positive("target_s", target_s)
    max_matmuls = arguments.positive_int("max_matmuls", max_matmuls)
    if matmuls is not None:
        matmuls = arguments.positive_int("matmuls", matmuls)
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    c = torch.empty(n, n, device=dev)
    if matmuls is None:
        matmuls = max(1, min(max_matmuls, round(target_s / max(_one_product_s(a, b, c, dev), 1e-9))))

    def work() -> None:
        for _ in range(matmuls):
            torch.mm(a, b, out=c)

    no_wait, wait = [], []
    if dev.type in _ASYNC_DEVICES:
        how = f"{matmuls} matmuls of {n} x {n} queued on {dev.type}, clock read before and after synchronize()"
        work()
        synchronize(dev)
        for _ in range(repeats):
            t = time.perf_counter()
            work()
            no_wait.append(time.perf_counter() - t)
            synchronize(dev)
            wait.append(time.perf_counter() - t)
    else:
        how = (
            f"{matmuls} matmuls of {n} x {n} handed to a background thread; clock read after submit() and "
            "after result()"
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(work).result()  # warm-up
            for _ in range(repeats):
                t = time.perf_counter()
                future = pool.submit(work)
                no_wait.append(time.perf_counter() - t)
                future.result()
                wait.append(time.perf_counter() - t)
    nw, w = statistics.median(no_wait), statistics.median(wait)
    return SyncEffect(nw, w, w / nw if nw > 0 else float("inf"), repeats, how, str(dev), n, matmuls)


# ----------------------------------------------------------------------------------------------
# repeats


@dataclass(frozen=True)
class RepeatsEffect:
    """``singles``: single timed calls, in order; ``medians``: medians of ``groups`` groups of
    ``per_group`` calls taken interleaved over the same stretch (group g holds calls g, g+groups, ...).
    ``single_ratio``: largest over smallest of all the singles; ``median_ratio``: of the ``groups``
    medians; ``set_ratio``: of ``groups`` single calls, one per group (calls k*groups ... k*groups +
    groups - 1), the median over the ``per_group`` such sets: the typical disagreement of as many
    single timings as there are medians (1.0 = perfect agreement)."""

    singles: list[float]
    medians: list[float]
    groups: int
    per_group: int
    single_ratio: float
    median_ratio: float
    set_ratio: float = float("nan")


def repeats_effect(
    device: torch.device | str | None = None, *, n: int = 256, groups: int = 4, per_group: int = 400, threads: int = 1
) -> RepeatsEffect:
    """Time ``groups * per_group`` single n x n matmuls one by one, then group them. Notebook 07.1,
    "Repeats and medians".

    Single measurements can disagree by a factor (the operating system, another program, a cache);
    medians of interleaved repeats agree far better. ``set_ratio`` and ``median_ratio`` compare sets
    of the same size (``groups`` single calls against ``groups`` medians), so either can be larger. The groups are
    interleaved (call i
    goes to group i % groups), so a slow stretch of the machine hits every group alike. CPU work runs
    on ``threads`` torch threads (default 1: see ``busy_effect`` for what a thread per core risks).
    """
    dev = as_device(device)
    n = arguments.positive_int("n", n)
    groups = arguments.integer("groups", groups, minimum=2)
    per_group = arguments.integer("per_group", per_group, minimum=3)
    threads = arguments.positive_int("threads", threads)
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    c = torch.empty(n, n, device=dev)
    singles = []
    with timing.num_threads_set(threads):
        for _ in range(5):
            torch.mm(a, b, out=c)
        synchronize(dev)
        for _ in range(groups * per_group):
            t = time.perf_counter()
            torch.mm(a, b, out=c)
            synchronize(dev)
            singles.append(time.perf_counter() - t)
    medians = [statistics.median(singles[g::groups]) for g in range(groups)]
    sets = [_ratio(singles[k * groups : (k + 1) * groups]) for k in range(per_group)]
    return RepeatsEffect(
        singles, medians, groups, per_group, _ratio(singles), _ratio(medians), float(statistics.median(sets))
    )


# ----------------------------------------------------------------------------------------------
# a busy machine


def _spin(channel, seconds: float) -> None:
    """Runs in a child: keep one core busy for ``seconds`` (pure Python, one thread), then report."""
    channel.send("spinning")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    channel.send("done")


@dataclass(frozen=True)
class BusyEffect:
    """``idle_s`` / ``busy_s``: the matmul's mean time per call over a window of ``window_s`` seconds
    (median over rounds) without and with the busy processes; ``slowdown`` = busy / idle; ``threads``
    torch threads; ``busy_processes`` busy loops; ``cores`` the CPUs this process may use."""

    idle_s: float
    busy_s: float
    slowdown: float
    threads: int
    busy_processes: int
    cores: int
    rounds: int
    window_s: float
    idle_rounds: list[float] = field(default_factory=list)
    busy_rounds: list[float] = field(default_factory=list)


def _wait_for(kids: Children, what: str, count: int, timeout: float) -> None:
    seen = []

    def on_event(event) -> bool:
        if event.kind in ("error", "exit"):
            raise RuntimeError(f"a busy-loop process stopped early: {event.value}")
        seen.append(event.value == what)
        return sum(seen) >= count

    if not kids.supervise(on_event, timeout=timeout).done:
        raise TimeoutError(f"the busy-loop processes did not start within {timeout:g} s")


@contextlib.contextmanager
def busy_cores(n: int = 1, *, seconds: float = 600.0, timeout: float = 60.0) -> Iterator[list[int]]:
    """Keep ``n`` cores busy while the ``with`` block runs: ``n`` busy-loop processes (``_spin``), started
    through ``course_lib.procs`` and running once the block starts; the block gets their process ids.
    Notebook 07.1, "A busy machine" and "A second result, and the report card".

    The processes are always stopped when the block ends, also on an error or Ctrl-C (and they stop by
    themselves after ``seconds``, or if this process dies). Each is one pure-Python thread, so it takes
    one core's worth of time; the operating system decides which core. Raises TimeoutError if they have
    not started within ``timeout`` seconds.

    Example::

        with busy_cores(1):
            result = suite.run_benchmark(quick=True)  # shares the machine with one busy loop
    """
    n = arguments.positive_int("n", n)
    seconds = arguments.seconds("seconds", seconds)
    timeout = arguments.seconds("timeout", timeout)
    with Children("course-busy") as kids:
        for _ in range(n):
            kids.start(_spin, seconds)
        _wait_for(kids, "spinning", n, timeout)
        yield [pid for pid in kids.pids if pid is not None]


def _mean_call(fn, window: float) -> float:
    """Mean seconds per call over a window of at least ``window`` seconds (after one call to warm up).

    The mean over a window many scheduler time slices long shows the share of a core a process
    gets; the fastest calls would not (a call shorter than a time slice can run at full speed)."""
    fn()
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= window:
            return elapsed / calls


def busy_effect(
    *, threads: int = 1, busy_processes: int = 1, n: int = 512, rounds: int = 3, window_s: float = 0.2
) -> BusyEffect:
    """The same n x n CPU matmul on ``threads`` torch threads, idle and with ``busy_processes`` busy-loop
    processes, interleaved over ``rounds`` (idle, busy, idle, busy, ...). Notebook 07.1, "A busy machine".

    With the defaults (one thread, one busy loop) on a machine with 2 or more free cores, the
    scheduler puts the loop and the thread on different cores, and the matmul slows only a little
    (shared caches and memory; on a virtual machine perhaps a shared physical core). ``threads`` =
    the number of cores shows the worse case: one busy core slows a parallel kernel far more than
    the half core it loses, since the threads wait for each other at every barrier and the thread
    that shares a core is off it for whole scheduler time slices of milliseconds (``busy_mechanism``
    measures both time scales; any other program running does the same, so the "idle" rounds are idle only
    on a quiet machine). On one CPU, the loop and the thread share it: about 2x. ``busy_processes``
    = ``cores`` or more leaves no core free, so even one thread shares a core with a loop. The busy
    processes are started through ``course_lib.procs`` and always stopped, also on error or Ctrl-C.
    """
    threads = arguments.positive_int("threads", threads)
    cores = hardware.usable_cpus()
    busy_processes = arguments.positive_int("busy_processes", busy_processes)
    n = arguments.positive_int("n", n)
    rounds = arguments.positive_int("rounds", rounds)
    window_s = arguments.positive("window_s", window_s)
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    fn = lambda: torch.mm(a, b, out=c)  # noqa: E731
    idle, busy = [], []
    with timing.num_threads_set(threads):
        for _ in range(rounds):
            idle.append(_mean_call(fn, window_s))
            with busy_cores(busy_processes):
                busy.append(_mean_call(fn, window_s))
    i, b_ = statistics.median(idle), statistics.median(busy)
    return BusyEffect(i, b_, b_ / i, threads, busy_processes, cores, rounds, window_s, idle, busy)


@dataclass(frozen=True)
class BusyMechanism:
    """Why one busy core slows a parallel kernel by more than a fair share.

    ``slice_s``: how long this thread, pinned to the busy loop's core, was left off that core each time
    (the median gap, ``gaps`` of them): the scheduler's time slice as this machine grants it.
    ``idle_call_s`` / ``busy_calls_s``: one n x n matmul on ``threads`` threads per call, idle (the 10th
    percentile: an undisturbed call) and every call with one busy loop. ``slow_fraction``: busy calls over 3
    times the idle call;
    ``slow_extra_s``: their median extra time. ``cpu_per_wall``: process CPU time over wall time during
    the busy calls. ``cores``: the CPUs this process may use; the busy loop takes one, so at most
    ``spare_cores`` = min(threads, cores - 1) threads have a core to themselves. Threads that spin at the
    barrier while they wait keep those cores busy: ``cpu_per_wall`` near ``spare_cores`` (up to half a core more,
    the busy core's share); threads that sleep while they wait give well below it.
    """

    slice_s: float
    gaps: int
    idle_call_s: float
    busy_calls_s: list[float]
    slow_fraction: float
    slow_extra_s: float | None
    cpu_per_wall: float
    threads: int
    n: int
    cores: int = 0

    @property
    def spare_cores(self) -> int:
        """Threads that can each keep a core of their own while the busy loop holds one: min(threads, cores - 1)."""
        return max(0, min(self.threads, self.cores - 1))


def _gaps(seconds: float, threshold: float = 50e-6) -> list[float]:
    """Gaps over ``threshold`` between consecutive clock reads in a tight loop (times this thread did not run)."""
    out, last = [], time.perf_counter()
    end = last + seconds
    while True:
        t = time.perf_counter()
        if t - last > threshold:
            out.append(t - last)
        last = t
        if t > end:
            return out


def _call_times(fn, calls: int) -> list[float]:
    fn()
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def busy_mechanism(*, threads: int = 2, n: int = 256, calls: int = 300, slice_probe_s: float = 0.4) -> BusyMechanism:
    """Measure the two time scales behind the busy-core slow-down. Notebook 07.1, "A busy machine".

    First the scheduler's time slice: one busy-loop process and this thread are pinned to the same core,
    and a tight loop of clock reads records every gap in which the loop ran instead (Linux; elsewhere,
    or where pinning is refused, ``slice_s`` is NaN). Then the per-call times of an n x n matmul on
    ``threads`` threads, idle and with one busy loop (unpinned): a call lasts a fraction of a
    millisecond and ends at a barrier where every thread waits for the others, so a call whose thread
    lost its core waits for the busy loop's slice to end.
    """
    import math
    import os

    threads = arguments.positive_int("threads", threads)
    n = arguments.positive_int("n", n)
    calls = arguments.positive_int("calls", calls)
    slice_probe_s = arguments.positive("slice_probe_s", slice_probe_s)
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    fn = lambda: torch.mm(a, b, out=c)  # noqa: E731
    with timing.num_threads_set(threads):
        idle = _call_times(fn, calls)
        with busy_cores(1) as pids:
            gaps: list[float] = []
            if hasattr(os, "sched_setaffinity") and pids:
                mine = os.sched_getaffinity(0)
                cpu = min(mine)
                try:
                    os.sched_setaffinity(pids[0], {cpu})
                    os.sched_setaffinity(0, {cpu})  # this thread only
                    gaps = _gaps(slice_probe_s)
                except OSError:
                    gaps = []
                finally:
                    os.sched_setaffinity(0, mine)
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(pids[0], mine)
            cpu0, t0 = time.process_time(), time.perf_counter()
            busy = _call_times(fn, calls)
            cpu_per_wall = (time.process_time() - cpu0) / (time.perf_counter() - t0)
    w = timing.quantile(idle, 0.1)  # an undisturbed call: another program may hold a core in the "idle" calls too
    slow = [t - w for t in busy if t > 3 * w]
    return BusyMechanism(
        float(statistics.median(gaps)) if gaps else math.nan,
        len(gaps),
        float(w),
        busy,
        len(slow) / len(busy),
        float(statistics.median(slow)) if slow else None,
        float(cpu_per_wall),
        threads,
        n,
        hardware.usable_cpus(),
    )
