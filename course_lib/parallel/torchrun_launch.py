"""Runs of the training script (``train_script``) seen from a notebook: its per-rank logs read back, the script
launched under ``torchrun`` with every agent a child process that never outlives the caller, a worker killed on
purpose, and what the restart cost.

``train_script`` runs in the workers; this module runs in the process that launches them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .. import arguments

__all__ = [
    "read_log",
    "loss_curve",
    "redone_steps",
    "torchrun_args",
    "run_torchrun",
    "TorchrunResult",
    "random_stream_resumes",
    "restart_summary",
    "steps_timeline",
]

_SCRIPT_MODULE = f"{__package__}.train_script"  # what torchrun runs with -m


# ----------------------------------------------------------------------------------------------
# reading the logs


def read_log(run_dir: str | os.PathLike, rank: int = 0) -> list[dict]:
    """Every JSON line rank ``rank`` wrote (a line cut short by a kill is skipped)."""
    path = Path(run_dir) / f"rank{arguments.nonnegative_int('rank', rank)}.jsonl"
    if not path.is_file():
        raise ValueError(f"no log for rank {rank} in {str(run_dir)!r} (expected {path.name})")
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def loss_curve(run_dir: str | os.PathLike, rank: int = 0) -> list[float]:
    """The loss of every step, as the run finally computed it (a step redone after a restart counts once,
    with its latest value)."""
    last: dict[int, float] = {}
    for rec in read_log(run_dir, rank):
        if "step" in rec:
            last[rec["step"]] = rec["loss"]
    return [last[s] for s in sorted(last)]


def redone_steps(run_dir: str | os.PathLike, rank: int = 0) -> list[int]:
    """Steps computed more than once (work lost to a failure and done again after the restart)."""
    seen: dict[int, int] = {}
    for rec in read_log(run_dir, rank):
        if "step" in rec:
            seen[rec["step"]] = seen.get(rec["step"], 0) + 1
    return sorted(s for s, n in seen.items() if n > 1)


# ----------------------------------------------------------------------------------------------
# running it under torchrun, from a notebook: every agent a child that never outlives the caller


def torchrun_args(
    script_args: list[str],
    *,
    nproc_per_node: int = 2,
    max_restarts: int = 0,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    rdzv_id: str = "course",
    is_host: bool | None = None,
    join_timeout: float = 60.0,
) -> list[str]:
    """torchrun's arguments (without the leading ``torchrun``) for this script. ``nnodes == 1`` without
    ``rdzv_endpoint``: ``--standalone`` (a private rendezvous on a free port); otherwise the c10d rendezvous
    at ``rdzv_endpoint`` ("host:port"), where ``is_host`` says whether this agent hosts its store.
    Notebook 06.4 prints these as commands."""
    nproc_per_node = arguments.positive_int("nproc_per_node", nproc_per_node)
    max_restarts = arguments.nonnegative_int("max_restarts", max_restarts)
    nnodes = arguments.positive_int("nnodes", nnodes)
    if not isinstance(script_args, (list, tuple)) or not all(isinstance(a, str) for a in script_args):
        raise TypeError(f"script_args must be a list of strings, got {script_args!r}")
    args = [f"--nproc-per-node={nproc_per_node}", f"--max-restarts={max_restarts}", "--monitor-interval=0.1"]
    if nnodes == 1 and rdzv_endpoint is None:
        args = ["--standalone", *args]
    else:
        if not isinstance(rdzv_endpoint, str) or ":" not in rdzv_endpoint:
            raise ValueError(f"rdzv_endpoint must be 'host:port' for nnodes={nnodes}, got {rdzv_endpoint!r}")
        conf = f"join_timeout={join_timeout:g}" + ("" if is_host is None else f",is_host={int(bool(is_host))}")
        args = [
            f"--nnodes={nnodes}",
            *args,
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}",
            f"--rdzv-id={rdzv_id}",
            f"--rdzv-conf={conf}",
        ]
    return [*args, "-m", _SCRIPT_MODULE, *script_args]


def _agent(channel, argv: list[str], env: dict[str, str]) -> None:  # pragma: no cover - runs in a child
    """One torchrun agent (``torch.distributed.run``), inside a ``procs.Children`` child."""
    os.environ.update(env)
    from torch.distributed.run import parse_args as torchrun_parse, run

    channel.send(("agent", os.getpid()))
    run(torchrun_parse(argv))
    channel.send(("finished", os.getpid()))


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a rendezvous endpoint both agents must know)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TorchrunResult(dict):
    """What :func:`run_torchrun` saw: ``commands`` (one per agent), ``exit_codes`` (per agent), ``seconds``,
    ``kill`` (None or {pid, rank, step, seconds}), ``attempts`` (restarts used + 1), ``curve`` (rank 0's
    loss per step) and ``redone`` (steps computed twice). Attribute access works too."""

    __getattr__ = dict.__getitem__


def run_torchrun(
    script_args: list[str],
    run_dir: str | os.PathLike,
    *,
    nproc_per_node: int = 2,
    nnodes: int = 1,
    max_restarts: int = 0,
    kill_rank: int | None = None,
    kill_after_step: int | None = None,
    timeout: float = 120.0,
) -> TorchrunResult:
    """Run the script under ``nnodes`` local torchrun agents (``--nnodes > 1``: joined through a c10d
    rendezvous on 127.0.0.1, like machines would be) and return a :class:`TorchrunResult`. Notebook 06.4.

    With ``kill_after_step``, the worker of global rank ``kill_rank`` is killed with SIGKILL (from here, by its
    process id) as soon as its log shows that step done in the first attempt: the agent must notice, stop
    the others, start new workers, which resume from the last checkpoint. The agents run as
    ``procs.Children`` (stopped with everything they started on return, on error, on Ctrl-C); past
    ``timeout`` seconds the job is stopped and TimeoutError raised with the end of its output.
    """
    import signal

    from ..procs import Children

    timeout = arguments.positive("timeout", timeout)
    if (kill_rank is None) != (kill_after_step is None):
        raise ValueError("give both kill_rank and kill_after_step, or neither")
    world = arguments.positive_int("nproc_per_node", nproc_per_node) * arguments.positive_int("nnodes", nnodes)
    if kill_rank is not None and not 0 <= arguments.nonnegative_int("kill_rank", kill_rank) < world:
        raise ValueError(f"kill_rank must be a rank of the job, 0..{world - 1}, got {kill_rank}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    args = [*script_args, "--run-dir", str(run_dir)]
    if nnodes == 1:
        argvs = [torchrun_args(args, nproc_per_node=nproc_per_node, max_restarts=max_restarts)]
    else:
        endpoint, rid = f"127.0.0.1:{_free_port()}", f"course{os.getpid()}_{time.monotonic_ns()}"
        argvs = [
            torchrun_args(
                args,
                nproc_per_node=nproc_per_node,
                max_restarts=max_restarts,
                nnodes=nnodes,
                rdzv_endpoint=endpoint,
                rdzv_id=rid,
                is_host=(i == 0),
            )
            for i in range(nnodes)
        ]
    package_root = str(Path(__file__).resolve().parents[2])
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p),
        "OMP_NUM_THREADS": "1",
        "LOGLEVEL": "ERROR",
    }
    kill, t0 = {}, time.monotonic()

    def kill_worker() -> None:  # once rank kill_rank's log shows step kill_after_step done in the first attempt
        if kill or not (run_dir / f"rank{kill_rank}.jsonl").is_file():
            return
        for rec in read_log(run_dir, kill_rank):
            if rec.get("attempt") == 0 and rec.get("step", -1) >= kill_after_step:
                os.kill(rec["pid"], getattr(signal, "SIGKILL", signal.SIGTERM))  # Windows: no SIGKILL
                kill.update(
                    pid=rec["pid"], rank=kill_rank, step=rec["step"], seconds=time.monotonic() - t0, time=time.time()
                )
                break

    with Children("torchrun", env=env) as kids:
        for argv in argvs:
            kids.start(_agent, argv, env)
        job = kids.supervise(
            timeout=lambda: timeout - (time.monotonic() - t0),
            tick=0.02,
            every=kill_worker if kill_rank is not None else None,
        )  # until every agent exits
        exits = job.exits
        if job.timed_out:
            tails = "\n".join(f"--- agent {i} ---\n{kids.log_tail(i, 1500)}" for i in range(len(argvs)))
            raise TimeoutError(
                f"the torchrun job did not finish within {timeout:g} s (agents exited: {exits}); "
                f"every process was stopped. Its output:\n{tails}"
            )
        tails = [kids.log_tail(i, 3000) for i in range(len(argvs))]
    kill = kill or None
    if any(code != 0 for code in exits.values()):
        raise RuntimeError(f"torchrun exited with codes {exits}; its output:\n" + "\n".join(tails))
    log = read_log(run_dir, 0)
    return TorchrunResult(
        commands=["torchrun " + " ".join(a) for a in argvs],
        exit_codes=exits,
        seconds=time.monotonic() - t0,
        kill=kill,
        output=tails,
        attempts=1 + max(r.get("attempt", 0) for r in log),
        curve=loss_curve(run_dir),
        redone=redone_steps(run_dir),
        log=log,
    )


def random_stream_resumes(
    script_args: list[str], work: str | os.PathLike, *, stop_after: int, dropout: float = 0.3, timeout: float = 150.0
) -> dict[str, list[float]]:
    """Each rank's own random stream, resumed (notebook 06.4, section 3). With dropout on 2 workers: one run
    uninterrupted, then twice the same run resumed from its checkpoint after ``stop_after`` steps (a copy of its
    folder with the later checkpoints removed), once with each rank's own generators (``--restore-rng each``, the
    default) and once with rank 0's on every rank (``--restore-rng rank0``: what a checkpoint that saved one
    stream gives). Returns rank 0's loss curves by those three names: ``"uninterrupted"``, ``"each rank's own
    stream"``, ``"rank 0's stream on every rank"`` (a resumed step counts with its new value). Three torchrun
    launches under ``work`` (a folder, made if missing)."""
    import shutil

    from .train_script import CHECKPOINT_DIR, parse_args

    stop_after = arguments.positive_int("stop_after", stop_after)
    dropout = arguments.fraction("dropout", dropout)  # 0 < dropout < 1: without dropout no random masks are drawn
    work = Path(work)
    args = [*script_args, "--dropout", str(dropout)]
    planned = parse_args([*args, "--run-dir", str(work)])
    if stop_after >= planned.steps or stop_after % planned.checkpoint_every:
        raise ValueError(
            f"stop_after must be a step the run checkpoints before its end (a multiple of "
            f"--checkpoint-every {planned.checkpoint_every} below --steps {planned.steps}), got {stop_after}"
        )
    # max_restarts=1: a worker that dies of something else (a crash in the communication library's teardown, say)
    # is restarted from the checkpoint, which leaves each rank's own stream exactly where it was
    full = run_torchrun(args, work / "uninterrupted", max_restarts=1, timeout=timeout).curve
    curves = {"uninterrupted": full}
    for name, extra in (("each rank's own stream", []), ("rank 0's stream on every rank", ["--restore-rng", "rank0"])):
        folder = work / ("each" if not extra else "rank0")
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(work / "uninterrupted", folder)
        for path in (folder / CHECKPOINT_DIR).glob("ckpt-*.pt"):
            if int(path.stem.split("-")[1]) > stop_after:
                path.unlink()  # as if the run had stopped after stop_after steps
        curves[name] = run_torchrun([*args, *extra], folder, max_restarts=1, timeout=timeout).curve
    return curves


def restart_summary(result: TorchrunResult) -> dict[str, Any]:
    """What a killed-and-restarted run cost, from rank 0's log and the kill (notebook 06.4): ``kill_step``,
    ``resumed_from`` (the checkpoint's step), ``redone`` (steps computed twice), ``startup_s`` (a worker of the
    first attempt, from process start to its first step: ``import torch``, joining the group, loading),
    ``detect_s`` (the kill to the new workers' start: the agent noticed, stopped the others, met again),
    ``restart_s`` (the kill to the first step after it)."""
    if not isinstance(result, TorchrunResult):
        raise TypeError(f"result must be what run_torchrun returned, got {type(result).__name__}")
    if not result.get("kill"):
        raise ValueError("result has no kill: run run_torchrun with kill_rank and kill_after_step")
    starts = {r["attempt"]: r for r in result.log if r.get("event") == "start"}
    first = {}
    for r in result.log:
        if "step" in r:
            first.setdefault(r["attempt"], r["time"])
    if 1 not in starts or 1 not in first:
        raise ValueError(f"the run has no restarted attempt (attempts: {sorted(starts)}); did the kill land?")
    kill_t = result.kill["time"]
    return {
        "kill_step": result.kill["step"],
        "resumed_from": starts[1]["resumed_from"],
        "redone": len(result.redone),
        "startup_s": first[0] - starts[0]["created"],
        "detect_s": starts[1]["created"] - kill_t,
        "restart_s": first[1] - kill_t,
    }


def steps_timeline(log: list[dict]) -> dict[int, tuple[list[float], list[int]]]:
    """``{attempt: (seconds since the first step, step numbers)}`` from a rank's log: the plot of notebook 06.4."""
    t0 = min(r["time"] for r in log if "step" in r)
    out: dict[int, tuple[list[float], list[int]]] = {}
    for r in log:
        if "step" in r:
            times, steps = out.setdefault(r["attempt"], ([], []))
            times.append(r["time"] - t0)
            steps.append(r["step"])
    return out
