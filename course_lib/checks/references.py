"""References the library keeps inside stateful objects or loops, as plain functions a check compares with.

Exercise 04 asks for one step of two things the library runs as objects (torch's GradScaler, the TopKCompressor):
``gradscaler_step`` and ``topk_step`` run exactly one step of those objects, as a function of plain inputs.
``_fewest_micro_batches`` is exercise 06's reference for the pipeline bubble.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def gradscaler_step(
    grads: Sequence[torch.Tensor], scale: float, good_steps: int, growth_interval: int
) -> tuple[list[torch.Tensor] | None, float, int]:
    """One step of ``torch.amp.GradScaler`` (growth 2, backoff 0.5) on the gradients ``grads`` of a loss
    multiplied by ``scale``, after ``good_steps`` clean steps in a row. Exercise 04's reference.

    Returns ``(unscaled gradients, or None when the step is skipped, new scale, new good_steps)``,
    read off a real GradScaler (on the CPU) and an SGD step on parameters holding ``grads``.
    """
    from ..memory import torch_internals

    params = [torch.nn.Parameter(torch.zeros_like(g, dtype=torch.float32)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.detach().float().clone()
    opt = torch.optim.SGD(params, lr=1.0)
    scaler = torch.amp.GradScaler("cpu", growth_interval=growth_interval)
    torch_internals.load_scaler_state(
        scaler,
        scale=float(scale),
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=growth_interval,
        growth_tracker=good_steps,
    )
    scaler.scale(torch.zeros(()))  # the scaler creates its state on first use
    scaler.unscale_(opt)
    unscaled = [p.grad.clone() for p in params]
    scaler.step(opt)
    scaler.update()
    new_scale = float(scaler.get_scale())
    skipped = new_scale < scale  # it lowers the scale only when it skips
    return (None if skipped else unscaled), new_scale, torch_internals.growth_tracker(scaler)


def topk_step(grad: torch.Tensor, residual: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of ``comm.aggregation.TopKCompressor`` holding ``residual``: ``(sent, new residual)``,
    ``sent`` as a dense tensor shaped like ``grad`` (zeros where nothing is sent). Exercise 04's reference."""
    from ..comm.aggregation import TopKCompressor

    compressor = TopKCompressor(ratio)
    compressor.residuals[0] = residual.detach().flatten().clone()
    values, indices = compressor.compress(grad.detach().flatten().clone(), 0)
    sent = TopKCompressor.decompress(values, indices, grad.numel())
    return sent.view_as(grad), compressor.residuals[0].view_as(grad)


def _fewest_micro_batches(stages: int, max_bubble: float) -> int:
    """Exercise 06's reference: count micro-batches up from 1 until the bubble is at most ``max_bubble``."""
    from ..parallel import pipeline

    m = 1
    while pipeline.bubble_fraction(stages, m) > max_bubble:
        m += 1
    return m
