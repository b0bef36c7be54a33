"""Exercises are generated from solutions; every untouched stub fails its check politely."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import make_exercises  # noqa: E402

EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def test_exercises_are_in_sync_with_solutions():
    assert make_exercises.main(["--check"]) == 0, "run `python3 bootstrap.py exercises`"
    assert {p.name for p in EXERCISES} == {p.name for p in (ROOT / "solutions").glob("*.ipynb")}


def test_stub_source_replaces_blocks_and_keeps_hints():
    src = "def f(x):\n    # BEGIN SOLUTION\n    # HINT: double it\n    return 2 * x\n    # END SOLUTION\n\nprint(1)"
    out = make_exercises.stub_source(src)
    assert "return 2 * x" not in out and "    # HINT: double it" in out
    assert "    raise NotImplementedError('Exercise: write your code here. Hint: double it')" in out
    assert out.endswith("print(1)")


@pytest.mark.parametrize("bad", ["# BEGIN SOLUTION\nx = 1", "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION"])
def test_stub_source_rejects_broken_markers(bad):
    with pytest.raises(ValueError):
        make_exercises.stub_source(bad)


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_exercise_has_no_solution_left(path):
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "BEGIN SOLUTION" not in code and "NotImplementedError" in code
    assert all(not c.outputs for c in nb.cells if c.cell_type == "code"), "exercises are stored without outputs"


def solution_lines(nb: nbformat.NotebookNode, shortest: int = 12) -> list[str]:
    """The code lines inside a notebook's solution blocks, stripped of indentation and trailing comments; comment
    lines, HINT lines and lines under ``shortest`` characters (``return m``, ``else:``) give nothing away."""
    lines, inside = [], False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            if make_exercises.BEGIN.match(line) or make_exercises.END.match(line):
                inside = bool(make_exercises.BEGIN.match(line))
                continue
            code = re.sub(r"\s+#\s.*$", "", line).strip()
            if inside and not code.startswith("#") and len(code) >= shortest:
                lines.append(code)
    return lines


def test_solution_lines_are_the_code_of_the_blocks():
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "def f(rows, m):\n    # BEGIN SOLUTION\n    # HINT: a nudge\n"
                "    r = min(rows, m)  # a comment\n    return m\n"
                "    # END SOLUTION\n\nprint('outside the block')"
            )
        ]
    )
    assert solution_lines(nb) == ["r = min(rows, m)"]


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_no_solution_line_appears_in_the_exercise(path):
    """A line of a solution block must not reappear anywhere in the exercise: not in the scaffold code around a
    stub, not in a problem statement (exercise 04 once defined PowerSGD's rank with the solution's own line)."""
    exercise = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in exercise.cells)
    leaked = [
        line for line in solution_lines(nbformat.read(ROOT / "solutions" / path.name, as_version=4)) if line in text
    ]
    assert not leaked, f"{path.name} shows lines of its solution: {leaked}"


@pytest.mark.slow
@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_untouched_exercise_fails_every_check_with_a_helpful_message(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    checks = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert checks, "each exercise has check cells tagged 'check'"
    for cell in checks:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert errors, f"an untouched stub passed its check:\n{cell.source[:200]}"
        assert errors[0].ename == "ExerciseNotDone", (
            f"expected ExerciseNotDone, got {errors[0].ename}: {errors[0].evalue}"
        )
        assert "not written yet" in errors[0].evalue and "Hint:" in errors[0].evalue
    defining = [c for c in nb.cells if c.cell_type == "code" and "check" not in c.metadata.get("tags", [])]
    for cell in defining:
        if "NotImplementedError" in cell.source:  # defining a stub function must not itself fail
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source[:200]
