"""The stored notebooks: shape, clean outputs, recorded run times within budget.

nbval executes them (see pyproject.toml); these tests check what a reader sees on a code host.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from run_notebooks import BUDGET_S, PROGRESS_BAR, code_hash  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
# the [project.urls] Repository line of pyproject.toml (tomllib is Python 3.11+; the course supports 3.10)
REPO_URL = re.search(r'^Repository\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
REPO = REPO_URL.removeprefix("https://github.com/")


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_there_are_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS][:2] == ["00", "01"]
    assert SOLUTIONS, "every module with an exercise has a solutions/ notebook"


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shape(path):
    nb = _read(path)
    text = _markdown(nb)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "starts with a title"
    assert "Expected run time" in text
    folder = "exercises" if path.parent.name == "solutions" else "notebooks"
    assert f"colab.research.google.com/github/{REPO}/blob/main/{folder}/{path.name}" in text, "Colab badge"
    setup = [c for c in nb.cells if c.cell_type == "code"][0].source
    assert "except ImportError" in setup and f"git+https://github.com/{REPO}" in setup, "setup cell installs course_lib"
    if path.parent.name == "notebooks":
        assert "What you will learn" in text and "Key takeaways" in text
        assert "exercises/" in text, "points to an exercise notebook"
        assert "pick_device()" in "\n".join(c.source for c in nb.cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_section_asserts(path):
    """Notebooks are tests too: each one has assertions and several measured comparisons."""
    code = "\n".join(c.source for c in _read(path).cells if c.cell_type == "code")
    assert len(re.findall(r"^\s*assert ", code, re.M)) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_outputs_are_clean(path):
    nb = _read(path)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code_cells), "notebooks are stored executed (run `python3 bootstrap.py timings`)"
    for c in code_cells:
        for out in c.outputs:
            assert out.output_type != "error", f"stored error output in cell:\n{c.source[:200]}"
            if out.output_type == "stream":
                assert out.name == "stdout", f"stored stderr/warning output: {out.text[:300]}"
            text = out.get("data", {}).get("text/plain", "") if "data" in out else out.get("text", "")
            assert not PROGRESS_BAR.search(text), f"stored progress bar (stuck at its first frame): {text[:200]}"
        src_lines = [line for line in c.source.splitlines() if line.strip()]
        assert len(src_lines) <= 16, f"cell too long ({len(src_lines)} lines); move code to course_lib:\n{c.source[:200]}"


def test_checked_cells_print_no_measurements():
    """Cells compared by nbval must be deterministic: they may not time anything."""
    for path in NOTEBOOKS + SOLUTIONS:
        for c in _read(path).cells:
            if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source:
                for word in ("time_fn(", "compare_interleaved(", "matmul_throughput(", "memory_bandwidth(", "perf_counter("):
                    assert word not in c.source, f"{path.name}: checked cell measures ({word})"


def test_recorded_run_times_are_fresh_and_within_budget():
    table = json.loads((ROOT / "notebooks" / "timings.json").read_text())
    for path in NOTEBOOKS + SOLUTIONS:
        rel = str(path.relative_to(ROOT))
        assert rel in table, f"{rel} has no recorded run time: run `python3 bootstrap.py timings`"
        row = table[rel]
        assert row["code_hash"] == code_hash(_read(path)), f"{rel} changed since its run time was recorded"
        assert row["seconds"] <= BUDGET_S, f"{rel} took {row['seconds']} s, over the {BUDGET_S} s budget"


GUESS = re.compile(r"^(guess_\w+) = None\s+# your prediction", re.M)


def _guesses(nb) -> list[tuple[str, int, int]]:
    """(variable, index of the cell that sets it, index of the cell that scores it) per prediction."""
    out = []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        for name in GUESS.findall(c.source):
            scored = [j for j, d in enumerate(nb.cells) if d.cell_type == "code"
                      and re.search(rf"score_guess\(\s*{name}\b", d.source) and f'name="{name}"' in d.source]
            out.append((name, i, scored[0] if scored else -1))
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_learner_predicts_at_least_three_times(path):
    """Each notebook asks for >= 3 guesses, each set in its own cell before the measurement and scored after it."""
    nb = _read(path)
    guesses = _guesses(nb)
    assert len(guesses) >= 3, f"{path.name}: {len(guesses)} prediction cells, expected at least 3"
    for name, set_at, scored_at in guesses:
        assert scored_at > set_at, f"{path.name}: {name} is never scored by a later checks.score_guess(..., name=...)"
        src = nb.cells[set_at].source
        assert "score_guess" not in src, f"{path.name}: {name} is set and scored in the same cell"
        stored = "".join(o.get("data", {}).get("text/plain", "") for o in nb.cells[scored_at].outputs if "data" in o)
        assert "No guess yet" in stored and f"`{name}`" in stored, (
            f"{path.name}: the stored score of {name} should show the no-guess answer:\n{stored[:300]}")


def test_scoring_with_guesses_filled_in():
    """The other way round: notebook 00 run with every guess filled in scores each one."""
    from nbclient import NotebookClient

    path = ROOT / "notebooks" / "00_setup.ipynb"
    nb = _read(path)
    guesses = _guesses(nb)
    for name, set_at, _ in guesses:
        value = 3.0e-3 if "error" in name else 100.0
        nb.cells[set_at].source = GUESS.sub(lambda m: f"{m.group(1)} = {value}  # your prediction", nb.cells[set_at].source)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    for name, _, scored_at in guesses:
        text = "".join(o.get("data", {}).get("text/plain", "") for o in nb.cells[scored_at].outputs if "data" in o)
        assert f"your guess ({name})" in text and "Verdict:" in text and "No guess yet" not in text, text


RUN_TIME = re.compile(r"\*\*Expected run time:\*\*\s*(?:about\s*)?(\d+)(?:\s*[-–]\s*(\d+))?\s*s\b")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stated_run_times_agree_with_the_recorded_one(path):
    """The notebook's "Expected run time", the README's table and the instructor guide's state one range,
    and it holds the recorded time."""
    rel = str(path.relative_to(ROOT))
    recorded = json.loads((ROOT / "notebooks" / "timings.json").read_text())[rel]["seconds"]
    m = RUN_TIME.search(_markdown(_read(path)))
    assert m, f"{rel}: no '**Expected run time:** N-M s' line"
    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
    assert lo <= recorded <= hi, f"{rel}: states {lo}-{hi} s, recorded {recorded} s: update the line"
    for doc in ("README.md", "docs/instructor-guide.md"):
        row = next((line for line in (ROOT / doc).read_text().splitlines() if f"notebooks/{path.name}" in line
                    and line.startswith("|")), None)
        assert row, f"{doc} has no table row for {path.name}"
        cell = re.search(r"\|\s*~?(\d+)(?:\s*[-–]\s*(\d+))?\s*s\s*\|", row)
        assert cell and (int(cell.group(1)), int(cell.group(2) or cell.group(1))) == (lo, hi), (
            f"{doc} states {cell.group(0) if cell else 'no time'} for {path.name}, the notebook {lo}-{hi} s")


def test_notebook_02_skips_cleanly_where_memory_cannot_be_capped():
    """Notebook 02 as a Mac would run it: the device plan says memory caps are unsupported (macOS), so
    every capped demo prints why it skips and every other cell still runs (nothing depends on a skipped one)."""
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell

    path = ROOT / "notebooks" / "02_memory.ipynb"
    nb = _read(path)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first + 1, new_code_cell(
        "import dataclasses\nfrom course_lib import devices\n_facts = devices.DeviceFacts.here()\n"
        "devices._here = lambda: dataclasses.replace(_facts, system='Darwin', macos=(14, 5))"))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    guarded = [c for c in nb.cells if c.cell_type == "code" and 'device_plan.check("memory_cap")' in c.source]
    outputs = ["".join(o.get("text", "") for o in c.outputs) for c in guarded]
    assert len(guarded) == 7 and all(out.startswith("Skipped: capping a process's memory needs Linux") for out in outputs)
