"""Exercises are generated from solutions; every untouched stub fails its check politely."""
from __future__ import annotations

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


@pytest.mark.slow
@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_untouched_exercise_fails_every_check_with_a_helpful_message(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    checks = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert checks, "each exercise has check cells tagged 'check'"
    for cell in checks:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert errors, f"an untouched stub passed its check:\n{cell.source[:200]}"
        assert errors[0].ename == "ExerciseNotDone", f"expected ExerciseNotDone, got {errors[0].ename}: {errors[0].evalue}"
        assert "not written yet" in errors[0].evalue and "Hint:" in errors[0].evalue
    defining = [c for c in nb.cells if c.cell_type == "code" and "check" not in c.metadata.get("tags", [])]
    for cell in defining:
        if "NotImplementedError" in cell.source:  # defining a stub function must not itself fail
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source[:200]
