"""Number formats and what they do to gradients: the mixed-precision part of notebook 04.

Three questions, each answered by a measurement next to a prediction:

* **What can each format hold?** :func:`number_formats` reads fp32, bf16, fp16 and the two fp8
  formats from ``torch.finfo`` (largest value, smallest normal and subnormal, machine epsilon) and
  builds tf32 (a matmul mode, not a storage type) from its bit layout with :func:`format_from_bits`,
  the same formula that, from the bit counts alone, reproduces what ``torch.finfo`` says for the others.
  :func:`format_table` prints them side by side.
* **Where do real gradients fall on that scale?** :func:`gradient_values` gathers a model's gradients;
  :func:`underflow` casts them to a 16- or 8-bit format and counts how many non-zero values become 0
  (underflow), become subnormal (kept, with fewer significant bits) or overflow. Casting is cheap on
  any CPU; only fp16 *arithmetic* is slow there. :func:`loss_scale_rescue` multiplies by a scale
  first, as ``torch.amp.GradScaler`` does with the loss, and :func:`largest_safe_scale` finds the
  largest power of two that still overflows nothing (the ceiling GradScaler's growth approaches).
  :func:`gradients_while_training` records a model's gradients at chosen steps of a real training
  run: late in training they shrink, and fp16 loses a measurable share of them.
* **Where does fp16 really underflow?** Inside the backward pass: :func:`backward_underflow` runs one
  autocast fp16 backward pass and one in fp32 and counts the activation and weight gradients fp16
  flushed to zero (casting finished gradients, above, is a proxy).
* **Why fp32 master weights?** :func:`weights_run` trains with the weights stored in fp32 (mixed
  precision) or in bf16 and counts the updates a bf16 weight rounds away (those below about 2^-8 of it).
* **Where does a mixed-precision step's time go?** :func:`record_matmuls` lists a step's matrix
  products, :func:`products_fn` replays them, :func:`step_decomposition` times step and products in
  fp32 and 16 bits interleaved, and :func:`predicted_step_ratio` is the hand model
  ``share x product_ratio + (1 - share)``.
* **Will this dtype be fast here?** :func:`check_compute_dtype` refuses fp16 arithmetic on a CPU
  (no fp16 units: every operation converts, hundreds of times slower than fp32) and warns when bf16
  is emulated (no AVX-512 BF16, AMX or Arm BF16).

Format names: ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8-e4m3`` (``torch.float8_e4m3fn``) and
``fp8-e5m2`` (``torch.float8_e5m2``), any case, or the ``torch.dtype`` itself.
"""
from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from . import arguments, devices, hardware, names
from .train import FP16_ON_CPU

__all__ = ["FORMATS", "STORAGE_FORMATS", "COMPUTE_DTYPES", "NumberFormat", "CastResult", "EmulatedDtypeWarning",
           "BackwardUnderflow", "Product", "StepDecomposition", "format_name", "format_from_bits", "number_formats",
           "number_format", "format_table", "gradient_values", "gradients_while_training", "underflow",
           "loss_scale_rescue", "largest_safe_scale", "check_compute_dtype", "backward_underflow", "weights_run",
           "record_matmuls", "products_fn", "predicted_step_ratio", "step_decomposition"]

#: Every format of the table, in order of size.
FORMATS = ("fp32", "tf32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2")
#: Formats a tensor can be cast to (tf32 is a matmul mode, not a storage type).
STORAGE_FORMATS = ("fp32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2")
#: Dtypes a model can compute in (``check_compute_dtype``).
COMPUTE_DTYPES = ("fp32", "bf16", "fp16")

_TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8-e4m3": torch.float8_e4m3fn, "fp8-e5m2": torch.float8_e5m2}
_FROM_TORCH = {str(v): k for k, v in _TORCH.items()}
_ALIASES = {"float32": "fp32", "float": "fp32", "single": "fp32", "bfloat16": "bf16", "float16": "fp16",
            "half": "fp16", "e4m3": "fp8-e4m3", "e4m3fn": "fp8-e4m3", "fp8-e4m3fn": "fp8-e4m3",
            "fp8_e4m3": "fp8-e4m3", "float8_e4m3fn": "fp8-e4m3", "e5m2": "fp8-e5m2", "fp8_e5m2": "fp8-e5m2",
            "float8_e5m2": "fp8-e5m2"}

_NOTES = {
    "fp32": "IEEE single precision: master weights, optimizer state and reductions stay here",
    "tf32": ("not a storage type: NVIDIA tensor cores (Ampere and newer) round fp32 matmul inputs to 10 "
             "mantissa bits; values stay 4-byte fp32, with fp32's range"),
    "bf16": "fp32's range with 8 significant bits: gradients do not underflow, no loss scaling needed",
    "fp16": "IEEE half precision: more precision than bf16 but a narrow range; small gradients need loss scaling",
    "fp8-e4m3": ("no infinities: the top exponent holds normal numbers and only S.1111.111 is NaN, so the "
                 "largest value is 448 (an IEEE-style layout would stop at 240); the spec leaves larger values "
                 "to the implementation (PyTorch 2.13's CPU cast clips them to 448, others give NaN)"),
    "fp8-e5m2": ("IEEE-style (infinities and NaN): fp16's range with 2 mantissa bits, used for gradients in "
                 "fp8 training"),
}


class EmulatedDtypeWarning(UserWarning):
    """A dtype that works on this device, but in software: far slower than fp32."""


@dataclass(frozen=True)
class NumberFormat:
    """One floating-point format.

    ``smallest_normal`` is ``torch.finfo``'s ``tiny``; below it values are subnormal (fewer
    significant bits) down to ``smallest_subnormal``, under which they round to 0. ``eps`` is the
    gap between 1 and the next value; ``decimal_digits`` is ``-log10(eps)``. ``has_inf``: values
    that round past ``max`` become infinity (False for fp8-e4m3, which has no infinities).
    ``torch_dtype`` is the ``torch.dtype``'s name, or None (tf32).
    """

    name: str
    torch_dtype: str | None
    bits: int
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float
    decimal_digits: float
    has_inf: bool
    note: str = ""

    @property
    def overflow_threshold(self) -> float:
        """The smallest magnitude that rounds past ``max``: ``max`` plus half the gap below it
        (65520 in fp16; in a format without infinities, the value where one would begin)."""
        gap = math.ldexp(1.0, math.frexp(self.max)[1] - 1 - self.mantissa_bits)
        return self.max + gap / 2

    @property
    def range_decades(self) -> float:
        """Powers of ten between the smallest subnormal and the largest value."""
        return math.log10(self.max / self.smallest_subnormal)

    def numbers(self) -> tuple[float, ...]:
        """The fields compared between :func:`format_from_bits` and ``torch.finfo``."""
        return (self.bits, self.exponent_bits, self.mantissa_bits, self.max, self.smallest_normal,
                self.smallest_subnormal, self.eps, self.has_inf)


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
        return (f"{self.dtype} x {self.scale:g}: {self.underflow:.2%} of {self.nonzero} non-zero values become 0, "
                f"{self.subnormal:.2%} subnormal, {self.overflow:.2%} overflow")


# ----------------------------------------------------------------------------------------------
# names and formats

def format_name(value: Any, name: str = "dtype", accepted: tuple[str, ...] = FORMATS) -> str:
    """The course's name of a number format: ``torch.float8_e4m3fn`` -> ``"fp8-e4m3"``, ``"half"`` -> ``"fp16"``.

    Used by every function of this module. TypeError for something that is not a
    name or a ``torch.dtype``; ValueError, listing ``accepted``, for an unknown or refused one.
    """
    if isinstance(value, torch.dtype):
        text = _FROM_TORCH.get(str(value))
        if text is None:
            raise ValueError(f"{name} {value} is not one of the formats here; accepted values are {accepted}")
        value = text
    if isinstance(value, str):
        key = value.strip().lower()
        if key in ("fp8", "float8"):
            raise ValueError(f"{name} {value!r} names two formats: use 'fp8-e4m3' (more precision, to 448) or "
                             f"'fp8-e5m2' (more range, to 57344); accepted values are {accepted}")
        if key == "tf32" and "tf32" not in accepted:
            raise ValueError(f"{name} 'tf32' is a matmul mode, not a storage type: tensors stay fp32 (same range, "
                             f"so the same underflow as fp32); accepted values are {accepted}")
    result = arguments.choice(name, value, accepted,
                             aliases={k: v for k, v in _ALIASES.items() if v in accepted})
    return result


def format_from_bits(exponent_bits: int, mantissa_bits: int, *, has_inf: bool = True,
                     name: str = "custom") -> NumberFormat:
    """A binary floating-point format from its bit layout: 1 sign bit, ``exponent_bits``, ``mantissa_bits``.

    It builds tf32 (8 exponent, 10 mantissa bits), and reproduces ``torch.finfo`` for the formats
    PyTorch has. The exponent bias is ``2**(e-1) - 1``; normal
    numbers are ``1.m * 2**(x - bias)``. With ``has_inf`` (IEEE 754) the all-ones exponent is kept
    for infinities and NaN, so ``max = (2 - 2**-m) * 2**bias``. Without it (the "fn" formats, as
    fp8-e4m3) that exponent holds normal numbers too and only the all-ones pattern is NaN, so
    ``max = (2 - 2**(1-m)) * 2**(bias+1)``: 448 for e4m3. Subnormals reach down to
    ``2**(1 - bias - m)``.
    """
    e = arguments.integer("exponent_bits", exponent_bits, minimum=2, maximum=15)
    m = arguments.integer("mantissa_bits", mantissa_bits, minimum=1, maximum=112)
    arguments.boolean("has_inf", has_inf)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    bias = 2 ** (e - 1) - 1
    if has_inf:
        largest = math.ldexp(2.0 - math.ldexp(1.0, -m), bias)
    else:
        largest = math.ldexp(2.0 - math.ldexp(1.0, 1 - m), bias + 1)
    eps = math.ldexp(1.0, -m)
    return NumberFormat(name=name, torch_dtype=None, bits=1 + e + m, sign_bits=1, exponent_bits=e,
                        mantissa_bits=m, max=largest, smallest_normal=math.ldexp(1.0, 1 - bias),
                        smallest_subnormal=math.ldexp(1.0, 1 - bias - m), eps=eps,
                        decimal_digits=-math.log10(eps), has_inf=has_inf, note=_NOTES.get(name, ""))


def _from_finfo(key: str) -> NumberFormat:
    """A format as ``torch.finfo`` describes it; mantissa bits from eps, infinities from a real cast."""
    dtype = _TORCH[key]
    info = torch.finfo(dtype)
    m = round(-math.log2(info.eps))
    has_inf = bool(torch.isinf(torch.tensor(float("inf")).to(dtype).float()))
    return NumberFormat(name=key, torch_dtype=str(dtype), bits=info.bits, sign_bits=1,
                        exponent_bits=info.bits - 1 - m, mantissa_bits=m, max=float(info.max),
                        smallest_normal=float(info.smallest_normal),
                        smallest_subnormal=float(info.tiny) * float(info.eps), eps=float(info.eps),
                        decimal_digits=-math.log10(info.eps), has_inf=has_inf, note=_NOTES[key])


@functools.lru_cache(maxsize=1)
def number_formats() -> tuple[NumberFormat, ...]:
    """fp32, tf32, bf16, fp16, fp8-e4m3 and fp8-e5m2.

    Every value of a PyTorch dtype is read from ``torch.finfo`` (the smallest subnormal is
    ``tiny * eps``; whether infinities exist is found by casting inf); tf32, which PyTorch has no
    dtype for, comes from :func:`format_from_bits` (8 exponent, 10 mantissa bits).
    """
    rows = []
    for key in FORMATS:
        rows.append(format_from_bits(8, 10, name="tf32") if key == "tf32" else _from_finfo(key))
    return tuple(rows)


def number_format(dtype: Any) -> NumberFormat:
    """One row of :func:`number_formats` by name or ``torch.dtype`` (notebook 04)."""
    key = format_name(dtype)
    return next(f for f in number_formats() if f.name == key)


def format_table() -> list[str]:
    """The formats as Markdown table lines (header, rule, one row each) for notebook 04:
    ``print("\\n".join(format_table()))`` or ``display(Markdown(...))``."""
    lines = ["| format | bits (sign/exp/mantissa) | largest | smallest normal | smallest subnormal | eps "
             "| decimal digits | infinities |", "|---|---|---|---|---|---|---|---|"]
    for f in number_formats():
        lines.append(f"| {f.name} | {f.bits} ({f.sign_bits}/{f.exponent_bits}/{f.mantissa_bits}) | {f.max:.5g} | "
                     f"{f.smallest_normal:.3g} | {f.smallest_subnormal:.3g} | {f.eps:.3g} | {f.decimal_digits:.1f} | "
                     f"{'yes' if f.has_inf else 'no'} |")
    return lines


# ----------------------------------------------------------------------------------------------
# gradients on that scale

def gradient_values(model: nn.Module) -> torch.Tensor:
    """Every parameter gradient of ``model`` as one flat fp32 tensor on the CPU.

    Call it after ``backward()``, or inside ``train_step``'s ``before_update`` hook: the training
    step releases gradients after its update. ValueError when no parameter has a gradient.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    grads = [p.grad.detach().flatten().float().cpu() for p in model.parameters() if p.grad is not None]
    if not grads:
        raise ValueError("model has no gradients: run a backward pass first, or collect them in train_step's "
                         "before_update hook (the training step releases gradients after its update)")
    return torch.cat(grads)


def gradients_while_training(model: nn.Module, batch: Sequence[torch.Tensor], at_steps: Sequence[int], *,
                             optimizer: str = "adam", lr: float = 1e-2) -> dict[int, torch.Tensor]:
    """Train ``model`` on one batch, over and over, and keep its gradients at ``at_steps`` (notebook 04).

    Step 0's gradients are those of the untrained model; the run lasts ``max(at_steps) + 1``
    ``train_step`` calls (fp32), and the gradients are read in its ``before_update`` hook (real,
    unscaled values). As the loss falls, the gradients shrink: late in training a share of them is
    below what fp16 can hold. Returns {step: ``gradient_values``}.
    """
    from .models import make_optimizer
    from .train import train_step

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


# ----------------------------------------------------------------------------------------------
# will it be fast here?

@functools.lru_cache(maxsize=1)
def _this_cpu() -> hardware.CPUInfo:
    return hardware.detect().cpu


def _compute_dtype(value: Any) -> str:
    if isinstance(value, torch.dtype):
        key = _FROM_TORCH.get(str(value))
        if key not in COMPUTE_DTYPES:
            raise ValueError(f"dtype {value} is not a compute dtype; accepted values are {COMPUTE_DTYPES}")
        return key
    return names.dtype(value, "dtype", COMPUTE_DTYPES)


def _device_kind(device: Any) -> tuple[str, int]:
    if isinstance(device, torch.device):
        return device.type, device.index or 0
    if not isinstance(device, str):
        raise TypeError("device must be a torch.device or a str such as 'cpu' or 'cuda:0', "
                        f"got {type(device).__name__}")
    kind, _, index = device.strip().lower().partition(":")
    if index and not index.isdigit():
        raise ValueError(f"device {device!r}: the index after ':' must be a whole number, e.g. 'cuda:0'")
    return names.device_kind(kind), int(index or 0)


def check_compute_dtype(dtype: Any, device: torch.device | str = "cpu", *, cpu: hardware.CPUInfo | None = None,
                        gpu: devices.GPU | None = None, warn: bool = True) -> str:
    """Refuse or flag a compute dtype that would run far slower than fp32 on ``device``.

    * fp16 on a CPU without fp16 arithmetic raises ValueError: no fp16 units, so every operation
      converts its inputs and runs in a slow fallback, hundreds of times slower than fp32 (a step
      takes minutes). An error, not a warning: a warning scrolls by while the cell seems to hang,
      and ``train_step`` refuses fp16-mixed on a CPU the same way. Casting to fp16 to study its range
      (:func:`underflow`) stays cheap and allowed.
    * bf16 without bf16 units (a CPU without AVX-512 BF16, AMX or Arm BF16; a GPU older than
      compute capability 8.0) issues an :class:`EmulatedDtypeWarning`: it works and still halves
      memory, but runs in software. fp16 on a CPU with fp16 units warns that PyTorch uses them in
      few kernels.

    Other devices (MPS, TPU) return "": ``devices.device_plan`` picks the 16-bit dtype they compute in.
    Returns the note ("" when the dtype runs in hardware). ``warn=False`` returns it without the
    warning (stored notebooks print it instead). ``cpu``/``gpu`` describe another machine (tests,
    "what would happen on ..."); by default this machine's are read.
    """
    key = _compute_dtype(dtype)
    kind, index = _device_kind(device)
    arguments.boolean("warn", warn)
    if cpu is not None and not isinstance(cpu, hardware.CPUInfo):
        raise TypeError(f"cpu must be a hardware.CPUInfo, got {type(cpu).__name__}")
    if gpu is not None and not isinstance(gpu, devices.GPU):
        raise TypeError(f"gpu must be a devices.GPU, got {type(gpu).__name__}")
    note = ""
    if kind == "cpu" and key != "fp32":
        info = cpu or _this_cpu()
        if key == "fp16" and not info.native_fp16:
            raise ValueError(f"This CPU ({info.kind}) has no fp16 arithmetic units (AVX-512 FP16 or Arm FP16). "
                             + FP16_ON_CPU)
        if key == "fp16":
            note = (f"This CPU ({info.kind}) has fp16 arithmetic, but PyTorch uses it in few kernels: "
                    "time fp16 against fp32 before relying on it.")
        elif not info.native_bf16:
            note = (f"bf16 is emulated on this CPU ({info.kind}): without AVX-512 BF16, AMX or Arm BF16 "
                    "instructions each bf16 matmul converts to fp32 inside the kernel, far slower than fp32 "
                    "(a 2048x2048 matmul took 63 s on an AVX2-only CPU). bf16 still halves memory; "
                    "course_lib.cpu.profile() measures the speed here and shrinks bf16 demos.")
    elif kind == "cuda" and key == "bf16":
        if gpu is None:
            found = devices.DeviceFacts.here().gpus
            gpu = found[index] if index < len(found) else None
        if gpu is not None and not gpu.native_bf16:
            cc = f"{gpu.capability[0]}.{gpu.capability[1]}"
            note = (f"bf16 is emulated on {gpu.name} (compute capability {cc}: bf16 tensor cores start at 8.0): "
                    "use fp16 with a GradScaler there.")
    if note and warn:
        warnings.warn(note, EmulatedDtypeWarning, stacklevel=2)
    return note


# ----------------------------------------------------------------------------------------------
# fp16 inside the backward pass (not a cast of finished gradients)

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
        return (f"{self.dtype} backward x {self.scale:g}: weight gradients lost {self.param_lost:.2%} of "
                f"{self.param_nonzero}; activation gradients lost {self.activation_lost:.1%} ({parts})")


def _layer_output_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype | None,
                        scale: float, device: torch.device) -> tuple[list[tuple[str, torch.Tensor]], torch.Tensor]:
    from .train import default_loss

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


def backward_underflow(model: nn.Module, batch: Sequence[torch.Tensor], dtype: Any = "fp16", *,
                       scale: float = 1.0) -> BackwardUnderflow:
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
        raise ValueError(f"an fp16 backward pass of {macs:.1e} multiply-adds on a CPU would run in its slow fp16 "
                         "fallback: use fewer examples or a smaller model (at most 5e7 parameters x examples), "
                         "or a GPU")
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


# ----------------------------------------------------------------------------------------------
# why the master weights stay fp32

def weights_run(weights: Any, make_model: Any, batch: Sequence[torch.Tensor], *, optimizer: str = "adam",
                lr: float = 1e-4, steps: int = 200, batch_size: int = 64, seed: int = 0) -> dict[str, float]:
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
    from .models import make_optimizer
    from .train import default_loss, train_step

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
        train_step(model, (x[idx].to(store), y[idx]), opt, precision="bf16-mixed" if key == "fp32" else "fp32",
                   before_update=keep)
        moved = [(p.detach() == old) & live for p, (old, live) in zip(model.parameters(), seen)]
        live = sum(int(m.sum()) for _, m in seen)
        ignored.append(sum(int(m.sum()) for m in moved) / max(live, 1))
    return {"loss_start": start, "loss_end": full_loss(), "ignored": sum(ignored) / steps, "steps": steps}


# ----------------------------------------------------------------------------------------------
# where a mixed-precision step's time goes

_MATMULS = ("mm", "addmm", "bmm", "baddbmm")


class Product(NamedTuple):
    """One matrix product of a step (:func:`record_matmuls`): ``batch`` products of ``m x k`` by ``k x n``;
    ``a_t``/``b_t``: that operand was a transposed view (kernels take different paths for it)."""

    batch: int
    m: int
    k: int
    n: int
    a_t: bool
    b_t: bool

    @property
    def flops(self) -> int:
        """Floating-point operations: ``2 batch m k n`` (a multiply and an add per term)."""
        return 2 * self.batch * self.m * self.k * self.n


def _transposed(t: torch.Tensor) -> bool:
    return t.dim() >= 2 and t.stride(-2) == 1 and t.stride(-1) != 1


def record_matmuls(fn: Any) -> list[Product]:
    """Call ``fn()`` once and list the matrix products it ran (where a step's time goes).

    A ``TorchDispatchMode`` sees every ``aten.mm``/``addmm`` (``batch`` 1) and ``bmm``/``baddbmm``
    below autograd, so the backward pass's products are listed too: a ``Linear`` layer shows up as
    its forward product, the gradient of its input (absent for the first layer, whose input needs no
    gradient) and the gradient of its weight, with the layout of each operand (a weight enters
    transposed). Shapes only: the dtype autocast picks does not change them.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    arguments.function("fn", fn)
    found: list[Product] = []
    ops = {getattr(torch.ops.aten, name).default: name for name in _MATMULS}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = ops.get(func)
            if name is not None:
                a, b = (args[0], args[1]) if name in ("mm", "bmm") else (args[1], args[2])
                batch = 1 if name in ("mm", "addmm") else a.shape[0]
                found.append(Product(batch, a.shape[-2], a.shape[-1], b.shape[-1], _transposed(a), _transposed(b)))
            return func(*args, **(kwargs or {}))

    with Record():
        fn()
    return found


def _operand(batch: int, rows: int, cols: int, transposed: bool, gen: torch.Generator) -> torch.Tensor:
    t = torch.randn(batch, cols, rows, generator=gen).transpose(-2, -1) if transposed else \
        torch.randn(batch, rows, cols, generator=gen)
    return t[0] if batch == 1 else t


def products_fn(products: Sequence[Product], dtype: Any, device: torch.device | str = "cpu"):
    """A no-argument function that runs ``products`` (from :func:`record_matmuls`) on random ``dtype``
    matrices of the same shapes and layouts, one after the other (a step's products
    without the rest of the step)."""
    key = format_name(dtype, accepted=("fp32", "bf16", "fp16"))
    dev = torch.device(device) if isinstance(device, str) else device
    if not isinstance(dev, torch.device):
        raise TypeError(f"device must be a torch.device or a str, got {type(device).__name__}")
    if not isinstance(products, (list, tuple)) or not products:
        raise ValueError("products must be a non-empty list of Product, as record_matmuls returns")
    if not all(isinstance(p, Product) for p in products):
        raise TypeError("products must hold Product tuples (record_matmuls returns them)")
    gen = torch.Generator().manual_seed(0)
    pairs = []
    for p in products:
        for size in (p.batch, p.m, p.k, p.n):
            arguments.positive_int("every size of products", size)
        a = _operand(p.batch, p.m, p.k, p.a_t, gen).to(dev, _TORCH[key])
        b = _operand(p.batch, p.k, p.n, p.b_t, gen).to(dev, _TORCH[key])
        pairs.append((a, b))

    def run() -> None:
        for a, b in pairs:
            torch.matmul(a, b)

    return run


def predicted_step_ratio(share: float, product_ratio: float, rest_ratio: float = 1.0) -> float:
    """Mixed-precision step time over fp32 step time, from the step's parts:
    ``share x product_ratio + (1 - share) x rest_ratio``.

    ``share`` is the fraction of the fp32 step spent in matrix products, ``product_ratio`` their
    16-bit time over their fp32 time, ``rest_ratio`` the same for everything else (optimizer update,
    elementwise work, autocast's casts): about 1, since 16 bits do not speed them up much on a CPU.
    Amdahl's law: a step whose products take 10 % of its time can gain at most 10 %.
    """
    share = arguments.number("share", share, minimum=0, maximum=1)
    product_ratio = arguments.positive("product_ratio", product_ratio)
    rest_ratio = arguments.positive("rest_ratio", rest_ratio)
    return share * product_ratio + (1 - share) * rest_ratio


@dataclass(frozen=True)
class StepDecomposition:
    """A training step split into its matrix products and the rest, in fp32 and mixed precision,
    all timed interleaved. Seconds per call; ``casts_low``: autocast's casts of every
    weight to 16 bits and of every weight gradient back to fp32, timed alone; ``noisy``: a timing
    spread widely."""

    batch: int
    low: str
    products: int
    step_fp32: float
    step_low: float
    products_fp32: float
    products_low: float
    casts_low: float
    noisy: bool

    @property
    def share(self) -> float:
        """Fraction of the fp32 step spent in its matrix products (at most 1)."""
        return min(1.0, self.products_fp32 / self.step_fp32)

    @property
    def product_ratio(self) -> float:
        """The same products in 16 bits over fp32."""
        return self.products_low / self.products_fp32

    @property
    def rest_ratio(self) -> float:
        """Everything but the products, 16-bit step over fp32 step (measured as step minus products)."""
        rest = self.step_fp32 - self.products_fp32
        return (self.step_low - self.products_low) / rest if rest > 0 else float("nan")

    @property
    def predicted(self) -> float:
        """:func:`predicted_step_ratio` from the share and the products' ratio (the rest unchanged)."""
        return predicted_step_ratio(self.share, self.product_ratio)

    @property
    def predicted_with_casts(self) -> float:
        """:attr:`predicted` plus autocast's casts (``casts_low``) as a share of the fp32 step."""
        return self.predicted + self.casts_low / self.step_fp32

    @property
    def measured(self) -> float:
        """Mixed-precision step time over fp32 step time, measured."""
        return self.step_low / self.step_fp32


def _casts_fn(model: nn.Module, half: torch.dtype):
    """What autocast adds per step for ``model``: each weight cast to ``half`` (forward) and a ``half``
    gradient of each cast back to fp32 (backward, into the fp32 ``.grad``)."""
    weights = [p.detach() for p in model.parameters() if p.dim() >= 2]
    grads = [torch.zeros_like(w, dtype=half) for w in weights]

    def run() -> None:
        for w, g in zip(weights, grads):
            w.to(half)
            g.to(torch.float32)

    return run


def step_decomposition(make_model: Any, batch: Sequence[torch.Tensor], *, low: str = "bf16-mixed",
                       optimizer: str = "adam", rounds: int = 3, min_run_time: float = 0.05) -> StepDecomposition:
    """Time a training step of ``make_model()`` on ``batch`` in fp32 and in ``low`` precision, the same
    step's matrix products alone in fp32 and in 16 bits, and autocast's weight casts, interleaved
    (A B C D E A B ...; notebook 04).

    The products are the ones :func:`record_matmuls` sees in one fp32 step, replayed on random
    matrices (:func:`products_fn`); ``train.make_step_fn`` makes the steps (each its own model, the
    same seed). ``timing.compare_interleaved`` times the five, ``rounds`` rounds. Autocast casts the
    weights of products (``Linear``, convolutions), so the casts timed are those of every parameter
    with two or more dimensions.
    """
    from . import timing
    from .train import make_step_fn

    arguments.function("make_model", make_model)
    low = names.precision(low)
    if low == "fp32":
        raise ValueError("low must be a mixed precision ('bf16-mixed' or 'fp16-mixed'), not 'fp32'")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError("batch must be a pair (inputs, targets) of tensors")
    steps, built = {}, {}
    for p in ("fp32", low):
        torch.manual_seed(0)
        built[p] = make_model()
        if not isinstance(built[p], nn.Module):
            raise TypeError(f"make_model must return a torch.nn.Module, got {type(built[p]).__name__}")
        steps[p] = make_step_fn(built[p], batch[0], batch[1], optimizer, precision=p)
    shapes = record_matmuls(steps["fp32"])
    if not shapes:
        raise ValueError("the step ran no matrix products (mm, addmm, bmm): nothing to decompose")
    dev = batch[0].device
    half = "bf16" if low == "bf16-mixed" else "fp16"
    fns = {"step fp32": steps["fp32"], f"step {low}": steps[low],
           "products fp32": products_fn(shapes, "fp32", dev), f"products {half}": products_fn(shapes, half, dev),
           "casts": _casts_fn(built[low], _TORCH[half])}
    timed = timing.compare_interleaved(fns, rounds=rounds, device=dev, min_run_time=min_run_time)
    s = [timed[k].seconds for k in fns]
    return StepDecomposition(len(batch[0]), low, len(shapes), *s, any(t.noisy for t in timed.values()))
