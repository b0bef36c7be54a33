"""A benchmark result built from dataclasses by keyword (course_lib.benchmark.results, combine): the JSON object they
make is the schema course-benchmark/1, key for key and in order, so files saved before and after load alike."""

from __future__ import annotations

import json
import time
from dataclasses import fields

import pytest
import torch

from course_lib.benchmark import combine, energy, results, settings, summary
from course_lib.hardware import detect

SETTINGS = settings.Settings(rounds=2, min_run_time=0.05, latency_calls=10, allreduce_repeats=1, processes=3)


def _share(p: int, *, joules: float | None = None, all_cores: bool = True) -> dict:
    """One process's measurements as ``suite`` reports them: 2 rounds, figures that differ by process."""
    tta = [
        {
            "seconds": 1.0 + 0.1 * p + 0.01 * r,
            "steps": 300 + 10 * p,
            "epochs": 7,
            "accuracy": 0.96,
            "seed": 100 * p + r,
            "cold": r == 0,
        }
        for r in range(2)
    ]
    meter = (
        energy._not_available("no counters")
        if joules is None
        else {"available": True, "source": "rapl", "joules": joules, "seconds": 2.0, "why": "RAPL"}
    )
    return {
        "tta": tta,
        "throughput": [1e4 + p, 1e4 + 2 * p],
        "latency_p50_ms": [0.05, 0.06],
        "latency_p95_ms": [0.1, 0.2],
        "matmul": [50.0 + p, 51.0],
        "matmul_all_cores": [100.0, 99.0] if all_cores else [],
        "bandwidth": [5.0, 6.0 + p],
        "bandwidth_all_cores": [10.0, 11.0] if all_cores else [],
        "energy": meter,
        "windows": 2 if joules is not None else 0,
        "mm_n": 1024,
        "bw_bytes": 2**27,
        "test_images": 450,
        "images": 1797,
    }


def _sweeps(n: int) -> list[list[dict]]:
    return [
        [{**{str(mb * 2**20): 1e9 * (1 + 0.1 * p) for mb in settings.ALLREDUCE_MB}, "world_size": 2, "backend": "gloo"}]
        * 2
        for p in range(n)
    ]


def _run(**kw) -> combine.Run:
    base = dict(
        settings=SETTINGS,
        processes=3,
        fresh=True,
        device=torch.device("cpu"),
        info=detect(),
        threads=1,
        all_cores=4,
        seed=0,
        label="lab machine",
        quick=True,
        not_applicable=None,
        started=time.perf_counter(),
    )
    return combine.Run(**(base | kw))


def test_the_dataclasses_hold_the_schemas_keys_in_order():
    assert [f.name for f in fields(results.Headline)] == list(results.HEADLINES)
    assert [f.name for f in fields(results.Result)] == [
        "schema",
        "course_version",
        "created",
        "label",
        "hardware",
        "device",
        "quick",
        "seconds",
        "headline",
        "details",
        "energy",
    ]
    with pytest.raises(TypeError):
        results.Headline(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, None, None)  # built by keyword only
    with pytest.raises(TypeError, match="Result"):
        results.as_json({"schema": results.SCHEMA})


def test_a_combined_result_is_the_schemas_json():
    shares = [_share(p, joules=10.0 + p) for p in range(3)]
    out = results.as_json(combine.combine(shares, _sweeps(3), _run()))
    assert results.check_result(out) is out and json.loads(json.dumps(out))["details"] == out["details"]
    d = out["details"]
    assert list(d) == [
        "method",
        "mlperf_differences",
        "processes",
        "fresh_processes",
        "rounds",
        "rounds_per_process",
        "threads",
        "seed",
        "settings",
        "medians",
        "repeatability",
        "time_to_accuracy",
        "train_throughput",
        "latency",
        "matmul",
        "memory_bandwidth",
        "allreduce",
        "energy",
    ]
    assert list(d["matmul"]) == [
        "n",
        "dtype",
        "per_round",
        "spread",
        "how",
        "all_cores",
        "all_cores_gflops",
        "all_cores_per_round",
        "all_cores_spread",
    ]
    assert d["matmul"]["all_cores"] == 4 and d["memory_bandwidth"]["threads"] == 1
    assert list(d["allreduce"]) == [
        "applicable",
        "world_size",
        "backend",
        "sizes_bytes",
        "headline_size_bytes",
        "per_round_busbw_gbs",
        "spread",
        "threads_per_rank",
    ]
    assert d["energy"] == {"windows": 6, "joules_total": 33.0, "seconds": 6.0, "per": "one time-to-accuracy run"}
    per = d["repeatability"]["per_process"]
    assert out["headline"] == {k: combine.olympic_mean(per[k]) for k in results.HEADLINES}
    assert out["headline"]["time_to_accuracy_s"] == pytest.approx(1.1)  # 3 cold runs: the middle one
    assert d["time_to_accuracy"]["kept_processes"] == [1] and d["time_to_accuracy"]["seeds"] == [0, 100, 200]
    assert out["label"] == "lab machine" and out["quick"] is True and out["device"] == "cpu"
    assert "3 fresh processes x 2 round(s)" in summary.summary_text(out)


def test_keys_a_machine_cannot_fill_are_left_out_not_null():
    shares = [_share(p, all_cores=False) for p in range(3)]
    run = _run(device=torch.device("cpu"), not_applicable="not applicable: one CUDA GPU")
    d = results.as_json(combine.combine(shares, [[] for _ in range(3)], run))["details"]
    assert "energy" not in d and "all_cores" not in d["matmul"] and "all_cores_gbs" not in d["memory_bandwidth"]
    assert d["allreduce"] == {"applicable": False, "why": "not applicable: one CUDA GPU"}
    gpu = results.as_json(
        combine.combine(
            shares,
            [[] for _ in range(3)],
            _run(device=torch.device("cuda", 0), label=" GPU box ", not_applicable="not applicable: one CUDA GPU"),
        )
    )
    assert gpu["details"]["memory_bandwidth"]["threads"] is None  # kept: the schema always has it
    assert gpu["headline"]["allreduce_gbs"] is None and gpu["headline"]["energy_j"] is None
    assert gpu["label"] == "GPU box" and gpu["device"] == "cuda:0"


def test_a_result_saved_before_the_dataclasses_still_loads(tmp_path):
    """A file of course_lib 0.5.0's layout, with a few of its details, loads and prints."""
    old = {
        "schema": "course-benchmark/1",
        "course_version": "0.5.0",
        "created": "2026-01-01T00:00:00Z",
        "label": "old laptop",
        "hardware": {"cpu": {"model": "x"}, "torch_threads": 1},
        "device": "cpu",
        "quick": True,
        "seconds": 20.0,
        "headline": {k: 2.0 for k in results.HEADLINES} | {"allreduce_gbs": None, "energy_j": None},
        "details": {
            "threads": 1,
            "rounds": 5,
            "allreduce": {"applicable": False, "why": "one GPU"},
            "repeatability": {"cv": {"matmul_gflops": 0.01}, "processes": 5, "fresh": True},
        },
        "energy": energy._not_available("no counters"),
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old, indent=2))
    assert results.load_result(path) == old
    assert "old laptop" in summary.summary_text(old) and "one GPU" in summary.summary_text(old)
