"""Robust communication and what redundancy and checkpoints cost (notebook 06.3, sections "Retries",
"Redundancy" and "How often to checkpoint").

* :func:`retry` calls a function again after a transient failure, waiting ``backoff * factor**i``
  before retry ``i + 1``; :func:`retry_schedule` predicts when each attempt starts and
  :func:`predicted_success_time` when a service that appears after a delay is first reached.
* :func:`availability`: the chance that at least one of ``copies`` independent replicas survives.
  :func:`save_replicated` writes one checkpoint to several places, :func:`load_first_good` reads the
  first that loads.
* :func:`write_cost_fit` fits ``seconds = fixed + bytes / bandwidth`` to measured checkpoint writes;
  :func:`young_daly_interval` is the checkpoint interval that minimises the time lost,
  ``sqrt(2 * write_time * MTBF)`` (Young), :func:`daly_interval` its higher-order form (Daly);
  :func:`lost_fraction` is the fraction lost at any interval to first order, restarts included, and
  :func:`daly_lost_fraction` the exact expectation for random failures.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ... import arguments
from .checkpoint import CheckpointError, _as_path, load_checkpoint, save_checkpoint

__all__ = [
    "retry",
    "retry_schedule",
    "predicted_success_time",
    "DelayedService",
    "connect",
    "availability",
    "save_replicated",
    "load_first_good",
    "replica_trials",
    "timed_save",
    "write_cost_fit",
    "young_daly_interval",
    "daly_interval",
    "lost_fraction",
    "daly_lost_fraction",
    "simulate_lost_fraction",
]


def _exception_types(retry_on: Any) -> tuple[type[BaseException], ...]:
    kinds = retry_on if isinstance(retry_on, tuple) else (retry_on,)
    if not kinds or not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
        raise TypeError(f"retry_on must be an exception class or a tuple of them, got {retry_on!r}")
    return kinds


def retry(
    fn: Callable[[], Any],
    attempts: int = 5,
    backoff: float = 0.1,
    retry_on: Any = (OSError, TimeoutError),
    *,
    factor: float = 2.0,
    jitter: bool = False,
    seed: int | None = None,
    on_retry: Callable[[int, BaseException, float], Any] | None = None,
    sleep: Callable[[float], Any] = time.sleep,
) -> Any:
    """``fn()``, called up to ``attempts`` times while it raises one of ``retry_on``; the wait before retry
    ``i`` (1, 2, ...) is ``backoff * factor**(i - 1)``, or with ``jitter`` a uniform draw between 0 and that
    ("full jitter": many clients that failed together then retry at different moments instead of in
    lockstep; ``seed`` makes the draws repeatable). Other exceptions, and the last failure, are raised.
    ``on_retry(attempt, error, delay)`` is told about each failure. Notebook 06.3 (retries)."""
    import random

    arguments.function("fn", fn)
    attempts = arguments.positive_int("attempts", attempts)
    backoff = arguments.nonnegative("backoff", backoff)
    factor = arguments.number("factor", factor, minimum=1.0)
    if not isinstance(jitter, bool):
        raise TypeError(f"jitter must be True or False, got {jitter!r}")
    draw = random.Random(seed if seed is None else arguments.nonnegative_int("seed", seed)).random
    kinds = _exception_types(retry_on)
    for i in range(attempts):
        try:
            return fn()
        except kinds as exc:
            if i == attempts - 1:
                raise
            delay = backoff * factor**i * (draw() if jitter else 1.0)
            if on_retry is not None:
                on_retry(i + 1, exc, delay)
            sleep(delay)
    raise AssertionError("unreachable")


def retry_schedule(attempts: int, backoff: float, factor: float = 2.0, attempt_s: float = 0.0) -> list[float]:
    """When each attempt starts (seconds after the first), if each failed attempt takes ``attempt_s``."""
    attempts = arguments.positive_int("attempts", attempts)
    backoff = arguments.nonnegative("backoff", backoff)
    factor = arguments.number("factor", factor, minimum=1.0)
    attempt_s = arguments.nonnegative("attempt_s", attempt_s)
    starts, t = [], 0.0
    for i in range(attempts):
        starts.append(t)
        t += attempt_s + backoff * factor**i
    return starts


def predicted_success_time(
    appears_after: float, attempts: int, backoff: float, factor: float = 2.0, attempt_s: float = 0.0
) -> float | None:
    """The start of the first attempt at or after ``appears_after`` seconds (None: the retries run out
    first): when a client with this schedule first reaches a service that comes up late."""
    appears_after = arguments.nonnegative("appears_after", appears_after)
    return next((t for t in retry_schedule(attempts, backoff, factor, attempt_s) if t >= appears_after), None)


class DelayedService:
    """A TCP server on 127.0.0.1 that starts listening only ``delay`` seconds after :meth:`start`, as a
    restarted rendezvous store or a parameter server would: until then connections are refused.
    ``with DelayedService(1.0) as svc: connect(svc.port)``. Notebook 06.3 (retries)."""

    def __init__(self, delay: float):
        self.delay = arguments.nonnegative("delay", delay)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))  # the OS picks a free port; nobody listens on it until we do
        self.port = probe.getsockname()[1]
        probe.close()
        self._server: socket.socket | None = None
        self._stop = threading.Event()
        self.started_at: float | None = None

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(8)
        server.settimeout(0.1)
        self._server = server
        while not self._stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    def start(self) -> DelayedService:
        self.started_at = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True, name="course-delayed-service")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        if self._server is not None:
            self._server.close()

    def __enter__(self) -> DelayedService:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def connect(port: int, timeout: float = 1.0) -> float:
    """Open and close one TCP connection to 127.0.0.1:``port``; return when it succeeded
    (``time.perf_counter()``). Raises ``ConnectionRefusedError`` (an OSError) while nobody listens."""
    port = arguments.integer("port", port, minimum=1, maximum=65535)
    with socket.create_connection(("127.0.0.1", port), timeout=arguments.seconds("timeout", timeout)):
        return time.perf_counter()


def availability(p_fail: float, copies: int) -> float:
    """The chance that at least one of ``copies`` replicas survives when each fails independently with
    probability ``p_fail``: ``1 - p_fail**copies``. Notebook 06.3 (redundancy)."""
    p_fail = arguments.fraction("p_fail", p_fail, allow_zero=True, allow_one=True)
    return 1.0 - p_fail ** arguments.positive_int("copies", copies)


def _paths(paths: Any) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)) or not isinstance(paths, Sequence):
        raise TypeError(f"paths must be a list of paths, got {type(paths).__name__}")
    if not paths:
        raise ValueError("paths must name at least one place")
    return [_as_path("every entry of paths", p) for p in paths]


def save_replicated(paths: Sequence[str | os.PathLike], state: Mapping[str, Any]) -> list[Path]:
    """:func:`save_checkpoint` the same state to each path (different disks or machines in real life)."""
    return [save_checkpoint(p, state) for p in _paths(paths)]


def load_first_good(paths: Sequence[str | os.PathLike], report: Callable[[str], Any] | None = None) -> dict:
    """The state of the first of ``paths`` that loads; each failure goes to ``report``. Raises
    :class:`CheckpointError` (naming every file) when none loads. Notebook 06.3 (redundancy)."""
    errors = []
    for p in _paths(paths):
        try:
            state = load_checkpoint(p)
            state["loaded_from"] = str(p)
            return state
        except (CheckpointError, OSError) as exc:
            errors.append(str(exc))
            if report is not None:
                report(f"skipped: {exc}")
    raise CheckpointError("no copy loads: " + "; ".join(errors), _paths(paths)[0])


def replica_trials(directory: str | os.PathLike, p_fail: float, trials: int, seed: int = 0) -> tuple[int, int]:
    """``trials`` times: save one small checkpoint to two files in ``directory``, lose each copy independently
    with probability ``p_fail`` (seeded: truncated to 100 bytes), then load with :func:`load_first_good`.
    Returns (trials where copy A alone loads, trials where one of the two does). Notebook 06.3 (redundancy)."""
    import torch

    if isinstance(p_fail, bool) or not isinstance(p_fail, (int, float)) or not 0.0 <= p_fail <= 1.0:
        raise ValueError(f"p_fail must be a probability in [0, 1], got {p_fail!r}")
    trials = arguments.positive_int("trials", trials)
    folder = _as_path("directory", directory)
    gen = torch.Generator().manual_seed(seed)
    small = {"weights": torch.arange(256.0), "position": {"step": 7}}
    alone = either = 0
    for _ in range(trials):
        copies = save_replicated([folder / "copy-a.pt", folder / "copy-b.pt"], small)
        for c in [c for c in copies if torch.rand(1, generator=gen).item() < p_fail]:
            c.write_bytes(c.read_bytes()[:100])  # this copy is lost
        alone += copies[0].stat().st_size > 100
        try:
            either += load_first_good(copies)["position"]["step"] == 7
        except CheckpointError:
            pass
    return alone, either


def timed_save(path: str | os.PathLike, state: Mapping[str, Any]) -> float:
    """Seconds one :func:`save_checkpoint` of ``state`` to ``path`` takes (digest, write, fsync, rename).
    Notebook 06.3 (the cost of a checkpoint)."""
    start = time.perf_counter()
    save_checkpoint(path, state)
    return time.perf_counter() - start


def write_cost_fit(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``seconds = fixed + nbytes / bandwidth``; returns ``(fixed_s, bandwidth_bytes_per_s)``.
    Notebook 06.3 (the cost of a checkpoint)."""
    if len(nbytes) != len(seconds) or len(nbytes) < 2:
        raise ValueError("nbytes and seconds need the same length, at least 2")
    n = len(nbytes)
    mx, my = sum(nbytes) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in nbytes)
    if sxx == 0:
        raise ValueError("nbytes must contain at least two different sizes")
    slope = sum((x - mx) * (y - my) for x, y in zip(nbytes, seconds)) / sxx
    if slope <= 0:
        raise ValueError("the measured write time does not grow with size; measure larger checkpoints")
    return my - slope * mx, 1.0 / slope


def young_daly_interval(write_s: float, mtbf_s: float) -> float:
    """Young's optimal time between checkpoints, ``sqrt(2 * write_s * mtbf_s)`` (Young 1974, first order:
    accurate while the write takes a small part of the MTBF; :func:`daly_interval` is the higher-order one).
    Notebook 06.3."""
    return math.sqrt(2 * arguments.positive("write_s", write_s) * arguments.positive("mtbf_s", mtbf_s))


def daly_interval(write_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (Daly 2006, Future Generation Computer Systems 22): with d = write_s and
    M = mtbf_s, ``sqrt(2dM) * (1 + sqrt(d / 2M) / 3 + d / 18M) - d`` while d < 2M, else M. The restart cost
    does not move it (every failure pays the restart whatever the interval); it only adds to the loss.
    Notebook 06.3."""
    d, m = arguments.positive("write_s", write_s), arguments.positive("mtbf_s", mtbf_s)
    if d >= 2 * m:
        return m
    return math.sqrt(2 * d * m) * (1 + math.sqrt(d / (2 * m)) / 3 + d / (18 * m)) - d


def lost_fraction(interval_s: float, write_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """The fraction of time lost, to first order: writing (``write_s / interval_s``), work redone after a
    failure (half an interval on average, once per MTBF: ``interval_s / (2 * mtbf_s)``) and the restart
    each failure pays (``restart_s / mtbf_s``: relaunch, rendezvous, reading the checkpoint). Notebook 06.3."""
    interval_s = arguments.positive("interval_s", interval_s)
    mtbf_s = arguments.positive("mtbf_s", mtbf_s)
    return (
        arguments.nonnegative("write_s", write_s) / interval_s
        + interval_s / (2 * mtbf_s)
        + arguments.nonnegative("restart_s", restart_s) / mtbf_s
    )


def daly_lost_fraction(interval_s: float, write_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """The fraction of time lost, exactly, for failures that arrive at random (exponential gaps, mean
    ``mtbf_s``), including failures during a write or a restart (Daly 2006): the expected wall time
    of ``T`` seconds of work is ``M e^(R/M) (e^((tau + d)/M) - 1) T / tau``, so the lost fraction is
    ``1 - tau / (M e^(R/M) (e^((tau + d)/M) - 1))``. Notebook 06.3 checks it against
    :func:`simulate_lost_fraction`."""
    tau = arguments.positive("interval_s", interval_s)
    d, m = arguments.nonnegative("write_s", write_s), arguments.positive("mtbf_s", mtbf_s)
    r = arguments.nonnegative("restart_s", restart_s)
    return 1.0 - tau / (m * math.exp(r / m) * math.expm1((tau + d) / m))


def simulate_lost_fraction(
    interval_s: float, write_s: float, mtbf_s: float, failures: int = 100_000, seed: int = 0, restart_s: float = 0.0
) -> float:
    """The fraction of time lost, *simulated*: ``failures`` failures arrive at random (exponential gaps,
    mean ``mtbf_s``, seeded); after each failure the job first spends ``restart_s`` restarting (a failure
    during the restart starts it again), then repeats ``interval_s`` of work and a ``write_s`` checkpoint,
    keeping only the intervals whose checkpoint finished. Lost = 1 - kept work / elapsed time. Notebook
    06.3 (section 8) compares it with :func:`lost_fraction`, :func:`daly_lost_fraction` and the intervals.
    """
    import torch  # local: the rest of this module needs no torch

    interval_s = arguments.positive("interval_s", interval_s)
    write_s = arguments.nonnegative("write_s", write_s)
    mtbf_s = arguments.positive("mtbf_s", mtbf_s)
    restart_s = arguments.nonnegative("restart_s", restart_s)
    failures = arguments.positive_int("failures", failures)
    gen = torch.Generator().manual_seed(int(seed))
    gaps = torch.empty(failures, dtype=torch.float64).exponential_(1.0 / mtbf_s, generator=gen)
    kept = torch.floor((gaps - restart_s).clamp(min=0) / (interval_s + write_s)) * interval_s
    return float(1.0 - kept.sum() / gaps.sum())
