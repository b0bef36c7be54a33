"""What hardware costs: cloud hours, owned cards, energy, CO2, memory and storage (notebooks 06.5, 07.3).

Every number comes from the cited price table, ``course_lib/tables/prices.json`` (``catalog.prices()``:
each row with its source, the month it was published or read, and notes), and the accelerator catalog
(peaks, TDPs). Prices move and differ by region and seller: the functions take the table's figure as a
default and let you pass your own.

The parts, in the order notebook 07.3 (choosing hardware) uses them:

* ``cloud_hourly(accelerator, spot=...)`` and ``purchase_price(card)``: one price from the table
  (section 1, "The factors, and the kinds of GPU", and section 3, "Cost and energy").
* ``host_share(card, cards)`` and ``host_watts(accelerator, chips)``: what chips need around them, one rule
  of ASSUMPTIONS rather than table rows. A chip in a server (every cloud chip, and a bought data-centre
  GPU) draws its host's power too: ``HOST_POWER_RATIO`` x its TDP (1.0: the host of 8 A100s draws about
  as much as they do, read from the DGX A100 data sheet); a bought data-centre GPU also pays
  ``SERVER_USD_PER_GPU`` for its share of the server, in a server room (PUE ``SERVER_ROOM_PUE_ROW``). A
  bought consumer or pro card goes into a workstation bought with it: ``DESK_HOST_USD`` and ``DESK_HOST_W``
  per workstation of up to ``DESK_MAX`` cards, at a desk (PUE 1.0). Pass your own quote (``host_usd=``,
  ``host_w=``) to ``owned_vs_cloud``.
* ``owned_vs_cloud(card, hours_per_month=..., months=...)``: buying a card (with its host) against
  renting the cloud's for the same work (the cloud card's hours scaled by the two peaks), with
  electricity at a cited price and PUE, resale and lifetime as arguments, and the break-even month
  (section 3, "Cost and energy": buying or renting).
* ``training_footprint(flops, accelerator)`` and ``footprint_table(flops)``: hours, dollars, kWh and
  kg CO2 of one training job on each catalog accelerator (section 3, "Cost and energy"). Their kWh are
  the chips' own (TDP x PUE), as in notebook 06.5's ``job_cost``; ``host_watts`` gives what the host adds
  (the decision guide counts both).
* ``storage_ladder()``: USD per GB from GPU memory down to hard disks, next to their speed, and
  ``raid(level, disks, disk_tb)``: RAID 10 against RAID 6 (section 3, "Cost and energy": the memory and
  storage ladder).
* ``price_table()`` and ``job_cost(...)``: the cost model of notebook 06.5, section 4 (also reachable as
  ``course_lib.parallel.federated.price_table`` / ``job_cost``).

Formulas (the notebook derives them):

* hours = FLOPs / (chips x dense peak at ``dtype`` x utilisation x scaling efficiency) / 3600;
* USD = chips x hours x price per chip-hour (one chip with its share of the host VM);
* kWh = chips x hours x TDP x PUE / 1000 (the catalog's TDP: an upper bound on the chip's own draw; the host
  adds ``host_watts`` where a function says it counts it: the decision guide and ``owned_vs_cloud`` do);
* kg CO2 = kWh x grid intensity (g per kWh) / 1000.
"""

from __future__ import annotations

import math
from typing import Any

from . import arguments, catalog, names
from .catalog import PRICE_KINDS, Price

#: Grid names accepted by ``training_footprint(grid=...)`` and the price-table row each one reads.
GRIDS = {
    "world": "grid-world",
    "us": "grid-us",
    "france": "grid-france",
    "germany": "grid-germany",
    "india": "grid-india",
}
#: Electricity tariffs accepted by ``owned_vs_cloud(electricity=...)`` and their rows.
ELECTRICITY = {
    "industrial": "electricity-us-industrial",
    "commercial": "electricity-us-commercial",
    "residential": "electricity-us-residential",
}
#: The rows of notebook 06.5's cost model (section 4), in the order ``price_table()`` returns them.
COST_MODEL_KEYS = (
    "gcp-t4",
    "gcp-a100-40gb",
    "gcp-a100-80gb",
    "gcp-h100",
    "gcp-tpu-v5e",
    "gcp-tpu-v5p",
    "gcp-tpu-v6e",
    "pue-google",
    "electricity-us-industrial",
)
RAID_LEVELS = ("raid10", "raid6")
#: ASSUMPTION, not a cited price: the share of a GPU server (CPUs, RAM, NVSwitches, network cards, power supplies,
#: chassis) that one bought data-centre GPU needs, in USD. A rough reading of the one list price NVIDIA announced for
#: such a server, the DGX A100 "starting at $199,000" for 8 A100 40GB GPUs (May 2020, NVIDIA's press release of
#: 2020-05-14 at https://nvidianews.nvidia.com), about $25,000 per GPU with its server, of which roughly
#: $10,000-15,000 the GPU. As announced, not re-checked: pass your own quote (``owned_vs_cloud(host_usd=...)``).
SERVER_USD_PER_GPU = 10_000.0
#: ASSUMPTION: the host of a server's accelerators (CPUs, memory, network, fans, power supplies) draws about as much
#: power as the accelerators themselves at full load. Read from the DGX A100 data sheet
#: (https://www.nvidia.com/en-us/data-center/dgx-a100/): 6.5 kW maximum system power for 8 x 400 W GPUs, so
#: 3.3 kW for the rest, about 1.0 x the GPUs' 3.2 kW. One rule for every chip in a server (a rented chip, a bought
#: data-centre GPU): host watts = ``HOST_POWER_RATIO`` x the chip's TDP (400 W for an A100, 72 W for an L4).
#: As published, not re-checked: a maximum, so an upper bound.
HOST_POWER_RATIO = 1.0
#: ASSUMPTION: a bought consumer or pro card goes into a workstation bought with it (CPU, 128 GB RAM, a power supply
#: for up to ``DESK_MAX`` cards): ``DESK_HOST_USD`` per workstation, drawing ``DESK_HOST_W`` at a desk (PUE 1.0).
#: Pass ``host_usd=0`` to ``owned_vs_cloud`` (``desk_host_usd=0`` to the decision guide) for a desktop you have.
DESK_HOST_USD, DESK_HOST_W, DESK_MAX = 3_000.0, 150.0, 4
#: The PUE of owned hardware: a server room (data-centre cards: the average of Uptime Institute's survey)
#: or a desk (consumer and pro cards in a workstation: no cooling plant, PUE 1.0).
SERVER_ROOM_PUE_ROW, DESK_PUE = "pue-industry-average", 1.0
#: Where the storage ladder finds each tier's read speed: a storage-table key, or an accelerator's memory.
#: How a ladder row's USD per GB is made, where it is not a street price per GB: both GPU-memory rows divide
#: a whole card's price by its memory (an upper bound: the price pays for the chip too), so they compare.
_LADDER_METHOD = {"vram-hbm-h100": "whole card / GB", "vram-gddr6": "whole card / GB"}
_LADDER_SPEED = {
    "vram-hbm-h100": ("accelerator", "h100-sxm"),
    "ram-ddr5": ("storage", "ddr5-4800"),
    "ssd-nvme": ("storage", "nvme-pcie4"),
    "ssd-sata": ("storage", "sata-ssd"),
    "hdd": ("storage", "hdd-7200"),
}


def _cloud_row(accelerator: str, spot: bool) -> Price | None:
    if not isinstance(accelerator, str):
        raise TypeError(
            f"accelerator must be a str, a catalog key or alias such as 't4' or 'a100-80gb'; "
            f"got {type(accelerator).__name__}"
        )
    acc = catalog.get_accelerator(accelerator)  # ValueError listing the catalog's keys
    kind = "cloud-spot" if arguments.boolean("spot", spot) else "cloud-on-demand"
    return next((p for p in catalog.prices(kind) if p.accelerator == acc.key), None)


def priced_accelerators(*, spot: bool = False) -> list[str]:
    """Catalog keys of the accelerators with a cloud price (on-demand, or Spot with ``spot=True``).

    Notebook 07.3, section 3 ("Cost and energy").
    """
    kind = "cloud-spot" if arguments.boolean("spot", spot) else "cloud-on-demand"
    return [p.accelerator for p in catalog.prices(kind) if p.accelerator is not None]


def cloud_hourly(accelerator: str, *, spot: bool = False) -> float:
    """USD per accelerator-hour on Google Cloud, host share included (notebook 07.3, section 3).

    On-demand list price, or with ``spot=True`` the Spot estimate (on-demand x 0.4, see the row's
    notes). ``accelerator`` is a catalog key or alias ("T4", "a100-80gb", "v5e"). Raises ValueError
    for an unknown accelerator (listing the catalog's keys) or one the table has no price for
    (listing those it has).
    """
    row = _cloud_row(accelerator, spot)
    if row is None:
        kind = "Spot" if spot else "on-demand"
        raise ValueError(
            f"no {kind} price for accelerator={accelerator!r} in tables/prices.json; "
            f"priced: {', '.join(priced_accelerators(spot=spot))}"
        )
    return float(row.value)


def _card(card: str) -> Price:
    names = [p.key for p in catalog.prices("purchase")]
    if not isinstance(card, str):
        raise TypeError(f"card must be a str, one of {names}; got {type(card).__name__}")
    try:
        row = catalog.get_price(card)
    except ValueError:
        row = None
        try:  # an accelerator name: its purchase row, if it has one
            acc = catalog.get_accelerator(card).key
            row = next((p for p in catalog.prices("purchase") if p.accelerator == acc), None)
        except ValueError:
            pass
    if row is None or row.kind != "purchase":
        raise ValueError(f"no purchase price for card={card!r} in tables/prices.json; cards: {', '.join(names)}")
    return row


def purchase_price(card: str) -> float:
    """USD for one card: launch list price, or a round reported figure.

    The card alone: a data-centre card also needs its share of a server (``host_share``).
    ``card`` is a purchase row's key, name or alias ("rtx-4090", "RTX 6000 Ada", "MI300X", "H100").
    Raises ValueError (listing the cards) for anything else.
    """
    return float(_card(card).value)


def host_share(card: str, cards: int = 1) -> dict[str, Any]:
    """What ``cards`` bought copies of ``card`` need around them to run, by its tier.

    An assumption, one rule with ``host_watts``: a data-centre card (A100, H100 SXM, MI300X) runs only in a GPU
    server in a server room: ``usd`` = cards x ``SERVER_USD_PER_GPU`` (assumed 10,000 USD), ``watts`` = cards x
    ``HOST_POWER_RATIO`` x the card's TDP, ``pue`` = the price table's ``SERVER_ROOM_PUE_ROW`` (1.56). A consumer
    or pro card goes into a workstation bought with it, one per ``DESK_MAX`` cards: ``usd`` = workstations x
    ``DESK_HOST_USD`` (assumed 3,000 USD), ``watts`` = workstations x ``DESK_HOST_W`` (150 W), ``DESK_PUE`` 1.0.
    ``where`` says which ("server room" or "desk") and ``hosts`` how many workstations (0 in a server room).
    Pass your own quote to ``owned_vs_cloud`` instead. Raises ValueError for an unknown card or a count < 1.
    """
    row = _card(card)
    cards = arguments.positive_int("cards", cards)
    if row.tier == "data-centre":
        return {
            "usd": cards * SERVER_USD_PER_GPU,
            "watts": cards * HOST_POWER_RATIO * row.power_w,
            "pue": float(catalog.get_price(SERVER_ROOM_PUE_ROW).value),
            "pue_row": SERVER_ROOM_PUE_ROW,
            "where": "server room",
            "hosts": 0,
        }
    hosts = math.ceil(cards / DESK_MAX)
    return {
        "usd": hosts * DESK_HOST_USD,
        "watts": hosts * DESK_HOST_W,
        "pue": DESK_PUE,
        "pue_row": "desk",
        "where": "desk",
        "hosts": hosts,
    }


def host_watts(accelerator: str, chips: int = 1, *, ratio: float = HOST_POWER_RATIO) -> float | None:
    """Watts the host of ``chips`` chips draws in a server: chips x ``ratio`` x the chip's TDP.

    The one host rule of the course for chips in a server (rented chips, bought data-centre GPUs; see
    ``HOST_POWER_RATIO``); None where the vendor publishes no TDP (recent TPUs). Raises ValueError for an
    unknown accelerator or a count < 1, and for a negative ``ratio``.
    """
    acc = catalog.get_accelerator(accelerator)
    chips = arguments.positive_int("chips", chips)
    ratio = arguments.nonnegative("ratio", ratio)
    return None if acc.power_w is None else chips * ratio * acc.power_w


def _half_peak(acc: catalog.Accelerator) -> float:
    """FLOP/s of the chip's 16-bit mixed-precision peak (bf16, else fp16), the rate training runs at."""
    return acc.peak_flops("bf16" if "bf16" in acc.peak_tflops else "fp16")


def _figure(
    name: str, value: float | str, kind: str, unit: str, named: dict[str, str] | None = None
) -> tuple[float, str]:
    """A number passed as is, or a price-table row (key, alias or a name of ``named``) of ``kind`` in ``unit``."""
    if isinstance(value, str):
        key = (named or {}).get(value.strip().lower(), value)
        fits = [p.key for p in catalog.prices(kind) if p.unit.startswith(unit)]
        valid = sorted(set(named or ()) | set(fits))
        try:
            row = catalog.get_price(key)
        except ValueError:
            row = None
        if row is None or row.key not in fits:
            raise ValueError(f"{name}={value!r} is not known; accepted values are {valid} or a number")
        return float(row.value), row.key
    return arguments.positive(name, value), "given"


def owned_vs_cloud(
    card: str,
    *,
    hours_per_month: float,
    months: float,
    cloud: str | None = None,
    spot: bool = False,
    resale_fraction: float = 0.3,
    lifetime_months: float = 48,
    host_usd: float | None = None,
    host_w: float | None = None,
    electricity: float | str = "commercial",
    pue: float | str | None = None,
    same_work: bool = True,
) -> dict[str, Any]:
    """Buy a card or rent the cloud's, over a project of ``months`` (notebook 07.3, section 3).

    Owned: ``n = ceil(months / lifetime_months)`` cards bought at ``purchase_price(card) + host_usd``,
    each sold for ``resale_fraction`` of that when it is retired (an ASSUMPTION, 0.3 by default, not a
    cited figure; used cards lose value with age, so pass a lower fraction for a long project), plus
    electricity: ``(card TDP + host_w) x hours x PUE / 1000`` kWh at ``electricity`` USD per kWh (a tariff
    name from ``ELECTRICITY``, a price row or a number; default the cited US commercial average).
    ``host_usd``, ``host_w`` and ``pue`` default to ``host_share(card)``: for a data-centre card its share
    of a GPU server, ASSUMED 10,000 USD and ``HOST_POWER_RATIO`` x its TDP, in a server room (PUE 1.56);
    for a consumer or pro card a workstation bought with it, ASSUMED ``DESK_HOST_USD`` (3,000 USD) and
    ``DESK_HOST_W`` (150 W) at a desk (PUE 1.0; pass ``host_usd=0`` for a desktop you have). Staff, floor
    space, cooling beyond the PUE, repairs and the money's interest are left out: owning costs more than
    this. Cloud: ``cloud_hourly(cloud, spot=spot)`` x the hours the cloud card needs for the same work
    (``same_work=True``: ``hours_per_month`` x the bought card's 16-bit peak / the cloud card's, since a
    card twice as fast does a month's work in half the hours; ``False``: hour for hour) x ``months``;
    ``cloud`` defaults to the card's own accelerator where the cloud rents it (the cloud price already
    includes its host, electricity and data centre).

    ``break_even_months`` = (price + host) x (1 - resale) / (cloud per month - electricity per month):
    the month from which owning has cost less, or None if renting stays cheaper within one lifetime.
    Raises ValueError for unknown names (listing valid ones) and out-of-range numbers.
    """
    row = _card(card)
    hours = arguments.number("hours_per_month", hours_per_month, minimum=0, maximum=744, open_low=True)
    months = arguments.positive("months", months)
    lifetime = arguments.positive("lifetime_months", lifetime_months)
    resale = arguments.number("resale_fraction", resale_fraction, minimum=0, maximum=1, open_high=True)
    same_work = arguments.boolean("same_work", same_work)
    host = host_share(row.key)
    host_usd = host["usd"] if host_usd is None else arguments.nonnegative("host_usd", host_usd)
    host_w = host["watts"] if host_w is None else arguments.nonnegative("host_w", host_w)
    usd_kwh, usd_kwh_row = _figure("electricity", electricity, "energy", "USD per kWh", ELECTRICITY)
    if pue is None:
        pue_value, pue_row = host["pue"], host["pue_row"]
    else:
        pue_value, pue_row = _pue(pue)
    if cloud is None:
        if _cloud_row(row.accelerator, spot) is None:
            raise ValueError(
                f"card={card!r} is not rented in tables/prices.json; pass cloud= one of "
                f"{', '.join(priced_accelerators(spot=spot))}"
            )
        cloud = row.accelerator
    rate = cloud_hourly(cloud, spot=spot)
    cloud_acc = catalog.get_accelerator(cloud)
    speed = _half_peak(catalog.get_accelerator(row.accelerator)) / _half_peak(cloud_acc) if same_work else 1.0
    cloud_hours = hours * speed  # per month, for the work the bought card does in ``hours``
    capital = row.value + host_usd
    cards = math.ceil(months / lifetime - 1e-9)
    kw = (row.power_w + host_w) * pue_value / 1000
    energy_kwh = kw * hours * months
    energy_usd = energy_kwh * usd_kwh
    owned = cards * capital * (1 - resale) + energy_usd
    cloud_usd = rate * cloud_hours * months
    saving_per_month = rate * cloud_hours - kw * hours * usd_kwh
    break_even = capital * (1 - resale) / saving_per_month if saving_per_month > 0 else None
    if break_even is not None and break_even > lifetime:
        break_even = None
    return {
        "card": row.key,
        "cloud": cloud_acc.key,
        "spot": spot,
        "hours_per_month": hours,
        "months": months,
        "purchase_usd": capital,
        "card_usd": float(row.value),
        "host_usd": host_usd,
        "host_w": host_w,
        "cards_bought": cards,
        "resale_fraction": resale,
        "resale_usd": cards * capital * resale,
        "energy_kwh": energy_kwh,
        "energy_usd": energy_usd,
        "owned_usd": owned,
        "cloud_usd_per_hour": rate,
        "speed_ratio": speed,
        "cloud_hours_per_month": cloud_hours,
        "cloud_usd": cloud_usd,
        "cheaper": "owned" if owned < cloud_usd else "cloud",
        "break_even_months": break_even,
        "usd_per_kwh": usd_kwh,
        "pue": pue_value,
        "sources": [row.key, usd_kwh_row, pue_row],
        "left_out": "staff, floor space, repairs and interest",
    }


def _pue(pue: float | str) -> tuple[float, str]:
    """A PUE (facility energy / IT energy, at least 1) given as a number or a price-table row."""
    if isinstance(pue, str):
        return _figure("pue", pue, "energy", "facility energy")
    value = arguments.number("pue", pue, minimum=1.0)
    return value, "given"


def training_footprint(
    flops: float,
    accelerator: str,
    *,
    chips: int = 1,
    utilization: float = 0.4,
    dtype: str = "bf16",
    spot: bool = False,
    grid: float | str = "world",
    pue: float | str = "pue-google",
    scaling_efficiency: float = 1.0,
) -> dict[str, Any]:
    """Hours, USD, kWh and kg CO2 of a training job of ``flops`` FLOPs.

    ``hours`` is wall-clock time on ``chips`` chips (formulas in the module docstring); ``usd`` uses the
    on-demand (or ``spot``) price per chip-hour, ``None`` where the table has no price for the chip;
    ``kwh`` uses the catalog's TDP and ``pue`` (default Google's fleet PUE), ``None`` where the vendor
    publishes no TDP (recent TPUs), and counts the chips only, as ``job_cost`` does (the
    host's draw, ``host_watts``, is left out here; the decision guide adds it); ``pue`` is a number >= 1 or a row;
    ``co2_kg`` uses ``grid`` (a name of ``GRIDS``, a carbon row or a
    number in g CO2 per kWh). ``note`` says what is missing. Raises ValueError for unknown names
    (listing valid ones), a dtype the chip has no peak for, and out-of-range numbers.
    """
    flops = arguments.positive("flops", flops)
    chips = arguments.positive_int("chips", chips)
    utilization = arguments.fraction("utilization", utilization, allow_one=True)
    scaling_efficiency = arguments.fraction("scaling_efficiency", scaling_efficiency, allow_one=True)
    g_per_kwh, grid_row = _figure("grid", grid, "carbon", "g CO2", GRIDS)
    pue_value, _ = _pue(pue)
    acc = catalog.get_accelerator(accelerator)
    hours = flops / (chips * acc.peak_flops(dtype) * utilization * scaling_efficiency) / 3600
    price = _cloud_row(acc.key, spot)
    kwh = None if acc.power_w is None else chips * hours * acc.power_w * pue_value / 1000
    notes = []
    if price is None:
        notes.append(f"no {'Spot' if spot else 'on-demand'} price in the table")
    if kwh is None:
        notes.append("no published TDP: energy unknown")
    return {
        "accelerator": acc.key,
        "dtype": names.dtype(dtype),
        "chips": chips,
        "hours": hours,
        "chip_hours": chips * hours,
        "usd_per_chip_hour": None if price is None else float(price.value),
        "usd": None if price is None else chips * hours * price.value,
        "kwh": kwh,
        "co2_kg": None if kwh is None else kwh * g_per_kwh / 1000,
        "grid": grid_row,
        "g_co2_per_kwh": g_per_kwh,
        "note": "; ".join(notes),
    }


def footprint_table(
    flops: float,
    *,
    chips: int = 1,
    utilization: float = 0.4,
    dtype: str = "bf16",
    fallback_dtype: str = "fp16",
    spot: bool = False,
    grid: float | str = "world",
    pue: float | str = "pue-google",
    scaling_efficiency: float = 1.0,
) -> list[dict[str, Any]]:
    """``training_footprint`` for every catalog accelerator, in catalog order.

    Notebook 07.3, section 3 ("Cost and energy").

    A chip without a peak at ``dtype`` (T4, V100 and P100 have no bf16) runs at ``fallback_dtype``,
    and its ``note`` says so; rows without a price or a TDP say so in ``note`` too. Raises ValueError
    naming ``dtype`` or ``fallback_dtype`` when a chip has a peak at neither.
    """
    rows = []
    for acc in catalog.accelerators():
        use = dtype if dtype in acc.peak_tflops else fallback_dtype
        if use not in acc.peak_tflops:
            raise ValueError(
                f"{acc.name} has a peak at neither dtype={dtype!r} nor fallback_dtype={fallback_dtype!r}; "
                f"its dtypes: {', '.join(acc.peak_tflops)}"
            )
        row = training_footprint(
            flops,
            acc.key,
            chips=chips,
            utilization=utilization,
            dtype=use,
            spot=spot,
            grid=grid,
            pue=pue,
            scaling_efficiency=scaling_efficiency,
        )
        if use != dtype:
            row["note"] = "; ".join(filter(None, [f"no {dtype} peak: {use}", row["note"]]))
        rows.append(row)
    return rows


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


# --------------------------------------------------------------------------------------
# Notebook 06.5's cost model
# --------------------------------------------------------------------------------------


def price_table() -> dict[str, Price]:
    """The rows of notebook 06.5's cost model (section 4), by key, in ``COST_MODEL_KEYS`` order.

    On-demand prices of the chips it compares, Google's PUE and the US industrial electricity price,
    read from ``tables/prices.json`` (every row with an https source and a YYYY-MM date). The full
    table is ``catalog.prices()``.
    """
    return {key: catalog.get_price(key) for key in COST_MODEL_KEYS}


def job_cost(
    flops: float,
    accelerator: str,
    *,
    chips: int = 8,
    utilization: float = 0.4,
    dtype: str = "bf16",
    scaling_efficiency: float = 0.9,
) -> dict[str, Any]:
    """Time, money and energy of a training job of ``flops`` FLOPs on ``chips`` chips (notebook 06.5, sec. 4).

    ``hours = flops / (chips * peak * utilization * scaling_efficiency) / 3600`` with the catalog's dense
    peak at ``dtype``; ``usd = chips * hours * price per chip-hour`` (the table's on-demand list price);
    ``kwh = chips * hours * TDP * PUE / 1000`` (the catalog's TDP: an upper bound on the chip's own draw,
    without the host, network and cooling beyond the PUE), ``None`` where the vendor publishes no TDP;
    ``energy_usd`` at the US industrial electricity price.
    Raises ValueError for an accelerator without a price row, or out-of-range arguments.
    """
    flops = arguments.positive("flops", flops)
    chips = arguments.positive_int("chips", chips)
    utilization = arguments.fraction("utilization", utilization, allow_one=True)
    scaling_efficiency = arguments.fraction("scaling_efficiency", scaling_efficiency, allow_one=True)
    acc = catalog.get_accelerator(accelerator)
    row = _cloud_row(acc.key, False)
    if row is None:
        raise ValueError(
            f"no price for accelerator={accelerator!r} in tables/prices.json; priced: {priced_accelerators()}"
        )
    hours = flops / (chips * acc.peak_flops(dtype) * utilization * scaling_efficiency) / 3600
    pue = catalog.get_price("pue-google").value
    kwh = None if acc.power_w is None else chips * hours * acc.power_w * pue / 1000
    usd_kwh = catalog.get_price("electricity-us-industrial").value
    return {
        "accelerator": acc.key,
        "chips": chips,
        "hours": hours,
        "chip_hours": chips * hours,
        "usd": chips * hours * row.value,
        "usd_per_chip_hour": row.value,
        "kwh": kwh,
        "energy_usd": None if kwh is None else kwh * usd_kwh,
    }


__all__ = [
    "PRICE_KINDS",
    "Price",
    "GRIDS",
    "ELECTRICITY",
    "COST_MODEL_KEYS",
    "RAID_LEVELS",
    "SERVER_USD_PER_GPU",
    "HOST_POWER_RATIO",
    "DESK_HOST_USD",
    "DESK_HOST_W",
    "DESK_MAX",
    "SERVER_ROOM_PUE_ROW",
    "DESK_PUE",
    "priced_accelerators",
    "cloud_hourly",
    "purchase_price",
    "host_share",
    "host_watts",
    "owned_vs_cloud",
    "training_footprint",
    "footprint_table",
    "storage_ladder",
    "raid",
    "price_table",
    "job_cost",
]
