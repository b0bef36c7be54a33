"""A module that raises ImportError when a child process imports it (tests of the launchers)."""

import multiprocessing

if multiprocessing.parent_process() is not None:
    raise ImportError("raise_at_import: this module cannot be imported in a child process, on purpose")


def work() -> int:
    return 1
