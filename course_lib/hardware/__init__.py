"""What is this machine? CPU, memory, accelerators, platform, and which device to use.

Used by notebook 00 (setup and hardware check) and by every notebook through
``pick_device()``. These are the machine's fixed facts; how busy it is
right now and how fast its arithmetic really runs is measured by ``course_lib.cpu``.

Which device to use (``pick_device``, ``as_device``, ``synchronize``, ``graph_cut``) is defined here
(the seed is ``course_lib.seeds``); the facts live in the package's parts, and every name can be
reached from here:

==================  ==========================================================================
``processor``       the CPU: ``CPUInfo``, ``cpu_flags``, ``simd_features``, ``cpu_capabilities``,
                    ``usable_cpus``, ``cache_sizes``, oneDNN's instruction-set hold (``onednn_isa_limit``)
``peak``            its data-sheet peak: ``cpu_peak_flops``, ``fp32_flops_per_cycle``, ``cpu_clock_ghz``,
                    ``blas_flops_per_cycle``
``machine``         the whole machine: ``detect`` (a ``HardwareInfo``), ``detect_platform``, ``blas_library``,
                    ``memory_settings`` (swap, overcommit, a container's cap), ``disk_of``
``process_memory``  this process's resident memory: ``current_rss_bytes``, ``peak_rss_bytes``
==================  ==========================================================================
"""

from __future__ import annotations

import os

import torch

from .. import devices, names
from .machine import (
    PLATFORMS,
    AcceleratorInfo,
    HardwareInfo,
    MemorySettings,
    blas_library,
    detect,
    detect_platform,
    disk_of,
    memory_settings,
)
from .peak import (
    FP32_FLOPS_PER_CYCLE,
    blas_flops_per_cycle,
    cpu_clock_ghz,
    cpu_peak_flops,
    cpu_vendor_family,
    fp32_flops_per_cycle,
    windows_vendor_family,
)
from .process_memory import current_rss_bytes, peak_rss_bytes, proc_status_bytes, reset_peak_rss
from .processor import (
    ONEDNN_BELOW_BF16,
    ONEDNN_BELOW_VNNI,
    CPUInfo,
    bf16_flags_known,
    cache_sizes,
    hyperthread_pairs,
    cpu_capabilities,
    cpu_flags,
    onednn_isa_limit,
    simd_features,
    usable_cpus,
)

_DEVICE_ENV_VAR = "COURSE_DEVICE"

__all__ = [
    "as_device",
    "pick_device",
    "synchronize",
    "graph_cut",
    "PLATFORMS",
    "AcceleratorInfo",
    "HardwareInfo",
    "blas_library",
    "detect",
    "detect_platform",
    "MemorySettings",
    "disk_of",
    "memory_settings",
    "FP32_FLOPS_PER_CYCLE",
    "cpu_clock_ghz",
    "blas_flops_per_cycle",
    "cpu_peak_flops",
    "cpu_vendor_family",
    "fp32_flops_per_cycle",
    "windows_vendor_family",
    "current_rss_bytes",
    "peak_rss_bytes",
    "proc_status_bytes",
    "reset_peak_rss",
    "ONEDNN_BELOW_BF16",
    "ONEDNN_BELOW_VNNI",
    "CPUInfo",
    "bf16_flags_known",
    "cache_sizes",
    "hyperthread_pairs",
    "cpu_capabilities",
    "cpu_flags",
    "onednn_isa_limit",
    "simd_features",
    "usable_cpus",
]


def _kind_available(kind: str) -> bool:
    if kind == "cpu":
        return True
    facts = devices.DeviceFacts.here()
    return {"cuda": bool(facts.gpus), "mps": facts.mps, "xla": facts.xla}[kind]


def _device_count(kind: str) -> int:
    if kind == "cuda":
        return len(devices.DeviceFacts.here().gpus)
    return 1 if _kind_available(kind) else 0


def _available_devices() -> list[str]:
    """Device strings this machine can use, e.g. ['cuda:0', 'cuda:1', 'cpu']."""
    out = []
    for kind in names.DEVICE_KINDS:
        n = _device_count(kind)
        out += [f"{kind}:{i}" for i in range(n)] if kind == "cuda" else ([kind] if n else [])
    return out


def as_device(value: torch.device | str | None, name: str = "device") -> torch.device:
    """Check a device argument and return it as a ``torch.device`` (every timing and training helper).

    Accepts a ``torch.device`` or a string 'cpu', 'cuda', 'cuda:N', 'mps', 'xla' (any case); None
    means the CPU. Raises TypeError for other types and ValueError for unknown kinds ('gpu' gets a
    hint) or a device this machine does not have, listing what it has.
    """
    if value is None:
        return torch.device("cpu")
    if isinstance(value, torch.device):
        kind, index = value.type, value.index
        if kind not in names.DEVICE_KINDS:
            return value  # e.g. 'meta': PyTorch's own, left to PyTorch
    elif isinstance(value, str):
        text = value.strip().lower()
        kind_text, _, index_text = text.partition(":")
        kind = names.device_kind(kind_text, name)
        index = None
        if index_text:
            if not index_text.isdigit():
                raise ValueError(f"{name} {value!r}: the index after ':' must be a whole number, e.g. 'cuda:0'")
            index = int(index_text)
    else:
        raise TypeError(f"{name} must be a torch.device or a str such as 'cpu' or 'cuda:0', got {type(value).__name__}")
    if not _kind_available(kind):
        raise ValueError(
            f"{name} {value!r} was requested but this machine has no {kind} device; available: {_available_devices()}"
        )
    if index is not None and index >= _device_count(kind):
        raise ValueError(
            f"{name} {value!r}: this machine has {_device_count(kind)} {kind} device(s); "
            f"available: {_available_devices()}"
        )
    if kind == "xla":
        return devices.xla_device()
    return torch.device(kind) if index is None else torch.device(kind, index)


def pick_device(prefer: str | None = None) -> torch.device:
    """The device every notebook uses: CUDA, then MPS, then XLA (TPU), then CPU
    (``devices.current_plan()`` decides, and says what else changes there).

    ``prefer`` (or the environment variable COURSE_DEVICE) forces one of 'cuda', 'cuda:N', 'mps',
    'xla', 'cpu'; asking for one this machine lacks raises ValueError listing what it has. float32
    matmuls on the chosen device are set to full float32 precision (``devices.apply``).
    """
    choice = prefer if prefer is not None else os.environ.get(_DEVICE_ENV_VAR) or None
    if choice is not None:
        if not isinstance(choice, str):
            raise TypeError(f"prefer must be a str such as 'cpu', got {type(choice).__name__}")
        device = as_device(choice, "prefer" if prefer is not None else f"${_DEVICE_ENV_VAR}")
    else:
        device = as_device(devices.current_plan().device)
    devices.apply(device.type)
    return device


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait until queued work on ``device`` has finished (needed before reading a clock)."""
    dev = device if isinstance(device, torch.device) else as_device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)  # this device, not the current one
    elif dev.type == "mps":
        torch.mps.synchronize()
    elif dev.type == "xla":
        import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

        graph_cut(dev)
        xm.wait_device_ops()


def graph_cut(device: torch.device | str | None = None) -> None:
    """End the lazy graph on an XLA device (a TPU): what was traced since the last cut compiles once and runs as
    one graph, and values read after the cut cost no retrace. A training step cuts once, after its update;
    without the cut each step's graph would hold every step before it, and compile again. Elsewhere (CPU,
    CUDA, MPS run each operation as it comes) this does nothing."""
    dev = device if isinstance(device, torch.device) else as_device(device)
    if dev.type != "xla":
        return
    import torch_xla  # type: ignore[import-not-found]

    if hasattr(torch_xla, "sync"):  # torch_xla 2.4 and newer
        torch_xla.sync()
    else:
        import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

        xm.mark_step()
