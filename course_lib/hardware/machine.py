"""The whole machine described once: CPU, memory, accelerators, platform and torch build (``detect``)."""

from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .. import devices
from .processor import CPUInfo, _cpu_info, _read

PLATFORMS = ("colab", "kaggle", "vertex-ai-workbench", "local")


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
            f"Cores         : {c.physical_cores} physical; {c.logical_cores} logical CPUs (hardware threads)"
            + (
                f", {c.usable_cores} usable by this process"
                if c.usable_cores and c.usable_cores < c.logical_cores
                else ""
            ),
            f"SIMD          : {', '.join(c.simd) or 'unknown'} (PyTorch's compute routines use: {c.torch_capability})",
            f"Kind          : {c.kind}",
            f"RAM           : {self.ram_bytes / gib:.1f} GiB total, {self.available_ram_bytes / gib:.1f} GiB available",
            f"PyTorch       : {self.torch_version}, {self.torch_threads} CPU threads, BLAS: {self.blas}",
        ]
        if not self.accelerators:
            lines.append("Accelerators  : none (every demo runs on the CPU)")
        for a in self.accelerators:
            mem = (
                f"{a.memory_bytes / gib:.1f} GiB"
                if a.memory_bytes
                else "shared with system RAM"
                if a.kind == "mps"
                else "memory size not reported"
            )
            lines.append(f"Accelerator   : [{a.kind}:{a.index}] {a.name}, {mem}, {a.capability}")
        return "\n".join(lines)


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
    found = [
        AcceleratorInfo("cuda", i, g.name, g.memory_bytes, f"compute capability {g.capability[0]}.{g.capability[1]}")
        for i, g in enumerate(facts.gpus)
    ]
    if facts.mps:
        found.append(AcceleratorInfo("mps", 0, "Apple GPU (Metal)", None, "unified memory"))
    if facts.xla:  # pragma: no cover - needs torch_xla
        dev = devices.xla_device()
        found.append(
            AcceleratorInfo(
                "xla",
                0,
                f"TPU {facts.tpu_on_pci or ''} via torch_xla".replace("  ", " "),
                _xla_memory_bytes(dev),
                str(dev),
            )
        )
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


_BLAS_NAMES = {
    "mkl": "MKL",
    "open": "OpenBLAS",
    "openblas": "OpenBLAS",
    "accelerate": "Accelerate",
    "blis": "BLIS",
    "acl": "ACL",
    "armpl": "ArmPL",
    "flexi": "FlexiBLAS",
    "generic": "generic",
    "eigen": "Eigen",
}


def blas_library(config: str | None = None) -> str:
    """The BLAS PyTorch's CPU matrix products use, from the build's ``BLAS_INFO=`` line (``torch.__config__.show()``):
    "MKL", "OpenBLAS", "Accelerate" (macOS), ...; "unknown" where the line is missing. Words elsewhere in the config
    ("LAPACK is enabled (usually provided by MKL)", "USE_MKL=OFF") say nothing about it."""
    cfg = torch.__config__.show() if config is None else config
    found = re.search(r"BLAS_INFO=\s*([A-Za-z0-9_]+)", cfg)
    if not found:
        return "unknown"
    return _BLAS_NAMES.get(found.group(1).lower(), found.group(1))


#: Allocators a process may load in place of the C library's malloc (``LD_PRELOAD``, or linked in).
_PRELOADED_MALLOCS = {"tcmalloc": "tcmalloc", "jemalloc": "jemalloc", "mimalloc": "mimalloc"}
#: glibc settings that change where large blocks come from and when freed memory goes back.
_GLIBC_MALLOC_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def malloc_library(maps: str | None = None, system: str | None = None) -> str:
    """The allocator behind this process's ``malloc``: "tcmalloc", "jemalloc" or "mimalloc"
    where one is loaded (``/proc/self/maps``; ``LD_PRELOAD`` is the usual way), else the system's: "glibc" (Linux),
    "macOS libmalloc", "Windows heap". ``maps`` and ``system`` stand in for the file and ``platform.system()``."""
    system = platform.system() if system is None else system
    if maps is None and system == "Linux":
        try:
            maps = Path("/proc/self/maps").read_text(errors="ignore")
        except OSError:
            maps = ""
    for marker, name in _PRELOADED_MALLOCS.items():
        if re.search(rf"/lib{marker}[\w.-]*\.so", maps or ""):
            return name
    return {"Linux": "glibc", "Darwin": "macOS libmalloc", "Windows": "Windows heap"}.get(system, "unknown")


def large_blocks_returned_on_free(
    library: str | None = None, environ: dict | None = None, arch: str | None = None
) -> tuple[bool, str]:
    """Whether freeing a tensor of hundreds of MiB gives its pages straight back to the operating system, and why
    (notebook 00 judges its "del" claim only where it does). glibc serves such a block with its own ``mmap`` (above
    ``M_MMAP_THRESHOLD``, at most 32 MiB on 64-bit systems) and ``munmap``s it on ``free``, unless ``MALLOC_*``
    settings change that; macOS's libmalloc hands very large blocks to the operating system and back too. tcmalloc,
    jemalloc and mimalloc keep freed memory for reuse and release it later, on their own schedule; PyTorch's Windows
    builds allocate tensors with a mimalloc built into PyTorch, and recent builds for 64-bit Arm may, so those are
    not judged. ``library``, ``environ`` and ``arch`` stand in for :func:`malloc_library`, ``os.environ`` and
    ``platform.machine()``."""
    library = malloc_library() if library is None else library
    environ = os.environ if environ is None else environ
    arch = (platform.machine() if arch is None else arch).lower()
    if library in _PRELOADED_MALLOCS.values():
        return False, f"{library} is this process's allocator: it keeps freed memory for reuse and returns it later"
    if library == "Windows heap":
        return False, "PyTorch's Windows builds allocate tensors with their own mimalloc, which keeps freed memory"
    if arch in ("aarch64", "arm64"):
        return False, (
            "PyTorch builds for 64-bit Arm since 2.10 may allocate with their own mimalloc (pytorch#164741), which "
            "keeps freed memory"
        )
    if library == "glibc":
        changed = [name for name in _GLIBC_MALLOC_SETTINGS if environ.get(name)]
        if "malloc" in environ.get("GLIBC_TUNABLES", ""):
            changed.append("GLIBC_TUNABLES")
        if changed:
            return False, f"glibc's malloc runs with {', '.join(changed)} set, which decide when freed memory goes back"
        return True, "glibc's malloc maps a block this large on its own and unmaps it on free"
    if library == "macOS libmalloc":
        return True, "macOS's malloc hands a block this large to the operating system and back"
    return False, "this system's allocator is unknown to the course"


def container_memory_limit() -> tuple[int, int] | None:
    """(limit, in use) in bytes where a container caps this process's memory (cgroup v2 ``memory.max`` or v1
    ``memory.limit_in_bytes``), None where nothing does: Docker, Kaggle and JupyterHub kill a process past it,
    whatever the host's RAM. In use leaves out the inactive page cache the kernel reclaims first, as docker stats
    does."""
    for folder, limit_file, usage_file, cache_line in (
        ("/sys/fs/cgroup/", "memory.max", "memory.current", "inactive_file"),
        ("/sys/fs/cgroup/memory/", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
    ):
        limit, usage = _read(folder + limit_file).strip(), _read(folder + usage_file).strip()
        if limit.isdigit() and int(limit) < 2**60:  # "max", or v1's huge number: no limit
            stat = dict(
                line.split()[:2] for line in _read(folder + "memory.stat").splitlines() if len(line.split()) >= 2
            )
            cache = (
                int(stat.get(cache_line, "0")) if stat.get(cache_line, "0").isdigit() else 0
            )  # reclaimable page cache
            return int(limit), max(0, int(usage) - cache) if usage.isdigit() else 0
    return None


_OVERCOMMIT = {
    "0": "overcommit heuristic (the default: grants more than is free, pages come when touched)",
    "1": "overcommit always (grants every request)",
    "2": "overcommit never (refuses a request past swap plus a share of RAM)",
}


@dataclass(frozen=True)
class MemorySettings:
    """What decides the fate of a process that outgrows RAM on this machine (:func:`memory_settings`)."""

    system: str
    ram_bytes: int
    swap_bytes: int
    overcommit: str  # Linux's /proc/sys/vm/overcommit_memory, in words; "" elsewhere
    container_limit_bytes: int | None  # a cgroup's memory cap, None where none applies

    def summary(self) -> str:
        gib = 2**30
        swap = f"swap {self.swap_bytes / gib:.1f} GiB" if self.swap_bytes else "no swap"
        cap = (
            f"a container cap of {self.container_limit_bytes / gib:.1f} GiB"
            if self.container_limit_bytes
            else "no container cap"
        )
        parts = [f"RAM {self.ram_bytes / gib:.1f} GiB", swap, cap] + ([self.overcommit] if self.overcommit else [])
        return f"{self.system}: " + "; ".join(parts)


def memory_settings() -> MemorySettings:
    """RAM, swap (Windows: the page file), a container's cgroup cap and, on Linux, the kernel's overcommit mode
    (``/proc/sys/vm/overcommit_memory``): the settings that decide whether a job past RAM is refused, slowed by
    paging or killed (notebook 02, section 6)."""
    import psutil

    system = platform.system() or "unknown system"
    mode = _read("/proc/sys/vm/overcommit_memory").strip() if system == "Linux" else ""
    capped = container_memory_limit()
    return MemorySettings(
        system,
        int(psutil.virtual_memory().total),
        int(psutil.swap_memory().total),
        _OVERCOMMIT.get(mode, ""),
        capped[0] if capped else None,
    )


def _file_system_kind(path: str) -> str:
    """What holds ``path`` where no block device does, from the longest mount point above it (/proc/self/mounts)."""
    best, fstype = "", ""
    for line in _read("/proc/self/mounts").splitlines():
        parts = line.split()
        if len(parts) >= 3 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")):
            if len(parts[1]) > len(best):
                best, fstype = parts[1], parts[2]
    if fstype == "overlay":
        return "a container's overlay file system, over a disk the container does not name: its speed is that disk's"
    if fstype in ("tmpfs", "ramfs"):
        return "memory (tmpfs): no disk at all, so a read runs at memory speed"
    if fstype in ("btrfs", "zfs", "bcachefs"):
        return f"a {fstype} volume over local disks the course does not name"
    return f"no block device ({fstype or 'a network or virtual file system'}): its speed is not a local disk's"


def disk_of(path: str | os.PathLike) -> str:
    """The kind of disk that holds ``path``, in words (notebook 02, section 9): on Linux its block device from
    ``/sys`` (NVMe, SATA or SCSI, a virtual disk, spinning or not), elsewhere "not known here". A virtual disk's
    speed is the host's storage, whatever it reports; a file system with no block device (a network or memory
    file system, an overlay) says so. Raises ``TypeError`` for a path that is not a string or path, and
    ``FileNotFoundError`` for one that does not exist."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a string or a path, not {type(path).__name__}")
    st = os.stat(path)
    if platform.system() != "Linux":
        return f"not known here ({platform.system() or 'this system'} does not describe its disks to the course)"
    node = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not node.exists():
        return _file_system_kind(os.path.realpath(path))
    dev = node.resolve()
    dev = dev.parent if (dev / "partition").exists() else dev
    name, model = dev.name, " ".join(_read(str(dev / "device" / "model")).split())
    spins = _read(str(dev / "queue" / "rotational")).strip() == "1"
    if any(cloud in model for cloud in ("Elastic Block Store", "PersistentDisk", "Persistent Disk", "nvme_card-pd")):
        kind = "a network-attached cloud volume: its tier sets its speed, often below a local disk's"
    elif name.startswith(("vd", "xvd")):
        kind = "a virtual disk: the host's storage sets its speed"
    elif name.startswith("nvme"):
        kind = "an NVMe SSD"
    elif name.startswith(("sd", "hd")):
        kind = "a spinning hard disk" if spins else "a SATA/SAS SSD (or a cloud volume)"
    elif name.startswith(("zram", "loop", "ram")):
        kind = "a device backed by memory or by a file"
    else:
        kind = "a block device the course does not know"
    return f"{name}{f' ({model})' if model else ''}: {kind}"


def detect() -> HardwareInfo:
    """Describe this machine: CPU, RAM (a container's limit where it is lower), accelerators, platform, torch build
    (notebook 00)."""
    import psutil

    vm = psutil.virtual_memory()
    total, available = int(vm.total), int(vm.available)
    capped = container_memory_limit()
    if capped:
        total, available = min(total, capped[0]), max(0, min(available, capped[0] - capped[1]))
    return HardwareInfo(
        cpu=_cpu_info(),
        ram_bytes=total,
        available_ram_bytes=available,
        accelerators=_accelerators(),
        platform=detect_platform(),
        os=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        torch_version=torch.__version__,
        torch_threads=torch.get_num_threads(),
        blas=blas_library(),
    )
