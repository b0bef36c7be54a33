"""Training steps built to have a known bottleneck (a slow input pipeline, big matrix products, a two-rank
gradient exchange), profiled with what a prediction of each needs (notebook 07.2)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ... import arguments, data, models, seeds, train
from ...hardware import as_device, synchronize
from ...seeds import seed_everything
from .profiler import StepProfile, profile_training_step
from .resources import data_dir


@dataclass(frozen=True)
class Scenario:
    """A training step built so that one category dominates."""

    name: str
    designed: str  # the category the design makes the bottleneck (notebook 07.2 reveals it after the guesses)
    what: str  # what the step does, in one sentence, without naming its bottleneck


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "slow-input",
            "input",
            "the DataLoader (no workers) blurs every 32x32 image 5 times with a 5x5 "
            "convolution; the model is an MLP 1024 -> 64 -> 10",
        ),
        Scenario(
            "big-matmuls",
            "compute",
            "an MLP 1024 -> 2048 -> 2048 -> 10 on batches of 256 already in memory: "
            "8.6 GFLOP of matrix products per step (forward 3.2, backward 5.4: the input needs no gradient)",
        ),
        Scenario(
            "tiny-batch-ddp",
            "communication",
            "two processes (gloo) each train an MLP 512 -> 2048 -> 2048 -> 10 "
            "(5.3 M parameters) on batches of 4 and all-reduce its 21 MB of gradients every step",
        ),
    )
}


def _random_batches(n: int, batch: int, features: int, classes: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, features, generator=g), torch.randint(0, classes, (batch,), generator=g)) for _ in range(n)
    ]


def _time_items(ds: torch.utils.data.Dataset, batch: int, repeats: int = 3) -> float:
    """Seconds per item: the best of ``repeats`` timings of ``batch`` items fetched one after another,
    after one untimed item (the first call sets the kernels up). The best, because another program can
    only make a timing slower."""
    # the fastest of 3, not timing.representative (which lies between the fastest and the second of 3): notebook
    # 07.2 states "best of 3" for this and the other three timings of run_scenario, and judges them against profiles
    ds[0]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(batch):
            ds[i % len(ds)]
        best = min(best, time.perf_counter() - t0)
    return best / batch


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_flops(batch: int, widths: list[int]) -> int:
    """The matrix-product FLOPs of one training step of an MLP with these layer ``widths`` (notebook
    07.2, "Big matrix products"): per layer of ``a x b`` weights, 2·batch·a·b for the forward product
    and as much for each of the backward pass's two products, the weights' gradient (dW) and the
    input's gradient (dX); the first layer skips dX, because the input batch needs no gradient.
    In all 2·batch·(3·ΣW - W1): backward does (2·ΣW - W1)/ΣW times the forward work, not twice it."""
    batch = arguments.positive_int("batch", batch)
    if not isinstance(widths, (list, tuple)) or len(widths) < 2:
        raise ValueError(f"widths must be a list of at least 2 layer widths (input ... output), got {widths!r}")
    sizes = [
        arguments.positive_int("widths", w) * arguments.positive_int("widths", v) for w, v in zip(widths, widths[1:])
    ]
    return 2 * batch * (3 * sum(sizes) - sizes[0])


def _bare_matmul_seconds(
    batch: int, widths: list[int], repeats: int = 3, device: torch.device | None = None
) -> tuple[float, float]:
    """Best times (forward, backward) of one step's matrix products run alone, in the shapes autograd
    uses (weights stored out x in as in ``nn.Linear``): forward x @ W.T; backward dW = g.T @ x and,
    except for the first layer, dX = g @ W. The compute model behind ``step_flops``."""
    device = device if device is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(1)
    layers = [
        (
            torch.randn(batch, a, generator=g).to(device),
            torch.randn(b, a, generator=g).to(device),
            torch.randn(batch, b, generator=g).to(device),
        )
        for a, b in zip(widths, widths[1:])
    ]

    def forward() -> None:
        for x, w, _ in layers:
            x @ w.t()

    def backward() -> None:
        for i, (x, w, gout) in enumerate(layers):
            gout.t() @ x
            if i > 0:
                gout @ w

    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for k, fn in enumerate((forward, backward)):
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            best[k] = min(best[k], time.perf_counter() - t0)
    return best[0], best[1]


def _allreduce_grads(model: nn.Module) -> None:
    import torch.distributed as dist

    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def communication_worker(
    width: int = 2048, batch: int = 4, steps: int = 3, seed: int = 0, trace_dir: str | None = None
) -> dict[str, Any]:
    """One rank of the "tiny-batch-ddp" scenario, run by ``comm.launch``: data
    parallelism by hand (every gradient all-reduced, then averaged) on a large MLP and a tiny batch.
    Also times a bare all-reduce of the same gradients, for the prediction."""
    import torch.distributed as dist

    seed_everything(seed)
    rank = dist.get_rank()
    model = models.MLP(512, [width, width], 10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = _random_batches(steps + 1, batch, 512, 10, seeds.derive(seed, "rank", rank))
    prof = profile_training_step(
        model,
        batches,
        opt,
        steps=steps,
        warmup=1,
        communicate=_allreduce_grads,
        trace_dir=trace_dir,
        trace_name=f"tiny-batch-ddp-rank{rank}",
    )
    grads = [torch.ones_like(p) for p in model.parameters()]
    best = float("inf")
    for _ in range(3):
        dist.barrier()
        t0 = time.perf_counter()
        for g in grads:
            dist.all_reduce(g)
        best = min(best, time.perf_counter() - t0)
    prof.extra.update(
        allreduce_s=best,
        grad_bytes=sum(g.numel() * 4 for g in grads),
        params=models.count_parameters(model),
        world_size=dist.get_world_size(),
        batch=batch,
    )
    return prof.to_dict() | {"rank": rank}


def _from_dict(d: dict[str, Any]) -> StepProfile:
    keys = StepProfile.__dataclass_fields__
    return StepProfile(**{k: v for k, v in d.items() if k in keys})


def run_scenario(
    name: str,
    *,
    steps: int = 5,
    seed: int = 0,
    trace_dir: str | Path | None = None,
    passes: int = 5,
    device: torch.device | str | None = None,
) -> StepProfile:
    """Profile one of ``SCENARIOS`` (notebook 07.2, "Three steps with a known bottleneck").

    ``device`` (default the CPU) is where "slow-input" and "big-matmuls" train: the input pipeline of
    "slow-input" always runs on the CPU, as a DataLoader does; "tiny-batch-ddp" runs two CPU processes
    over gloo on every machine (``device`` other than the CPU is refused there).
    Returns the ``StepProfile`` with ``scenario`` set and, in ``extra``, what a prediction needs:
    "slow-input": ``item_s`` (one image through the transform: the best of 3 timings of 16 images, alone), ``step_s``
    (one training step on a batch already on the device, best of 3), ``batch``;
    "big-matmuls": ``flops`` per step (``step_flops``), ``matmul_s`` (the step's matrix products timed alone, best
    of 3: forward and backward, the sum of ``matmul_forward_s`` and ``matmul_backward_s``);
    "tiny-batch-ddp": ``grad_bytes``, ``allreduce_s`` (a bare all-reduce of the gradients, best of 3), ``params``,
    ``batch``, and rank 1's profile as ``other_rank``.
    """
    arguments.choice("name", name, SCENARIOS)
    steps = arguments.positive_int("steps", steps)
    passes = arguments.positive_int("passes", passes)
    device = as_device(device)
    if name == "tiny-batch-ddp" and device.type != "cpu":
        raise ValueError(f"device must be 'cpu' for tiny-batch-ddp (two CPU processes over gloo), got {device}")
    seed_everything(seed)
    trace_dir = str(trace_dir) if trace_dir is not None else str(data_dir("traces"))
    if name == "slow-input":
        ds = data.CostlyTransformDataset(n=16 * (steps + 1), size=32, passes=passes, seed=seed)
        loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=False)
        model = models.MLP(32 * 32, 64, 10).to(device)
        flat = ((x.flatten(1), y) for x, y in loader)  # train_step moves each batch to the model's device
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        item_s = _time_items(ds, 16)
        prof = profile_training_step(model, flat, opt, steps=steps, trace_dir=trace_dir, trace_name=name)
        ready = (ds.images[:16].flatten(1).to(device), ds.labels[:16].to(device))  # the step alone

        def one_step() -> None:
            train.train_step(model, ready, opt, device=device)
            synchronize(device)

        step_s = min(_timed(one_step) for _ in range(3))
        prof.extra.update(item_s=item_s, step_s=step_s, batch=16, passes=passes)
    elif name == "big-matmuls":
        widths, batch = [1024, 2048, 2048, 10], 256
        model = models.MLP(widths[0], widths[1:-1], widths[-1]).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = [(x.to(device), y.to(device)) for x, y in _random_batches(steps + 1, batch, widths[0], 10, seed)]
        prof = profile_training_step(model, batches, opt, steps=steps, trace_dir=trace_dir, trace_name=name)
        fwd, bwd = _bare_matmul_seconds(batch, widths, device=device)
        prof.extra.update(
            flops=step_flops(batch, widths),
            matmul_s=fwd + bwd,
            matmul_forward_s=fwd,
            matmul_backward_s=bwd,
            batch=batch,
        )
    else:
        from ...comm import launch

        ranks = launch(communication_worker, 2, steps=steps, seed=seed, trace_dir=trace_dir, timeout=120)
        prof = _from_dict(ranks[0])
        prof.extra["other_rank"] = ranks[1]
    prof.scenario = name
    return prof
