"""Run code under a memory cap in a throw-away subprocess (notebook 02, memory).

Out-of-memory demos must never kill the learner's kernel, so every one of them runs here:

* ``run_with_memory_limit(fn, limit_bytes, *args)`` starts a child process
  (``course_lib.procs.Children``: its own session, a log of its output, ~0.05 s to start once the
  first one has paid for ``import torch``), caps its address space with ``RLIMIT_AS`` and runs
  ``fn(*args)``. The outcome comes back as a :class:`LimitedRun`: the value, or the error, and
  whether it was an out-of-memory failure; a child that dies without reporting comes back with the
  tail of its own error output. No process outlives the call (timeout, error or Ctrl-C), including
  any that ``fn`` started.
* ``find_max_batch_size(step_fn, limit_bytes)`` probes batch sizes (doubling, then bisection),
  each in its own capped process, for the largest one that fits.
* ``mlp_training_step(batch_size)`` is an importable example step to search over.

What the limit means
--------------------
``RLIMIT_AS`` caps *virtual address space*, not resident memory. A Python process that has
imported torch already reserves several hundred MB of address space (shared libraries, thread
stacks, allocator arenas) before it allocates a single tensor. So the child first imports torch
(and the module of ``fn``), warms up its thread pool, runs one tiny training step (autograd's
first backward maps tens of MB), measures its own address space (``VmSize``; ``LimitedRun`` reports it) and sets
``limit = baseline + limit_bytes``: ``limit_bytes`` is the head-room for *your* allocations.
A 128 MB tensor fits under ``limit_bytes = 256 MB``; a 384 MB tensor does not.

Platforms: the cap needs ``resource.RLIMIT_AS`` and a kernel that enforces it (Linux, which is
what Colab runs). ``memory_limit_supported()`` says whether this machine qualifies. Elsewhere
(Windows has no ``resource``; macOS does not enforce ``RLIMIT_AS``) ``run_with_memory_limit``
raises :class:`MemoryLimitUnsupported` instead of running an OOM demo without a cap, unless you
pass ``allow_uncapped=True``, in which case ``fn`` runs uncapped and ``LimitedRun.warning`` says so.
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import arguments
from ..hardware import peak_rss_bytes, proc_status_bytes, reset_peak_rss
from ..procs import Children
from ..procs_child import require_importable

try:  # not on Windows
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = [
    "LimitedRun",
    "BatchProbe",
    "BatchSearch",
    "MemoryLimitUnsupported",
    "memory_limit_supported",
    "run_with_memory_limit",
    "find_max_batch_size",
    "mlp_training_step",
    "allocate_bytes",
    "is_oom_error",
]

MiB = 2**20

_OOM_MARKERS = (
    "defaultcpuallocator",
    "not enough memory",
    "out of memory",
    "cannot allocate memory",
    "can't allocate memory",
    "std::bad_alloc",
)


class MemoryLimitUnsupported(RuntimeError):
    """This platform cannot cap a process's memory (no enforced ``RLIMIT_AS``)."""


@dataclass(frozen=True)
class LimitedRun:
    """Outcome of one :func:`run_with_memory_limit` call.

    ``ok`` and ``value`` when ``fn`` returned; otherwise ``error_type`` / ``message`` (with a short
    traceback) and ``oom`` if the failure was out-of-memory. ``peak_rss_bytes`` is the child's
    resident peak while ``fn`` ran (VmHWM, reset just before ``fn``); ``baseline_rss_bytes`` its
    resident size just before ``fn``. ``seconds`` is the wall time of the whole call, spawn
    included; ``fn_seconds`` the time inside ``fn``.
    """

    ok: bool
    value: Any
    error_type: str | None
    message: str | None
    oom: bool
    peak_rss_bytes: int | None
    seconds: float
    fn_seconds: float | None = None
    baseline_rss_bytes: int | None = None
    baseline_address_space_bytes: int | None = None
    address_space_limit_bytes: int | None = None
    limit_bytes: int = 0
    timed_out: bool = False
    exitcode: int | None = None
    warning: str | None = None
    log_tail: str = ""  # the end of the child's own stdout/stderr when it died without reporting

    @property
    def peak_rss_increase_bytes(self) -> int | None:
        """Resident peak during ``fn`` minus the resident size just before it."""
        if self.peak_rss_bytes is None or self.baseline_rss_bytes is None:
            return None
        return self.peak_rss_bytes - self.baseline_rss_bytes

    def summary(self) -> str:
        """One line for a notebook cell."""
        growth = self.peak_rss_increase_bytes
        peak = "" if growth is None else f", resident memory grew by {growth / MiB:.0f} MiB"
        head = f"cap {self.limit_bytes / MiB:.0f} MiB of address space above the baseline"
        if self.ok:
            return f"ok ({head}{peak}, {self.seconds:.1f} s)"
        kind = "OUT OF MEMORY" if self.oom else ("TIMEOUT" if self.timed_out else "ERROR")
        first = (self.message or "").strip().splitlines()[0] if self.message else ""
        return f"{kind} ({head}{peak}, {self.seconds:.1f} s): {self.error_type}: {first}"


# ----------------------------------------------------------------------------------------------
# helpers


def memory_limit_supported() -> bool:
    """True where ``RLIMIT_AS`` exists and is enforced (Linux)."""
    return resource is not None and hasattr(resource, "RLIMIT_AS") and sys.platform.startswith("linux")


def is_oom_error(exc: BaseException) -> bool:
    """Whether an exception is an out-of-memory failure.

    ``MemoryError`` (numpy, Python), ``torch.OutOfMemoryError`` (CUDA/MPS), or a ``RuntimeError``
    from torch's CPU allocator ("DefaultCPUAllocator: not enough memory"), which is what a capped
    CPU process actually raises.
    """
    if not isinstance(exc, BaseException):
        raise TypeError(f"exc must be an exception, got {type(exc).__name__}")
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
            return True
    except ImportError:  # pragma: no cover
        pass
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return any(m in text for m in _OOM_MARKERS)
    return False


def _check_limit(limit_bytes: int) -> int:
    return int(arguments.positive("limit_bytes", limit_bytes))


# ----------------------------------------------------------------------------------------------
# the child


def _warm_up() -> None:
    """Start torch's thread pool and run one tiny training step (autograd's first backward alone
    maps tens of MB), so the baseline includes what any torch program pays once."""
    import torch

    a = torch.ones(128, 128)
    (a @ a).sum().item()
    lin = torch.nn.Linear(8, 2)
    opt = torch.optim.Adam(lin.parameters())
    torch.nn.functional.cross_entropy(lin(torch.zeros(2, 8)), torch.zeros(2, dtype=torch.long)).backward()
    opt.step()


def _error_payload(exc: BaseException, info: dict) -> dict:  # pragma: no cover - runs in the child
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    short = "".join(tb[-4:]) if len(tb) > 4 else "".join(tb)
    oom = is_oom_error(exc)
    text = str(exc)
    if oom:
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        text = f"out of memory under the cap: {first}"
    return {"ok": False, "error_type": type(exc).__name__, "message": f"{text}\n{short}".strip(), "oom": oom, **info}


def _capped(channel, fn, args, kwargs, limit_bytes: int, allow_uncapped: bool) -> None:  # pragma: no cover - child
    """Runs in the child: warm up, cap the address space, run ``fn``, report."""
    info: dict[str, Any] = {"limit_bytes": limit_bytes}
    try:
        _warm_up()
        baseline = proc_status_bytes("VmSize")
        info["baseline_address_space_bytes"] = baseline
        capped = False
        if memory_limit_supported() and baseline is not None:
            want = baseline + limit_bytes
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY and want > hard:
                want = hard
                info["warning"] = f"the hard RLIMIT_AS ({hard} bytes) is below the requested limit; using it"
            resource.setrlimit(resource.RLIMIT_AS, (want, hard))
            info["address_space_limit_bytes"] = want
            capped = True
        if not capped:
            msg = f"memory cap not available on this platform ({sys.platform}); fn ran WITHOUT a limit"
            if not allow_uncapped:
                raise MemoryLimitUnsupported(msg)
            info["warning"] = msg
        reset = reset_peak_rss()
        info["baseline_rss_bytes"] = proc_status_bytes("VmRSS") if reset else None
        channel.send("started")  # the parent's timeout for fn starts now
        t0 = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
            info["fn_seconds"] = time.perf_counter() - t0
            info["peak_rss_bytes"] = peak_rss_bytes(reset)
            payload = {"ok": True, "value": value, **info}
        except BaseException as exc:  # noqa: BLE001 - report everything, never hang
            info["fn_seconds"] = time.perf_counter() - t0
            info["peak_rss_bytes"] = peak_rss_bytes(reset)
            payload = _error_payload(exc, info)
    except BaseException as exc:  # noqa: BLE001 - setup failed
        payload = _error_payload(exc, info)
    try:
        channel.send(payload)
    except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable return value
        channel.send(_error_payload(TypeError(f"fn's return value could not be sent back: {exc}"), info))


# ----------------------------------------------------------------------------------------------
# the parent


def run_with_memory_limit(
    fn: Callable[..., Any],
    limit_bytes: int,
    *args: Any,
    timeout: float = 60.0,
    allow_uncapped: bool = False,
    startup_timeout: float = 120.0,
    env: dict[str, str] | None = None,
    **kwargs: Any,
) -> LimitedRun:
    """Run ``fn(*args, **kwargs)`` in a memory-capped child process (notebook 02, memory).

    ``limit_bytes`` is head-room *above* the child's baseline address space (python + torch
    imported, measured in the child), see the module docstring. ``fn`` must be importable (a
    module-level function in a ``.py`` file), its arguments and return value picklable.

    Returns a :class:`LimitedRun`; never raises for what happens in the child: out-of-memory gives
    ``ok=False, oom=True``; any other exception gives its type, message and a short traceback; a
    child killed by a signal counts as out-of-memory (the kernel's OOM killer sends SIGKILL); a
    child that exits without reporting gives ``error_type="ChildExited"`` with the tail of its own
    output in the message; a child whose ``fn`` runs past ``timeout`` seconds (counted from when
    ``fn`` starts) or that takes over ``startup_timeout`` seconds to start is killed and reported
    with ``timed_out=True``. Ctrl-C (KeyboardInterrupt) kills the child and everything it started
    within a second, then propagates.

    Raises ``TypeError`` for a non-importable ``fn`` (lambda, nested, or defined in a notebook),
    ``ValueError`` for ``limit_bytes <= 0`` or ``timeout <= 0``, and ``MemoryLimitUnsupported``
    where no cap can be set, unless ``allow_uncapped=True`` (then the run carries a ``warning``).

    ``env`` adds environment variables for the child only, e.g. ``{"MALLOC_MMAP_THRESHOLD_": "65536"}``.
    glibc reads its tuning variables when a process starts, so a run with ``env`` starts a fresh
    interpreter (2-4 s) instead of forking from the preloaded server (~0.05 s).
    """
    require_importable(fn, "fn", examples="course_lib.memory.limit has examples (allocate_bytes, mlp_training_step)")
    limit = _check_limit(limit_bytes)
    timeout = arguments.seconds("timeout", timeout)
    startup_timeout = arguments.seconds("startup_timeout", startup_timeout)
    arguments.boolean("allow_uncapped", allow_uncapped)
    if not memory_limit_supported() and not allow_uncapped:
        raise MemoryLimitUnsupported(
            f"cannot cap memory on this platform ({sys.platform}): RLIMIT_AS is missing or not enforced. "
            "Run the out-of-memory demos on Linux (e.g. Colab), or pass allow_uncapped=True to run "
            "without a cap (do not do that with a function meant to run out of memory)."
        )
    t0 = time.perf_counter()
    with Children("course-memlimit", fresh=env is not None, env=env) as child:
        child.start(_capped, fn, args, kwargs, limit, allow_uncapped)
        watch = _Watch(limit, startup_timeout, timeout)
        run = child.supervise(watch.on_event, timeout=watch.seconds_left, grace=2.0)
        exitcode = None if run.timed_out else child.exitcode(0)  # a child stopped at the deadline has none of its own
        tail = child.log_tail(0) if watch.payload is None and not run.timed_out else ""
    seconds = time.perf_counter() - t0
    if watch.payload is not None:
        keys = {
            "value",
            "error_type",
            "message",
            "oom",
            "peak_rss_bytes",
            "fn_seconds",
            "baseline_rss_bytes",
            "baseline_address_space_bytes",
            "address_space_limit_bytes",
            "warning",
        }
        extra = {k: watch.payload.get(k) for k in keys}
        return LimitedRun(
            ok=bool(watch.payload["ok"]),
            seconds=seconds,
            limit_bytes=limit,
            exitcode=exitcode,
            **{**extra, "oom": bool(watch.payload.get("oom", False))},
        )
    return _failed_run(run.timed_out, watch.started, seconds, limit, exitcode, tail, timeout, startup_timeout)


def _failed_run(
    timed_out: bool,
    started: bool,
    seconds: float,
    limit: int,
    exitcode: int | None,
    tail: str,
    timeout: float,
    startup_timeout: float,
) -> LimitedRun:
    """The result of a capped run whose child reported nothing: timed out, killed (almost always out of memory
    under a cap) or exited."""
    failed = {
        "ok": False,
        "value": None,
        "peak_rss_bytes": None,
        "seconds": seconds,
        "limit_bytes": limit,
        "exitcode": exitcode,
    }
    if timed_out:
        return LimitedRun(
            error_type="TimeoutError",
            oom=False,
            timed_out=True,
            **failed,
            message=(
                f"fn did not finish within timeout={timeout:g} s; the child process was killed"
                if started
                else f"the child process did not start within startup_timeout={startup_timeout:g} s; it was killed"
            ),
        )
    output = f"\nIts last output:\n{tail}" if tail else " It printed nothing."
    if exitcode is not None and exitcode < 0:
        try:
            signame = signal.Signals(-exitcode).name
        except ValueError:  # pragma: no cover
            signame = f"signal {-exitcode}"
        return LimitedRun(
            error_type="ChildKilled",
            oom=True,
            log_tail=tail,
            **failed,
            message=(
                f"the child process was killed by {signame} before reporting; under a memory cap that almost always "
                f"means it ran out of memory.{output}"
            ),
        )
    return LimitedRun(
        error_type="ChildExited",
        oom=False,
        log_tail=tail,
        **failed,
        message=f"the child process exited with code {exitcode} without reporting a result.{output}",
    )


class _Watch:
    """The parent's view of one capped run: ``startup_timeout`` until the child says fn starts, then
    ``timeout``; ``payload`` is what it reported (or its import error)."""

    def __init__(self, limit: int, startup_timeout: float, timeout: float) -> None:
        self.limit, self.timeout = limit, timeout
        self.deadline = time.monotonic() + startup_timeout
        self.started = False
        self.payload: dict | None = None

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def on_event(self, event) -> bool:
        """Record one event; True once the child has reported."""
        if event.kind == "message" and event.value == "started":
            self.started = True
            self.deadline = time.monotonic() + self.timeout
        elif event.kind == "message":
            self.payload = event.value
        elif event.kind == "error":  # the child could not even start fn's module
            self.payload = {
                "ok": False,
                "error_type": event.value[0],
                "message": event.value[1].strip(),
                "oom": False,
                "limit_bytes": self.limit,
            }
        return self.payload is not None


# ----------------------------------------------------------------------------------------------
# example workloads (importable, so they can run in the capped child)


def allocate_bytes(n_bytes: int, fill: bool = True) -> int:
    """Allocate one ``n_bytes`` torch tensor (touching its pages if ``fill``) and return its size.

    The simplest OOM demo of notebook 02 (memory): run it under ``run_with_memory_limit``.
    """
    arguments.positive_int("n_bytes", n_bytes)
    import torch

    t = torch.empty(n_bytes, dtype=torch.uint8)
    if fill:
        t.fill_(1)
    return int(t.numel())


def mlp_training_step(
    batch_size: int,
    in_features: int = 512,
    hidden: int = 1024,
    depth: int = 3,
    n_classes: int = 10,
    steps: int = 1,
    threads: int | None = None,
) -> float:
    """One (or ``steps``) Adam training step(s) of ``course_lib.models.MLP`` at ``batch_size``.

    Importable, so :func:`find_max_batch_size` can run it in a capped subprocess (notebook 02,
    memory). Memory grows with the batch through the activations saved for backward
    (about ``batch * (in_features + 2 * depth * hidden) * 4`` bytes) on top of parameters,
    gradients and Adam's two moments. Returns the last loss. ``threads``: torch's intra-op threads for the
    step (None: as the process has them), and at most that many glibc arenas (at least 2): the address space a
    step needs grows with the threads that allocate.
    """
    for name, v in (
        ("batch_size", batch_size),
        ("in_features", in_features),
        ("hidden", hidden),
        ("depth", depth),
        ("n_classes", n_classes),
        ("steps", steps),
    ):
        arguments.positive_int(name, v)
    arguments.optional(arguments.positive_int, "threads", threads)
    from ..train import train_step

    model, opt, batch = _mlp_adam(batch_size, in_features, hidden, depth, n_classes, threads)
    loss = 0.0
    for _ in range(steps):
        loss = train_step(model, batch, opt).loss
    return loss


def _mlp_adam(batch_size: int, in_features: int, hidden: int, depth: int, n_classes: int, threads: int | None):
    """The MLP, its Adam optimizer and one random batch that the capped-process steps train (seed 0); arguments
    already checked. Sets torch's threads where ``threads`` is given."""
    import torch

    from ..models import MLP, make_optimizer

    if threads is not None:  # the threads that allocate, and glibc's arenas for them: the same on any core count
        from .glibc_heap import cap_arenas

        torch.set_num_threads(threads)
        cap_arenas(max(2, threads))
    torch.manual_seed(0)
    model = MLP(in_features, [hidden] * depth, n_classes)
    opt = make_optimizer("adam", model.parameters(), lr=1e-3)
    return model, opt, (torch.randn(batch_size, in_features), torch.randint(0, n_classes, (batch_size,)))


# ----------------------------------------------------------------------------------------------
# batch-size search


@dataclass(frozen=True)
class BatchProbe:
    """One probe of :func:`find_max_batch_size`."""

    batch_size: int
    ok: bool
    oom: bool
    seconds: float
    peak_rss_bytes: int | None


@dataclass(frozen=True)
class BatchSearch:
    """Result of :func:`find_max_batch_size`.

    ``largest_ok`` is the largest batch size that ran (None if even ``low`` failed);
    ``smallest_failed`` the smallest that ran out of memory (None if ``high`` fit).
    """

    largest_ok: int | None
    smallest_failed: int | None
    limit_bytes: int
    probes: tuple[BatchProbe, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    def table(self) -> list[tuple[int, bool, float]]:
        """(batch, ok, seconds) per probe, in the order they ran."""
        return [(p.batch_size, p.ok, p.seconds) for p in self.probes]


def find_max_batch_size(
    step_fn: Callable[[int], Any],
    limit_bytes: int,
    *,
    low: int = 1,
    high: int = 4096,
    start: int | None = None,
    resolution: float = 0.125,
    max_probes: int = 12,
    timeout: float = 60.0,
    step_kwargs: dict[str, Any] | None = None,
) -> BatchSearch:
    """Largest batch size for which ``step_fn(batch_size, **step_kwargs)`` runs under the cap.

    Notebook 02 (memory). Each probe runs in its own capped subprocess via
    :func:`run_with_memory_limit` (``limit_bytes`` is head-room above the child's baseline). The
    search doubles from ``start`` (default ``low``) until a probe runs out of memory or ``high``
    fits, then bisects until the gap between the largest fitting and the smallest failing batch is
    at most ``max(1, resolution * largest_ok)`` or ``max_probes`` probes have run. Each probe costs
    a process start (~2 s for ``import torch`` on 2 cores), so start near the answer.

    Memory is assumed to grow with the batch size. A probe that fails for another reason than
    memory (a bug in ``step_fn``, a timeout) raises ``RuntimeError`` with the child's message.
    """
    require_importable(step_fn, "step_fn", examples="course_lib.memory.limit.mlp_training_step is an example")
    limit = _check_limit(limit_bytes)
    arguments.seconds("timeout", timeout)
    for name, v in (("low", low), ("high", high), ("max_probes", max_probes)):
        arguments.positive_int(name, v)
    if high < low:
        raise ValueError(f"high ({high}) must be >= low ({low})")
    start = low if start is None else arguments.integer("start", start, minimum=low, maximum=high)
    resolution = arguments.number("resolution", resolution, minimum=0, maximum=1, open_high=True)
    kwargs = dict(step_kwargs or {})
    probes: list[BatchProbe] = []
    t0 = time.perf_counter()

    def probe(b: int) -> bool:
        r = run_with_memory_limit(step_fn, limit, b, timeout=timeout, **kwargs)
        probes.append(BatchProbe(b, r.ok, r.oom, r.seconds, r.peak_rss_bytes))
        if not r.ok and not r.oom:
            raise RuntimeError(f"step_fn({b}) failed for a reason other than memory ({r.error_type}): {r.message}")
        return r.ok

    good: int | None = None
    bad: int | None = None
    b = start
    while len(probes) < max_probes:  # grow
        if probe(b):
            good = b
            if b >= high:
                break
            b = min(high, 2 * b)
        else:
            bad = b
            break
    if good is None and bad is not None and bad > low:  # the start was too big: shrink
        b = max(low, bad // 2)
        while len(probes) < max_probes:
            if probe(b):
                good = b
                break
            bad = b
            if b == low:
                break
            b = max(low, b // 2)
    while (
        good is not None
        and bad is not None
        and len(probes) < max_probes
        and bad - good > max(1, int(resolution * good))
    ):  # bisect
        mid = (good + bad) // 2
        if probe(mid):
            good = mid
        else:
            bad = mid
    return BatchSearch(good, bad, limit, tuple(probes), time.perf_counter() - t0)
