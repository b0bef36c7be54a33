"""The ``course`` command line.

course doctor            hardware report and what the course will do on this machine
course doctor --json     the same report as JSON (to compare machines)
course catalog [--dtype bf16]   the cited accelerator table
course devices           what the course decides on each platform (device, dtypes, skipped demos)
course benchmark [--quick] [--label L] [--out PATH] [--threads N] [--processes N] [--no-progress]
                         an MLPerf-style benchmark of this machine (time to accuracy, throughput,
                         latency, matmul, memory and all-reduce bandwidth, energy) over 5 fresh
                         processes (trimmed mean, CV flagged above 5 %), saved as JSON
                         (default ./benchmark-<label>-<date>.json; --out FOLDER puts that name there);
                         --quick takes ~15-30 s, the full run 1-3 min
course run-file NOTEBOOK.ipynb [--label L] [--out DIR]
                         a lesson notebook saved with its outputs, as one run file (what its last cell writes)
course class FOLDER [--out DIR]
                         a folder of learners' run files merged into one offline HTML page for the room
                         (DIR/index.html, default ./class-page): the room's hardware, guesses against the
                         measurements and the model, claims that failed, each machine against the atlas;
                         files it cannot use are skipped and copies flagged, each named with the reason
course report-card RESULT.json... [--out DIR]
                         put saved benchmark results side by side (PNG and HTML in DIR, default
                         ./report-card) with the catalog's accelerators as reference lines
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _doctor(args: argparse.Namespace) -> int:
    import dataclasses

    from .cpu import profile
    from .hardware import detect
    from .doctor import adaptations_text

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
    print(adaptations_text(info, now.plan))
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from .catalog import catalog_rows

    rows = catalog_rows(args.dtype)
    print(
        f"{'accelerator':<28}{'TFLOP/s ' + args.dtype:>14}{'memory GB':>11}{'GB/s':>8}"
        "  interconnect (GB/s per direction)"
    )
    for r in rows:
        peak = "-" if r["peak_tflops"] is None else f"{r['peak_tflops']:g}"
        print(
            f"{r['name']:<28}{peak:>14}{r['memory_gb']:>11g}{r['memory_bandwidth_gbs']:>8g}  "
            f"{r['interconnect']} ({r['interconnect_gbs']:g} GB/s)"
        )
    return 0


def _devices(args: argparse.Namespace) -> int:
    from .devices import current_plan, decision_table

    print(decision_table())
    print()
    print("This machine")
    print(current_plan().report())
    return 0


def _benchmark_folder(out: str | None) -> Path:
    """The folder ``--out`` saves into, checked before the run (so that a finished run is never lost)."""
    folder = Path(".") if not out else Path(out) if Path(out).is_dir() else Path(out).parent
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                raise ValueError(f"--out {out!r}: {str(above)!r} is a file, not a folder")
            if not os.access(above, os.W_OK | os.X_OK):
                raise ValueError(f"--out {out or '.'!r}: cannot write into the folder {str(above)!r}")
            break
    return folder


def _benchmark(args: argparse.Namespace) -> int:
    from .benchmark.results import default_result_path, save_result
    from .benchmark.suite import run_benchmark
    from .benchmark.summary import summary_text

    _benchmark_folder(args.out)  # fail before the run, not after it
    result = run_benchmark(
        quick=args.quick,
        label=args.label,
        progress=not args.no_progress,
        threads=args.threads,
        processes=args.processes,
    )
    out = Path(args.out) if args.out else None
    if out is None or out.is_dir():  # a folder: the default file name inside it
        out = (out or Path(".")) / default_result_path(result["label"])
    path = save_result(result, out)
    print(summary_text(result))
    print(f"\nsaved {path}  (compare machines: course report-card {path} OTHER.json ...)")
    return 0


def _report_card(args: argparse.Namespace) -> int:
    from .report_card import write_report_card

    card = write_report_card(args.results, args.out)
    print(f"compared {len(card.results)} result(s); wrote {card.png} and {card.html}")
    return 0


def _run_file(args: argparse.Namespace) -> int:
    from .files import write_atomic
    from .runs.runfile import kind_of, run_from_notebook, summary

    run = run_from_notebook(args.notebook, args.label)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{run['lesson']}-{_slug(run['label'] or kind_of(run['machine']))}-{run['date']}.json"
    path = write_atomic(folder / name, json.dumps(run, indent=1, sort_keys=True) + "\n")
    print(f"{summary(run)}\nsaved {path}  (a class page: course class {folder} --out class-page)")
    return 0


def _class(args: argparse.Namespace) -> int:
    from .classpage import write_class_page

    page = write_class_page(args.folder, args.out)
    print(page.text())
    if not page.reading.runs:
        print(f"course class: no usable run file in {args.folder}; the page says so", file=sys.stderr)
        return 1
    return 0


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "run"


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
    from .benchmark.settings import MLPERF_DIFFERENCES

    bench = sub.add_parser(
        "benchmark",
        help="an MLPerf-style benchmark of this machine, saved as JSON",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Time to 95 % held-out accuracy on the digits, throughput, latency, matmul, memory copy and "
        "all-reduce, in 5 fresh processes run one after the other. Each starts with a cold "
        "time-to-accuracy run from its own seed; a figure is the mean of the 5 processes' figures "
        "without the best and the worst, and its coefficient of variation over the processes is "
        "printed, flagged above 5 %.",
        epilog="Differences from the MLPerf Training rules (Mattson et al. 2020, MLSys), and why:\n"
        + "\n".join(f"  - {text}" for text in MLPERF_DIFFERENCES),
    )
    bench.add_argument(
        "--quick", action="store_true", help="1 short round per process (~15-30 s) instead of 6 (~1-3 min)"
    )
    bench.add_argument(
        "--processes",
        type=int,
        default=None,
        help="fresh processes (default 5, as MLPerf's 5 runs; the CV needs 2 or more)",
    )
    bench.add_argument("--label", default=None, help="a name for this machine (default: platform and CPU, or the GPU)")
    bench.add_argument(
        "--out",
        default=None,
        help="where to save the result: a file, or a folder to save "
        "benchmark-<label>-<date>.json in (default: that name in the current folder)",
    )
    bench.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default 1: the figures then repeat, also with a core busy; the "
        "matmul on every core is shown as well)",
    )
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.set_defaults(func=_benchmark)
    rf = sub.add_parser("run-file", help="a lesson notebook saved with its outputs, as one run file (JSON)")
    rf.add_argument("notebook", help="a lesson notebook (.ipynb) saved after running its cells")
    rf.add_argument("--label", default=None, help="a name for this run on a class page (at most 60 characters)")
    rf.add_argument("--out", default="course-runs", help="folder to write the run file in (default ./course-runs)")
    rf.set_defaults(func=_run_file)
    cls = sub.add_parser("class", help="merge a folder of learners' run files into one offline HTML page")
    cls.add_argument("folder", help="the folder that holds the run files (.json, or notebooks saved with outputs)")
    cls.add_argument("--out", default="class-page", help="folder for index.html (default ./class-page)")
    cls.set_defaults(func=_class)
    card = sub.add_parser("report-card", help="compare saved benchmark results (PNG and HTML)")
    card.add_argument("results", nargs="+", help="result files written by `course benchmark` (or folders of them)")
    card.add_argument("--out", default="report-card", help="folder for the PNG and HTML (default ./report-card)")
    card.set_defaults(func=_report_card)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"course {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        saved = "; nothing was saved" if args.command == "benchmark" else ""
        print(f"course {args.command}: interrupted{saved}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
