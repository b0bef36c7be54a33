"""course_lib.benchmark.monitor (notebook 07.2): resource sampling, the profiler's bottleneck, TensorBoard."""

import json
import time

import pytest
import torch

from course_lib import models
from course_lib.benchmark import monitor


@pytest.mark.parametrize(
    "name, category",
    [
        ("aten::mm", "compute"),
        ("aten::addmm", "compute"),
        ("aten::bmm", "compute"),
        ("aten::mkldnn_convolution", "compute"),
        ("aten::convolution_backward", "compute"),
        ("aten::copy_", "memory"),
        ("aten::cat", "memory"),
        ("aten::add_", "memory"),
        ("aten::empty", "memory"),
        ("aten::threshold_backward", "memory"),
        ("c10d::allreduce_", "communication"),
        ("gloo:all_reduce", "communication"),
        ("nccl:all_reduce", "communication"),
        ("record_param_comms", "communication"),
        ("Optimizer.step#SGD.step", "overhead"),
        ("autograd::engine::evaluate_function: AddmmBackward0", "overhead"),
        ("forward", "overhead"),
    ],
)
def test_op_category(name, category):
    assert monitor.op_category(name) == category


def test_op_category_rejects_non_strings():
    with pytest.raises(TypeError, match="name must be a str"):
        monitor.op_category(3)


@pytest.mark.slow
def test_sampler_sees_busy_cpu_and_memory_growth():
    with monitor.ResourceSampler(interval=0.05) as rs:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:  # one busy thread
            pass
        block = torch.ones(64 * 2**20 // 4)  # 64 MiB, written, so resident
        time.sleep(0.12)
    s = rs.summary()
    assert s["samples"] >= 4 and len(rs.series("rss_bytes")) == s["samples"]
    assert s["process_cpu_mean_percent"] > 20, s  # a busy Python thread, even on a loaded machine
    assert s["rss_growth_bytes"] >= 40 * 2**20, s
    assert "not CUDA" in s["gpu"] and rs.samples[-1].gpu_allocated_bytes is None
    assert all(0 <= c <= 100.0001 for x in rs.samples for c in x.core_percent)
    del block


def test_sampler_bad_input():
    with pytest.raises(ValueError, match="interval"):
        monitor.ResourceSampler(interval=0)
    with pytest.raises(TypeError, match="interval"):
        monitor.ResourceSampler(interval="fast")
    with pytest.raises(ValueError, match="no samples yet"):
        monitor.ResourceSampler().summary()
    with pytest.raises(ValueError, match="field_name"):
        monitor.ResourceSampler().series("watts")


@pytest.mark.slow
def test_resource_use_plot_labels_axes():
    import matplotlib

    from course_lib import plots

    matplotlib.use("Agg")
    with monitor.ResourceSampler(interval=0.02) as rs:
        time.sleep(0.06)
    fig, axes = plots.resource_use({"idle": rs}, title="idle")
    assert [a.get_ylabel() for a in axes] == ["% of one core", "MiB"]
    assert all("(s)" in a.get_xlabel() for a in axes)
    with pytest.raises(ValueError, match="runs"):
        plots.resource_use({})
    matplotlib.pyplot.close("all")


def _batches(n, batch=32, features=16):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, features, generator=g), torch.randint(0, 4, (batch,), generator=g)) for _ in range(n)]


def test_profile_labels_every_phase_and_writes_a_trace(tmp_path):
    model = models.MLP(16, 32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []

    def communicate(m):  # stands in for an all-reduce
        calls.append(1)
        for p in m.parameters():
            p.grad.mul_(1.0)

    prof = monitor.profile_training_step(
        model, _batches(3), opt, steps=2, warmup=1, communicate=communicate, trace_dir=tmp_path, trace_name="t"
    )
    assert len(calls) == 3 and prof.steps == 2
    names = {e.get("name") for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]}
    assert {"input", "step", "forward", "communication"} <= names
    assert any(n.startswith("Optimizer.step#SGD") for n in names if n)
    assert sum(prof.seconds.values()) == pytest.approx(prof.wall_s, rel=1e-6)
    assert set(prof.seconds) == set(monitor.CATEGORIES) and set(prof.phases) == set(monitor.LABELS)
    assert prof.seconds["communication"] > 0 and prof.phases["backward"] > 0 and prof.phases["optimizer"] > 0
    assert prof.bottleneck in monitor.CATEGORIES and "<- bottleneck" in prof.table()


def test_profile_bad_input(tmp_path):
    model = models.MLP(16, 8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="ran out"):
        monitor.profile_training_step(model, _batches(2), opt, steps=2, warmup=1, trace_dir=tmp_path)
    with pytest.raises(ValueError, match="steps"):
        monitor.profile_training_step(model, _batches(2), opt, steps=0)
    with pytest.raises(ValueError, match="trace_name"):
        monitor.profile_training_step(model, _batches(2), opt, trace_name="../x")
    with pytest.raises(TypeError, match="communicate"):
        monitor.profile_training_step(model, _batches(2), opt, communicate=3)
    with torch.profiler.profile() as p:
        torch.ones(2) + 1
    with pytest.raises(ValueError, match="no 'input' or 'step' region"):
        monitor.find_bottleneck(p)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["slow-input", "big-matmuls"])
def test_single_process_scenarios_find_their_designed_bottleneck(name, tmp_path):
    prof = monitor.run_scenario(name, steps=2, trace_dir=tmp_path)
    assert prof.bottleneck == monitor.SCENARIOS[name].designed, prof.table()
    assert (tmp_path / f"{name}.json").exists()


@pytest.mark.slow
def test_communication_scenario_finds_communication(tmp_path):
    prof = monitor.run_scenario("tiny-batch-ddp", steps=2, trace_dir=tmp_path)
    # communication is the notebook's designed bottleneck (52-80 % of a step on an idle machine), but its share
    # depends on how fast this CPU computes (a CI host once measured 28 % with compute at 63 ms a step). What does
    # not: the step's communication costs about the bare all-reduce of its gradients, timed beside it (best of 3),
    # where a skipped all-reduce would cost nothing
    comm_s = prof.seconds["communication"] / prof.steps
    assert comm_s / prof.extra["allreduce_s"] > 0.5, (comm_s, prof.extra["allreduce_s"], prof.table())
    assert prof.shares["communication"] > 0.15, prof.table()
    assert prof.extra["grad_bytes"] == 4 * prof.extra["params"] and prof.extra["world_size"] == 2
    # rank 1 is only printed by the notebook: on a loaded machine its step can look compute-bound (it waits less
    # when rank 0 is the slow one), so the test asks only that communication is a real part of it
    assert prof.extra["other_rank"]["shares"]["communication"] > 0.15, prof.extra["other_rank"]
    assert (tmp_path / "tiny-batch-ddp-rank0.json").exists()


def test_hidden_share_merges_queued_buckets_and_clips_to_the_computation():
    assert monitor.hidden_share([], (0.0, 1.0)) == (0.0, 0.0)
    total, share = monitor.hidden_share([(0.5, 2.0), (1.0, 3.0)], (0.0, 1.5))  # merged: 0.5-3.0, 1.0 of it inside
    assert total == pytest.approx(2.5) and share == pytest.approx(0.4)
    assert monitor.hidden_share([(2.0, 3.0)], (0.0, 1.0)) == (1.0, 0.0)  # after the computation, as by hand
    assert monitor.hidden_share([(0.2, 0.4)], (0.0, 1.0))[1] == 1.0
    with pytest.raises(ValueError, match="compute"):
        monitor.hidden_share([(0.0, 1.0)], (1.0, 0.0))
    with pytest.raises(ValueError, match="comm"):
        monitor.hidden_share([(2.0, 1.0)], (0.0, 1.0))


@pytest.mark.slow
def test_ddp_overlaps_its_all_reduces_with_backward_and_by_hand_does_not():
    r = monitor.ddp_overlap(batches=(64,), steps=2)[0]
    hand, ddp = r["per_method"]["by hand"], r["per_method"]["DDP"]
    assert hand["hidden"] == 0.0 and hand["buckets"] == 6  # six blocking all-reduces, after backward
    assert 1 <= ddp["buckets"] < 6 and ddp["hidden"] > 0.0, ddp  # bucketed, launched during backward
    for m in (hand, ddp):  # the bare exchange of the gradients takes time in both (a skipped one would not)
        assert m["comm_s"] > 0 and m["backward_s"] > 0 and m["step_s"] >= m["backward_s"]
    assert r["grad_bytes"] == 4 * models.count_parameters(models.MLP(512, [2048, 2048], 10))
    assert r["other_rank"]["rank"] == 1


def test_ddp_overlap_bad_arguments():
    with pytest.raises(ValueError, match="batches"):
        monitor.ddp_overlap(batches=(0,))
    with pytest.raises(ValueError, match="batches"):
        monitor.ddp_overlap(batches=())
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        monitor.ddp_overlap(bucket_cap_mb=0)


def test_run_scenario_bad_name():
    with pytest.raises(ValueError, match="slow-input"):
        monitor.run_scenario("gpu-starved")


def test_tensorboard_round_trip(tmp_path):
    run = monitor.tensorboard_log(tmp_path, epochs=2)
    back = monitor.read_scalars(run.run_dir)
    assert (
        set(back)
        == set(run.scalars)
        >= {"train/loss", "test/accuracy", "speed/examples_per_s", "resources/cpu_percent", "resources/rss_mib"}
    )
    for tag, points in run.scalars.items():
        assert [s for s, _ in back[tag]] == [s for s, _ in points]
        assert [v for _, v in back[tag]] == pytest.approx([v for _, v in points], rel=1e-6)  # stored as float32
    assert len(run.scalars["train/loss"]) == run.steps and len(run.scalars["test/accuracy"]) == 2
    again = monitor.tensorboard_log(tmp_path, epochs=1)  # the folder holds the latest run only
    assert len(monitor.read_scalars(again.run_dir)["test/accuracy"]) == 1
    text = monitor.tensorboard_instructions(tmp_path)
    assert f"tensorboard --logdir {tmp_path}" in text and "%load_ext tensorboard" in text


def test_tensorboard_bad_input(tmp_path):
    with pytest.raises(ValueError, match="run_name"):
        monitor.tensorboard_log(tmp_path, run_name="a/b")
    with pytest.raises(ValueError, match="epochs"):
        monitor.tensorboard_log(tmp_path, epochs=0)
    with pytest.raises(ValueError, match="event files"):
        monitor.read_scalars(tmp_path)


@pytest.mark.slow
def test_sample_training_sees_the_model_and_adam_state():
    rs, n = monitor.sample_training(1, width=512, steps=2, interval=0.02)
    s = rs.summary()
    assert n == models.count_parameters(models.MLP(1024, [512, 512], 10))
    assert s["rss_growth_bytes"] >= 0.9 * 16 * n, (s["rss_growth_bytes"], 16 * n)  # weights, grads, Adam's 2 moments
    assert s["samples"] >= 2 and s["other_programs_cores"] >= 0
    # held after the run: weights (SGD), + 2 moments (Adam); a second Adam run, past the first run's one-time buffers
    sgd = monitor.sample_training(1, width=512, steps=2, interval=0.02, optimizer="sgd")[0].summary()
    adam = monitor.sample_training(1, width=512, steps=2, interval=0.02)[0].summary()
    if adam["allocator_trimmed"] and sgd["allocator_trimmed"]:
        assert abs(sgd["rss_held_bytes"] / (4 * n) - 1) < 0.1, sgd["rss_held_bytes"] / n
        assert abs((adam["rss_held_bytes"] - sgd["rss_held_bytes"]) / (8 * n) - 1) < 0.1, adam["rss_held_bytes"] / n
    with pytest.raises(ValueError, match="after the run"):
        monitor.ResourceSampler().measure_held()
    with pytest.raises(ValueError, match="threads"):
        monitor.sample_training(0)
    with pytest.raises(ValueError, match="optimizer"):
        monitor.sample_training(1, optimizer="adamw")


@pytest.mark.slow
def test_release_free_memory_runs_anywhere():
    assert monitor.release_free_memory() in (True, False)


def test_step_flops_matches_torch_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    widths, batch = [16, 32, 24, 4], 8
    model = models.MLP(widths[0], widths[1:-1], widths[-1])
    x, y = torch.randn(batch, widths[0]), torch.randint(0, 4, (batch,))
    with FlopCounterMode(display=False) as fc:  # the input needs no gradient: layer 1 has no dX product
        torch.nn.functional.cross_entropy(model(x), y).backward()
    assert fc.get_total_flops() == monitor.step_flops(batch, widths)
    assert monitor.step_flops(256, [1024, 2048, 2048, 10]) == 2 * 256 * (3 * 6_311_936 - 1024 * 2048)
    with pytest.raises(ValueError, match="widths"):
        monitor.step_flops(8, [16])


@pytest.mark.slow
def test_big_matmuls_model_times_forward_and_backward_products(tmp_path):
    prof = monitor.run_scenario("big-matmuls", steps=1, trace_dir=tmp_path, device="cpu")
    e = prof.extra
    assert e["flops"] == monitor.step_flops(256, [1024, 2048, 2048, 10])
    assert e["matmul_s"] == pytest.approx(e["matmul_forward_s"] + e["matmul_backward_s"])
    assert 0.8 < e["matmul_backward_s"] / e["matmul_forward_s"] < 4  # 1.67x the work


def test_run_scenario_ddp_is_cpu_only():
    with pytest.raises(ValueError, match="cpu"):
        monitor.run_scenario("tiny-batch-ddp", device=torch.device("meta"))


def test_gpu_utilization_reader_prefers_torch_then_nvidia_smi_by_uuid(monkeypatch):
    from types import SimpleNamespace

    from course_lib.benchmark.monitor import resources

    dev = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "utilization", lambda d=None: 42)
    assert resources._gpu_utilization_reader(dev)() == 42.0

    def no_nvml(d=None):
        raise ModuleNotFoundError("nvidia-ml-py does not seem to be installed")

    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    monkeypatch.setattr(resources.shutil, "which", lambda name: None)
    assert resources._gpu_utilization_reader(dev) is None
    calls = []
    monkeypatch.setattr(resources.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(uuid="1234-abcd"))
    monkeypatch.setattr(
        resources.subprocess, "run", lambda args, **kw: calls.append(args) or SimpleNamespace(stdout="37\n")
    )
    assert resources._gpu_utilization_reader(dev)() == 37.0
    assert "--id=GPU-1234-abcd" in calls[0]
