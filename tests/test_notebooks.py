"""The stored notebooks: shape, stored clean (no outputs), guesses before their answers, run times within budget.

The test run executes them cell by cell (conftest.py, tools/nbrun.py); tests/test_claims.py reads what that
run printed. These tests check what a learner who opens a notebook sees before running anything.
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
import course_address  # noqa: E402
from nbrun import code_hash, has_outputs  # noqa: E402
from run_notebooks import BUDGET_S  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
REPO = course_address.address()[0].removeprefix("https://github.com/")  # pyproject.toml's [project.urls] Repository


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
    version = course_address.address()[1]
    assert f"colab.research.google.com/github/{REPO}/blob/v{version}/{folder}/{path.name}" in text, "Colab badge"
    setup = [c for c in nb.cells if c.cell_type == "code"][0].source
    assert setup == course_address.setup_cell(), "the set-up cell is written by tools/course_address.py"
    if path.parent.name == "notebooks":
        assert "What you will learn" in text and "Key takeaways" in text
        assert "exercises/" in text, "points to an exercise notebook"
        assert "pick_device()" in "\n".join(c.source for c in nb.cells)


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS + EXERCISES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_without_outputs(path):
    """A learner who opens a notebook (on a code host, in Colab, in a fresh clone) sees no answer before guessing:
    notebooks are stored clean, and the website is built from executed copies (build/executed/)."""
    nb = _read(path)
    assert not has_outputs(nb), (
        f"{path.parent.name}/{path.name} is stored with outputs, execution counts or timestamps: "
        "clear them (`jupyter nbconvert --clear-output --inplace` or the lab's Edit menu)"
    )
    assert "widgets" not in nb.metadata, "saved widget state belongs in the executed copy, not the source"
    for c in nb.cells:
        if c.cell_type != "code" or c.source == course_address.setup_cell():  # the one cell course_lib cannot hold
            continue
        assert "NBVAL_" not in c.source, "output comparisons are gone: a deterministic result is a unit test"
        # the prediction lock's one line (checks.guess_first) is not lesson code
        src_lines = [line for line in c.source.splitlines() if line.strip() and "checks.guess_first(" not in line]
        assert len(src_lines) <= 16, (
            f"cell too long ({len(src_lines)} lines); move code to course_lib:\n{c.source[:200]}"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_check_is_a_claim_with_its_no_effect_case(path):
    """No bare assert in a lesson: each check goes through claims.claim, which states what the quantity would be
    without the effect and refuses a bound that case also meets (tests/test_claims.py judges what the run printed)."""
    code = [c.source for c in _read(path).cells if c.cell_type == "code"]
    bare = [line.strip() for src in code for line in src.splitlines() if line.lstrip().startswith("assert ")]
    assert not bare, f"{path.name}: bare asserts {bare[:3]}: make each a claim(...) with no_effect=, or a unit test"
    calls = sum(len(re.findall(r"\bclaim\(", src)) for src in code)
    assert calls >= 3, f"{path.name}: {calls} claim(...) calls; a lesson keeps at least three"
    assert all("no_effect=" in m for src in code for m in re.findall(r"\bclaim\([^#]*?(?=\n\S|\Z)", src, re.S)), (
        f"{path.name}: a claim without no_effect="
    )


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
            scored = [
                j
                for j, d in enumerate(nb.cells)
                if d.cell_type == "code"
                and re.search(rf"score_guess\(\s*{name}\b", d.source)
                and f'name="{name}"' in d.source
            ]
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


def _undisplayed_scores(source: str) -> list[int]:
    """Lines of ``checks.score_guess(...)`` calls whose result the learner never sees: not the cell's last expression,
    not wrapped in ``display``/``print``, not kept in a name."""
    import ast

    tree = ast.parse(source)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "score_guess":
            up = parent.get(node)
            shown = (
                up is last
                or isinstance(up, (ast.Assign, ast.NamedExpr, ast.Return))
                or (isinstance(up, ast.Call) and getattr(up.func, "id", "") in ("display", "print"))
            )
            if not shown:
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", NOTEBOOKS + SOLUTIONS, ids=lambda p: p.name)
def test_every_score_is_shown(path):
    """A score inside an ``if`` is no cell's last expression: unless displayed, the learner never sees it."""
    nb = _read(path)
    hidden = [
        (i, n)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and "score_guess(" in c.source
        for n in _undisplayed_scores(c.source)
    ]
    assert not hidden, f"{path.name}: score_guess results never shown (cell, line): {hidden}"
    assert _undisplayed_scores("if x:\n    checks.score_guess(g)\n") == [2]  # the kind of slip this finds
    assert _undisplayed_scores("if x:\n    display(checks.score_guess(g))\n") == []


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
        row = next(
            (
                line
                for line in (ROOT / doc).read_text().splitlines()
                if f"notebooks/{path.name}" in line and line.startswith("|")
            ),
            None,
        )
        assert row, f"{doc} has no table row for {path.name}"
        cell = re.search(r"\|\s*~?(\d+)(?:\s*[-–]\s*(\d+))?\s*s\s*\|", row)
        assert cell and (int(cell.group(1)), int(cell.group(2) or cell.group(1))) == (lo, hi), (
            f"{doc} states {cell.group(0) if cell else 'no time'} for {path.name}, the notebook {lo}-{hi} s"
        )


GUARD = re.compile(r"""^if device_plan\.check\("(\w+)"\):""")


def _guarded_names(nb) -> tuple[set[str], list[tuple[int, str, set[str]]]]:
    """Names assigned inside ``if device_plan.check(...)`` blocks, and (cell, source, names read) of every
    unguarded code cell."""
    import ast

    assigned, unguarded = set(), []
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code" or not c.source.strip():
            continue
        tree = ast.parse("\n".join(line for line in c.source.splitlines() if not line.lstrip().startswith(("%", "!"))))
        for node in tree.body:
            guarded = (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Call)
                and ast.unparse(node.test.func) == "device_plan.check"
            )
            if guarded:
                assigned |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            else:
                unguarded.append(
                    (
                        i,
                        ast.unparse(node),
                        {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)},
                    )
                )
    return assigned, unguarded


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_skipped_demo_leaves_every_other_cell_runnable(path):
    """Where the device plan skips a demo (no memory cap on macOS or Windows, one GPU for NCCL), its cells print
    why and do nothing else: no statement outside a guard reads a name that only a guarded block sets, and the
    capped-process helpers are only called under their guard."""
    nb = _read(path)
    assigned, unguarded = _guarded_names(nb)
    assigned_outside = set()
    for _, stmt, _ in unguarded:
        import ast

        assigned_outside |= {
            n.id for n in ast.walk(ast.parse(stmt)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
    only_guarded = assigned - assigned_outside
    for i, stmt, reads in unguarded:
        assert not reads & only_guarded, (
            f"{path.name}, cell {i}: `{stmt[:80]}` reads {sorted(reads & only_guarded)}, "
            "set only where a demo runs: guard it too"
        )
        assert "limit.run_with_memory_limit" not in stmt and "limit.find_max_batch_size" not in stmt, (
            f'{path.name}, cell {i}: a capped child process outside `if device_plan.check("memory_cap"):`'
        )


def test_the_guard_prints_why_a_demo_is_skipped(capsys):
    """The guard every such cell starts with, on a Mac: it prints the reason and the cell does nothing."""
    import dataclasses

    from course_lib import devices

    facts = dataclasses.replace(devices.DeviceFacts.here(), system="Darwin", macos=(14, 5))
    plan = devices.device_plan(facts)
    assert plan.check("memory_cap") is False
    assert capsys.readouterr().out.startswith("Skipped: capping a process's memory needs Linux")


def _lesson(path: Path) -> str:
    m = re.match(r"(\d\d)_(\d)_", path.name)
    return f"{m.group(1)}.{m.group(2)}" if m else path.name[:2]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_measured_number_is_typed_into_markdown(path):
    """The prose explains; the numbers it discusses are printed by this run or shown from the atlas of recorded runs
    (runs.compare), each with its machine. tools/typed_numbers.py holds the rule (formulas, worked arithmetic, bounds
    and cited data-sheet figures stay)."""
    import typed_numbers

    found = typed_numbers.notebook_numbers(path)
    shown = "\n".join(f"  cell {i}: {n!r} in: {s[:140]}" for i, n, s in found[:8])
    assert not found, (
        f"{path.name}: {len(found)} measured-looking numbers typed into markdown; print them or show them with "
        f"runs.compare (python tools/typed_numbers.py {path.relative_to(ROOT)}):\n{shown}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_claim_and_guess_has_a_stable_key_of_its_lesson(path):
    """Each claim(...) and score_guess(...) names its key, '<lesson>/<name>', unique in the lesson: the run file,
    the atlas and the class page match runs by it."""
    lesson = _lesson(path)
    code = "\n".join(c.source for c in _read(path).cells if c.cell_type == "code")
    calls = re.findall(r"\b(?:claim|score_guess)\((?:[^()]|\([^()]*(?:\([^()]*\)[^()]*)*\))*\)", code)
    assert calls, f"{path.name}: no claims or guesses found"
    keys = []
    for call in calls:
        found = re.findall(r"\bkey=[\"']([^\"']+)[\"']", call)
        assert found, f"{path.name}: a call without key=: {call[:120]}"
        keys.append(found[0])
    wrong = [k for k in keys if not k.startswith(f"{lesson}/")]
    assert not wrong, f"{path.name}: keys of another lesson {wrong}: they start with {lesson}/"
    assert len(keys) == len(set(keys)), f"{path.name}: a key used twice: {sorted(k for k in keys if keys.count(k) > 1)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_guess_is_locked_before_its_answer_and_the_run_is_saved_last(path):
    """Run without its guess, the first code cell after a prediction cell stops before it shows anything
    (checks.guess_first); the last cell writes the run file of this lesson (runs.save)."""
    nb = _read(path)
    for name, set_at, _ in _guesses(nb):
        after = next(c for c in nb.cells[set_at + 1 :] if c.cell_type == "code" and not _is_guess_cell(c))
        first = after.source.lstrip().splitlines()[0]
        assert first.startswith("checks.guess_first(") and f"{name}={name}" in first, (
            f"{path.name}: the first cell after the prediction of {name} must start with "
            f"checks.guess_first({name}={name})"
        )
    assert f'runs.save("{_lesson(path)}"' in nb.cells[-1].source, f"{path.name}: the last cell must be runs.save(...)"


def _is_guess_cell(cell) -> bool:
    return bool(re.match(r"\s*guess_\w+\s*=\s*None", cell.source))


#: Claims judged only on an accelerator (or in a regime no recorded CPU reaches): no CPU run here can record them,
#: and the atlas holds them once such a run is recorded (a learner's run file from a GPU records like any other:
#: CONTRIBUTING.md, "Every number has a key").
ACCELERATOR_ONLY = {
    "01/accelerator_over_cpu_step": "a CUDA GPU, MPS or TPU step against the CPU's",
    "01/half_over_fp32_accelerator": "the accelerator's 16-bit matmul against its fp32",
    "02/estimator_miss_cuda": "the estimator against the CUDA caching allocator's peak",
    "03/nccl_over_gloo_busbw": "NCCL on two or more CUDA GPUs",
    "03/pinned_over_pageable": "host-to-device copies need a CUDA GPU",
    "06.1/ddp_on_gpus_equals_cpu": "DDP over NCCL on two or more CUDA GPUs",
    "06.1/fully_shard_on_gpus_equals_cpu": "fully_shard over NCCL on two or more CUDA GPUs",
    # judged only where the naive guess and the model differ by 2x at the large batch; on every recorded CPU the
    # products are most of that step, so the two agree and the claim could not tell them apart (a GPU at batch 8192)
    "04/step_follows_model_large_batch": "the large-batch step where the naive guess and the model differ",
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_atlas_holds_every_key_a_lesson_shows_from_three_kinds_of_run(path):
    """Every key a lesson names (claims, guesses, values it compares) has recorded runs in the atlas
    (course_lib/tables/atlas/, written by tools/record_atlas.py from executed copies), from at least three kinds of
    run: this CPU idle, torch held to AVX2 kernels, and one core busy."""
    from course_lib.runs import atlas

    lesson = _lesson(path)
    code = "\n".join(c.source for c in _read(path).cells if c.cell_type == "code")
    named = set(re.findall(rf"[\"']({re.escape(lesson)}/[a-z][a-z0-9_]*)[\"']", code))
    recorded = atlas.known_keys([lesson])
    exempt = {k for k in ACCELERATOR_ONLY if k.startswith(f"{lesson}/")}
    assert exempt <= named, f"{path.name}: ACCELERATOR_ONLY names keys the notebook no longer has: {exempt - named}"
    missing = sorted(named - recorded - exempt)
    assert not missing, (
        f"{path.name}: keys with no recorded run: {missing}; run the notebook and record it "
        "(python tools/record_atlas.py; CONTRIBUTING.md, 'Every number has a key')"
    )
    runs_here = [r for r in atlas.atlas_runs() if r["lesson"] == lesson]
    kinds = {(r["machine"]["isa"], bool(r["machine"]["held"]), r["machine"]["busy"]) for r in runs_here}
    assert len(kinds) >= 3, f"{path.name}: the atlas has {len(kinds)} kinds of run ({sorted(kinds)}); expected 3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_atlas_holds_no_key_the_lesson_no_longer_names(path):
    """A learner's run file lists every claim the atlas knows for the lesson, judged or not; a key the lesson no
    longer makes would show there as "not judged" with no cell to find it in. Removing a claim removes its key
    from the atlas's runs too."""
    from course_lib.runs import atlas

    lesson = _lesson(path)
    code = "\n".join(c.source for c in _read(path).cells if c.cell_type == "code")
    named = set(re.findall(rf"[\"']({re.escape(lesson)}/[a-z][a-z0-9_]*)[\"']", code))
    gone = sorted({e["key"] for r in atlas.atlas_runs() if r["lesson"] == lesson for e in r["entries"]} - named)
    assert not gone, f"{path.name}: the atlas holds keys the lesson no longer names: {gone}; remove their entries"
