"""Gradients on a format's scale: how many underflow, become subnormal or overflow when cast (``underflow``), what
a loss scale rescues (``loss_scale_rescue``, ``largest_safe_scale``), and what fp16 loses inside a real backward pass
(``backward_underflow``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .. import arguments
from .formats import _TORCH, STORAGE_FORMATS, format_name, number_format


@dataclass(frozen=True)
class CastResult:
    """What casting non-zero values to ``dtype`` (after multiplying by ``scale``) did to them.
    Fractions are of the ``nonzero`` values examined; ``normal`` is the rest."""

    dtype: str
    scale: float
    nonzero: int
    underflow: float  # became 0
    subnormal: float  # became subnormal: kept, with fewer significant bits
    overflow: float  # rounded past the largest finite value (to inf; fp8-e4m3 clips or gives NaN)

    @property
    def normal(self) -> float:
        """Fraction kept as normal numbers, with the format's full precision."""
        return max(0.0, 1.0 - self.underflow - self.subnormal - self.overflow)

    def __str__(self) -> str:
        return (
            f"{self.dtype} x {self.scale:g}: {self.underflow:.2%} of {self.nonzero} non-zero values become 0, "
            f"{self.subnormal:.2%} subnormal, {self.overflow:.2%} overflow"
        )


def gradient_values(model: nn.Module) -> torch.Tensor:
    """Every parameter gradient of ``model`` as one flat fp32 tensor on the CPU.

    Call it after ``backward()``, or inside ``train_step``'s ``before_update`` hook: the training
    step releases gradients after its update. ValueError when no parameter has a gradient.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    grads = [p.grad.detach().flatten().float().cpu() for p in model.parameters() if p.grad is not None]
    if not grads:
        raise ValueError(
            "model has no gradients: run a backward pass first, or collect them in train_step's "
            "before_update hook (the training step releases gradients after its update)"
        )
    return torch.cat(grads)


def gradients_while_training(
    model: nn.Module,
    batch: Sequence[torch.Tensor],
    at_steps: Sequence[int],
    *,
    optimizer: str = "adam",
    lr: float = 1e-2,
) -> dict[int, torch.Tensor]:
    """Train ``model`` on one batch, over and over, and keep its gradients at ``at_steps`` (notebook 04).

    Step 0's gradients are those of the untrained model; the run lasts ``max(at_steps) + 1``
    ``train_step`` calls (fp32), and the gradients are read in its ``before_update`` hook (real,
    unscaled values). As the loss falls, the gradients shrink: late in training a share of them is
    below what fp16 can hold. Returns {step: ``gradient_values``}.
    """
    from ..models import make_optimizer
    from ..train import train_step

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    wanted = set(arguments.int_list("at_steps", at_steps, minimum=0))
    opt = make_optimizer(optimizer, model.parameters(), lr=lr)
    found: dict[int, torch.Tensor] = {}
    for step in range(max(wanted) + 1):
        keep = (lambda m, s=step: found.__setitem__(s, gradient_values(m))) if step in wanted else None
        train_step(model, batch, opt, before_update=keep)
    return found


def _nonzero_values(values: Any) -> torch.Tensor:
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor (e.g. gradient_values(model)), got {type(values).__name__}")
    if not values.dtype.is_floating_point:
        raise TypeError(f"values must be a floating-point tensor, got {values.dtype}")
    x = values.detach().flatten().float().cpu()
    if not bool(torch.isfinite(x).all()):
        raise ValueError("values contains inf or NaN: pass finite values (e.g. unscaled fp32 gradients)")
    x = x[x != 0]
    if x.numel() == 0:
        raise ValueError("values has no non-zero entries: nothing can underflow (did the backward pass run?)")
    return x


def _cast(x: torch.Tensor, key: str, scale: float) -> CastResult:
    """Multiply non-zero fp32 values by ``scale`` (in fp32, as GradScaler's scaled fp32 loss), cast, count."""
    fmt = number_format(key)
    scaled = x * scale
    y = scaled.to(_TORCH[key]).float()
    over = ~torch.isfinite(y) | (scaled.abs() >= fmt.overflow_threshold)
    zero = (y == 0) & ~over
    sub = (y != 0) & (y.abs() < fmt.smallest_normal) & ~over
    n = x.numel()
    return CastResult(key, scale, n, int(zero.sum()) / n, int(sub.sum()) / n, int(over.sum()) / n)


def underflow(values: torch.Tensor, dtype: Any) -> CastResult:
    """Cast ``values`` to ``dtype`` and count what happened to the non-zero ones (notebook 04).

    ``underflow``: fraction that became 0; ``subnormal``: fraction that became subnormal (kept, with
    fewer significant bits); ``overflow``: fraction that rounded past the largest finite value.
    ``dtype``: one of ``STORAGE_FORMATS`` or its ``torch.dtype``. The cast really runs (cheap on any
    CPU). ``values`` must be finite and have a non-zero entry.
    """
    return loss_scale_rescue(values, dtype, 1.0)


def loss_scale_rescue(values: torch.Tensor, dtype: Any, scale: float) -> CastResult:
    """:func:`underflow` after multiplying ``values`` by ``scale``, as loss scaling does (notebook 04).

    ``torch.amp.GradScaler`` multiplies the loss by its scale, so every gradient of the backward
    pass is that many times larger while it is held in fp16, and divides the fp32 gradients by it
    again before the update. A power of two changes no digit of a value, only its exponent: small
    gradients move up out of the underflow range, large ones may overflow.
    """
    key = format_name(dtype, accepted=STORAGE_FORMATS)
    scale = arguments.positive("scale", scale)
    return _cast(_nonzero_values(values), key, scale)


def largest_safe_scale(values: torch.Tensor, dtype: Any, *, max_scale: float | None = None) -> float:
    """The largest power of two that ``values`` can be multiplied by with none overflowing ``dtype``
    (notebook 04).

    ``torch.amp.GradScaler`` searches for this while training: it starts at 2**16, halves its scale
    (and skips the step) on an inf or NaN gradient, and doubles it after 2,000 clean steps, so it
    settles within a factor of two or so below this ceiling. The scale also stays a finite fp32
    (at most 2**127) and at most ``max_scale`` when given. Each candidate is checked by a real cast.
    """
    key = format_name(dtype, accepted=STORAGE_FORMATS)
    arguments.optional(arguments.positive, "max_scale", max_scale)
    x = _nonzero_values(values)
    fmt = number_format(key)
    top = 127 if max_scale is None else min(127, math.floor(math.log2(max_scale)))
    amax = float(x.abs().max())
    k = min(top, math.floor(math.log2(fmt.overflow_threshold / amax)))
    k = max(k, -149)
    while k > -149 and _cast(x, key, math.ldexp(1.0, k)).overflow > 0:
        k -= 1
    while k < top and _cast(x, key, math.ldexp(1.0, k + 1)).overflow == 0:
        k += 1
    return math.ldexp(1.0, k)


@dataclass(frozen=True)
class BackwardUnderflow:
    """What one backward pass in a 16-bit format lost, against the same pass in fp32.

    ``layers``: for each layer with parameters, ``(name, nonzero, lost)``: how many entries of the
    gradient of its *output* (the activation gradient the backward pass carries, a 16-bit tensor under
    autocast) are non-zero in fp32, and the fraction of those the 16-bit pass returned as 0.
    ``param_nonzero``/``param_lost``: the same for the parameters' gradients (computed in 16 bits
    from those activation gradients, then accumulated into the fp32 ``.grad``)."""

    dtype: str
    scale: float
    layers: tuple[tuple[str, int, float], ...]
    param_nonzero: int
    param_lost: float

    @property
    def activation_lost(self) -> float:
        """Fraction of all non-zero activation-gradient entries (every layer together) lost."""
        total = sum(n for _, n, _ in self.layers)
        return sum(n * lost for _, n, lost in self.layers) / total if total else 0.0

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {lost:.1%}" for name, _, lost in self.layers)
        return (
            f"{self.dtype} backward x {self.scale:g}: weight gradients lost {self.param_lost:.2%} of "
            f"{self.param_nonzero}; activation gradients lost {self.activation_lost:.1%} ({parts})"
        )


def _layer_output_grads(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype | None, scale: float, device: torch.device
) -> tuple[list[tuple[str, torch.Tensor]], torch.Tensor]:
    from ..train import default_loss

    layers = [(name, m) for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]
    found: list[tuple[str, torch.Tensor]] = []

    def keep(name: str):
        def hook(module, inputs, output):
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(lambda g: found.append((name, g.detach().clone())))

        return hook

    handles = [m.register_forward_hook(keep(name)) for name, m in layers]
    model.zero_grad(set_to_none=True)
    try:
        if dtype is None:
            loss = default_loss(model(x), y)
        else:
            with torch.autocast(device.type, dtype=dtype):
                loss = default_loss(model(x), y)
        (loss * scale).backward()
    finally:
        for h in handles:
            h.remove()
    grads = torch.cat([p.grad.detach().flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return found, grads


def backward_underflow(
    model: nn.Module, batch: Sequence[torch.Tensor], dtype: Any = "fp16", *, scale: float = 1.0
) -> BackwardUnderflow:
    """Run one backward pass under ``torch.autocast`` in ``dtype`` and one in fp32; count what the
    16-bit pass flushed to zero (notebook 04: where fp16 underflow really happens).

    Under fp16 autocast the matrix products run in fp16, so the gradient flowing back through every
    layer (the gradient of its output) is an fp16 tensor, and the weight gradients are computed from
    it: a value below fp16's smallest subnormal (6e-8) becomes 0 *there*, before any ``.grad`` exists.
    Casting finished fp32 gradients (:func:`underflow`) is only a proxy for that. ``scale`` multiplies
    the loss before ``backward()``, as ``torch.amp.GradScaler`` does. ``batch`` is ``(inputs, targets)``
    on the model's device; the loss is ``train.default_loss``. Neither pass changes the model's weights.
    A 16-bit forward pass rounds activations, so a ReLU whose input was near 0 may switch off and
    zero a gradient that fp32 kept: a floor of a few in 10^4 that bf16 (fp32's range, no underflow)
    measures on its own.

    ``dtype``: "fp16" or "bf16". fp16 arithmetic on a CPU runs in a slow fallback, so on a CPU this
    refuses a pass of more than 5e7 multiply-adds (parameters x examples): the digits MLP on its
    training set is about 1.3e7.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    key = format_name(dtype, accepted=("fp16", "bf16"))
    scale = arguments.positive("scale", scale)
    if not isinstance(batch, (tuple, list)) or len(batch) != 2 or not all(isinstance(t, torch.Tensor) for t in batch):
        raise TypeError("batch must be a pair (inputs, targets) of tensors")
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters")
    device = params[0].device
    x, y = (t.to(device) for t in batch)
    macs = sum(p.numel() for p in params) * len(x)
    if device.type == "cpu" and key == "fp16" and macs > 5e7:
        raise ValueError(
            f"an fp16 backward pass of {macs:.1e} multiply-adds on a CPU would run in its slow fp16 "
            "fallback: use fewer examples or a smaller model (at most 5e7 parameters x examples), "
            "or a GPU"
        )
    ref_layers, ref_grads = _layer_output_grads(model, x, y, None, 1.0, device)
    low_layers, low_grads = _layer_output_grads(model, x, y, _TORCH[key], scale, device)
    rows = []
    for (name, ref), (_, low) in zip(reversed(ref_layers), reversed(low_layers)):  # hooks fire last layer first
        nonzero = ref != 0
        n = int(nonzero.sum())
        rows.append((name, n, int((nonzero & (low == 0)).sum()) / n if n else 0.0))
    nonzero = ref_grads != 0
    n = int(nonzero.sum())
    return BackwardUnderflow(key, scale, tuple(rows), n, int((nonzero & (low_grads == 0)).sum()) / max(n, 1))
