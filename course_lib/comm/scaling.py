"""A real data-parallel training step on local ranks, timed in parts (notebook 03, section 7).

* ``data_parallel_benchmark``: the worker. Each rank trains its own copy of an MLP on its own batch
  (``train.train_step``); between the backward pass and the update, the ranks wait for each
  other, then the gradients are copied into one flat buffer, summed over the ranks with one
  ``dist.all_reduce``, divided by the number of ranks and copied back, so every copy of the model
  takes the same step. It times the whole step, the compute, the wait, the copies and the all-reduce,
  and, between steps, the same all-reduce alone (the control for the step's own).
* ``measure_data_parallel``: runs the worker on ``world_size`` ranks, where rank 0 also takes
  steps alone between the data-parallel ones (so the machine's drift hits both), and returns what
  ``comm.data_parallel_speedup`` needs next to what happened: one rank's compute time, the
  gradient bytes, the measured step time, speed-up and share of the step spent in the all-reduce.

PyTorch's ``DistributedDataParallel`` does the same all-reduce in buckets that overlap with the
backward pass (module 06); here nothing overlaps, which is what the simple model assumes.
"""

from __future__ import annotations

import copy
import inspect
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from .. import arguments, models, seeds, train
from ..timing import representative
from .collectives import bytes_written
from .launcher import launch, rank_info

__all__ = [
    "KERNEL_LAUNCH_S",
    "data_parallel_benchmark",
    "measure_data_parallel",
    "one_rank_step_time",
    "step_operations",
]

# A CUDA kernel launch costs a few microseconds of host time (Gray, 2019, "Getting Started with CUDA Graphs",
# NVIDIA Developer Blog): a floor under a GPU step of many small kernels, whatever the chip's FLOP/s.
KERNEL_LAUNCH_S = 4e-6


class _GradientAverager:
    """``before_update`` hook: wait for every rank, copy all gradients into one flat buffer, sum it over the
    ranks in one all-reduce, divide by the number of ranks and copy back. The buffer is kept between
    steps, as DDP keeps its buckets. Times the wait, the copies and the all-reduce apart."""

    def __init__(self, world: int, skip: frozenset[int] = frozenset(), divide: bool = True) -> None:
        self.world = world
        self.skip = skip  # indices of parameters left out of the all-reduce: a deliberate bug
        self.divide = divide  # False: gradients summed, not averaged (a forgotten 1/N): a deliberate bug
        self.buffer: torch.Tensor | None = None
        self.wait_s: list[float] = []
        self.copy_s: list[float] = []
        self.comm_s: list[float] = []
        self.sent: list[int | None] = []  # bytes this rank wrote during each all-reduce (None: not counted here)
        self.entered = self.left = 0.0  # when the last call began and ended (perf_counter)

    def __call__(self, model: torch.nn.Module) -> None:
        self.entered = time.perf_counter()
        if self.world == 1:
            self.left = self.entered
            for times in (self.wait_s, self.copy_s, self.comm_s):
                times.append(0.0)
            self.sent.append(0)
            return
        t0 = self.entered
        dist.barrier()  # time spent waiting for the slowest rank is not the link's
        t1 = time.perf_counter()
        grads = [p.grad for i, p in enumerate(model.parameters()) if p.grad is not None and i not in self.skip]
        if self.buffer is None:
            self.buffer = torch.empty(sum(g.numel() for g in grads), dtype=grads[0].dtype, device=grads[0].device)
        torch.cat([g.reshape(-1) for g in grads], out=self.buffer)
        written = bytes_written() if self.buffer.device.type == "cpu" else None  # gloo's bytes: the kernel counts them
        t2 = time.perf_counter()
        dist.all_reduce(self.buffer)
        t3 = time.perf_counter()
        after = bytes_written() if written is not None else None
        self.sent.append(after - written if after is not None else None)
        if self.divide:
            self.buffer /= self.world
        offset = 0
        for g in grads:
            g.copy_(self.buffer[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        t4 = self.left = time.perf_counter()
        self.wait_s.append(t1 - t0)
        self.copy_s.append(t2 - t1 + t4 - t3)
        self.comm_s.append(t3 - t2)


def _check_config(in_features: int, hidden: int, layers: int, batch_size: int, steps: int, warmup: int) -> None:
    for name, value in (
        ("in_features", in_features),
        ("hidden", hidden),
        ("layers", layers),
        ("batch_size", batch_size),
        ("steps", steps),
    ):
        arguments.positive_int(name, value)
    arguments.nonnegative_int("warmup", warmup)


def _job(in_features: int, hidden: int, layers: int, batch_size: int, seed: int, info: dict):
    """One rank's side of the data-parallel job: the model (the same initial weights on every rank), a batch of
    its own, and a copy of the model with its optimizer that rank 0 trains alone for the one-rank baseline."""
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = models.MLP(in_features, [hidden] * layers, 10).to(info["device"])
    batch = _rank_batch(seed, info["rank"], batch_size, in_features)  # but a batch of its own
    solo_model = copy.deepcopy(model)
    return model, batch, solo_model, train.make_optimizer("sgd", solo_model.parameters(), lr=0.01)


def _solo_step(rank: int, solo_model: torch.nn.Module, batch, solo_opt, solo_s: list[float]) -> None:
    """Two steps alone on rank 0 while the others wait at the barrier, the second timed: a process training alone
    steps back to back, its weights warm in the caches, not one step after the job's."""
    dist.barrier()
    if rank == 0:
        train.train_step(solo_model, batch, solo_opt)
        start = time.perf_counter()
        train.train_step(solo_model, batch, solo_opt)
        solo_s.append(time.perf_counter() - start)
    dist.barrier()  # ... then one data-parallel step on every rank


def _checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def data_parallel_benchmark(
    in_features: int = 512,
    hidden: int = 1024,
    layers: int = 3,
    batch_size: int = 32,
    steps: int = 6,
    warmup: int = 2,
    seed: int = 0,
    skip_layer: int | None = None,
    sum_not_mean: bool = False,
    partner_idle: bool = False,
) -> dict[str, Any]:
    """Time data-parallel training steps of an MLP on this rank; run it under :func:`launch`.

    Every rank starts from the same weights (``seed``) and draws its own batch of ``batch_size``
    random examples (weak scaling: the global batch is ``batch_size`` x the number of ranks). A
    barrier starts each step on all ranks together. Before each data-parallel step, rank 0 takes one
    step alone on a copy of the model while the other ranks wait (the one-rank baseline, measured
    under the same conditions); after each, all ranks time one all-reduce of ``n_params`` float32 values
    alone (``"alone_s"``: the control for the step's own). Returns this rank's ``{"rank", "world_size",
    "step_s", "comm_s", "alone_s", "wait_s", "copy_s", "solo_s", "sent_bytes",
    "compute_s", "grad_bytes", "n_params", "checksum"}``: the step times, their
    all-reduce parts, the bytes this rank wrote during each of them (``sent_bytes``; None where the system does not
    count them), the compute inside each step (forward and backward up to the all-reduce hook, plus the
    update after it, timed), the time spent waiting for the slowest rank before the all-reduce (a barrier),
    copying the gradients into the flat buffer, dividing and copying back, and (rank 0 only) the
    steps alone (lists, ``warmup`` steps dropped), the bytes all-reduced per
    step, and a checksum of the weights after training (equal on every rank when the gradients were
    really averaged). It also returns ``"max_weight_diff"``, the largest absolute difference between this
    rank's weights and rank 0's over every parameter after training (0 where every gradient was averaged),
    and ``"one_tensor_divergence"``, a control measured on the same model: the smallest, over the parameter
    tensors, of how far one step would move a rank's copy of that tensor away from the others had the tensor
    been left out of the all-reduce (the learning rate times the largest difference between the rank's own
    gradient and the average).

    ``"diff_from_one_process"`` is the largest difference, over ranks and parameters, between the weights
    after training and those of ONE process that took the same steps from the same start on all ranks'
    batches concatenated, with the mean loss: what data parallelism must reproduce (up to the order of
    float additions). ``"sum_not_mean_diff"`` is its control, measured in the same run: how far that one
    process lands when its gradients are multiplied by the number of ranks (summed, not averaged).
    ``"diff_over_sum_not_mean"`` judges the two tensor by tensor: the largest, over the parameter tensors,
    of this run's difference over the control's (1 when the gradients were summed; a skipped layer shows
    in its own tensors even where the head's larger steps dominate the whole-model maximum).

    ``partner_idle=True`` is a control for rank 0's compute: every other rank computes its gradients once, then
    in each step only waits, copies and all-reduces them (the same traffic, no forward, backward or update), so
    rank 0 computes beside ranks that move the step's bytes but do not compute. The weights then differ between
    ranks: only the times mean anything.

    ``skip_layer`` (an index among the model's ``Linear`` layers) leaves that layer's weight and bias out of
    the all-reduce, and ``sum_not_mean=True`` forgets the division by the number of ranks (every rank still
    ends with the same weights): the bugs the comparison with one process must catch, which the all-reduce
    time hardly shows.
    """
    _check_config(in_features, hidden, layers, batch_size, steps, warmup)
    info = rank_info()
    rank, world = info["rank"], info["world_size"]
    for name, flag in (("sum_not_mean", sum_not_mean), ("partner_idle", partner_idle)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    model, batch, solo_model, solo_opt = _job(in_features, hidden, layers, batch_size, seed, info)
    start_weights = copy.deepcopy(model.state_dict())
    opt = train.make_optimizer("sgd", model.parameters(), lr=0.01)
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if skip_layer is not None and not (isinstance(skip_layer, int) and 0 <= skip_layer < len(linear)):
        raise ValueError(
            f"skip_layer must be None or a Linear layer's index, 0 to {len(linear) - 1}; got {skip_layer!r}"
        )
    skipped = {id(p) for p in linear[skip_layer].parameters()} if skip_layer is not None else set()
    average = _GradientAverager(
        world, frozenset(i for i, p in enumerate(model.parameters()) if id(p) in skipped), divide=not sum_not_mean
    )
    step_s: list[float] = []
    solo_s: list[float] = []
    alone_s: list[float] = []  # the control: the same bytes all-reduced between steps, nothing else running
    alone = torch.zeros(models.count_parameters(model), device=info["device"])  # float32: 4 bytes a parameter
    compute_s: list[float] = []  # forward + backward before the hook, update after it: timed, not inferred
    for _ in range(warmup + steps):
        _solo_step(rank, solo_model, batch, solo_opt, solo_s)
        start = time.perf_counter()
        if partner_idle and rank != 0:  # the control: this rank's traffic alone, on gradients computed once
            if all(p.grad is None for p in model.parameters()):
                torch.nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
            average(model)
        else:
            train.train_step(model, batch, opt, before_update=average)
        end = time.perf_counter()
        step_s.append(end - start)
        compute_s.append((average.entered - start) + (end - average.left))
        dist.barrier()  # the control, in turns with the steps so drift hits both: one all-reduce, as benchmarked,
        alone.fill_(1.0)  # after writing its buffer, as the step writes its own between its barrier and all-reduce
        start = time.perf_counter()
        dist.all_reduce(alone)
        alone_s.append(time.perf_counter() - start)
    n_params = models.count_parameters(model)
    max_diff, divergence = _weights_apart(model, batch, lr=0.01)
    from_one, sum_diff, over_sum = _against_one_process(
        model, start_weights, seed, batch_size, in_features, warmup + steps
    )
    checksum = _checksum(model)
    return {
        "rank": rank,
        "world_size": world,
        "step_s": step_s[warmup:],
        "comm_s": average.comm_s[warmup:],
        "alone_s": alone_s[warmup:],
        "wait_s": average.wait_s[warmup:],
        "copy_s": average.copy_s[warmup:],
        "sent_bytes": average.sent[warmup:],
        "solo_s": solo_s[warmup:],
        "compute_s": compute_s[warmup:],
        "grad_bytes": 4 * n_params,
        "n_params": n_params,
        "checksum": checksum,
        "max_weight_diff": max_diff,
        "one_tensor_divergence": divergence,
        "diff_from_one_process": from_one,
        "sum_not_mean_diff": sum_diff,
        "diff_over_sum_not_mean": over_sum,
    }


def ddp_benchmark(
    in_features: int = 512,
    hidden: int = 1024,
    layers: int = 3,
    batch_size: int = 32,
    steps: int = 6,
    warmup: int = 2,
    seed: int = 0,
) -> dict[str, Any]:
    """The data-parallel job of :func:`data_parallel_benchmark` under PyTorch's ``DistributedDataParallel``: gradients
    summed in buckets while the backward pass runs, averaged as they are copied in, the buckets' memory shared with the
    gradients (``gradient_as_bucket_view=True``), no barrier. Run it under :func:`launch`. As there, rank 0 takes
    two steps alone on a copy of the model before each data-parallel step (the second timed: the one-rank baseline).
    Returns this rank's ``{"rank", "step_s", "solo_s", "checksum"}`` (``warmup`` steps dropped)."""
    from torch.nn.parallel import DistributedDataParallel

    _check_config(in_features, hidden, layers, batch_size, steps, warmup)
    info = rank_info()
    model, batch, solo_model, solo_opt = _job(in_features, hidden, layers, batch_size, seed, info)
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
    opt = train.make_optimizer("sgd", ddp.parameters(), lr=0.01)
    step_s: list[float] = []
    solo_s: list[float] = []
    for _ in range(warmup + steps):
        _solo_step(info["rank"], solo_model, batch, solo_opt, solo_s)  # then a step with no barrier of its own
        start = time.perf_counter()
        train.train_step(ddp, batch, opt)
        step_s.append(time.perf_counter() - start)
    return {"rank": info["rank"], "step_s": step_s[warmup:], "solo_s": solo_s[warmup:], "checksum": _checksum(model)}


def measure_ddp(world_size: int = 2, **config: Any) -> dict[str, Any]:
    """:func:`ddp_benchmark` on ``world_size`` ranks, one thread each (notebook 03, section 7: the same job as
    :func:`measure_data_parallel`, under PyTorch's DDP). Returns ``{"compute_s": one rank's step alone, "step_s": a
    step on every rank (the slowest rank's low quantile), "speedup": world_size x compute_s / step_s, "same_weights":
    every rank ended with the same weights}``."""
    world_size = arguments.integer("world_size", world_size, minimum=2)
    _checked_config(config, ddp_benchmark)
    ranks = launch(ddp_benchmark, world_size, threads_per_rank=1, **config)
    compute = representative(ranks[0]["solo_s"])
    step = max(representative(r["step_s"]) for r in ranks)
    return {
        "compute_s": compute,
        "step_s": step,
        "speedup": world_size * compute / step,
        "same_weights": len({r["checksum"] for r in ranks}) == 1,
    }


def _rank_batch(seed: int, rank: int, batch_size: int, in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seeds.derive(seed, "rank", rank))
    return torch.randn(batch_size, in_features, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def _against_one_process(
    model: torch.nn.Module, start: dict, seed: int, batch_size: int, in_features: int, steps: int
) -> tuple[float, float, float]:
    """Rank 0 trains two copies from ``start`` alone on every rank's batch concatenated (mean loss): one as
    data parallelism should (the reference), one with its gradients times the number of ranks (the
    sum-not-mean control). Returns, over ranks and parameters, max |w - reference|, max |control -
    reference|, and the largest, over parameter tensors, of max |w - reference| / max |control - reference|
    (1 for summed gradients; a layer left out of the average shows in its own tensors, however small)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    sizes = [p.numel() for p in model.parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref, control = torch.empty_like(flat), torch.zeros(len(sizes), dtype=flat.dtype, device=flat.device)
    if rank == 0:
        parts = [_rank_batch(seed, r, batch_size, in_features) for r in range(world)]
        whole = (torch.cat([x for x, _ in parts]).to(flat.device), torch.cat([y for _, y in parts]).to(flat.device))
        trained = []
        for factor in (1.0, float(world)):
            one = copy.deepcopy(model)
            one.load_state_dict(start)
            opt = train.make_optimizer("sgd", one.parameters(), lr=0.01)

            def scale(m: torch.nn.Module, f: float = factor) -> None:
                for p in m.parameters():
                    p.grad.mul_(f)

            for _ in range(steps):
                train.train_step(one, whole, opt, before_update=scale if factor != 1 else None)
            trained.append(torch.cat([p.detach().reshape(-1) for p in one.parameters()]))
        ref.copy_(trained[0])
        control.copy_(torch.stack([d.abs().max() for d in torch.split(trained[1] - trained[0], sizes)]))
    dist.broadcast(ref, 0)
    dist.broadcast(control, 0)
    apart = torch.stack([d.abs().max() for d in torch.split(flat - ref, sizes)])
    out = torch.stack([apart.max(), control.max(), (apart / control.clamp_min(1e-30)).max()]).double()
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return float(out[0]), float(out[1]), float(out[2])


def _weights_apart(model: torch.nn.Module, batch: tuple, lr: float) -> tuple[float, float]:
    """After training: the largest difference from rank 0's weights over every parameter (MAX over ranks),
    and the control: lr x max |own gradient - average| of the least-diverging parameter tensor, on one more
    backward pass of this rank's batch (MIN over tensors, MAX over ranks)."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    diff = (flat - ref).abs().max().reshape(1)
    model.zero_grad(set_to_none=True)
    train.default_loss(model(batch[0]), batch[1]).backward()
    grads = [p.grad.detach().reshape(-1) for p in model.parameters()]
    own = torch.cat(grads)
    avg = own.clone()
    dist.all_reduce(avg)
    avg /= dist.get_world_size()
    sizes = [g.numel() for g in grads]
    apart = torch.stack([d.abs().max() for d in torch.split(own - avg, sizes)]).min().reshape(1) * lr
    both = torch.cat([diff, apart]).double()
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return float(both[0]), float(both[1])


def _checked_config(config: dict, benchmark=None) -> dict:
    """``config`` checked against ``benchmark``'s arguments (:func:`data_parallel_benchmark` by default), with
    its defaults filled in."""
    benchmark = benchmark or data_parallel_benchmark
    unknown = set(config) - set(inspect.signature(benchmark).parameters)
    if unknown:
        raise TypeError(f"unknown argument(s) {sorted(unknown)} for {benchmark.__name__}")
    defaults = {k: v.default for k, v in inspect.signature(benchmark).parameters.items()}
    settings = {**defaults, **config}
    _check_config(*(settings[k] for k in ("in_features", "hidden", "layers", "batch_size", "steps", "warmup")))
    return settings


def one_rank_step_time(**config: Any) -> float:
    """One rank's step alone, *C* in notebook 03's data-parallel model, timed exactly as
    :func:`measure_data_parallel` times its baseline (rank 0's steps alone, two back to back, the second timed; a
    low quantile over the steps), in a fresh one-thread process with no other rank beside it: the number a learner
    reads before the job. ``config`` goes to :func:`data_parallel_benchmark`. Seconds."""
    _checked_config(config)
    ranks = launch(data_parallel_benchmark, 1, threads_per_rank=1, **config)
    return representative(ranks[0]["solo_s"])


def measure_data_parallel(world_size: int = 2, **config: Any) -> dict[str, Any]:
    """Measure data-parallel training on ``world_size`` ranks against one rank, one thread each.
    Notebook 03 (interconnect), section "how far does data parallelism scale".

    Launches :func:`data_parallel_benchmark` (``config`` goes to it) on ``world_size`` ranks with one
    thread per rank (one core per rank, so one rank alone on one core is the fair baseline). Steps
    alone on rank 0 (two back to back, the second timed: warm, as in a training loop) alternate with
    data-parallel steps, so the machine's drift hits both alike.
    Times are low quantiles over the steps; a data-parallel step takes as long as its slowest rank.
    Returns::

        {"compute_s": one rank's step alone (nothing to communicate),
         "step_s": a step on world_size ranks, "comm_s": its all-reduce part (slowest rank),
         "comm_alone_s": the control: an all-reduce of the same number of float32 values timed between the
         steps (a barrier, then nothing else), as the benchmark of section 5 times it, in the same job,
         "comm_over_alone": the median over steps of the step's all-reduce / the control after it (slowest ranks),
         "wait_s": waiting for the slowest rank before the all-reduce,
         "copy_s": copying gradients to the flat buffer and back, and dividing,
         "compute_in_job_s": forward + backward + update inside a data-parallel step (timed; slowest rank),
         "split_s": the slowest rank's step split into {"compute", "wait", "copy", "comm"}: each part's share
         of that rank's summed step times, times step_s, so the parts add up to step_s (the low quantiles
         above, taken part by part, need not),
         "grad_bytes", "n_params", "world_size",
         "speedup": world_size * compute_s / step_s (examples per second against one rank),
         "comm_share": comm_s / step_s, "same_weights": every rank ended with the same weights,
         "sent_per_grad_byte": bytes the busiest rank wrote during a step's all-reduce over the gradients' bytes
         (the median over steps; None where the system does not count them, or off the CPU),
         "max_weight_diff", "one_tensor_divergence": the largest difference between ranks, and its control,
         "diff_from_one_process": the largest difference from one process trained on all the batches
         (mean loss), "sum_not_mean_diff": its control, that one process with gradients summed,
         "diff_over_sum_not_mean": the largest, over parameter tensors, of the first over the second}
    """
    world_size = arguments.integer("world_size", world_size, minimum=2)
    settings = _checked_config(config)
    skip = settings["skip_layer"]
    if skip is not None and not (
        isinstance(skip, int) and not isinstance(skip, bool) and 0 <= skip <= settings["layers"]
    ):
        raise ValueError(f"skip_layer must be None or a Linear layer's index, 0 to {settings['layers']}; got {skip!r}")
    for name in ("sum_not_mean", "partner_idle"):
        if not isinstance(settings[name], bool):
            raise TypeError(f"{name} must be True or False, got {settings[name]!r}")
    ranks = launch(data_parallel_benchmark, world_size, threads_per_rank=1, **config)
    compute = representative(ranks[0]["solo_s"])
    step = max(representative(r["step_s"]) for r in ranks)
    comm_s = max(representative(r["comm_s"]) for r in ranks)
    alone_s = max(representative(r["alone_s"]) for r in ranks)
    paired = [
        max(r["comm_s"][i] for r in ranks) / max(r["alone_s"][i] for r in ranks) for i in range(len(ranks[0]["comm_s"]))
    ]
    wait_s = max(representative(r["wait_s"]) for r in ranks)
    copy_s = max(representative(r["copy_s"]) for r in ranks)
    in_job = max(representative(r["compute_s"]) for r in ranks)
    counted = [b for r in ranks for b in r["sent_bytes"]]
    sent = (
        statistics.median(max(r["sent_bytes"][i] for r in ranks) for i in range(len(ranks[0]["sent_bytes"])))
        / ranks[0]["grad_bytes"]
        if counted and all(b is not None for b in counted)
        else None
    )
    slowest = max(ranks, key=lambda r: representative(r["step_s"]))
    total = sum(slowest["step_s"])
    split = {k: step * sum(slowest[f"{k}_s"]) / total for k in ("compute", "wait", "copy", "comm")}
    return {
        "compute_s": compute,
        "step_s": step,
        "comm_s": comm_s,
        "comm_alone_s": alone_s,
        "comm_over_alone": statistics.median(paired),
        "wait_s": wait_s,
        "copy_s": copy_s,
        "compute_in_job_s": in_job,
        "split_s": split,
        "grad_bytes": ranks[0]["grad_bytes"],
        "n_params": ranks[0]["n_params"],
        "world_size": world_size,
        "speedup": world_size * compute / step,
        "comm_share": comm_s / step,
        "sent_per_grad_byte": sent,
        "same_weights": len({r["checksum"] for r in ranks}) == 1,
        "max_weight_diff": max(r["max_weight_diff"] for r in ranks),
        "one_tensor_divergence": max(r["one_tensor_divergence"] for r in ranks),
        "diff_from_one_process": max(r["diff_from_one_process"] for r in ranks),
        "sum_not_mean_diff": ranks[0]["sum_not_mean_diff"],
        "diff_over_sum_not_mean": max(r["diff_over_sum_not_mean"] for r in ranks),
    }


class _OpCounter(TorchDispatchMode):
    """Counts the ATen operations that compute something (views excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.count += 1
        return func(*args, **(kwargs or {}))


def step_operations(in_features: int = 512, hidden: int = 1024, layers: int = 3, batch_size: int = 32) -> int:
    """The ATen operations (views excluded) of one SGD training step of :func:`data_parallel_benchmark`'s MLP,
    counted on the CPU: on a GPU each launches about one kernel, so ``step_operations() * KERNEL_LAUNCH_S`` is
    a floor under its step time. Notebook 03, section 7."""
    _check_config(in_features, hidden, layers, batch_size, 1, 0)
    model = models.MLP(in_features, [hidden] * layers, 10)
    opt = train.make_optimizer("sgd", model.parameters(), lr=0.01)
    batch = _rank_batch(0, 0, batch_size, in_features)
    loss_fn = torch.nn.CrossEntropyLoss()
    train.train_step(model, batch, opt, loss_fn)  # the first step creates the gradients
    with _OpCounter() as counter:
        train.train_step(model, batch, opt, loss_fn)
    return counter.count
