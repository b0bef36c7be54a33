"""The experiments of notebook 06.3: resuming in a fresh process, a checkpoint writer killed mid-write,
sharded checkpoints with ``torch.distributed.checkpoint``, a stuck peer detected by a timeout."""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ... import arguments, seeds
from ...memory import torch_internals
from ...files import write_atomic
from .checkpoint import (
    CheckpointError,
    ShuffledBatches,
    _as_path,
    _blob,
    _directory,
    capture_state,
    checkpoint_path,
    load_checkpoint,
    load_latest,
    restore_state,
    save_checkpoint,
)

__all__ = [
    "training_run",
    "run_in_child",
    "killed_write_trial",
    "dcp_roundtrip",
    "load_dcp_unsharded",
    "stuck_peer",
    "job_survival",
    "retry_storm",
]


# ----------------------------------------------------------------------------------------------
# resuming on the same trajectory (notebook 06.3, section "Resume")


def training_run(
    steps: int,
    directory: str | os.PathLike | None = None,
    *,
    every: int = 0,
    keep: int = 3,
    resume: bool = False,
    stop_after: int | None = None,
    partial: bool = False,
    seed: int = 0,
    batch_size: int = 64,
    hidden: int = 64,
    dropout: float = 0.2,
    lr: float = 3e-3,
    threads: int = 1,
    data: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict:
    """Train an MLP with dropout on the digits for ``steps`` optimizer steps (``train.train_step``), shuffled
    by :class:`ShuffledBatches`; checkpoint every ``every`` steps into ``directory``; with ``resume``, start
    from :func:`load_latest`; ``stop_after`` ends the run early (a crash stand-in). Returns ``{"losses":
    {step: loss}, "resumed_from": step or None, "skipped": [...]}``. Dropout and
    shuffling make every generator and the data position matter. ``data``: ``(x, y)`` to train on instead
    of the digits' training split (passing it to a child process spares it loading scikit-learn).
    ``partial``: resume the way a checkpoint of weights and optimizer only would (the random generators
    start afresh from another seed and the epoch starts again from its first batch), for comparison."""
    from ... import train
    from ...data import load_digits
    from ...models import MLP

    steps = arguments.positive_int("steps", steps)
    every = arguments.nonnegative_int("every", every)
    if (every or resume) and directory is None:
        raise ValueError("directory is needed to checkpoint (every > 0) or to resume")
    if directory is not None:
        _as_path("directory", directory).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(arguments.positive_int("threads", threads))
    seeds.seed_everything(seed)
    if data is None:
        split = load_digits(seed=0)
        data = (split.x_train, split.y_train)
    stream = ShuffledBatches(data[0], data[1], batch_size, seed)
    model = MLP(stream.x.shape[1], hidden, 10, dropout=dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    pos: dict[str, Any] = {"epoch": 0, "batch": 0, "step": 0, "seed": seed}
    out: dict[str, Any] = {"losses": {}, "resumed_from": None, "skipped": []}
    if resume:
        state = load_latest(directory, report=out["skipped"].append)
        if state is not None:
            pos = restore_state(state, model, optimizer)
            out["resumed_from"] = pos["step"]
            if partial:
                torch.manual_seed(seeds.derive(seed, "after a partial restore"))
                pos["batch"] = 0
    while pos["step"] < steps:
        if pos["batch"] >= len(stream):
            pos.update(epoch=pos["epoch"] + 1, batch=0)
        for b, batch in stream.batches(pos["epoch"], pos["batch"]):
            result = train.train_step(model, batch, optimizer)
            pos.update(batch=b + 1, step=pos["step"] + 1)
            out["losses"][pos["step"]] = result.loss
            if every and pos["step"] % every == 0:
                save_checkpoint(
                    checkpoint_path(directory, pos["step"]), capture_state(model, optimizer, pos), keep=keep
                )
            if pos["step"] >= steps or pos["step"] == stop_after:
                return out
    return out


def _training_run_child(channel: Any, kwargs: dict) -> None:  # pragma: no cover - runs in a child process
    """``training_run(**kwargs)`` in a fresh process (``procs.Children``); sends the result back."""
    channel.send(training_run(**kwargs))


def run_in_child(kwargs: Mapping[str, Any], timeout: float = 120.0) -> dict:
    """:func:`training_run` in a new process (nothing carries over from this one but the files), via
    ``procs.Children``. Notebook 06.3 (resume in a fresh process)."""
    from ...procs import Children

    with Children("course-train") as kids:
        kids.start(_training_run_child, dict(kwargs))
        return _next_message(kids, timeout)


def _next_message(kids: Any, timeout: float) -> Any:
    """What the child sends next; its error or exit first is a RuntimeError with its output, nothing within
    ``timeout`` seconds a TimeoutError (the child is then stopped)."""

    def on_event(event) -> bool:
        if event.kind in ("error", "exit"):
            raise RuntimeError(
                f"the child process failed ({event.kind}: {event.value}); its output:\n{kids.log_tail(event.index)}"
            )
        return True

    run = kids.supervise(on_event, timeout=arguments.seconds("timeout", timeout), tick=0.5)
    if not run.done:
        raise TimeoutError(f"the child process sent nothing within {timeout:g} s")
    return next(iter(run.messages.values()))[0]


# ----------------------------------------------------------------------------------------------
# a write killed half-way (notebook 06.3, section "Atomic writes")


def _writer_child(
    channel: Any, path: str, megabytes: float, atomic: bool, kill_at: float
) -> None:  # pragma: no cover - child
    import io
    import time

    buffer = io.BytesIO()
    torch.save(_blob({"weights": torch.randn(int(megabytes * 2**20) // 4), "position": {"step": 2}}), buffer)
    data = buffer.getbuffer()
    cut = int(kill_at * len(data))

    def write(f, stop: bool) -> None:
        f.write(data[:cut])
        if stop:  # the bytes so far are in the operating system's hands; say so and wait for the kill
            f.flush()
            channel.send(("written", cut, len(data)))
            time.sleep(3600)
        f.write(data[cut:])

    for n in range(3):  # two whole writes, timed; the third stops at kill_at of its bytes
        start = time.perf_counter()
        if atomic:
            write_atomic(path, lambda f: write(f, n == 2))
        else:
            with open(path, "wb") as f:  # straight onto the final name, as torch.save(state, path) does
                write(f, n == 2)
        channel.send(("took", time.perf_counter() - start))


def killed_write_trial(
    path: str | os.PathLike, megabytes: float, atomic: bool, kill_at: float, timeout: float = 60.0
) -> dict:
    """Write a good checkpoint (step 1) to ``path``; then a child process (``procs.Children``) overwrites it
    with a ``megabytes``-sized one (step 2), atomically or straight onto ``path``: twice whole, timed, and a
    third time up to ``kill_at`` of its bytes (0 to 1), where it waits and is SIGKILLed, as a crash at that
    byte would leave it. Returns ``{"loadable", "step" (2 when the last whole write survived; None if
    unloadable), "error", "write_s" (the child's second whole write), "written" (bytes of the third write
    handed to the operating system when the kill landed), "size"}``. Notebook 06.3."""
    from ...procs import Children

    path = _as_path("path", path)
    megabytes = arguments.positive("megabytes", megabytes)
    kill_at = arguments.number("kill_at", kill_at, minimum=0.0, maximum=1.0)
    save_checkpoint(path, {"weights": torch.zeros(4), "position": {"step": 1}})
    with Children("course-ckpt-writer") as kids:
        kids.start(_writer_child, str(path), megabytes, bool(atomic), kill_at)
        write_s = [_next_message(kids, timeout)[1] for _ in range(2)][-1]  # the second write, on warm pages
        _, written, size = _next_message(kids, timeout)
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):  # what the killed writer left behind
        tmp.unlink(missing_ok=True)
    out = {"write_s": write_s, "written": written, "size": size}
    try:
        step = load_checkpoint(path)["position"]["step"]
        return {"loadable": True, "step": step, "error": None, **out}
    except CheckpointError as exc:
        return {"loadable": False, "step": None, "error": str(exc), **out}


# ----------------------------------------------------------------------------------------------
# sharded checkpoints with torch.distributed.checkpoint (notebook 06.3, section "Sharded state")


def _sharded_model(seed: int, hidden: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from ...comm import rank_info
    from ...models import MLP

    torch.manual_seed(seed)
    model = MLP(64, [hidden, hidden], 10)
    info = rank_info()
    torch_internals.require_distributed("fully_shard", info["device"])
    fully_shard(model, mesh=init_device_mesh(info["device"].type, (info["world_size"],)))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def dcp_roundtrip(directory: str, hidden: int = 256, steps: int = 3) -> dict:
    """Run inside ``comm.launch``: an FSDP2 (``fully_shard``) MLP trains ``steps`` steps; its model
    and optimizer state is saved with ``torch.distributed.checkpoint`` (each rank writes its own shard),
    loaded into a fresh, differently initialised sharded model, and compared. Returns per rank: bytes
    of the local shards, whether every tensor came back equal, the next step's loss from the saved and
    from the restored model, and the full model state (rank 0). Notebook 06.3 (sharded state)."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a path (str), got {type(directory).__name__}")
    hidden, steps = arguments.positive_int("hidden", hidden), arguments.positive_int("steps", steps)
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_state_dict,
        set_state_dict,
    )

    from ... import train

    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(steps + 1, 32, 64, generator=g), torch.randint(0, 10, (steps + 1, 32), generator=g)
    model, opt = _sharded_model(0, hidden)
    device = next(model.parameters()).device
    for s in range(steps):
        train.train_step(model, (x[s], y[s]), opt, device=device)
    msd, osd = get_state_dict(model, opt)
    local = sum(t.to_local().numel() * t.element_size() for t in msd.values() if hasattr(t, "to_local"))
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=directory)
    fresh, fresh_opt = _sharded_model(1, hidden)
    train.train_step(fresh, (x[0], y[0]), fresh_opt, device=device)  # different state everywhere
    msd2, osd2 = get_state_dict(fresh, fresh_opt)
    target = {"model": msd2, "optim": osd2}
    dcp.load(target, checkpoint_id=directory)
    set_state_dict(fresh, fresh_opt, model_state_dict=target["model"], optim_state_dict=target["optim"])
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    full2 = get_model_state_dict(fresh, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    equal = all(torch.equal(full[k], full2[k]) for k in full) if dist.get_rank() == 0 else True
    loss_a = train.train_step(model, (x[steps], y[steps]), opt, device=device).loss
    loss_b = train.train_step(fresh, (x[steps], y[steps]), fresh_opt, device=device).loss
    return {
        "rank": dist.get_rank(),
        "local_bytes": local,
        "equal": equal,
        "loss_saved": loss_a,
        "loss_restored": loss_b,
        "full": full if dist.get_rank() == 0 else None,
    }


def load_dcp_unsharded(directory: str | os.PathLike, hidden: int = 256) -> dict[str, torch.Tensor]:
    """Load the model part of a :func:`dcp_roundtrip` checkpoint into one ordinary process (no process
    group): DCP reshards 2 ranks' files onto world size 1. Notebook 06.3."""
    import torch.distributed.checkpoint as dcp

    from ...models import MLP

    directory = _directory(directory)
    model = MLP(64, [hidden, hidden], 10)
    target = {"model": model.state_dict()}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(target, checkpoint_id=str(directory), no_dist=True)
    return target["model"]


# ----------------------------------------------------------------------------------------------
# a stuck peer, detected by a timeout (notebook 06.3, section "Timeouts")


def stuck_peer(timeouts: list[float]) -> dict:
    """Run inside ``comm.launch`` with 2 ranks. For each timeout T, both ranks make a process
    group with ``timeout=T``; rank 1 then never joins the all-reduce (it waits elsewhere, stuck), and
    rank 0 measures how long its all-reduce takes to fail. Returns ``{T: (seconds, error type)}`` on
    rank 0. Notebook 06.3 (process-group timeouts)."""
    import time
    from datetime import timedelta

    import torch.distributed as dist

    out = {}
    for t in timeouts:
        group = dist.new_group(timeout=timedelta(seconds=arguments.seconds("timeout", t)))
        dist.barrier()
        if dist.get_rank() == 0:
            start = time.perf_counter()
            try:
                dist.all_reduce(torch.ones(1), group=group)
                error = None
            except Exception as exc:  # noqa: BLE001 - the point: which error and when
                error = type(exc).__name__
            out[t] = (time.perf_counter() - start, error)
        dist.barrier()  # rank 1 waits here the whole time: stuck, from rank 0's point of view
    return out


# ----------------------------------------------------------------------------------------------
# failures at scale (notebook 06.3, section "Restarts, and failures at scale")


def _hazard_worker(channel: Any, steps: int, step_s: float, hazard: float, seed: int) -> None:  # pragma: no cover
    """One worker of a job: ``steps`` steps of ``step_s`` seconds; after each it dies (``os._exit(3)``, no
    clean-up, as a crashed process or a lost machine) with probability ``hazard``, from its own seeded draws."""
    import time

    draw = random.Random(seed).random
    for _ in range(steps):
        time.sleep(step_s)
        if draw() < hazard:
            os._exit(3)
    channel.send("done")


def _worker_failed(event: Any) -> bool:
    return event.kind == "error" or (event.kind == "exit" and event.value != 0)


def job_survival(
    sizes: list[int],
    trials: int = 12,
    steps: int = 20,
    hazard: float = 0.004,
    step_s: float = 0.002,
    seed: int = 0,
    timeout: float = 60.0,
) -> dict[int, dict]:
    """Run ``trials`` jobs of each size in ``sizes``: a job of size N is N worker processes
    (``procs.Children``) that each take ``steps`` steps and die after any step with probability ``hazard``
    (seeded per job and worker, so a rerun injects the same failures). The job, like one under torchrun
    without restarts, fails as soon as any worker dies: its other workers are stopped. Returns, per size,
    ``{"finished", "trials", "predicted"}`` with ``predicted = (1 - hazard) ** (N * steps)``, the chance that
    all N * steps draws survive. Notebook 06.3 (failures at scale)."""
    from ...procs import Children

    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise ValueError(f"sizes must be a non-empty list of job sizes, got {sizes!r}")
    sizes = [arguments.positive_int("sizes", n) for n in sizes]
    trials, steps = arguments.positive_int("trials", trials), arguments.positive_int("steps", steps)
    hazard = arguments.fraction("hazard", hazard, allow_zero=True, allow_one=True)
    step_s, timeout = arguments.nonnegative("step_s", step_s), arguments.seconds("timeout", timeout)
    out = {}
    for n in sizes:
        finished = 0
        for trial in range(trials):
            with Children("course-job") as kids:
                for rank in range(n):
                    kids.start(_hazard_worker, steps, step_s, hazard, seeds.derive(seed, "hazard", n, trial, rank))
                job = kids.supervise(_worker_failed, timeout=timeout, tick=0.5)  # until one fails or all finish
            if job.timed_out:
                raise TimeoutError(f"a job of {n} workers did not end within {timeout:g} s")
            finished += not job.done  # ended early: a worker failed
        out[n] = {"finished": finished, "trials": trials, "predicted": (1 - hazard) ** (n * steps)}
    return out


# ----------------------------------------------------------------------------------------------
# many clients retrying at once (notebook 06.3, section "Retries")


def retry_storm(
    clients: int = 16,
    down_s: float = 0.5,
    backoff: float = 0.05,
    jitter: bool = False,
    window_s: float = 0.01,
    timeout: float = 20.0,
) -> dict:
    """``clients`` threads lose a service at the same moment (it comes back after ``down_s`` seconds, a
    :class:`~.robust.DelayedService`) and reconnect with :func:`~.robust.retry` (``backoff``, factor 2,
    ``jitter`` or not; client i draws from seed i). Every connection attempt's time is recorded. Returns
    ``{"attempts", "retries", "peak", "peak_share", "connected_s"}``: ``peak`` is the most retries that
    fell in any ``window_s`` window (the load a recovering service sees at once), ``peak_share`` that over
    ``clients`` (1.0: all in lockstep), ``connected_s`` each client's connection time after the failure.
    Notebook 06.3 (retries)."""
    import threading
    import time

    from .robust import DelayedService, connect, retry

    clients = arguments.positive_int("clients", clients)
    down_s, backoff = arguments.positive("down_s", down_s), arguments.positive("backoff", backoff)
    window_s, timeout = arguments.positive("window_s", window_s), arguments.seconds("timeout", timeout)
    if not isinstance(jitter, bool):
        raise TypeError(f"jitter must be True or False, got {jitter!r}")
    attempts: list[float] = []
    connected: list[float] = [float("nan")] * clients
    lock, go = threading.Lock(), threading.Event()

    def attempt(port: int) -> float:
        with lock:
            attempts.append(time.perf_counter())
        return connect(port, timeout=2.0)

    def client(i: int, service: DelayedService) -> None:
        go.wait()
        at = retry(
            lambda: attempt(service.port),
            attempts=30,
            backoff=backoff,
            retry_on=ConnectionRefusedError,
            jitter=jitter,
            seed=i,
        )
        connected[i] = at - service.started_at  # from the failure, the moment the service went down

    with DelayedService(down_s) as service:
        threads = [threading.Thread(target=client, args=(i, service), daemon=True) for i in range(clients)]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join(timeout)
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"some of the {clients} clients did not reconnect within {timeout:g} s")
    retries = sorted(attempts)[clients:]  # the first `clients` attempts are the failure itself, all at once
    peak = max((sum(1 for u in retries if t <= u < t + window_s) for t in retries), default=0)
    return {
        "attempts": len(attempts),
        "retries": len(retries),
        "peak": peak,
        "peak_share": peak / clients,
        "connected_s": connected,
    }
