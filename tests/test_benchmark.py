"""course benchmark (course_lib.benchmark: suite, settings, combine, results, summary, energy, discipline) and its
command line.

One quick run (~10 s) through the command line serves every schema test; the other tests build
results by hand or run small pieces.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from course_lib import cli, data, files
from course_lib.benchmark import combine, discipline, energy, results, settings, suite, summary
from course_lib.procs import is_running

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, Path, str]:
    """One `course benchmark --quick` run: (the result as loaded, its file, what the command printed)."""
    out = tmp_path_factory.mktemp("bench") / "result.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli.main(["benchmark", "--quick", "--no-progress", "--label", "test machine", "--out", str(out)])
    assert code == 0
    return results.load_result(out), out, buf.getvalue()


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


# --- the result --------------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_run_has_the_schema(quick):
    result, path, printed = quick
    assert result["schema"] == results.SCHEMA == "course-benchmark/1"
    import course_lib

    assert result["course_version"] == course_lib.__version__
    assert result["label"] == "test machine" and result["device"] == "cpu" and result["quick"] is True
    assert result["created"].endswith("Z") and "T" in result["created"]
    assert list(result["headline"]) == list(results.HEADLINES)
    for key, value in result["headline"].items():
        if key == "energy_j" and not result["energy"]["available"]:
            assert value is None
            continue
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    head = result["headline"]
    assert head["latency_p50_ms"] <= head["latency_p95_ms"]
    d = result["details"]
    assert d["threads"] == result["hardware"]["torch_threads"] == settings.DEFAULT_THREADS
    assert d["rounds"] == settings.QUICK.rounds * settings.QUICK.processes == len(d["time_to_accuracy"]["per_round_s"])
    rep = d["repeatability"]
    assert rep["processes"] == settings.QUICK.processes == 5 and rep["fresh"] is True
    for key, values in rep["per_process"].items():  # each headline is the trimmed mean of 5 fresh processes
        assert len(values) == 5 and result["headline"][key] == pytest.approx(combine.olympic_mean(values)), key
        assert rep["cv"][key] == pytest.approx(combine.coefficient_of_variation(values))
    # the flag judges the machine: time to accuracy by its time per step, which the seed does not change
    per_step = [1e3 * run["seconds"] / run["steps"] for run in d["time_to_accuracy"]["cold_runs"]]
    assert d["time_to_accuracy"]["ms_per_step_per_process"] == pytest.approx(per_step)
    assert rep["machine_cv"] == {
        **rep["cv"],
        "time_to_accuracy_s": pytest.approx(combine.coefficient_of_variation(per_step)),
    }
    assert rep["flagged"] == [k for k, v in rep["machine_cv"].items() if v > settings.CV_FLAG]
    assert rep["seed_spread"]["steps_per_process"] == d["time_to_accuracy"]["steps_per_process"]
    tta = d["time_to_accuracy"]
    assert len(set(tta["seeds"])) == 5 and all(run["cold"] for run in tta["cold_runs"])  # a seed per process
    assert "CV over processes" in printed and "Mattson et al. 2020" in printed
    assert d["time_to_accuracy"]["accuracy"] >= d["time_to_accuracy"]["target_accuracy"] == 0.95
    assert d["time_to_accuracy"]["steps"] > 0
    n_test = len(data.load_digits(seed=0).y_test)  # the held-out count is the data's, not a constant
    assert d["time_to_accuracy"]["test_images"] == n_test and f"({n_test} of the" in d["time_to_accuracy"]["evaluated"]
    assert d["allreduce"]["applicable"] and d["allreduce"]["world_size"] == 2
    assert min(d["allreduce"]["sizes_bytes"]) >= 2**20
    assert set(result["energy"]) >= {"available", "source", "joules", "why"} and result["energy"]["why"]
    assert "cpu" in result["hardware"] and result["seconds"] > 0
    # the command printed a table with every headline and where it saved the file
    for label, _unit, _higher in results.HEADLINES.values():
        assert label.split()[0] in printed
    assert f"saved {path}" in printed
    assert _leftovers(path) == []


@pytest.mark.slow
def test_startup_split_takes_the_first_epoch_beyond_its_steps(quick):
    result = quick[0]
    tta = result["details"]["time_to_accuracy"]
    for run in tta["cold_runs"]:  # every cold run says when its first epoch ended, before its end
        assert 0 < run["first_epoch_s"] <= run["seconds"] and 0 < run["first_epoch_steps"] <= run["steps"]
    kept = [tta["cold_runs"][i] for i in tta["kept_processes"]]
    first = sum(r["first_epoch_s"] for r in kept) / len(kept)
    steps = sum(r["first_epoch_steps"] for r in kept) / len(kept)
    step_s = 0.25 * first / steps  # a step a quarter of the first epoch's mean step: start-up is the rest
    split = summary.startup_split(result, step_s)
    assert split.first_epoch_s == pytest.approx(first) and split.first_epoch_steps == pytest.approx(steps)
    assert split.startup_s == pytest.approx(0.75 * first)
    assert split.model_s == pytest.approx(0.75 * first + tta["steps"] * step_s)
    assert split.one_epoch_share == pytest.approx(first / result["headline"]["time_to_accuracy_s"])
    assert summary.startup_split(result, 10.0).startup_s == 0.0  # a slower step than the epoch's: no start-up
    own = summary.startup_split(result)  # each run's warm step, timed in its process right after it
    steady = sum(r["steady_step_s"] for r in kept) / len(kept)
    assert own.step_s == pytest.approx(steady) and 0 < steady < first / steps * 10
    assert own.model_s == pytest.approx(max(0.0, first - steps * steady) + tta["steps"] * steady)
    for bad in (0, -1.0, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="step_s"):
            summary.startup_split(result, bad)
    old = json.loads(json.dumps(result))
    for run in old["details"]["time_to_accuracy"]["cold_runs"]:
        del run["steady_step_s"]
    summary.startup_split(old, step_s)  # a step time given: the runs' own is not needed
    with pytest.raises(ValueError, match="older version"):
        summary.startup_split(old)
    for run in old["details"]["time_to_accuracy"]["cold_runs"]:
        del run["first_epoch_s"]
    with pytest.raises(ValueError, match="older version"):
        summary.startup_split(old, step_s)


@pytest.mark.slow
def test_save_and_load_round_trip(quick, tmp_path):
    result = quick[0]
    path = results.save_result(result, tmp_path / "sub" / "again.json")
    assert path == tmp_path / "sub" / "again.json"
    assert results.load_result(path) == result
    assert _leftovers(path) == []
    text = summary.summary_text(result)
    assert "time to accuracy" in text and "GFLOP/s" in text


def test_labels_and_file_names():
    assert results._slug("Colab Intel(R) Xeon(R), 2 cores") == "colab-intel-r-xeon-r-2-cores"
    assert results.default_label("cpu")
    path = results.default_result_path("My Laptop", __import__("datetime").date(2026, 1, 2))
    assert str(path) == "benchmark-my-laptop-2026-01-02.json"
    assert results.default_label("cpu")


def test_the_default_label_names_the_platform_cpu_and_cores(monkeypatch):
    from types import SimpleNamespace

    def machine(model: str, cores: int):
        return lambda: SimpleNamespace(platform="Colab", cpu=SimpleNamespace(model=model, physical_cores=cores))

    monkeypatch.setattr(results, "detect", machine("Intel(R) Xeon(R) CPU @ 2.20GHz", 1))
    assert results.default_label("cpu") == "Colab Intel Xeon, 1 core"
    monkeypatch.setattr(results, "detect", machine("AMD EPYC 7B12 64-Core Processor", 2))
    assert results.default_label("cpu") == "Colab AMD EPYC 7B12, 2 cores"
    monkeypatch.setattr(results, "detect", machine("(R)", 4))
    assert results.default_label("cpu") == "Colab unknown CPU, 4 cores"


def _good() -> dict:
    return {
        "schema": results.SCHEMA,
        "course_version": "0.5.0",
        "created": "2026-01-01T00:00:00Z",
        "label": "x",
        "hardware": {},
        "device": "cpu",
        "quick": True,
        "seconds": 1.0,
        "headline": {k: 1.0 for k in results.HEADLINES} | {"energy_j": None},
        "details": {},
        "energy": energy._not_available("none here"),
    }


def _broken(kind: str) -> str:
    good = json.dumps(_good())
    bad = {
        "empty": "",
        "truncated": good[: len(good) // 2],
        "cut in a string": good[: good.index('"x"') + 2],  # ends inside the label's string
        "nested too deeply": "[" * 200_000,
        "not json": "this is a CSV,file\n1,2\n",
        "foreign list": "[1, 2, 3]",
        "foreign object": json.dumps({"name": "my notes", "values": [1, 2]}),
        "other schema": json.dumps(_good() | {"schema": "mlperf/4.0"}),
        "newer schema": json.dumps(_good() | {"schema": "course-benchmark/2"}),
        "missing top key": json.dumps({k: v for k, v in _good().items() if k != "hardware"}),
        "missing headline key": json.dumps(_good() | {"headline": {"matmul_gflops": 1.0}}),
        "text value": json.dumps(_good() | {"headline": _good()["headline"] | {"matmul_gflops": "fast"}}),
        "bool value": json.dumps(_good() | {"headline": _good()["headline"] | {"latency_p50_ms": True}}),
        "NaN value": json.dumps(_good() | {"headline": _good()["headline"] | {"latency_p95_ms": float("nan")}}),
        "null headline": json.dumps(_good() | {"headline": _good()["headline"] | {"matmul_gflops": None}}),
        "negative": json.dumps(_good() | {"headline": _good()["headline"] | {"matmul_gflops": -3}}),
    }
    return bad[kind]


WHY = {
    "empty": "empty",
    "truncated": "truncated",
    "cut in a string": "truncated",
    "nested too deeply": "nested too deeply",
    "not json": "not valid JSON",
    "foreign list": "foreign",
    "foreign object": "foreign",
    "other schema": "foreign",
    "newer schema": "newer schema",
    "missing top key": "missing keys: hardware",
    "missing headline key": "missing headline keys",
    "text value": "'matmul_gflops' must be a finite number",
    "bool value": "'latency_p50_ms' must be",
    "NaN value": "'latency_p95_ms' must be",
    "null headline": "'matmul_gflops' must be",
    "negative": "'matmul_gflops' must be",
}


@pytest.mark.parametrize("kind", list(WHY))
def test_bad_files_name_the_file_and_why(tmp_path, kind):
    path = tmp_path / f"{kind.replace(' ', '_')}.json"
    path.write_text(_broken(kind))
    with pytest.raises(results.ResultError) as info:
        results.load_result(path)
    assert str(path) in str(info.value) and WHY[kind] in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)
    assert " at at " not in str(info.value) and " at: " not in str(info.value)


def test_not_json_message_names_line_and_column(tmp_path):
    path = _write_text(tmp_path / "x.json", '{"a": 1,, "b": 2}')
    with pytest.raises(results.ResultError, match=r"not valid JSON \(Expecting .*: line 1, column 9\)"):
        results.load_result(path)


def test_huge_files_are_not_read(tmp_path, monkeypatch):
    path = _write(tmp_path / "big.json", _good())
    monkeypatch.setattr(results, "_MAX_RESULT_BYTES", 100)
    with pytest.raises(results.ResultError, match="too large") as info:
        results.load_result(path)
    assert str(path) in str(info.value)


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(results.ResultError, match="cannot be read"):
        results.load_result(tmp_path / "nope.json")
    (tmp_path / "b.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(results.ResultError, match="not UTF-8"):
        results.load_result(tmp_path / "b.json")
    assert results.load_result(_write(tmp_path / "ok.json", _good()))["label"] == "x"


def _write(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj))
    return path


def test_save_refuses_a_bad_result_and_leaves_nothing(tmp_path):
    with pytest.raises(results.ResultError):
        results.save_result({"hello": 1}, tmp_path / "r.json")
    bad = _good() | {"details": {"oops": {1, 2}}}  # a set cannot be written as JSON
    with pytest.raises(TypeError):
        results.save_result(bad, tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []
    # an error while replacing an existing result keeps the old one whole
    old = results.save_result(_good(), tmp_path / "r.json")
    with pytest.raises(TypeError):
        results.save_result(bad, old)
    assert results.load_result(old) == _good() and _leftovers(old) == []
    with pytest.raises(ValueError, match="is a folder"):
        results.save_result(_good(), tmp_path)


def test_saved_results_are_readable_by_others_as_umask_allows(tmp_path):
    old = os.umask(0o022)
    try:
        path = results.save_result(_good(), tmp_path / "r.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.parametrize("step", ["dumps", "mkstemp", "fsync"])
def test_ctrl_c_while_writing_leaves_no_file(tmp_path, monkeypatch, step):
    """Ctrl-C while the JSON is made, the temp file is made or written to disk: no result file, no temp file."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr({"dumps": results.json, "mkstemp": files.tempfile, "fsync": files.os}[step], step, interrupted)
    with pytest.raises(KeyboardInterrupt):
        results.save_result(_good(), tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_mid_run_leaves_no_file_and_no_process(tmp_path):
    out = tmp_path / "result.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "course_lib.cli", "benchmark", "--quick", "--no-progress", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        # interrupt once the run is under way: its all-reduce ranks exist, or after at most 20 s
        deadline = time.monotonic() + 20
        seen: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            seen = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
            if len(seen) >= 3:  # the forkserver, its tracker, and at least one rank or busy child
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the quick benchmark finished before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted; nothing was saved" in err
    assert list(tmp_path.iterdir()) == []
    deadline = time.monotonic() + 10
    while (alive := [pid for pid in seen if is_running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive == []


def test_bad_threads_on_the_command_line(capsys):
    assert cli.main(["benchmark", "--quick", "--threads", "0"]) == 2
    assert "threads" in capsys.readouterr().err


def test_out_is_checked_before_the_run_and_a_folder_gets_the_default_name(tmp_path, monkeypatch, capsys):
    runs = []

    def fake_run(**kwargs):
        runs.append(kwargs)
        return _good() | {"label": "My Laptop"}

    monkeypatch.setattr(suite, "run_benchmark", fake_run)
    monkeypatch.setattr(summary, "summary_text", lambda result: "summary")
    folder = tmp_path / "results"
    folder.mkdir()
    assert cli.main(["benchmark", "--quick", "--out", str(folder)]) == 0
    saved = folder / results.default_result_path("My Laptop")
    assert results.load_result(saved)["label"] == "My Laptop" and f"saved {saved}" in capsys.readouterr().out
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert cli.main(["benchmark", "--quick", "--out", str(a_file / "r.json")]) == 2
    assert "is a file" in capsys.readouterr().err and len(runs) == 1  # refused before running


@pytest.mark.slow
def test_energy_is_divided_by_the_windows_the_meter_counted(monkeypatch):
    class Meter:  # a GPU meter that got a power sample in 2 of the 3 time-to-accuracy windows
        def __init__(self, device):
            self.windows = 0

        def window(self):
            import contextlib

            self.windows += 1
            return contextlib.nullcontext()

        def result(self):
            self.windows = 2
            return {"available": True, "source": "nvidia-smi", "joules": 10.0, "seconds": 1.0, "why": "fake"}

        def close(self):
            pass

    monkeypatch.setattr(suite, "EnergyMeter", Meter)
    monkeypatch.setattr(
        suite,
        "_allreduce",
        lambda dev, repeats: (
            {str(mb * 2**20): 1e9 for mb in settings.ALLREDUCE_MB} | {"world_size": 2, "backend": "gloo"}
        ),
    )
    monkeypatch.setattr(
        suite,
        "QUICK",
        settings.Settings(rounds=3, min_run_time=0.01, latency_calls=20, allreduce_repeats=1, processes=1),
    )
    r = suite.run_benchmark(quick=True, progress=False, device="cpu", fresh=False)  # the fake meter lives here
    assert r["headline"]["energy_j"] == pytest.approx(5.0) and r["details"]["energy"]["windows"] == 2
    bw = r["details"]["memory_bandwidth"]
    if r["hardware"]["cpu"]["physical_cores"] > 1:
        assert bw["all_cores_gbs"] > 0 and len(bw["all_cores_per_round"]) == 3


def _with_spread(steps: list[int], seconds: list[float], **cv) -> dict:
    """A result whose time-to-accuracy runs took ``seconds`` for ``steps`` (the other figures: ``cv``)."""
    r = _good()
    per_step = [1e3 * t / n for t, n in zip(seconds, steps)]
    cvs = {"time_to_accuracy_s": combine.coefficient_of_variation(seconds), **cv}
    machine = cvs | {"time_to_accuracy_s": combine.coefficient_of_variation(per_step)}
    r["details"] = {
        "repeatability": {
            "per_process": {"time_to_accuracy_s": seconds},
            "cv": cvs,
            "machine_cv": machine,
            "flagged": [k for k, v in machine.items() if v > settings.CV_FLAG],
            "processes": len(steps),
            "fresh": True,
            "seed_spread": {"steps_per_process": steps, "step_ms_per_process": per_step},
        },
        "time_to_accuracy": {"target_accuracy": 0.95, "steps_per_process": steps},
    }
    return r


def test_the_summary_blames_the_seeds_for_a_time_to_accuracy_spread_and_the_machine_for_the_rest():
    # the steps of the notebook's run: 3 or 4 epochs; each step takes 1.3 ms in every process
    steps = [172, 129, 129, 172, 172]
    text = summary.summary_text(_with_spread(steps, [1.3e-3 * n for n in steps]))
    assert "the seeds: 129-172 steps per process; per step 0.0%" in text
    assert "chiefly because each trains from its own seed" in text and "172, 129, 129, 172, 172" in text
    assert "FLAGGED" not in text and "another program" not in text  # an idle machine is not blamed
    # the same steps with one process 30 % slower per step, and an all-reduce that scatters: the machine
    slow = [1.3e-3 * n * (1.3 if i == 0 else 1.0) for i, n in enumerate(steps)]
    text = summary.summary_text(_with_spread(steps, slow, allreduce_gbs=0.21))
    assert "FLAGGED" in text and "time to accuracy (per step), all-reduce bus bandwidth vary by more than 5%" in text
    assert "the seed playing no part" in text
    # equal steps: no seed note (the spread is the machine's)
    text = summary.summary_text(_with_spread([150] * 5, [0.2, 0.2, 0.2, 0.2, 0.3]))
    assert "own seed" not in text and "time to accuracy (per step) varies" in text
    # a result written before the per-step judgement: the plain CV, flagged as it was
    old = _good()
    old["details"] = {
        "repeatability": {"cv": {"time_to_accuracy_s": 0.14}, "flagged": ["time_to_accuracy_s"], "processes": 5}
    }
    assert "14.0%  FLAGGED: not repeatable" in summary.summary_text(old)


def test_the_threshold_is_the_courses_and_the_timing_rule_is_mlperfs():
    text = " ".join(settings.MLPERF_DIFFERENCES)
    assert "educational" not in text and "threshold the course chose" in text and "2.5 %" in text
    assert "first touched" in text and "untimed" in text
    assert "course chose" in combine.coefficient_of_variation.__doc__


def test_olympic_mean_and_coefficient_of_variation():
    assert combine.olympic_mean([5.0, 1.0, 3.0, 100.0, 4.0]) == pytest.approx(4.0)  # drops 1 and 100
    assert combine.olympic_mean([2.0, 4.0]) == 3.0 and combine.olympic_mean([7]) == 7.0
    assert combine.coefficient_of_variation([1.0, 1.0, 1.0]) == 0.0
    assert combine.coefficient_of_variation([9.0, 11.0]) == pytest.approx(2**0.5 / 10)
    assert combine.coefficient_of_variation([3.0]) is None and combine.coefficient_of_variation([0.0, 0.0]) is None
    with pytest.raises(ValueError, match="at least one"):
        combine.olympic_mean([])
    for bad in ([1.0, float("nan")], [float("inf"), 1.0]):
        with pytest.raises(ValueError, match="finite"):
            combine.olympic_mean(bad)
        with pytest.raises(ValueError, match="finite"):
            combine.coefficient_of_variation(bad)


@pytest.mark.slow
def test_each_process_starts_cold_from_its_own_seed(monkeypatch):
    monkeypatch.setattr(
        suite,
        "_allreduce",
        lambda dev, repeats: (
            {str(mb * 2**20): 1e9 for mb in settings.ALLREDUCE_MB} | {"world_size": 2, "backend": "gloo"}
        ),
    )
    monkeypatch.setattr(
        suite,
        "QUICK",
        settings.Settings(rounds=2, min_run_time=0.01, latency_calls=20, allreduce_repeats=1, processes=3),
    )
    r = suite.run_benchmark(quick=True, progress=False, device="cpu", fresh=False, seed=7)
    tta, rep = r["details"]["time_to_accuracy"], r["details"]["repeatability"]
    assert tta["seeds"] == [suite._seed(7, p, 0) for p in range(3)] and len(set(tta["seeds"])) == 3
    assert [run["cold"] for run in tta["cold_runs"]] == [True] * 3
    assert len(tta["per_round_s"]) == 6 and len(tta["warm_runs_s"]) == 3
    per = rep["per_process"]["time_to_accuracy_s"]
    assert per == [run["seconds"] for run in tta["cold_runs"]]
    assert r["headline"]["time_to_accuracy_s"] == pytest.approx(sorted(per)[1])  # 3 runs: the middle one
    assert rep["fresh"] is False and r["details"]["processes"] == 3
    text = summary.summary_text(r)
    assert "3 processes x 2 round(s)" in text and "differences from the MLPerf Training rules" in text
    for line in settings.MLPERF_DIFFERENCES:
        assert line in text


def test_the_help_names_the_mlperf_rules_and_their_differences(capsys):
    with pytest.raises(SystemExit):
        cli.main(["benchmark", "--help"])
    out = capsys.readouterr().out
    assert "Mattson et al. 2020" in out and "5 fresh processes" in out and "--processes" in out
    assert "dropping the fastest and the slowest" in " ".join(out.split())


def test_bad_arguments():
    with pytest.raises(TypeError, match="quick"):
        suite.run_benchmark(quick="yes")
    with pytest.raises(ValueError, match="threads"):
        suite.run_benchmark(threads=0)
    with pytest.raises(ValueError, match="processes"):
        suite.run_benchmark(processes=0)
    with pytest.raises(TypeError, match="fresh"):
        suite.run_benchmark(fresh="no")
    with pytest.raises(ValueError, match="label"):
        suite.run_benchmark(label="  ")
    with pytest.raises(ValueError, match="device"):
        suite.run_benchmark(device="tpu9")


# --- energy ------------------------------------------------------------------------------------


def test_energy_not_available_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(energy, "_RAPL_ROOT", tmp_path / "powercap")
    meter = energy.EnergyMeter("cpu")
    with meter.window():
        pass
    r = meter.result()
    assert r == {"available": False, "source": None, "joules": None, "seconds": None, "why": r["why"]}
    assert "does not exist" in r["why"] and str(tmp_path) in r["why"]
    (tmp_path / "powercap").mkdir()
    assert "no RAPL package domain" in energy.EnergyMeter("cpu").result()["why"]


def _fake_rapl(root: Path, packages: dict[str, tuple[int, int]]) -> None:
    for name, (uj, top) in packages.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "energy_uj").write_text(f"{uj}\n")
        (d / "max_energy_range_uj").write_text(f"{top}\n")


def test_energy_from_a_fake_rapl_directory_with_wrap_around(tmp_path, monkeypatch):
    root = tmp_path / "powercap"
    top = 262_143_328_850
    _fake_rapl(
        root, {"intel-rapl:0": (top - 1_000_000, top), "intel-rapl:1": (5_000_000, top), "intel-rapl:0:0": (7, top)}
    )  # a sub-domain: part of package 0, never added
    monkeypatch.setattr(energy, "_RAPL_ROOT", root)
    assert [p.name for p in energy._rapl_domains()] == ["intel-rapl:0", "intel-rapl:1"]
    meter = energy.EnergyMeter()
    assert meter.available and meter.source == "rapl"
    with meter.window():  # package 0 wraps: 1 J to the top, then 2.5 J; package 1 adds 3 J
        _fake_rapl(
            root,
            {"intel-rapl:0": (2_499_999, top), "intel-rapl:1": (8_000_000, top), "intel-rapl:0:0": (999_999_999, top)},
        )
    with meter.window():  # nothing changes: 0 J
        pass
    r = meter.result()
    assert r["available"] and r["source"] == "rapl" and r["joules"] == pytest.approx(6.5)
    assert meter.windows == 2 and "CPU package" in r["why"]


def test_energy_counter_arithmetic():
    assert energy._counter_delta(10, 25, 100) == 15
    assert energy._counter_delta(90, 5, 100) == 16  # 10 to the top, 1 to wrap, 5 after
    assert energy._counter_delta(90, 5, 0) == 0  # no known range: never negative


def test_energy_without_permission(tmp_path, monkeypatch):
    _fake_rapl(tmp_path, {"intel-rapl:0": (1, 100)})

    def denied(root=None):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(energy, "_read_rapl", denied)
    r = energy.EnergyMeter(rapl_root=tmp_path).result()
    assert not r["available"] and "may not read" in r["why"] and "root" in r["why"]
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("garbage")
    monkeypatch.undo()
    r = energy.EnergyMeter(rapl_root=tmp_path).result()
    assert not r["available"] and "could not be read" in r["why"]


@pytest.mark.slow
def test_nvidia_smi_power_is_sampled_and_integrated(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        while true; do echo 50.00; sleep 0.02; done
        """)
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sampler = energy._PowerSampler(0, 0.02)
    try:
        time.sleep(0.3)
        t0 = time.perf_counter()
        time.sleep(0.3)
        joules = sampler.joules(t0, time.perf_counter())
    finally:
        sampler.close()
    assert joules == pytest.approx(50 * 0.3, rel=0.2)
    assert sampler.proc.poll() is not None


# --- discipline --------------------------------------------------------------------------------


@pytest.mark.slow
def test_discipline_functions_return_numbers():
    w = discipline.warmup_effect(steps=6, skip=2, width=64, batch=32)
    assert len(w.times) == 6 and w.first_s > 0 and w.warm_s > 0 and w.ratio == pytest.approx(w.first_s / w.warm_s)
    s = discipline.sync_effect(n=128, matmuls=2, repeats=3)
    assert 0 <= s.no_wait_s < s.wait_s and "background thread" in s.how
    r = discipline.repeats_effect(n=32, groups=3, per_group=5)
    assert len(r.singles) == 15 and len(r.medians) == 3 and r.median_ratio <= r.single_ratio
    sets = sorted(max(r.singles[k : k + 3]) / min(r.singles[k : k + 3]) for k in range(0, 15, 3))
    assert r.set_ratio == pytest.approx(sets[2])  # the median over the 5 sets of 3 singles, one per group
    b = discipline.busy_effect(n=64, rounds=1, window_s=0.02)
    assert b.idle_s > 0 and b.busy_s > 0 and b.rounds == 1 and len(b.busy_rounds) == 1
    assert b.busy_processes == 1 and b.threads == 1
    assert not [p for p in psutil.Process().children(recursive=True) if "spin" in " ".join(p.cmdline())]
    with pytest.raises(ValueError, match="skip"):
        discipline.warmup_effect(steps=3, skip=2)
    with pytest.raises(ValueError, match="groups"):
        discipline.repeats_effect(groups=1)


def test_sync_effect_sizes_the_work_by_one_timed_product(monkeypatch):
    # matmuls = target / (one product's time), between 1 and max_matmuls, whatever the device's speed
    for one, target, cap, expected in (
        (1e-3, 0.05, 256, 50),
        (1.0, 0.05, 256, 1),
        (1e-7, 0.05, 256, 256),
        (2e-3, 0.05, 10, 10),
    ):
        monkeypatch.setattr(discipline, "_one_product_s", lambda *a, one=one: one)
        s = discipline.sync_effect(n=16, repeats=1, target_s=target, max_matmuls=cap)
        assert (s.n, s.matmuls) == (16, expected) and f"{expected} matmuls of 16 x 16" in s.how
    monkeypatch.undo()
    s = discipline.sync_effect(n=64, repeats=3, target_s=0.005)  # the real calibration, on this CPU
    assert 1 <= s.matmuls <= 256 and s.n == 64 and 0 <= s.no_wait_s < s.wait_s
    assert discipline.sync_effect(n=16, matmuls=3, repeats=1).matmuls == 3  # an explicit count is kept
    with pytest.raises(ValueError, match="target_s"):
        discipline.sync_effect(target_s=0)


@pytest.mark.slow
def test_busy_mechanism_measures_a_time_slice_and_per_call_times():
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    m = discipline.busy_mechanism(threads=2, n=64, calls=50, slice_probe_s=0.2)
    assert m.threads == 2 and m.n == 64 and len(m.busy_calls_s) == 50 and m.idle_call_s > 0
    assert 0.0 <= m.slow_fraction <= 1.0 and m.cpu_per_wall > 0
    assert m.cores >= 1 and m.spare_cores == max(0, min(2, m.cores - 1))
    if hasattr(os, "sched_setaffinity"):  # sharing one core, the thread was left off it for whole slices
        assert m.gaps > 0 and 1e-4 < m.slice_s < 0.1, m
        assert os.sched_getaffinity(0) == before  # this thread may use its cores again
    for bad in (dict(threads=0), dict(n=0), dict(calls=0), dict(slice_probe_s=0)):
        with pytest.raises(ValueError):
            discipline.busy_mechanism(**bad)


@pytest.mark.slow
def test_busy_cores_run_while_the_block_runs_and_always_stop():
    with discipline.busy_cores(2) as pids:
        assert len(pids) == 2 and all(is_running(pid) for pid in pids)
        procs = [psutil.Process(pid) for pid in pids]
        for p in procs:
            p.cpu_percent(None)
        time.sleep(0.3)
        assert all(p.cpu_percent(None) > 5 for p in procs), "each child should be spinning (an idle one shows ~0 %)"
    deadline = time.monotonic() + 5
    while any(is_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(is_running(pid) for pid in pids)
    for error in (RuntimeError, KeyboardInterrupt):  # stopped also when the block fails or is interrupted
        with pytest.raises(error):
            with discipline.busy_cores(1) as pids:
                raise error("stop")
        deadline = time.monotonic() + 5
        while any(is_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(is_running(pid) for pid in pids)
    with pytest.raises(ValueError, match="n"):
        with discipline.busy_cores(0):
            pass


# --- the report card through the command line ----------------------------------------------------


@pytest.mark.slow
def test_report_card_command(quick, tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text("{")
    code = cli.main(["report-card", str(quick[1]), str(bad), "--out", str(tmp_path / "card")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"skipped {bad}" in printed and "compared 1 result" in printed
    assert any(p.suffix == ".png" for p in (tmp_path / "card").iterdir())
    assert any(p.suffix == ".html" for p in (tmp_path / "card").iterdir())
    # no usable file at all: a failure exit status and a message, not a traceback
    assert cli.main(["report-card", str(bad), "--out", str(tmp_path / "card2")]) != 0
    assert "course report-card:" in capsys.readouterr().err
    # --out naming an existing file: a message and exit status 2, not a traceback
    assert cli.main(["report-card", str(quick[1]), "--out", str(bad)]) == 2
    assert "must be a folder" in capsys.readouterr().err
