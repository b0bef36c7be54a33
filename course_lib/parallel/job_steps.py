"""A job's steps run in dependency order, with retries and a record of what ran.

A :class:`Step` names the files it writes (``outputs``, relative to the work directory) and the steps it
needs (``deps``). :func:`pipeline_order` checks the graph (unknown dependencies and cycles are a
ValueError naming them) and orders it; :func:`run_pipeline` runs each step, retries a failing one with
back-off, skips a step whose outputs are all there (unless a step it depends on ran again), and writes what
happened to a JSON record: step, status, attempts, start and end times, outputs with their sizes, errors.
``orchestration`` re-exports these names.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import arguments
from ..files import write_atomic

# and _topological_order, which kubeflow_job's check shares
__all__ = ["Step", "pipeline_order", "run_pipeline", "flaky", "TransientError"]

_RECORD = "run_record.json"


@dataclass(frozen=True)
class Step:
    """One step: ``fn(workdir)`` writes ``outputs`` (paths relative to the work directory) after the steps
    in ``deps`` have run; a failure is tried again up to ``retries`` times, waiting ``retry_delay`` seconds,
    doubled each time."""

    name: str
    fn: Callable[[Path], Any]
    outputs: tuple[str, ...]
    deps: tuple[str, ...] = ()
    retries: int = 0
    retry_delay: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty string, got {self.name!r}")
        arguments.function("fn", self.fn)
        for field, value in (("outputs", self.outputs), ("deps", self.deps)):
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{field} of step {self.name!r} must be a tuple of strings, got {value!r}")
        if not self.outputs:
            raise ValueError(f"step {self.name!r} must name at least one output file (how else to tell it is done?)")
        arguments.nonnegative_int("retries", self.retries)
        arguments.nonnegative("retry_delay", self.retry_delay)


def pipeline_order(steps: Sequence[Step]) -> list[str]:
    """The step names in an order that runs every dependency first (ties keep the given order).

    ValueError for duplicate names, a dependency that is not a step, or a cycle (naming its steps)."""
    if not isinstance(steps, Sequence) or not all(isinstance(s, Step) for s in steps):
        raise TypeError("steps must be a list of Step")
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names must be unique, got {names}")
    for s in steps:
        unknown = [d for d in s.deps if d not in names]
        if unknown:
            raise ValueError(f"step {s.name!r} depends on {unknown}, which are not steps; the steps are {names}")
    return _topological_order({s.name: list(s.deps) for s in steps})


def _topological_order(graph: Mapping[str, Sequence[str]]) -> list[str]:
    """Kahn's algorithm over ``{node: [nodes it depends on]}``; ValueError naming the nodes of a cycle."""
    left = {n: set(d) for n, d in graph.items()}
    order: list[str] = []
    while left:
        ready = [n for n in graph if n in left and not left[n]]
        if not ready:
            raise ValueError(f"the dependencies form a cycle among {sorted(left)}: each of them waits for another")
        for n in ready:
            order.append(n)
            del left[n]
        for deps in left.values():
            deps.difference_update(ready)
    return order


class TransientError(ConnectionError):
    """A failure that may pass when tried again (a network blip, a busy service): what retries are for."""


class flaky:  # noqa: N801 - used like a function: flaky(fn, failures=1)
    """``fn`` made to raise :class:`TransientError` on its first ``failures`` calls (a demo of retries)."""

    def __init__(self, fn: Callable[[Path], Any], failures: int = 1) -> None:
        self.fn = arguments.function("fn", fn)
        self.failures = arguments.nonnegative_int("failures", failures)
        self.calls = 0

    def __call__(self, workdir: Path) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientError(f"transient failure {self.calls} of {self.failures} (made on purpose)")
        return self.fn(workdir)


def run_pipeline(
    steps: Sequence[Step],
    workdir: str | os.PathLike,
    *,
    force: Sequence[str] = (),
    record: str = _RECORD,
    sleep: Callable[[float], Any] = time.sleep,
) -> list[dict]:
    """Run the steps in dependency order in ``workdir``; return and write (``workdir/record``) one entry per
    step: ``step``, ``status`` ("ran", "skipped": outputs already there, "failed", "blocked": a dependency
    failed), ``attempts``, ``start``/``end`` (Unix times), ``seconds``, ``outputs`` ({path: bytes}) and
    ``errors``. A step in ``force`` runs even when its outputs exist. Notebook 06.4."""
    order = pipeline_order(steps)
    by_name = {s.name: s for s in steps}
    unknown = [f for f in force if f not in by_name]
    if unknown:
        raise ValueError(f"force names {unknown}, which are not steps; the steps are {order}")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    status: dict[str, str] = {}
    entries = []
    for name in order:
        step = by_name[name]
        paths = [workdir / o for o in step.outputs]
        entry: dict[str, Any] = {
            "step": name,
            "deps": list(step.deps),
            "attempts": 0,
            "errors": [],
            "start": time.time(),
        }
        if any(status[d] in ("failed", "blocked") for d in step.deps):
            entry["status"] = "blocked"
        elif name not in force and all(p.exists() for p in paths) and not any(status[d] == "ran" for d in step.deps):
            entry["status"] = "skipped"
        else:
            entry["status"] = _run_step(step, workdir, paths, entry, sleep)
        entry["end"] = time.time()
        entry["seconds"] = entry["end"] - entry["start"]
        entry["outputs"] = {
            o: (p.stat().st_size if p.is_file() else None) for o, p in zip(step.outputs, paths) if p.exists()
        }
        status[name] = entry["status"]
        entries.append(entry)
    write_atomic(workdir / record, json.dumps(entries, indent=1))
    return entries


def _run_step(
    step: Step, workdir: Path, paths: list[Path], entry: dict[str, Any], sleep: Callable[[float], Any]
) -> str:
    """Run one step with ``fault_tolerance.retry`` (any exception is retried: a step's failure is recorded, not
    raised); ``entry`` gets its attempts and errors. Returns "ran" or "failed"."""
    from .fault_tolerance.robust import retry

    def attempt() -> None:
        entry["attempts"] += 1
        step.fn(workdir)
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise RuntimeError(f"step {step.name!r} finished without writing {missing}")

    def failed(number: int, exc: BaseException, delay: float = 0.0) -> None:
        entry["errors"].append(f"attempt {number}: {type(exc).__name__}: {exc}")

    try:  # waits retry_delay, doubled after each failure (factor 2), before the next attempt
        retry(
            attempt,
            attempts=step.retries + 1,
            backoff=step.retry_delay,
            retry_on=Exception,
            on_retry=failed,
            sleep=sleep,
        )
    except Exception as exc:  # noqa: BLE001 - recorded, then reported as "failed"
        failed(entry["attempts"], exc)
        return "failed"
    return "ran"
