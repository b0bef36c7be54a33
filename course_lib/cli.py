"""The ``course`` command line.

    course doctor            hardware report and what the course will do on this machine
    course doctor --json     the same report as JSON (to compare machines)
    course catalog [--dtype bf16]   the cited accelerator table
    course devices           what the course decides on each platform (device, dtypes, skipped demos)
"""
from __future__ import annotations

import argparse
import json
import sys


def _doctor(args: argparse.Namespace) -> int:
    import dataclasses

    from .cpu import profile
    from .hardware import detect
    from .report import plan_text

    info = detect()
    now = profile()
    if args.json:
        print(json.dumps({**info.to_dict(), "now": dataclasses.asdict(now)}, indent=2, default=str))
        return 0
    print(info.report())
    print()
    print("Right now")
    print(now.summary())
    print()
    print("What the course does here")
    print(plan_text(info, now.plan))
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from .catalog import catalog_rows

    rows = catalog_rows(args.dtype)
    print(f"{'accelerator':<28}{'TFLOP/s ' + args.dtype:>14}{'memory GB':>11}{'GB/s':>8}  interconnect (GB/s per direction)")
    for r in rows:
        peak = "-" if r["peak_tflops"] is None else f"{r['peak_tflops']:g}"
        print(f"{r['name']:<28}{peak:>14}{r['memory_gb']:>11g}{r['memory_bandwidth_gbs']:>8g}  "
              f"{r['interconnect']} ({r['interconnect_gbs']:g} GB/s)")
    return 0


def _devices(args: argparse.Namespace) -> int:
    from .devices import current_plan, decision_table

    print(decision_table())
    print()
    print("This machine")
    print(current_plan().report())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course", description="Training on the hardware you have.")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="hardware report and what the course will do here")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=_doctor)
    cat = sub.add_parser("catalog", help="the cited accelerator table")
    cat.add_argument("--dtype", default="bf16", help="which peak to show (fp32, tf32, bf16, fp16, fp8, int8)")
    cat.set_defaults(func=_catalog)
    sub.add_parser("devices", help="what the course decides on each platform").set_defaults(func=_devices)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"course {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
