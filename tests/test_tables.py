"""The data tables (course_lib/tables/*.json): one loader, one schema per table, tables that agree."""

from __future__ import annotations

import copy
import json
from importlib import resources

import pytest

from course_lib import catalog


def raw(table: str) -> dict:
    return json.loads(resources.files("course_lib").joinpath("tables", f"{table}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("table", catalog.TABLES)
def test_every_table_loads_and_every_row_is_cited_and_dated(table):
    t = catalog.load_table(table)
    data = raw(table)
    assert len(t.rows) == len(data["rows"]) and data["about"]
    for row in t.rows:
        assert row.source.startswith("https://") and len(row.source_date) == 7 and row.source_date[4] == "-"
        assert t.lookup[catalog.normalize_name(row.key)] == row.key
    assert catalog.load_table(table) is t  # read once


def broken(table: str, change) -> str:
    data = copy.deepcopy(raw(table))
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    "table, change, match",
    [
        ("accelerators", lambda d: d["rows"][0].pop("source"), "missing fields.*source"),
        ("accelerators", lambda d: d["rows"][0].update(memory_gb="80"), "memory_gb must be"),
        ("accelerators", lambda d: d["rows"][0].update(memory_gb=-1), "memory_gb must be >= 0"),
        ("accelerators", lambda d: d["rows"][0].update(kind="fpga"), "kind 'fpga'"),
        ("accelerators", lambda d: d["rows"][0].update(source_date="Nov 2026"), "YYYY-MM"),
        ("accelerators", lambda d: d["rows"][0].update(source="see the datasheet"), "https"),
        ("accelerators", lambda d: d["rows"][0].update(colour="green"), "unknown fields.*colour"),
        ("accelerators", lambda d: d["rows"][0]["peak_tflops"].update(fp4=9), "fp4"),
        ("accelerators", lambda d: d["rows"][0].update(pod_chips="8"), "pod_chips must be"),
        ("accelerators", lambda d: d["rows"][0].update(pod_chips=0), "pod_chips must be"),
        ("accelerators", lambda d: d["rows"][0].pop("pod_chips"), "missing fields.*pod_chips"),
        ("accelerators", lambda d: d["rows"][0].update(year=True), "year must be"),  # a bool is not a number
        ("prices", lambda d: d["rows"][0].update(ecc="yes"), "ecc must be"),
        ("prices", lambda d: d["rows"][0].update(value=-1), "value must be >= 0"),
        ("storage", lambda d: d["rows"].append(d["rows"][0]), "unique"),
        ("storage", lambda d: d["aliases"].update(floppy="floppy-3.5"), "alias 'floppy'"),
        ("links", lambda d: d.update(rows=[]), "at least one row"),
        ("links", lambda d: d.update(kinds=["pcie"]), "kinds"),
        ("vertex_machines", lambda d: d["rows"][0].update(accelerator_counts="1, 2"), "accelerator_counts must be"),
        ("vertex_machines", lambda d: d["rows"][0].update(accelerator_counts=[0]), "whole numbers >= 1"),
        ("vertex_machines", lambda d: d["rows"][0].update(accelerators=[""]), "non-empty strings"),
        ("vertex_machines", lambda d: d["rows"][0].update(accelerator_counts=[]), "lists the counts"),
        ("vertex_machines", lambda d: d["rows"][0].update(kind="tpu"), "kind 'tpu'"),
        ("vertex_machines", lambda d: d["rows"][0].pop("source_date"), "missing fields.*source_date"),
    ],
)
def test_a_broken_table_is_refused_with_a_clear_message(table, change, match):
    with pytest.raises(ValueError, match=match):
        catalog.parse_table(table, broken(table, change))
    with pytest.raises(ValueError, match="not valid JSON"):
        catalog.parse_table(table, "{")


def test_memory_links_are_the_storage_tables_ddr_rows():
    for link_key, tier_key in (("mem-ddr4-3200", "ddr4-3200"), ("mem-ddr5-4800", "ddr5-4800")):
        link, tier = catalog.get_link(link_key), catalog.get_storage(tier_key)
        assert link.bandwidth_gbs == tier.sequential_read_gbs and link.source == tier.source


def test_unknown_table():
    with pytest.raises(ValueError, match="accepted values"):
        catalog.load_table("prices-2019")


def test_vertex_machines_name_the_accelerators_each_takes():
    rows = catalog.vertex_machines()
    assert len({m.key for m in rows}) == len(rows) >= 30
    for m in rows:
        assert m.key.startswith(m.kind + "-") and isinstance(m.accelerator_counts, tuple)
        assert bool(m.accelerators) == (m.kind != "e2")  # E2 machines are CPU only
        if m.kind in ("a2", "a3", "g2"):  # their GPUs come attached: one type, one count
            assert len(m.accelerators) == len(m.accelerator_counts) == 1
    assert [m.key for m in catalog.vertex_machines("a3")] == ["a3-highgpu-8g", "a3-megagpu-8g"]
    with pytest.raises(ValueError, match="accepted values"):
        catalog.vertex_machines("tpu")
