"""The course's vocabulary: one list each of dtypes, precisions, optimizers and device kinds.

Every module that takes one of these names checks it here, so the same spellings work everywhere
(case does not matter; ``"float32"``, ``"FP32"`` and ``torch.float32`` all mean ``"fp32"``).

* **dtypes** (``DTYPES``): the number formats of the catalog's peak table and of the tensors we
  time: fp64, fp32, tf32, bf16, fp16, fp8, int8. ``tf32`` (a matmul mode of NVIDIA tensor cores)
  and ``fp8`` (two formats, e4m3 and e5m2) are names of hardware rates, not storage types, so
  :func:`torch_dtype` refuses them.
* **precisions** (``PRECISIONS``): training recipes: ``fp32``, ``bf16-mixed`` and ``fp16-mixed``
  (``torch.autocast`` with fp32 master weights).
* **optimizers** (``OPTIMIZERS``): ``sgd``, ``momentum`` (SGD, momentum 0.9), ``adam``, ``adamw``.
* **device kinds** (``DEVICE_KINDS``): ``cuda``, ``mps``, ``xla`` (TPU), ``cpu``.

This module imports only the standard library (``torch`` only inside :func:`torch_dtype`), so the
data tables can use it too.
"""

from __future__ import annotations

from typing import Any

from . import arguments

__all__ = [
    "DTYPES",
    "PRECISIONS",
    "OPTIMIZERS",
    "DEVICE_KINDS",
    "OPTIMIZER_STATE_BUFFERS",
    "dtype",
    "torch_dtype",
    "bytes_per_element",
    "precision",
    "precision_dtype",
    "optimizer",
    "device_kind",
]

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
_TENSOR_DTYPES = ("fp64", "fp32", "bf16", "fp16", "int8")  # the dtypes a tensor can be stored in
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
DEVICE_KINDS = ("cuda", "mps", "xla", "cpu")

#: Optimizer state tensors of the size of the parameters: momentum keeps one, Adam two moments.
OPTIMIZER_STATE_BUFFERS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}

_DTYPE_ALIASES = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "single": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "fp8-e4m3": "fp8",
    "fp8-e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
}
_PRECISION_ALIASES = {
    "float32": "fp32",
    "bf16": "bf16-mixed",
    "fp16": "fp16-mixed",
    "amp-bf16": "bf16-mixed",
    "amp-fp16": "fp16-mixed",
}
_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def _from_torch(value: Any) -> str | None:
    """The course name of a ``torch.dtype`` (without importing torch when it is not loaded)."""
    text = str(value)
    if not text.startswith("torch."):
        return None
    return {
        "torch.float64": "fp64",
        "torch.float32": "fp32",
        "torch.bfloat16": "bf16",
        "torch.float16": "fp16",
        "torch.int8": "int8",
    }.get(text)


def dtype(value: Any, name: str = "dtype", accepted: tuple[str, ...] = DTYPES) -> str:
    """The course's name for a dtype: ``"bfloat16"`` -> ``"bf16"``, ``torch.float32`` -> ``"fp32"``."""
    if not isinstance(value, str):
        from_torch = _from_torch(value)
        if from_torch is None:
            raise TypeError(
                f"{name} must be a dtype name such as 'fp32' or a torch.dtype; accepted values are "
                f"{accepted}, got {type(value).__name__} {value!r}"
            )
        value = from_torch
    return arguments.choice(name, value, accepted, aliases={k: v for k, v in _DTYPE_ALIASES.items() if v in accepted})


def _tensor_dtype(value: Any, name: str = "dtype") -> str:
    """Like :func:`dtype`, for formats a tensor can be stored in (not tf32 or generic fp8)."""
    return dtype(value, name, _TENSOR_DTYPES)


def torch_dtype(value: Any, name: str = "dtype"):
    """The ``torch.dtype`` for a name or dtype: ``"bf16"`` -> ``torch.bfloat16``."""
    import torch

    key = _tensor_dtype(value, name)
    return {
        "fp64": torch.float64,
        "fp32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "int8": torch.int8,
    }[key]


def bytes_per_element(value: Any, name: str = "dtype") -> int:
    """Bytes one element takes: fp32 4, bf16 2, int8 1 (tf32 is stored in 4 bytes, fp8 in 1)."""
    return _BYTES[dtype(value, name)]


def precision(value: Any, name: str = "precision") -> str:
    """One of ``PRECISIONS`` (``"bf16"`` is read as ``"bf16-mixed"``)."""
    return arguments.choice(name, value, PRECISIONS, aliases=_PRECISION_ALIASES)


def precision_dtype(value: Any) -> str | None:
    """The 16-bit dtype a precision computes in under autocast (None for fp32)."""
    return {"fp32": None, "bf16-mixed": "bf16", "fp16-mixed": "fp16"}[precision(value)]


def optimizer(value: Any, name: str = "optimizer") -> str:
    """One of ``OPTIMIZERS``."""
    return arguments.choice(name, value, OPTIMIZERS, aliases={"sgd-momentum": "momentum"})


def device_kind(value: Any, name: str = "device") -> str:
    """One of ``DEVICE_KINDS``; 'gpu' is refused with a hint that NVIDIA GPUs are 'cuda'."""
    if isinstance(value, str) and value.strip().lower() in ("gpu", "tpu"):
        hint = "'cuda' (NVIDIA GPUs)" if value.strip().lower() == "gpu" else "'xla' (TPUs, through torch_xla)"
        raise ValueError(f"{name} {value!r} is not known; accepted values are {DEVICE_KINDS}: use {hint}")
    return arguments.choice(name, value, DEVICE_KINDS)
