"""Quantization written by hand: fewer bits per weight, its error, and training through it (notebook 05.2).

**Fake quantization** (the lesson, written here by hand) maps each value to the nearest point of
a grid of ``2**bits`` levels and back to a float, so its error can be measured on any model:

* ``symmetric`` (the default, used for weights): integers ``q`` in ``[-(2**(bits-1) - 1),
  2**(bits-1) - 1]`` (-127..127 for 8 bits: the code -128 is left unused so the grid is the same on
  both sides), ``scale = max|x| / (2**(bits-1) - 1)``, ``zero_point = 0``, ``x ~ q * scale``;
* ``affine`` (for one-sided tensors such as ReLU outputs): integers in ``[0, 2**bits - 1]``, the
  range ``[min(x, 0), max(x, 0)]`` spread over all levels, ``scale = (hi - lo) / (2**bits - 1)``,
  ``zero_point = round(-lo / scale)``, ``x ~ (q - zero_point) * scale``.

``granularity="per_channel"``: one scale (and zero point) per slice along ``axis`` (axis 0 of a Linear
weight: one per output unit); ``per_tensor``: one for the whole tensor. Rounding is ``torch.round`` (halves
to even). A tensor or channel of zeros gets ``scale = 1`` and stays exactly zero. Rounding to a grid of
step ``s`` spreads the error evenly over ``[-s/2, s/2]``: its RMS is ``s / sqrt(12)`` (``predicted_rms``).

**Quantization-aware training** (``FakeQuantLinear``, ``to_qat``, trained by ``train.fit``): the forward pass
rounds the weights (optionally the inputs), the backward pass treats rounding as the identity (straight-through
estimator). ``post_training_quantize`` rounds a trained model's weights once, for comparison.

Real int8, through torchao, is ``compression.quantization``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .. import arguments, data, hardware, models, train
from ..seeds import seed_everything

__all__ = [
    "SCHEMES",
    "GRANULARITIES",
    "MIN_BITS",
    "MAX_BITS",
    "qrange",
    "quantize",
    "dequantize",
    "fake_quantize",
    "step_size",
    "predicted_rms",
    "QuantError",
    "quantization_error",
    "error_sweep",
    "row_errors",
    "relu_activations",
    "rescale_units",
    "smoothing_factors",
    "int8_product_error",
    "ste_fake_quantize",
    "FakeQuantLinear",
    "to_qat",
    "post_training_quantize",
    "qat_vs_ptq",
]

SCHEMES = ("symmetric", "affine")
GRANULARITIES = ("per_tensor", "per_channel")
MIN_BITS, MAX_BITS = 2, 16


# fake quantization by hand (notebook 05.2, sections 1-2)
def _check(x: torch.Tensor, bits: int, scheme: str, granularity: str, axis: int) -> tuple[int, str, str, int]:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must hold floating-point values to quantize, got dtype {x.dtype}")
    bits = arguments.integer("bits", bits, minimum=MIN_BITS, maximum=MAX_BITS)
    scheme = arguments.choice("scheme", scheme, SCHEMES)
    granularity = arguments.choice(
        "granularity", granularity, GRANULARITIES, aliases={"per-tensor": "per_tensor", "per-channel": "per_channel"}
    )
    axis = arguments.integer("axis", axis)
    if granularity == "per_channel":
        if x.dim() == 0:
            raise ValueError("per_channel quantization needs a tensor with at least one dimension, got a scalar")
        if not -x.dim() <= axis < x.dim():
            raise ValueError(
                f"axis must be in [{-x.dim()}, {x.dim() - 1}] for a tensor of shape {tuple(x.shape)}, got {axis}"
            )
        axis %= x.dim()
    return bits, scheme, granularity, axis


def qrange(bits: int, scheme: str = "symmetric") -> tuple[int, int]:
    """The integers a ``bits``-bit code uses: symmetric ``(-(2**(bits-1) - 1), 2**(bits-1) - 1)``, affine
    ``(0, 2**bits - 1)`` (notebook 05.2, section 1)."""
    bits = arguments.integer("bits", bits, minimum=MIN_BITS, maximum=MAX_BITS)
    if arguments.choice("scheme", scheme, SCHEMES) == "symmetric":
        return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def _int_dtype(qmin: int, qmax: int) -> torch.dtype:
    return next(
        (
            d
            for d in (torch.int8, torch.uint8, torch.int16)
            if torch.iinfo(d).min <= qmin and qmax <= torch.iinfo(d).max
        ),
        torch.int32,
    )


def _reduce(x: torch.Tensor, fn: Callable, granularity: str, axis: int) -> torch.Tensor:
    """min / max / amax over the whole tensor (a 0-dim result) or over all dims but ``axis`` (kept as 1s)."""
    if granularity == "per_tensor":
        return fn(x)
    dims = [d for d in range(x.dim()) if d != axis]
    return fn(x, dim=dims, keepdim=True) if dims else x.clone()


def quantize(
    x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor", axis: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` as integers on a ``bits``-bit grid: returns ``(q, scale, zero_point)``.

    ``q`` has the smallest integer dtype that holds the range (int8 for symmetric 8 bits, uint8 for
    affine 8 bits, int16 / int32 above). ``scale`` and ``zero_point`` are 0-dim tensors per tensor, or
    shaped like ``x`` with 1s everywhere but ``axis`` per channel, so they broadcast against ``q``;
    ``scale`` is float32 (float64 for a float64 ``x``), ``zero_point`` int32 (zeros when symmetric).
    The conventions are in the module docstring; ``quantize(x, 8, "symmetric")`` is the reference of
    the exercise in exercises/05_compression.ipynb.
    """
    bits, scheme, granularity, axis = _check(x, bits, scheme, granularity, axis)
    qmin, qmax = qrange(bits, scheme)
    xf = x.detach().to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    if scheme == "symmetric":
        amax = _reduce(xf.abs(), torch.amax, granularity, axis)
        scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
        zero_point = torch.zeros_like(scale, dtype=torch.int32)
        q = torch.clamp(torch.round(xf / scale), qmin, qmax)
    else:
        lo = torch.clamp(_reduce(xf, torch.amin, granularity, axis), max=0)  # the range always holds 0 exactly
        hi = torch.clamp(_reduce(xf, torch.amax, granularity, axis), min=0)
        scale = torch.where(hi > lo, (hi - lo) / (qmax - qmin), torch.ones_like(hi))
        zero_point = torch.clamp(qmin - torch.round(lo / scale), qmin, qmax).to(torch.int32)
        q = torch.clamp(torch.round(xf / scale) + zero_point, qmin, qmax)
    return q.to(_int_dtype(qmin, qmax)), scale, zero_point


def dequantize(q: torch.Tensor, scale: torch.Tensor | float, zero_point: torch.Tensor | int = 0) -> torch.Tensor:
    """Back to floats: ``(q - zero_point) * scale``."""
    if not isinstance(q, torch.Tensor) or q.is_floating_point() or q.is_complex():
        raise TypeError(f"q must be a tensor of integers (the output of quantize), got {getattr(q, 'dtype', type(q))}")
    scale = torch.as_tensor(scale)
    if not scale.is_floating_point():
        raise TypeError(f"scale must be a float tensor or number, got dtype {scale.dtype}")
    return (q.to(torch.int32) - torch.as_tensor(zero_point)).to(scale.dtype) * scale


def fake_quantize(
    x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor", axis: int = 0
) -> torch.Tensor:
    """The round trip ``dequantize(quantize(x))`` in ``x``'s dtype: the values a quantized model computes with."""
    return dequantize(*quantize(x, bits, scheme, granularity, axis)).to(x.dtype)


def step_size(
    x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor", axis: int = 0
) -> torch.Tensor:
    """The grid step (``scale``) each element of ``x`` is rounded with, broadcast to ``x``'s shape."""
    return quantize(x, bits, scheme, granularity, axis)[1].expand_as(x)


def predicted_rms(
    x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor", axis: int = 0
) -> float:
    """RMS rounding error predicted from the step alone: ``sqrt(mean(step**2) / 12)`` (uniform rounding noise).
    It holds when values spread over many steps; at 2 bits most values fall in
    the zero bin and the measurement leaves it."""
    steps = step_size(x, bits, scheme, granularity, axis).double()
    return math.sqrt(float((steps**2).mean()) / 12)


@dataclass(frozen=True)
class QuantError:
    """How far ``fake_quantize(x)`` is from ``x``: RMS error, relative RMS error (error RMS / RMS of ``x``,
    ``signal_rms``), SQNR in dB (signal power / error power), largest error, and the ``step / sqrt(12)``
    prediction (``predicted_rms``, ``predicted_relative``)."""

    bits: int
    scheme: str
    granularity: str
    rms: float
    relative: float
    sqnr_db: float
    max_abs: float
    predicted_rms: float
    signal_rms: float

    @property
    def predicted_relative(self) -> float:
        return self.predicted_rms / self.signal_rms if self.signal_rms > 0 else 0.0

    @property
    def measured_over_predicted(self) -> float:
        return self.rms / self.predicted_rms if self.predicted_rms > 0 else float("nan")


def quantization_error(
    x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor", axis: int = 0
) -> QuantError:
    """Measure the round trip's error on ``x`` next to its prediction (notebook 05.2, sections 1-2)."""
    bits, scheme, granularity, axis = _check(x, bits, scheme, granularity, axis)
    xd = x.detach().double()
    err = fake_quantize(xd, bits, scheme, granularity, axis) - xd
    signal, noise = float((xd**2).mean()), float((err**2).mean())
    sqnr = 10 * math.log10(signal / noise) if noise > 0 and signal > 0 else (math.inf if signal > 0 else 0.0)
    return QuantError(
        bits,
        scheme,
        granularity,
        rms=math.sqrt(noise),
        relative=math.sqrt(noise / signal) if signal > 0 else 0.0,
        sqnr_db=sqnr,
        max_abs=float(err.abs().max()) if err.numel() else 0.0,
        predicted_rms=predicted_rms(xd, bits, scheme, granularity, axis),
        signal_rms=math.sqrt(signal),
    )


def row_errors(
    w: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of a weight matrix: the measured relative RMS error of the round trip and the predicted one
    (``step / sqrt(12)`` / the row's RMS), as two 1-D tensors (notebook 05.2, section 2: small rows
    drown in a per-tensor grid). Rows of zeros count as 0."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2:
        raise ValueError(f"w must be a 2-D weight matrix, got {type(w).__name__} {getattr(w, 'shape', '')}")
    wd = w.detach().double()
    rms = wd.pow(2).mean(1).sqrt()
    err = (fake_quantize(wd, bits, scheme, granularity, axis=0) - wd).pow(2).mean(1).sqrt()
    predicted = step_size(wd, bits, scheme, granularity, axis=0)[:, 0] / math.sqrt(12)
    safe = torch.where(rms > 0, rms, torch.ones_like(rms))
    return torch.where(rms > 0, err / safe, 0.0), torch.where(rms > 0, predicted / safe, 0.0)


def error_sweep(
    x: torch.Tensor,
    bits: Sequence[int] = tuple(range(MIN_BITS, MAX_BITS + 1)),
    scheme: str = "symmetric",
    granularity: str = "per_tensor",
    axis: int = 0,
) -> list[QuantError]:
    """``quantization_error`` at each bit width (notebook 05.2: error against bit width)."""
    return [quantization_error(x, b, scheme, granularity, axis) for b in arguments.int_list("bits", bits, minimum=1)]


@torch.no_grad()
def relu_activations(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The output of ``model``'s first ReLU on ``x``: a one-sided tensor (notebook 05.2: symmetric vs affine)."""
    seen: list[torch.Tensor] = []
    relu = next((m for m in _model(model).modules() if isinstance(m, nn.ReLU)), None)
    if relu is None:
        raise ValueError("model has no nn.ReLU whose output could be read")
    handle = relu.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    try:
        model.eval()(x)
    finally:
        handle.remove()
    return seen[0]


@torch.no_grad()
def rescale_units(model: nn.Sequential, factors: torch.Tensor, layer: int = 0) -> nn.Sequential:
    """An equivalent copy of an MLP: hidden unit ``i`` after Linear number ``layer`` gets its incoming
    weights and bias multiplied by ``factors[i]`` and its outgoing weights divided by it. ReLU(a x) =
    a ReLU(x) for a > 0, so the outputs do not change, but the rows of that weight matrix now have very
    different scales (notebook 05.2, section 2: why per-channel scales matter)."""
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"model must be an nn.Sequential MLP (Linear, ReLU, ..., Linear), got {type(model).__name__}")
    layer = arguments.nonnegative_int("layer", layer)
    positions = [i for i, m in enumerate(model) if isinstance(m, nn.Linear)]
    if layer + 1 >= len(positions):
        raise ValueError(f"layer must be below {len(positions) - 1} (a Linear layer followed by another), got {layer}")
    first, second = positions[layer], positions[layer + 1]
    between = list(model)[first + 1 : second]
    if not all(isinstance(m, (nn.ReLU, nn.Dropout, nn.Identity)) for m in between):
        raise ValueError("the layers between must be ReLU (or Dropout): only then does rescaling keep the outputs")
    n = model[first].out_features
    if not isinstance(factors, torch.Tensor) or factors.shape != (n,) or not bool((factors > 0).all()):
        raise ValueError(f"factors must be a tensor of shape ({n},) of numbers > 0, one per hidden unit")
    out = copy.deepcopy(model)
    f = factors.to(out[first].weight)
    out[first].weight.mul_(f[:, None])
    if out[first].bias is not None:
        out[first].bias.mul_(f)
    out[second].weight.div_(f[None, :])
    return out


def smoothing_factors(x: torch.Tensor, w: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """SmoothQuant's per-input-channel factors (Xiao et al. 2023) for the product ``x @ w.T``:
    ``s_j = max|x[:, j]|**alpha / max|w[:, j]|**(1 - alpha)``. Dividing column ``j`` of the activations by ``s_j``
    and multiplying column ``j`` of the weights by it leaves the product unchanged and shares the activations'
    outlier channels with the weights, so that neither has channels far larger than the rest (notebook 05.2,
    section 2). With ``alpha = 0.5`` the factors undo any per-channel rescaling exactly."""
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or x.dim() != 2 or w.dim() != 2:
        raise TypeError("x and w must be 2-D tensors (activations: tokens x channels; weight: out x channels)")
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"x has {x.shape[1]} channels and w {w.shape[1]} input columns: they must match")
    if not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    tiny = torch.finfo(torch.float32).tiny
    return x.abs().amax(0).clamp_min(tiny) ** alpha / w.abs().amax(0).clamp_min(tiny) ** (1 - alpha)


def int8_product_error(x: torch.Tensor, w: torch.Tensor, factors: torch.Tensor | None = None) -> float:
    """Relative RMS error of ``x @ w.T`` when ``x`` is rounded to int8 with one scale per row (per token) and ``w``
    with one per output row: the only scales an int8 matrix product can apply, since a scale must factor out of
    the sum over channels. ``factors`` (``smoothing_factors``) divide the activations' columns and multiply the
    weights' first (notebook 05.2, section 2)."""
    for name, t in (("x", x), ("w", w)):
        arguments.instance(name, t, torch.Tensor, "a torch.Tensor")
    if factors is not None:
        x, w = x / factors, w * factors
    exact = x @ w.T
    approx = fake_quantize(x, 8, granularity="per_channel", axis=0) @ fake_quantize(w, 8, granularity="per_channel").T
    return (
        ((approx - exact).pow(2).mean() / exact.pow(2).mean().clamp_min(torch.finfo(torch.float32).tiny)).sqrt().item()
    )


# quantization-aware training vs post-training quantization (notebook 05.2, section 3)
def ste_fake_quantize(
    x: torch.Tensor, bits: int, scheme: str = "symmetric", granularity: str = "per_tensor", axis: int = 0
) -> torch.Tensor:
    """Fake quantization whose gradient is the identity (straight-through estimator): the forward value is
    ``fake_quantize(x)``, the backward pass sends the gradient to ``x`` as if no rounding happened."""
    return x + (fake_quantize(x, bits, scheme, granularity, axis) - x).detach()


class FakeQuantLinear(nn.Linear):
    """A Linear layer that computes with its weight fake-quantized to ``bits`` (symmetric, per channel by
    default) and, with ``act_bits``, its input fake-quantized too (affine, per tensor): quantization-aware
    training trains the float weights through the rounding (straight-through estimator)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        bits: int = 4,
        scheme: str = "symmetric",
        granularity: str = "per_channel",
        act_bits: int | None = None,
    ) -> None:
        in_features = arguments.positive_int("in_features", in_features)
        out_features = arguments.positive_int("out_features", out_features)
        super().__init__(in_features, out_features, arguments.boolean("bias", bias))
        self.bits = arguments.integer("bits", bits, minimum=MIN_BITS, maximum=MAX_BITS)
        self.scheme = arguments.choice("scheme", scheme, SCHEMES)
        self.granularity = arguments.choice("granularity", granularity, GRANULARITIES)
        self.act_bits = arguments.optional(arguments.integer, "act_bits", act_bits, minimum=MIN_BITS, maximum=MAX_BITS)

    @classmethod
    def from_linear(cls, linear: nn.Linear, **settings) -> FakeQuantLinear:
        """A FakeQuantLinear holding a copy of ``linear``'s weight and bias."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, **settings)
        layer.to(device=linear.weight.device, dtype=linear.weight.dtype).load_state_dict(linear.state_dict())
        return layer

    def quantized_weight(self) -> torch.Tensor:
        return ste_fake_quantize(self.weight, self.bits, self.scheme, self.granularity, axis=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act_bits is not None:
            x = ste_fake_quantize(x, self.act_bits, "affine", "per_tensor")
        return nn.functional.linear(x, self.quantized_weight(), self.bias)

    def extra_repr(self) -> str:
        acts = f", act_bits={self.act_bits}" if self.act_bits is not None else ""
        return f"{super().extra_repr()}, bits={self.bits}, {self.scheme}, {self.granularity}{acts}"


def _model(model: nn.Module) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


def to_qat(
    model: nn.Module,
    bits: int = 4,
    *,
    scheme: str = "symmetric",
    granularity: str = "per_channel",
    act_bits: int | None = None,
) -> nn.Module:
    """A deep copy of ``model`` with every ``nn.Linear`` replaced by a ``FakeQuantLinear`` (same weights):
    train it with ``train.fit`` for quantization-aware training."""
    out = copy.deepcopy(_model(model))
    settings = dict(bits=bits, scheme=scheme, granularity=granularity, act_bits=act_bits)
    FakeQuantLinear(1, 1, **settings)  # checks the settings before any layer is replaced

    def swap(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear) and not isinstance(child, FakeQuantLinear):
                setattr(parent, name, FakeQuantLinear.from_linear(child, **settings))
            else:
                swap(child)

    swap(out)
    return out


@torch.no_grad()
def post_training_quantize(
    model: nn.Module, bits: int = 8, *, scheme: str = "symmetric", granularity: str = "per_channel"
) -> nn.Module:
    """A deep copy of a trained ``model`` whose Linear (and FakeQuantLinear) weights are rounded once to
    ``bits`` (fake quantization; notebook 05.2, section 3). Biases stay in float, as in int8 kernels.
    Applied to a model trained by ``to_qat`` with the same settings it gives the weights QAT computed with,
    as plain ``nn.Linear`` layers."""
    out = copy.deepcopy(_model(model))
    for parent in list(out.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                plain = nn.Linear(
                    child.in_features,
                    child.out_features,
                    child.bias is not None,
                    device=child.weight.device,
                    dtype=child.weight.dtype,
                )
                rounded = fake_quantize(child.weight, bits, scheme, granularity, axis=0)
                plain.load_state_dict({**child.state_dict(), "weight": rounded})
                setattr(parent, name, plain)
    return out


def qat_vs_ptq(
    split,
    bits: int = 2,
    seeds: Sequence[int] = (0, 1, 2),
    *,
    hidden: int | list[int] = 128,
    epochs: int = 10,
    qat_epochs: int = 6,
    lr: float = 1e-2,
    qat_lr: float = 3e-3,
    device: torch.device | str = "cpu",
) -> list[dict]:
    """Per seed: train an fp32 MLP on ``split`` (``train.fit``), quantize its weights after training (PTQ), and
    fine-tune a copy with fake-quantized weights (QAT, ``to_qat`` + ``train.fit``); held-out accuracy of each
    (notebook 05.2, section 3). Returns one dict per seed: seed, fp32, ptq, qat."""
    arguments.instance("split", split, data.Split, "a data.Split (data.load_digits())")
    bits = arguments.integer("bits", bits, minimum=MIN_BITS, maximum=MAX_BITS)
    seeds = arguments.int_list("seeds", seeds, minimum=0)
    dev = hardware.as_device(device)
    rows = []
    for seed in seeds:
        seed_everything(seed)
        model = models.MLP(split.x_train.shape[1], hidden, split.n_classes).to(dev)
        train.fit(model, split.train, epochs=epochs, lr=lr, optimizer="adam", progress=False, seed=seed)
        qat = to_qat(model, bits)
        train.fit(qat, split.train, epochs=qat_epochs, lr=qat_lr, optimizer="adam", progress=False, seed=seed)
        rows.append(
            {
                "seed": seed,
                **{
                    name: train.evaluate(m, split.test, dev)["acc"]
                    for name, m in (
                        ("fp32", model),
                        ("ptq", post_training_quantize(model, bits)),
                        ("qat", post_training_quantize(qat, bits)),
                    )
                },
            }
        )
    return rows
