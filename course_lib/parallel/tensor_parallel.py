"""Tensor parallelism with DTensor: one MLP block split across ranks (notebook 06.2, section 6).

The block is ``Linear(d, h) -> ReLU -> Linear(h, d)``. ``ColwiseParallel`` gives each of ``p`` ranks
``h / p`` of the first layer's output units (its rows of the weight, and of the bias); ``RowwiseParallel``
gives each the matching ``h / p`` input columns of the second layer. Each rank then computes a partial
sum of the block's output, and one **all-reduce of the activations** (``batch x d`` numbers) adds the
partial sums: once in the forward pass, and once more in the backward pass (the gradient of the input).
That all-reduce sits between two matrix products of every block, so it must be fast next to them:
tensor parallelism wants NVLink-class links inside one machine (:func:`allreduce_vs_compute`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from .. import arguments, catalog, comm
from ..comm import rank_info


class MLPBlock(nn.Module):
    """``up: Linear(dim, hidden) -> ReLU -> down: Linear(hidden, dim)``, the feed-forward block of a
    transformer layer. Seeded: the same weights in every process."""

    def __init__(self, dim: int = 256, hidden: int = 1024, seed: int = 0) -> None:
        super().__init__()
        dim = arguments.positive_int("dim", dim)
        hidden = arguments.positive_int("hidden", hidden)
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        torch.random.set_rng_state(state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def reference(block: MLPBlock, x: torch.Tensor) -> dict[str, Any]:
    """One process: the block's output, its weights' and its input's gradients for the loss
    ``output.square().mean()``, and its parameter bytes (notebook 06.2, section 6)."""
    arguments.instance("block", block, MLPBlock, "an MLPBlock")
    block = copy.deepcopy(block)
    x = x.detach().clone().requires_grad_(True)
    out = block(x)
    out.square().mean().backward()
    return {
        "output": out.detach(),
        "grads": {n: p.grad.detach().clone() for n, p in block.named_parameters()},
        "input_grad": x.grad.detach().clone(),
        "param_bytes": sum(p.numel() * p.element_size() for p in block.parameters()),
    }


def partial_output(block: MLPBlock, x: torch.Tensor, rank: int = 0, world_size: int = 2) -> torch.Tensor:
    """What rank ``rank`` of ``world_size`` would output if the all-reduce were left out: its share of the hidden
    units only, a partial sum (plus the second bias). Notebook 06.2's no-effect case for tensor parallelism."""
    arguments.instance("block", block, MLPBlock, "an MLPBlock")
    world_size = arguments.positive_int("world_size", world_size)
    rank = arguments.nonnegative_int("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank must be below world_size={world_size}, got {rank}")
    hidden = block.up.out_features
    if hidden % world_size:
        raise ValueError(f"the block's {hidden} hidden units do not split evenly over {world_size} ranks")
    part = slice(rank * hidden // world_size, (rank + 1) * hidden // world_size)
    with torch.no_grad():
        h = torch.relu(x @ block.up.weight[part].T + block.up.bias[part])
        return h @ block.down.weight[:, part].T + block.down.bias


def predicted_param_bytes(dim: int, hidden: int, world_size: int, bytes_per_value: int = 4) -> int:
    """Parameter bytes per rank: the two weights and the first bias are split ``world_size`` ways; the
    second layer's bias (``dim`` values) is added once to the summed output, so every rank keeps it whole."""
    p = arguments.positive_int("world_size", world_size)
    if hidden % p:
        raise ValueError(f"hidden={hidden} must be divisible by world_size={p} to split it evenly")
    sharded = dim * hidden + hidden + hidden * dim
    return bytes_per_value * (sharded // p + dim)


def tensor_parallel_step(dim: int, hidden: int, x: torch.Tensor, seed: int = 0) -> dict[str, Any]:
    """Run inside ``comm.launch`` (notebook 06.2, section 6): ``MLPBlock(dim, hidden, seed)``
    parallelised with ``parallelize_module`` (``up``: ``ColwiseParallel``, ``down``: ``RowwiseParallel``)
    on a 1-D device mesh of all ranks; a forward and a backward pass on ``x`` (the same on every rank),
    counting the collectives with ``CommDebugMode``. Returns the output, the full gradients (gathered),
    this rank's parameter bytes, and the collectives of the forward and of the backward pass."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    info = rank_info()
    device = info["device"]
    mesh = init_device_mesh(device.type, (info["world_size"],))
    block = parallelize_module(
        MLPBlock(dim, hidden, seed).to(device), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()}
    )
    local_bytes = sum(
        p.to_local().numel() * p.element_size() if isinstance(p, DTensor) else p.numel() * p.element_size()
        for p in block.parameters()
    )
    x = x.to(device).requires_grad_(True)  # as in a deep model: the input's gradient goes to the layer before
    with CommDebugMode() as fwd_mode:
        out = block(x)
    loss = out.square().mean()
    with CommDebugMode() as bwd_mode:
        loss.backward()
    grads = {
        n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).detach().cpu()
        for n, p in block.named_parameters()
    }
    shapes = {
        n: tuple(p.to_local().shape) if isinstance(p, DTensor) else tuple(p.shape) for n, p in block.named_parameters()
    }

    def counts(mode: Any) -> dict[str, int]:
        return {str(getattr(op, "__name__", op)).split(".")[-1]: int(n) for op, n in mode.get_comm_counts().items()}

    return {
        "rank": info["rank"],
        "output": out.detach().cpu(),
        "grads": grads,
        "input_grad": x.grad.detach().cpu(),
        "param_bytes": local_bytes,
        "local_shapes": shapes,
        "forward_comms": counts(fwd_mode),
        "backward_comms": counts(bwd_mode),
    }


def allreduce_vs_compute(
    tokens: int,
    dim: int,
    hidden: int,
    world_size: int,
    links: tuple[str, ...] = ("nvlink4", "pcie4-x16", "ib-ndr", "eth-10g"),
    accelerator: str = "H100 SXM",
    dtype: str = "bf16",
    bytes_per_value: int = 2,
) -> list[dict[str, Any]]:
    """Per MLP block and pass, the all-reduce of ``tokens x dim`` activations over each link (ring model,
    ``comm.allreduce_time``, catalog bandwidths, no latency term) next to the block's matrix products on
    ``1 / world_size`` of the work at ``accelerator``'s dense ``dtype`` peak (catalog). Notebook 06.2,
    section 6: the ratio says how much of each step the link would cost. Rows: link, bandwidth, seconds
    of all-reduce, seconds of compute, ratio."""
    tokens = arguments.positive_int("tokens", tokens)
    p = arguments.positive_int("world_size", world_size)
    acc = catalog.get_accelerator(accelerator)
    if dtype not in acc.peak_tflops:
        raise ValueError(f"{accelerator} has no {dtype} peak in the catalog; it has {sorted(acc.peak_tflops)}")
    compute_s = 2 * 2 * tokens * dim * hidden / p / (acc.peak_tflops[dtype] * 1e12)
    nbytes = tokens * dim * bytes_per_value
    rows = []
    for key in links:
        link = catalog.get_link(key)
        t = comm.allreduce_time(nbytes, p, 0.0, link.bandwidth_bytes_per_s)
        rows.append(
            {
                "link": link.name,
                "gbs": link.bandwidth_gbs,
                "allreduce_s": t,
                "compute_s": compute_s,
                "ratio": t / compute_s,
            }
        )
    return rows
