"""The claims the lesson notebooks judged in this test run, read from their executed copies (build/executed/).

Every check in a lesson goes through ``course_lib.claims.claim``: a measured value, its bound, and the value the
quantity would take if the effect were absent. Here, per notebook: at least three claims, each of which held and
whose no-effect value its bound rejects; the table of all of them is printed at the end of the run. Also the
helper itself (unit tests, no notebook needed)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import nbformat
import pytest

from course_lib import claims as C

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import nbrun  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _executed(path: Path, config) -> nbformat.NotebookNode:
    nb = nbrun.load_executed(path)
    if nb is None:
        ran_here = path.resolve() in getattr(config, "collected_notebooks", set())
        if ran_here:
            pytest.fail(f"{path.name} ran in this session but left no executed copy made from its current code")
        pytest.skip(
            f"no fresh executed copy of {path.name}: run the notebooks first "
            "(`python3 bootstrap.py test notebooks` or `python3 bootstrap.py timings`)"
        )
    return nb


def _inside(x, low, high) -> bool:
    return (low is None or x > low) and (high is None or x < high)


def _row(name: str, c: dict) -> str:
    bound = C.Claim(
        **{k: c[k] for k in ("text", "measured", "low", "high", "no_effect", "no_effect_is", "unit", "held")}
    ).bound()
    return (
        f"{name:<34} {'held' if c['held'] else 'FAILED':<6} measured {C._fmt(c['measured']):>8}{c['unit']:<3} "
        f"bound {bound:<24} no effect {C._fmt(c['no_effect'])}{c['unit']}  | {c['text'][:70]}"
    )


@pytest.mark.executed
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_lesson_judges_three_claims_that_could_fail(path, request):
    nb = _executed(path, request.config)
    judged = nbrun.claims(nb)
    rows = getattr(request.config, "claim_rows", None)
    if rows is not None:
        rows += [_row(path.stem, c) for c in judged]
    assert len(judged) >= 3, f"{path.name} judged {len(judged)} claims; a lesson keeps at least three"
    for c in judged:
        assert c["held"], f"{path.name}, cell {c['cell']}: {c['text']} did not hold"
        assert not _inside(c["no_effect"], c["low"], c["high"]), f"{path.name}: the no-effect case passes: {c}"
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert not [line for line in code.splitlines() if line.lstrip().startswith("assert ")], (
        f"{path.name} still has bare asserts: each check is a claim(...) with its no-effect case, or a unit test"
    )


@pytest.mark.executed
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_unfilled_guess_is_answered_after_it(path, request):
    """Run with the guesses left empty (as the tests run), each score cell shows the answer and how to guess."""
    import re

    nb = _executed(path, request.config)
    names = re.findall(
        r"^(guess_\w+) = None\s+# your prediction", "\n".join(c.source for c in nb.cells if c.cell_type == "code"), re.M
    )
    for name in names:
        shown = [
            ("".join(o.get("data", {}).get("text/plain", "")) for o in c.outputs if "data" in o)
            for c in nb.cells
            if c.cell_type == "code" and f'name="{name}"' in c.source
        ]
        text = "".join(t for outs in shown for t in outs)
        assert "No guess yet" in text and f"`{name}`" in text, f"{path.name}: {name}'s score shows:\n{text[:300]}"


# --- the helper ----------------------------------------------------------------------------------------


def test_a_claim_that_holds_shows_one_line(capsys):
    assert (
        C.claim("pinned copies are faster", 2.5, above=1.3, no_effect=1.0, no_effect_is="1.0: the same speed", unit="x")
        is None
    )
    c = C.judge("pinned copies are faster", 2.5, above=1.3, no_effect=1.0, unit="x")
    assert c.held and c.low == 1.3 and c.high is None
    out = capsys.readouterr().out
    assert out.startswith("Claim held: pinned copies are faster. Measured 2.5x, bound above 1.3x;")
    assert "with no effect (1.0: the same speed) it would be 1x" in out


def test_a_value_next_to_its_bound_is_printed_with_the_digits_that_tell_them_apart():
    assert "Measured 1.397x, bound below 1.4x" in C.judge("near", 1.397, below=1.4, no_effect=2.0, unit="x").line()
    assert "Measured 1.403x, bound below 1.4x" in C.judge("near", 1.403, below=1.4, no_effect=2.0, unit="x").line()
    assert "Measured 1.38x, bound below 1.4x" in C.judge("far", 1.38, below=1.4, no_effect=2.0, unit="x").line()


def test_a_claim_that_misses_raises_with_what_was_expected_and_the_hint():
    with pytest.raises(C.ClaimFailed, match=r"DID NOT HOLD.*Measured 1.1x, bound above 1.3x.*\nrerun idle"):
        C.claim("faster", 1.1, above=1.3, no_effect=1.0, unit="x", hint="rerun idle")


@pytest.mark.parametrize(
    "bound, no_effect", [({"above": 0.9}, 1.0), ({"below": 2.0}, 1.0), ({"between": (0.5, 1.5)}, 1.0)]
)
def test_a_bound_the_no_effect_case_also_meets_is_refused(bound, no_effect):
    with pytest.raises(ValueError, match="could not fail"):
        C.judge("x", 5.0, no_effect=no_effect, **bound)


def test_a_control_measured_in_the_same_run_is_a_no_effect_value():
    """A skipped all-reduce leaves the replicas apart: the claim on their gap rejects it."""
    c = C.judge("replicas agree", 1e-7, below=1e-4, no_effect=0.03, no_effect_is="the step without its all-reduce")
    assert c.held and "the step without its all-reduce" in c.line()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"above": 1, "below": 2}, ValueError),
        ({}, ValueError),
        ({"between": (2, 1)}, ValueError),
        ({"between": 3}, TypeError),
        ({"above": "1"}, TypeError),
        ({"above": True}, TypeError),
    ],
)
def test_bad_bounds_are_refused(kwargs, error):
    with pytest.raises(error):
        C.judge("x", 1.5, no_effect=0.0, **kwargs)


def test_bad_measurements_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        C.judge("x", math.nan, above=1, no_effect=0)
    with pytest.raises(TypeError, match="text"):
        C.judge("", 1.5, above=1, no_effect=0)
    with pytest.raises(TypeError, match="no_effect"):
        C.judge("x", 1.5, above=1, no_effect=None)
    with pytest.raises(TypeError, match="hint"):
        C.claim("x", 1.5, above=1, no_effect=0, hint=3)


def test_a_claim_publishes_its_record_for_the_executed_copy():
    bundle = C.judge("x", 3.0, between=(2, 4), no_effect=1.0)._repr_mimebundle_()
    record = bundle[C._MIME]
    assert record == {
        "text": "x",
        "measured": 3.0,
        "low": 2.0,
        "high": 4.0,
        "no_effect": 1.0,
        "no_effect_is": "no effect",
        "unit": "",
        "held": True,
        "key": "",
    }
    assert bundle["text/plain"].startswith("Claim held: x.")


def test_a_control_inside_the_bound_stops_the_claim_with_a_reason_not_a_crash():
    """A control measured on the learner's machine can land inside the bound: the claim then fails with why."""
    with pytest.raises(C.ClaimFailed, match="cannot be told from its absence.*\nrerun"):
        C.claim("faster than its control", 1.5, above=1.2, no_effect=1.3, no_effect_is="the control", hint="rerun")
