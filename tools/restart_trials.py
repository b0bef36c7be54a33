"""Kill a worker of a torchrun job and let the elastic agent restart it, many times (notebook 06.4's claim).

A benchmark command, not a test (about 15-40 s a trial on 2 cores: every worker start imports torch)::

    python tools/restart_trials.py                         # 20 trials, appended to <tmp>/restart_trials.jsonl
    python tools/restart_trials.py --trials 5 --first 5    # trials 5-9 (run it in pieces, e.g. under flock)
    python tools/restart_trials.py --report                # summarise the results file only

Each trial runs ``torchrun --standalone --nproc-per-node=2 --max-restarts=2 -m course_lib.parallel.train_script``
(through ``tl.run_torchrun``: the agent is a child of this process, stopped with everything it started
whatever happens) and sends SIGKILL to one worker, rank 0 or 1 chosen at random, after a random step. Rank 0
writes the checkpoints, so its kills may land in the middle of a write. A trial succeeds when the job ends
with exit code 0 after exactly one restart, its loss curve equals the one-process run's (relative 1e-5), and no
process is left behind. A trial still running after ``--timeout`` seconds is a hang: it is stopped and counted.
Exit code 1 unless every trial of this invocation succeeded.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from course_lib import seeds
from course_lib.parallel import torchrun_launch as tl
from course_lib.parallel import train_script as ts
from course_lib.procs import leftover_processes

STEPS, EVERY = 30, 5


def _trial(index: int, seed: int, data: Path, reference: list[float], root: Path, timeout: float) -> dict:
    rng = random.Random(seeds.derive(seed, "trial", index))
    rank, step = rng.choice([0, 1]), rng.randint(2, STEPS - 6)
    args = ["--data", str(data), "--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--step-delay", "0.05"]
    row: dict = {"trial": index, "kill_rank": rank, "kill_after_step": step, "time": time.time()}
    t0 = time.monotonic()
    try:
        result = tl.run_torchrun(
            args,
            root / f"trial{index}",
            nproc_per_node=2,
            max_restarts=2,
            kill_rank=rank,
            kill_after_step=step,
            timeout=timeout,
        )
        summary = tl.restart_summary(result)
        gap = max(abs(a - b) for a, b in zip(result.curve, reference))
        row.update(
            outcome="ok",
            attempts=result.attempts,
            gap=gap,
            curve_len=len(result.curve),
            bitwise=result.curve == reference,
            **{k: summary[k] for k in summary},
        )
        problems = []
        if result.attempts != 2:
            problems.append(f"{result.attempts} attempts")
        if len(result.curve) != STEPS or gap > 1e-5 * max(reference):
            problems.append(f"curve differs (gap {gap:.2e}, {len(result.curve)} steps)")
        if problems:
            row.update(outcome="wrong", problems=problems)
    except TimeoutError as exc:
        row.update(outcome="hang", error=str(exc)[-2000:])
    except Exception as exc:  # noqa: BLE001 - every failure is a result to report
        row.update(outcome="error", error="".join(traceback.format_exception_only(type(exc), exc))[-2000:])
    row["seconds"] = time.monotonic() - t0
    left = leftover_processes()
    row["leftover"] = [p.pid for p in left]
    if left and row["outcome"] == "ok":
        row["outcome"] = "wrong"
        row.setdefault("problems", []).append(f"{len(left)} processes left behind")
    return row


def _report(rows: list[dict]) -> str:
    if not rows:
        return "no trials recorded"
    ok = [r for r in rows if r["outcome"] == "ok"]
    lines = [
        f"trials: {len(rows)}; succeeded: {len(ok)}; hangs: {sum(r['outcome'] == 'hang' for r in rows)}; "
        f"errors: {sum(r['outcome'] == 'error' for r in rows)}; "
        f"wrong results: {sum(r['outcome'] == 'wrong' for r in rows)}"
    ]
    if ok:

        def rng(key: str) -> str:
            values = [r[key] for r in ok]
            return f"median {statistics.median(values):.2f} s, range {min(values):.2f}-{max(values):.2f} s"

        lines += [
            f"whole trial       : {rng('seconds')}",
            f"worker start-up   : {rng('startup_s')}",
            f"kill -> new workers (detection, stop, rendezvous): {rng('detect_s')}",
            f"kill -> next step : {rng('restart_s')}",
            f"killed rank 0 / rank 1: {sum(r['kill_rank'] == 0 for r in ok)} / {sum(r['kill_rank'] == 1 for r in ok)}; "
            f"steps redone: {sorted({r['redone'] for r in ok})}; "
            f"curves bit for bit equal to one process: {sum(r['bitwise'] for r in ok)} of {len(ok)}, "
            f"largest gap {max(r['gap'] for r in ok):.1e}",
        ]
    for r in rows:
        if r["outcome"] != "ok":
            lines.append(f"trial {r['trial']}: {r['outcome']}: {r.get('problems') or r.get('error', '')[-400:]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--first", type=int, default=0, help="index of the first trial (to run the 20 in pieces)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=150.0, help="seconds before a trial counts as a hang")
    p.add_argument(
        "--out",
        default=str(Path(tempfile.gettempdir()) / "restart_trials.jsonl"),
        help="results, one JSON line per trial (appended; default in the temporary directory)",
    )
    p.add_argument("--report", action="store_true", help="only summarise --out")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.report:
        print(_report([json.loads(line) for line in out.read_text().splitlines() if line.strip()]))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="restart-trials-") as tmp:
        root = Path(tmp)
        data = ts.prepare_data(root / "data.pt")
        ts.main(
            [
                "--data",
                str(data),
                "--steps",
                str(STEPS),
                "--checkpoint-every",
                str(EVERY),
                "--run-dir",
                str(root / "reference"),
            ]
        )
        reference = tl.loss_curve(root / "reference")
        for i in range(args.first, args.first + args.trials):
            row = _trial(i, args.seed, data, reference, root, args.timeout)
            rows.append(row)
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"trial {i}: {row['outcome']} in {row['seconds']:.1f} s (killed rank {row['kill_rank']} after step "
                f"{row['kill_after_step']}"
                + (f"; restart {row['restart_s']:.1f} s)" if row["outcome"] == "ok" else ")"),
                flush=True,
            )
    print(_report(rows))
    return 0 if all(r["outcome"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
