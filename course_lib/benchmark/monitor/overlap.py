"""Data parallelism by hand beside ``DistributedDataParallel`` on two CPU ranks: how much of the gradient
exchange each hides under the backward computation (notebook 07.2)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

from torch import nn

from ... import arguments, models, seeds
from ...seeds import seed_everything
from .scenarios import _random_batches


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def hidden_share(comm: list[tuple[float, float]], compute: tuple[float, float]) -> tuple[float, float]:
    """(seconds of communication in flight, the share of them inside ``compute``), from (start, end) intervals.

    The communication intervals are merged first (buckets queued behind each other count once). Notebook
    07.2, "DDP overlaps, by hand does not". A share of 0 means nothing was hidden under the computation."""
    if not isinstance(compute, tuple) or len(compute) != 2 or compute[1] < compute[0]:
        raise ValueError(f"compute must be a (start, end) tuple with end >= start, got {compute!r}")
    for iv in comm:
        if not isinstance(iv, tuple) or len(iv) != 2 or iv[1] < iv[0]:
            raise ValueError(f"comm must hold (start, end) tuples with end >= start, got {iv!r}")
    merged = _union(comm)
    total = sum(b - a for a, b in merged)
    inside = sum(max(0.0, min(b, compute[1]) - max(a, compute[0])) for a, b in merged)
    return total, (inside / total if total > 0 else 0.0)


def ddp_overlap_worker(
    width: int = 2048, batch: int = 4, steps: int = 3, seed: int = 0, bucket_cap_mb: float = 4.0
) -> dict[str, Any]:
    """One rank (of 2, gloo) comparing data parallelism by hand with ``DistributedDataParallel`` on the
    "tiny-batch-ddp" model, steps interleaved (hand, DDP, hand, DDP, ...).

    By hand: forward, backward, then one blocking ``all_reduce`` per gradient tensor: nothing can overlap.
    DDP: gradients grouped into buckets of ``bucket_cap_mb`` MB, each bucket's all-reduce launched by a
    comm hook as soon as its last gradient is ready, while backward goes on. DDP fills buckets in the order
    backward produces the gradients (last layer first) and closes a bucket once it passes its cap, so a tensor
    larger than the cap ends a bucket with it; the first bucket's cap is 1 MB (``dist._DEFAULT_FIRST_BUCKET_BYTES``),
    so that the first all-reduce starts early. Here (21 MB: a 16.8 MB and a 4.2 MB weight) that gives 2 buckets,
    16.9 MB (the last two layers) and 4.2 MB (the first), with the 4 MB cap or DDP's default of 25 MB alike. The hook
    records each
    bucket's launch and completion; the backward computation ends when the last bucket is launched
    (it holds the first layer, computed last). Returned per method, medians over ``steps``: ``step_s``,
    ``compute_s`` (forward and backward computation), ``backward_s`` (the backward computation alone: the
    most communication that could hide under it), ``comm_s`` (communication in flight),
    ``hidden`` (its share inside the backward computation), ``buckets``.
    """
    import statistics

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed_everything(seed)
    world, rank = dist.get_world_size(), dist.get_rank()
    hand = models.MLP(512, [width, width], 10)
    ddp_inner = models.MLP(512, [width, width], 10)
    ddp_inner.load_state_dict(hand.state_dict())
    ddp = DDP(ddp_inner, bucket_cap_mb=bucket_cap_mb)
    events: list[list[float]] = []

    def hook(state, bucket):
        rec = [time.perf_counter(), math.nan]
        events.append(rec)
        fut = dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()

        def done(f):
            rec[1] = time.perf_counter()
            return f.value()[0]

        return fut.then(done)

    ddp.register_comm_hook(None, hook)
    loss_fn = nn.CrossEntropyLoss()
    batches = _random_batches(steps + 1, batch, 512, 10, seeds.derive(seed, "rank", rank))
    rows: dict[str, list[dict]] = {"by hand": [], "DDP": []}
    for i, (x, y) in enumerate(batches):
        for name, model in (("by hand", hand), ("DDP", ddp)):
            model.zero_grad(set_to_none=True)
            events.clear()
            dist.barrier()
            t0 = time.perf_counter()
            loss = loss_fn(model(x), y)
            tb = time.perf_counter()
            loss.backward()
            t_ret = time.perf_counter()
            if name == "by hand":
                comm = []
                for p in model.parameters():
                    a = time.perf_counter()
                    dist.all_reduce(p.grad)
                    comm.append((a, time.perf_counter()))
                    p.grad.div_(world)
                compute_end, t_end = t_ret, time.perf_counter()
            else:
                comm = [(a, b) for a, b in events]
                compute_end, t_end = max(a for a, _ in comm), t_ret
            total, share = hidden_share(comm, (tb, compute_end))
            if i:  # the first step of each warms up
                rows[name].append(
                    {
                        "step_s": t_end - t0,
                        "compute_s": compute_end - t0,
                        "backward_s": compute_end - tb,
                        "comm_s": total,
                        "hidden": share,
                        "buckets": len(comm),
                    }
                )
    # medians over the steps, not timing.representative for the times: "hidden" is a share, not a time, and
    # notebook 07.2 prints the step, backward and communication times beside it from the same steps
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in rows.items()}
    return {
        "rank": rank,
        "batch": batch,
        "bucket_cap_mb": bucket_cap_mb,
        "per_method": med,
        "steps": {name: rs for name, rs in rows.items()},
        "grad_bytes": sum(p.numel() * 4 for p in hand.parameters()),
    }


def ddp_overlap(
    *, batches: Iterable[int] = (4, 256), steps: int = 3, seed: int = 0, bucket_cap_mb: float = 4.0
) -> list[dict[str, Any]]:
    """Run :func:`ddp_overlap_worker` on 2 CPU processes (gloo) for each batch size; rank 0's results, with
    rank 1's as ``other_rank``. Notebook 07.2, "DDP overlaps, by hand does not"."""
    from ...comm import launch

    batches = [arguments.positive_int("batches", b) for b in batches]
    if not batches:
        raise ValueError("batches must name at least one batch size, got none")
    steps = arguments.positive_int("steps", steps)
    bucket_cap_mb = arguments.positive("bucket_cap_mb", bucket_cap_mb)
    out = []
    for b in batches:
        ranks = launch(
            ddp_overlap_worker,
            2,
            batch=b,
            steps=steps,
            seed=seed,
            bucket_cap_mb=bucket_cap_mb,
            timeout=180,
            threads_per_rank=1,
        )
        out.append(ranks[0] | {"other_rank": ranks[1]})
    return out
