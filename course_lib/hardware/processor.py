"""The processor's fixed facts: model, cores this process may use, SIMD flags and what they mean for training.

Read from the operating system (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS, IsProcessorFeaturePresent on
Windows); how busy the CPU is right now and how fast its arithmetic really runs is measured by ``course_lib.cpu``.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import arguments

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
    "avx_ne_convert": "AVX-NE-CONVERT",  # bf16 conversions in hardware: oneDNN's avx2_vnni_2 level runs bf16 with them
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
        bf16 = (
            "AMX (bf16 tiles)" if "AMX BF16" in self.simd else ("native bf16" if self.native_bf16 else "no native bf16")
        )
        return f"{self.architecture}, {isa}, {bf16}" + (", native fp16" if self.native_fp16 else "")


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
        return (
            model.group(1).strip() if model else platform.processor() or "unknown",
            set(flags.group(1).split()) if flags else set(),
        )
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
    arguments.text("system", system)
    arguments.instance("flags", flags, (set, frozenset), "a set of flag names")
    return system != "Windows" and bool(flags)


def hybrid_cpu() -> bool:
    """Whether this CPU mixes performance and efficiency cores (Intel since Alder Lake: Linux lists both
    ``/sys/devices/cpu_core`` and ``/sys/devices/cpu_atom``; Apple silicon: more than one performance level).
    False where the operating system does not say. ``peak.sheet_peak`` uses it (the data-sheet peak)."""
    if sys.platform == "darwin":
        return _sysctl("hw.nperflevels") not in ("", "1")
    return bool(_read("/sys/devices/cpu_atom/cpus").strip()) and bool(_read("/sys/devices/cpu_core/cpus").strip())


_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)


def _size_bytes(text: str) -> int | None:
    """'32K' -> 32768, '1024K' -> 1048576, '32M' -> 33554432 (sysfs cache sizes); None for anything else."""
    m = _SIZE.match(text)
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2).upper()] if m else None


def cache_sizes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """The data caches one core sees, as the operating system reports them: ``{"L1d": bytes, "L2": ..., "L3": ...}``.

    Linux: ``<root>/index*/level``, ``type`` and ``size`` (instruction caches left out); macOS: ``sysctl
    hw.l1dcachesize``, ``hw.l2cachesize``, ``hw.l3cachesize``; elsewhere, or where nothing is reported, an empty
    dict (unknown). A level shared by several cores (usually the last, L3) is listed at its full size. In a virtual
    machine this is what the hypervisor reports. Notebook 01, section 6 (do the weights fit in cache?); notebook 03
    measures the levels with a working-set sweep."""
    out: dict[str, int] = {}
    if sys.platform == "darwin":
        for name, key in (("L1d", "hw.l1dcachesize"), ("L2", "hw.l2cachesize"), ("L3", "hw.l3cachesize")):
            value = _sysctl(key)
            if value.isdigit() and int(value) > 0:
                out[name] = int(value)
        return out
    base = Path(root)
    for index in sorted(base.glob("index*")) if base.is_dir() else []:
        level, kind = _read(str(index / "level")).strip(), _read(str(index / "type")).strip()
        size = _size_bytes(_read(str(index / "size")))
        if level.isdigit() and size and kind != "Instruction":
            out["L1d" if level == "1" else f"L{level}"] = size
    return out


def describe_caches(caches: dict[str, int], need_bytes: int, what: str = "the data") -> str:
    """One printed line: ``caches`` (``cache_sizes``) with their sizes and whether ``need_bytes`` of ``what`` fit in
    the last, largest level ("unknown here" where none is reported). Notebook 01, section 6."""

    def size(v: int) -> str:
        return f"{v / 2**20:.3g} MiB" if v >= 2**20 else f"{v / 2**10:.3g} KiB"

    if not caches:
        return "caches: unknown here"
    fits = "fit" if arguments.nonnegative_int("need_bytes", need_bytes) <= max(caches.values()) else "do not fit"
    return "caches: " + ", ".join(f"{k} {size(v)}" for k, v in caches.items()) + f"; {what} {fits} in the last level"


def simd_features(flags: set[str]) -> tuple[str, ...]:
    """Readable names of the training-relevant SIMD features in a set of CPU flags."""
    return tuple(name for flag, name in _SIMD_FLAGS.items() if flag in flags)


# oneDNN levels (ONEDNN_MAX_CPU_ISA) that stop below the bf16 dot-product instructions (AVX512_CORE_BF16), and
# below the fused int8 ones (VNNI: AVX2_VNNI has them, AVX512_CORE does not, so the two lists are not one cut)
ONEDNN_BELOW_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
ONEDNN_BELOW_VNNI = ("SSE41", "AVX", "AVX2", "AVX512_CORE")


def onednn_isa_limit() -> str:
    """The instruction-set level oneDNN, which runs PyTorch's CPU bf16 and int8 products, is held to
    (``ONEDNN_MAX_CPU_ISA``, or its old name ``DNNL_MAX_CPU_ISA``), upper case; "" when not held, including
    oneDNN's own names for no limit, ``ALL`` and ``DEFAULT``."""
    level = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()
    return "" if level in ("ALL", "DEFAULT") else level


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
        isa = (
            "SVE"
            if "sve" in flags
            else ("NEON" if "asimd" in flags or "neon" in flags or architecture.lower() == "arm64" else "none")
        )
        bf16 = "bf16" in flags or "feat_bf16" in flags
        fp16 = bool({"fphp", "asimdhp", "feat_fp16"} & flags)
    else:
        isa = next(
            (
                name
                for flag, name in (
                    ("avx512f", "AVX-512"),
                    ("avx2", "AVX2"),
                    ("avx", "AVX"),
                    ("sse4_2", "SSE"),
                    ("sse2", "SSE"),
                )
                if flag in flags
            ),
            "none",
        )
        bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
        fp16 = bool({"avx512_fp16", "amx_fp16"} & flags)
    return {"vector_isa": isa, "native_bf16": bf16, "native_fp16": fp16}


def _cgroup_cpu_quota() -> float | None:
    """CPUs a container may use per its cgroup quota (cgroup v2 cpu.max or v1), None if unlimited."""
    text = _read("/sys/fs/cgroup/cpu.max").split()
    if len(text) == 2 and text[0] != "max":
        return int(text[0]) / int(text[1])
    quota, period = (
        _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").strip(),
        _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us").strip(),
    )
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


def hyperthread_pairs(root: str = "/sys/devices/system/cpu") -> int | None:
    """How many pairs of the CPUs this process may use are one core's two hyper-threads, by the operating system's
    topology (Linux: ``<root>/cpuN/topology/thread_siblings_list``); None where it does not say (macOS, Windows).
    A virtual machine reports what its hypervisor shows: 0 there does not rule out sibling threads on the host.
    Notebook 03, section 7 (two ranks on two vCPUs)."""
    try:
        mine = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return None
    cores = set()
    for cpu in mine:
        text = _read(f"{root}/cpu{cpu}/topology/thread_siblings_list").strip()
        if not text:
            return None
        cores.add(text)  # the same text for every thread of one core ("0,4" or "0-1")
    return len(mine) - len(cores)


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
    return CPUInfo(
        model=model,
        architecture=platform.machine(),
        physical_cores=max(1, min(physical, usable)),
        logical_cores=logical,
        simd=simd_features(flags),
        torch_capability=capability,
        usable_cores=usable,
        bf16_known=bf16_flags_known(platform.system(), flags),
        **_usable_capabilities(flags),
    )


def _usable_capabilities(flags: set[str]) -> dict:
    """``cpu_capabilities`` of this CPU, with bf16 counted as absent where oneDNN is held below its instructions."""
    caps = cpu_capabilities(flags, platform.machine())
    if caps["native_bf16"] and onednn_isa_limit() in ONEDNN_BELOW_BF16:
        caps["native_bf16"] = False
    return caps
