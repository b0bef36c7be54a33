"""Tests of course_lib.comm: the local launcher and notebook 03's worker functions.

Ranks fork from a server that has imported torch once, so a launch costs ~0.1 s after the first.
The interrupt tests run a small script in a fresh interpreter, so a Ctrl-C can arrive while the
first launch is still starting up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from course_lib import comm as d
from course_lib.comm import launcher
from course_lib.procs import is_running
from course_lib.procs import leftover_processes as leftover_children

HERE = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------------------------
# input validation (no processes are started)


def test_lambda_is_rejected_with_a_helpful_message():
    with pytest.raises(TypeError, match=r"put the function in a \.py module.*course_lib\.comm"):
        d.launch(lambda: 1, 2)


def test_nested_function_is_rejected():
    def inner():
        return 1

    with pytest.raises(TypeError, match="nested functions"):
        d.launch(inner, 2)


def test_main_module_function_is_rejected():
    def f():
        return 1

    f.__module__ = "__main__"
    f.__qualname__ = "f"
    with pytest.raises(TypeError, match="notebook cell"):
        d.launch(f, 1)


def test_not_callable_is_rejected():
    with pytest.raises(TypeError, match="fn must be a callable"):
        d.launch("demo_rank_sum", 1)


@pytest.mark.parametrize("bad", [0, -1, 10_000])
def test_bad_world_size(bad):
    with pytest.raises(ValueError, match="world_size"):
        d.launch(d.demo_rank_sum, bad)


def test_world_size_must_be_int():
    with pytest.raises(TypeError, match="world_size"):
        d.launch(d.demo_rank_sum, 2.0)


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"backend must be one of \('gloo', 'nccl'\)"):
        d.launch(d.demo_rank_sum, 2, backend="mpi")


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() >= 2, reason="has 2 GPUs")
def test_nccl_without_gpus():
    with pytest.raises(ValueError, match="nccl"):
        d.launch(d.demo_rank_sum, 2, backend="nccl")


@pytest.mark.parametrize("kw", [{"timeout": 0}, {"timeout": -1.0}, {"threads_per_rank": 0}, {"startup_timeout": 0}])
def test_bad_launch_options(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        d.launch(d.demo_rank_sum, 1, **kw)


def test_one_backend_rule(monkeypatch):
    monkeypatch.setattr(launcher.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(launcher.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(launcher.dist, "is_nccl_available", lambda: True)
    assert launcher.choose_backend("auto", 2, auto=True) == "nccl"  # a GPU for every process on this machine
    assert launcher.choose_backend("auto", 3, auto=True) == "gloo"
    assert launcher.choose_backend(" NCCL ", 2) == "nccl" and launcher.choose_backend("gloo", 8) == "gloo"
    with pytest.raises(ValueError, match="one CUDA GPU per rank"):
        launcher.choose_backend("nccl", 3)
    with pytest.raises(ValueError, match=r"one of \('gloo', 'nccl'\)"):
        launcher.choose_backend("auto", 1)  # launch never guesses
    monkeypatch.setattr(launcher.dist, "is_nccl_available", lambda: False)
    assert launcher.choose_backend("auto", 1, auto=True) == "gloo"


@pytest.mark.parametrize(
    "addr, backend, expected",
    [
        ("127.0.0.1", "gloo", "lo-test"),
        ("localhost", "gloo", "lo-test"),
        ("10.0.0.1", "gloo", None),
        (None, "gloo", None),
    ],
)
def test_one_interface_rule(monkeypatch, addr, backend, expected):
    """gloo listens on the loopback interface when the master is on this machine's loopback; elsewhere it chooses."""
    joined = []
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "recorded, so that the test's own setting is undone too")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    monkeypatch.setattr(launcher, "loopback_interface", lambda: "lo-test")
    monkeypatch.setattr(launcher.dist, "init_process_group", lambda *a, **k: joined.append((a, k)))
    device = launcher.init_process_group(
        backend, "store", rank=1, world_size=2, local_rank=1, timeout=5, master_addr=addr
    )
    assert device == torch.device("cpu") and os.environ.get("GLOO_SOCKET_IFNAME") == expected
    ((args, kwargs),) = joined
    assert args == (backend,) and kwargs["rank"] == 1 and kwargs["timeout"].total_seconds() == 5


def test_unpicklable_argument():
    with pytest.raises(TypeError, match="picklable"):
        d.launch(d.demo_rank_sum, 1, lambda: 0)


def test_rank_info_outside_a_job():
    with pytest.raises(RuntimeError, match="launch"):
        d.rank_info()


@pytest.mark.parametrize(
    "free, logical, expected",
    [
        (2, 2, {1: 2, 2: 1, 4: 1}),  # an idle 2-core machine
        (1, 2, {1: 1, 2: 1, 4: 1}),  # the same with one core busy
        (8, 16, {1: 8, 2: 4, 3: 2, 4: 2, 16: 1}),
    ],
)
def test_threads_per_rank_split_the_free_cores(monkeypatch, free, logical, expected):
    monkeypatch.setattr(launcher, "_free_physical_cores", lambda: free)
    monkeypatch.setattr(launcher, "_logical_cores", lambda: logical)
    assert {w: d.default_threads_per_rank(w) for w in expected} == expected
    assert d.max_world_size() == min(64, 4 * logical)
    with pytest.raises(ValueError, match=f"at most {min(64, 4 * logical)}"):
        d.launch(d.demo_rank_sum, 4 * logical + 1)


def test_allreduce_sizes_span_1kb_to_64mb_in_steps_of_4():
    sizes = d.ALLREDUCE_SIZES
    assert sizes[0] == 1024 and sizes[-1] == 64 * 2**20
    assert all(b == 4 * a for a, b in zip(sizes, sizes[1:]))


# ----------------------------------------------------------------------------------------------
# launching


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_launch_returns_results_in_rank_order(world_size):
    out = d.launch(d.demo_rank_sum, world_size)
    total = float(sum(range(1, world_size + 1)))
    assert out == [(r, world_size, total) for r in range(world_size)]
    assert leftover_children() == []
    stats = d.last_launch_stats()
    assert stats["outcome"] == "ok" and stats["world_size"] == world_size
    assert d.port_is_free(stats["port"])


@pytest.mark.slow
def test_rank_info_inside_a_job():
    out = d.launch(d.demo_rank_info, 2, threads_per_rank=1)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["world_size"] == 2 and o["backend"] == "gloo" and o["device"] == "cpu" for o in out)
    assert all(o["num_threads"] == 1 for o in out)
    assert out[0]["master_port"] == out[1]["master_port"] == d.last_launch_stats()["port"]


@pytest.mark.slow
def test_ring_all_reduce_matches_library_on_2_and_3_ranks():
    sizes = [1, 2, 7, 1000, 1001, 2**16 + 3]  # 1 and 2 are smaller than 3 ranks: empty chunks
    for world_size in (2, 3):
        per_rank = d.launch(d.check_ring_against_library, world_size, sizes, seed=3)
        assert len(per_rank) == world_size
        for rows in per_rank:
            assert [r["size"] for r in rows] == sizes
            for r in rows:
                assert r["allclose"], f"ring all-reduce differs from dist.all_reduce: {r}"
                assert r["max_abs_diff"] < 1e-4


@pytest.mark.slow
def test_ring_all_reduce_on_one_rank_is_a_copy():
    (rows,) = d.launch(d.check_ring_against_library, 1, [1, 5])
    assert all(r["max_abs_diff"] == 0.0 and r["allclose"] for r in rows)


@pytest.mark.slow
def test_rank_that_dies_without_reporting():
    # os._exit is importable (posix._exit): the rank exits with code 3 at once, printing nothing itself
    # (some torch builds log a warning while a rank starts: then that is the output shown)
    with pytest.raises(d.RankError, match="exited with code 3") as info:
        d.launch(os._exit, 1, 3)
    assert "printed nothing" in str(info.value) or "Its last output:" in str(info.value)
    assert info.value.error_type == "ChildExited"
    assert leftover_children() == []


@pytest.mark.slow
def test_rank_that_crashes_while_importing_shows_its_own_error_output():
    import crash_at_import

    with pytest.raises(d.RankError) as info:
        d.launch(crash_at_import.work, 2)
    err = info.value
    assert err.error_type == "ChildExited" and "exited with code 7" in str(err)
    assert "dying while being imported, on purpose" in str(err)  # the tail of the rank's own stderr
    assert leftover_children() == []


@pytest.mark.slow
def test_rank_whose_module_raises_at_import_reports_the_traceback():
    import raise_at_import

    with pytest.raises(d.RankError) as info:
        d.launch(raise_at_import.work, 1)
    assert info.value.error_type == "ImportError" and "raise_at_import.py" in info.value.traceback_text


@pytest.mark.slow
def test_a_rank_may_start_dataloader_workers():
    out = d.launch(d.demo_dataloader_sum, 2, n=256, num_workers=2)
    assert [o["total"] for o in out] == [2 * sum(range(256))] * 2  # every rank summed 0..255
    for o in out:
        assert len(o["worker_pids"]) == 2 and all(pid != 0 for pid in o["worker_pids"])
        assert not any(is_running(pid) for pid in o["worker_pids"])
    assert leftover_children() == []


@pytest.mark.slow
def test_timeout_kills_what_a_hung_rank_started():
    with tempfile.TemporaryDirectory() as tmp:
        pid_file = os.path.join(tmp, "pids")
        with pytest.raises(d.LaunchTimeout) as info:
            d.launch(d.demo_subprocess_then_hang, 2, pid_file, rank_to_hang=1, timeout=3)
        assert info.value.unfinished == [1]
        rank_pid, grandchild = (int(v) for v in Path(pid_file).read_text().split())
    for pid in (rank_pid, grandchild):
        assert not is_running(pid), pid
    assert leftover_children() == []


@pytest.mark.slow
def test_startup_timeout():
    with pytest.raises(d.LaunchTimeout) as info:
        d.launch(d.demo_rank_sum, 2, startup_timeout=0.001)
    assert info.value.phase == "startup" and info.value.unfinished == [0, 1]
    assert "startup_timeout" in str(info.value)
    assert leftover_children() == []


@pytest.mark.slow
def test_ctrl_c_while_running_stops_every_rank():
    # from another thread, like a Jupyter interrupt arriving while launch waits for the ranks
    d.launch(d.demo_rank_sum, 2)  # the forkserver is up: the job below starts at once
    timer = threading.Timer(1.5, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            d.launch(d.demo_sleep_on_rank, 2, rank_to_sleep=1, seconds=3600, timeout=600)
    finally:
        timer.cancel()
    stats = d.last_launch_stats()
    assert stats["outcome"] == "interrupted" and stats["startup_s"] is not None  # it was running
    assert stats["total_s"] < 600, "Ctrl-C must stop the job, not its timeout"
    assert leftover_children() == []


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.3, 1.5, 3.0])
def test_ctrl_c_during_startup_in_a_fresh_interpreter(delay):
    """A fresh interpreter's first launch starts the forkserver (imports torch, 2-4 s): interrupt it
    at several moments and check that the script stops and leaves no process behind."""
    script = subprocess.Popen(
        [sys.executable, str(HERE / "interrupt_me.py"), "launch"], stdout=subprocess.PIPE, text=True, cwd=HERE
    )
    try:
        assert script.stdout.readline().strip() == "ready"
        time.sleep(delay)
        seen = [p.pid for p in psutil.Process(script.pid).children(recursive=True)]
        script.send_signal(signal.SIGINT)
        out, _ = script.communicate(timeout=60)
    finally:
        if script.poll() is None:
            script.kill()
    assert "interrupted" in out, out
    # the script is gone; what it started may need a moment to notice and exit (longer on a busy machine)
    deadline = time.monotonic() + 10
    while (alive := [pid for pid in seen if is_running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive == [], f"processes left 10 s after the interrupted script exited: {alive}"


@pytest.mark.slow
def test_failing_rank_raises_rank_error_and_cleans_up():
    with pytest.raises(d.RankError) as info:
        d.launch(d.demo_raise_on_rank, 2, rank_to_fail=1, error="ValueError", timeout=30)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.rank == 1 and err.error_type == "ValueError"
    assert "rank 1" in str(err) and "ValueError" in str(err) and "failed on purpose" in str(err)
    assert "Traceback" in err.traceback_text
    assert leftover_children() == []
    port = d.last_launch_stats()["port"]
    assert d.port_is_free(port)
    # an immediate second launch works
    assert d.launch(d.demo_rank_sum, 2) == [(0, 2, 3.0), (1, 2, 3.0)]


@pytest.mark.slow
def test_hung_rank_times_out_and_cleans_up():
    with pytest.raises(d.LaunchTimeout) as info:
        d.launch(d.demo_sleep_on_rank, 2, rank_to_sleep=1, seconds=600, timeout=3)
    err = info.value
    assert isinstance(err, TimeoutError)
    assert err.unfinished == [1] and err.phase == "run"
    assert "[1]" in str(err) and "timeout=3" in str(err)
    stats = d.last_launch_stats()
    assert stats["outcome"] == "timeout" and 3 <= stats["run_s"] < 600  # the timeout, not the sleep, ended it
    assert leftover_children() == []
    assert d.port_is_free(d.last_launch_stats()["port"])


@pytest.mark.slow
def test_allreduce_benchmark_rows():
    sizes = [1024, 4096, 2**20]
    out = d.launch(d.allreduce_benchmark, 2, sizes, repeats=3, warmup=1)
    assert out[0] == out[1], "every rank returns the same (slowest-rank) times"
    rows = out[0]
    assert [r["bytes"] for r in rows] == sizes
    for r in rows:
        assert len(r["times"]) == 3 and 0 < min(r["times"]) <= r["seconds"] <= r["median_s"] and r["world_size"] == 2
        assert r["algbw_Bps"] == pytest.approx(r["bytes"] / r["seconds"])
        assert r["busbw_Bps"] == pytest.approx(r["algbw_Bps"])  # 2 (N-1) / N = 1 for N = 2
        assert 0 < r["cpu_s"] < 10 * 2 * r["median_s"] + 0.01  # both ranks' CPU time: positive, of the op's order


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="the OS keeps no per-process byte counts")
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_allreduce_benchmark_counts_the_bytes_a_ring_sends(world_size):
    rows = d.launch(d.allreduce_benchmark, world_size, [4, 4 * 2**20], repeats=2, warmup=1)[0]
    ring = 2 * (world_size - 1) / world_size  # what each rank sends, as a share of the message
    assert rows[1]["bytes_sent"] == pytest.approx(ring * rows[1]["bytes"], rel=0.01)
    assert 0 < rows[0]["bytes_sent"] < 1000  # 4 bytes of data plus message headers


@pytest.mark.slow
def test_data_parallel_step_keeps_the_copies_equal_and_times_its_parts():
    out = d.measure_data_parallel(2, in_features=32, hidden=64, layers=2, batch_size=8, steps=3, warmup=1)
    assert out["same_weights"], "the averaged gradients must give every rank the same weights"
    assert out["n_params"] == (32 * 64 + 64) + (64 * 64 + 64) + (64 * 10 + 10)
    assert out["grad_bytes"] == 4 * out["n_params"]
    for key in ("compute_s", "step_s", "comm_s", "comm_alone_s", "comm_over_alone"):
        assert out[key] > 0, key
    assert out["wait_s"] >= 0
    assert out["speedup"] == pytest.approx(2 * out["compute_s"] / out["step_s"])
    assert 0 < out["comm_share"] < 1
    assert out["copy_s"] >= 0
    assert 0 < out["compute_in_job_s"] < out["step_s"]  # timed inside the step, not inferred from it
    assert set(out["split_s"]) == {"compute", "wait", "copy", "comm"}
    assert sum(out["split_s"].values()) == pytest.approx(out["step_s"])  # the split adds up to the step
    assert all(v >= 0 for v in out["split_s"].values())
    if out["sent_per_grad_byte"] is not None:  # Linux counts the bytes: 2 ranks send the gradients' bytes once each
        assert out["sent_per_grad_byte"] == pytest.approx(1.0, rel=0.15)  # plus gloo's few headers on a small model


@pytest.mark.slow
def test_partner_idle_ranks_move_the_bytes_but_do_not_compute():
    config = dict(in_features=32, hidden=64, layers=2, batch_size=8, steps=3, warmup=1)
    ranks = d.launch(d.data_parallel_benchmark, 2, threads_per_rank=1, partner_idle=True, **config)
    busy, idle = ranks
    assert all(c > 0 for c in busy["compute_s"])  # rank 0 computes every step
    assert max(idle["compute_s"]) < min(busy["compute_s"])  # the other rank only waits, copies, all-reduces
    assert len(idle["comm_s"]) == len(busy["comm_s"]) == 3 and all(c > 0 for c in idle["comm_s"])
    if idle["sent_bytes"][0] is not None:  # the same traffic as a computing rank: the gradients' bytes once
        assert idle["sent_bytes"][0] == pytest.approx(idle["grad_bytes"], rel=0.15)
    assert idle["max_weight_diff"] > 0  # only rank 0 updates: the weights part, as the docstring says
    with pytest.raises(TypeError, match="partner_idle"):
        d.measure_data_parallel(2, partner_idle="yes", **config)


@pytest.mark.slow
def test_the_same_job_under_ddp_keeps_the_ranks_equal():
    out = d.measure_ddp(2, in_features=32, hidden=64, layers=2, batch_size=8, steps=3, warmup=1)
    assert out["same_weights"], "DDP averages the gradients: every rank must end with the same weights"
    assert out["compute_s"] > 0 and out["step_s"] > 0
    assert out["speedup"] == pytest.approx(2 * out["compute_s"] / out["step_s"])
    with pytest.raises(TypeError, match="bogus"):
        d.measure_ddp(2, bogus=1)
    with pytest.raises(ValueError, match="world_size"):
        d.measure_ddp(1)


@pytest.mark.slow
def test_one_rank_step_time_is_the_jobs_baseline_in_a_process_alone():
    c = d.scaling.one_rank_step_time(in_features=16, hidden=16, layers=1, batch_size=4, steps=3)
    assert 0 < c < 1  # seconds: a tiny MLP's step


@pytest.mark.slow
def test_allreduce_benchmark_warms_small_messages_untimed():
    rows = d.launch(d.allreduce_benchmark, 2, [4, 2**20], repeats=2, warmup=0, warm_below=2**10)[0]
    assert all(r["seconds"] > 0 for r in rows)
    with pytest.raises(ValueError, match="warm_below"):
        d.allreduce_benchmark([4], repeats=1, warm_below=-1)  # checked before any process group is needed


@pytest.mark.slow
def test_data_parallel_benchmark_alone_sends_nothing():
    out = d.launch(d.data_parallel_benchmark, 1, in_features=16, hidden=16, layers=1, batch_size=4, steps=2)[0]
    assert len(out["step_s"]) == len(out["solo_s"]) == len(out["comm_s"]) == len(out["alone_s"]) == 2
    assert out["comm_s"] == out["wait_s"] == out["copy_s"] == [0.0, 0.0]  # one rank: nothing to send
    assert all(0 < c <= s for c, s in zip(out["compute_s"], out["step_s"]))  # the step is all compute


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"steps": -1}, ValueError, "steps"),
        ({"hidden": 2.5}, TypeError, "hidden"),
        ({"bogus": 1}, TypeError, "bogus"),
    ],
)
def test_measure_data_parallel_rejects_bad_input_before_launching(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        d.measure_data_parallel(2, **kwargs)
    with pytest.raises(exc, match=match):
        d.scaling.one_rank_step_time(**kwargs)
    with pytest.raises(ValueError, match="world_size"):
        d.measure_data_parallel(1)


# ----------------------------------------------------------------------------------------------
# what notebook 03's claims must tell apart: bytes a naive all-reduce sends, a layer left out of the average


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="the OS keeps no per-process byte counts")
@pytest.mark.parametrize(
    "algorithm, mean, busiest, idlest", [("ring", 1.5, 1.5, 1.5), ("naive", 3.0, 3.0, 3.0), ("root", 1.5, 3.0, 1.0)]
)
def test_allreduce_benchmark_counts_what_each_algorithm_sends_on_4_ranks(algorithm, mean, busiest, idlest):
    rows = d.launch(d.allreduce_benchmark, 4, [2**20], repeats=2, warmup=1, algorithm=algorithm)[0]
    r = rows[0]
    assert r["bytes_sent"] / r["bytes"] == pytest.approx(mean, rel=0.01)
    assert r["bytes_sent_max"] / r["bytes"] == pytest.approx(busiest, rel=0.01)
    assert r["bytes_sent_min"] / r["bytes"] == pytest.approx(idlest, rel=0.01)
    # notebook 03's byte claim judges the busiest rank: reduce-to-root's mean passes, its maximum must not
    held = 1.45 < r["bytes_sent_max"] / r["bytes"] < 1.6 and r["bytes_sent_min"] / r["bytes_sent_max"] > 0.9
    assert held == (algorithm == "ring")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="the OS keeps no per-process byte counts")
def test_allreduce_with_controls_runs_the_library_and_each_control():
    out = d.launch(d.allreduce_with_controls, 4, [2**20, 2**21], repeats=2, control_bytes=2**20)[0]
    assert set(out) == {"library", "root", "naive"}
    assert [r["bytes"] for r in out["library"]] == [2**20, 2**21]
    assert out["root"][0]["bytes_sent_max"] / out["root"][0]["bytes_sent_min"] == pytest.approx(3.0, rel=0.01)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="the OS keeps no per-process byte counts")
def test_the_hand_written_ring_as_a_control_sends_a_rings_bytes_and_the_naive_one_does_not():
    # notebook 03, section 6: the hand-written ring's byte claim (1.45-1.6 from the busiest rank; naive: 3)
    out = d.launch(d.allreduce_with_controls, 4, [2**20], repeats=2, controls=("naive", "ring"))[0]
    assert set(out) == {"library", "naive", "ring"}
    per_byte = {a: out[a][0]["bytes_sent_max"] / out[a][0]["bytes"] for a in ("ring", "naive")}
    assert 1.45 < per_byte["ring"] < 1.6, per_byte
    assert not 1.45 < per_byte["naive"] < 1.6, per_byte


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_root_and_naive_all_reduce_sum_like_the_library(world_size):
    for algorithm in ("root", "naive"):
        rows = d.launch(d.check_ring_against_library, world_size, [1, 1001], algorithm=algorithm)[0]
        assert all(r["allclose"] for r in rows), (algorithm, rows)


@pytest.mark.slow
def test_allreduce_benchmark_rejects_an_unknown_algorithm():
    with pytest.raises(d.RankError, match="algorithm"):
        d.launch(d.allreduce_benchmark, 2, [1024], repeats=1, warmup=0, algorithm="tree")


@pytest.mark.slow
def test_a_layer_left_out_of_the_average_makes_the_weights_differ():
    config = dict(in_features=64, hidden=128, layers=2, batch_size=16, steps=3, warmup=1)
    good = d.measure_data_parallel(2, **config)
    assert good["max_weight_diff"] == 0.0 and good["same_weights"]
    assert good["one_tensor_divergence"] > 0
    for layer in (0, 2):  # the first layer, and the small head
        bad = d.measure_data_parallel(2, skip_layer=layer, **config)
        assert not bad["same_weights"]
        assert bad["max_weight_diff"] > bad["one_tensor_divergence"] / 10
        assert bad["diff_over_sum_not_mean"] > 0.1, "notebook 03's weight claim must fail"


@pytest.mark.slow
def test_the_weights_match_one_process_on_the_whole_batch_and_summed_gradients_do_not():
    config = dict(in_features=64, hidden=128, layers=2, batch_size=16, steps=3, warmup=1)
    good = d.measure_data_parallel(2, **config)
    assert good["sum_not_mean_diff"] > 0
    assert good["diff_over_sum_not_mean"] < 0.01, "averaged gradients must take one process's steps"
    bad = d.measure_data_parallel(2, sum_not_mean=True, **config)
    assert bad["same_weights"], "summed gradients keep the ranks equal: a check between ranks cannot see it"
    assert bad["diff_over_sum_not_mean"] == pytest.approx(1.0, rel=0.05), "notebook 03's no-effect value"
    with pytest.raises(TypeError, match="sum_not_mean"):
        d.measure_data_parallel(2, sum_not_mean=1, **config)


@pytest.mark.parametrize("skip", [-1, 3, 1.5, True])
def test_measure_data_parallel_rejects_a_layer_it_does_not_have(skip):
    with pytest.raises(ValueError, match="skip_layer"):
        d.measure_data_parallel(2, layers=2, skip_layer=skip)
