"""Exercise 07 (choosing hardware): each plausible wrong answer below must fail its check cell with a
CheckFailed that carries the fitting explanation (the runner is tests/wrong_answers.py)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from wrong_answers import wrong_answer_tests

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "07_choosing_hardware.ipynb"


def _solution(name: str) -> str:
    """The solution's code of the learner's function ``name``, without the solution markers."""
    nb = nbformat.read(SOLUTION, as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"def {name}("))
    return "\n".join(line for line in src.splitlines() if not re.match(r"\s*# (BEGIN|END) SOLUTION|\s*# HINT:", line))


OPTION, PICK = _solution("option_numbers"), _solution("pick")


def _edit(code: str, old: str, new: str) -> str:
    assert old in code, f"the solution changed: {old!r} is gone"
    code = code.replace(old, new)
    # a wrong pick runs after the wrong option_numbers above in one kernel: give it the right one back
    return code + "\n\n\n" + OPTION if code.startswith("def pick(") else code


# (what the mistake is, the wrong code, a piece of the message the learner must see or None)
WRONG = [
    ("option: no sharding", _edit(OPTION, "[0] if devices == 1 else [0, 1, 2, 3]", "[0]"), "stage 2 also split"),
    ("option: memory in GiB", _edit(OPTION, "/ 1e9\n", "/ 2**30\n"), None),
    ("option: fp32 peak", _edit(OPTION, "dtype=checks.pick_dtype(acc.key)", 'dtype="fp32"'), None),
    ("option: bf16 on a T4", _edit(OPTION, "dtype=checks.pick_dtype(acc.key)", 'dtype="bf16"'), None),
    ("option: renting regulated data", _edit(OPTION, 's["privacy"] == "regulated"', "False"), "buys its cards"),
    (
        "option: highest stage that fits",
        _edit(OPTION, "next((z for z in stages", "next((z for z in reversed(stages)"),
        None,
    ),
    ("option: memory fully used", _edit(OPTION, "checks.PICK_STATES_FRACTION * acc.memory_gb", "acc.memory_gb"), None),
    (
        "option: 80 % exactly does not fit",
        _edit(OPTION, "states[z] <= capacity", "states[z] < capacity"),
        "exactly 80 %",
    ),
    (
        "pick: the fastest",
        _edit(PICK, 'min(feasible, key=lambda o: o["usd"]', 'min(feasible, key=lambda o: o["hours"]'),
        "also meets every constraint",
    ),
    ("pick: deadline ignored", _edit(PICK, 'o["hours"] <= scenario["deadline_hours"]', "True"), "deadline"),
    ("pick: memory ignored", _edit(PICK, 'o["zero_stage"] is not None', "True"), "ZeRO stage fits"),
    ("pick: TPU for a CUDA code base", _edit(PICK, 'a.kind in scenario["kinds"]', "True"), "framework runs on"),
    ("pick: rents regulated data", _edit(PICK, "buyable if buying else ", ""), None),
    (
        "pick: buys only data-centre cards",
        _edit(PICK, "buyable if buying", '{"a100-80gb", "h100-sxm"} if buying'),
        "also meets every constraint",
    ),
    (
        "pick: a budget met exactly is missed",
        _edit(PICK, 'o["usd"] <= scenario["budget_usd"]', 'o["usd"] < scenario["budget_usd"]'),
        "met exactly",
    ),
    (
        "pick: a deadline met exactly is missed",
        _edit(PICK, 'o["hours"] <= scenario["deadline_hours"]', 'o["hours"] < scenario["deadline_hours"]'),
        "met exactly",
    ),
    (
        "option: the checks' own reference",
        "def option_numbers(scenario, hardware, devices):\n"
        "    return checks._hardware_option(scenario, hardware, devices)",
        "calls _hardware_option",
    ),
    (
        "pick: the reference through a helper",
        "def pick(scenario):\n    return best(scenario)\n\n\ndef best(s):\n"
        "    return min(checks._hardware_options(s), key=lambda o: o['usd'])\n\n\n" + OPTION,
        "calls _hardware_options",
    ),
    (
        "option: the reference reached through vars()",
        "def option_numbers(scenario, hardware, devices):\n"
        "    return vars(checks)['_hardware_' + 'option'](scenario, hardware, devices)",
        "called the reference",
    ),
    ("pick: nothing feasible crashes", _edit(PICK, ", default=None)", ")"), "raised ValueError"),
    (
        "pick: the cheapest even when it is not feasible",
        _edit(
            PICK,
            'min(feasible, key=lambda o: o["usd"], default=None)',
            'min(feasible or options, key=lambda o: o["usd"])',
        ),
        "return None",
    ),
    (
        "pick: a bare name",
        _edit(
            PICK,
            'return min(feasible, key=lambda o: o["usd"], default=None)',
            'return min(feasible, key=lambda o: o["usd"])["hardware"]',
        ),
        "must return a dict",
    ),
]

wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(SOLUTION, WRONG)


def test_no_reference_is_within_the_learners_reach():
    """The checks compute the course's numbers inside course_lib: no public callable returns an answer, and no
    visible cell of the exercise calls one."""
    from course_lib import checks

    assert not hasattr(checks, "hardware_option") and not hasattr(checks, "hardware_options")
    exercise = nbformat.read(ROOT / "exercises" / "07_choosing_hardware.ipynb", as_version=4)
    code = "\n".join(c.source for c in exercise.cells if c.cell_type == "code")
    assert "_hardware_option" not in code and "reference" not in code
