"""Will this dtype be fast here? ``check_compute_dtype`` refuses fp16 arithmetic on a CPU and flags emulated bf16."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

from .. import arguments, devices, hardware, names
from ..train import FP16_ON_CPU
from .formats import _FROM_TORCH

#: Dtypes a model can compute in (``check_compute_dtype``).
COMPUTE_DTYPES = ("fp32", "bf16", "fp16")


class EmulatedDtypeWarning(UserWarning):
    """A dtype that works on this device, but in software: far slower than fp32."""


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
        raise TypeError(
            f"device must be a torch.device or a str such as 'cpu' or 'cuda:0', got {type(device).__name__}"
        )
    kind, _, index = device.strip().lower().partition(":")
    if index and not index.isdigit():
        raise ValueError(f"device {device!r}: the index after ':' must be a whole number, e.g. 'cuda:0'")
    return names.device_kind(kind), int(index or 0)


def check_compute_dtype(
    dtype: Any,
    device: torch.device | str = "cpu",
    *,
    cpu: hardware.CPUInfo | None = None,
    gpu: devices.GPU | None = None,
    warn: bool = True,
) -> str:
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
            raise ValueError(
                f"This CPU ({info.kind}) has no fp16 arithmetic units (AVX-512 FP16 or Arm FP16). " + FP16_ON_CPU
            )
        if key == "fp16":
            note = (
                f"This CPU ({info.kind}) has fp16 arithmetic, but PyTorch uses it in few kernels: "
                "time fp16 against fp32 before relying on it."
            )
        elif not info.native_bf16:
            note = (
                f"bf16 is emulated on this CPU ({info.kind}): without AVX-512 BF16, AMX or Arm BF16 "
                "instructions each bf16 matmul converts to fp32 inside the kernel, far slower than fp32 "
                "(a 2048x2048 matmul took 63 s on an AVX2-only CPU). bf16 still halves memory; "
                "course_lib.cpu.profile() measures the speed here and shrinks bf16 demos."
            )
    elif kind == "cuda" and key == "bf16":
        if gpu is None:
            found = devices.DeviceFacts.here().gpus
            gpu = found[index] if index < len(found) else None
        if gpu is not None and not gpu.native_bf16:
            cc = f"{gpu.capability[0]}.{gpu.capability[1]}"
            note = (
                f"bf16 is emulated on {gpu.name} (compute capability {cc}: bf16 tensor cores start at 8.0): "
                "use fp16 with a GradScaler there."
            )
    if note and warn:
        warnings.warn(note, EmulatedDtypeWarning, stacklevel=2)
    return note
