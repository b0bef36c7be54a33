"""Owning hardware against renting it: what a bought card needs around it, and when buying pays off.

The host rules are ASSUMPTIONS (a share of a GPU server, a workstation at a desk), each documented where it is
defined; ``owned_vs_cloud`` takes your own quote instead.
"""

from __future__ import annotations

import math
from typing import Any

from .. import arguments, catalog
from .prices import ELECTRICITY, _card, _cloud_row, _figure, _pue, cloud_hourly, priced_accelerators

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
