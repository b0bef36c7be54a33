"""Memory and storage: USD per GB from GPU memory down to hard disks, and RAID arrays compared."""

from __future__ import annotations

from typing import Any

from .. import arguments, catalog

RAID_LEVELS = ("raid10", "raid6")
#: How a ladder row's USD per GB is made, where it is not a street price per GB: both GPU-memory rows divide
#: a whole card's price by its memory (an upper bound: the price pays for the chip too), so they compare.
_LADDER_METHOD = {"vram-hbm-h100": "whole card / GB", "vram-gddr6": "whole card / GB"}
#: Where the storage ladder finds each tier's read speed: a storage-table key, or an accelerator's memory.
_LADDER_SPEED = {
    "vram-hbm-h100": ("accelerator", "h100-sxm"),
    "ram-ddr5": ("storage", "ddr5-4800"),
    "ssd-nvme": ("storage", "nvme-pcie4"),
    "ssd-sata": ("storage", "sata-ssd"),
    "hdd": ("storage", "hdd-7200"),
}


def storage_ladder() -> list[dict[str, Any]]:
    """USD per GB of each memory and storage tier, dearest first, against HDD.

    Notebook 07.3, section 3 ("Cost and energy": the memory and storage ladder).

    Each row: ``key``, ``name``, ``usd_per_gb``, ``usd_per_tb``, ``vs_hdd`` (how many times a GB of
    hard disk), ``method`` (how the figure is made: the two GPU-memory rows are "whole card / GB", a card's
    price over its memory, an upper bound, see the rows' notes; the others "street price"), ``read_gbs`` (the
    tier's sequential read, or memory bandwidth, from the storage table or
    the accelerator catalog; None where neither has the part), ``source_date`` and ``notes``.
    """
    rows = catalog.prices("storage")
    hdd = catalog.get_price("hdd").value
    out = []
    for p in sorted(rows, key=lambda p: -p.value):
        where, key = _LADDER_SPEED.get(p.key, (None, None))
        speed = (
            catalog.get_storage(key).sequential_read_gbs
            if where == "storage"
            else catalog.get_accelerator(key).memory_bandwidth_gbs
            if where == "accelerator"
            else None
        )
        method = _LADDER_METHOD.get(p.key, "street price")
        out.append(
            {
                "key": p.key,
                "name": p.name,
                "usd_per_gb": float(p.value),
                "usd_per_tb": p.value * 1000,
                "vs_hdd": p.value / hdd,
                "method": method,
                "read_gbs": speed,
                "source_date": p.source_date,
                "notes": p.notes,
            }
        )
    return out


def raid(level: str, disks: int, disk_tb: float, *, usd_per_tb: float | None = None) -> dict[str, Any]:
    """Usable space, fault tolerance, write cost and price of a RAID array (notebook 07.3, section 3).

    * ``"raid10"``: mirrored pairs, striped; needs an even number of disks, at least 4. Usable: half
      the raw space. Survives 1 failed disk for sure (``failures_tolerated``), and up to one per pair
      if you are lucky (``failures_best_case``). Each small write costs 2 disk writes (one per mirror).
    * ``"raid6"``: striping with two parity blocks; at least 4 disks. Usable: ``disks - 2`` disks.
      Survives any 2 failed disks. Each small write costs 6 disk I/Os (read data, P and Q; write all
      three), which is why RAID 6 writes slowly and rebuilds for a long time.

    ``usd_per_tb`` defaults to the price table's hard-disk row. Raises ValueError for an unknown
    level (listing them), too few disks, or sizes that are not positive.
    """
    level = arguments.choice(
        "level", level, RAID_LEVELS, aliases={"raid 10": "raid10", "raid1+0": "raid10", "raid 6": "raid6"}
    )
    disks = arguments.positive_int("disks", disks)
    disk_tb = arguments.positive("disk_tb", disk_tb)
    usd_tb = (
        catalog.get_price("hdd").value * 1000 if usd_per_tb is None else arguments.positive("usd_per_tb", usd_per_tb)
    )
    if disks < 4 or (level == "raid10" and disks % 2):
        need = "an even number of disks >= 4" if level == "raid10" else "at least 4 disks"
        raise ValueError(f"disks={disks}: {level} needs {need}")
    usable_disks = disks // 2 if level == "raid10" else disks - 2
    raw = disks * disk_tb
    usable = usable_disks * disk_tb
    return {
        "level": level,
        "disks": disks,
        "disk_tb": disk_tb,
        "raw_tb": raw,
        "usable_tb": usable,
        "efficiency": usable / raw,
        "failures_tolerated": 1 if level == "raid10" else 2,
        "failures_best_case": disks // 2 if level == "raid10" else 2,
        "write_penalty": 2 if level == "raid10" else 6,
        "usd": raw * usd_tb,
        "usd_per_usable_tb": raw * usd_tb / usable,
    }
