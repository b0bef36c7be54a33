"""course_lib.parallel.data_parallel: DDP and fully_shard equal one process; the models; bad input."""

from __future__ import annotations

import pytest
import torch

from course_lib import comm
from course_lib.comm import max_world_size
from course_lib.memory import formulas
from course_lib.parallel import data_parallel as dp


def test_global_batches_are_seeded_whole_and_cover_an_epoch_without_repeats():
    a, b = dp.global_batches(5, 64), dp.global_batches(5, 64)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))
    assert all(len(x) == 64 and len(y) == 64 for x, y in a)
    rows = torch.cat([x for x, _ in a])
    assert len(torch.unique(rows, dim=0)) >= len(rows) - 5  # one epoch: (almost) no image twice (digits has duplicates)
    assert len(dp.global_batches(30, 64)) == 30  # more steps than one epoch holds: a second shuffle follows


def test_rank_slices_tile_the_batch():
    batch = (torch.arange(12.0).reshape(12, 1), torch.arange(12))
    parts = [dp.rank_slice(batch, r, 4) for r in range(4)]
    assert torch.equal(torch.cat([p[1] for p in parts]), batch[1])
    with pytest.raises(ValueError, match="evenly"):
        dp.rank_slice(batch, 0, 5)
    with pytest.raises(ValueError, match="rank"):
        dp.rank_slice(batch, 4, 4)


def test_train_single_is_deterministic_and_slices_differ():
    a, b = dp.train_single(steps=4), dp.train_single(steps=4)
    assert a["losses"] == b["losses"] and dp.max_abs_difference(a["params"], b["params"]) == 0.0
    alone = dp.train_single(steps=4, slice_of=(0, 2))
    assert dp.max_abs_difference(a["params"], alone["params"]) > 1e-4
    assert a["n_params"] == 64 * 128 + 128 + 128 * 10 + 10


def test_max_abs_difference_checks_keys_and_shapes():
    x = {"w": torch.zeros(2)}
    assert dp.max_abs_difference(x, {"w": torch.tensor([0.0, -0.5])}) == 0.5
    with pytest.raises(ValueError, match="keys"):
        dp.max_abs_difference(x, {"v": torch.zeros(2)})
    with pytest.raises(ValueError, match="shape"):
        dp.max_abs_difference(x, {"w": torch.zeros(3)})


def test_speedup_model_is_the_interconnect_model_with_core_sharing():
    c, g, bw = 0.05, 10e6, 1e9
    # every rank has a core: exactly comm.data_parallel_speedup
    assert dp.speedup_model(c, g, 2, bw, free_cores=2) == pytest.approx(comm.data_parallel_speedup(c, g, 2, bw))
    # 4 ranks on 2 cores: compute and link both run 2x slower -> half the 4-rank speed-up of a 2x slower link
    comm4 = comm.allreduce_time(g, 4, 0.0, bw / 2)
    assert dp.speedup_model(c, g, 4, bw, free_cores=2) == pytest.approx(4 * c / (2 * c + comm4))
    assert dp.speedup_model(c, g, 1, bw, free_cores=1) == pytest.approx(1.0)
    assert dp.speedup_model(c, g, 4, bw, free_cores=2) < 2  # never beyond the free cores


def test_model_states_formula_matches_zero_stages():
    n = 9610
    assert dp.model_states_formula(n, 4, "ddp") == formulas.model_states_bytes(n, "fp32", "momentum", 0, 4) == 12 * n
    assert dp.model_states_formula(n, 4, "fully_shard") == 3 * -(-4 * n // 4) == 28830
    assert dp.model_states_formula(n, 1, "FULLY_SHARD") == 12 * n


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dp.run_data_parallel(max_world_size() + 1), "world_size"),
        (lambda: dp.run_data_parallel(0), "world_size"),
        (lambda: dp.run_data_parallel(2, steps=0), "steps"),
        (lambda: dp.run_data_parallel(2, steps=-3), "steps"),
        (lambda: dp.run_data_parallel(4, global_batch=66), "evenly"),
        (lambda: dp.run_data_parallel(2, lr=0), "lr"),
        (lambda: dp.run_data_parallel(2, bench={"steps": 0}), "steps"),
        (lambda: dp.run_data_parallel(2, bench={"threads": 2}), "unknown"),
        (lambda: dp.global_batches(0, 64), "steps"),
        (lambda: dp.global_batches(3, 5000), "exceeds"),
        (lambda: dp.train_single(global_batch=0), "global_batch"),
        (lambda: dp.speedup_model(0.1, 1e6, max_world_size() + 1, 1e9, free_cores=2), "world_size"),
        (lambda: dp.speedup_model(0.1, 1e6, 2, 1e9, free_cores=0), "free_cores"),
        (lambda: dp.model_states_formula(100, 2, "zero"), "strategy"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError):
        dp.run_data_parallel(2.5)
    with pytest.raises(TypeError, match="slice_of"):
        dp.train_single(slice_of=[0, 2])


@pytest.mark.slow
def test_ddp_and_fully_shard_on_two_ranks_equal_one_process():
    """The one thing a single process cannot show: 2 real ranks, gradients averaged, the same training."""
    ref = dp.train_single(steps=4, global_batch=32)
    run = dp.run_data_parallel(
        2,
        steps=4,
        global_batch=32,
        bench={"steps": 1, "warmup": 0, "batch_size": 4, "hidden": 16, "in_features": 16, "layers": 1},
    )
    for strategy in dp.STRATEGIES:
        assert max(abs(a - b) for a, b in zip(run[strategy]["losses"], ref["losses"])) < 1e-5
        assert dp.max_abs_difference(run[strategy]["params"], ref["params"]) < 1e-5
    replica, shards = run["memory"]["ddp"], run["memory"]["fully_shard"]
    assert all(m["total"] == 12 * ref["n_params"] for m in replica)  # params + grads + momentum, full copies
    assert sum(m["params"] for m in shards) == 4 * ref["n_params"]  # the shards tile the model
    assert all(m["total"] == dp.model_states_formula(ref["n_params"], 2, "fully_shard") for m in shards)
    assert run["speedup"] > 0 and run["examples_per_s"] > 0


@pytest.mark.slow
def test_memory_per_rank_on_four_ranks_as_notebook_06_1_counts_it():
    """Notebook 06.1 prints these counts: DDP a full replica per rank; fully_shard's shards tile one replica, the
    busiest 2.7 % over 1/4 (the output layer's 10 rows split 3-3-3-1)."""
    run = dp.run_data_parallel(4, steps=2, global_batch=64)
    n = dp.train_single(steps=1, global_batch=64)["n_params"]
    assert n == 9_610 and [m["total"] for m in run["memory"]["ddp"]] == [12 * n] * 4
    shards = [m["total"] for m in run["memory"]["fully_shard"]]
    assert sum(shards) == 12 * n and shards == [29_604] * 3 + [26_508]
    assert dp.model_states_formula(n, 4, "fully_shard") == 28_830
    # the peak of live tensors (torch's FSDPMemTracker / MemTracker) holds the shards and more: the largest layer
    # unsharded, twice (the all-gather output and the unsharded parameters, 64 x 128 + 128 floats each)
    peaks = run["peak_memory"]
    for f, count in zip(peaks["fully_shard"], shards):
        assert f["Total"] > 3 * count
        assert f["All Gather"] == f["Unsharded Param"] == 4 * (64 * 128 + 128)
        assert f["Sharded Param"] + f["Sharded Grad"] + f["OptState"] <= count
    assert all(p["Total"] > 12 * n for p in peaks["ddp"])  # a replica plus activations
    assert max(p["Total"] for p in peaks["fully_shard"]) < min(p["Total"] for p in peaks["ddp"])
    assert run["strong_step_s"] > 0 and run["strong_speedup"] > 0  # the default bench splits 64 over 4 ranks


def test_speedup_model_with_measured_slowdowns():
    c, g, bw = 0.05, 10e6, 1e9
    assert dp.speedup_model(c, g, 2, bw, slowdowns=(1.0, 1.0)) == pytest.approx(comm.data_parallel_speedup(c, g, 2, bw))
    comm4 = comm.allreduce_time(g, 4, 0.0, bw / 2)  # compute 2.5x slower than alone, 1.25x on the link's 2 ranks
    assert dp.speedup_model(c, g, 4, bw, slowdowns=(2.5, 1.25)) == pytest.approx(4 * c / (2.5 * c + comm4))
    with pytest.raises(ValueError, match="free_cores .* or slowdowns"):
        dp.speedup_model(c, g, 2, bw)
    with pytest.raises(TypeError, match="slowdowns"):
        dp.speedup_model(c, g, 2, bw, slowdowns=[1.0, 1.0])
