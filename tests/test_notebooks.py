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
from run_notebooks import BUDGET_S, code_hash  # noqa: E402

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
