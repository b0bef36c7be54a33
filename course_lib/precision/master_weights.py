"""Why the master weights stay fp32: a run with the weights stored in bf16 loses the small updates (``weights_run``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .. import arguments
from .formats import format_name


def weights_run(
    weights: Any,
    make_model: Any,
    batch: Sequence[torch.Tensor],
    *,
    optimizer: str = "adam",
    lr: float = 1e-4,
    steps: int = 200,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, float]:
    """Train ``make_model()`` with its weights stored in ``weights`` ("fp32" or "bf16"), bf16 compute
    either way; count the updates the stored weights ignored (notebook 04: why master weights are fp32).

    "fp32" is mixed precision: fp32 master weights, the products in bf16 under ``torch.autocast``.
    "bf16" stores the weights themselves in bf16 (the model cast with ``.to(torch.bfloat16)``), so
    the optimizer adds every update to a bf16 number: an update smaller than half the gap between
    that weight and the next bf16 value (about 2^-8 to 2^-9 of the weight, bf16 having 8 significant
    bits) rounds away. Both runs draw the same ``steps`` batches of ``batch_size`` from ``batch``
    ``(inputs, targets)``. Returns ``{"loss_start", "loss_end"`` (full-batch loss in fp32),
    ``"ignored"`` (over the steps, the mean fraction of weights with a non-zero gradient whose stored
    value did not change), ``"steps"}``.
    """
    from ..models import make_optimizer
    from ..train import default_loss, train_step

    key = format_name(weights, "weights", accepted=("fp32", "bf16"))
    arguments.function("make_model", make_model)
    steps = arguments.positive_int("steps", steps)
    batch_size = arguments.positive_int("batch_size", batch_size)
    seed = arguments.nonnegative_int("seed", seed)
    if not isinstance(batch, (tuple, list)) or len(batch) != 2 or not all(isinstance(t, torch.Tensor) for t in batch):
        raise TypeError("batch must be a pair (inputs, targets) of tensors")
    torch.manual_seed(seed)
    model = make_model()
    if not isinstance(model, nn.Module):
        raise TypeError(f"make_model must return a torch.nn.Module, got {type(model).__name__}")
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    if key == "bf16":
        model = model.to(torch.bfloat16)
    store = next(model.parameters()).dtype
    opt = make_optimizer(optimizer, model.parameters(), lr=lr)

    def full_loss() -> float:
        with torch.no_grad():
            return float(default_loss(model(x.to(store)).float(), y))

    start, ignored = full_loss(), []
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (batch_size,), generator=g).to(device)
        seen: list[tuple[torch.Tensor, torch.Tensor]] = []
        keep = lambda m: seen.extend((p.detach().clone(), p.grad != 0) for p in m.parameters())  # noqa: E731
        train_step(
            model,
            (x[idx].to(store), y[idx]),
            opt,
            precision="bf16-mixed" if key == "fp32" else "fp32",
            before_update=keep,
        )
        moved = [(p.detach() == old) & live for p, (old, live) in zip(model.parameters(), seen)]
        live = sum(int(m.sum()) for _, m in seen)
        ignored.append(sum(int(m.sum()) for m in moved) / max(live, 1))
    return {"loss_start": start, "loss_end": full_loss(), "ignored": sum(ignored) / steps, "steps": steps}
