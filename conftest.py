"""Shared test configuration: report how long each notebook took under nbval."""
from __future__ import annotations

import collections
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # unit tests never open windows

_NOTEBOOK_SECONDS: dict[str, float] = collections.defaultdict(float)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _NOTEBOOK_SECONDS[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _NOTEBOOK_SECONDS:
        return
    terminalreporter.section("notebook run times (this run, budget 90 s each on a 2-core CPU)")
    for path, seconds in sorted(_NOTEBOOK_SECONDS.items()):
        terminalreporter.write_line(f"{path:<45}{seconds:8.1f} s")


ROOT = Path(__file__).resolve().parent
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_sessionstart(session):
    """Run the tests the way the notebooks run: PyTorch on the free physical cores, other thread
    pools limited (course_lib.cpu.profile), so a busy core does not make every timing crawl."""
    from course_lib import cpu

    cpu.profile()


def pytest_collection_modifyitems(session, config, items):
    """Browser tests (the website check, widgets in JupyterLab) run last, after the notebook tests,
    so a notebook failure shows first and a slow browser start-up never hides it."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
