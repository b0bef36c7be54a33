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

import torch
import torch.distributed as dist

from .. import arguments, seeds
from ..comm.launcher import choose_backend, init_process_group, tcp_store
from ..files import write_atomic

__all__ = [
    "main",
    "parse_args",
    "prepare_data",
    "load_data",
    "make_model",
    "drop_optimizer_state",
    "CHECKPOINT_DIR",
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


def _batch_indices(step: int, n_examples: int, batch_size: int, seed: int) -> torch.Tensor:
    """Indices of the global batch of update ``step``: a seeded shuffle per epoch, the last partial batch
    dropped. The step number is the whole data position, so a resumed run reads the same batches."""
    arguments.nonnegative_int("step", step)
    batch_size = arguments.positive_int("batch_size", batch_size)
    if batch_size > n_examples:
        raise ValueError(f"batch_size must be at most the number of examples ({n_examples}), got {batch_size}")
    per_epoch = n_examples // batch_size
    epoch, j = divmod(step, per_epoch)
    order = torch.randperm(n_examples, generator=torch.Generator().manual_seed(seeds.derive(seed, "epoch", epoch)))
    return order[j * batch_size : (j + 1) * batch_size]


def make_model(hidden: int = 256, seed: int = 0, dropout: float = 0.0) -> torch.nn.Module:
    """The digits MLP (64 -> hidden -> 10, with ``dropout`` after the hidden layer), initialised from
    ``seed``: the same weights on every rank."""
    from ..models import MLP

    torch.manual_seed(seed)
    return MLP(64, hidden, 10, dropout=dropout)


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


def _resume(args, ck_dir: Path, log_path: Path, model, optimizer, rank: int, world: int) -> int:
    """Load the newest good checkpoint, if any, and put back this rank's random stream; return the step every
    rank resumes from (the same on all, checked)."""
    from . import fault_tolerance as ft

    start = 0
    state = ft.load_latest(ck_dir, report=lambda m: _log(log_path, {"event": "skipped", "message": m}))
    if state is not None:
        start = int(ft.restore_state(state, model, optimizer)["step"])  # puts back rank 0's generators
        saved = state["position"].get("rank_rng")
        if args.restore_rng == "each" and saved is not None:
            if len(saved) != world:  # another world size: no saved stream fits, derive a fresh one per rank
                torch.manual_seed(seeds.derive(args.seed, "resumed", start, "rank", rank))
            else:
                ft.set_rng_state(saved[rank])
    starts = [None] * world
    dist.all_gather_object(starts, start)  # every rank must resume from the same step
    if len(set(starts)) != 1:
        raise RuntimeError(f"ranks resumed from different checkpoints (steps {starts}); is --run-dir shared?")
    return start


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
        # same weights everywhere, then each rank its own stream (dropout masks): with one stream, every rank would
        # drop the same units and data parallelism would average N copies of one mask
        torch.manual_seed(seeds.derive(args.seed, "rank", rank))
        start = _resume(args, ck_dir, log_path, model, optimizer, rank, world)
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
            idx = _batch_indices(step, len(x), args.batch_size, args.seed)[rank * share : (rank + 1) * share]
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


if __name__ == "__main__":
    main()
