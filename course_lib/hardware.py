"""What is this machine? CPU, memory, accelerators, platform, and which device to use.

Used by notebook 00 (setup and hardware check) and by every notebook through
``pick_device()`` and ``seed_everything()``.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import random
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

DEVICE_ENV_VAR = "COURSE_DEVICE"
DEVICE_KINDS = ("cuda", "mps", "xla", "cpu")
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
    "amx_tile": "AMX",
    "amx_bf16": "AMX BF16",
    "amx_int8": "AMX INT8",
    "asimd": "NEON",
    "sve": "SVE",
    "bf16": "BF16 (Arm)",
}


@dataclass(frozen=True)
class CPUInfo:
    model: str
    architecture: str
    physical_cores: int
    logical_cores: int
    simd: tuple[str, ...]
    torch_capability: str  # the widest SIMD level PyTorch's kernels use here, e.g. "AVX512"


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
        """A readable multi-line summary (printed by notebook 00 and ``course doctor``)."""
        gib = 2**30
        c = self.cpu
        lines = [
            f"Platform      : {self.platform} ({self.os}, Python {self.python})",
            f"CPU           : {c.model} [{c.architecture}]",
            f"Cores         : {c.physical_cores} physical, {c.logical_cores} logical",
            f"SIMD          : {', '.join(c.simd) or 'unknown'} (PyTorch kernels use: {c.torch_capability})",
            f"RAM           : {self.ram_bytes / gib:.1f} GiB total, {self.available_ram_bytes / gib:.1f} GiB available",
            f"PyTorch       : {self.torch_version}, {self.torch_threads} CPU threads, BLAS: {self.blas}",
        ]
        if not self.accelerators:
            lines.append("Accelerators  : none (every demo runs on the CPU)")
        for a in self.accelerators:
            mem = f"{a.memory_bytes / gib:.1f} GiB" if a.memory_bytes else "shared with system RAM"
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
        return model, {f.replace(".", "_") for f in flags}
    return platform.processor() or "unknown", set()


def simd_features(flags: set[str]) -> tuple[str, ...]:
    """Readable names of the training-relevant SIMD features in a set of CPU flags."""
    return tuple(name for flag, name in _SIMD_FLAGS.items() if flag in flags)


def _cpu_info() -> CPUInfo:
    import psutil

    model, flags = _cpu_model_and_flags()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # older torch
        capability = "unknown"
    return CPUInfo(model=model, architecture=platform.machine(), physical_cores=physical,
                   logical_cores=logical, simd=simd_features(flags), torch_capability=capability)


def _xla_available() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def _accelerators() -> tuple[AcceleratorInfo, ...]:
    found: list[AcceleratorInfo] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            found.append(AcceleratorInfo("cuda", i, p.name, int(p.total_memory),
                                         f"compute capability {p.major}.{p.minor}"))
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append(AcceleratorInfo("mps", 0, "Apple GPU (Metal)", None, "unified memory"))
    if _xla_available():
        try:
            import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

            dev = xm.xla_device()
            kind = xm.xla_device_hw(dev)
            found.append(AcceleratorInfo("xla", 0, f"{kind} via torch_xla", None, str(dev)))
        except Exception:  # torch_xla installed but no TPU attached
            pass
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


def _blas() -> str:
    cfg = torch.__config__.show()
    for name in ("MKL", "OpenBLAS", "Accelerate", "BLIS", "ACL"):
        if re.search(rf"BLAS_INFO=\s*{name.lower()}|USE_{name.upper()}=ON|{name}", cfg, re.I):
            return name
    return "unknown"


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
        blas=_blas(),
    )


def _kind_available(kind: str) -> bool:
    if kind == "cpu":
        return True
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    return _xla_available() and any(a.kind == "xla" for a in _accelerators())


def pick_device(prefer: str | None = None) -> torch.device:
    """The device every notebook uses: CUDA, then MPS, then XLA (TPU), then CPU.

    ``prefer`` (or the environment variable COURSE_DEVICE) forces one of
    'cuda', 'mps', 'xla', 'cpu'; asking for one this machine lacks raises ValueError.
    """
    choice = prefer if prefer is not None else os.environ.get(DEVICE_ENV_VAR) or None
    if choice is not None:
        if not isinstance(choice, str):
            raise TypeError(f"prefer must be a str such as 'cpu', got {type(choice).__name__}")
        kind = choice.strip().lower().split(":")[0]
        if kind not in DEVICE_KINDS:
            raise ValueError(f"device {choice!r} (argument prefer or ${DEVICE_ENV_VAR}): "
                             f"accepted values are {DEVICE_KINDS}")
        if not _kind_available(kind):
            raise ValueError(f"device {choice!r} was requested but this machine has no {kind} device; "
                             f"available: {[k for k in DEVICE_KINDS if _kind_available(k)]}")
        if kind == "xla":
            import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

            return xm.xla_device()
        return torch.device(choice.strip().lower())
    for kind in ("cuda", "mps"):
        if _kind_available(kind):
            return torch.device(kind)
    if _xla_available() and _kind_available("xla"):
        import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

        return xm.xla_device()
    return torch.device("cpu")


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait until queued work on ``device`` has finished (needed before reading a clock)."""
    kind = torch.device(device).type if device is not None else "cpu"
    if kind == "cuda":
        torch.cuda.synchronize()
    elif kind == "mps":
        torch.mps.synchronize()
    elif kind == "xla":
        import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

        xm.mark_step()
        xm.wait_device_ops()


def seed_everything(seed: int = 0) -> int:
    """Seed Python, numpy and torch (all devices) so deterministic cells repeat exactly."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
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


def leftover_children() -> list:
    """Child processes of this process that are still alive (psutil objects), except the
    multiprocessing resource tracker, which lives as long as the parent by design.

    Notebooks 02 and 03 and their tests use it to show that capped runs and launched ranks
    leave nothing behind.
    """
    import psutil

    kids = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(child.cmdline()):
                kids.append(child)
        except psutil.NoSuchProcess:
            pass
    return kids
