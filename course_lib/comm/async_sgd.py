"""Asynchronous SGD (Hogwild!) beside synchronous data parallelism, on the same updates (notebook 06.1, section 4).

* ``sgd_batches``: the ``updates`` mini-batches (indices into the digits training set) that every run here
  takes, in order: update *t* always uses batch *t*, whoever computes it.
* ``run_hogwild``: Hogwild! (Recht et al. 2011): ``workers`` processes share one model in shared memory
  (``model.share_memory()``) and update it without locks or barriers. Each worker takes the next free
  update number (a ticket), reads the weights by running its forward pass on them, computes the gradient
  of its batch and adds ``-lr * gradient`` into the shared weights. A shared counter of the updates that
  have *landed* gives the **staleness** of each update: how many other updates landed between the
  worker's read of the weights and its write. One worker is plain sequential SGD (staleness 0).
* ``run_sync``: the same updates with synchronous data parallelism (``DistributedDataParallel`` over gloo):
  every rank takes its half of batch *t*, the gradients are averaged, all ranks step together. This is
  sequential SGD on the same batches up to float rounding (section 1), whatever the ranks' speeds.

``delays`` (seconds per update, one per worker) slows chosen workers down, as a straggler would: a
synchronous step waits for the slowest rank, an asynchronous worker does not wait for anybody, and the
straggler's updates land late (large staleness). The learning rate, model and batches are the same in
every run, so accuracies and wall times compare like for like.
"""

from __future__ import annotations

import queue
import time
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import nn

from .. import arguments, data, models
from .launcher import launch, rank_info, max_world_size

__all__ = ["sgd_batches", "run_hogwild", "run_sync", "accuracy"]

_HIDDEN = 128  # the course's digits MLP, 64 -> 128 -> 10


def _check(updates: int, batch_size: int, lr: float, workers: int, delays: Sequence[float] | None) -> tuple[float, ...]:
    arguments.positive_int("updates", updates)
    arguments.positive_int("batch_size", batch_size)
    arguments.positive("lr", lr)
    workers = arguments.positive_int("workers", workers)
    limit = max_world_size()
    if workers > limit:
        raise ValueError(f"workers={workers} is more processes than this machine can run (at most {limit})")
    if delays is None:
        return (0.0,) * workers
    if isinstance(delays, (str, bytes)) or not hasattr(delays, "__len__"):
        raise TypeError(f"delays must be a sequence of seconds, one per worker, got {delays!r}")
    if len(delays) != workers:
        raise ValueError(f"delays has {len(delays)} entries; give one per worker ({workers})")
    return tuple(arguments.number(f"delays[{i}]", d, minimum=0.0) for i, d in enumerate(delays))


def sgd_batches(updates: int, batch_size: int, seed: int = 0) -> torch.Tensor:
    """An ``(updates, batch_size)`` tensor of indices into the digits training set: batch *t* is update *t*'s
    in every run (seeded shuffles, one epoch after another)."""
    arguments.positive_int("updates", updates)
    arguments.positive_int("batch_size", batch_size)
    arguments.nonnegative_int("seed", seed)
    n = len(data.load_digits().x_train)
    if batch_size > n:
        raise ValueError(f"batch_size={batch_size} exceeds the {n} training examples")
    g = torch.Generator().manual_seed(seed)
    per_epoch = n // batch_size
    order = torch.cat(
        [torch.randperm(n, generator=g)[: per_epoch * batch_size] for _ in range(-(-updates // per_epoch))]
    )
    return order[: updates * batch_size].view(updates, batch_size)


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return models.MLP(64, _HIDDEN, 10)


def accuracy(params: dict[str, torch.Tensor]) -> float:
    """Test accuracy (%) on digits of the MLP with these weights."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a state dict, got {type(params).__name__}")
    model = _model(0)
    model.load_state_dict(params)
    split = data.load_digits()
    with torch.no_grad():
        return float((model(split.x_test).argmax(1) == split.y_test).float().mean()) * 100


# ---------------------------------------------------------------------------------------------- Hogwild!


def _hogwild_worker(
    worker: int,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: torch.Tensor,
    lr: float,
    delay_s: float,
    tickets,
    landed,
    start,
    results,
) -> None:  # pragma: no cover - child
    try:
        torch.set_num_threads(1)
        params = list(model.parameters())
        loss_fn = nn.CrossEntropyLoss()
        stale, mine = [], []
        start.wait()
        t0 = time.monotonic()
        while True:
            with tickets.get_lock():  # take the next update number: the run does exactly len(batches) updates
                t = tickets.value
                tickets.value = t + 1
            if t >= len(batches):
                break
            read = landed.value  # updates landed before this worker reads the weights
            idx = batches[t]
            grads = torch.autograd.grad(loss_fn(model(x[idx]), y[idx]), params)
            if delay_s:
                time.sleep(delay_s)  # a straggler: slower hardware, a busy node
            with torch.no_grad():  # Hogwild!: written straight into the shared weights, no lock
                for p, g in zip(params, grads):
                    p.add_(g, alpha=-lr)
            with landed.get_lock():
                wrote = landed.value
                landed.value = wrote + 1
            stale.append(wrote - read)
            mine.append(t)
        results.put((worker, {"staleness": stale, "updates": mine, "t0": t0, "t1": time.monotonic()}))
    except BaseException as err:  # report instead of dying silently
        results.put((worker, {"error": f"{type(err).__name__}: {err}"}))


def run_hogwild(
    workers: int = 2,
    updates: int = 600,
    batch_size: int = 32,
    lr: float = 0.1,
    seed: int = 0,
    delays: Sequence[float] | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Hogwild! on ``workers`` processes sharing one model; notebook 06.1, section 4.

    Returns ``{"workers", "wall_s" (first worker's start to last worker's end), "staleness" ([per-worker
    lists] of updates landed between each update's read and write), "updates_per_worker", "mean_staleness",
    "max_staleness", "params" (final shared weights), "accuracy" (test, %), "start_accuracy" (the same model
    before any update: what a run whose updates never reached the shared weights would score)}``. ``workers=1`` is
    sequential
    SGD on the same batches. Raises ValueError for non-positive sizes, more workers than the machine can
    run, or one delay per worker missing; RuntimeError when a worker fails or the run passes ``timeout``.
    """
    delays = _check(updates, batch_size, lr, workers, delays)
    arguments.positive("timeout", timeout)
    from ..procs import _context

    ctx = _context(False)
    split = data.load_digits()
    x, y = split.x_train.clone().share_memory_(), split.y_train.clone().share_memory_()
    batches = sgd_batches(updates, batch_size, seed).share_memory_()
    model = _model(seed).share_memory()
    tickets, landed = ctx.Value("l", 0), ctx.Value("l", 0)
    # every worker starts updating once all are running: one that is still starting would otherwise find the
    # others' updates done and its own never stale
    start, results = ctx.Barrier(workers), ctx.Queue()
    procs = [
        ctx.Process(
            target=_hogwild_worker,
            args=(w, model, x, y, batches, lr, delays[w], tickets, landed, start, results),
            daemon=True,
        )
        for w in range(workers)
    ]
    got: dict[int, dict] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while len(got) < workers:
            try:
                w, r = results.get(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() > deadline or any(not p.is_alive() and p.exitcode for p in procs):
                    raise RuntimeError(
                        f"Hogwild! workers did not finish within {timeout} s (exit codes {[p.exitcode for p in procs]})"
                    ) from None
                continue
            if "error" in r:
                raise RuntimeError(f"Hogwild! worker {w} failed: {r['error']}")
            got[w] = r
        for p in procs:
            p.join(timeout=5)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    start_accuracy = accuracy(_model(seed).state_dict())
    stale = [got[w]["staleness"] for w in range(workers)]
    flat = [s for row in stale for s in row]
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {
        "workers": workers,
        "wall_s": max(r["t1"] for r in got.values()) - min(r["t0"] for r in got.values()),
        "staleness": stale,
        "updates_per_worker": [len(row) for row in stale],
        "mean_staleness": sum(flat) / len(flat),
        "max_staleness": max(flat),
        "params": params,
        "accuracy": accuracy(params),
        "start_accuracy": start_accuracy,
    }


# ---------------------------------------------------------------------------------------------- synchronous


def _sync_worker(batches: torch.Tensor, lr: float, seed: int, delays: Sequence[float]) -> dict[str, Any]:
    """One rank of ``run_sync`` (run it under ``comm.launch``): DDP on this rank's half of every batch."""
    info = rank_info()
    rank, world = info["rank"], info["world_size"]
    split = data.load_digits()
    model = _model(seed)
    ddp = nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()
    k = batches.shape[1] // world
    dist.barrier()
    t0 = time.monotonic()
    for idx in batches:
        mine = idx[rank * k : (rank + 1) * k]
        loss = loss_fn(ddp(split.x_train[mine]), split.y_train[mine])
        if delays[rank]:
            time.sleep(delays[rank])
        loss.backward()  # DDP all-reduces (averages) the gradients here: every rank waits for the slowest
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)
                p.grad = None
    t1 = time.monotonic()
    return {
        "t0": t0,
        "t1": t1,
        "params": {k_: v.detach().clone() for k_, v in model.state_dict().items()} if rank == 0 else None,
    }


def run_sync(
    world_size: int = 2,
    updates: int = 600,
    batch_size: int = 32,
    lr: float = 0.1,
    seed: int = 0,
    delays: Sequence[float] | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """The same updates as ``run_hogwild`` with synchronous DDP on ``world_size`` ranks; notebook 06.1, section 4.

    Returns ``{"world_size", "wall_s", "params", "accuracy"}``. ``batch_size`` must split evenly over the ranks.
    Raises ValueError like ``run_hogwild``.
    """
    delays = _check(updates, batch_size, lr, world_size, delays)
    if batch_size % world_size:
        raise ValueError(f"batch_size={batch_size} must split evenly over world_size={world_size} ranks")
    batches = sgd_batches(updates, batch_size, seed)
    ranks = launch(_sync_worker, world_size, batches, lr, seed, delays, timeout=timeout, threads_per_rank=1)
    params = ranks[0]["params"]
    return {
        "world_size": world_size,
        "wall_s": max(r["t1"] for r in ranks) - min(r["t0"] for r in ranks),
        "params": params,
        "accuracy": accuracy(params),
    }
