"""A data-parallel training script that runs unchanged under ``torchrun`` (notebook 06.4).

The same file runs as one process, under ``torchrun`` on one machine, or on several machines, on CPUs
(gloo) or GPUs (NCCL, one GPU per local rank). It trains the course's digits MLP with DDP through the
course's one training step (``course_lib.train.train_step``), writes a checkpoint every
``--checkpoint-every`` steps (rank 0, atomically, with ``parallel.fault_tolerance``), resumes every rank from
the newest good checkpoint when it starts, and appends one JSON line per step to ``<run-dir>/rank<r>.jsonl``
so a resumed run can be compared step by step with an uninterrupted one.

One process (no torchrun)::

    python -m course_lib.parallel.train_script --run-dir runs/a --steps 40

One machine, 2 processes, restarted up to twice when a worker dies::

    torchrun --standalone --nproc-per-node=2 --max-restarts=2 -m course_lib.parallel.train_script --run-dir runs/b

Several machines (the same command on every machine, each with the same code and data; one GPU per process)::

    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29400 \\
        --rdzv-id=job42 --max-restarts=2 -m course_lib.parallel.train_script --run-dir /shared/runs/c

``10.0.0.1`` is an address of one of the machines that all of them can reach (it hosts the rendezvous
store); its port 29400 must be open in the firewall between the machines, and so must the ports the
workers pick for gloo/NCCL (allow all TCP traffic inside the cluster's private network). ``--run-dir`` must be
storage that every machine sees (NFS, a mounted bucket), or the machines resume from different checkpoints.
NCCL hints: ``NCCL_SOCKET_IFNAME=eth0`` (or ``GLOO_SOCKET_IFNAME``) when a machine has several network
interfaces, ``NCCL_DEBUG=INFO`` to see which transport (NVLink, InfiniBand, sockets) NCCL chose,
``NCCL_IB_DISABLE=1`` to rule InfiniBand out while debugging.

Vertex AI custom job: the first worker pool (one replica) and a second pool (N - 1 replicas) run the same
container; Vertex AI sets ``CLUSTER_SPEC`` (JSON: every pool's hosts and this replica's task) and, in its
PyTorch containers, ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` (machines) and ``RANK`` (this
machine). The container's command then is::

    torchrun --nnodes=$WORLD_SIZE --node-rank=$RANK --nproc-per-node=<GPUs per machine> \\
        --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT -m course_lib.parallel.train_script \\
        --run-dir /gcs/<bucket>/runs/d

(``parallel.orchestration.vertex_custom_job`` writes and checks such a job spec; its command first runs
``python -m course_lib.parallel.orchestration --cluster-env N``, which takes the four variables from the
environment or derives them from ``CLUSTER_SPEC`` in a container of your own, and stops the replica when it
finds neither, instead of letting it train alone.)

Process groups get a timeout (``--timeout``, seconds), so a rank whose peer died fails instead of waiting
forever. Each restart attempt of torchrun (``TORCHELASTIC_RESTART_COUNT``) joins through its own prefix of the
rendezvous store, so keys left by the attempt that failed are never read by the next one.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .. import arguments
from ..comm.launcher import choose_backend, init_process_group, tcp_store
from ..files import write_atomic

__all__ = [
    "main",
    "parse_args",
    "prepare_data",
    "load_data",
    "batch_indices",
    "read_log",
    "loss_curve",
    "redone_steps",
    "make_model",
    "rank_seed",
    "drop_optimizer_state",
    "CHECKPOINT_DIR",
    "torchrun_args",
    "run_torchrun",
    "TorchrunResult",
    "restart_summary",
    "steps_timeline",
    "free_port",
]

CHECKPOINT_DIR = "checkpoints"
BACKENDS = ("auto", "gloo", "nccl")


# ----------------------------------------------------------------------------------------------
# data: prepared once, read by every rank


def prepare_data(path: str | os.PathLike, seed: int = 0) -> Path:
    """Write the digits split to ``path`` (a weights-only-loadable tensor file), so ranks need no
    scikit-learn. The "prepare data" step of notebook 06.4's pipeline."""
    from ..data import load_digits

    split = load_digits(seed=arguments.nonnegative_int("seed", seed))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {"x_train": split.x_train, "y_train": split.y_train, "x_test": split.x_test, "y_test": split.y_test}
    write_atomic(path, lambda f: torch.save(tensors, f))  # a rank never reads half a file
    return path


def load_data(path: str | os.PathLike | None, seed: int = 0) -> dict[str, torch.Tensor]:
    """The split written by :func:`prepare_data`, or a fresh one from ``data.load_digits`` when ``path``
    is None."""
    if path is None:
        from ..data import load_digits

        s = load_digits(seed=seed)
        return {"x_train": s.x_train, "y_train": s.y_train, "x_test": s.x_test, "y_test": s.y_test}
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data file {str(path)!r} does not exist; write it with prepare_data(path) first")
    return torch.load(path, weights_only=True)


def batch_indices(step: int, n_examples: int, batch_size: int, seed: int) -> torch.Tensor:
    """Indices of the global batch of update ``step``: a seeded shuffle per epoch, the last partial batch
    dropped. The step number is the whole data position, so a resumed run reads the same batches."""
    arguments.nonnegative_int("step", step)
    batch_size = arguments.positive_int("batch_size", batch_size)
    if batch_size > n_examples:
        raise ValueError(f"batch_size must be at most the number of examples ({n_examples}), got {batch_size}")
    per_epoch = n_examples // batch_size
    epoch, j = divmod(step, per_epoch)
    order = torch.randperm(n_examples, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return order[j * batch_size : (j + 1) * batch_size]


def make_model(hidden: int = 256, seed: int = 0, dropout: float = 0.0) -> torch.nn.Module:
    """The digits MLP (64 -> hidden -> 10, with ``dropout`` after the hidden layer), initialised from
    ``seed``: the same weights on every rank."""
    from ..models import MLP

    torch.manual_seed(seed)
    return MLP(64, hidden, 10, dropout=dropout)


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``'s own random stream (dropout masks, augmentation): different on every rank,
    as it must be, or all ranks drop the same units and data parallelism averages N copies of one mask."""
    return arguments.nonnegative_int("seed", seed) * 1_000_003 + 7_919 * (arguments.nonnegative_int("rank", rank) + 1)


# ----------------------------------------------------------------------------------------------
# the script


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m course_lib.parallel.train_script",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--run-dir", required=True, help="checkpoints and per-rank logs go here (shared by all machines)")
    p.add_argument("--data", default=None, help="a file from prepare_data (default: load the digits here)")
    p.add_argument("--steps", type=int, default=40, help="optimizer updates in all (default 40)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split evenly over the ranks")
    p.add_argument("--hidden", type=int, default=256, help="hidden units of the MLP")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--optimizer", default="momentum", help="sgd, momentum, adam or adamw")
    p.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints (rank 0 writes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dropout", type=float, default=0.0, help="dropout after the hidden layer (each rank its own masks)"
    )
    p.add_argument(
        "--restore-rng",
        default="each",
        choices=("each", "rank0"),
        help="each: every rank resumes its own random stream (saved in the checkpoint); rank0: every rank "
        "takes rank 0's, as a script that saves only rank 0's state does (for comparison)",
    )
    p.add_argument(
        "--backend", default="auto", choices=BACKENDS, help="auto: nccl with a GPU per local rank, else gloo"
    )
    p.add_argument("--timeout", type=float, default=30.0, help="process-group timeout in seconds (dead peers)")
    p.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        help="seconds to sleep after each step (stands in for a bigger model in demos)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The script's arguments (``--help`` prints the module docstring: the multi-machine commands)."""
    args = _parser().parse_args(argv)
    for name in ("steps", "batch_size", "hidden", "checkpoint_every", "threads"):
        arguments.positive_int(name, getattr(args, name))
    arguments.nonnegative_int("seed", args.seed)
    arguments.positive("lr", args.lr)
    arguments.positive("timeout", args.timeout)
    arguments.number("dropout", args.dropout, minimum=0, maximum=1, open_high=True)
    arguments.nonnegative("step_delay", args.step_delay)
    return args


def _init(backend: str, timeout_s: float) -> tuple[int, int, int, torch.device, int]:
    """Join the process group: torchrun's environment if present, else a world of one.

    Returns (rank, world_size, local_rank, device, attempt)."""
    env = os.environ
    under_torchrun = "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env
    rank = int(env.get("RANK", 0)) if under_torchrun else 0
    world = int(env.get("WORLD_SIZE", 1)) if under_torchrun else 1
    local_rank = int(env.get("LOCAL_RANK", 0)) if under_torchrun else 0
    attempt = int(env.get("TORCHELASTIC_RESTART_COUNT", 0))
    local_world = int(env.get("LOCAL_WORLD_SIZE", 1)) if under_torchrun else 1
    backend = choose_backend(backend, local_world, auto=True)  # the same choice on every rank of a machine
    addr = env["MASTER_ADDR"] if under_torchrun else None  # None: a world of one, no network
    if under_torchrun:
        agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # the agent hosts the store
        base = tcp_store(
            addr,
            int(env["MASTER_PORT"]),
            world,
            is_master=(not agent_store and rank == 0),
            timeout=timedelta(seconds=timeout_s),
        )
        store: dist.Store = dist.PrefixStore(f"course_train_script/attempt_{attempt}", base)
    else:
        store = dist.HashStore()
    device = init_process_group(
        backend, store, rank=rank, world_size=world, local_rank=local_rank, timeout=timeout_s, master_addr=addr
    )
    return rank, world, local_rank, device, attempt


def _created() -> float | None:
    """When this process started (Unix time, to ~10 ms on Linux), to tell start-up time from training time."""
    try:  # Linux: the start time in clock ticks since boot, against the uptime now (psutil rounds boot time to 1 s)
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - optional information
        return None


def _log(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


def main(argv: list[str] | None = None) -> dict:
    """Run the script (``argv`` as on the command line); returns a summary dict on every rank.

    Notebook 06.4 calls it in-process for the one-process reference run, and through ``torchrun`` for the rest.
    """
    from ..models import make_optimizer
    from ..train import train_step
    from . import fault_tolerance as ft

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    rank, world, _, device, attempt = _init(args.backend, args.timeout)
    try:
        if args.batch_size % world:
            raise ValueError(f"batch_size ({args.batch_size}) must be divisible by the world size ({world})")
        run_dir = Path(args.run_dir)
        ck_dir = run_dir / CHECKPOINT_DIR
        ck_dir.mkdir(parents=True, exist_ok=True)
        log_path = run_dir / f"rank{rank}.jsonl"
        data = load_data(args.data, args.seed)
        x, y = data["x_train"], data["y_train"]
        model = make_model(args.hidden, args.seed, args.dropout).to(device)
        optimizer = make_optimizer(args.optimizer, model.parameters(), lr=args.lr)
        torch.manual_seed(rank_seed(args.seed, rank))  # same weights everywhere, then each rank its own stream
        start = 0
        state = ft.load_latest(ck_dir, report=lambda m: _log(log_path, {"event": "skipped", "message": m}))
        if state is not None:
            start = int(ft.restore_state(state, model, optimizer)["step"])  # puts back rank 0's generators
            saved = state["position"].get("rank_rng")
            if args.restore_rng == "each" and saved is not None:
                if len(saved) != world:  # another world size: no saved stream fits, derive a fresh one per rank
                    torch.manual_seed(rank_seed(args.seed + start, rank))
                else:
                    ft.set_rng_state(saved[rank])
        starts = [None] * world
        dist.all_gather_object(starts, start)  # every rank must resume from the same step
        if len(set(starts)) != 1:
            raise RuntimeError(f"ranks resumed from different checkpoints (steps {starts}); is --run-dir shared?")
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        _log(
            log_path,
            {
                "event": "start",
                "attempt": attempt,
                "pid": os.getpid(),
                "rank": rank,
                "world_size": world,
                "resumed_from": start,
                "time": time.time(),
                "created": _created(),
                "backend": dist.get_backend(),
            },
        )
        share = args.batch_size // world
        loss = float("nan")
        for step in range(start, args.steps):
            idx = batch_indices(step, len(x), args.batch_size, args.seed)[rank * share : (rank + 1) * share]
            result = train_step(ddp, (x[idx].to(device), y[idx].to(device)), optimizer)
            total = torch.tensor([result.loss * share], dtype=torch.float64, device=device)
            dist.all_reduce(total)  # the global batch's mean loss, the same on every rank
            loss = float(total.item()) / args.batch_size
            _log(log_path, {"step": step, "loss": loss, "attempt": attempt, "pid": os.getpid(), "time": time.time()})
            done = step + 1
            if done % args.checkpoint_every == 0 or done == args.steps:
                streams = [None] * world
                dist.all_gather_object(streams, ft.rng_state())  # every rank's generators, for rank 0 to save
                if rank == 0:
                    position = {"step": done, "world_size": world, "rank_rng": streams}
                    ft.save_checkpoint(
                        ft.checkpoint_path(ck_dir, done), ft.capture_state(model, optimizer, position), keep=3
                    )
            if args.step_delay:
                time.sleep(args.step_delay)
        dist.barrier()  # every rank (rank 0 writing the last checkpoint) done before any tears the group down
        _log(log_path, {"event": "done", "attempt": attempt, "pid": os.getpid(), "time": time.time()})
        return {
            "rank": rank,
            "world_size": world,
            "attempt": attempt,
            "resumed_from": start,
            "steps": args.steps,
            "final_loss": loss,
            "device": str(device),
        }
    finally:
        dist.destroy_process_group()


def drop_optimizer_state(run_dir: str | os.PathLike) -> Path:
    """Rewrite the newest checkpoint in ``run_dir`` without its optimizer state (the momentum buffers), as a
    checkpoint that forgot them would be; returns its path. A run resumed from it restarts the momentum from zero:
    notebook 06.4's no-effect case for a correct resume."""
    from . import fault_tolerance as ft

    directory = Path(run_dir) / CHECKPOINT_DIR
    newest = ft.list_checkpoints(directory) if directory.is_dir() else []
    if not newest:
        raise ValueError(f"no checkpoint in {str(directory)!r}: run the script with --checkpoint-every first")
    state = ft.load_checkpoint(newest[-1])
    state["optimizer"]["state"] = {}
    return ft.save_checkpoint(newest[-1], state)


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
    return [*args, "-m", __name__, *script_args]


def _agent(channel, argv: list[str], env: dict[str, str]) -> None:  # pragma: no cover - runs in a child
    """One torchrun agent (``torch.distributed.run``), inside a ``procs.Children`` child."""
    os.environ.update(env)
    from torch.distributed.run import parse_args as torchrun_parse, run

    channel.send(("agent", os.getpid()))
    run(torchrun_parse(argv))
    channel.send(("finished", os.getpid()))


def free_port() -> int:
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
        endpoint, rid = f"127.0.0.1:{free_port()}", f"course{os.getpid()}_{time.monotonic_ns()}"
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


if __name__ == "__main__":
    main()
