"""Number formats: what fp32, tf32, bf16, fp16 and the two fp8 formats can hold, read from ``torch.finfo`` and
built from their bit layout (``format_from_bits``).

Format names: ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8-e4m3`` (``torch.float8_e4m3fn``) and
``fp8-e5m2`` (``torch.float8_e5m2``), any case, or the ``torch.dtype`` itself.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from .. import arguments

#: Every format of the table, in order of size.
FORMATS = ("fp32", "tf32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2")
#: Formats a tensor can be cast to (tf32 is a matmul mode, not a storage type).
STORAGE_FORMATS = ("fp32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2")

_TORCH = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8-e4m3": torch.float8_e4m3fn,
    "fp8-e5m2": torch.float8_e5m2,
}
_FROM_TORCH = {str(v): k for k, v in _TORCH.items()}
_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "single": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "e4m3": "fp8-e4m3",
    "e4m3fn": "fp8-e4m3",
    "fp8-e4m3fn": "fp8-e4m3",
    "fp8_e4m3": "fp8-e4m3",
    "float8_e4m3fn": "fp8-e4m3",
    "e5m2": "fp8-e5m2",
    "fp8_e5m2": "fp8-e5m2",
    "float8_e5m2": "fp8-e5m2",
}

_NOTES = {
    "fp32": "IEEE single precision: master weights, optimizer state and reductions stay here",
    "tf32": (
        "not a storage type: NVIDIA tensor cores (Ampere and newer) round fp32 matmul inputs to 10 "
        "mantissa bits; values stay 4-byte fp32, with fp32's range"
    ),
    "bf16": "fp32's range with 8 significant bits: gradients do not underflow, no loss scaling needed",
    "fp16": "IEEE half precision: more precision than bf16 but a narrow range; small gradients need loss scaling",
    "fp8-e4m3": (
        "no infinities: the top exponent holds normal numbers and only S.1111.111 is NaN, so the "
        "largest value is 448 (an IEEE-style layout would stop at 240); the spec leaves larger values "
        "to the implementation (PyTorch 2.13's CPU cast clips them to 448, others give NaN)"
    ),
    "fp8-e5m2": (
        "IEEE-style (infinities and NaN): fp16's range with 2 mantissa bits, used for gradients in fp8 training"
    ),
}


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
        return (
            self.bits,
            self.exponent_bits,
            self.mantissa_bits,
            self.max,
            self.smallest_normal,
            self.smallest_subnormal,
            self.eps,
            self.has_inf,
        )


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
            raise ValueError(
                f"{name} {value!r} names two formats: use 'fp8-e4m3' (more precision, to 448) or "
                f"'fp8-e5m2' (more range, to 57344); accepted values are {accepted}"
            )
        if key == "tf32" and "tf32" not in accepted:
            raise ValueError(
                f"{name} 'tf32' is a matmul mode, not a storage type: tensors stay fp32 (same range, "
                f"so the same underflow as fp32); accepted values are {accepted}"
            )
    result = arguments.choice(name, value, accepted, aliases={k: v for k, v in _ALIASES.items() if v in accepted})
    return result


def format_from_bits(
    exponent_bits: int, mantissa_bits: int, *, has_inf: bool = True, name: str = "custom"
) -> NumberFormat:
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
    return NumberFormat(
        name=name,
        torch_dtype=None,
        bits=1 + e + m,
        sign_bits=1,
        exponent_bits=e,
        mantissa_bits=m,
        max=largest,
        smallest_normal=math.ldexp(1.0, 1 - bias),
        smallest_subnormal=math.ldexp(1.0, 1 - bias - m),
        eps=eps,
        decimal_digits=-math.log10(eps),
        has_inf=has_inf,
        note=_NOTES.get(name, ""),
    )


def _from_finfo(key: str) -> NumberFormat:
    """A format as ``torch.finfo`` describes it; mantissa bits from eps, infinities from a real cast."""
    dtype = _TORCH[key]
    info = torch.finfo(dtype)
    m = round(-math.log2(info.eps))
    has_inf = bool(torch.isinf(torch.tensor(float("inf")).to(dtype).float()))
    return NumberFormat(
        name=key,
        torch_dtype=str(dtype),
        bits=info.bits,
        sign_bits=1,
        exponent_bits=info.bits - 1 - m,
        mantissa_bits=m,
        max=float(info.max),
        smallest_normal=float(info.smallest_normal),
        smallest_subnormal=float(info.tiny) * float(info.eps),
        eps=float(info.eps),
        decimal_digits=-math.log10(info.eps),
        has_inf=has_inf,
        note=_NOTES[key],
    )


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
    lines = [
        "| format | bits (sign/exp/mantissa) | largest | smallest normal | smallest subnormal | eps "
        "| decimal digits | infinities |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in number_formats():
        lines.append(
            f"| {f.name} | {f.bits} ({f.sign_bits}/{f.exponent_bits}/{f.mantissa_bits}) | {f.max:.5g} | "
            f"{f.smallest_normal:.3g} | {f.smallest_subnormal:.3g} | {f.eps:.3g} | {f.decimal_digits:.1f} | "
            f"{'yes' if f.has_inf else 'no'} |"
        )
    return lines
