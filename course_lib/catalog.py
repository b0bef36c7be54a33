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
* ``interconnect_gbs`` is chip-to-chip bandwidth per chip **per direction**, the one
  convention of every bandwidth in the course (the link table's too). Vendors print the
  sum of both directions (NVLink "900 GB/s", TPU "bidirectional ICI"); those are halved.
  For PCIe-only cards it is the PCIe x16 link to the host (PCIe 3.0 x16 = 15.75 GB/s).
* ``pod_chips`` is how many chips that link joins: the GPUs of one NVLink server (8), a
  TPU pod (256 to 8,960), or 1 for a PCIe card, whose chips talk through the host.
* ``power_w`` is the TDP or maximum board power; ``None`` where the vendor does not
  publish one (recent Google TPUs).
* ``source_date`` is the month the numbers were checked against the source (vendor
  pages change over time), not the document's own publication date.

Peaks are ceilings, not predictions: real training reaches a fraction of them, which
is what the notebooks measure.

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

A third table, of links (``links()``, ``get_link()``), serves notebook 03 (interconnect): what
PCIe, NVLink, InfiniBand, Ethernet and TPU ICI carry **per direction**, in GB/s. Vendors often
print the sum of both directions (NVLink "900 GB/s"); those are halved, network rates in Gb/s
are divided by 8, and each row's notes say so. The NVLink, TPU and PCIe rows must equal the
accelerator table's ``interconnect_gbs`` (per direction too) and the memory rows the storage
table's DDR rows: the schema test checks that the tables agree.

Where the numbers live
----------------------
The rows are package data files, ``course_lib/tables/<table>.json``: ``{"table", "about",
"kinds", "rows": [...], "aliases": {other name: key}}``, every row with its ``source`` (URLs,
separated by "; ") and ``source_date`` (YYYY-MM, when the numbers were checked). One loader,
:func:`load_table`, reads and checks any of them against its schema (``SCHEMAS``): required
fields, their types, known kinds, unique keys, aliases pointing at real keys. This module imports
only the standard library.

A fourth table, of prices (``prices()``, ``get_price()``), serves notebooks 06.5 (what a training
job costs) and 07.3 (choosing hardware), through ``course_lib.cost``: cloud on-demand and Spot
prices per accelerator-hour, purchase prices of consumer, pro and data-centre cards (with and
without ECC memory), electricity prices and PUE, grid carbon intensities, and USD per GB of
memory and storage. Cloud rows name a key of the accelerator table; the tests check that they do.

A fifth table, of Vertex AI machine types (``vertex_machines()``), lists the machine types a Vertex AI
custom job's worker pool can ask for and the accelerators each takes (Vertex AI's ``acceleratorType``
names and the ``acceleratorCount`` values): a selection, against which
``course_lib.parallel.orchestration`` checks job specs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from . import arguments, names

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


# --------------------------------------------------------------------------------------
# Loading the tables
# --------------------------------------------------------------------------------------

_NUMBER = (int, float)
_OPTIONAL_NUMBER = (int, float, type(None))
#: Per table: the row class, the allowed kinds and each field's accepted JSON types.
SCHEMAS: dict[str, tuple[type, tuple[str, ...], dict[str, tuple[type, ...]]]] = {
    "accelerators": (
        Accelerator,
        KINDS,
        {
            "key": (str,),
            "name": (str,),
            "vendor": (str,),
            "kind": (str,),
            "year": (int,),
            "peak_tflops": (dict,),
            "memory_gb": _NUMBER,
            "memory_bandwidth_gbs": _NUMBER,
            "interconnect": (str,),
            "interconnect_gbs": _NUMBER,
            "pod_chips": (int,),
            "power_w": _OPTIONAL_NUMBER,
            "source": (str,),
            "source_date": (str,),
            "notes": (str,),
        },
    ),
    "storage": (
        StorageTier,
        STORAGE_KINDS,
        {
            "key": (str,),
            "name": (str,),
            "kind": (str,),
            "sequential_read_gbs": _NUMBER,
            "random_read_iops": _OPTIONAL_NUMBER,
            "latency_us": _OPTIONAL_NUMBER,
            "capacity_note": (str,),
            "source": (str,),
            "source_date": (str,),
            "notes": (str,),
        },
    ),
    "links": (
        Link,
        LINK_KINDS,
        {
            "key": (str,),
            "name": (str,),
            "kind": (str,),
            "bandwidth_gbs": _NUMBER,
            "latency_us": _OPTIONAL_NUMBER,
            "source": (str,),
            "source_date": (str,),
            "notes": (str,),
        },
    ),
    "prices": (
        Price,
        PRICE_KINDS,
        {
            "key": (str,),
            "name": (str,),
            "kind": (str,),
            "value": _NUMBER,
            "unit": (str,),
            "accelerator": (str, type(None)),
            "vendor": (str, type(None)),
            "tier": (str, type(None)),
            "memory_gb": _OPTIONAL_NUMBER,
            "ecc": (bool, type(None)),
            "power_w": _OPTIONAL_NUMBER,
            "source": (str,),
            "source_date": (str,),
            "notes": (str,),
        },
    ),
    "vertex_machines": (
        VertexMachine,
        MACHINE_SERIES,
        {
            "key": (str,),
            "name": (str,),
            "kind": (str,),
            "accelerators": (list,),
            "accelerator_counts": (list,),
            "source": (str,),
            "source_date": (str,),
            "notes": (str,),
        },
    ),
}


@dataclass(frozen=True)
class Table:
    """One loaded table: its rows (in file order), rows by key, and the name lookup."""

    name: str
    rows: tuple
    by_key: Mapping[str, Any]
    lookup: Mapping[str, str]


def _check_row(table: str, i: int, row: Any) -> None:
    cls, kinds, schema = SCHEMAS[table]
    where = f"tables/{table}.json row {i}"
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row must be an object, got {type(row).__name__}")
    missing = [k for k in schema if k not in row and k != "notes"]
    extra = [k for k in row if k not in schema]
    if missing or extra:
        raise ValueError(f"{where} ({row.get('key')}): missing fields {missing}, unknown fields {extra}")
    for k, v in row.items():
        if (isinstance(v, bool) and bool not in schema[k]) or not isinstance(v, schema[k]):
            raise ValueError(f"{where} ({row['key']}): field {k} must be {[t.__name__ for t in schema[k]]}, got {v!r}")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise ValueError(f"{where} ({row['key']}): field {k} must be >= 0, got {v!r}")
    if row["kind"] not in kinds:
        raise ValueError(f"{where} ({row['key']}): kind {row['kind']!r} is not one of {kinds}")
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", row["source_date"]):
        raise ValueError(f"{where} ({row['key']}): source_date must be YYYY-MM, got {row['source_date']!r}")
    if not all(s.strip().startswith("https://") for s in row["source"].split(";")):
        raise ValueError(f"{where} ({row['key']}): every source must be an https:// URL, got {row['source']!r}")


def normalize_name(name: str) -> str:
    """Lower-case and drop everything but letters and digits: 'A100 80GB' -> 'a10080gb'."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    return re.sub(r"[^a-z0-9]", "", name.lower())


@lru_cache(maxsize=None)
def load_table(table: str) -> Table:
    """Read ``course_lib/tables/<table>.json`` and check it against its schema (the one loader).

    Raises ValueError naming the file, the row and the field for anything that does not fit.
    """
    table = arguments.choice("table", table, TABLES)
    return parse_table(
        table, resources.files("course_lib").joinpath("tables", f"{table}.json").read_text(encoding="utf-8")
    )


def parse_table(table: str, text: str) -> Table:
    """Check the JSON text of one table against its schema and build its rows (``load_table``'s work)."""
    table = arguments.choice("table", table, TABLES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"tables/{table}.json is not valid JSON: {exc}") from None
    cls, kinds, _ = SCHEMAS[table]
    if data.get("table") != table or not isinstance(data.get("rows"), list) or not data["rows"]:
        raise ValueError(f"tables/{table}.json must hold {{'table': {table!r}, 'rows': [...]}} with at least one row")
    if tuple(data.get("kinds", ())) != kinds:
        raise ValueError(f"tables/{table}.json lists kinds {data.get('kinds')}, the schema knows {kinds}")
    for i, row in enumerate(data["rows"]):
        _check_row(table, i, row)
    rows = tuple(cls(**row) for row in data["rows"])
    by_key = {row.key: row for row in rows}
    if len(by_key) != len(rows):
        raise ValueError(f"tables/{table}.json: keys must be unique")
    lookup: dict[str, str] = {}
    for row in rows:
        lookup[normalize_name(row.key)] = row.key
        lookup[normalize_name(row.name)] = row.key
    for alias, key in data.get("aliases", {}).items():
        if key not in by_key:
            raise ValueError(f"tables/{table}.json: alias {alias!r} points at unknown key {key!r}")
        lookup[normalize_name(alias)] = key
    return Table(table, rows, MappingProxyType(by_key), MappingProxyType(lookup))


def _of_kind(table: str, kind: str | None) -> list:
    t = load_table(table)
    if kind is None:
        return list(t.rows)
    kind = arguments.choice("kind", kind, SCHEMAS[table][1])
    return [row for row in t.rows if row.kind == kind]


def _find(table: str, name: str, what: str, examples: str):
    t = load_table(table)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    key = t.lookup.get(normalize_name(name))
    if key is None:
        raise ValueError(
            f"No {what} matches name={name!r}. Accepted keys: {', '.join(t.by_key)} "
            f"(aliases such as {examples} also work)."
        )
    return t.by_key[key]


# --------------------------------------------------------------------------------------
# Accelerators (notebooks 01, 02, 03, 07)
# --------------------------------------------------------------------------------------


def accelerators(kind: str | None = None) -> list[Accelerator]:
    """All catalog rows, or only those of one ``kind`` ("gpu" or "tpu"). ValueError for other kinds."""
    return _of_kind("accelerators", kind)


def accelerator_names() -> list[str]:
    """The short keys of every row, e.g. ["p100-16gb", ..., "tpu-v6e"]."""
    return list(load_table("accelerators").by_key)


def get_accelerator(name: str) -> Accelerator:
    """Look up one accelerator by key, full name or a common alias.

    Case, spaces and punctuation are ignored: "A100 80GB", "a100-80gb" and the CUDA
    device name "NVIDIA A100-SXM4-80GB" give the same row. Plain "A100" is the 40GB
    part; "H100" is the SXM part; "v5e", "TPU v4", "Trillium" work for TPUs.

    Raises TypeError if ``name`` is not a string, ValueError if nothing matches.
    """
    return _find("accelerators", name, "accelerator", "'A100', 'h100', 'v5e', 'TPU v4'")


def catalog_rows(dtype: str = "bf16") -> list[dict]:
    """One flat dict per accelerator, ready for a table (e.g. ``pandas.DataFrame``).

    ``peak_tflops`` is the dense peak at ``dtype``, or None where the chip has none.
    Raises ValueError if ``dtype`` is not one of ``DTYPES``.
    """
    dtype = names.dtype(dtype)
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
            "pod_chips": acc.pod_chips,
            "power_w": acc.power_w,
            "source": acc.source,
        }
        for acc in accelerators()
    ]


# --------------------------------------------------------------------------------------
# Storage and memory tiers (notebooks 02 and 07)
# --------------------------------------------------------------------------------------


def storage_tiers(kind: str | None = None) -> list[StorageTier]:
    """All storage/memory rows, or only those of one ``kind`` ("disk", "memory", "network")."""
    return _of_kind("storage", kind)


def storage_names() -> list[str]:
    """The short keys of every storage row, e.g. ["hdd-7200", ..., "ddr5-4800"]."""
    return list(load_table("storage").by_key)


def get_storage(name: str) -> StorageTier:
    """Look up one storage/memory tier by key, full name or a common alias.

    Case, spaces and punctuation are ignored: "NVMe-PCIe4", "990 PRO" and "nvme gen4"
    give the same row; "HDD", "SATA SSD", "DDR4" work too.

    Raises TypeError if ``name`` is not a string, ValueError if nothing matches.
    """
    return _find("storage", name, "storage tier", "'HDD', 'SATA SSD', '990 PRO', 'DDR4'")


# --------------------------------------------------------------------------------------
# Links (notebook 03)
# --------------------------------------------------------------------------------------


def links(kind: str | None = None) -> list[Link]:
    """All link rows, or only those of one ``kind`` (one of ``LINK_KINDS``).

    The link table. Raises ValueError for an unknown kind.
    """
    return _of_kind("links", kind)


def link_names() -> list[str]:
    """The short keys of every link row, e.g. ["pcie3-x16", ..., "mem-ddr5-4800"]."""
    return list(load_table("links").by_key)


def get_link(name: str) -> Link:
    """Look up one link by key, name or alias; case, spaces and punctuation are ignored.

    "1GbE", "10GbE", "nvlink3", "NVLink 4", "pcie4",
    "PCIe 5.0 x16", "NDR", "v5e" all work. Raises TypeError if ``name`` is not a string,
    ValueError (listing the keys) if nothing matches.
    """
    return _find("links", name, "link", "'1GbE', '100GbE', 'nvlink3', 'pcie4', 'NDR', 'v5e'")


def link_rows() -> list[dict]:
    """One flat dict per link, ready for a table (e.g. ``pandas.DataFrame``).

    The link table, bandwidths in GB/s per direction.
    """
    return [
        {
            "key": link.key,
            "name": link.name,
            "kind": link.kind,
            "bandwidth_gbs_per_direction": link.bandwidth_gbs,
            "latency_us": link.latency_us,
            "source": link.source,
        }
        for link in links()
    ]


# --------------------------------------------------------------------------------------
# Prices, energy and carbon (notebooks 06.5 and 07.3)
# --------------------------------------------------------------------------------------


def prices(kind: str | None = None) -> list[Price]:
    """All price rows, or only those of one ``kind`` (one of ``PRICE_KINDS``).

    Notebook 07.3 (choosing hardware) and ``course_lib.cost``. Raises ValueError for an unknown kind.
    """
    return _of_kind("prices", kind)


def price_names() -> list[str]:
    """The short keys of every price row, e.g. ["gcp-t4", ..., "hdd"]."""
    return list(load_table("prices").by_key)


def get_price(name: str) -> Price:
    """Look up one price row by key, name or alias; case, spaces and punctuation are ignored.

    Notebook 07.3 (choosing hardware). "gcp-t4", "RTX 4090", "4090", "MI300X", "world", "US",
    "HDD", "NVMe" all work. Raises TypeError if ``name`` is not a string, ValueError (listing the
    keys) if nothing matches.
    """
    return _find("prices", name, "price row", "'RTX 4090', 'MI300X', 'world', 'US', 'HDD', 'NVMe'")


# --------------------------------------------------------------------------------------
# Vertex AI machine types
# --------------------------------------------------------------------------------------


def vertex_machines(kind: str | None = None) -> list[VertexMachine]:
    """All Vertex AI machine-type rows, in file order, or only those of one series ``kind`` (one of
    ``MACHINE_SERIES``). Raises ValueError for an unknown kind."""
    return _of_kind("vertex_machines", kind)


__all__ = [
    "DTYPES",
    "KINDS",
    "STORAGE_KINDS",
    "LINK_KINDS",
    "TABLES",
    "SCHEMAS",
    "Accelerator",
    "StorageTier",
    "Link",
    "Table",
    "load_table",
    "parse_table",
    "normalize_name",
    "accelerators",
    "accelerator_names",
    "get_accelerator",
    "catalog_rows",
    "storage_tiers",
    "storage_names",
    "get_storage",
    "links",
    "link_names",
    "get_link",
    "link_rows",
    "PRICE_KINDS",
    "TIERS",
    "Price",
    "prices",
    "price_names",
    "get_price",
    "MACHINE_SERIES",
    "VertexMachine",
    "vertex_machines",
]
