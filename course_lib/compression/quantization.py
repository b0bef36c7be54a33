"""Quantization: fewer bits per weight, written by hand, then for real with torchao (notebook 05.2).

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

**Real int8** through torchao: ``int8_dynamic`` and ``int8_weight_only`` return quantized copies;
``torchao_problem`` / ``torchao_ready`` say what to install when torchao is missing or too old;
``compile_timed`` reports compile time apart from per-call time; ``latency`` times models interleaved.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import importlib.metadata
import io
import logging
import math
import os
import platform
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType

import torch
from torch import nn

from .. import arguments, hardware, models, timing, train

__all__ = ["SCHEMES", "GRANULARITIES", "MIN_BITS", "MAX_BITS", "qrange", "quantize", "dequantize", "fake_quantize",
           "step_size", "predicted_rms", "QuantError", "quantization_error", "error_sweep", "row_errors",
           "relu_activations", "rescale_units", "smoothing_factors", "int8_product_error", "ste_fake_quantize", "FakeQuantLinear", "to_qat",
           "post_training_quantize", "qat_vs_ptq", "TORCHAO_MIN_VERSION", "torchao_problem", "torchao_ready",
           "int8_dynamic", "int8_weight_only", "dequantized_weights", "predicted_int8_bytes", "Compiled",
           "compile_timed", "compile_ready", "cxx_compiler", "latency", "int8_units", "INT8_EXPECTATIONS"]

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
    granularity = arguments.choice("granularity", granularity, GRANULARITIES,
                                  aliases={"per-tensor": "per_tensor", "per-channel": "per_channel"})
    axis = arguments.integer("axis", axis)
    if granularity == "per_channel":
        if x.dim() == 0:
            raise ValueError("per_channel quantization needs a tensor with at least one dimension, got a scalar")
        if not -x.dim() <= axis < x.dim():
            raise ValueError(f"axis must be in [{-x.dim()}, {x.dim() - 1}] for a tensor of shape {tuple(x.shape)}, "
                             f"got {axis}")
        axis %= x.dim()
    return bits, scheme, granularity, axis


def qrange(bits: int, scheme: str = "symmetric") -> tuple[int, int]:
    """The integers a ``bits``-bit code uses: symmetric ``(-(2**(bits-1) - 1), 2**(bits-1) - 1)``, affine
    ``(0, 2**bits - 1)`` (notebook 05.2, section 1)."""
    bits = arguments.integer("bits", bits, minimum=MIN_BITS, maximum=MAX_BITS)
    if arguments.choice("scheme", scheme, SCHEMES) == "symmetric":
        return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
    return 0, 2 ** bits - 1


def _int_dtype(qmin: int, qmax: int) -> torch.dtype:
    return next((d for d in (torch.int8, torch.uint8, torch.int16)
                 if torch.iinfo(d).min <= qmin and qmax <= torch.iinfo(d).max), torch.int32)


def _reduce(x: torch.Tensor, fn: Callable, granularity: str, axis: int) -> torch.Tensor:
    """min / max / amax over the whole tensor (a 0-dim result) or over all dims but ``axis`` (kept as 1s)."""
    if granularity == "per_tensor":
        return fn(x)
    dims = [d for d in range(x.dim()) if d != axis]
    return fn(x, dim=dims, keepdim=True) if dims else x.clone()


def quantize(x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor",
             axis: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def fake_quantize(x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor",
                  axis: int = 0) -> torch.Tensor:
    """The round trip ``dequantize(quantize(x))`` in ``x``'s dtype: the values a quantized model computes with."""
    return dequantize(*quantize(x, bits, scheme, granularity, axis)).to(x.dtype)


def step_size(x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor",
              axis: int = 0) -> torch.Tensor:
    """The grid step (``scale``) each element of ``x`` is rounded with, broadcast to ``x``'s shape."""
    return quantize(x, bits, scheme, granularity, axis)[1].expand_as(x)


def predicted_rms(x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor",
                  axis: int = 0) -> float:
    """RMS rounding error predicted from the step alone: ``sqrt(mean(step**2) / 12)`` (uniform rounding noise).
    It holds when values spread over many steps; at 2 bits most values fall in
    the zero bin and the measurement leaves it."""
    steps = step_size(x, bits, scheme, granularity, axis).double()
    return math.sqrt(float((steps ** 2).mean()) / 12)


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


def quantization_error(x: torch.Tensor, bits: int = 8, scheme: str = "symmetric", granularity: str = "per_tensor",
                       axis: int = 0) -> QuantError:
    """Measure the round trip's error on ``x`` next to its prediction (notebook 05.2, sections 1-2)."""
    bits, scheme, granularity, axis = _check(x, bits, scheme, granularity, axis)
    xd = x.detach().double()
    err = fake_quantize(xd, bits, scheme, granularity, axis) - xd
    signal, noise = float((xd ** 2).mean()), float((err ** 2).mean())
    sqnr = 10 * math.log10(signal / noise) if noise > 0 and signal > 0 else (math.inf if signal > 0 else 0.0)
    return QuantError(bits, scheme, granularity, rms=math.sqrt(noise),
                      relative=math.sqrt(noise / signal) if signal > 0 else 0.0, sqnr_db=sqnr,
                      max_abs=float(err.abs().max()) if err.numel() else 0.0,
                      predicted_rms=predicted_rms(xd, bits, scheme, granularity, axis), signal_rms=math.sqrt(signal))


def row_errors(w: torch.Tensor, bits: int = 8, scheme: str = "symmetric",
               granularity: str = "per_tensor") -> tuple[torch.Tensor, torch.Tensor]:
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


def error_sweep(x: torch.Tensor, bits: Sequence[int] = tuple(range(MIN_BITS, MAX_BITS + 1)),
                scheme: str = "symmetric", granularity: str = "per_tensor", axis: int = 0) -> list[QuantError]:
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
    between = list(model)[first + 1:second]
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
    if factors is not None:
        x, w = x / factors, w * factors
    exact = x @ w.T
    approx = fake_quantize(x, 8, granularity="per_channel", axis=0) @ fake_quantize(w, 8, granularity="per_channel").T
    return ((approx - exact).pow(2).mean() / exact.pow(2).mean().clamp_min(torch.finfo(torch.float32).tiny)).sqrt().item()


# quantization-aware training vs post-training quantization (notebook 05.2, section 3)
def ste_fake_quantize(x: torch.Tensor, bits: int, scheme: str = "symmetric", granularity: str = "per_tensor",
                      axis: int = 0) -> torch.Tensor:
    """Fake quantization whose gradient is the identity (straight-through estimator): the forward value is
    ``fake_quantize(x)``, the backward pass sends the gradient to ``x`` as if no rounding happened."""
    return x + (fake_quantize(x, bits, scheme, granularity, axis) - x).detach()


class FakeQuantLinear(nn.Linear):
    """A Linear layer that computes with its weight fake-quantized to ``bits`` (symmetric, per channel by
    default) and, with ``act_bits``, its input fake-quantized too (affine, per tensor): quantization-aware
    training trains the float weights through the rounding (straight-through estimator)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, bits: int = 4,
                 scheme: str = "symmetric", granularity: str = "per_channel", act_bits: int | None = None) -> None:
        super().__init__(in_features, out_features, bias)
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


def to_qat(model: nn.Module, bits: int = 4, *, scheme: str = "symmetric", granularity: str = "per_channel",
           act_bits: int | None = None) -> nn.Module:
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
def post_training_quantize(model: nn.Module, bits: int = 8, *, scheme: str = "symmetric",
                           granularity: str = "per_channel") -> nn.Module:
    """A deep copy of a trained ``model`` whose Linear (and FakeQuantLinear) weights are rounded once to
    ``bits`` (fake quantization; notebook 05.2, section 3). Biases stay in float, as in int8 kernels.
    Applied to a model trained by ``to_qat`` with the same settings it gives the weights QAT computed with,
    as plain ``nn.Linear`` layers."""
    out = copy.deepcopy(_model(model))
    for parent in list(out.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                plain = nn.Linear(child.in_features, child.out_features, child.bias is not None,
                                  device=child.weight.device, dtype=child.weight.dtype)
                rounded = fake_quantize(child.weight, bits, scheme, granularity, axis=0)
                plain.load_state_dict({**child.state_dict(), "weight": rounded})
                setattr(parent, name, plain)
    return out


def qat_vs_ptq(split, bits: int = 2, seeds: Sequence[int] = (0, 1, 2), *, hidden: int | list[int] = 128,
               epochs: int = 10, qat_epochs: int = 6, lr: float = 1e-2, qat_lr: float = 3e-3,
               device: torch.device | str = "cpu") -> list[dict]:
    """Per seed: train an fp32 MLP on ``split`` (``train.fit``), quantize its weights after training (PTQ), and
    fine-tune a copy with fake-quantized weights (QAT, ``to_qat`` + ``train.fit``); held-out accuracy of each
    (notebook 05.2, section 3). Returns one dict per seed: seed, fp32, ptq, qat."""
    bits = arguments.integer("bits", bits, minimum=MIN_BITS, maximum=MAX_BITS)
    seeds = arguments.int_list("seeds", seeds, minimum=0)
    dev = hardware.as_device(device)
    rows = []
    for seed in seeds:
        hardware.seed_everything(seed)
        model = models.MLP(split.x_train.shape[1], hidden, split.n_classes).to(dev)
        train.fit(model, split.train, epochs=epochs, lr=lr, optimizer="adam", progress=False, seed=seed)
        qat = to_qat(model, bits)
        train.fit(qat, split.train, epochs=qat_epochs, lr=qat_lr, optimizer="adam", progress=False, seed=seed)
        rows.append({"seed": seed, **{name: train.evaluate(m, split.test, dev)["acc"] for name, m in
                                      (("fp32", model), ("ptq", post_training_quantize(model, bits)),
                                       ("qat", post_training_quantize(qat, bits)))}})
    return rows


# real int8 through torchao (notebook 05.2, section 4)
TORCHAO_MIN_VERSION = (0, 10)
_INSTALL = "pip install -U torchao  (its release must match your torch: see https://github.com/pytorch/ao#installation)"
_QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Hold back what importing torchao prints: "Failed to load ... .so" (its optional CUDA kernels, through
    logging), torch's pytree deprecation notice (logging) and any warning, so no notebook shows stderr."""
    levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _version(text: str) -> tuple[int, ...]:
    """'0.18.0+cpu' -> (0, 18, 0); '0.10.0.dev2025' -> (0, 10, 0)."""
    return tuple(int(p) for p in re.findall(r"\d+", re.match(r"[\d.]*", text).group(0))[:3])


_TORCHAO: list = []  # [module] once imported, [None, reason] when it cannot be used


def _load_torchao() -> ModuleType | None:
    if not _TORCHAO:
        try:
            found = importlib.metadata.version("torchao")
        except importlib.metadata.PackageNotFoundError:
            _TORCHAO.extend([None, f"torchao is not installed. To run the int8 cells: {_INSTALL}"])
            return None
        if _version(found) < TORCHAO_MIN_VERSION:
            need = ".".join(map(str, TORCHAO_MIN_VERSION))
            _TORCHAO.extend([None, f"torchao {found} is too old (int8 configs need torchao >= {need}): {_INSTALL}"])
            return None
        try:
            with _quiet():
                module = importlib.import_module("torchao.quantization")
            for name in ("quantize_", "Int8DynamicActivationInt8WeightConfig", "Int8WeightOnlyConfig"):
                getattr(module, name)
        except Exception as exc:  # an import error, a torch it was not built for, a renamed API
            _TORCHAO.extend([None, f"torchao {found} does not work with torch {torch.__version__} "
                                   f"({type(exc).__name__}: {str(exc)[:200]}): {_INSTALL}"])
            return None
        _TORCHAO.append(module)
    return _TORCHAO[0]


def torchao_problem() -> str | None:
    """None when torchao's int8 API is usable here; otherwise why not and what to install (a lesson
    prints it and skips its int8 cells). Importing torchao happens here, with its import noise held back."""
    _load_torchao()
    return _TORCHAO[1] if len(_TORCHAO) > 1 else None


def torchao_ready() -> bool:
    """True when torchao's int8 API works here; otherwise prints why the cell skips and what to install
    (every int8 cell of notebook 05.2 starts with ``if quantization.torchao_ready():``)."""
    problem = torchao_problem()
    if problem is not None:
        print(f"Skipped (the hand-written quantization above needs only PyTorch): {problem}")
    return problem is None


def cxx_compiler(platform: str | None = None, which=None) -> str | None:
    """The C++ compiler ``torch.compile``'s CPU back end (inductor) would call, or None: on Windows Microsoft's
    ``cl`` (from Visual Studio's Build Tools, found only in a developer prompt), elsewhere $CXX, g++ or clang++."""
    import shutil

    which = which or shutil.which
    system = platform or sys.platform
    if system == "darwin" and which is shutil.which and not _xcode_tools():
        return None  # /usr/bin/clang++ is a stub that only offers to install the Command Line Tools
    names = ("cl",) if system == "win32" else (os.environ.get("CXX", ""), "g++", "clang++", "c++")
    return next((path for name in names if name and (path := which(name))), None)


def _xcode_tools() -> bool:
    """Whether Apple's Command Line Tools (the real compiler behind /usr/bin/clang++) are installed."""
    import subprocess

    try:
        return subprocess.run(["xcode-select", "-p"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def compile_ready(device: torch.device | str = "cpu") -> bool:
    """True when ``torch.compile`` can build kernels for ``device`` here; otherwise prints why the compiled timings
    are left out (a CPU needs a C++ compiler; a GPU's kernels come from Triton, which PyTorch brings)."""
    if torch.device(device).type != "cpu" or cxx_compiler() is not None:
        return True
    how = ("install Visual Studio's Build Tools (the C++ workload) and start Jupyter from a developer prompt"
           if sys.platform == "win32" else "run `xcode-select --install`" if sys.platform == "darwin"
           else "install g++ (e.g. `apt install g++`) or clang++")
    print(f"Skipped: torch.compile builds CPU kernels with a C++ compiler, and none was found here; {how} to "
          "time the compiled model. The eager timings still run.")
    return False


def _quantized_copy(model: nn.Module, config_name: str) -> nn.Module:
    module = _load_torchao()
    if module is None:
        raise RuntimeError(_TORCHAO[1])
    out = copy.deepcopy(_model(model)).eval()
    with _quiet():
        module.quantize_(out, getattr(module, config_name)())
    return out


def int8_dynamic(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with int8 weights and activations quantized to int8 on every call (torchao's
    ``Int8DynamicActivationInt8WeightConfig``: per-row weight scales, per-token activation scales)."""
    return _quantized_copy(model, "Int8DynamicActivationInt8WeightConfig")


def int8_weight_only(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with int8 weights, dequantized inside the matrix product (torchao's
    ``Int8WeightOnlyConfig``): saves memory and bandwidth, computes in float."""
    return _quantized_copy(model, "Int8WeightOnlyConfig")


@dataclass
class Compiled:
    """A ``torch.compile``d model; seconds of the first call per input shape (compilation) and of the second."""

    module: Callable
    compile_s: dict[tuple[int, ...], float] = field(default_factory=dict)
    call_s: dict[tuple[int, ...], float] = field(default_factory=dict)

    @property
    def total_compile_s(self) -> float:
        return sum(self.compile_s.values())

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def _threads(threads: int | Mapping[int, int] | None, batch: int):
    """Run a batch of ``batch`` rows on its thread count (``threads``: one count, or {batch size: count})."""
    n = threads.get(batch) if isinstance(threads, Mapping) else threads
    return timing.num_threads_set(n) if n is not None else contextlib.nullcontext()


def compile_timed(model: nn.Module, example_inputs: Sequence[torch.Tensor], *,
                  threads: int | Mapping[int, int] | None = None, **compile_kwargs) -> Compiled:
    """``torch.compile(model)`` and call it once per example input (one compilation per shape: ``dynamic=False``
    unless given), timing the first call (compilation) apart from the second (notebook 05.2). ``threads`` (one
    count, or {batch size: count}) is baked into the compiled kernels. Compiler warnings are held back."""
    _model(model)
    if not example_inputs or not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise TypeError("example_inputs must be a non-empty list of tensors (one per input shape to compile for)")
    compiled = Compiled(torch.compile(model, **{"dynamic": False, **compile_kwargs}))
    for x in example_inputs:
        for record in (compiled.compile_s, compiled.call_s):
            start = time.perf_counter()
            with torch.no_grad(), _quiet(), _threads(threads, len(x)):
                compiled(x)
            hardware.synchronize(x.device)
            record[tuple(x.shape)] = time.perf_counter() - start
    return compiled


def latency(models_by_name: Mapping[str, Callable], batch_sizes: Sequence[int], in_features: int, *,
            device: torch.device | str = "cpu", threads: int | Mapping[int, int] | None = None, rounds: int = 3,
            min_run_time: float = 0.05, seed: int = 0) -> dict[int, dict[str, timing.Timing]]:
    """Time one forward pass (no gradients) of each model on a batch of each size, interleaved (A B A B ...,
    ``timing.compare_interleaved``) so drifts of the machine hit all alike (notebook 05.2, section 4). ``threads``:
    one count, or {batch size: count} (default: torch's current setting)."""
    if not isinstance(models_by_name, Mapping) or not models_by_name:
        raise ValueError("models_by_name must be a non-empty mapping name -> model")
    batch_sizes = arguments.int_list("batch_sizes", batch_sizes)
    in_features = arguments.positive_int("in_features", in_features)
    dev = hardware.as_device(device)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for n in batch_sizes:
        x = torch.randn(n, in_features, generator=gen).to(dev)
        fns = {k: functools.partial(_forward, m, x) for k, m in models_by_name.items()}
        count = threads.get(n) if isinstance(threads, Mapping) else threads
        out[n] = timing.compare_interleaved(fns, rounds=rounds, device=dev, min_run_time=min_run_time, num_threads=count)
    return out


@torch.no_grad()
def _forward(model: Callable, x: torch.Tensor) -> None:
    model(x)


def dequantized_weights(model: nn.Module) -> list[torch.Tensor]:
    """The float weights a quantized model computes with, one per Linear layer: torchao's int8 weights
    dequantized (``Int8Tensor.dequantize()``), plain weights as they are (notebook 05.2 compares torchao's
    rounding error with the hand-written one)."""
    out = []
    for layer in _model(model).modules():
        if isinstance(layer, nn.Linear):
            w = layer.weight
            out.append((w.dequantize() if hasattr(w, "dequantize") and type(w) not in (torch.Tensor, nn.Parameter)
                        else w).detach().float())
    return out


def predicted_int8_bytes(model: nn.Module) -> int:
    """Bytes of ``model`` with int8 Linear weights, one fp32 scale and one int8 zero point per output row
    (torchao's per-row int8 keeps a zero point even when it is 0), everything else in its own dtype: the size
    notebook 05.2 predicts before quantizing."""
    total = 0
    for layer in _model(model).modules():
        for name, p in layer.named_parameters(recurse=False):
            if isinstance(layer, nn.Linear) and name == "weight":
                total += p.numel() + 5 * p.shape[0]
            else:
                total += p.numel() * p.element_size()
    return total


# int8 dot-product instructions, by their Linux / macOS flag names
INT8_UNITS = {"amx_int8": "AMX INT8", "avx512_vnni": "AVX-512 VNNI", "avx512vnni": "AVX-512 VNNI",
              "avx_vnni": "AVX-VNNI", "avxvnni": "AVX-VNNI"}
INT8_EXPECTATIONS = {
    "AMX INT8": "AMX tiles multiply whole int8 blocks: compiled int8 should beat fp32 at large batches.",
    "AVX-512 VNNI": "VNNI fuses 4 int8 multiply-adds per 32-bit lane into one instruction: compiled int8 should beat "
                    "fp32 at large batches; eager pays per-call overhead.",
    "AVX-VNNI": "256-bit int8 dot products, without AVX-512: FBGEMM (PyTorch's own int8 path) runs its AVX2 "
                "kernels; torch._int_mm, torchao's int8 product, calls oneDNN only with AVX-512 VNNI and runs a plain "
                "loop here, so torchao's int8 can be many times slower than fp32 (not asserted).",
    "none": "no fused int8 dot-product instruction (VNNI, AMX): AVX2 still multiplies and adds int8 pairs in three "
            "steps (VPMADDUBSW, VPMADDWD, VPADDD), which FBGEMM (PyTorch's own int8 path) uses to beat fp32; "
            "torchao's int8 product goes through torch._int_mm, which calls oneDNN only on CPUs with AVX-512 VNNI "
            "and here runs a plain loop, one pair of numbers at a time, tens of times slower than fp32: a property "
            "of that software path, not of the instructions.",
    "held": "the CPU has fused int8 instructions, but oneDNN (where torchao's int8 product runs on such a CPU) is "
            "held below them by ONEDNN_MAX_CPU_ISA: its int8 runs on the kernels the hold allows (AVX2's three "
            "steps, say), not on the plain loop a CPU without VNNI gets; FBGEMM has its own hold "
            "(FBGEMM_ENABLE_INSTRUCTIONS).",
    "unknown": "an int8 path this course has not measured (Arm, Apple): the notebook prints the result only.",
}


def int8_units(flags: set[str] | frozenset[str] | None = None, architecture: str | None = None) -> str:
    """Which int8 dot-product instructions PyTorch's int8 kernels can use here (notebook 05.2, section 4):
    "AMX INT8", "AVX-512 VNNI", "AVX-VNNI", "none" (an x86 CPU without them), "held" (an x86 CPU with them,
    oneDNN held below them by ``ONEDNN_MAX_CPU_ISA``) or "unknown" (Arm and others).
    ``flags``: the CPU's flag names (default: this CPU's); ``INT8_EXPECTATIONS`` says what each means."""
    if flags is None:
        flags = hardware.cpu_flags()
    if not isinstance(flags, (set, frozenset)):
        raise TypeError(f"flags must be a set of CPU flag names, got {type(flags).__name__}")
    arch = (architecture or platform.machine()).lower()
    if arch not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return "unknown"
    found = [INT8_UNITS[f.lower()] for f in flags if f.lower() in INT8_UNITS]
    best = next((name for name in ("AMX INT8", "AVX-512 VNNI", "AVX-VNNI") if name in found), "none")
    if best != "none" and hardware.onednn_isa_limit() in hardware.ONEDNN_BELOW_VNNI:  # oneDNN kept below them
        return "held"
    return best
