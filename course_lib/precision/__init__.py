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

Each question has its own file: ``formats``, ``gradients``, ``master_weights``, ``step_time`` and
``compute_dtype``; every name can be reached from here.
"""

from __future__ import annotations

from .compute_dtype import COMPUTE_DTYPES, EmulatedDtypeWarning, check_compute_dtype
from .formats import (
    FORMATS,
    STORAGE_FORMATS,
    NumberFormat,
    format_from_bits,
    format_name,
    format_table,
    number_format,
    number_formats,
)
from .gradients import (
    BackwardUnderflow,
    CastResult,
    backward_underflow,
    gradient_values,
    gradients_while_training,
    largest_safe_scale,
    loss_scale_rescue,
    underflow,
)
from .master_weights import weights_run
from .step_time import Product, StepDecomposition, predicted_step_ratio, products_fn, record_matmuls, step_decomposition


__all__ = [
    "FORMATS",
    "STORAGE_FORMATS",
    "COMPUTE_DTYPES",
    "NumberFormat",
    "CastResult",
    "EmulatedDtypeWarning",
    "BackwardUnderflow",
    "Product",
    "StepDecomposition",
    "format_name",
    "format_from_bits",
    "number_formats",
    "number_format",
    "format_table",
    "gradient_values",
    "gradients_while_training",
    "underflow",
    "loss_scale_rescue",
    "largest_safe_scale",
    "check_compute_dtype",
    "backward_underflow",
    "weights_run",
    "record_matmuls",
    "products_fn",
    "predicted_step_ratio",
    "step_decomposition",
]
