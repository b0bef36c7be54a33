"""The catalog's rows: one frozen dataclass per table, the kinds each table allows, and the table names.

Each row class checks what its fields alone decide (a known kind, a known dtype, a whole number of chips);
``loading`` checks the JSON against the schema before a row is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .. import names

DTYPES = names.DTYPES
KINDS = ("gpu", "tpu")
STORAGE_KINDS = ("disk", "memory", "network")
LINK_KINDS = ("pcie", "nvlink", "infiniband", "ethernet", "tpu-ici", "memory")
PRICE_KINDS = ("cloud-on-demand", "cloud-spot", "purchase", "energy", "carbon", "storage")
TIERS = ("consumer", "pro", "data-centre")
MACHINE_SERIES = ("n1", "e2", "a2", "a3", "g2")
TABLES = ("accelerators", "storage", "links", "prices", "vertex_machines")


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
    interconnect_gbs: float  # per chip, per direction
    power_w: float | None  # TDP / max board power; None if unpublished
    source: str  # URL(s), separated by "; "
    source_date: str  # "YYYY-MM"
    notes: str = ""
    pod_chips: int = 1  # chips joined by ``interconnect`` (8 per NVLink server, a TPU pod; 1 = PCIe card)

    def __post_init__(self) -> None:
        unknown = set(self.peak_tflops) - set(DTYPES)
        if unknown:
            raise ValueError(f"{self.key}: unknown dtype(s) {sorted(unknown)}; use {DTYPES}")
        if isinstance(self.pod_chips, bool) or not isinstance(self.pod_chips, int) or self.pod_chips < 1:
            raise ValueError(f"{self.key}: pod_chips must be a whole number >= 1, got {self.pod_chips!r}")
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
        dtype = names.dtype(dtype)
        if dtype not in self.peak_tflops:
            raise ValueError(
                f"{self.name} has no peak for dtype={dtype!r} in this catalog. "
                f"Its dtypes: {', '.join(self.dtypes)} (all catalog dtypes: {', '.join(DTYPES)})."
            )
        return self.peak_tflops[dtype] * 1e12


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


@dataclass(frozen=True)
class Link:
    """One kind of link and what it carries **per direction** (GB/s = 10^9 bytes/s).

    Rows of the link table; see ``links()``.
    """

    key: str  # short id, e.g. "pcie4-x16"
    name: str  # e.g. "PCIe 4.0 x16"
    kind: str  # one of LINK_KINDS
    bandwidth_gbs: float  # per direction, after line encoding, before packet overheads
    latency_us: float | None  # None unless a source gives one
    source: str  # URL(s), separated by "; "
    source_date: str  # "YYYY-MM", when read
    notes: str = ""

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise ValueError(f"{self.key}: kind={self.kind!r} is not one of {LINK_KINDS}")

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """``bandwidth_gbs`` in bytes per second, ready for ``comm.allreduce_time``."""
        return self.bandwidth_gbs * 1e9


@dataclass(frozen=True)
class Price:
    """One row of the price table (``prices()``): a price, an energy or a carbon figure, with its source.

    What a training job costs, and which hardware to choose. ``kind`` is one of
    ``PRICE_KINDS``; ``value`` is in ``unit`` (USD per accelerator-hour, USD per card, USD per kWh,
    a PUE ratio, g CO2 per kWh, USD per GB).
    """

    key: str  # short id, e.g. "gcp-t4", "gcp-t4-spot", "rtx-4090", "grid-world", "hdd"
    name: str
    kind: str  # one of PRICE_KINDS
    value: float
    unit: str  # e.g. "USD per GPU-hour", "USD per card", "g CO2e per kWh"
    accelerator: str | None  # key of the accelerator table, where the row is about one of its chips
    vendor: str | None  # who sells or rents it: "NVIDIA", "AMD", "Google Cloud"
    tier: str | None  # "consumer" | "pro" | "data-centre" (cards and cloud chips), else None
    memory_gb: float | None  # the card's memory (purchase rows), or the GB a storage row is derived from
    ecc: bool | None  # purchase rows: error-correcting memory as shipped
    power_w: float | None  # purchase rows: total board power (TDP), for the electricity of owning it
    source: str  # URL(s), separated by "; "
    source_date: str  # "YYYY-MM": when the figure was published or read
    notes: str = ""

    def __post_init__(self) -> None:
        if self.kind not in PRICE_KINDS:
            raise ValueError(f"{self.key}: kind={self.kind!r} is not one of {PRICE_KINDS}")
        if self.tier is not None and self.tier not in TIERS:
            raise ValueError(f"{self.key}: tier={self.tier!r} is not one of {TIERS} (or null)")
        if self.value <= 0:
            raise ValueError(f"{self.key}: value must be > 0, got {self.value!r}")
        if self.kind in ("cloud-on-demand", "cloud-spot") and self.accelerator is None:
            raise ValueError(f"{self.key}: a cloud row must name its accelerator (a key of the accelerator table)")
        if self.kind == "purchase" and None in (self.memory_gb, self.ecc, self.power_w, self.tier):
            raise ValueError(f"{self.key}: a purchase row needs tier, memory_gb, ecc and power_w")


@dataclass(frozen=True)
class VertexMachine:
    """One machine type a Vertex AI custom job's worker pool can ask for, and the accelerators it takes.

    Rows of the Vertex AI machine table; see ``vertex_machines()``.
    """

    key: str  # the machine type, e.g. "a2-highgpu-4g"
    name: str
    kind: str  # the machine series, one of MACHINE_SERIES
    accelerators: tuple[str, ...]  # Vertex AI acceleratorType names it takes; () for a CPU-only machine
    accelerator_counts: tuple[int, ...]  # the acceleratorCount values it takes; () for a CPU-only machine
    source: str  # URL(s), separated by "; "
    source_date: str  # "YYYY-MM", when read
    notes: str = ""

    def __post_init__(self) -> None:
        if self.kind not in MACHINE_SERIES:
            raise ValueError(f"{self.key}: kind={self.kind!r} is not one of {MACHINE_SERIES}")
        accelerators, counts = tuple(self.accelerators), tuple(self.accelerator_counts)
        if not all(isinstance(a, str) and a for a in accelerators):
            raise ValueError(f"{self.key}: accelerators must be non-empty strings, got {list(accelerators)}")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in counts):
            raise ValueError(f"{self.key}: accelerator_counts must be whole numbers >= 1, got {list(counts)}")
        if bool(accelerators) != bool(counts):
            raise ValueError(f"{self.key}: a machine that takes accelerators lists the counts it takes, and only then")
        object.__setattr__(self, "accelerators", accelerators)
        object.__setattr__(self, "accelerator_counts", counts)
