"""Tests for course_lib.cost and the price table it reads (notebooks 06.5 and 07.3)."""

from __future__ import annotations

import inspect
import json
import math
from importlib import resources

import pytest

from course_lib import catalog, cost
from course_lib.catalog import Price

ROWS = catalog.prices()
RAW = json.loads(resources.files("course_lib").joinpath("tables", "prices.json").read_text("utf-8"))


# ---- the table ----------------------------------------------------------------------------------


def test_every_kind_is_present_and_the_table_is_dated():
    kinds = {p.kind for p in ROWS}
    assert kinds == set(catalog.PRICE_KINDS)
    assert "2026-12" in RAW["about"] and "not re-checked" in RAW["about"]
    assert catalog.price_names() == [p.key for p in ROWS]


@pytest.mark.parametrize("p", ROWS, ids=lambda p: p.key)
def test_every_row_is_cited_dated_and_explained(p: Price):
    assert all(s.strip().startswith("https://") for s in p.source.split(";"))
    year, month = p.source_date.split("-")
    assert 2020 <= int(year) <= 2026 and 1 <= int(month) <= 12
    assert len(p.notes) > 40 and p.value > 0


def test_unverified_prices_say_so():
    for p in ROWS:
        if p.kind in ("cloud-on-demand", "cloud-spot", "purchase", "storage"):
            assert any(w in p.notes.lower() for w in ("not re-checked", "estimate", "derived")), p.key


def test_cloud_rows_name_catalog_accelerators_and_spot_is_cheaper():
    on_demand = {p.accelerator: p for p in catalog.prices("cloud-on-demand")}
    spot = {p.accelerator: p for p in catalog.prices("cloud-spot")}
    for acc in list(on_demand) + list(spot):
        assert catalog.get_accelerator(acc).key == acc
    assert {"t4", "l4", "a100-40gb", "a100-80gb", "h100-sxm", "tpu-v5e", "tpu-v5p", "tpu-v6e"} <= set(on_demand)
    assert set(spot) == set(on_demand)
    for acc, p in spot.items():
        assert p.value == pytest.approx(round(on_demand[acc].value * 0.4, 2))  # the rule its notes state


def test_purchase_rows_cover_tiers_ecc_and_amd():
    cards = catalog.prices("purchase")
    assert {p.tier for p in cards} == {"consumer", "pro", "data-centre"}
    assert {p.ecc for p in cards} == {True, False}
    assert any(p.vendor == "AMD" and p.tier == "consumer" for p in cards)
    assert any(p.vendor == "AMD" and p.tier == "data-centre" for p in cards)
    assert catalog.get_price("rtx-4090").ecc is True and "off by default" in catalog.get_price("rtx-4090").notes
    assert catalog.get_price("rtx-6000-ada").ecc is True and catalog.get_price("rtx-4060-ti-16gb").ecc is False
    for p in cards:
        assert p.memory_gb > 0 and p.power_w > 0 and p.unit == "USD per card"
        if p.accelerator is not None:
            assert catalog.get_accelerator(p.accelerator).power_w == p.power_w


def test_vram_rows_are_derived_from_the_cards_as_their_notes_say():
    """Both GPU-memory rows are a whole card's price / its memory (the same method, so they compare); the
    GDDR row's notes also give the marginal price of 8 GB more on the same chip."""
    rtx, h100 = catalog.get_price("rtx-4090"), catalog.get_price("h100")
    assert catalog.get_price("vram-gddr6").value == pytest.approx(rtx.value / rtx.memory_gb, abs=0.05)
    assert catalog.get_price("vram-hbm-h100").value == h100.value / h100.memory_gb
    small, big = catalog.get_price("rtx-4060-ti-8gb"), catalog.get_price("rtx-4060-ti-16gb")
    marginal = (big.value - small.value) / (big.memory_gb - small.memory_gb)
    assert f"${marginal:.2f} per GB" in catalog.get_price("vram-gddr6").notes
    assert {r["method"] for r in cost.storage_ladder() if r["key"].startswith("vram")} == {"whole card / GB"}


def test_data_centre_rows_say_they_have_no_list_price():
    for key in ("a100-80gb", "h100", "mi300x"):
        assert catalog.get_price(key).notes.startswith("NO LIST PRICE") and "host_share" in catalog.get_price(key).notes
    for key in ("grid-france", "grid-germany", "grid-india"):
        row = catalog.get_price(key)
        assert row.source_date <= "2025-12" and "not re-checked" in row.notes
    assert not any("06.4" in p.notes for p in catalog.prices("cloud-spot"))


def test_energy_and_carbon_rows():
    assert catalog.get_price("world").key == "grid-world" and "Ember" in catalog.get_price("world").notes
    assert catalog.get_price("US").unit.startswith("g CO2")
    assert 1.0 < catalog.get_price("pue-google").value < catalog.get_price("pue-industry-average").value < 2
    assert (
        catalog.get_price("grid-france").value
        < catalog.get_price("grid-us").value
        < catalog.get_price("grid-world").value
        < catalog.get_price("grid-india").value
    )


def test_the_old_cloud_price_rows_kept_their_keys_and_values():
    """Notebook 06.5 prints these: the same keys, in the same order, with the same numbers."""
    old = {
        "gcp-t4": 0.54,
        "gcp-a100-40gb": 3.67,
        "gcp-a100-80gb": 5.07,
        "gcp-h100": 11.06,
        "gcp-tpu-v5e": 1.2,
        "gcp-tpu-v5p": 4.2,
        "gcp-tpu-v6e": 2.7,
        "pue-google": 1.1,
        "electricity-us-industrial": 0.08,
    }
    table = cost.price_table()
    assert list(table) == list(old) and {k: p.value for k, p in table.items()} == old
    assert all(p.source_date == "2025-06" for p in table.values())


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda r: r.update(ecc="yes"), "ecc must be"),
        (lambda r: r.update(tier="gaming"), "tier='gaming'"),
        (lambda r: r.update(value=0), "value must be > 0"),
        (lambda r: r.update(kind="rental"), "kind 'rental'"),
        (lambda r: r.update(accelerator=None), "must name its accelerator"),
    ],
)
def test_a_broken_price_row_is_refused(change, match):
    data = json.loads(json.dumps(RAW))
    change(data["rows"][0])
    with pytest.raises(ValueError, match=match):
        catalog.parse_table("prices", json.dumps(data))


# ---- prices --------------------------------------------------------------------------------------


def test_cloud_hourly_and_purchase_price():
    assert cost.cloud_hourly("T4") == 0.54 and cost.cloud_hourly("t4", spot=True) == 0.22
    assert cost.cloud_hourly("v5e") == 1.2
    assert cost.purchase_price("RTX 4090") == 1599 and cost.purchase_price("MI300X") == 15000
    assert cost.purchase_price("h100-sxm") == cost.purchase_price("h100")  # an accelerator name finds its card


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="Accepted keys: p100-16gb"):
        cost.cloud_hourly("gtx-1080")
    with pytest.raises(TypeError, match="accelerator must be a str"):
        cost.cloud_hourly(3)
    with pytest.raises(ValueError, match="dtype='fp8' nor fallback_dtype='fp16'"):
        cost.footprint_table(1e18, dtype="fp8")
    with pytest.raises(ValueError, match=r"no on-demand price .*priced: t4, a100-40gb"):
        cost.cloud_hourly("l40s")
    with pytest.raises(ValueError, match="cards: rtx-4090, rx-7900-xtx"):
        cost.purchase_price("gcp-t4")  # a cloud row, not a card
    with pytest.raises(ValueError, match="cards: rtx-4090"):
        cost.purchase_price("voodoo 2")
    with pytest.raises(ValueError, match=r"grid='mars' is not known; accepted values are \[.*'world'"):
        cost.training_footprint(1e18, "a100", grid="mars")
    with pytest.raises(ValueError, match="accepted values are .*'raid10', 'raid6'"):
        cost.raid("raid5", 4, 10)
    with pytest.raises(ValueError, match="No price row matches name='nope'. Accepted keys: gcp-t4"):
        catalog.get_price("nope")
    with pytest.raises(TypeError, match="name must be a str"):
        catalog.get_price(4090)
    with pytest.raises(ValueError, match="pass cloud= one of"):
        cost.owned_vs_cloud("rtx-4090", hours_per_month=100, months=12)


# ---- owned vs cloud ------------------------------------------------------------------------------


def test_owned_vs_cloud_break_even_by_hand():
    # RTX 4090 ($1,599, 450 W) in a workstation bought with it ($3,000, 150 W) against a cloud L4 ($0.71/h), 200 h a
    # month for 24 months, resale 30 %, electricity $0.13/kWh (US commercial), PUE 1.0 (a desk). The same work takes
    # the L4 165.2 / 121 times the 4090's hours (their bf16 peaks).
    r = cost.owned_vs_cloud("rtx-4090", hours_per_month=200, months=24, cloud="l4")
    speed = 165.2 / 121
    energy_per_month = (0.450 + 0.150) * 200 * 0.13  # 15.60 USD
    assert r["speed_ratio"] == pytest.approx(speed) and r["cloud_hours_per_month"] == pytest.approx(200 * speed)
    assert r["energy_kwh"] == pytest.approx(0.600 * 200 * 24)  # 2,880 kWh
    assert r["owned_usd"] == pytest.approx(4599 * 0.7 + 24 * energy_per_month)  # 3,219.30 + 374.40
    assert r["cloud_usd"] == pytest.approx(0.71 * 200 * speed * 24)  # 4,653
    assert r["break_even_months"] == pytest.approx(4599 * 0.7 / (0.71 * 200 * speed - energy_per_month))  # 18.0
    assert r["cheaper"] == "owned" and r["cards_bought"] == 1
    assert r["sources"] == ["rtx-4090", "electricity-us-commercial", "desk"]  # a consumer card: PUE 1.0, no server
    assert r["host_usd"] == cost.DESK_HOST_USD and r["host_w"] == cost.DESK_HOST_W and r["pue"] == cost.DESK_PUE
    hour_for_hour = cost.owned_vs_cloud("rtx-4090", hours_per_month=200, months=24, cloud="l4", same_work=False)
    assert hour_for_hour["cloud_usd"] == pytest.approx(0.71 * 200 * 24) and hour_for_hour["speed_ratio"] == 1
    mine = cost.owned_vs_cloud("rtx-4090", hours_per_month=200, months=24, cloud="l4", host_usd=0, host_w=0)
    assert mine["owned_usd"] == pytest.approx(1599 * 0.7 + 24 * 0.450 * 200 * 0.13)  # a desktop you already have


def test_a_data_centre_card_pays_for_its_server_share_in_a_server_room():
    """An SXM A100 needs a server: by default the assumed share (cost.host_share) and the server room's PUE."""
    r = cost.owned_vs_cloud("a100-80gb", hours_per_month=100, months=36)
    pue = catalog.get_price(cost.SERVER_ROOM_PUE_ROW).value
    assert r["purchase_usd"] == 15000 + cost.SERVER_USD_PER_GPU and r["card_usd"] == 15000
    kwh = (400 + cost.HOST_POWER_RATIO * 400) * pue / 1000 * 100 * 36
    assert r["energy_kwh"] == pytest.approx(kwh) and r["pue"] == pue and r["speed_ratio"] == 1
    assert r["owned_usd"] == pytest.approx((15000 + cost.SERVER_USD_PER_GPU) * 0.7 + kwh * 0.13)
    assert r["sources"][2] == cost.SERVER_ROOM_PUE_ROW and "staff" in r["left_out"]
    bare = cost.owned_vs_cloud("a100-80gb", hours_per_month=100, months=36, host_usd=0, host_w=0, pue=1.0)
    assert bare["owned_usd"] < r["owned_usd"] and bare["sources"][2] == "given"
    assert cost.host_share("rtx-6000-ada")["where"] == "desk" and cost.host_share("h100")["where"] == "server room"


def test_one_host_rule_for_every_chip():
    """A chip in a server draws HOST_POWER_RATIO x its TDP of host power (rented or bought); bought desk cards share
    one workstation per DESK_MAX cards."""
    assert cost.host_watts("a100-80gb") == cost.HOST_POWER_RATIO * 400  # the DGX A100 reading
    assert cost.host_watts("l4", 2) == 2 * cost.HOST_POWER_RATIO * 72  # a small card, a small host share
    assert cost.host_watts("tpu-v5e") is None  # no TDP published
    assert cost.host_share("h100", 2)["watts"] == 2 * cost.HOST_POWER_RATIO * 700
    assert cost.host_share("h100", 2)["usd"] == 2 * cost.SERVER_USD_PER_GPU
    four, five = cost.host_share("rtx-4090", 4), cost.host_share("rtx-4090", 5)
    assert (four["usd"], four["watts"], four["hosts"]) == (cost.DESK_HOST_USD, cost.DESK_HOST_W, 1)
    assert (five["usd"], five["hosts"]) == (2 * cost.DESK_HOST_USD, 2)
    with pytest.raises(ValueError, match="cards"):
        cost.host_share("rtx-4090", 0)
    with pytest.raises(ValueError, match="ratio"):
        cost.host_watts("l4", ratio=-1)
    with pytest.raises(TypeError, match="same_work"):
        cost.owned_vs_cloud("a100-80gb", hours_per_month=100, months=12, same_work="yes")


def test_owned_vs_cloud_lifetime_resale_and_never():
    # 10 h a month: the cloud costs 9.69 a month for the same work, the card never pays for itself within its life.
    r = cost.owned_vs_cloud("rtx-4090", hours_per_month=10, months=24, cloud="l4", resale_fraction=0)
    assert r["break_even_months"] is None and r["cheaper"] == "cloud"
    # Two lifetimes of 12 months: two cards bought, each sold for half its price.
    r = cost.owned_vs_cloud(
        "a100-80gb",
        hours_per_month=100,
        months=24,
        lifetime_months=12,
        resale_fraction=0.5,
        host_usd=5000,
        host_w=200,
        electricity=0.10,
        pue="pue-industry-average",
    )
    assert r["cloud"] == "a100-80gb" and r["cards_bought"] == 2
    kwh = (400 + 200) * 1.56 / 1000 * 100 * 24
    assert r["energy_kwh"] == pytest.approx(kwh)
    assert r["owned_usd"] == pytest.approx(2 * 20000 * 0.5 + kwh * 0.10)
    assert r["break_even_months"] is None  # 20.1 months: longer than one 12-month lifetime
    r = cost.owned_vs_cloud(
        "a100-80gb",
        hours_per_month=100,
        months=24,
        lifetime_months=24,
        resale_fraction=0.5,
        host_usd=5000,
        host_w=200,
        electricity=0.10,
        pue="pue-industry-average",
    )
    assert r["break_even_months"] == pytest.approx(20000 * 0.5 / (5.07 * 100 - 0.6 * 1.56 * 100 * 0.10))  # 20.1
    assert r["cards_bought"] == 1 and r["sources"] == ["a100-80gb", "given", "pue-industry-average"]
    spot = cost.owned_vs_cloud("a100-80gb", hours_per_month=100, months=24, spot=True)
    assert spot["cloud_usd_per_hour"] == cost.cloud_hourly("a100-80gb", spot=True)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"hours_per_month": 0, "months": 12}, ValueError, "hours_per_month"),
        ({"hours_per_month": 800, "months": 12}, ValueError, "hours_per_month"),
        ({"hours_per_month": 100, "months": -1}, ValueError, "months"),
        ({"hours_per_month": 100, "months": 12, "resale_fraction": 1}, ValueError, "resale_fraction"),
        ({"hours_per_month": 100, "months": 12, "lifetime_months": 0}, ValueError, "lifetime_months"),
        ({"hours_per_month": 100, "months": 12, "host_usd": -5}, ValueError, "host_usd"),
        ({"hours_per_month": 100, "months": 12, "electricity": "solar"}, ValueError, "electricity='solar'"),
        ({"hours_per_month": 100, "months": 12, "pue": 0}, ValueError, "pue"),
        ({"hours_per_month": 100, "months": 12, "pue": 0.5}, ValueError, "pue must be a number >= 1"),
        ({"hours_per_month": 100, "months": 12, "pue": "electricity-us-industrial"}, ValueError, "pue='electricity"),
        (
            {"hours_per_month": 100, "months": 12, "electricity": "pue-google"},
            ValueError,
            "accepted values .*'commercial'",
        ),
        ({"hours_per_month": "100", "months": 12}, TypeError, "hours_per_month"),
    ],
)
def test_owned_vs_cloud_bad_numbers(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cost.owned_vs_cloud("a100-80gb", **kwargs)


# ---- time, cost, energy and CO2 ------------------------------------------------------------------


def test_training_footprint_by_hand():
    acc = catalog.get_accelerator("a100-80gb")
    flops = 2 * acc.peak_flops("bf16") * 3600 * 0.5  # two chips at half the peak for one hour
    r = cost.training_footprint(flops, "a100-80gb", chips=2, utilization=0.5, grid="us")
    assert r["hours"] == pytest.approx(1.0) and r["chip_hours"] == pytest.approx(2.0)
    assert r["usd"] == pytest.approx(2 * 5.07)
    assert r["kwh"] == pytest.approx(2 * 0.400 * 1.1)  # 2 chips x 400 W x PUE 1.1
    assert r["co2_kg"] == pytest.approx(2 * 0.400 * 1.1 * 367 / 1000)
    assert r["note"] == ""
    spot = cost.training_footprint(flops, "a100-80gb", chips=2, utilization=0.5, spot=True, grid=100.0, pue=1.0)
    assert spot["usd"] == pytest.approx(2 * 2.03) and spot["co2_kg"] == pytest.approx(0.8 * 100 / 1000)
    assert spot["grid"] == "given"


def test_training_footprint_says_what_is_missing():
    v5e = cost.training_footprint(1e20, "tpu-v5e")
    assert v5e["usd"] is not None and v5e["kwh"] is None and v5e["co2_kg"] is None and "TDP" in v5e["note"]
    l40s = cost.training_footprint(1e20, "l40s")
    assert l40s["usd"] is None and l40s["kwh"] > 0 and "no on-demand price" in l40s["note"]
    with pytest.raises(ValueError, match="no peak for dtype='bf16'"):
        cost.training_footprint(1e20, "t4")
    with pytest.raises(ValueError, match="flops"):
        cost.training_footprint(0, "t4", dtype="fp16")
    with pytest.raises(ValueError, match="chips"):
        cost.training_footprint(1e20, "h100", chips=0)


def test_footprint_table_has_every_accelerator_and_every_price():
    rows = cost.footprint_table(1.2e20, chips=8, scaling_efficiency=0.9)
    assert [r["accelerator"] for r in rows] == catalog.accelerator_names()
    priced = set(cost.priced_accelerators())
    for r in rows:
        assert (r["usd"] is not None) == (r["accelerator"] in priced)
        if r["accelerator"] in priced:  # the same numbers as notebook 06.5's job_cost
            job = cost.job_cost(1.2e20, r["accelerator"], chips=8, dtype=r["dtype"])
            assert r["usd"] == pytest.approx(job["usd"]) and r["hours"] == pytest.approx(job["hours"])
    t4 = next(r for r in rows if r["accelerator"] == "t4")
    assert t4["dtype"] == "fp16" and "no bf16 peak" in t4["note"]


# ---- memory and storage ---------------------------------------------------------------------------


def test_storage_ladder():
    ladder = cost.storage_ladder()
    keys = [r["key"] for r in ladder]
    assert keys == ["vram-hbm-h100", "vram-gddr6", "ram-ddr5", "ssd-nvme", "ssd-sata", "hdd"]
    assert [r["usd_per_gb"] for r in ladder] == sorted((r["usd_per_gb"] for r in ladder), reverse=True)
    hdd = ladder[-1]
    assert hdd["vs_hdd"] == 1 and hdd["usd_per_tb"] == pytest.approx(15)
    assert ladder[2]["vs_hdd"] == pytest.approx(3.0 / 0.015)  # DDR5: 200 times a hard disk per GB
    assert ladder[2]["read_gbs"] == catalog.get_storage("ddr5-4800").sequential_read_gbs
    assert ladder[0]["read_gbs"] == catalog.get_accelerator("h100-sxm").memory_bandwidth_gbs


def test_raid_by_hand():
    r6 = cost.raid("raid6", 6, 10)
    assert (r6["usable_tb"], r6["raw_tb"], r6["failures_tolerated"], r6["write_penalty"]) == (40, 60, 2, 6)
    assert r6["usd"] == pytest.approx(60 * 15) and r6["usd_per_usable_tb"] == pytest.approx(60 * 15 / 40)
    r10 = cost.raid("RAID 10", 6, 10, usd_per_tb=20)
    assert (r10["level"], r10["usable_tb"]) == ("raid10", 30)
    assert (r10["failures_tolerated"], r10["failures_best_case"]) == (1, 3)
    assert r10["write_penalty"] == 2 and r10["usd_per_usable_tb"] == pytest.approx(40)
    assert cost.raid("raid6", 12, 20)["efficiency"] == pytest.approx(10 / 12)


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        (("raid10", 5, 10), {}, ValueError, "even number of disks"),
        (("raid6", 3, 10), {}, ValueError, "at least 4 disks"),
        (("raid6", 0, 10), {}, ValueError, "disks"),
        (("raid6", 6, -1), {}, ValueError, "disk_tb"),
        (("raid6", 6, 0), {}, ValueError, "disk_tb"),
        (("raid6", 6, 10), {"usd_per_tb": 0}, ValueError, "usd_per_tb"),
        (("raid6", 6.5, 10), {}, TypeError, "disks"),
    ],
)
def test_raid_bad_input(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cost.raid(*args, **kwargs)


def test_public_functions_are_documented_and_typed():
    for name in cost.__all__:
        obj = getattr(cost, name)
        if inspect.isfunction(obj):
            assert obj.__doc__ and "return" in obj.__annotations__, name
    for name in ("prices", "price_names", "get_price"):
        assert getattr(catalog, name).__doc__ and "return" in getattr(catalog, name).__annotations__
    assert not math.isnan(cost.cloud_hourly("h100"))
