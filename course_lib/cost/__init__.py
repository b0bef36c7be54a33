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
* ``price_table()`` and ``job_cost(...)``: the cost model of notebook 06.5, section 4.

Formulas (the notebook derives them):

* hours = FLOPs / (chips x dense peak at ``dtype`` x utilisation x scaling efficiency) / 3600;
* USD = chips x hours x price per chip-hour (one chip with its share of the host VM);
* kWh = chips x hours x TDP x PUE / 1000 (the catalog's TDP: an upper bound on the chip's own draw; the host
  adds ``host_watts`` where a function says it counts it: the decision guide and ``owned_vs_cloud`` do);
* kg CO2 = kWh x grid intensity (g per kWh) / 1000.

Each part has its own file: ``prices`` (one price from the table: ``cloud_hourly``, ``purchase_price``),
``owning`` (the host assumptions, ``host_share``, ``host_watts``, ``owned_vs_cloud``), ``footprint``
(``training_footprint``, ``footprint_table``, ``price_table``, ``job_cost``) and ``storage``
(``storage_ladder``, ``raid``); every name can be reached from here.
"""

from __future__ import annotations

from ..catalog import PRICE_KINDS, Price
from .footprint import COST_MODEL_KEYS, footprint_table, job_cost, price_table, training_footprint
from .owning import (
    DESK_HOST_USD,
    DESK_HOST_W,
    DESK_MAX,
    DESK_PUE,
    HOST_POWER_RATIO,
    SERVER_ROOM_PUE_ROW,
    SERVER_USD_PER_GPU,
    host_share,
    host_watts,
    owned_vs_cloud,
)
from .prices import ELECTRICITY, GRIDS, cloud_hourly, priced_accelerators, purchase_price
from .storage import RAID_LEVELS, raid, storage_ladder

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
