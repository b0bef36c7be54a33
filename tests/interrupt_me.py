"""Run a job that never ends, then report how a Ctrl-C (SIGINT) ended it (tests and tools/launch_stress.py).

    python interrupt_me.py launch               # 2 ranks; rank 1 sleeps
    python interrupt_me.py launch-workers FILE  # 2 ranks; rank 1 keeps 2 DataLoader workers, writes pids to FILE
    python interrupt_me.py memlimit             # one capped child that sleeps

Prints "ready" once imported, then "interrupted <seconds from start> <phase> <port>" when interrupted,
where phase is "startup" (the ranks had not all joined yet) or "run".
"""

import sys
import time

from course_lib import comm
from course_lib.memory import limit

if __name__ == "__main__":
    print("ready", flush=True)
    t0 = time.perf_counter()
    try:
        if sys.argv[1] == "launch":
            comm.launch(comm.demo_sleep_on_rank, 2, rank_to_sleep=1, seconds=3600, timeout=3600)
        elif sys.argv[1] == "launch-workers":
            comm.launch(comm.demo_workers_then_hang, 2, sys.argv[2], timeout=3600)
        else:
            limit.run_with_memory_limit(time.sleep, 2**28, 3600, timeout=3600)
    except KeyboardInterrupt:
        stats = comm.last_launch_stats()
        phase = "startup" if stats.get("startup_s") is None else "run"
        print(f"interrupted {time.perf_counter() - t0:.3f} {phase} {stats.get('port')}", flush=True)
        sys.exit(0)
    print("finished", flush=True)
