"""Gradient aggregation on thin links: send fewer bytes per step, and measure what that costs.

Notebook 04 (mixed precision, accumulation, aggregation), section "efficient aggregation". Every
data-parallel step averages the ranks' gradients; on a thin link (1 GbE between two machines)
that exchange, not the arithmetic, sets the step time. Five ways to do it, all run on the same
digits MLP, the same data shards and the same seeds:

=============  ================================================================================
``none``       plain all-reduce of the fp32 gradients (``default_hooks.allreduce_hook``)
``fp16``       all-reduce in fp16, half the bytes (``default_hooks.fp16_compress_hook``)
``powersgd``   a rank-``r`` approximation ``P Q^T`` of each weight matrix, with error feedback
               and warm start (``powerSGD_hook.powerSGD_hook``); 1-D tensors go uncompressed
``topk``       written here: keep the ``ratio`` largest-magnitude entries of each bucket (plus
               the residual left over from earlier steps), exchange values and indices with
               ``all_gather``, average; what was not sent stays as the next residual
``dgc``        top-k with Deep Gradient Compression's momentum correction (Lin et al. 2018): the
               momentum is kept on each rank *before* compression (``u = m u + g``, residual
               ``v += u``), top-k of ``v`` is sent and the optimizer is plain SGD; the momentum of
               sent entries is cleared (momentum factor masking). Only with ``momentum > 0``
``local_sgd``  no gradient exchange at all: each rank takes ``period`` local steps, then the
               parameters are averaged with one all-reduce (torch's model-averaging function;
               ``PeriodicModelAverager`` skips parameters without ``.grad``, and ``train_step``
               releases gradients after each update, so the schedule is kept here)
=============  ================================================================================

What each method sends (bytes, collective calls, seconds on a link) is computed in
``comm.aggregation_bytes``, and :class:`CollectiveCounter` (``comm.aggregation_counter``) counts what is really
handed to the collectives; the names are re-exported here.

The worker :func:`train_with_aggregation` runs under ``course_lib.comm.launch``;
:func:`compare_methods` launches it and returns one row per method, :func:`compare_variants` one row
per named variant (a method with its options: momentum, PowerSGD without error feedback, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .. import arguments, data, models, seeds, train
from .aggregation_bytes import (
    ALL_METHODS,
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    METHODS,
    POWERSGD_START_ITER,
    bytes_per_step,
    bytes_total,
    collective_calls,
    ddp_bucket_numels,
    exchange_seconds,
    link_seconds,
    method_name,
    powersgd_payload,
    topk_count,
    wire_factor,
)
from .aggregation_bytes import _INDEX_DTYPE, _momentum, _period, _powersgd_rank, _ratio
from .aggregation_counter import CollectiveCounter
from .aggregation_variants import _checked_variant, _setting
from .launcher import launch, rank_info

__all__ = [
    "METHODS",
    "ALL_METHODS",
    "POWERSGD_START_ITER",
    "DDP_FIRST_BUCKET_BYTES",
    "DDP_BUCKET_BYTES",
    "CollectiveCounter",
    "TopKCompressor",
    "TopKState",
    "topk_hook",
    "method_name",
    "topk_count",
    "powersgd_payload",
    "bytes_per_step",
    "bytes_total",
    "wire_factor",
    "link_seconds",
    "ddp_bucket_numels",
    "collective_calls",
    "exchange_seconds",
    "train_with_aggregation",
    "compare_variants",
    "compare_methods",
]


# ----------------------------------------------------------------------------------------------
# top-k with error feedback (written by hand: that is the lesson)


class TopKCompressor:
    """Top-k sparsification with error feedback, one residual per key (a DDP bucket).

    ``compress(flat, key)`` adds the residual kept for ``key`` to ``flat``, keeps the
    :func:`topk_count` largest magnitudes, and stores everything else as the new residual, so that
    ``values scattered at indices + new residual == flat + old residual`` exactly, and an entry that
    is small every step still grows in the residual until it is sent (error feedback: Seide et al.
    2014 for 1-bit SGD; Stich et al. 2018 and Karimireddy et al. 2019 prove it converges). Returns
    ``(values, indices)`` with int32 indices (what a sparse exchange sends: 8 bytes per kept entry,
    twice a dense fp32 entry, so top-k only saves bytes for ``ratio < 0.5``).

    ``momentum > 0`` is Deep Gradient Compression's *momentum correction* (Lin et al. 2018): a
    velocity ``u = momentum * u + flat`` is kept on this rank before compression and added to the
    residual instead of ``flat``, so what is sent is already momentum SGD's step and the optimizer
    after the exchange must be plain SGD. ``factor_masking`` (DGC's *momentum factor masking*,
    default on) clears the velocity of the entries just sent, so a stale velocity does not keep
    pushing them; without it, at ``ratio=1`` the result is exactly momentum SGD's.
    """

    def __init__(self, ratio: float = 0.01, momentum: float = 0.0, factor_masking: bool = True) -> None:
        self.ratio = _ratio(ratio)
        self.momentum = _momentum(momentum)
        self.factor_masking = arguments.boolean("factor_masking", factor_masking)
        self.residuals: dict[Any, torch.Tensor] = {}
        self.velocities: dict[Any, torch.Tensor] = {}

    def compress(self, flat: torch.Tensor, key: Any = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the residual, keep the top ``ratio`` by magnitude, store the rest; ``(values, indices)``."""
        if not isinstance(flat, torch.Tensor) or flat.dim() != 1 or not flat.is_floating_point():
            raise TypeError("flat must be a 1-D floating-point tensor (a flattened gradient bucket)")
        residual = self.residuals.get(key)
        if residual is None or residual.shape != flat.shape:
            residual = torch.zeros_like(flat)
        velocity = None
        if self.momentum > 0:
            velocity = self.velocities.get(key)
            velocity = (
                flat.clone()
                if velocity is None or velocity.shape != flat.shape
                else velocity.mul_(self.momentum).add_(flat)
            )
            self.velocities[key] = velocity
        acc = residual + (velocity if velocity is not None else flat)
        k = topk_count(flat.numel(), self.ratio)
        indices = acc.abs().topk(k, sorted=False).indices
        values = acc[indices]
        acc[indices] = 0  # what was sent leaves the residual
        if velocity is not None and self.factor_masking:
            velocity[indices] = 0
        self.residuals[key] = acc
        return values, indices.to(_INDEX_DTYPE)

    @staticmethod
    def decompress(values: torch.Tensor, indices: torch.Tensor, numel: int) -> torch.Tensor:
        """A dense vector of ``numel`` zeros with ``values`` added at ``indices`` (repeats add up)."""
        out = torch.zeros(numel, dtype=values.dtype, device=values.device)
        return out.index_add_(0, indices.long(), values)


class TopKState:
    """State of :func:`topk_hook`: the process group and a :class:`TopKCompressor`.
    ``bucket_numels`` records the size of each bucket seen in the latest step (index -> numel).
    ``momentum``/``factor_masking``: DGC's momentum correction (see :class:`TopKCompressor`)."""

    def __init__(
        self,
        ratio: float = 0.01,
        process_group: dist.ProcessGroup | None = None,
        *,
        momentum: float = 0.0,
        factor_masking: bool = True,
    ) -> None:
        self.compressor = TopKCompressor(ratio, momentum, factor_masking)
        self.process_group = process_group
        self.bucket_numels: dict[int, int] = {}


def topk_hook(state: TopKState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: top-k with error feedback over ``all_gather``.

    Per bucket: compress (residual added, top-k kept, rest stored), all-gather every rank's values
    and int32 indices, add them into a dense vector, divide by the number of ranks and write it back
    into the bucket. Each rank hands ``8 * k`` bytes to the all-gathers (``k`` = :func:`topk_count`
    of the bucket). Synchronous: the returned future is already complete.
    """
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    grad = bucket.buffer()
    state.bucket_numels[bucket.index()] = grad.numel()
    values, indices = state.compressor.compress(grad, bucket.index())
    all_values = [torch.empty_like(values) for _ in range(world)]
    all_indices = [torch.empty_like(indices) for _ in range(world)]
    dist.all_gather(all_values, values, group=group)
    dist.all_gather(all_indices, indices, group=group)
    dense = TopKCompressor.decompress(torch.cat(all_values), torch.cat(all_indices), grad.numel())
    grad.copy_(dense.div_(world))
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(grad)
    return fut


# DDP checks a hook's annotations against the real classes (this module's are strings)
topk_hook.__annotations__.update(
    bucket=dist.GradBucket, state=TopKState, **{"return": torch.futures.Future[torch.Tensor]}
)


# ----------------------------------------------------------------------------------------------
# the worker


def _hooked_ddp(
    model: nn.Module,
    method: str,
    ratio: float,
    powersgd_rank: int,
    seed: int,
    *,
    momentum: float = 0.0,
    error_feedback: bool = True,
    warm_start: bool = True,
) -> tuple[nn.Module, Any]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model)
    if method == "none":
        state, hook = None, default_hooks.allreduce_hook
    elif method == "fp16":
        state, hook = None, default_hooks.fp16_compress_hook
    elif method == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=POWERSGD_START_ITER,
            random_seed=seed,
            use_error_feedback=error_feedback,
            warm_start=warm_start,
        )
        hook = powerSGD_hook.powerSGD_hook
    else:  # topk, dgc (momentum correction inside the compressor)
        state, hook = TopKState(ratio, momentum=momentum if method == "dgc" else 0.0), topk_hook
    ddp.register_comm_hook(state, hook)
    return ddp, state


def _batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int):
    """Endless shuffled batches of (x, y), a new seeded order every epoch."""
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]
            yield x[idx], y[idx]


def _optimizer(method: str, optimizer: str, params: Any, lr: float, momentum: float) -> torch.optim.Optimizer:
    """The optimizer after the exchange: ``momentum`` goes into SGD, except for ``dgc``, whose
    compressor already applied it (its optimizer is plain SGD)."""
    if momentum > 0 or method == "dgc":
        from .. import names

        if names.optimizer(optimizer) != "sgd":
            raise ValueError(
                f"momentum={momentum:g} and method 'dgc' need optimizer='sgd' (momentum is set "
                f"here, not by the optimizer's name), got optimizer={optimizer!r}"
            )
        return torch.optim.SGD(params, lr=arguments.positive("lr", lr), momentum=0.0 if method == "dgc" else momentum)
    return train.make_optimizer(optimizer, params, lr=lr)


def train_with_aggregation(
    method: str = "none",
    steps: int = 300,
    *,
    batch_size: int = 32,
    hidden: int = 64,
    optimizer: str = "sgd",
    lr: float = 0.2,
    ratio: float = 0.01,
    powersgd_rank: int = 2,
    period: int = 8,
    seed: int = 0,
    momentum: float = 0.0,
    error_feedback: bool = True,
    warm_start: bool = True,
) -> dict[str, Any]:
    """Train the digits MLP on this rank's shard with one aggregation ``method``; run it under
    ``comm.launch``.

    Every rank builds the same MLP (64 -> ``hidden`` -> 10, ``seed``), takes the training images
    ``rank, rank + p, ...`` of ``data.load_digits()`` (disjoint shards), draws ``batch_size`` of them
    per step (seeded per rank, the same batches for every method) and calls ``train.train_step``
    ``steps`` times: on a DDP model with the method's hook, or for ``local_sgd`` on the plain model,
    averaging the parameters (``model_averaging.utils.average_parameters``) after every ``period`` steps and after the
    last one. Bytes and collective calls are counted by :class:`CollectiveCounter` around the training only.

    The optimizer is plain SGD by default (``optimizer``, ``lr``). ``momentum > 0`` makes it SGD with
    that momentum after the exchange; for ``dgc`` the momentum is applied before compression
    (:class:`TopKCompressor`) and the optimizer stays plain SGD. Measured over 8 seeds (300 steps,
    momentum 0.9 at lr 0.05, an effective step of 0.5 per gradient): uncompressed 96.0 % held-out on
    average; ``topk`` 1 % fed into momentum SGD 2.4 points below it (0.2-4.4); ``dgc`` 0.6 below (1.6
    below to 1.2 above). Plain SGD at lr 0.2: uncompressed 94.5 %, top-k within 0.4 points (3 seeds).
    ``error_feedback``/``warm_start`` switch PowerSGD's two memories off (torch's
    ``use_error_feedback`` and ``warm_start``), to show what they do.

    Returns this rank's ``{"rank", "method", "accuracy" and "loss" (held-out test set), "train_loss"
    (the whole training set, every shard), "bytes_total",
    "bytes_per_step" (total / steps), "step_bytes" (list, one per step), "calls" (collective calls
    in total), "steps", "seconds" (training only), "n_params", "shapes", "bucket_numels" (top-k
    only), "checksum"}``.
    """
    method = method_name(method)
    steps = arguments.positive_int("steps", steps)
    batch_size = arguments.positive_int("batch_size", batch_size)
    ratio, powersgd_rank, period = _ratio(ratio), _powersgd_rank(powersgd_rank), _period(period)
    momentum = _momentum(momentum)
    arguments.boolean("error_feedback", error_feedback)
    arguments.boolean("warm_start", warm_start)
    info = rank_info()
    rank, world = info["rank"], info["world_size"]
    split = data.load_digits(seed=seed)
    x, y = split.x_train[rank::world], split.y_train[rank::world]
    torch.manual_seed(seed)
    model = models.MLP(64, hidden, 10)
    shapes = [tuple(p.shape) for p in model.parameters()]
    n_params = models.count_parameters(model)
    opt = _optimizer(method, optimizer, model.parameters(), lr, momentum)
    batches = _batches(x, y, batch_size, seed=seeds.derive(seed, "rank", rank))
    state = None
    if method == "local_sgd":
        # torch's PeriodicModelAverager averages only parameters whose .grad is set, and train_step
        # releases the gradients after each update; so keep its schedule here and call the averaging
        # function it uses (one all-reduce of all parameters, flattened).
        from torch.distributed.algorithms.model_averaging import utils

        trained = model
    else:
        trained, state = _hooked_ddp(
            model,
            method,
            ratio,
            powersgd_rank,
            seed,
            momentum=momentum,
            error_feedback=error_feedback,
            warm_start=warm_start,
        )
    step_bytes: list[int] = []
    model.train()
    dist.barrier()
    with CollectiveCounter() as counter:
        start = time.perf_counter()
        for step in range(1, steps + 1):
            before = counter.bytes
            train.train_step(trained, next(batches), opt)
            if method == "local_sgd" and (step % period == 0 or step == steps):  # the last: the model kept
                utils.average_parameters(iter(model.parameters()), dist.group.WORLD)
            step_bytes.append(counter.bytes - before)
        seconds = time.perf_counter() - start
    held_out = train.evaluate(model, split.test)
    train_loss = train.evaluate(model, split.train)["loss"]
    return {
        "rank": rank,
        "method": method,
        "accuracy": held_out["acc"],
        "loss": held_out["loss"],
        "train_loss": train_loss,
        "bytes_total": counter.bytes,
        "bytes_per_step": counter.bytes / steps,
        "step_bytes": step_bytes,
        "calls": counter.calls,
        "steps": steps,
        "seconds": seconds,
        "n_params": n_params,
        "shapes": shapes,
        "bucket_numels": sorted(state.bucket_numels.values()) if isinstance(state, TopKState) else None,
        "checksum": float(sum(p.detach().double().sum() for p in model.parameters())),
    }


def _train_variants(variants: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """Worker: :func:`train_with_aggregation` for each variant in turn (one launch for all of them)."""
    return [train_with_aggregation(steps=steps, **options) for options in variants]


def compare_variants(
    variants: dict[str, dict[str, Any]], world_size: int = 2, steps: int = 300, *, timeout: float = 300.0
) -> list[dict[str, Any]]:
    """Train the digits MLP once per named variant on ``world_size`` ranks; one row per variant, in order.
    The same budget, the same batches, one launch for all.

    ``variants`` maps a label to the options of :func:`train_with_aggregation` (``method``, ``lr``,
    ``momentum``, ``ratio``, ``error_feedback``, ...); what a variant leaves out takes that function's
    default. Each row: ``{"variant", "method", "setting" (e.g. "ratio=0.01, momentum=0.9"),
    "options", "accuracy", "loss" and "train_loss" (means over ranks), "bytes_per_step" (measured
    payload per rank, averaged over the steps), "bytes_total", "predicted_bytes_per_step" and "predicted_bytes_total"
    (:func:`bytes_per_step`, :func:`bytes_total`), "fraction_of_uncompressed" (measured bytes over
    ``4 x n_params x steps``), "calls_per_step" (collective calls, measured), "seconds" (training,
    slowest rank), "steps", "n_params", "step_bytes" (rank 0's measured bytes at each step),
    "same_weights" (every rank ended with the same weights)}``. Bytes are the larger of the ranks'
    counts (they are equal).
    """
    if not isinstance(variants, dict) or not variants:
        raise ValueError("variants must be a non-empty dict: label -> options of train_with_aggregation")
    checked = {str(name): _checked_variant(name, options) for name, options in variants.items()}
    steps = arguments.positive_int("steps", steps)
    world_size = arguments.integer("world_size", world_size, minimum=2)
    ranks = launch(_train_variants, world_size, list(checked.values()), steps, timeout=timeout)
    rows = []
    for i, (name, options) in enumerate(checked.items()):
        per_rank = [r[i] for r in ranks]
        first = per_rank[0]
        method, n = options["method"], first["n_params"]
        formula = {
            "ratio": options.get("ratio", 0.01),
            "powersgd_rank": options.get("powersgd_rank", 2),
            "shapes": first["shapes"],
            "period": options.get("period", 8),
            "bucket_numels": first["bucket_numels"],
        }
        rows.append(
            {
                "variant": name,
                "method": method,
                "setting": _setting(options),
                "options": options,
                "accuracy": sum(r["accuracy"] for r in per_rank) / len(per_rank),
                "loss": sum(r["loss"] for r in per_rank) / len(per_rank),
                "train_loss": sum(r["train_loss"] for r in per_rank) / len(per_rank),
                "bytes_per_step": max(r["bytes_per_step"] for r in per_rank),
                "bytes_total": max(r["bytes_total"] for r in per_rank),
                "predicted_bytes_per_step": bytes_per_step(method, n, world_size, **formula),
                "predicted_bytes_total": bytes_total(method, n, steps, world_size, **formula),
                "fraction_of_uncompressed": max(r["bytes_total"] for r in per_rank) / (4 * n * steps),
                "calls_per_step": max(r["calls"] for r in per_rank) / steps,
                "seconds": max(r["seconds"] for r in per_rank),
                "steps": steps,
                "n_params": n,
                "step_bytes": first["step_bytes"],
                "same_weights": len({round(r["checksum"], 3) for r in per_rank}) == 1,
            }
        )
    return rows


def compare_methods(
    methods: Iterable[str] = METHODS,
    world_size: int = 2,
    steps: int = 300,
    *,
    batch_size: int = 32,
    hidden: int = 64,
    optimizer: str = "sgd",
    lr: float = 0.2,
    ratio: float = 0.01,
    powersgd_rank: int = 2,
    period: int = 8,
    seed: int = 0,
    momentum: float = 0.0,
    timeout: float = 300.0,
) -> list[dict[str, Any]]:
    """Train the digits MLP with each aggregation method on ``world_size`` ranks; one row per method.
    Bytes sent against accuracy reached, on the same budget.

    :func:`compare_variants` with one variant per method, all sharing these options (plain SGD at
    lr 0.2 by default). Rows as there; ``"variant"`` is the method's name.
    """
    methods = [method_name(m) for m in ([methods] if isinstance(methods, str) else list(methods))]
    if not methods:
        raise ValueError(f"methods must name at least one of {ALL_METHODS}")
    shared = {
        "batch_size": batch_size,
        "hidden": hidden,
        "optimizer": optimizer,
        "lr": lr,
        "ratio": ratio,
        "powersgd_rank": powersgd_rank,
        "period": period,
        "seed": seed,
        "momentum": momentum,
    }
    for key, check in (("ratio", _ratio), ("powersgd_rank", _powersgd_rank), ("period", _period)):
        check(shared[key])
    arguments.integer("world_size", world_size, minimum=2)
    return compare_variants({m: {"method": m, **shared} for m in methods}, world_size, steps, timeout=timeout)
