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


def _normalize(name: str) -> str:
    """Lower-case and drop everything but letters and digits: 'A100 80GB' -> 'a10080gb'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _build_lookup() -> dict[str, str]:
    lookup: dict[str, str] = {}
    for acc in _ACCELERATORS:
        lookup[_normalize(acc.key)] = acc.key
        lookup[_normalize(acc.name)] = acc.key
    for alias, key in _ALIASES.items():
        lookup[_normalize(alias)] = key
    return lookup


_LOOKUP = _build_lookup()


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def accelerators(kind: str | None = None) -> list[Accelerator]:
    """All catalog rows, or only those of one ``kind`` ("gpu" or "tpu").

    Raises ValueError for any other kind.
    """
    if kind is None:
        return list(_ACCELERATORS)
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS} (or None for all).")
    return [acc for acc in _ACCELERATORS if acc.kind == kind]


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
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = _LOOKUP.get(_normalize(name))
    if key is None:
        raise ValueError(
            f"No accelerator matches name={name!r}. "
            f"Accepted keys: {', '.join(accelerator_names())} "
            "(full names and aliases such as 'A100', 'h100', 'v5e', 'TPU v4' also work)."
        )
    return _BY_KEY[key]


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


__all__ = [
    "DTYPES",
    "KINDS",
    "Accelerator",
    "accelerator_names",
    "accelerators",
    "catalog_rows",
    "get_accelerator",
]
