"""A module that kills the process importing it, except in the test process itself (tests of
course_lib.procs, memory.limit and comm: a child that crashes while importing its function)."""

import multiprocessing
import os
import sys

if multiprocessing.parent_process() is not None:  # imported in a child process
    sys.stderr.write("crash_at_import: dying while being imported, on purpose\n")
    sys.stderr.flush()
    os._exit(7)


def work() -> int:
    return 1
