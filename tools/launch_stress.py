"""Stress the local launcher (course_lib.comm.launch): launches whose ranks start worker
processes, and Ctrl-C at random moments of start-up and of the run.

A benchmark command, not a test (about two minutes on 2 cores)::

    python tools/launch_stress.py                       # 30 launches, 10 + 10 interrupts
    python tools/launch_stress.py --runs 10 --interrupts 3

1. ``--runs`` launches of ``demo_dataloader_sum`` on 2 ranks, each rank iterating a DataLoader with 2
   worker processes: every result must be right, and afterwards no child, grandchild (the workers)
   or port may be left.
2. ``--interrupts`` runs of a fresh interpreter (``tests/interrupt_me.py launch``) sent SIGINT at a
   random moment while its first launch is still starting up (the forkserver imports torch, 2-4 s).
3. ``--interrupts`` runs sent SIGINT while the job runs: rank 1 keeps two DataLoader workers alive
   (``demo_workers_then_hang``), so the interrupt must stop grandchildren too.

After each interrupt: the time from SIGINT to the script's report and to its exit, whether every
process it had started (seen with psutil just before the signal, plus the worker pids the rank
wrote) is gone, and whether the job's store port is free. Exit code 1 if anything was wrong.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from course_lib import comm as d
from course_lib.procs import is_running, leftover_processes

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "interrupt_me.py"


def launches(n: int) -> list[str]:
    failures = []
    for i in range(n):
        t0 = time.perf_counter()
        try:
            out = d.launch(d.demo_dataloader_sum, 2, n=256, num_workers=2)
            ok = [o["total"] for o in out] == [2 * sum(range(256))] * 2
            workers = [pid for o in out for pid in o["worker_pids"]]
            what = "" if ok else f"wrong result {out}"
        except Exception as exc:  # noqa: BLE001 - any exception is a failure to report
            ok, workers, what = False, [], f"{type(exc).__name__}: {str(exc)[:300]}"
        left = leftover_processes() + [pid for pid in workers if is_running(pid)]
        port = d.last_launch_stats()["port"]
        busy = not d.port_is_free(port)
        if left or busy:
            ok, what = False, f"{what} left {left} port {port} busy={busy}"
        print(f"launch {i:2d}: {time.perf_counter() - t0:5.2f} s {'ok' if ok else 'FAILED ' + what}", flush=True)
        if not ok:
            failures.append(f"launch {i}: {what}")
    return failures


def interrupt(mode: str, rng: random.Random) -> tuple[bool, str, float, float]:
    """One fresh script interrupted during start-up or during the run; (ok, what, to report, to exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        pid_file = os.path.join(tmp, "pids")
        args = ["launch"] if mode == "startup" else ["launch-workers", pid_file]
        script = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args], stdout=subprocess.PIPE, text=True, cwd=ROOT / "tests"
        )
        try:
            if script.stdout.readline().strip() != "ready":
                return False, "the script did not start", 0.0, 0.0
            if mode == "startup":
                time.sleep(rng.uniform(0.05, 2.0))  # the forkserver is still importing torch
                grandchildren: list[int] = []
            else:
                deadline = time.monotonic() + 60
                while not os.path.exists(pid_file) and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(rng.uniform(0.0, 1.0))
                grandchildren = [int(p) for p in Path(pid_file).read_text().split()]
            seen = [p.pid for p in psutil.Process(script.pid).children(recursive=True)] + grandchildren
            t_signal = time.perf_counter()
            script.send_signal(signal.SIGINT)
            line = script.stdout.readline().strip()
            t_report = time.perf_counter()
            script.wait(timeout=60)
            t_exit = time.perf_counter()
        finally:
            if script.poll() is None:
                script.kill()
    parts = line.split()
    if len(parts) != 4 or parts[0] != "interrupted":
        return False, f"unexpected report {line!r}", 0.0, 0.0
    phase, port = parts[2], int(parts[3]) if parts[3] != "None" else None
    time.sleep(0.2)
    left = [pid for pid in seen if is_running(pid)]
    busy = port is not None and not d.port_is_free(port)
    ok = phase == mode and not left and not busy
    what = f"phase {phase}, {len(seen)} processes seen, left {left}, port busy={busy}"
    return ok, what, t_report - t_signal, t_exit - t_signal


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--interrupts", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    t_all = time.perf_counter()
    failures = launches(args.runs)
    stops: dict[str, list[float]] = {"startup": [], "run": []}
    exits: dict[str, list[float]] = {"startup": [], "run": []}
    for mode in ("startup", "run"):
        for i in range(args.interrupts):
            ok, what, to_report, to_exit = interrupt(mode, rng)
            stops[mode].append(to_report)
            exits[mode].append(to_exit)
            print(
                f"interrupt during {mode:7s} {i:2d}: stopped in {to_report:5.2f} s, exited in {to_exit:5.2f} s "
                f"{'ok' if ok else 'FAILED'} ({what})",
                flush=True,
            )
            if not ok:
                failures.append(f"interrupt during {mode} {i}: {what}")
    print()
    print(
        f"{args.runs} launches with DataLoader workers in every rank, {args.interrupts} interrupts during "
        f"start-up, {args.interrupts} during the run: {time.perf_counter() - t_all:.0f} s"
    )
    for mode in stops:
        if stops[mode]:
            print(
                f"  Ctrl-C during {mode}: job stopped in median {statistics.median(stops[mode]):.2f} s, "
                f"max {max(stops[mode]):.2f} s; script exited in max {max(exits[mode]):.2f} s"
            )
    print(f"leftover processes now: {len(leftover_processes())}; failures: {len(failures)}")
    for f in failures:
        print("  " + f)
    return 1 if failures or leftover_processes() else 0


if __name__ == "__main__":
    sys.exit(main())
