"""The torchrun training script and the orchestration helpers (notebook 06.4).

One multi-process test (a worker killed under torchrun, the job restarted and finished on the same curve):
what no single process can show. Everything else runs in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from course_lib import models, procs
from course_lib.parallel import fault_tolerance as ft
from course_lib.parallel import orchestration as orch
from course_lib.parallel import torchrun_launch as tl
from course_lib.parallel import train_script as ts


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    return ts.prepare_data(tmp_path_factory.mktemp("data") / "data.pt")


def _script(data_file, steps, *extra):
    return ["--data", str(data_file), "--steps", str(steps), "--checkpoint-every", "5", "--hidden", "32", *extra]


def _args(data_file, run_dir, steps, *extra):
    return ["--run-dir", str(run_dir), *_script(data_file, steps, *extra)]


# ----------------------------------------------------------------------------------------------
# the script


def test_batches_depend_on_the_step_only_and_cover_an_epoch():
    a = [ts._batch_indices(s, 100, 20, seed=3) for s in range(5)]
    assert all(torch.equal(x, ts._batch_indices(s, 100, 20, seed=3)) for s, x in enumerate(a))
    assert sorted(torch.cat(a).tolist()) == list(range(100))  # one epoch: every example once
    assert not torch.equal(ts._batch_indices(5, 100, 20, seed=3), a[0])  # the next epoch is shuffled anew
    with pytest.raises(ValueError, match="batch_size"):
        ts._batch_indices(0, 10, 11, seed=0)
    with pytest.raises(ValueError, match="step"):
        ts._batch_indices(-1, 10, 5, seed=0)


def test_bad_arguments_name_themselves(tmp_path):
    with pytest.raises(ValueError, match="steps"):
        ts.parse_args(["--run-dir", str(tmp_path), "--steps", "0"])
    with pytest.raises(ValueError, match="timeout"):
        ts.parse_args(["--run-dir", str(tmp_path), "--timeout", "-1"])
    with pytest.raises(ValueError, match="does not exist"):
        ts.load_data(tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="no log for rank 3"):
        tl.read_log(tmp_path, 3)


def test_a_resumed_run_continues_the_same_trajectory(data_file, tmp_path):
    """10 steps, stop, start again to 20: the same 20 losses as one run of 20 (one process, no torchrun)."""
    ts.main(_args(data_file, tmp_path / "full", 20))
    ts.main(_args(data_file, tmp_path / "cut", 10))
    summary = ts.main(_args(data_file, tmp_path / "cut", 20))
    assert summary["resumed_from"] == 10 and summary["world_size"] == 1
    assert tl.loss_curve(tmp_path / "cut") == tl.loss_curve(tmp_path / "full")
    assert tl.redone_steps(tmp_path / "cut") == []
    starts = [r for r in tl.read_log(tmp_path / "cut") if r.get("event") == "start"]
    assert [r["resumed_from"] for r in starts] == [0, 10] and starts[0]["backend"] == "gloo"


def test_a_checkpoint_without_momentum_resumes_off_the_trajectory(data_file, tmp_path):
    """Notebook 06.4's no-effect case: the same resume from a checkpoint whose momentum was dropped drifts; and a
    checkpoint is weights + momentum + a little (generators, names, format), as the notebook counts it."""
    ts.main(_args(data_file, tmp_path / "full", 20))
    ts.main(_args(data_file, tmp_path / "cut", 10))
    newest = ts.drop_optimizer_state(tmp_path / "cut")
    assert ft.load_checkpoint(newest)["optimizer"]["state"] == {}
    ts.main(_args(data_file, tmp_path / "cut", 20))
    gap = max(abs(a - b) for a, b in zip(tl.loss_curve(tmp_path / "cut"), tl.loss_curve(tmp_path / "full")))
    assert gap > 1e-3
    with pytest.raises(ValueError, match="no checkpoint"):
        ts.drop_optimizer_state(tmp_path / "nothing")
    ts.main(
        ["--run-dir", str(tmp_path / "notebook"), "--data", str(data_file), "--steps", "5", "--checkpoint-every", "5"]
    )
    ckpt = ft.list_checkpoints(tmp_path / "notebook" / ts.CHECKPOINT_DIR)[-1]  # the notebook's 64 -> 256 -> 10 MLP
    assert 1.0 <= ckpt.stat().st_size / (models.count_parameters(ts.make_model()) * 8) <= 1.3


def test_loss_curve_keeps_the_latest_value_of_a_redone_step(tmp_path):
    lines = [
        {"step": 0, "loss": 3.0, "attempt": 0},
        {"step": 1, "loss": 2.0, "attempt": 0},
        {"step": 1, "loss": 2.5, "attempt": 1},
        {"step": 2, "loss": 1.0, "attempt": 1},
    ]
    (tmp_path / "rank0.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + '\n{"step": 3, "lo')
    assert tl.loss_curve(tmp_path) == [3.0, 2.5, 1.0]  # the line cut short by a kill is skipped
    assert tl.redone_steps(tmp_path) == [1]


def test_torchrun_arguments():
    single = tl.torchrun_args(["--run-dir", "r"], nproc_per_node=2, max_restarts=2)
    assert single[:3] == ["--standalone", "--nproc-per-node=2", "--max-restarts=2"]
    assert single[-4:] == ["-m", "course_lib.parallel.train_script", "--run-dir", "r"]
    multi = tl.torchrun_args([], nnodes=2, rdzv_endpoint="10.0.0.1:29400", is_host=False)
    assert "--nnodes=2" in multi and "--rdzv-backend=c10d" in multi and "--rdzv-conf=join_timeout=60,is_host=0" in multi
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        tl.torchrun_args([], nnodes=2)
    with pytest.raises(TypeError, match="script_args"):
        tl.torchrun_args("--run-dir r")
    with pytest.raises(ValueError, match="kill_rank must be a rank"):
        tl.run_torchrun([], "unused", nproc_per_node=2, kill_rank=2, kill_after_step=1)
    with pytest.raises(ValueError, match="both"):
        tl.run_torchrun([], "unused", kill_rank=1)


def test_help_documents_the_multi_machine_commands(capsys):
    with pytest.raises(SystemExit):
        ts.parse_args(["--help"])
    text = capsys.readouterr().out
    for needle in ("--rdzv-endpoint", "firewall", "NCCL_SOCKET_IFNAME", "CLUSTER_SPEC", "MASTER_ADDR", "Vertex AI"):
        assert needle in text


@pytest.mark.slow
def test_a_killed_worker_is_restarted_and_the_curve_is_unchanged(data_file, tmp_path):
    """torchrun --standalone --nproc-per-node=2 --max-restarts=2; rank 1 gets SIGKILL after step 7."""
    ts.main(_args(data_file, tmp_path / "one", 16))
    result = tl.run_torchrun(
        _script(data_file, 16, "--step-delay", "0.05"),
        tmp_path / "killed",
        nproc_per_node=2,
        max_restarts=2,
        kill_rank=1,
        kill_after_step=7,
        timeout=240,
    )
    summary = tl.restart_summary(result)
    assert result.attempts == 2 and result.kill["step"] >= 7, result.kill
    assert summary["resumed_from"] in (5, 10) and 1 <= summary["redone"] <= 6, summary
    one = tl.loss_curve(tmp_path / "one")
    assert len(result.curve) == 16
    assert max(abs(a - b) for a, b in zip(result.curve, one)) <= 1e-5 * max(one)
    assert not procs.leftover_processes()


@pytest.mark.slow
def test_each_rank_resumes_its_own_random_stream(data_file, tmp_path):
    """Dropout on two ranks: resumed from the checkpoint after step 10, the run repeats the uninterrupted run's
    losses exactly; resumed with rank 0's generators on every rank (a checkpoint of rank 0's state alone), it does
    not."""
    curves = tl.random_stream_resumes(_script(data_file, 20), tmp_path, stop_after=10)
    full = curves["uninterrupted"]
    assert len(full) == 20 and curves["each rank's own stream"] == full
    rank0 = curves["rank 0's stream on every rank"]
    assert rank0[:10] == full[:10] and max(abs(a - b) for a, b in zip(rank0[10:], full[10:])) > 1e-4
    for bad in (7, 20):  # not a checkpoint; the end, where nothing is left to resume
        with pytest.raises(ValueError, match="stop_after"):
            tl.random_stream_resumes(_script(data_file, 20), tmp_path / "bad", stop_after=bad)
    with pytest.raises(ValueError, match="dropout"):
        tl.random_stream_resumes(_script(data_file, 20), tmp_path / "bad", stop_after=10, dropout=0.0)


def test_dropout_is_checked():
    with pytest.raises(ValueError, match="dropout"):
        ts.parse_args(["--run-dir", "r", "--dropout", "1.0"])


# ----------------------------------------------------------------------------------------------
# the pipeline


def _writer(name):
    def write(workdir):
        (workdir / name).write_text(name)

    write.__name__ = f"write_{name}"
    return write


def _steps(**over):
    steps = {
        "a": orch.Step("a", _writer("a.txt"), ("a.txt",)),
        "b": orch.Step("b", _writer("b.txt"), ("b.txt",), deps=("a",)),
        "c": orch.Step("c", _writer("c.txt"), ("c.txt",), deps=("a",)),
        "d": orch.Step("d", _writer("d.txt"), ("d.txt",), deps=("b", "c")),
    }
    steps.update(over)
    return list(steps.values())


def test_order_puts_dependencies_first_and_refuses_bad_graphs():
    assert orch.pipeline_order(_steps()[::-1]) == ["a", "c", "b", "d"]
    with pytest.raises(ValueError, match="cycle among \\['a', 'b', 'c', 'd'\\]"):
        orch.pipeline_order(_steps(a=orch.Step("a", _writer("a.txt"), ("a.txt",), deps=("d",))))
    with pytest.raises(ValueError, match="depends on \\['z'\\], which are not steps"):
        orch.pipeline_order(_steps(b=orch.Step("b", _writer("b.txt"), ("b.txt",), deps=("z",))))
    with pytest.raises(ValueError, match="unique"):
        orch.pipeline_order(_steps() + [orch.Step("a", _writer("x"), ("x",))])
    with pytest.raises(ValueError, match="at least one output"):
        orch.Step("a", _writer("a"), ())
    with pytest.raises(TypeError, match="outputs"):
        orch.Step("a", _writer("a"), "a.txt")


def test_retries_skips_and_the_record(tmp_path):
    flaky = orch.flaky(_writer("b.txt"), failures=2)
    sleeps = []
    steps = _steps(b=orch.Step("b", flaky, ("b.txt",), deps=("a",), retries=2, retry_delay=0.5))
    first = orch.run_pipeline(steps, tmp_path, sleep=sleeps.append)
    assert [e["status"] for e in first] == ["ran"] * 4 and first[1]["attempts"] == 3 and sleeps == [0.5, 1.0]
    assert "TransientError" in first[1]["errors"][0] and first[1]["outputs"] == {"b.txt": 5}
    assert json.loads((tmp_path / "run_record.json").read_text()) == first
    assert [e["status"] for e in orch.run_pipeline(steps, tmp_path)] == ["skipped"] * 4
    (tmp_path / "c.txt").unlink()  # c runs again, so d (which depends on it) does too; b does not
    assert [e["status"] for e in orch.run_pipeline(steps, tmp_path)] == ["skipped", "skipped", "ran", "ran"]
    assert [e["status"] for e in orch.run_pipeline(steps, tmp_path, force=["a"])] == ["ran"] * 4
    with pytest.raises(ValueError, match="force"):
        orch.run_pipeline(steps, tmp_path, force=["zz"])


def test_a_step_that_keeps_failing_blocks_its_dependents(tmp_path):
    steps = _steps(c=orch.Step("c", orch.flaky(_writer("c.txt"), failures=5), ("c.txt",), deps=("a",), retries=1))
    record = {e["step"]: e for e in orch.run_pipeline(steps, tmp_path, sleep=lambda s: None)}
    assert record["c"]["status"] == "failed" and record["c"]["attempts"] == 2 and len(record["c"]["errors"]) == 2
    assert record["d"]["status"] == "blocked" and record["b"]["status"] == "ran"
    missing = orch.Step("a", lambda workdir: None, ("never.txt",))
    assert orch.run_pipeline([missing], tmp_path)[0]["errors"][0].endswith(
        "without writing ['" + str(tmp_path / "never.txt") + "']"
    )


def test_the_digits_job_runs_in_this_process(tmp_path):
    record = orch.run_pipeline(orch.digits_job(5, hidden=16, export_failures=1), tmp_path)
    assert [(e["step"], e["status"]) for e in record] == [
        ("prepare", "ran"),
        ("train", "ran"),
        ("evaluate", "ran"),
        ("export", "ran"),
    ]
    assert record[-1]["attempts"] == 2
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["steps"] == 5 and 0.0 < metrics["acc"] <= 1.0
    assert set(torch.load(tmp_path / "model.pt", weights_only=True)) == {"state_dict", "hidden", "metrics"}


# ----------------------------------------------------------------------------------------------
# the managed versions, as text


def test_vertex_job_is_built_and_checked():
    job = orch.vertex_custom_job(
        "j",
        image_uri="img",
        script_args=["--run-dir", "/gcs/b/r"],
        machine_type="a2-highgpu-4g",
        accelerator_type="NVIDIA_TESLA_A100",
        accelerator_count=4,
        replica_count=3,
    )
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 2]
    assert "--nproc-per-node=4" in pools[0]["containerSpec"]["command"][-1]
    cpu_only = orch.vertex_custom_job("j", image_uri="img", script_args=[])
    assert len(cpu_only["jobSpec"]["workerPoolSpecs"]) == 1


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda j: j.pop("displayName"), "displayName"),
        (lambda j: j["jobSpec"]["workerPoolSpecs"][0].update(replicaCount=2), "primary replica"),
        (
            lambda j: j["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(machineType="n9-huge"),
            "valid: n1-standard-4",
        ),
        (
            lambda j: j["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(acceleratorType="NVIDIA_GTX_1080"),
            "is unknown; valid: NVIDIA_A100_80GB",
        ),
        (
            lambda j: j["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(acceleratorCount=3),
            "one of \\(1, 2, 4, 8\\)",
        ),
        (lambda j: j["jobSpec"]["workerPoolSpecs"][0].pop("containerSpec"), "exactly one of containerSpec"),
        (
            lambda j: (
                j["jobSpec"]["workerPoolSpecs"][0].update(pythonPackageSpec={"executorImageUri": "x"})
                or j["jobSpec"]["workerPoolSpecs"][0].pop("containerSpec")
            ),
            "pythonPackageSpec.packageUris is missing",
        ),
        (lambda j: j["jobSpec"].update(workerPoolSpecs=[]), "non-empty list"),
    ],
)
def test_vertex_job_problems_are_named(change, message):
    job = orch.vertex_custom_job(
        "j",
        image_uri="img",
        script_args=[],
        machine_type="n1-standard-8",
        accelerator_type="NVIDIA_TESLA_T4",
        accelerator_count=1,
    )
    change(job)
    with pytest.raises(ValueError, match=message):
        orch.validate_vertex_job(job)


def test_the_machine_table_gives_the_machine_types_the_course_always_had():
    """orchestration.MACHINE_TYPES, read from tables/vertex_machines.json, is the dict the module once wrote by hand."""
    before = {
        **{f"n1-standard-{n}": ("N1", (1, 2, 4, 8)) for n in (4, 8, 16, 32, 64, 96)},
        **{f"n1-highmem-{n}": ("N1", (1, 2, 4, 8)) for n in (2, 4, 8, 16, 32, 64, 96)},
        **{f"e2-standard-{n}": (None, ()) for n in (4, 8, 16, 32)},
        **{f"a2-highgpu-{g}g": ("NVIDIA_TESLA_A100", (g,)) for g in (1, 2, 4, 8)},
        "a2-megagpu-16g": ("NVIDIA_TESLA_A100", (16,)),
        **{f"a2-ultragpu-{g}g": ("NVIDIA_A100_80GB", (g,)) for g in (1, 2, 4, 8)},
        "a3-highgpu-8g": ("NVIDIA_H100_80GB", (8,)),
        "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", (8,)),
        **{
            f"g2-standard-{n}": ("NVIDIA_L4", (g,))
            for n, g in ((4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8))
        },
    }
    assert orch.MACHINE_TYPES == before and list(orch.MACHINE_TYPES) == list(before)
    n1 = ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_P4")
    assert orch.ACCELERATORS == tuple(sorted({*n1, *(a for a, _ in before.values() if a and a != "N1")}))
    with pytest.raises(ValueError, match="n1-standard-8 does not take NVIDIA_L4; it takes NVIDIA_TESLA_T4, "):
        orch.vertex_custom_job("j", image_uri="img", script_args=[], accelerator_type="NVIDIA_L4", accelerator_count=1)


def test_cluster_spec_gives_torchrun_its_place():
    spec = {
        "cluster": {"workerpool0": ["m:2222"], "workerpool1": ["w0:2222", "w1:2222"]},
        "task": {"type": "workerpool0", "index": 0},
    }
    assert orch.torchrun_env_from_cluster_spec(spec) == {
        "MASTER_ADDR": "m",
        "MASTER_PORT": "2222",
        "WORLD_SIZE": "3",
        "RANK": "0",
    }
    spec["task"] = {"type": "workerpool1", "index": 0}
    assert orch.torchrun_env_from_cluster_spec(json.dumps(spec))["RANK"] == "1"
    with pytest.raises(ValueError, match="workerpool0"):
        orch.torchrun_env_from_cluster_spec({"cluster": {}, "task": {"type": "workerpool0", "index": 0}})
    spec["task"] = {"type": "workerpool2", "index": 0}
    with pytest.raises(ValueError, match="task.type"):
        orch.torchrun_env_from_cluster_spec(spec)


def test_kubeflow_spec_round_trips_and_problems_are_named():
    spec = orch.kubeflow_pipeline(orch.digits_job(5), name="p", image="img", accelerator="NVIDIA_L4", gpus=1)
    text = orch.to_yaml(spec)
    assert yaml.safe_load(text) == spec
    assert orch.validate_kubeflow_pipeline(text) == ["prepare", "train", "evaluate", "export"]
    assert spec["root"]["dag"]["tasks"]["train"]["retryPolicy"]["maxRetryCount"] == 2
    assert not any(t["cachingOptions"]["enableCache"] for t in spec["root"]["dag"]["tasks"].values())
    args = {k: e["container"]["args"] for k, e in spec["deploymentSpec"]["executors"].items()}
    assert all(a[3] == "/gcs/pipeline-root/{{$.pipeline_job_uuid}}" for a in args.values())  # a folder per run
    assert args["exec-train"][-2:] == ["--steps", "5"]
    with pytest.raises(ValueError, match="root"):
        orch.kubeflow_pipeline(orch.digits_job(5), name="p", image="img", root="relative/dir")
    cases = [
        (lambda s: s.pop("deploymentSpec"), "missing 'deploymentSpec'"),
        (lambda s: s["components"].pop("comp-train"), "component 'comp-train'"),
        (lambda s: s["root"]["dag"]["tasks"]["train"].update(dependentTasks=["nope"]), "not tasks"),
        (lambda s: s["root"]["dag"]["tasks"]["prepare"].update(dependentTasks=["export"]), "cycle"),
        (
            lambda s: s["deploymentSpec"]["executors"]["exec-train"]["container"]["resources"]["accelerator"].update(
                type="TPU_V9"
            ),
            "valid: NVIDIA",
        ),
        (lambda s: s["deploymentSpec"]["executors"]["exec-export"]["container"].pop("image"), "no container image"),
        # a cached step whose inputs are files in a shared folder would be skipped after they change
        (lambda s: s["root"]["dag"]["tasks"]["train"]["cachingOptions"].update(enableCache=True), "declares no inputs"),
    ]
    for change, message in cases:
        broken = yaml.safe_load(text)
        change(broken)
        with pytest.raises(ValueError, match=message):
            orch.validate_kubeflow_pipeline(broken)
    with pytest.raises(ValueError, match="cycle"):
        orch.kubeflow_pipeline(_steps(a=orch.Step("a", _writer("a.txt"), ("a.txt",), deps=("d",))), name="p", image="i")


def test_cluster_env_takes_the_environment_then_cluster_spec_and_never_guesses():
    spec = json.dumps(
        {
            "cluster": {"workerpool0": ["m:2222"], "workerpool1": ["w1:2222", "w2:2222"]},
            "task": {"type": "workerpool1", "index": 1},
        }
    )
    assert orch.cluster_env({"CLUSTER_SPEC": spec}, 3) == {
        "MASTER_ADDR": "m",
        "MASTER_PORT": "2222",
        "WORLD_SIZE": "3",
        "RANK": "2",
    }
    prebuilt = {"MASTER_ADDR": "a", "MASTER_PORT": "1", "WORLD_SIZE": "3", "RANK": "0", "CLUSTER_SPEC": spec}
    assert orch.cluster_env(prebuilt, 3)["MASTER_ADDR"] == "a"  # a PyTorch container's own variables first
    assert orch.cluster_env({}, 1)["WORLD_SIZE"] == "1"  # one machine needs no cluster
    with pytest.raises(ValueError, match="cannot find the others"):
        orch.cluster_env({}, 3)  # the old command ran --nnodes=1 here: 3 replicas training alone
    with pytest.raises(ValueError, match="describes 3 machine"):
        orch.cluster_env({"CLUSTER_SPEC": spec}, 2)


@pytest.mark.slow
def test_vertex_command_runs_torchrun_with_the_cluster_or_stops(tmp_path):
    """The container command itself, run by sh with a stand-in torchrun that prints its arguments."""
    job = orch.vertex_custom_job("j", image_uri="img", script_args=["--run-dir", "/gcs/b/r"], replica_count=2)
    command = job["jobSpec"]["workerPoolSpecs"][1]["containerSpec"]["command"]
    assert command[:2] == ["sh", "-c"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text('#!/bin/sh\necho torchrun "$@"\n')
    (bin_dir / "torchrun").chmod(0o755)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # this environment's Python
    (bin_dir / "python").chmod(0o755)
    root = Path(orch.__file__).resolve().parents[2]
    base = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(root)}
    spec = json.dumps(
        {"cluster": {"workerpool0": ["m:2222"], "workerpool1": ["w:2222"]}, "task": {"type": "workerpool1", "index": 0}}
    )
    ran = subprocess.run(command, env={**base, "CLUSTER_SPEC": spec}, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "--nnodes=2 --node-rank=1 " in ran.stdout and "--master-addr=m --master-port=2222 " in ran.stdout
    alone = subprocess.run(command, env=base, capture_output=True, text=True, timeout=120)
    assert alone.returncode != 0 and "torchrun" not in alone.stdout and "cannot find the others" in alone.stderr


def test_a_container_step_skips_what_its_folder_already_holds(tmp_path, capsys):
    """The Kubeflow container's entry point: a retried step whose outputs exist does not run again."""
    orch._main(["--step", "prepare", "--workdir", str(tmp_path), "--steps", "5"])
    made = (tmp_path / "data.pt").stat().st_mtime_ns
    orch._main(["--step", "prepare", "--workdir", str(tmp_path), "--steps", "5"])
    assert (tmp_path / "data.pt").stat().st_mtime_ns == made and "skipped" in capsys.readouterr().out
