"""What is this machine? CPU, memory, accelerators, platform, and which device to use.

Used by notebook 00 (setup and hardware check) and by every notebook through
``pick_device()`` and ``seed_everything()``. These are the machine's fixed facts; how busy it is
right now and how fast its arithmetic really runs is measured by ``course_lib.cpu``.
"""
from __future__ import annotations

import os
import platform
import random
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import arguments, devices, names

DEVICE_ENV_VAR = "COURSE_DEVICE"
DEVICE_KINDS = names.DEVICE_KINDS
PLATFORMS = ("colab", "kaggle", "vertex-ai-workbench", "local")

# CPU features that matter for training speed, in the names Linux uses in /proc/cpuinfo.
_SIMD_FLAGS = {
    "sse4_2": "SSE4.2",
    "avx": "AVX",
    "avx2": "AVX2",
    "fma": "FMA",
    "avx512f": "AVX-512",
    "avx512_bf16": "AVX-512 BF16",
    "avx512_fp16": "AVX-512 FP16",
    "avx512_vnni": "AVX-512 VNNI",
    "avx_vnni": "AVX-VNNI",
    "amx_tile": "AMX",
    "amx_bf16": "AMX BF16",
    "amx_int8": "AMX INT8",
    "asimd": "NEON",
    "sve": "SVE",
    "bf16": "BF16 (Arm)",
}


@dataclass(frozen=True)
class CPUInfo:
    """The processor's fixed facts. ``usable_cores`` is how many logical CPUs this
    process may run on (its affinity mask and a container's CPU quota); ``physical_cores`` never
    exceeds it."""

    model: str
    architecture: str
    physical_cores: int
    logical_cores: int
    simd: tuple[str, ...]
    torch_capability: str  # the widest SIMD level PyTorch's kernels use here, e.g. "AVX512"
    vector_isa: str = "unknown"  # the widest vector instruction set: "AVX-512", "AVX2", "NEON", ...
    native_bf16: bool = False  # bf16 dot products PyTorch can use (AVX-512 BF16, AMX, Arm BF16; oneDNN not held below)
    native_fp16: bool = False  # fp16 arithmetic in hardware (AVX-512 FP16, AMX FP16, Arm FP16)
    usable_cores: int = 0
    bf16_known: bool = True  # the OS says whether bf16 instructions exist (Windows does not; see bf16_flags_known)

    @property
    def kind(self) -> str:
        """A one-line description a learner can compare with a neighbour's: 'x86_64, AVX2 only, no native bf16'."""
        isa = f"{self.vector_isa} only" if self.vector_isa in ("AVX2", "AVX", "SSE") else self.vector_isa
        bf16 = "AMX (bf16 tiles)" if "AMX BF16" in self.simd else ("native bf16" if self.native_bf16 else "no native bf16")
        return f"{self.architecture}, {isa}, {bf16}" + (", native fp16" if self.native_fp16 else "")


@dataclass(frozen=True)
class AcceleratorInfo:
    kind: str  # "cuda" | "mps" | "xla"
    index: int
    name: str
    memory_bytes: int | None  # None where the runtime does not say (MPS shares system RAM)
    capability: str  # CUDA compute capability "8.0", or a short description


@dataclass(frozen=True)
class HardwareInfo:
    cpu: CPUInfo
    ram_bytes: int
    available_ram_bytes: int
    accelerators: tuple[AcceleratorInfo, ...]
    platform: str
    os: str
    python: str
    torch_version: str
    torch_threads: int
    blas: str
    extras: dict = field(default_factory=dict)

    @property
    def has_accelerator(self) -> bool:
        return len(self.accelerators) > 0

    def to_dict(self) -> dict:
        """A JSON-friendly dictionary (for reports you compare across machines)."""
        return asdict(self)

    def report(self) -> str:
        """A readable multi-line summary (``course doctor`` prints it)."""
        gib = 2**30
        c = self.cpu
        lines = [
            f"Platform      : {self.platform} ({self.os}, Python {self.python})",
            f"CPU           : {c.model} [{c.architecture}]",
            f"Cores         : {c.physical_cores} physical, {c.logical_cores} logical"
            + (f" ({c.usable_cores} usable by this process)" if c.usable_cores and c.usable_cores < c.logical_cores else ""),
            f"SIMD          : {', '.join(c.simd) or 'unknown'} (PyTorch kernels use: {c.torch_capability})",
            f"Kind          : {c.kind}",
            f"RAM           : {self.ram_bytes / gib:.1f} GiB total, {self.available_ram_bytes / gib:.1f} GiB available",
            f"PyTorch       : {self.torch_version}, {self.torch_threads} CPU threads, BLAS: {self.blas}",
        ]
        if not self.accelerators:
            lines.append("Accelerators  : none (every demo runs on the CPU)")
        for a in self.accelerators:
            mem = (f"{a.memory_bytes / gib:.1f} GiB" if a.memory_bytes else
                   "shared with system RAM" if a.kind == "mps" else "memory size not reported")
            lines.append(f"Accelerator   : [{a.kind}:{a.index}] {a.name}, {mem}, {a.capability}")
        return "\n".join(lines)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _sysctl(name: str) -> str:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_flags() -> frozenset[str]:
    """The CPU's raw feature flags as the OS reports them (``/proc/cpuinfo`` on Linux; empty where
    unknown): for checks finer than ``simd`` names, such as int8 units."""
    return frozenset(_cpu_model_and_flags()[1])


def _cpu_model_and_flags() -> tuple[str, set[str]]:
    text = _read("/proc/cpuinfo")
    if text:
        model = re.search(r"^(?:model name|Model|Hardware)\s*:\s*(.+)$", text, re.M)
        flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
        return (model.group(1).strip() if model else platform.processor() or "unknown",
                set(flags.group(1).split()) if flags else set())
    if sys.platform == "darwin":
        model = _sysctl("machdep.cpu.brand_string") or "Apple silicon"
        flags = set(_sysctl("machdep.cpu.features").lower().split())
        flags |= set(_sysctl("machdep.cpu.leaf7_features").lower().split())
        if platform.machine() == "arm64":
            flags.add("asimd")
            if _sysctl("hw.optional.arm.FEAT_BF16") == "1":
                flags.add("bf16")
            if _sysctl("hw.optional.arm.FEAT_FP16") == "1":
                flags.add("fphp")
        return model, {f.replace(".", "_") for f in flags}
    if sys.platform == "win32":
        return platform.processor() or "unknown", _windows_flags()
    return platform.processor() or "unknown", set()


# IsProcessorFeaturePresent's numbers (processthreadsapi.h) for the x86 features Windows reports; it has none for
# AVX-512 BF16/FP16/VNNI or AMX, so on Windows those stay unknown (``CPUInfo.bf16_known`` is False)
_WINDOWS_FEATURES = {10: "sse2", 38: "sse4_2", 39: "avx", 40: "avx2", 41: "avx512f"}


def _windows_flags() -> set[str]:
    try:
        import ctypes

        present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
        return {flag for number, flag in _WINDOWS_FEATURES.items() if present(number)}
    except (AttributeError, OSError):
        return set()


def bf16_flags_known(system: str, flags: set[str] | frozenset[str]) -> bool:
    """Whether the operating system (``platform.system()``) says, in ``flags``, if this CPU has bf16 instructions:
    Linux's /proc/cpuinfo and macOS's sysctl do, Windows reports no such feature (judge a bf16 claim only where
    the answer is known)."""
    return system != "Windows" and bool(flags)


def simd_features(flags: set[str]) -> tuple[str, ...]:
    """Readable names of the training-relevant SIMD features in a set of CPU flags."""
    return tuple(name for flag, name in _SIMD_FLAGS.items() if flag in flags)


# oneDNN levels (ONEDNN_MAX_CPU_ISA) that stop below the bf16 dot-product instructions (AVX512_CORE_BF16), and
# below the fused int8 ones (VNNI: AVX2_VNNI has them, AVX512_CORE does not, so the two lists are not one cut)
ONEDNN_BELOW_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
ONEDNN_BELOW_VNNI = ("SSE41", "AVX", "AVX2", "AVX512_CORE")


def onednn_isa_limit() -> str:
    """The instruction-set level oneDNN, which runs PyTorch's CPU bf16 and int8 products, is held to
    (``ONEDNN_MAX_CPU_ISA``, or its old name ``DNNL_MAX_CPU_ISA``), upper case; "" when not held."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()


def cpu_capabilities(flags: set[str] | frozenset[str], architecture: str) -> dict:
    """What a set of CPU flags means for training (a pure function, unit-tested with faked flags).

    Returns ``vector_isa`` (the widest vector instruction set: "AVX-512", "AVX2", "AVX", "SSE",
    "SVE", "NEON" or "none"), ``native_bf16`` (bf16 dot products in hardware: x86 ``avx512_bf16``
    or ``amx_bf16``, Arm ``bf16``) and ``native_fp16`` (fp16 arithmetic in hardware: x86
    ``avx512_fp16`` or ``amx_fp16``, Arm ``fphp``/``asimdhp``).
    """
    flags = {f.lower() for f in flags}
    arm = architecture.lower() in ("arm64", "aarch64") or architecture.lower().startswith("arm")
    if arm:
        isa = "SVE" if "sve" in flags else ("NEON" if "asimd" in flags or "neon" in flags or
                                            architecture.lower() == "arm64" else "none")
        bf16 = "bf16" in flags or "feat_bf16" in flags
        fp16 = bool({"fphp", "asimdhp", "feat_fp16"} & flags)
    else:
        isa = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"),
                                            ("sse4_2", "SSE"), ("sse2", "SSE")) if flag in flags), "none")
        bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
        fp16 = bool({"avx512_fp16", "amx_fp16"} & flags)
    return {"vector_isa": isa, "native_bf16": bf16, "native_fp16": fp16}


def _cgroup_cpu_quota() -> float | None:
    """CPUs a container may use per its cgroup quota (cgroup v2 cpu.max or v1), None if unlimited."""
    text = _read("/sys/fs/cgroup/cpu.max").split()
    if len(text) == 2 and text[0] != "max":
        return int(text[0]) / int(text[1])
    quota, period = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").strip(), _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us").strip()
    if quota and period and int(quota) > 0:
        return int(quota) / int(period)
    return None


def usable_cpus() -> int:
    """Logical CPUs this process may use: its affinity mask, capped by a container's CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        n = min(n, max(1, int(quota + 0.5)))
    return max(1, n)


def _cpu_info() -> CPUInfo:
    import psutil

    model, flags = _cpu_model_and_flags()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    usable = min(usable_cpus(), logical)
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # older torch
        capability = "unknown"
    return CPUInfo(model=model, architecture=platform.machine(), physical_cores=max(1, min(physical, usable)),
                   logical_cores=logical, simd=simd_features(flags), torch_capability=capability,
                   usable_cores=usable, bf16_known=bf16_flags_known(platform.system(), flags),
                   **_usable_capabilities(flags))


def _usable_capabilities(flags: set[str]) -> dict:
    """``cpu_capabilities`` of this CPU, with bf16 counted as absent where oneDNN is held below its instructions."""
    caps = cpu_capabilities(flags, platform.machine())
    if caps["native_bf16"] and onednn_isa_limit() in ONEDNN_BELOW_BF16:
        caps["native_bf16"] = False
    return caps


def _xla_memory_bytes(device) -> int | None:  # pragma: no cover - needs torch_xla
    """A TPU core's memory from torch_xla (newer releases say bytes_limit, older ones kb_total)."""
    try:
        import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

        info = xm.get_memory_info(device)
    except Exception:  # noqa: BLE001 - a release without get_memory_info
        return None
    if "bytes_limit" in info:
        return int(info["bytes_limit"])
    return int(info["kb_total"]) * 1024 if "kb_total" in info else None


def _accelerators() -> tuple[AcceleratorInfo, ...]:
    facts = devices.DeviceFacts.here()
    found = [AcceleratorInfo("cuda", i, g.name, g.memory_bytes, f"compute capability {g.capability[0]}."
                             f"{g.capability[1]}") for i, g in enumerate(facts.gpus)]
    if facts.mps:
        found.append(AcceleratorInfo("mps", 0, "Apple GPU (Metal)", None, "unified memory"))
    if facts.xla:  # pragma: no cover - needs torch_xla
        dev = devices._xla_device()
        found.append(AcceleratorInfo("xla", 0, f"TPU {facts.tpu_on_pci or ''} via torch_xla".replace("  ", " "),
                                     _xla_memory_bytes(dev), str(dev)))
    return tuple(found)


def detect_platform() -> str:
    """Where the notebook runs: 'colab', 'kaggle', 'vertex-ai-workbench' or 'local'.

    Override with the environment variable COURSE_PLATFORM.
    """
    forced = os.environ.get("COURSE_PLATFORM")
    if forced:
        if forced not in PLATFORMS:
            raise ValueError(f"COURSE_PLATFORM={forced!r}: accepted values are {PLATFORMS}")
        return forced
    if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ or "COLAB_GPU" in os.environ:
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ or "KAGGLE_URL_BASE" in os.environ:
        return "kaggle"
    if "DL_ANACONDA_HOME" in os.environ or Path("/opt/deeplearning/metadata").exists():
        return "vertex-ai-workbench"
    return "local"


_BLAS_NAMES = {"mkl": "MKL", "open": "OpenBLAS", "openblas": "OpenBLAS", "accelerate": "Accelerate", "blis": "BLIS",
               "acl": "ACL", "armpl": "ArmPL", "flexi": "FlexiBLAS", "generic": "generic", "eigen": "Eigen"}


def blas_library(config: str | None = None) -> str:
    """The BLAS PyTorch's CPU matrix products use, from the build's ``BLAS_INFO=`` line (``torch.__config__.show()``):
    "MKL", "OpenBLAS", "Accelerate" (macOS), ...; "unknown" where the line is missing. Words elsewhere in the config
    ("LAPACK is enabled (usually provided by MKL)", "USE_MKL=OFF") say nothing about it."""
    cfg = torch.__config__.show() if config is None else config
    found = re.search(r"BLAS_INFO=\s*([A-Za-z0-9_]+)", cfg)
    if not found:
        return "unknown"
    return _BLAS_NAMES.get(found.group(1).lower(), found.group(1))


def detect() -> HardwareInfo:
    """Describe this machine: CPU, RAM, accelerators, platform, torch build (notebook 00)."""
    import psutil

    vm = psutil.virtual_memory()
    return HardwareInfo(
        cpu=_cpu_info(),
        ram_bytes=int(vm.total),
        available_ram_bytes=int(vm.available),
        accelerators=_accelerators(),
        platform=detect_platform(),
        os=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        torch_version=torch.__version__,
        torch_threads=torch.get_num_threads(),
        blas=blas_library(),
    )


def _kind_available(kind: str) -> bool:
    if kind == "cpu":
        return True
    facts = devices.DeviceFacts.here()
    return {"cuda": bool(facts.gpus), "mps": facts.mps, "xla": facts.xla}[kind]


def _device_count(kind: str) -> int:
    if kind == "cuda":
        return len(devices.DeviceFacts.here().gpus)
    return 1 if _kind_available(kind) else 0


def available_devices() -> list[str]:
    """Device strings this machine can use, e.g. ['cuda:0', 'cuda:1', 'cpu']."""
    out = []
    for kind in DEVICE_KINDS:
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
        if kind not in DEVICE_KINDS:
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
        raise ValueError(f"{name} {value!r} was requested but this machine has no {kind} device; "
                         f"available: {available_devices()}")
    if index is not None and index >= _device_count(kind):
        raise ValueError(f"{name} {value!r}: this machine has {_device_count(kind)} {kind} device(s); "
                         f"available: {available_devices()}")
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
    choice = prefer if prefer is not None else os.environ.get(DEVICE_ENV_VAR) or None
    if choice is not None:
        if not isinstance(choice, str):
            raise TypeError(f"prefer must be a str such as 'cpu', got {type(choice).__name__}")
        device = as_device(choice, "prefer" if prefer is not None else f"${DEVICE_ENV_VAR}")
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


# fp32 operations one core can start per clock cycle: vector lanes x 2 (a fused multiply-add counts
# as two operations) x the number of FMA units. Typical desktop and server cores have two units;
# some chips have one (older or low-power cores, some AVX-512 parts) or four (Apple's cores), so
# this is a data-sheet-style estimate, good to about 2x, that notebook 00 checks with a measurement.
FP32_FLOPS_PER_CYCLE = {"AVX-512": 64, "AVX2": 32, "AVX": 16, "SSE": 8, "SVE": 32, "NEON": 16}


def cpu_clock_ghz() -> float | None:
    """The CPU's clock in GHz as the operating system reports it (the maximum, else the current one),
    or None where it does not say (notebook 00, the peak estimate)."""
    import psutil

    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):  # some VMs and sandboxes hide it
        return None
    if freq is None:
        return None
    mhz = freq.max if freq.max and freq.max > 0 else freq.current
    return mhz / 1000 if mhz and mhz > 0 else None


def fp32_flops_per_cycle(vector_isa: str, vendor: str = "", family: int | None = None) -> int:
    """fp32 FLOPs one core starts per cycle: ``FP32_FLOPS_PER_CYCLE[vector_isa]``, except for the cores known to run
    512-bit instructions on 256-bit units (AMD Zen 4: vendor "AuthenticAMD", family 25 with AVX-512, which double-
    pumps them: 32 FLOP/cycle, as Zen 3's AVX2; Apple's M-series cores, whose four 128-bit NEON pipes give 32 where
    two-pipe Arm cores such as Neoverse N1 give 16). Notebooks 00 and 01 (the data-sheet peak)."""
    isa = arguments.choice("vector_isa", vector_isa, tuple(FP32_FLOPS_PER_CYCLE))
    if isa == "AVX-512" and vendor == "AuthenticAMD" and family == 25:
        return 32
    if isa == "NEON" and vendor == "Apple":  # M-series performance cores: four 128-bit FMA pipes, not two
        return 32
    return FP32_FLOPS_PER_CYCLE[isa]


def windows_vendor_family(processor: str) -> tuple[str, int | None]:
    """Vendor and family from Windows' processor string, e.g. "AMD64 Family 25 Model 97 Stepping 2, AuthenticAMD"
    -> ("AuthenticAMD", 25): Windows has no /proc/cpuinfo."""
    vendor = re.search(r"(AuthenticAMD|GenuineIntel)", processor or "")
    family = re.search(r"Family (\d+)", processor or "")
    return (vendor.group(1) if vendor else ""), (int(family.group(1)) if family else None)


def cpu_vendor_family() -> tuple[str, int | None]:
    """This x86 CPU's vendor id and family from /proc/cpuinfo ("AuthenticAMD", 25), ("Apple", None) on an Apple
    silicon Mac, or ("", None) elsewhere."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "Apple", None
    if sys.platform == "win32":
        return windows_vendor_family(platform.processor())
    try:
        text = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return "", None
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
    family = re.search(r"^cpu family\s*:\s*(\d+)", text, re.M)
    return (vendor.group(1) if vendor else ""), (int(family.group(1)) if family else None)


def cpu_peak_flops(cores: int, ghz: float, vector_isa: str, flops_per_cycle: int | None = None) -> float:
    """Data-sheet peak fp32 FLOP/s: cores x clock x FLOPs per cycle for ``vector_isa`` (notebook 00), or
    ``flops_per_cycle`` where given (``fp32_flops_per_cycle`` knows the cores that differ from their ISA's).

    A pure function: ``cpu_peak_flops(2, 2.5, "AVX2")`` is 2 x 2.5e9 x 32 = 160 GFLOP/s.
    """
    arguments.positive_int("cores", cores)
    arguments.positive("ghz", ghz)
    isa = arguments.choice("vector_isa", vector_isa, tuple(FP32_FLOPS_PER_CYCLE))
    per_cycle = FP32_FLOPS_PER_CYCLE[isa] if flops_per_cycle is None else arguments.positive_int(
        "flops_per_cycle", flops_per_cycle)
    return cores * ghz * 1e9 * per_cycle


def seed_everything(seed: int = 0) -> int:
    """Seed Python, numpy and torch (all devices) so deterministic cells repeat exactly."""
    arguments.nonnegative_int("seed", seed)
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA and MPS generators
    return seed


# --- this process's memory, as the operating system sees it (notebook 02: resident memory) ---

def proc_status_bytes(key: str) -> int | None:
    """A ``kB`` field of /proc/self/status (e.g. 'VmRSS', 'VmHWM', 'VmSize') in bytes; None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the resident high-water mark (VmHWM) to the current RSS: Linux >= 4.0 only.

    Returns False where that is not possible; ``peak_rss_bytes`` then reports the lifetime peak.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes(since_reset: bool = True) -> int | None:
    """Peak resident memory: VmHWM (since ``reset_peak_rss``) where available and ``since_reset``,
    else the process's lifetime peak from ``getrusage``; None where neither exists (Windows)."""
    if since_reset:
        hwm = proc_status_bytes("VmHWM")
        if hwm is not None:
            return hwm
    try:
        import resource
    except ImportError:  # Windows
        return None
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)  # kB on Linux, bytes on macOS


def current_rss_bytes() -> int:
    """Resident memory right now (VmRSS, or psutil elsewhere)."""
    rss = proc_status_bytes("VmRSS")
    if rss is not None:
        return rss
    import psutil

    return int(psutil.Process().memory_info().rss)
