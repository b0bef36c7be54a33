#!/usr/bin/env python3
"""Execute every notebook in notebooks/ and solutions/ into build/executed/, record its run time.

    python tools/run_notebooks.py                 # all notebooks
    python tools/run_notebooks.py notebooks/01*   # some
    python tools/run_notebooks.py --measure-only  # time them here (e.g. a GPU runtime), timings.json untouched

The notebooks themselves stay clean (stored without outputs): each run writes an executed copy to
build/executed/ (tools/nbrun.py), which the website is built from, and the measured durations into
notebooks/timings.json, then prints the table. Fails if a notebook raises or takes more than the budget.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat

from nbrun import ROOT, code_hash, describe, execute, machine

TIMINGS = ROOT / "notebooks" / "timings.json"
BUDGET_S = 90.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="notebooks to run (default: notebooks/ and solutions/)")
    parser.add_argument(
        "--measure-only",
        action="store_true",
        help="print this run's times and leave timings.json alone (an instructor timing a GPU runtime)",
    )
    args = parser.parse_args(argv)
    paths = [Path(p).resolve() for p in args.paths] or sorted(
        list((ROOT / "notebooks").glob("*.ipynb")) + list((ROOT / "solutions").glob("*.ipynb"))
    )
    table = json.loads(TIMINGS.read_text()) if TIMINGS.exists() and not args.measure_only else {}
    where = describe(machine())
    over = []
    for path in paths:
        rel = str(path.relative_to(ROOT))
        print(f"running {rel} ...", flush=True)
        copy, seconds = execute(path)
        nb = nbformat.read(path, as_version=4)
        table[rel] = {
            "seconds": round(seconds, 1),
            "code_hash": code_hash(nb),
            "machine": where,
            "date": machine()["date"],
        }
        print(f"  {seconds:.1f} s, executed copy {copy.relative_to(ROOT)}", flush=True)
        if seconds > BUDGET_S:
            over.append(rel)
    if not args.measure_only:
        TIMINGS.write_text(json.dumps(dict(sorted(table.items())), indent=2) + "\n")
    print(f"\n{where}\n{'notebook':<45}{'seconds':>9}")
    for rel, row in sorted(table.items()):
        print(f"{rel:<45}{row['seconds']:>9.1f}")
    if over:
        print(f"over the {BUDGET_S:.0f} s budget: {', '.join(over)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
