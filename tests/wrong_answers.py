"""Shared machinery of the exercise tests (test_exercise_NN.py): run a solution notebook, then each
plausible wrong answer followed by its check cell, and collect what each check said. This is the one run of
such a solution in a test run (conftest.py does not collect it again): its executed copy, the solution's
cells alone, is written to build/executed/ for the website.

A check cell is a code cell tagged "check" that calls ``checks.check_function(<function>, ...)`` (or
``check_resume``, ``check_hardware_choice``, ``check_option_numbers``, ``check_prediction``, ``check_largest``), or
``checks.check("<key>", <function>)`` (exercises 01-03, whose checks live in ``course_lib.checks.registry``).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import nbrun  # noqa: E402


def function_name(source: str) -> str:
    return re.search(r"^def (\w+)\(", source, re.M).group(1)


CHECK_CALL = re.compile(
    r"check_(?:function|resume|hardware_choice|option_numbers|prediction|largest)\(\s*(\w+)"
    r"|checks\.check\(\s*[\"'][^\"']+[\"'],\s*(\w+)"
)


def checked_function(source: str) -> str:
    """The name of the learner's function that a check cell checks."""
    found = CHECK_CALL.search(source)
    return found.group(1) or found.group(2)


def run_wrong_answers(
    solution: Path, wrong: Sequence[tuple[str, str, str | None]], checked_through: Mapping[str, str] | None = None
) -> dict:
    """{mistake: the outputs of its check cell} for each (mistake, wrong code, message) in ``wrong``.
    ``checked_through`` maps a function the learner writes to the function its check cell calls,
    where the check goes through a wrapper."""
    nb = nbrun.clean(nbformat.read(solution, as_version=4))
    cells = [c for c in nb.cells if c.cell_type == "code"]
    checks = {checked_function(c.source): c.source for c in cells if "check" in c.metadata.get("tags", [])}
    for written, wrapper in (checked_through or {}).items():
        checks[written] = checks.pop(wrapper)
    run = list(nb.cells)
    n_solution = len(run)
    positions = {}
    for mistake, code, _ in wrong:
        run.append(new_code_cell(code))
        positions[mistake] = len(run)
        run.append(new_code_cell(checks[function_name(code)]))
    nb.cells = run
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(solution.parent)}},
    ).execute(env=nbrun.kernel_env())
    outputs = {mistake: nb.cells[i].outputs for mistake, i in positions.items()}
    nb.cells = nb.cells[:n_solution]
    nbrun.finish(nb, solution, time.perf_counter() - start)
    solution_errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not solution_errors, f"the solution itself failed: {solution_errors[0].evalue}"
    return outputs


def assert_check_failed(outputs, mistake: str, message: str | None) -> None:
    """The check raised CheckFailed with a hint, and the explanation ``message`` where one is expected."""
    errors = [o for o in outputs if o.output_type == "error"]
    assert errors, f"the check passed a wrong answer ({mistake})"
    assert errors[0].ename == "CheckFailed", f"{errors[0].ename}: {errors[0].evalue}"
    assert "Hint:" in errors[0].evalue
    if message:
        assert message in errors[0].evalue, errors[0].evalue


def wrong_answer_tests(
    solution: Path, wrong: Sequence[tuple[str, str, str | None]], checked_through: Mapping[str, str] | None = None
):
    """The module fixture and the parametrized test an exercise test file needs:
    ``wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(SOLUTION, WRONG)``."""
    import pytest

    @pytest.fixture(scope="module")
    def wrong_runs():
        return run_wrong_answers(solution, wrong, checked_through)

    @pytest.mark.slow
    @pytest.mark.parametrize("mistake, code, message", wrong, ids=[w[0] for w in wrong])
    def test_plausible_wrong_answer_fails_its_check(wrong_runs, mistake, code, message):
        assert_check_failed(wrong_runs[mistake], mistake, message)

    return wrong_runs, test_plausible_wrong_answer_fails_its_check


def solution_code(solution: Path, name: str) -> str:
    """The solution's code of the learner's function ``name``, without the solution markers and hints: the right
    answer that a wrong answer of a function calling it restores (all wrong answers run in one kernel)."""
    nb = nbformat.read(solution, as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and re.search(rf"^def {name}\(", c.source, re.M))
    src = src[re.search(rf"^def {name}\(", src, re.M).start() :]
    return "\n".join(line for line in src.splitlines() if not re.match(r"\s*# (BEGIN|END) SOLUTION|\s*# HINT:", line))
