"""One figure from the price table: a cloud chip-hour, a card's purchase price, a tariff, a grid, a PUE.

Each lookup refuses an unknown name with the names it accepts.
"""

from __future__ import annotations

from .. import arguments, catalog
from ..catalog import Price

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


def _pue(pue: float | str) -> tuple[float, str]:
    """A PUE (facility energy / IT energy, at least 1) given as a number or a price-table row."""
    if isinstance(pue, str):
        return _figure("pue", pue, "energy", "facility energy")
    value = arguments.number("pue", pue, minimum=1.0)
    return value, "given"
