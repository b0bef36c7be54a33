"""Execute the course's notebooks into executed copies under build/executed/, never into the sources.

The notebooks in notebooks/, solutions/ and exercises/ are stored without outputs, so a learner who
opens one sees no answer before guessing. Executing one here (the test run, `bootstrap.py timings`,
the website build) writes an executed copy to ``build/executed/<folder>/<name>.ipynb`` whose metadata
``course_run`` says where its outputs were made (machine, accelerator, torch, date), how long it took,
and which claims it judged (read from the ``course_lib.claims`` outputs) and how many held.

The test run executes each notebook cell by cell as pytest items (``NotebookFile``), through nbclient, so
a failing cell fails its own test and the executed copy, widget state included, comes from that same run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = ROOT / "build" / "executed"
CELL_TIMEOUT_S = 600
CLAIM_MIME = "application/vnd.course.claim+json"
VALUE_MIME = "application/vnd.course.value+json"  # a keyed value, guess or claim (course_lib.record)
RUN_MIME = "application/vnd.course.run+json"  # a lesson's run file, shown by its last cell (course_lib.runs.save)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
# a tqdm bar in a notebook is a widget; its text is the bar as first drawn ("0/12"), which a page would show
# forever. The bar is only feedback while the cell runs, so the executed copy does not keep it.
PROGRESS_BAR = re.compile(r"\|\s*\d+/\d+ \[")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


# The kernel the notebooks run in: the test run's own environment's, or (COURSE_KERNEL, with COURSE_KERNEL_ENV its
# environment) another's, such as the plain install `bootstrap.py test --plain` builds.
KERNEL_NAME = os.environ.get("COURSE_KERNEL", "python3")


def kernel_env() -> dict:
    """The environment a notebook kernel starts with: this process's, less MPLBACKEND (the test run sets Agg for
    itself; a kernel left with it would draw no inline figures, and the executed copy would hold no plots). A kernel
    of another environment (COURSE_KERNEL_ENV) gets that environment's programs first on PATH.

    The executed copies are made with the answers revealed (``COURSE_REVEAL=1``: no learner is there to guess, and the
    website shows each answer, saying so in the cell), and a lesson's last cell writes its run file under
    build/runs/, never beside the notebook."""
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.setdefault("COURSE_REVEAL", "1")
    env.setdefault("COURSE_RUNS_DIR", str(ROOT / "build" / "runs"))
    other = os.environ.get("COURSE_KERNEL_ENV")
    if other:
        bin_dir = Path(other) / ("Scripts" if os.name == "nt" else "bin")
        env.update(VIRTUAL_ENV=other, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    return env


def code_hash(nb: nbformat.NotebookNode) -> str:
    """Hash of the code cells after the set-up cell: a recorded run time or an executed copy goes stale when the
    code changes. The set-up cell (written by tools/course_address.py) installs nothing where the course is
    installed, so a new address or release does not make every run stale."""
    code = "\n# ---\n".join(c.source for c in nb.cells if c.cell_type == "code" and not _is_setup_cell(c))
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def _is_setup_cell(cell) -> bool:
    return cell.source.startswith("# @title Set-up: installs the course helpers")


def executed_path(source: Path, root: Path = EXECUTED) -> Path:
    """Where the executed copy of ``source`` (``<folder>/<name>.ipynb``, e.g. notebooks/02_memory.ipynb) lives."""
    source = Path(source).resolve()
    return root / source.parent.name / source.name


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook as stored: no outputs, no execution counts or timestamps, no saved widget state."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.get("metadata", {}).pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def has_outputs(nb: nbformat.NotebookNode) -> bool:
    """Whether any cell keeps what a run leaves: outputs, an execution count or the kernel's timestamps."""
    return any(
        c.get("outputs") or c.get("execution_count") is not None or "execution" in c.get("metadata", {})
        for c in nb.cells
    )


def is_progress_bar(output: dict) -> bool:
    """A tqdm progress bar (widget or text) among a cell's outputs."""
    data = output.get("data", {})
    text = data.get("text/plain", "") if output.get("output_type") == "display_data" else ""
    return bool(PROGRESS_BAR.search(text if isinstance(text, str) else "".join(text)))


def keep_shown_widgets(nb: nbformat.NotebookNode) -> None:
    """Keep only the saved state of widgets an output still shows (and the models they refer to): the
    website draws widgets from it, and the progress bars' state would only bloat the copy."""
    saved = nb.metadata.get("widgets", {}).get(WIDGET_STATE)
    if not saved:
        return
    state = saved.get("state", {})
    todo = [
        o["data"][WIDGET_VIEW]["model_id"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if WIDGET_VIEW in o.get("data", {})
    ]
    keep: set[str] = set()
    while todo:
        model_id = todo.pop()
        if model_id in keep or model_id not in state:
            continue
        keep.add(model_id)
        refs = json.dumps(state[model_id].get("state", {}))
        todo += re.findall(r"IPY_MODEL_([0-9a-f]+)", refs)
    if keep:
        saved["state"] = {k: v for k, v in state.items() if k in keep}
    else:
        del nb.metadata["widgets"]


def claims(nb: nbformat.NotebookNode) -> list[dict]:
    """Every claim an executed notebook judged, in order, each with the index of its cell."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {}).get(CLAIM_MIME)
            if data:
                found.append(dict(data, cell=index))
    return found


def errors(nb: nbformat.NotebookNode) -> list[str]:
    """One line per error output of an executed notebook: cell index, exception and message."""
    return [
        f"cell {i}: {o.get('ename')}: {ANSI.sub('', str(o.get('evalue', '')))[:300]}"
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]


_MACHINE: dict | None = None


def machine() -> dict:
    """Where the outputs are made: CPU, cores, accelerator, torch and the date (asked once per process)."""
    global _MACHINE
    if _MACHINE is None:
        import psutil

        from course_lib.hardware import detect
        from course_lib.runs.runfile import HOLDS  # the settings that hold kernels below the CPU: one list

        info = detect()
        accelerators = [a.name for a in info.accelerators]
        _MACHINE = {
            "cpu": info.cpu.model,
            "cores": psutil.cpu_count(logical=False) or 1,
            "accelerator": ", ".join(accelerators) or "none",
            "torch": info.torch_version,
            "held": {k: os.environ[k] for k in HOLDS if os.environ.get(k)},
        }
    return dict(_MACHINE, date=dt.date.today().isoformat())


def describe(run: dict) -> str:
    """One line for a machine: 'AMD EPYC, 2 cores, torch 2.13.0+cpu' (and the accelerator, if any)."""
    gpu = f", {run['accelerator']}" if run.get("accelerator", "none") != "none" else ""
    held = ", ".join(f"{k}={v}" for k, v in (run.get("held") or {}).items())
    return f"{run['cpu']}, {run['cores']} cores{gpu}, torch {run['torch']}" + (f" (held: {held})" if held else "")


def provenance(run: dict) -> str:
    """Where and when an executed copy's outputs were made, and how its claims fared, as the website's pages and the
    slide decks say it: 'AMD EPYC, 2 cores, torch 2.13.0+cpu (accelerator: none), on 2026-12-01, in 26 s; 5 of its
    5 claims held there'."""
    held = (
        f"{run['claims_held']} of its {run['claims']} claims held there"
        if run["claims"]
        else "every check in it passed there"
    )
    return f"{describe(run)} (accelerator: {run['accelerator']}), on {run['date']}, in {run['seconds']:.0f} s; {held}"


def finish(nb: nbformat.NotebookNode, source: Path, seconds: float, out_root: Path = EXECUTED) -> Path:
    """Tidy an executed notebook, record where and how it ran in ``metadata.course_run``, write the copy."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not is_progress_bar(o)]
    keep_shown_widgets(nb)
    judged = claims(nb)
    nb.metadata["course_run"] = dict(
        machine(),
        seconds=round(seconds, 1),
        code_hash=code_hash(nb),
        claims=len(judged),
        claims_held=sum(bool(c["held"]) for c in judged),
        errors=errors(nb),
    )
    target = executed_path(source, out_root)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    tmp.replace(target)
    return target


def execute(source: Path, out_root: Path = EXECUTED, allow_errors: bool = False) -> tuple[Path, float]:
    """Execute ``source`` from a clean copy in a fresh kernel; write its executed copy; return (copy, seconds).
    Raises nbclient's CellExecutionError on the first failing cell unless ``allow_errors``."""
    nb = clean(nbformat.read(source, as_version=4))
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(Path(source).resolve().parent)}},
    )
    start = time.perf_counter()
    try:
        client.execute(env=kernel_env())
    finally:
        seconds = time.perf_counter() - start
        finish(nb, source, seconds, out_root)
    return executed_path(source, out_root), seconds


def load_executed(source: Path, out_root: Path = EXECUTED) -> nbformat.NotebookNode | None:
    """The executed copy of ``source`` if there is one made from the notebook's current code, else None."""
    path = executed_path(source, out_root)
    if not path.exists():
        return None
    nb = nbformat.read(path, as_version=4)
    fresh = code_hash(nbformat.read(source, as_version=4))
    return nb if nb.metadata.get("course_run", {}).get("code_hash") == fresh else None


# --- the test run: each code cell a pytest item, one kernel per notebook ---------------------------------

try:
    import pytest
except ImportError:  # the executor is usable without pytest (bootstrap.py site on a plain install)
    pytest = None

if pytest is not None:

    class NotebookFile(pytest.File):
        """A notebook under test: one kernel, its code cells run in order, then its executed copy written."""

        def collect(self):
            self.nb = clean(nbformat.read(self.path, as_version=4))
            number = 0
            for index, cell in enumerate(self.nb.cells):
                if cell.cell_type == "code":
                    yield NotebookCell.from_parent(self, name=f"Cell {number}", index=index, cell=cell)
                    number += 1

        def setup(self):
            self.client = NotebookClient(
                self.nb,
                timeout=CELL_TIMEOUT_S,
                kernel_name=KERNEL_NAME,
                resources={"metadata": {"path": str(self.path.parent)}},
            )
            self.client.reset_execution_trackers()
            self._kernel = contextlib.ExitStack()
            self._kernel.enter_context(self.client.setup_kernel(env=kernel_env()))
            self.dead = None
            self.start = time.perf_counter()

        def teardown(self):
            seconds = time.perf_counter() - self.start
            try:
                self.client.set_widgets_metadata()
            finally:
                self._kernel.close()
                finish(self.nb, self.path, seconds)

    class NotebookCell(pytest.Item):
        """One code cell, run in its notebook's kernel; it fails on an error output (a failed claim too)."""

        def __init__(self, *, index: int, cell, **kwargs):
            super().__init__(**kwargs)
            self.index, self.cell = index, cell

        def runtest(self):
            parent = self.parent
            if parent.dead:
                pytest.skip(f"the kernel died in an earlier cell: {parent.dead}")
            try:
                parent.client.execute_cell(self.cell, self.index, execution_count=parent.client.code_cells_executed + 1)
            except DeadKernelError as exc:
                parent.dead = str(exc) or "DeadKernelError"
                raise

        def repr_failure(self, excinfo, style=None):
            if isinstance(excinfo.value, CellExecutionError):
                return f"{self.path.name}, code cell {self.name[5:]}:\n{ANSI.sub('', str(excinfo.value))}"
            return super().repr_failure(excinfo, style)

        def reportinfo(self):
            return self.path, None, f"{self.path.name}::{self.name}"
