"""Reading the tables: one schema per table and the one loader, ``load_table``, that checks a file against it.

A table is ``course_lib/tables/<table>.json``; a field of the wrong type, an unknown kind, a duplicate key, a
source that is not an https URL or a date that is not YYYY-MM is refused with the file, the row and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from .. import arguments
from .rows import (
    KINDS,
    LINK_KINDS,
    MACHINE_SERIES,
    PRICE_KINDS,
    STORAGE_KINDS,
    TABLES,
    Accelerator,
    Link,
    Price,
    StorageTier,
    VertexMachine,
)

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
