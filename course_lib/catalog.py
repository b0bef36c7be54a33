"""Cited data tables: what the common ML accelerators can do on paper.

Used by notebook 01 (processing units: the accelerator catalog and time-to-train
estimates) and by later notebooks: 02 (memory: the largest model that fits) and
03 (interconnect: how fast chips can talk to each other).

Every row says where its numbers come from (``source``) and when they were read
(``source_date``). Reading the table:

* ``peak_tflops`` holds **dense** peaks, in TFLOP/s (TOP/s for int8), one entry per
  dtype the chip runs in hardware. NVIDIA datasheets often print "with sparsity"
  figures (2:4 structured sparsity doubles the number); those are halved here and the
  row's ``notes`` say so.
* For NVIDIA GPUs, ``fp64`` and ``fp32`` are the plain (non-tensor-core) rates; every
  other dtype is the tensor-core rate. A dtype that is missing is one the chip has no
  fast hardware path for (T4 has no bf16) or one the vendor does not publish.
* ``memory_gb`` is the vendor's number, in the vendor's unit (Google writes GiB for
  some TPUs; see notes). The memory a framework can actually use is a little lower.
* ``interconnect_gbs`` is chip-to-chip bandwidth per chip, counting both directions.
  For PCIe-only cards it is the PCIe x16 link (PCIe 3.0 x16 = 32 GB/s both ways).
* ``power_w`` is the TDP or maximum board power; ``None`` where the vendor does not
  publish one (recent Google TPUs).
* ``source_date`` is the month the numbers were checked against the source (vendor
  pages change over time), not the document's own publication date.

Peaks are ceilings, not predictions: real training reaches a fraction of them, which
is what the notebooks measure. This module imports only the standard library.

A second table, of storage and memory tiers (``storage_tiers()``, ``get_storage()``),
serves notebook 02 (memory: disk read throughput, RAM vs SSD vs HDD: how fast a data
set can be fed to the chip) and notebook 07 (choosing hardware). Each disk row is one
real product's datasheet figures, with the interface ceiling in its notes (SATA III
6 Gb/s ~ 0.6 GB/s; PCIe x4: 3.0 ~ 3.9, 4.0 ~ 7.9, 5.0 ~ 15.8 GB/s). Datasheet
sequential numbers are best cases: large sequential reads, often of a new (empty)
drive, sometimes from a cache or at the fastest (outer) tracks of a hard disk; random
IOPS are at a deep queue (QD16-QD32), not the one-request-at-a-time reads of a naive
data loader. Memory rows are per channel (per DIMM): a machine's peak bandwidth is
channels x per-channel figure.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
KINDS = ("gpu", "tpu")

# When the numbers below were checked against their sources.
_CHECKED = "2026-11"


@dataclass(frozen=True)
class Accelerator:
    """One accelerator and its headline numbers, with where they come from."""

    key: str  # short id, e.g. "a100-80gb"
    name: str  # e.g. "NVIDIA A100 80GB SXM"
    vendor: str  # "NVIDIA" | "Google"
    kind: str  # "gpu" | "tpu"
    year: int  # launch year
    peak_tflops: Mapping[str, float] = field(hash=False)  # dense peak per dtype
    memory_gb: float
    memory_bandwidth_gbs: float
    interconnect: str  # e.g. "NVLink 3", "PCIe 3.0 x16", "ICI"
    interconnect_gbs: float  # per chip, both directions
    power_w: float | None  # TDP / max board power; None if unpublished
    source: str  # URL(s), separated by "; "
    source_date: str  # "YYYY-MM"
    notes: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.peak_tflops) - set(DTYPES)
        if unknown:
            raise ValueError(f"{self.key}: unknown dtype(s) {sorted(unknown)}; use {DTYPES}")
        # Keep the table read-only: a frozen dataclass can still hold a mutable dict.
        ordered = {d: float(self.peak_tflops[d]) for d in DTYPES if d in self.peak_tflops}
        object.__setattr__(self, "peak_tflops", MappingProxyType(ordered))

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes this chip has a peak for, in ``DTYPES`` order."""
        return tuple(self.peak_tflops)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak for ``dtype`` in FLOP/s (not TFLOP/s), e.g. 312e12 for A100 bf16.

        Raises ValueError if this chip has no peak for ``dtype`` in the catalog.
        """
        if dtype not in self.peak_tflops:
            raise ValueError(
                f"{self.name} has no peak for dtype={dtype!r} in this catalog. "
                f"Its dtypes: {', '.join(self.dtypes)} (all catalog dtypes: {', '.join(DTYPES)})."
            )
        return self.peak_tflops[dtype] * 1e12


# --------------------------------------------------------------------------------------
# The table. Ordered GPUs then TPUs, oldest first.
# --------------------------------------------------------------------------------------

_NVIDIA_A100_DATASHEET = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_NVIDIA_HOPPER_WHITEPAPER = "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper"
_GOOGLE_V5P_BLOG = (
    "https://cloud.google.com/blog/products/ai-machine-learning/"
    "introducing-cloud-tpu-v5p-and-ai-hypercomputer"
)

_ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator(
        key="p100-16gb",
        name="NVIDIA Tesla P100 16GB PCIe",
        vendor="NVIDIA",
        kind="gpu",
        year=2016,
        peak_tflops={"fp64": 4.7, "fp32": 9.3, "fp16": 18.7},
        memory_gb=16,
        memory_bandwidth_gbs=732,
        interconnect="PCIe 3.0 x16",
        interconnect_gbs=32,
        power_w=250,
        source="https://www.nvidia.com/en-us/data-center/tesla-p100/",
        source_date=_CHECKED,
        notes=(
            "PCIe card (the P100 Kaggle offers); the SXM2/NVLink P100 is faster "
            "(10.6 fp32, 21.2 fp16, NVLink 160 GB/s, 300 W). No tensor cores: fp16 is "
            "2x fp32 through packed half2 math on the CUDA cores; no bf16, no int8 "
            "dot-product instructions on GP100. NVIDIA states 732 GB/s; some reviews "
            "say 720. Interconnect: PCIe 3.0 x16, 32 GB/s counting both directions. "
            "source_date = when read."
        ),
    ),
    Accelerator(
        key="v100-16gb",
        name="NVIDIA Tesla V100 16GB SXM2",
        vendor="NVIDIA",
        kind="gpu",
        year=2017,
        peak_tflops={"fp64": 7.8, "fp32": 15.7, "fp16": 125},
        memory_gb=16,
        memory_bandwidth_gbs=900,
        interconnect="NVLink 2",
        interconnect_gbs=300,
        power_w=300,
        source="https://www.nvidia.com/en-us/data-center/v100/",
        source_date=_CHECKED,
        notes=(
            "SXM2 module, 16GB (the V100 in AWS p3 and Google Cloud); a 32GB SXM2 "
            "version (2018) has the same compute and bandwidth. fp16 = first-generation "
            "tensor cores (fp16 inputs, fp32 accumulate). No bf16, no tf32, no int8 "
            "tensor cores. NVLink 300 GB/s total, both directions. The PCIe card is "
            "slower (14 fp32, 112 tensor, 250 W). source_date = when read."
        ),
    ),
    Accelerator(
        key="t4",
        name="NVIDIA T4",
        vendor="NVIDIA",
        kind="gpu",
        year=2018,
        peak_tflops={"fp32": 8.1, "fp16": 65, "int8": 130},
        memory_gb=16,
        memory_bandwidth_gbs=320,
        interconnect="PCIe 3.0 x16",
        interconnect_gbs=32,
        power_w=70,
        source="https://www.nvidia.com/en-us/data-center/tesla-t4/",
        source_date=_CHECKED,
        notes=(
            "Low-profile PCIe card (Colab and Kaggle free tier). fp16 = Turing tensor "
            "cores, fp16 inputs with fp32 accumulate ('mixed precision'). No bf16 or "
            "tf32 in hardware; fp64 is not published (1/32 of fp32). Memory bandwidth: "
            "the product page says '320+ GB/s', NVIDIA's datasheet PDF says 300 GB/s; "
            "320 = 256-bit bus x 10 Gbps GDDR6. Interconnect: PCIe 3.0 x16, 32 GB/s "
            "counting both directions. source_date = when read."
        ),
    ),
    Accelerator(
        key="a100-40gb",
        name="NVIDIA A100 40GB SXM",
        vendor="NVIDIA",
        kind="gpu",
        year=2020,
        peak_tflops={"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312, "int8": 624},
        memory_gb=40,
        memory_bandwidth_gbs=1555,
        interconnect="NVLink 3",
        interconnect_gbs=600,
        power_w=400,
        source=_NVIDIA_A100_DATASHEET,
        source_date=_CHECKED,
        notes=(
            "SXM4 module (Colab's A100). Datasheet prints dense and with-sparsity "
            "figures; these are the dense ones (tf32 156, not 312). fp64 here is the "
            "plain rate; the fp64 tensor-core rate is 19.5. NVLink 600 GB/s total, both "
            "directions. source_date = when read."
        ),
    ),
    Accelerator(
        key="a100-80gb",
        name="NVIDIA A100 80GB SXM",
        vendor="NVIDIA",
        kind="gpu",
        year=2020,
        peak_tflops={"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312, "int8": 624},
        memory_gb=80,
        memory_bandwidth_gbs=2039,
        interconnect="NVLink 3",
        interconnect_gbs=600,
        power_w=400,
        source=_NVIDIA_A100_DATASHEET,
        source_date=_CHECKED,
        notes=(
            "SXM4 module with HBM2e: same compute as the 40GB part, more and faster "
            "memory (the 80GB PCIe card has 1,935 GB/s and 300 W). Dense figures. "
            "NVLink 600 GB/s total, both directions. source_date = when read."
        ),
    ),
    Accelerator(
        key="h100-sxm",
        name="NVIDIA H100 80GB SXM",
        vendor="NVIDIA",
        kind="gpu",
        year=2022,
        peak_tflops={
            "fp64": 34, "fp32": 67, "tf32": 494.7, "bf16": 989.4,
            "fp16": 989.4, "fp8": 1978.9, "int8": 1978.9,
        },
        memory_gb=80,
        memory_bandwidth_gbs=3350,
        interconnect="NVLink 4",
        interconnect_gbs=900,
        power_w=700,
        source=f"https://www.nvidia.com/en-us/data-center/h100/; {_NVIDIA_HOPPER_WHITEPAPER}",
        source_date=_CHECKED,
        notes=(
            "SXM5 module. The datasheet's tensor figures are with sparsity (tf32 989, "
            "bf16/fp16 1,979, fp8/int8 3,958); the dense values here are the Hopper "
            "whitepaper's (= datasheet / 2). fp64 is the plain rate (tensor-core fp64: "
            "67). Power is configurable up to 700 W. NVLink 900 GB/s total, both "
            "directions. The PCIe card is slower. source_date = when read."
        ),
    ),
    Accelerator(
        key="l4",
        name="NVIDIA L4",
        vendor="NVIDIA",
        kind="gpu",
        year=2023,
        peak_tflops={
            "fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5, "int8": 242.5,
        },
        memory_gb=24,
        memory_bandwidth_gbs=300,
        interconnect="PCIe 4.0 x16",
        interconnect_gbs=64,
        power_w=72,
        source="https://www.nvidia.com/en-us/data-center/l4/",
        source_date=_CHECKED,
        notes=(
            "Low-profile PCIe card (Colab, Google Cloud G2). NVIDIA publishes only "
            "with-sparsity tensor figures (tf32 120, bf16/fp16 242, fp8/int8 485); these "
            "are halved. fp64 not published. Interconnect: PCIe 4.0 x16, 64 GB/s "
            "counting both directions. source_date = when read."
        ),
    ),
    Accelerator(
        key="l40s",
        name="NVIDIA L40S",
        vendor="NVIDIA",
        kind="gpu",
        year=2023,
        peak_tflops={
            "fp32": 91.6, "tf32": 183, "bf16": 362.05, "fp16": 362.05, "fp8": 733, "int8": 733,
        },
        memory_gb=48,
        memory_bandwidth_gbs=864,
        interconnect="PCIe 4.0 x16",
        interconnect_gbs=64,
        power_w=350,
        source="https://www.nvidia.com/en-us/data-center/l40s/",
        source_date=_CHECKED,
        notes=(
            "Dual-slot PCIe card, GDDR6. The datasheet prints dense and with-sparsity "
            "tensor figures; these are the dense ones (fp8 733, not 1,466). fp64 not "
            "published. Interconnect: PCIe 4.0 x16, 64 GB/s both directions (no NVLink). "
            "source_date = when read."
        ),
    ),
    Accelerator(
        key="h200",
        name="NVIDIA H200 141GB SXM",
        vendor="NVIDIA",
        kind="gpu",
        year=2024,
        peak_tflops={
            "fp64": 34, "fp32": 67, "tf32": 494.7, "bf16": 989.4,
            "fp16": 989.4, "fp8": 1978.9, "int8": 1978.9,
        },
        memory_gb=141,
        memory_bandwidth_gbs=4800,
        interconnect="NVLink 4",
        interconnect_gbs=900,
        power_w=700,
        source=f"https://www.nvidia.com/en-us/data-center/h200/; {_NVIDIA_HOPPER_WHITEPAPER}",
        source_date=_CHECKED,
        notes=(
            "SXM module; the same Hopper compute as the H100 SXM (identical datasheet "
            "tensor figures, printed with sparsity) with 141 GB of HBM3e. Dense values "
            "as for H100 SXM. Announced November 2023, shipped 2024. Power configurable "
            "up to 700 W. NVLink 900 GB/s total, both directions. source_date = when read."
        ),
    ),
    Accelerator(
        key="tpu-v4",
        name="Google TPU v4",
        vendor="Google",
        kind="tpu",
        year=2021,
        peak_tflops={"bf16": 275, "int8": 275},
        memory_gb=32,
        memory_bandwidth_gbs=1200,
        interconnect="ICI",
        interconnect_gbs=600,
        power_w=192,
        source=f"https://cloud.google.com/tpu/docs/v4; {_GOOGLE_V5P_BLOG}",
        source_date=_CHECKED,
        notes=(
            "One chip = 2 TensorCores. Google lists 275 TFLOP/s for bf16 *or* int8 (no "
            "int8 speed-up on v4). Memory: Google writes 32 GiB; bandwidth 1,200 GB/s in "
            "the docs (1,228 GB/s in the v5p launch post). Power: Google publishes "
            "measured min/mean/max 90/170/192 W, not a TDP; 192 is the max. ICI: the v5p "
            "launch post gives 2,400 Gbps per chip, which by Google's later restatements "
            "(v5e 1,600 Gbps = 400 GB/s, v5p 4,800 Gbps = 1,200 GB/s bidirectional) is "
            "per direction, so 600 GB/s both directions (derived). Announced 2021, "
            "generally available on Cloud 2022. source_date = when read."
        ),
    ),
    Accelerator(
        key="tpu-v5e",
        name="Google TPU v5e",
        vendor="Google",
        kind="tpu",
        year=2023,
        peak_tflops={"bf16": 197, "int8": 393},
        memory_gb=16,
        memory_bandwidth_gbs=819,
        interconnect="ICI",
        interconnect_gbs=400,
        power_w=None,
        source="https://cloud.google.com/tpu/docs/v5e",
        source_date=_CHECKED,
        notes=(
            "One TensorCore per chip (one of Colab's TPU options). int8: the docs say "
            "393 TOP/s (other Google material rounds 2 x 197 = 394). Memory bandwidth: "
            "819 GB/s in the docs (one revision says '800 GiBps', which would be "
            "859 GB/s). ICI: 400 GB/s "
            "bidirectional per chip (older revision: 1,600 Gbps, i.e. per direction), "
            "4 ports. Google does not publish a per-chip TDP. source_date = when read."
        ),
    ),
    Accelerator(
        key="tpu-v5p",
        name="Google TPU v5p",
        vendor="Google",
        kind="tpu",
        year=2023,
        peak_tflops={"bf16": 459, "int8": 918},
        memory_gb=95,
        memory_bandwidth_gbs=2765,
        interconnect="ICI",
        interconnect_gbs=1200,
        power_w=None,
        source=f"https://cloud.google.com/tpu/docs/v5p; {_GOOGLE_V5P_BLOG}",
        source_date=_CHECKED,
        notes=(
            "Two TensorCores per chip. bf16, memory and ICI from the docs; int8 918 "
            "TOP/s from the December 2023 launch post (the current docs omit int8, and "
            "list fp8 at the bf16 rate, so no separate fp8 entry here). Memory: 95 GB "
            "in the launch post, 95 GiB in a later docs revision. ICI: 1,200 GB/s "
            "bidirectional per chip (older revision: 4,800 Gbps, per direction). Google "
            "does not publish a per-chip TDP. source_date = when read."
        ),
    ),
    Accelerator(
        key="tpu-v6e",
        name="Google TPU v6e (Trillium)",
        vendor="Google",
        kind="tpu",
        year=2024,
        peak_tflops={"bf16": 918, "int8": 1836},
        memory_gb=32,
        memory_bandwidth_gbs=1638,
        interconnect="ICI",
        interconnect_gbs=800,
        power_w=None,
        source="https://cloud.google.com/tpu/docs/v6e",
        source_date=_CHECKED,
        notes=(
            "One TensorCore per chip, 2 MXUs of 256x256. ICI: 800 GB/s bidirectional "
            "per chip, 4 ports. Google does not publish a per-chip TDP. "
            "source_date = when read."
        ),
    ),
)

_BY_KEY: dict[str, Accelerator] = {acc.key: acc for acc in _ACCELERATORS}

# Other names people (and software) use for these chips. Matching ignores case, spaces
# and punctuation, so "A100 80GB", "a100-80gb" and "NVIDIA A100-SXM4-80GB" all match.
# Plain "a100" means the 40GB part (the original A100, and the one Colab offers).
# "TPU v5" means v5p: that is the device kind JAX reports on a v5p.
_ALIASES: dict[str, str] = {
    # GPUs; the CUDA device names are what torch.cuda.get_device_name() returns.
    "p100": "p100-16gb",
    "tesla p100": "p100-16gb",
    "p100 pcie": "p100-16gb",
    "Tesla P100-PCIE-16GB": "p100-16gb",
    "v100": "v100-16gb",
    "tesla v100": "v100-16gb",
    "v100 sxm2": "v100-16gb",
    "Tesla V100-SXM2-16GB": "v100-16gb",
    "tesla t4": "t4",
    "nvidia t4": "t4",
    "a100": "a100-40gb",
    "nvidia a100": "a100-40gb",
    "NVIDIA A100-SXM4-40GB": "a100-40gb",
    "NVIDIA A100-SXM4-80GB": "a100-80gb",
    "h100": "h100-sxm",
    "nvidia h100": "h100-sxm",
    "h100 sxm5": "h100-sxm",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "nvidia l4": "l4",
    "nvidia l40s": "l40s",
    "h200 sxm": "h200",
    "nvidia h200": "h200",
    # TPUs; "TPU v4", "TPU v5 lite", "TPU v6 lite" are JAX device kinds.
    "v4": "tpu-v4",
    "v5e": "tpu-v5e",
    "v5 lite": "tpu-v5e",
    "tpu v5 lite": "tpu-v5e",
    "v5litepod": "tpu-v5e",
    "v5p": "tpu-v5p",
    "tpu v5": "tpu-v5p",
    "v6e": "tpu-v6e",
    "trillium": "tpu-v6e",
    "tpu v6 lite": "tpu-v6e",
}


def normalize_name(name: str) -> str:
    """Lower-case and drop everything but letters and digits: 'A100 80GB' -> 'a10080gb'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def build_lookup(rows, aliases: dict[str, str]) -> dict[str, str]:
    """Normalised key, name and alias -> key, for the tables' case-insensitive lookups
    (accelerators and storage here, links in ``course_lib.comm``)."""
    lookup: dict[str, str] = {}
    for row in rows:
        lookup[normalize_name(row.key)] = row.key
        lookup[normalize_name(row.name)] = row.key
    for alias, key in aliases.items():
        lookup[normalize_name(alias)] = key
    return lookup


_LOOKUP = build_lookup(_ACCELERATORS, _ALIASES)


def rows_of_kind(rows, kind: str | None, kinds: tuple[str, ...]) -> list:
    """All ``rows``, or those whose ``kind`` is ``kind``; ValueError for a kind not in ``kinds``."""
    if kind is None:
        return list(rows)
    if kind not in kinds:
        raise ValueError(f"kind={kind!r} is not one of {kinds} (or None for all).")
    return [row for row in rows if row.kind == kind]


def find_row(name: str, lookup: dict[str, str], by_key: dict, what: str, examples: str):
    """The row whose normalised key, name or alias is ``name``; TypeError for a non-str ``name``,
    ValueError listing the accepted keys when nothing matches (shared by the tables' getters)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = lookup.get(normalize_name(name))
    if key is None:
        raise ValueError(f"No {what} matches name={name!r}. Accepted keys: {', '.join(by_key)} "
                         f"(aliases such as {examples} also work).")
    return by_key[key]


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def accelerators(kind: str | None = None) -> list[Accelerator]:
    """All catalog rows, or only those of one ``kind`` ("gpu" or "tpu").

    Raises ValueError for any other kind.
    """
    return rows_of_kind(_ACCELERATORS, kind, KINDS)


def accelerator_names() -> list[str]:
    """The short keys of every row, e.g. ["p100-16gb", ..., "tpu-v6e"]."""
    return [acc.key for acc in _ACCELERATORS]


def get_accelerator(name: str) -> Accelerator:
    """Look up one accelerator by key, full name or a common alias.

    Case, spaces and punctuation are ignored: "A100 80GB", "a100-80gb" and the CUDA
    device name "NVIDIA A100-SXM4-80GB" give the same row. Plain "A100" is the 40GB
    part; "H100" is the SXM part; "v5e", "TPU v4", "Trillium" work for TPUs.

    Raises TypeError if ``name`` is not a string, ValueError if nothing matches.
    """
    return find_row(name, _LOOKUP, _BY_KEY, "accelerator", "'A100', 'h100', 'v5e', 'TPU v4'")


def catalog_rows(dtype: str = "bf16") -> list[dict]:
    """One flat dict per accelerator, ready for a table (e.g. ``pandas.DataFrame``).

    ``peak_tflops`` is the dense peak at ``dtype``, or None where the chip has none.
    Raises ValueError if ``dtype`` is not one of ``DTYPES``.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {DTYPES}.")
    return [
        {
            "key": acc.key,
            "name": acc.name,
            "kind": acc.kind,
            "year": acc.year,
            "dtype": dtype,
            "peak_tflops": acc.peak_tflops.get(dtype),
            "memory_gb": acc.memory_gb,
            "memory_bandwidth_gbs": acc.memory_bandwidth_gbs,
            "interconnect": acc.interconnect,
            "interconnect_gbs": acc.interconnect_gbs,
            "power_w": acc.power_w,
            "source": acc.source,
        }
        for acc in _ACCELERATORS
    ]


# --------------------------------------------------------------------------------------
# Storage and memory tiers (notebooks 02 and 07)
# --------------------------------------------------------------------------------------

STORAGE_KINDS = ("disk", "memory", "network")


@dataclass(frozen=True)
class StorageTier:
    """One storage or memory tier, as one real product (or standard) rates it."""

    key: str  # short id, e.g. "nvme-pcie4"
    name: str  # e.g. "NVMe SSD, PCIe 4.0 x4 (Samsung 990 PRO)"
    kind: str  # "disk" | "memory" | "network"
    sequential_read_gbs: float  # GB/s (10^9 bytes/s), best case
    random_read_iops: float | None  # 4 KiB random reads/s from the datasheet; None for RAM
    latency_us: float | None  # typical access latency in microseconds; None if unsourced
    capacity_note: str  # e.g. "up to 24 TB per drive"
    source: str  # URL(s), separated by "; "
    source_date: str  # "YYYY-MM"
    notes: str = ""

    def __post_init__(self) -> None:
        if self.kind not in STORAGE_KINDS:
            raise ValueError(f"{self.key}: kind={self.kind!r} is not one of {STORAGE_KINDS}")


_SAMSUNG_SSD = "https://semiconductor.samsung.com/consumer-storage/internal-ssd/"

_STORAGE: tuple[StorageTier, ...] = (
    StorageTier(
        key="hdd-7200",
        name="7,200 rpm hard disk (Seagate Exos X24)",
        kind="disk",
        sequential_read_gbs=0.285,
        random_read_iops=168,
        latency_us=4160,
        capacity_note="up to 24 TB per drive (3.5-inch, SATA or SAS)",
        source=(
            "https://www.seagate.com/content/dam/seagate/en/content-fragments/products/"
            "datasheets/exos-x24/exos-x24-DS2080-2307US-en_US.pdf; "
            "https://documents.westerndigital.com/content/dam/doc-library/en_us/assets/public/"
            "western-digital/product/data-center-drives/ultrastar-dc-hc500-series/"
            "data-sheet-ultrastar-dc-hc580.pdf"
        ),
        source_date=_CHECKED,
        notes=(
            "Exos X24 datasheet: max sustained transfer rate 285 MB/s (outer diameter; "
            "inner tracks are slower), random read/write 4K QD16 168/550 "
            "IOPS. Read from a third-party quotation of the datasheet (the PDF itself is "
            "not in the stored material). Latency 4.16 ms is the average rotational "
            "latency of any 7,200 rpm disk (half a turn: 60 s / 7,200 / 2), as printed in "
            "WD's Ultrastar DC HC580 datasheet (which also gives 298 MB/s and 212 IOPS at "
            "QD32); a random read also pays the seek (about 8 ms typical), so roughly "
            "12 ms, i.e. under 100 IOPS one request at a time. Older 7,200 rpm drives "
            "(e.g. Exos X18, 270 MB/s) are a little slower. The SATA link (0.6 GB/s) is "
            "not the limit. source_date = when read."
        ),
    ),
    StorageTier(
        key="sata-ssd",
        name="SATA SSD (Samsung 870 EVO)",
        kind="disk",
        sequential_read_gbs=0.56,
        random_read_iops=98_000,
        latency_us=77,
        capacity_note="250 GB to 4 TB per drive (2.5-inch)",
        source=(
            f"{_SAMSUNG_SSD}870-evo/; "
            "https://www.tomshardware.com/news/samsung-announces-870-evo; "
            "https://www.kitguru.net/components/ssd-drives/simon-crisp/"
            "samsung-ssd-870-evo-1tb-review/all/1/"
        ),
        source_date=_CHECKED,
        notes=(
            "Samsung's ratings, same for every capacity: sequential read 560 MB/s, 4 KiB "
            "random read 98,000 IOPS at QD32 and 13,000 IOPS at QD1; checked against Tom's "
            "Hardware and KitGuru, which quote Samsung's spec sheet (the Samsung page is "
            "not in the stored material). Interface-limited: SATA III is 6 Gb/s with "
            "8b/10b coding, i.e. 600 MB/s before protocol overhead, so every SATA SSD "
            "tops out near 550-560 MB/s. latency_us is derived: 1 / 13,000 IOPS at QD1 "
            "= 77 us per 4 KiB read. source_date = when read."
        ),
    ),
    StorageTier(
        key="nvme-pcie3",
        name="NVMe SSD, PCIe 3.0 x4 (Samsung 970 EVO Plus 1TB)",
        kind="disk",
        sequential_read_gbs=3.5,
        random_read_iops=600_000,
        latency_us=53,
        capacity_note="250 GB to 2 TB per drive (M.2 2280)",
        source=(
            f"{_SAMSUNG_SSD}970-evo-plus/; "
            "https://digit.in/reviews/general/"
            "samsung-970-evo-plus-nvme-m-2-ssd-250-gb-review-177943.html/amp"
        ),
        source_date=_CHECKED,
        notes=(
            "Samsung's spec table (as reprinted by Digit; the Samsung page is not in the "
            "stored material): sequential read 3,500 MB/s for every capacity; 4 KiB "
            "random read at QD32 600K IOPS for 1 TB (480K for 500 GB, 250K for 250 GB); "
            "19K IOPS at QD1 for 1 TB. latency_us is derived: 1 / 19,000 IOPS = 53 us. "
            "Interface ceiling: PCIe 3.0 x4 = 4 x 8 GT/s with 128b/130b coding ~ 3.9 GB/s, "
            "so 3.5 GB/s is near the limit. source_date = when read."
        ),
    ),
    StorageTier(
        key="nvme-pcie4",
        name="NVMe SSD, PCIe 4.0 x4 (Samsung 990 PRO)",
        kind="disk",
        sequential_read_gbs=7.45,
        random_read_iops=1_400_000,
        latency_us=None,
        capacity_note="1 TB to 4 TB per drive (M.2 2280)",
        source=(
            f"{_SAMSUNG_SSD}990-pro/; "
            "https://www.slashcam.com/news/single/"
            "Samsung-990-PRO--New-NVMe-SSD-top-model-reaches-th-17407.html; "
            "https://www.thefpsreview.com/2024/05/27/"
            "samsung-990-pro-with-heatsink-1tb-pcie-gen4-m-2-nvme-ssd-review/4"
        ),
        source_date=_CHECKED,
        notes=(
            "Samsung's launch ratings (August 2022, quoted by SlashCAM and retailers; "
            "the Samsung page is not in the stored material): sequential read "
            "7,450 MB/s, 4 KiB random read up to 1,400K IOPS (QD32, larger capacities; "
            "some listings give 1,200K for 1 TB). Interface ceiling: PCIe 4.0 x4 = "
            "4 x 16 GT/s with 128b/130b coding ~ 7.9 GB/s. No QD1 latency figure was "
            "found in a vendor source, so latency_us is None; The FPS Review measured "
            "82 MB/s of 4 KiB reads at QD1 (about 50 us each) on the 1 TB drive. "
            "source_date = when read."
        ),
    ),
    StorageTier(
        key="nvme-pcie5",
        name="NVMe SSD, PCIe 5.0 x4 (Samsung 9100 PRO 2TB)",
        kind="disk",
        sequential_read_gbs=14.8,
        random_read_iops=2_200_000,
        latency_us=None,
        capacity_note="1 TB to 8 TB per drive (M.2 2280)",
        source=(
            f"{_SAMSUNG_SSD}9100-pro/; "
            "https://www.techpowerup.com/review/samsung-9100-pro-2-tb/single-page.html"
        ),
        source_date=_CHECKED,
        notes=(
            "Samsung's ratings as quoted by reviewers (TechPowerUp and others; the "
            "Samsung page is not in the stored material): sequential read up to "
            "14,800 MB/s (14,700 for 1 TB), 4 KiB random read up to 2,200K IOPS for the "
            "larger capacities (1,850K for 1 TB). Needs a CPU-attached PCIe 5.0 M.2 slot "
            "and cooling to reach it. Interface ceiling: PCIe 5.0 x4 = 4 x 32 GT/s ~ "
            "15.8 GB/s. source_date = when read."
        ),
    ),
    StorageTier(
        key="ddr4-3200",
        name="DDR4-3200 memory, one 64-bit channel",
        kind="memory",
        sequential_read_gbs=25.6,
        random_read_iops=None,
        latency_us=None,
        capacity_note="per channel; a machine has 2 (desktop) to 8 (server socket) channels",
        source="https://www.jedec.org/standards-documents/docs/jesd79-4a",
        source_date=_CHECKED,
        notes=(
            "Peak by JEDEC arithmetic: 3,200 MT/s x 8 bytes (64-bit channel) = 25.6 GB/s "
            "per channel (the module name PC4-25600 says the same). A machine's peak "
            "memory bandwidth = channels populated x 25.6 GB/s: dual-channel desktop "
            "51.2 GB/s, 8-channel server socket 204.8 GB/s. Sustained copy bandwidth "
            "(e.g. STREAM) is lower. IOPS are not meaningful for RAM (None); no latency "
            "figure is given because access latency depends on the CPU and is not in "
            "the standard. source_date = when read."
        ),
    ),
    StorageTier(
        key="ddr5-4800",
        name="DDR5-4800 memory, one DIMM (two 32-bit subchannels)",
        kind="memory",
        sequential_read_gbs=38.4,
        random_read_iops=None,
        latency_us=None,
        capacity_note="per DIMM channel; a machine has 2 (desktop) to 12 (server socket) channels",
        source="https://www.jedec.org/standards-documents/docs/jesd79-5b",
        source_date=_CHECKED,
        notes=(
            "Peak by JEDEC arithmetic: 4,800 MT/s x 8 bytes (two independent 32-bit "
            "subchannels per DIMM) = 38.4 GB/s per DIMM channel (PC5-38400). A machine's "
            "peak = channels populated x 38.4 GB/s, e.g. 76.8 GB/s dual-channel desktop. "
            "IOPS not meaningful (None); latency not in the standard (None). "
            "source_date = when read."
        ),
    ),
)

_STORAGE_BY_KEY: dict[str, StorageTier] = {tier.key: tier for tier in _STORAGE}

# Other names for the tiers; matching ignores case, spaces and punctuation.
_STORAGE_ALIASES: dict[str, str] = {
    "hdd": "hdd-7200",
    "hard disk": "hdd-7200",
    "hard drive": "hdd-7200",
    "7200 rpm": "hdd-7200",
    "exos x24": "hdd-7200",
    "sata ssd": "sata-ssd",
    "ssd sata": "sata-ssd",
    "870 evo": "sata-ssd",
    "nvme gen3": "nvme-pcie3",
    "pcie3 nvme": "nvme-pcie3",
    "970 evo plus": "nvme-pcie3",
    "nvme gen4": "nvme-pcie4",
    "pcie4 nvme": "nvme-pcie4",
    "990 pro": "nvme-pcie4",
    "nvme gen5": "nvme-pcie5",
    "pcie5 nvme": "nvme-pcie5",
    "9100 pro": "nvme-pcie5",
    "ddr4": "ddr4-3200",
    "ddr5": "ddr5-4800",
}


_STORAGE_LOOKUP = build_lookup(_STORAGE, _STORAGE_ALIASES)


def storage_tiers(kind: str | None = None) -> list[StorageTier]:
    """All storage/memory rows, or only those of one ``kind`` ("disk", "memory", "network").

    Raises ValueError for any other kind.
    """
    return rows_of_kind(_STORAGE, kind, STORAGE_KINDS)


def storage_names() -> list[str]:
    """The short keys of every storage row, e.g. ["hdd-7200", ..., "ddr5-4800"]."""
    return [tier.key for tier in _STORAGE]


def get_storage(name: str) -> StorageTier:
    """Look up one storage/memory tier by key, full name or a common alias.

    Case, spaces and punctuation are ignored: "NVMe-PCIe4", "990 PRO" and "nvme gen4"
    give the same row; "HDD", "SATA SSD", "DDR4" work too.

    Raises TypeError if ``name`` is not a string, ValueError if nothing matches.
    """
    return find_row(name, _STORAGE_LOOKUP, _STORAGE_BY_KEY, "storage tier", "'HDD', 'SATA SSD', '990 PRO', 'DDR4'")


__all__ = [
    "rows_of_kind",
    "find_row",
    "build_lookup",
    "normalize_name",
    "DTYPES",
    "KINDS",
    "STORAGE_KINDS",
    "Accelerator",
    "StorageTier",
    "accelerator_names",
    "accelerators",
    "catalog_rows",
    "get_accelerator",
    "get_storage",
    "storage_names",
    "storage_tiers",
]
