"""Keys, the prediction lock, run files and the atlas: what a lesson run records, and files from other machines.

A run file travels: from a learner's laptop to an instructor's class page, and into the atlas. Reading one never
trusts it: each hostile kind below is refused with its reason, and a claim whose verdict disagrees with its own
measurement (an edited file) is refused too. The lock stops a measurement cell before it shows its answer, unless
the one setting (COURSE_REVEAL=1) says to reveal.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from course_lib import checks, record, runs
from course_lib.claims import ClaimFailed, claim
from course_lib.runs import atlas as atlas_mod

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh_log(monkeypatch, tmp_path):
    record.clear()
    monkeypatch.setattr(atlas_mod, "ATLAS", tmp_path / "atlas")
    atlas_mod.atlas_runs.cache_clear()
    yield
    record.clear()
    atlas_mod.atlas_runs.cache_clear()


MACHINE = {
    "cpu": "AMD EPYC",
    "architecture": "x86_64",
    "isa": "AVX512",
    "bf16": "native",
    "cores": 2,
    "free_cores": 2,
    "busy": False,
    "accelerator": "none",
    "torch": "2.13.0+cpu",
    "platform": "local",
    "os": "Linux",
    "held": {},
    "course": "0.5.0",
}


def _run(entries, lesson="04", **machine):
    return {
        "format": "course-run",
        "version": 1,
        "lesson": lesson,
        "notebook": runs.LESSONS[lesson],
        "label": "",
        "date": "2026-12-06",
        "revealed": True,
        "machine": dict(MACHINE, **machine),
        "entries": entries,
    }


def _claim(key="04/speedup", value=2.0, status="held", low=1.2):
    return {
        "kind": "claim",
        "key": key,
        "text": "faster",
        "value": value,
        "low": low,
        "high": None,
        "no_effect": 1.0,
        "no_effect_is": "the same speed",
        "unit": "x",
        "status": status,
        "why": "",
    }


# ---------------------------------------------------------------------------------------------- keys and the log


@pytest.mark.parametrize("key", ["04/topk_gap", "05.3/distill_wins", "00/a"])
def test_a_key_names_its_lesson(key):
    assert record.check_key(key) == key
    assert record.lesson_of(key) == key.split("/")[0]


@pytest.mark.parametrize("key", ["topk_gap", "4/x", "04/Top", "04/", "05.0/x", "04/x-y", "04/" + "a" * 65])
def test_a_malformed_key_is_refused_with_the_rule(key):
    with pytest.raises(ValueError, match="<lesson>/<name>"):
        record.check_key(key)


def test_claims_log_held_not_held_and_not_judged_with_why():
    claim("faster", 2.0, above=1.2, no_effect=1.0, key="04/held")
    with pytest.raises(ClaimFailed):
        claim("faster", 1.1, above=1.2, no_effect=1.0, key="04/missed")
    with pytest.raises(ClaimFailed, match="not judged"):
        claim("faster", 2.0, above=1.2, no_effect=1.5, key="04/control_inside")
    got = {e["key"]: e for e in record.entries("04")}
    assert got["04/held"]["status"] == "held" and got["04/held"]["value"] == 2.0
    assert got["04/missed"]["status"] == "not held"
    assert got["04/control_inside"]["status"] == "not judged" and "inside the bound" in got["04/control_inside"]["why"]


def test_a_rerun_cell_replaces_its_entry():
    record.value("04/x", 1.0)
    record.value("04/x", 2.0)
    assert [e["value"] for e in record.entries()] == [2.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_value_must_be_finite(bad):
    with pytest.raises(ValueError, match="finite"):
        record.value("04/x", bad)


# ---------------------------------------------------------------------------------------------- guesses and the lock


def test_a_scored_guess_is_logged_under_its_key():
    checks.score_guess(3.0, measured=2.0, model=2.5, key="04/speed", name="g")
    (entry,) = record.entries()
    assert entry["kind"] == "guess" and entry["guess"] == 3.0 and entry["value"] == 2.0 and entry["model"] == 2.5


def test_a_guess_of_exactly_the_answer_says_so():
    assert checks.score_guess(2.0, measured=2.0, name="g").verdict == "exactly right"
    # torch.empty: the model says 0 MiB, the meter sees a few page-table kB; a guess of 0 is the model's answer
    empty = checks.score_guess(0, measured=0.07, model=0.0, unit="MiB", close_within=1.0, name="g")
    assert empty.verdict.startswith("exactly the model's answer") and "off by" not in empty.text()
    near = checks.score_guess(0.5, measured=0.07, model=0.0, unit="MiB", close_within=1.0, name="g")
    assert near.verdict.startswith("spot on")
    far = checks.score_guess(5.0, measured=0.07, model=0.0, unit="MiB", close_within=1.0, name="g")
    assert "spot on" not in far.verdict


def test_the_lock_stops_a_cell_without_its_guess(monkeypatch):
    monkeypatch.delenv("COURSE_REVEAL", raising=False)
    with pytest.raises(checks.GuessFirst, match="set `guess_x` in the prediction cell") as info:
        checks.guess_first(guess_x=None)
    assert info.value._render_traceback_() == [str(info.value)]  # IPython shows the message, not a traceback
    checks.guess_first(guess_x=3)  # a guess: the cell goes on


def test_a_guess_edited_after_the_answer_is_shown_is_not_scored(monkeypatch):
    """The value a guess held when its measurement first ran is scored; a later edit is named, not counted."""
    monkeypatch.setattr(checks.guesses, "LOCKED", {})
    checks.guess_first(guess_locked=2.0)  # the measurement cell runs: 2 is committed
    checks.guess_first(guess_locked=9.0)  # the learner saw the answer (9), edited the guess and ran the cell again
    score = checks.score_guess(9.0, 9.0, name="guess_locked", what="w")
    assert score.guess == 2.0 and score.changed_to == 9.0 and score.verdict != "exactly right"
    assert "Scored: your first guess" in score.text() and "restart the kernel" in score.text()
    same = checks.score_guess(2.0, 9.0, name="guess_locked", what="w")  # unchanged: scored as it is, no note
    assert same.changed_to is None and "Scored:" not in same.text()
    fresh = checks.score_guess(4.0, 9.0, name="guess_never_locked", what="w")  # no lock ran (an exercise's own)
    assert fresh.guess == 4.0 and fresh.changed_to is None


def test_the_one_setting_reveals_and_says_so(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_REVEAL", "1")
    checks.guess_first(guess_x=None, guess_y=2.0)
    assert "run with its answers shown" in capsys.readouterr().out


def test_the_lock_refuses_a_guess_that_is_not_a_number(monkeypatch):
    monkeypatch.setenv("COURSE_REVEAL", "1")
    with pytest.raises(TypeError, match="without quotes"):
        checks.guess_first(guess_x="20")
    with pytest.raises(TypeError, match="name the guess"):
        checks.guess_first()


# ---------------------------------------------------------------------------------------------- run files


def test_a_run_file_round_trips_and_lists_claims_it_never_reached(tmp_path, monkeypatch):
    (tmp_path / "atlas" / "04").mkdir(parents=True)
    known = _run([_claim("04/speedup"), _claim("04/never_reached")])
    (tmp_path / "atlas" / "04" / "a.json").write_text(json.dumps(known))
    atlas_mod.atlas_runs.cache_clear()
    monkeypatch.setattr(runs.runfile, "machine", lambda: dict(MACHINE))
    claim("faster", 2.0, above=1.2, no_effect=1.0, key="04/speedup")
    path = runs.save("04", label="Ana <b>laptop</b>\x07", folder=tmp_path / "out")
    back = runs.load_run(path)
    assert back["label"] == "Ana <b>laptop</b>"  # text kept as typed (the page escapes it), control characters gone
    status = {e["key"]: e["status"] for e in back["entries"]}
    assert status == {"04/speedup": "held", "04/never_reached": "not judged"}
    assert set(back) == {"format", "version", "lesson", "notebook", "label", "date", "revealed", "machine", "entries"}


HOSTILE = {
    "nan.json": ('{"format": "course-run", "version": 1, "x": NaN}', "not valid JSON"),
    "deep.json": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "binary.json": (bytes(range(256)) * 4, "not a text file"),
    "empty.json": ("", "empty"),
    "foreign.json": ('{"schema": "course-benchmark", "headline": {}}', "not a course run file"),
    "newer.json": (json.dumps(dict(_run([]), version=2)), "version"),
    "list.json": ("[1, 2]", "not a course run file"),
    "edited.json": (json.dumps(_run([_claim(value=0.9, status="held")])), "edited"),
    "wrong_lesson.json": (json.dumps(_run([_claim(key="05.1/x")])), "belongs to lesson 05.1"),
    "bad_key.json": (json.dumps(_run([_claim(key="<script>")])), "is not '<lesson>/<name>'"),
    "inf.json": (json.dumps(_run([dict(_claim(), value=1e999)])).replace("Infinity", "1e999"), "not a finite"),
    "twice.json": (json.dumps(_run([_claim(), _claim()])), "appears twice"),
    "cores.json": (json.dumps(_run([], cores="2; DROP")), "must be a number"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_run_file_is_refused_with_its_reason(tmp_path, name):
    content, why = HOSTILE[name]
    path = tmp_path / name
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    with pytest.raises(runs.RunFileError, match=why):
        runs.load_run(path)


def test_a_huge_file_is_not_read(tmp_path):
    path = tmp_path / "huge.json"
    path.write_text(" " * (runs.runfile.MAX_BYTES + 1))
    with pytest.raises(runs.RunFileError, match="too large"):
        runs.load_run(path)


def test_a_machine_kind_separates_cpu_kernels_bf16_cores_and_accelerator():
    base = runs.kind_of(MACHINE)
    assert runs.kind_of(dict(MACHINE, isa="AVX2", held={"ATEN_CPU_CAPABILITY": "avx2"})) != base
    assert "AVX2 kernels (forced, same chip)" in runs.kind_of(
        dict(MACHINE, isa="AVX2", held={"ATEN_CPU_CAPABILITY": "avx2"})
    )
    assert runs.kind_of(dict(MACHINE, accelerator="NVIDIA H100")) != base
    assert runs.kind_of(dict(MACHINE, busy=True, free_cores=1)) == base  # load is a state, not a kind
    # as a reader sees it: the narrower kernels a setting asked for, or the bf16 units it hid, named as a setting's
    from course_lib.runs.atlas import short_kind

    avx2 = runs.kind_of(dict(MACHINE, isa="AVX2", held={"ATEN_CPU_CAPABILITY": "avx2"}))
    assert "held to AVX2 by a setting" in short_kind(avx2 + ", idle")
    hidden = "Intel Xeon · AVX512 kernels (forced, same chip) · no native bf16 · 2 cores, idle"
    assert short_kind(hidden) == "Intel Xeon, AVX512, bf16 hidden by a setting, 2 cores, idle"
    assert runs.state_of(dict(MACHINE, busy=True, free_cores=1)).startswith("busy")


# ---------------------------------------------------------------------------------------------- the atlas


def _atlas(tmp_path, values, what="gap"):
    for i, (value, machine) in enumerate(values):
        folder = tmp_path / "atlas" / "04"
        folder.mkdir(parents=True, exist_ok=True)
        entry = {"kind": "value", "key": "04/gap", "value": value, "unit": " points", "what": what}
        (folder / f"{i}.json").write_text(json.dumps(_run([entry], **machine)))
    atlas_mod.atlas_runs.cache_clear()
    atlas_mod._LEGENDS_SHOWN.clear()


def test_compare_places_this_run_per_machine_kind(tmp_path):
    _atlas(
        tmp_path, [(-8.0, {}), (-2.0, {}), (-5.0, {}), (-3.0, {"isa": "AVX2"}), (-4.0, {"busy": True, "free_cores": 1})]
    )
    shown = runs.compare(("04/gap", -5.0, " points", "gap"), this_machine=MACHINE)
    text = shown.text()
    assert "Yours: " in text and "busy" in text
    # the other kinds' extremes, each named
    assert (
        "Other kinds: -4 points (AMD EPYC, AVX512, 2 cores, busy) to -3 points (AMD EPYC, AVX2, 2 cores, idle)" in text
    )
    assert "inside your kind's 3 runs (-8 to -2 points)" in text
    assert "    AMD EPYC, AVX2, 2 cores, idle: -3 points" in shown.by_kind()  # every kind, one line each
    assert "The atlas holds 5 recorded runs of this lesson" in text
    assert record.entries()[0]["key"] == "04/gap"  # the value is logged for the run file


def test_a_value_outside_everything_recorded_by_more_than_noise_says_so(tmp_path):
    _atlas(tmp_path, [(-8.0, {}), (-2.0, {}), (-5.0, {})])
    out = runs.compare(("04/gap", 3.0, " points", "gap"), this_machine=MACHINE).text()
    assert "OUTSIDE your kind's 3 runs (-8 to -2 points) even with ±25% (-9.25 to -0.75" in out
    # within the noise band (a quarter of the median's size) beyond the range: not an outlier, and said so
    near = runs.compare(("04/gap", -1.0, " points", "gap"), this_machine=MACHINE).text()
    assert (
        "just outside your kind's 3 runs (-8 to -2 points), within the ±25% noise allowance" in near
        and "OUTSIDE" not in near
    )
    other = runs.compare(("04/gap", 3.0, " points", "gap"), this_machine=dict(MACHINE, isa="AVX2")).text()
    assert "context only (no run of your kind and load)" in other
    assert "OUTSIDE the others" in other and other.endswith(
        "save your run (last cell) and hand it in, so your kind can join the atlas."
    )  # a kind never recorded


def test_too_few_runs_give_a_ratio_not_a_verdict(tmp_path):
    _atlas(tmp_path, [(2.0, {})])
    text = runs.compare(("04/gap", 3.0, " points", "gap"), this_machine=MACHINE).text()
    assert "1.5x your kind's run (2 points): beyond ±25%" in text and "OUTSIDE" not in text
    _atlas(tmp_path, [(0.0, {})])
    zero = runs.compare(("04/gap", 140.0, " points", "gap"), this_machine=MACHINE).text()
    assert "too few runs to know its spread" in zero and "beyond the" not in zero  # a zero (clamped) value: no ratio
    _atlas(tmp_path, [(4.9, {})])
    signed = runs.compare(("04/gap", -7.75, " points", "gap"), this_machine=MACHINE).text()
    assert "-12.7 points from your kind's run (4.9 points)" in signed and "beyond the" not in signed
    _atlas(tmp_path, [(2.0, {})])
    near = runs.compare(("04/gap", 2.3, " points", "gap"), this_machine=MACHINE).text()
    assert "just outside your kind's run (2 points), within the ±25% noise allowance" in near
    _atlas(tmp_path, [(2.0, {}), (2.6, {})])  # inside the runs' own range: said so, not "within the allowance"
    inside = runs.compare(("04/gap", 2.3, " points", "gap"), this_machine=MACHINE).text()
    assert "inside your kind's 2 runs (2 to 2.6 points)" in inside and "allowance of" not in inside


def test_a_number_the_machine_does_not_change_says_so(tmp_path):
    _atlas(tmp_path, [(16.8, {}), (16.8, {"isa": "AVX2"}), (16.8, {"busy": True, "free_cores": 1})])
    same = runs.compare(("04/gap", 16.8, " points", "gap"), this_machine=MACHINE).text()
    assert "the same as all 3 recorded runs: none of the recorded machines changes this number" in same
    assert "differs from the 3 recorded runs" in runs.compare(("04/gap", 16.9, "", "gap"), this_machine=MACHINE).text()


def test_runs_of_another_set_up_are_left_out(tmp_path):
    _atlas(tmp_path, [(0.3, {}), (0.4, {})], what="f at batch 512")
    text = runs.compare(("04/gap", 0.9, "", "f at batch 16"), this_machine=MACHINE).text()
    assert "no run of this measurement (same size and settings) recorded yet" in text
    assert "2 runs measured another way (another size, setting or bound), not compared" in text


def test_a_key_without_records_says_so(tmp_path):
    text = runs.compare(("04/gap", 3.0), this_machine=MACHINE).text()
    assert "no run of this measurement (same size and settings) recorded yet" in text


def test_compare_refuses_a_key_this_session_never_measured():
    with pytest.raises(ValueError, match="has not been measured in this session"):
        runs.compare("04/never", this_machine=MACHINE)


def test_the_comparison_plots(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    _atlas(tmp_path, [(-8.0, {}), (-3.0, {"isa": "AVX2"})])
    fig = runs.compare(("04/gap", -5.0, " points", "gap"), this_machine=MACHINE).plot()
    assert len(fig.axes) == 1 and not math.isnan(fig.get_size_inches()[1])


@pytest.mark.slow
def test_in_a_kernel_the_lock_shows_a_message_not_a_traceback(tmp_path):
    """A real kernel, as JupyterLab or Colab runs it: the cell after an empty guess stops with one short message."""
    import nbformat
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT / "tools"))
    import nbrun

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from course_lib import checks\nguess_x = None"),
        nbformat.v4.new_code_cell("checks.guess_first(guess_x=guess_x)\nprint('the answer is 42')"),
    ]
    env = {k: v for k, v in nbrun.kernel_env().items() if k != "COURSE_REVEAL"}
    NotebookClient(nb, timeout=120, allow_errors=True).execute(env=env)
    outputs = nb.cells[1].outputs
    assert not any("42" in o.get("text", "") for o in outputs)
    (error,) = [o for o in outputs if o.output_type == "error"]
    assert error.ename == "GuessFirst" and len(error.traceback) == 1 and "Guess first" in error.traceback[0]


def test_the_atlas_header_is_printed_once_per_kernel(tmp_path):
    _atlas(tmp_path, [(-8.0, {}), (-2.0, {"isa": "AVX2"}), (-5.0, {"busy": True, "free_cores": 1})])
    first = runs.compare(("04/gap", -5.0, " points", "gap"), this_machine=MACHINE).text()
    again = runs.compare(("04/gap", -4.0, " points", "gap"), this_machine=MACHINE).text()
    assert first.startswith("The atlas holds 3 recorded runs") and "Yours: " in first
    assert "The atlas holds" not in again and len(again.splitlines()) == 1  # one line: the value and its verdict
    assert first.split("Other kinds: ")[-1] == again.split("Other kinds: ")[-1]


def test_inside_a_range_that_spans_kinds_names_your_kind(tmp_path):
    _atlas(tmp_path, [(0.03, {"isa": "AVX2"}), (2.0, {}), (1.9, {"busy": True, "free_cores": 1})])
    text = runs.compare(("04/gap", 1.8, "x", "gap"), this_machine=MACHINE).text()
    assert "just outside your kind's run (2x), within the ±25% noise allowance" in text
    # the pooled range (0.03 to 2x) would hide an outlier of this kind; judged against its own kind, it shows
    low = runs.compare(("04/gap", 0.5, "x", "gap"), this_machine=MACHINE).text()
    assert "0.25x your kind's run (2x): beyond ±25%" in low and "cannot show" in low
    busy = runs.compare(("04/gap", 1.0, "x", "gap"), this_machine=dict(MACHINE, isa="AVX2", busy=True)).text()
    assert "context only (no run of your kind and load)" in busy and "your kind, other load: 0.03x" in busy


def test_the_atlas_recorder_keeps_a_second_run_of_the_day_beside_the_first(tmp_path):
    """An executed copy compared itself with the runs recorded before it: recording a later run of the same lesson,
    kind, load and day must not overwrite them, and recording the same run twice must not add a copy."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    record_atlas = importlib.import_module("record_atlas")
    run = {"lesson": "04", "date": "2026-12-07", "machine": dict(MACHINE), "entries": [{"key": "04/gap", "value": 2.0}]}
    first = record_atlas.record(run, atlas=tmp_path)
    again = record_atlas.record(run, atlas=tmp_path)  # the same run: the same file
    later = record_atlas.record(dict(run, entries=[{"key": "04/gap", "value": 3.0}]), atlas=tmp_path)
    assert first == again and later != first and later.name.endswith("-b.json")
    assert '"value": 2.0' in first.read_text() and '"value": 3.0' in later.read_text()


def test_the_atlas_recorder_refuses_a_value_far_outside_its_kinds_recorded_range():
    """tools/record_atlas.py keeps a run disturbed mid-way out of the atlas: a value outside the range its kind and
    load recorded (widened by the noise allowance) is named; a value inside it is not."""
    import copy
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    record_atlas = importlib.import_module("record_atlas")
    from course_lib.runs.atlas import atlas_runs

    runs = atlas_runs(str(Path(__file__).resolve().parents[1] / "course_lib" / "tables" / "atlas"))  # the real one
    kin = lambda r: (r["lesson"], record_atlas.kind_of(r["machine"]), r["machine"]["busy"])  # noqa: E731
    run = next(r for r in runs if r["lesson"] == "01" and sum(kin(x) == kin(r) for x in runs) >= 3)
    seen = [x["value"] for r in runs if kin(r) == kin(run) for x in r["entries"] if x["key"] == "01/speedup"]
    for value, named in ((10 * max(seen), True), (sorted(seen)[len(seen) // 2], False)):
        probe = copy.deepcopy(run)
        for e in probe["entries"]:
            if e["key"] == "01/speedup":
                e["value"] = value
        said = record_atlas.outliers(probe, runs)
        assert any(s.startswith("01/speedup:") for s in said) is named, said


def test_a_value_outside_only_beyond_the_digits_shown_is_at_the_edge():
    mine = [78.8, 100.0, 119.3]
    said = atlas_mod.verdict(119.4, mine, " GFLOP/s", mine=mine)  # both print as 119
    assert said.startswith("at the edge of your kind's 3 runs (78.8 to 119"), said
    assert "inside" in atlas_mod.verdict(100.0, mine, mine=mine)
    assert "just outside" in atlas_mod.verdict(125.0, mine, mine=mine)  # 125 prints apart from 119
    few = [1.06, 1.1]
    assert atlas_mod.verdict(1.0584, few, "x", mine=few).startswith("at the edge of")


def test_a_tight_close_within_is_what_the_measurement_tells_apart():
    """An exact count (bf16 activation bytes): 25 % is not noise there, so the naive half is not "spot on"."""
    naive = checks.score_guess(0.5, measured=0.585, model=0.5, model_name="half the bytes", close_within=0.02, name="g")
    assert naive.verdict == "exactly the model's answer (half the bytes), not the measurement's"
    assert checks.score_guess(0.57, measured=0.585, close_within=0.02, name="g").verdict.startswith("spot on")
    assert checks.score_guess(0.55, measured=0.585, close_within=0.02, name="g").verdict == "close (within 2x)"
    assert checks.score_guess(0.55, measured=0.585, name="g").verdict == "spot on"  # without it: 25 %
    # a model nearer than that is not called equal: its distance is shown, and that it is within the allowance
    ckpt = checks.score_guess(None, measured=1.25, model=1.34, model_name="step + forward", close_within=0.1, name="g")
    assert "1.07x above the measurement: within what it can tell apart" in ckpt.text() and "equal" not in ckpt.text()


def test_a_claim_reworded_around_the_same_quantity_keeps_its_runs():
    same = atlas_mod._same_quantity
    assert same("half the bytes is faster (fp32 / bf16 time)", "half the bytes is up to 2x (fp32 / bf16 time)", True)
    assert not same("beats the model (bf16 / fp32 speed)", "beats it (bf16 / fp32 speed, one thread)", True)
    assert not same("two threads beat one", "two threads beat one, by up to 2x", True)  # no quantity named: in full
    assert not same("f at batch 512 (the calibration)", "f at batch 16 (the calibration)", False)  # values: in full
