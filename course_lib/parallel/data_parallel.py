"""Data parallelism with DDP and sharded data parallelism with ``fully_shard`` (notebook 06.1).

* ``train_single``: the reference, one process training the course's digits MLP on whole global batches
  (``train.train_step``).
* ``_data_parallel_worker``: the worker run by ``comm.launch`` on N ranks. In one launch it does
  all of the notebook's work for that world size, so each world size pays for starting its processes
  once:

  1. the same training with ``DistributedDataParallel``, every rank on its slice of every global batch;
  2. the same training again with ``fully_shard`` (FSDP2) on a CPU device mesh (a CUDA mesh under NCCL),
     with the bytes of the parameters, gradients and optimizer state each rank holds (its local shards,
     ``DTensor.to_local()``), next to what a DDP replica holds, and for both strategies the peak of live
     tensor bytes over two more steps of a fresh copy, by category, from torch's ``FSDPMemTracker`` /
     ``MemTracker`` (all-gather buffers, unsharded layers, activations included);
  3. a throughput measurement: DDP steps of a larger MLP on a fixed batch per rank (weak scaling) and on
     1/N of that batch per rank (strong scaling: one process's global batch split), with rank 0 also taking
     steps alone between them (the one-process baseline, under the same conditions), and, when asked,
     all-reduce timings to fit the link with (``comm.allreduce_benchmark``).

* ``run_data_parallel``: launches the worker on ``world_size`` ranks and returns one summary.
* ``speedup_model``: the interconnect module's speed-up model (``comm.data_parallel_speedup``) with each
  rank's share of a core (``comm.core_sharing``): what the measurement is compared with.
* ``model_states_formula``: ``memory.formulas.model_states_bytes`` for DDP (ZeRO stage 0, full replicas)
  and ``fully_shard`` (stage 3: weights, gradients and optimizer state all split over the ranks).

Why DDP equals one process: each rank's loss is the mean over its slice; DDP averages the gradients over
the ranks, and the mean of equal-sized slice means is the mean over the global batch. So every rank
applies exactly the gradient one process computes on the whole batch, up to float rounding (the sums
run in a different order). It stops holding with uneven slices (a short last batch: the plain average
of slice means then weights the examples unequally), with BatchNorm (statistics per slice, not per
global batch) and with dropout (each rank draws its own masks).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .. import arguments, comm, data, models, seeds, train
from ..timing import representative
from ..comm import allreduce_benchmark, launch, max_world_size, rank_info
from ..memory import formulas, torch_internals

__all__ = [
    "STRATEGIES",
    "global_batches",
    "rank_slice",
    "train_single",
    "run_data_parallel",
    "speedup_model",
    "model_states_formula",
    "max_abs_difference",
]

STRATEGIES = ("ddp", "fully_shard")
"""The two ways of section 1 and 3: full replicas (DDP) and sharded model states (FSDP2)."""

_OPTIMIZER = "momentum"  # SGD with momentum: 4 B of state per parameter, and updates proportional to the gradient
_DEFAULT_BENCH = {"in_features": 512, "hidden": 1024, "layers": 3, "batch_size": 64, "steps": 6, "warmup": 2}
"""The throughput measurement's MLP (2.6 M parameters, 10.5 MB of gradients) and its steps."""


# ---------------------------------------------------------------------------------------------- checks


def _check_world(world_size: int) -> int:
    world_size = arguments.integer("world_size", world_size, minimum=1)
    limit = max_world_size()
    if world_size > limit:
        raise ValueError(
            f"world_size={world_size} is more processes than this machine can run (at most {limit}, "
            "comm.max_world_size()); use 1, 2 or 4"
        )
    return world_size


def _check_training(steps: int, global_batch: int, hidden: int, lr: float, world_size: int = 1) -> None:
    arguments.positive_int("steps", steps)
    arguments.positive_int("global_batch", global_batch)
    arguments.positive_int("hidden", hidden)
    arguments.positive("lr", lr)
    if global_batch % world_size:
        raise ValueError(
            f"global_batch={global_batch} must divide evenly over world_size={world_size} ranks: with "
            "uneven slices the average of the ranks' gradients no longer equals the global batch's"
        )


# ---------------------------------------------------------------------------------------------- data


def global_batches(steps: int, global_batch: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The ``steps`` global batches of the digits training set that every run trains on.

    Seeded shuffles of the training set, one after the other, cut into batches of ``global_batch``
    examples (only whole batches: section 1 explains why a short last batch would break the equality).
    """
    arguments.positive_int("steps", steps)
    arguments.positive_int("global_batch", global_batch)
    arguments.nonnegative_int("seed", seed)
    split = data.load_digits()
    n = len(split.x_train)
    if global_batch > n:
        raise ValueError(f"global_batch={global_batch} exceeds the {n} training examples")
    g = torch.Generator().manual_seed(seed)
    per_epoch = n // global_batch
    order = torch.cat(
        [torch.randperm(n, generator=g)[: per_epoch * global_batch] for _ in range(-(-steps // per_epoch))]
    )
    idx = order[: steps * global_batch].view(steps, global_batch)
    return [(split.x_train[i], split.y_train[i]) for i in idx]


def rank_slice(batch: tuple[torch.Tensor, ...], rank: int, world_size: int) -> tuple[torch.Tensor, ...]:
    """Rank ``rank``'s contiguous share of a global batch; the batch size must
    divide evenly by ``world_size``."""
    world_size = arguments.positive_int("world_size", world_size)
    rank = arguments.integer("rank", rank, minimum=0, maximum=world_size - 1)
    n = len(batch[0])
    if n % world_size:
        raise ValueError(f"a batch of {n} examples does not split evenly over world_size={world_size} ranks")
    k = n // world_size
    return tuple(t[rank * k : (rank + 1) * k] for t in batch)


def _model(hidden: int, seed: int, device: torch.device | str = "cpu") -> nn.Module:
    torch.manual_seed(seed)  # the same initial weights in every process
    return models.MLP(64, hidden, 10).to(device)


def train_single(
    steps: int = 30,
    global_batch: int = 64,
    hidden: int = 128,
    lr: float = 0.1,
    seed: int = 0,
    slice_of: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Train the digits MLP in this process on whole global batches: the reference of notebook 06.1.

    ``slice_of=(rank, world_size)`` trains on that rank's slice of each batch only: what one rank
    would learn if nobody averaged the gradients (section 1 shows the difference is not rounding).
    Returns ``{"losses": [loss per step], "params": {name: final tensor}, "n_params"}``.
    """
    _check_training(steps, global_batch, hidden, lr)
    batches = global_batches(steps, global_batch, seed)
    if slice_of is not None:
        if not isinstance(slice_of, tuple) or len(slice_of) != 2:
            raise TypeError(f"slice_of must be a (rank, world_size) tuple or None, got {slice_of!r}")
        batches = [rank_slice(b, slice_of[0], slice_of[1]) for b in batches]
    model = _model(hidden, seed)
    opt = train.make_optimizer(_OPTIMIZER, model.parameters(), lr=lr)
    losses = [train.train_step(model, batch, opt).loss for batch in batches]
    return {
        "losses": losses,
        "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "n_params": models.count_parameters(model),
    }


def max_abs_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference between two state dicts with the same keys and shapes (section 1)."""
    if set(a) != set(b):
        raise ValueError(f"the state dicts have different keys: {sorted(set(a) ^ set(b))}")
    for k in a:
        if a[k].shape != b[k].shape:
            raise ValueError(f"{k!r} has shape {tuple(a[k].shape)} in one and {tuple(b[k].shape)} in the other")
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


# ---------------------------------------------------------------------------------------------- one rank


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _bytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


def _state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer, grad_bytes: int) -> dict[str, int]:
    """Bytes of this rank's own model states: parameters, gradients (measured before the update), and the
    optimizer's per-parameter buffers (Adam's two moments; its one-number step counters are left out)."""
    opt_tensors = [
        v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0
    ]
    return {"params": _bytes(model.parameters()), "grads": grad_bytes, "optimizer": _bytes(opt_tensors)}


class _GradBytes:
    """``before_update`` hook: the bytes of this rank's gradients, after they were averaged."""

    def __init__(self) -> None:
        self.value = 0

    def __call__(self, model: nn.Module) -> None:
        self.value = _bytes(p.grad for p in model.parameters() if p.grad is not None)


def _wrap(strategy: str, model: nn.Module, world: int, device: torch.device) -> nn.Module:
    """``model`` under DDP, or under ``fully_shard`` per Linear layer and then whole."""
    if strategy == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch_internals.require_distributed("fully_shard training", device)
    mesh = init_device_mesh(device.type, (world,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _train_replicated(
    strategy: str, batches, hidden: int, lr: float, seed: int, rank: int, world: int, device: torch.device
) -> dict[str, Any]:
    """Train with DDP or fully_shard on this rank's slices; losses are the global batches' mean losses."""
    model = _model(hidden, seed, device)
    wrapped = _wrap(strategy, model, world, device)
    opt = train.make_optimizer(_OPTIMIZER, wrapped.parameters(), lr=lr)
    grads = _GradBytes()
    losses = [
        train.train_step(wrapped, rank_slice(b, rank, world), opt, device=device, before_update=grads).loss
        for b in batches
    ]
    loss = torch.tensor(losses, dtype=torch.float64, device=device)
    dist.all_reduce(loss)  # mean of the slices' mean losses = the global batch's mean loss
    memory = _state_bytes(wrapped, opt, grads.value)
    peak = _peak_memory(strategy, batches, hidden, lr, seed, rank, world, device)
    if strategy == "ddp":
        params = {k: v.detach().cpu().clone() for k, v in wrapped.module.state_dict().items()}
    else:  # every rank takes part in gathering the full tensors
        params = {k: v.full_tensor().detach().cpu() for k, v in model.state_dict().items()}
    return {"losses": (loss / world).tolist(), "params": params if rank == 0 else None, "memory": memory, "peak": peak}


def _peak_memory(
    strategy: str,
    batches,
    hidden: int,
    lr: float,
    seed: int,
    rank: int,
    world: int,
    device: torch.device,
    steps: int = 2,
) -> dict[str, int]:
    """The peak of live tensor bytes on this rank over ``steps`` training steps of a fresh copy of the model,
    from torch's own trackers (``FSDPMemTracker`` for ``fully_shard``, ``MemTracker`` for DDP): everything
    alive at the peak, all-gathered weights and prefetched layers included, by category."""

    MemTracker, FSDPMemTracker = torch_internals.mem_tracker_class(), torch_internals.fsdp_mem_tracker_class()
    if MemTracker is None or FSDPMemTracker is None:
        raise RuntimeError(f"torch {torch.__version__} has no MemTracker/FSDPMemTracker: {torch_internals.missing()}")
    model = _model(hidden, seed, device)
    wrapped = _wrap(strategy, model, world, device)
    opt = train.make_optimizer(_OPTIMIZER, wrapped.parameters(), lr=lr)
    tracker = MemTracker() if strategy == "ddp" else FSDPMemTracker(wrapped, opt)
    if strategy == "ddp":
        tracker.track_external(wrapped, opt)
    with tracker:
        for i, b in enumerate(batches[:steps]):
            if i:
                tracker.reset_mod_stats()  # module stats per iteration; the peak is kept over all of them
            train.train_step(wrapped, rank_slice(b, rank, world), opt, device=device)
    snap = tracker.get_tracker_snapshot("peak")
    at_peak = next(iter(snap.values())) if snap else {}
    return {str(getattr(k, "value", k)): int(v) for k, v in at_peak.items()}


def _throughput(
    device: torch.device,
    rank: int,
    in_features: int,
    hidden: int,
    layers: int,
    batch_size: int,
    steps: int,
    warmup: int,
    seed: int,
) -> dict[str, Any]:
    """DDP steps on a batch of ``batch_size`` per rank (weak scaling) and on 1/world of it per rank (strong
    scaling: the same global batch as one process); before each, one step alone on rank 0 (the baseline)."""
    world = dist.get_world_size()
    torch.manual_seed(seed)
    model = models.MLP(in_features, [hidden] * layers, 10).to(device)
    solo = models.MLP(in_features, [hidden] * layers, 10).to(device)
    solo.load_state_dict(model.state_dict())
    ids = [device.index] if device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
    g = torch.Generator().manual_seed(seeds.derive(seed, "rank", rank))  # a batch of this rank's own
    batch = (torch.randn(batch_size, in_features, generator=g), torch.randint(0, 10, (batch_size,), generator=g))
    opt = train.make_optimizer("sgd", ddp.parameters(), lr=0.01)
    solo_opt = train.make_optimizer("sgd", solo.parameters(), lr=0.01)
    step_s, solo_s, together_s, strong_s = [], [], [], []
    strong = rank_slice(batch, rank, world) if batch_size % world == 0 else None  # a fixed global batch, split
    for _ in range(warmup + steps):
        dist.barrier()
        if rank == 0:
            solo_s.append(train.train_step(solo, batch, solo_opt, device=device, measure=True).seconds)
        dist.barrier()
        with ddp.no_sync():  # every rank computes at once and nobody communicates: compute with shared cores
            together_s.append(train.train_step(ddp, batch, opt, device=device, measure=True).seconds)
        dist.barrier()
        step_s.append(train.train_step(ddp, batch, opt, device=device, measure=True).seconds)
        if strong is not None:  # strong scaling: the same global batch as one process, 1/world of it per rank
            dist.barrier()
            strong_s.append(train.train_step(ddp, strong, opt, device=device, measure=True).seconds)
    n_params = models.count_parameters(model)
    return {
        "step_s": step_s[warmup:],
        "solo_s": solo_s[warmup:],
        "together_s": together_s[warmup:],
        "strong_s": strong_s[warmup:],
        "n_params": n_params,
        "grad_bytes": 4 * n_params,
    }


def _data_parallel_worker(
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    hidden: int = 128,
    lr: float = 0.1,
    seed: int = 0,
    bench: dict[str, int] | None = None,
    link_sizes: list[int] | None = None,
) -> dict[str, Any]:
    """Everything ``run_data_parallel`` runs on one world size, on this rank; run it under ``comm.launch``.

    Trains the digits MLP with DDP and with ``fully_shard`` on this rank's slice of each global batch
    (``batches``, from ``global_batches`` in the parent: a rank then never imports scikit-learn), then times DDP steps
    of a larger MLP (``bench``: keys of ``_DEFAULT_BENCH``;
    ``None`` uses it, ``{}`` skips the timing) and, with ``link_sizes`` and 2 or more ranks, times
    all-reduces of those sizes (bytes). Returns this rank's dict: ``rank``, ``world_size``, ``backend``,
    ``ddp`` and ``fully_shard`` (each ``{"losses", "params" (rank 0 only), "memory": {"params", "grads",
    "optimizer"} bytes held by this rank}``), ``bench`` and ``link`` (rows of ``allreduce_benchmark``).
    """
    info = rank_info()
    rank, world, device = info["rank"], info["world_size"], info["device"]
    if not batches:
        raise ValueError("batches must hold at least one global batch (global_batches makes them)")
    _check_training(len(batches), len(batches[0][0]), hidden, lr, world)
    settings = dict(_DEFAULT_BENCH) if bench is None else {**_DEFAULT_BENCH, **bench} if bench else None
    out: dict[str, Any] = {"rank": rank, "world_size": world, "backend": info["backend"]}
    for strategy in STRATEGIES:
        out[strategy] = _train_replicated(strategy, batches, hidden, lr, seed, rank, world, device)
    out["bench"] = _throughput(device, rank, seed=seed, **settings) if settings else None
    out["link"] = allreduce_benchmark(link_sizes, repeats=5, warmup=1) if link_sizes and world > 1 else None
    return out


def run_data_parallel(
    world_size: int,
    *,
    steps: int = 30,
    global_batch: int = 64,
    hidden: int = 128,
    lr: float = 0.1,
    seed: int = 0,
    bench: dict[str, int] | None = None,
    link_sizes: list[int] | None = None,
    backend: str = "gloo",
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Launch ``_data_parallel_worker`` on ``world_size`` ranks (one thread each) and summarise it.
    Notebook 06.1, all sections (one launch per world size).

    Returns ``{"world_size", "backend", "launch_s", "ddp": {"losses", "params"}, "fully_shard": {...},
    "memory": {strategy: [per-rank {"params", "grads", "optimizer", "total"} bytes]}, "compute_s"
    (one rank alone, low quantile), "together_s" (a step on every rank at once with DDP's all-reduce switched
    off by ``no_sync``: compute on shared cores), "step_s" (a DDP step: the slowest rank's low quantile),
    "speedup" (``world_size * compute_s / step_s``: examples per second against one process),
    "examples_per_s", "strong_step_s" (a DDP step with the global batch of one process split over the ranks:
    strong scaling), "strong_speedup" (``compute_s / strong_step_s``), "grad_bytes", "n_params", "link"
    (all-reduce rows or None), "peak_memory": {strategy: [per rank, the live tensor bytes at the peak of two
    training steps by category, ``"Total"`` among them (torch's ``FSDPMemTracker`` / ``MemTracker``; section 3)]}}``.
    Raises ValueError for a world size this machine cannot run, zero or negative steps, batch sizes
    or learning rates, or a global batch that does not split evenly over the ranks.
    """
    world_size = _check_world(world_size)
    _check_training(steps, global_batch, hidden, lr, world_size)
    if bench:
        unknown = set(bench) - set(_DEFAULT_BENCH)
        if unknown:
            raise ValueError(f"unknown bench setting(s) {sorted(unknown)}; accepted: {sorted(_DEFAULT_BENCH)}")
        for k, v in bench.items():
            (arguments.nonnegative_int if k == "warmup" else arguments.positive_int)(f"bench[{k!r}]", v)
    if link_sizes is not None:
        link_sizes = arguments.int_list("link_sizes", link_sizes)
    start = time.perf_counter()
    batches = global_batches(steps, global_batch, seed)
    ranks = launch(
        _data_parallel_worker,
        world_size,
        batches,
        hidden=hidden,
        lr=lr,
        seed=seed,
        bench=bench,
        link_sizes=link_sizes,
        backend=backend,
        timeout=timeout,
        threads_per_rank=1,
    )
    out: dict[str, Any] = {
        "world_size": world_size,
        "backend": ranks[0]["backend"],
        "launch_s": time.perf_counter() - start,
        "link": ranks[0]["link"],
    }
    for s in STRATEGIES:
        out[s] = {"losses": ranks[0][s]["losses"], "params": ranks[0][s]["params"]}
    out["memory"] = {s: [{**r[s]["memory"], "total": sum(r[s]["memory"].values())} for r in ranks] for s in STRATEGIES}
    out["peak_memory"] = {s: [r[s]["peak"] for r in ranks] for s in STRATEGIES}
    if ranks[0]["bench"] is not None:
        b = ranks[0]["bench"]
        compute = representative(b["solo_s"])
        step = max(representative(r["bench"]["step_s"]) for r in ranks)
        together = max(representative(r["bench"]["together_s"]) for r in ranks)
        per_rank = (bench or {}).get("batch_size", _DEFAULT_BENCH["batch_size"])
        strong = max(
            (representative(r["bench"]["strong_s"]) for r in ranks if r["bench"]["strong_s"]), default=float("nan")
        )
        out.update(strong_step_s=strong, strong_speedup=compute / strong)
        out.update(
            compute_s=compute,
            together_s=together,
            step_s=step,
            speedup=world_size * compute / step,
            examples_per_s=world_size * per_rank / step,
            grad_bytes=b["grad_bytes"],
            n_params=b["n_params"],
        )
    return out


# ---------------------------------------------------------------------------------------------- models


def speedup_model(
    compute_s: float,
    grad_bytes: float,
    world_size: int,
    bandwidth: float,
    alpha: float = 0.0,
    *,
    free_cores: int | None = None,
    link_world_size: int = 2,
    slowdowns: tuple[float, float] | None = None,
) -> float:
    """Predicted speed-up of ``world_size`` data-parallel processes over one (weak scaling), on this machine.
    Notebook 06.1, section 2.

    The interconnect module's model, ``comm.data_parallel_speedup`` (compute, then a ring all-reduce of
    the gradients, nothing overlapped), with one correction for ranks that share cores: a rank gets
    ``min(1, free_cores / world_size)`` of a core, so its compute runs ``comm.core_sharing(world_size, 1,
    free_cores)`` times slower than alone, and its "link" (the cores copying the bytes) ``comm.core_sharing(
    world_size, link_world_size, free_cores)`` times slower than when it was fitted on ``link_world_size``
    ranks. ``bandwidth`` (bytes/s) and ``alpha`` (s) come from that fit.

    ``slowdowns=(s_world, s_link)`` replaces the core-sharing prediction by measured slow-downs of compute
    (a step on every rank at once / one rank alone) on ``world_size`` and on ``link_world_size`` ranks:
    on a machine that other programs keep busy, "free cores" is a snapshot and the operating system
    shares the cores out per process, so the measured slow-down is the better input. Give
    ``free_cores`` or ``slowdowns``.
    """
    world_size = _check_world(world_size)
    link_world_size = arguments.positive_int("link_world_size", link_world_size)
    if slowdowns is None:
        if free_cores is None:
            raise ValueError("give free_cores (the core-sharing prediction) or slowdowns (measured)")
        free_cores = arguments.positive_int("free_cores", free_cores)
        compute_share = comm.core_sharing(world_size, 1, free_cores)
        link_share = comm.core_sharing(world_size, link_world_size, free_cores)
    else:
        if not isinstance(slowdowns, tuple) or len(slowdowns) != 2:
            raise TypeError(f"slowdowns must be a (world_size, link_world_size) pair of numbers, got {slowdowns!r}")
        compute_share = arguments.number("slowdowns[0]", slowdowns[0], minimum=1e-9)
        link_share = compute_share / arguments.number("slowdowns[1]", slowdowns[1], minimum=1e-9)
    return (
        comm.data_parallel_speedup(
            compute_s * compute_share, grad_bytes, world_size, bandwidth / link_share, alpha * link_share
        )
        / compute_share
    )


def model_states_formula(n_params: int, world_size: int, strategy: str) -> int:
    """Bytes of model states per rank that ``memory.formulas.model_states_bytes`` predicts for Adam in fp32:
    ZeRO stage 0 for ``"ddp"`` (every rank a full replica), stage 3 for ``"fully_shard"`` (weights,
    gradients and optimizer state split over the ranks). Notebook 06.1, section 3."""
    strategy = arguments.choice("strategy", strategy, STRATEGIES)
    world_size = _check_world(world_size)
    stage = 0 if strategy == "ddp" else 3
    return formulas.model_states_bytes(n_params, "fp32", _OPTIMIZER, zero_stage=stage, data_parallel=world_size)
