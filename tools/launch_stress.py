"""Stress the local launcher (course_lib.distributed.launch): many launches in a row, some failing.

A benchmark command, not a test (it takes a few minutes on 2 cores)::

    python tools/launch_stress.py            # 50 launches: plain 2-rank jobs, failing ranks, hung ranks
    python tools/launch_stress.py --runs 20 --hang-timeout 2

Each launch is one of three kinds, interleaved (3 plain : 1 raising : 1 hanging):
  plain  - demo_rank_sum on 2 ranks, must return [(0, 2, 3.0), (1, 2, 3.0)];
  raise  - demo_raise_on_rank: rank 1 raises ValueError, must give RankError naming rank 1;
  hang   - demo_sleep_on_rank: rank 1 sleeps, must give LaunchTimeout after --hang-timeout seconds.
After every launch and at the end it checks that no child process is left (multiprocessing's
resource_tracker excepted), and at the end that every store port used can be bound again, both
plainly and with SO_REUSEADDR (what a server such as TCPStore uses). Prints counts, failures and the
median and p90 wall time of a plain 2-rank launch. Exit code 1 if anything was wrong.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


from course_lib import distributed as d
from course_lib.hardware import leftover_children


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one(kind: str, hang_timeout: float) -> tuple[bool, str]:
    if kind == "plain":
        out = d.launch(d.demo_rank_sum, 2)
        return out == [(0, 2, 3.0), (1, 2, 3.0)], f"returned {out!r}"
    if kind == "raise":
        try:
            d.launch(d.demo_raise_on_rank, 2, rank_to_fail=1, error="ValueError", timeout=30)
        except d.RankError as exc:
            return exc.rank == 1 and exc.error_type == "ValueError", f"RankError rank={exc.rank} {exc.error_type}"
        return False, "no RankError"
    try:
        d.launch(d.demo_sleep_on_rank, 2, rank_to_sleep=1, seconds=600, timeout=hang_timeout)
    except d.LaunchTimeout as exc:
        return exc.unfinished == [1] and exc.phase == "run", f"LaunchTimeout {exc.unfinished} {exc.phase}"
    return False, "no LaunchTimeout"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--hang-timeout", type=float, default=2.0)
    args = ap.parse_args(argv)
    pattern = ["plain", "raise", "plain", "hang", "plain"]
    kinds = [pattern[i % len(pattern)] for i in range(args.runs)]
    counts = {k: 0 for k in pattern}
    ok_counts = {k: 0 for k in pattern}
    failures: list[str] = []
    plain_s: list[float] = []
    kind_s: dict[str, list[float]] = {k: [] for k in pattern}
    ports: list[int] = []
    stray_during = 0
    t_all = time.perf_counter()
    for i, kind in enumerate(kinds):
        t0 = time.perf_counter()
        try:
            good, what = one(kind, args.hang_timeout)
        except Exception as exc:  # noqa: BLE001 - a wrong exception is a failure to report
            good, what = False, f"{type(exc).__name__}: {str(exc)[:300]}"
        elapsed = time.perf_counter() - t0
        ports.append(d.last_launch_stats()["port"])
        counts[kind] += 1
        kind_s[kind].append(elapsed)
        if kind == "plain" and good:
            plain_s.append(elapsed)
        strays = leftover_children()
        if strays:
            stray_during += len(strays)
            good, what = False, f"{what}; {len(strays)} stray children: {[p.pid for p in strays]}"
        ok_counts[kind] += good
        if not good:
            failures.append(f"run {i} ({kind}): {what}")
        print(f"run {i:2d} {kind:<5} {elapsed:6.2f} s {'ok' if good else 'FAILED ' + what}", flush=True)
    total = time.perf_counter() - t_all
    strays = leftover_children()
    busy_plain = [p for p in ports if not d.port_is_free(p, reuse=False)]
    busy_reuse = [p for p in ports if not d.port_is_free(p, reuse=True)]
    print()
    print(f"{args.runs} launches in {total:.1f} s")
    for k in counts:
        if counts[k]:
            print(f"  {k:<5}: {ok_counts[k]}/{counts[k]} as expected, wall time median "
                  f"{statistics.median(kind_s[k]):.2f} s")
    if plain_s:
        print(f"plain 2-rank launch wall time: median {statistics.median(plain_s):.2f} s, "
              f"p90 {percentile(plain_s, 0.9):.2f} s (n={len(plain_s)})")
    print(f"stray child processes: {len(strays)} at the end, {stray_during} seen after single launches")
    print(f"store ports still busy: {len(busy_reuse)} of {len(set(ports))} with SO_REUSEADDR, "
          f"{len(busy_plain)} with a plain bind")
    print(f"failures: {len(failures)}")
    for f in failures:
        print("  " + f)
    bad = failures or strays or busy_reuse
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
