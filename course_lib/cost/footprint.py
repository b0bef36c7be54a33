"""What one training job costs: hours, dollars, kWh and kg CO2, on one accelerator or on each of the catalog's.

``training_footprint`` and ``footprint_table`` take a grid and a PUE; ``price_table`` and ``job_cost`` are the
fixed cost model of notebook 06.5, section 4.
"""

from __future__ import annotations

from typing import Any

from .. import arguments, catalog, names
from ..catalog import Price
from .prices import GRIDS, _cloud_row, _figure, _pue, priced_accelerators

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
