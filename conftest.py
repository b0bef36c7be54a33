"""Shared test configuration.

- Notebooks (``notebooks/``, ``solutions/``) are collected as one test per code cell, run in one kernel per
  notebook (``tools/nbrun.py``); each run writes the executed copy to ``build/executed/``, which the claim
  tests and the website read. A solution whose exercise has a wrong-answer test (``tests/test_exercise_NN.py``)
  is executed there instead, once.
- ``--fast`` keeps only the unit tests that start no notebook, no browser and no process pool (marked
  ``slow``), and says how many it left out.
- Order: unit tests, notebooks, the tests that read the executed copies, then the browser tests.
"""

from __future__ import annotations

import collections
import os
import signal
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")  # unit tests never open windows

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
os.environ.setdefault("MPLBACKEND", "Agg")

import nbrun  # noqa: E402

_NOTEBOOK_SECONDS: dict[str, float] = collections.defaultdict(float)
_LEFT_OUT: collections.Counter = collections.Counter()


def pytest_configure(config):
    # started from a script in the background, a process inherits SIGINT as ignored: the Ctrl-C tests send SIGINT and
    # rely on Python's KeyboardInterrupt, here and in the interpreters they start, so the suite sets it itself
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.collected_notebooks = set()  # notebooks this session runs: their executed copies must come out fresh
    config.claim_rows = []  # one line per claim judged, filled by tests/test_claims.py


def pytest_addoption(parser):
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the unit tests that start no notebook, browser or process pool (a quick loop)",
    )


def _run_by_wrong_answer_test(path: Path) -> bool:
    return path.parent.name == "solutions" and (ROOT / "tests" / f"test_exercise_{path.name[:2]}.py").exists()


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix == ".ipynb" and file_path.parent.name in ("notebooks", "solutions"):
        if _run_by_wrong_answer_test(file_path):
            return None
        parent.config.collected_notebooks.add(file_path.resolve())
        return nbrun.NotebookFile.from_parent(parent, path=file_path)
    return None


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _NOTEBOOK_SECONDS[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    rows = terminalreporter.config.claim_rows
    if rows:
        terminalreporter.section(f"claims judged by the lesson notebooks ({len(rows)})")
        for row in rows:
            terminalreporter.write_line(row)
    if _LEFT_OUT:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(_LEFT_OUT.items()))
        terminalreporter.section("fast tier")
        terminalreporter.write_line(
            f"left out {sum(_LEFT_OUT.values())} slow tests ({kinds}); `python3 bootstrap.py test` runs everything"
        )
    if not _NOTEBOOK_SECONDS:
        return
    terminalreporter.section("notebook run times (this run, budget 90 s each on a 2-core CPU)")
    for path, seconds in sorted(_NOTEBOOK_SECONDS.items()):
        terminalreporter.write_line(f"{path:<45}{seconds:8.1f} s")


def pytest_sessionstart(session):
    """Run the tests the way the notebooks run: PyTorch on the free physical cores, other thread
    pools limited (course_lib.cpu.profile), so a busy core does not make every timing crawl."""
    from course_lib import cpu

    cpu.profile()


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_process(request, monkeypatch):
    """Under --fast, a test that starts a process (a child interpreter, a worker pool, a kernel) fails and says to
    mark it ``slow``: the fast tier's promise is checked, not hoped for."""
    if not request.config.getoption("--fast"):
        yield
        return
    import multiprocessing.process
    import subprocess

    started = []
    popen_init, process_start = subprocess.Popen.__init__, multiprocessing.process.BaseProcess.start

    def popen(self, args, *a, **k):
        started.append(args if isinstance(args, str) else " ".join(map(str, args))[:80])
        return popen_init(self, args, *a, **k)

    def start(self):
        started.append(f"multiprocessing {self.name}")
        return process_start(self)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)
    yield
    if started:
        pytest.fail(f"{request.node.nodeid} started a process ({started[0]}): mark it @pytest.mark.slow", pytrace=False)


def _kind(item) -> str:
    if isinstance(item, nbrun.NotebookCell):
        return "notebook cells"
    if item.get_closest_marker("browser"):
        return "browser tests"
    if item.get_closest_marker("slow"):
        return "slow unit tests"
    return ""


def pytest_collection_modifyitems(session, config, items):
    """--fast drops the slow kinds; the rest run unit tests first, then notebooks, then the tests of what the
    notebooks printed (marker ``executed``), and the browser tests last, so a notebook failure shows first and a
    slow browser start-up never hides it."""
    if config.getoption("--fast"):
        keep = []
        for item in items:
            kind = _kind(item) or ("tests of executed notebooks" if item.get_closest_marker("executed") else "")
            if kind:
                _LEFT_OUT[kind] += 1
            else:
                keep.append(item)
        kept = {id(i) for i in keep}
        if len(keep) != len(items):
            config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
        items[:] = keep

    def order(item) -> int:
        if item.get_closest_marker("browser"):
            return 3
        if item.get_closest_marker("executed"):
            return 2
        return 1 if isinstance(item, nbrun.NotebookCell) else 0

    items.sort(key=order)
