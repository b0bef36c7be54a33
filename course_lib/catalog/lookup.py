"""Each table's rows: all of them, those of one kind, or one found by key, name or alias.

Names are compared without case, spaces or punctuation (``normalize_name``); an unknown name is refused with
the table's keys.
"""

from __future__ import annotations

from .. import arguments, names
from .loading import SCHEMAS, load_table, normalize_name
from .rows import Accelerator, Link, Price, StorageTier, VertexMachine


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
