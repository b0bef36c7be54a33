"""Tests of course_lib.parallel.pipeline and .tensor_parallel (notebook 06.2) and plots.timeline_chart.

Most tests are single-process: the bubble formula, the schedules, the simulation, the stage split. Two
launches prove what one process cannot: model parallelism by hand and a library 1F1B step equal one process
(one launch runs both checks through a small test worker), and DTensor tensor parallelism halves the weights.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib import comm
from course_lib.parallel import pipeline, tensor_parallel

WIDTHS = [16, 32, 32, 8]


# ----------------------------------------------------------------------------------------------
# the cost model


@pytest.mark.parametrize("p, m, expected", [(1, 1, 0.0), (2, 1, 0.5), (2, 2, 1 / 3), (4, 4, 3 / 7), (8, 56, 7 / 63)])
def test_bubble_fraction(p, m, expected):
    assert pipeline.bubble_fraction(p, m) == pytest.approx(expected)


@pytest.mark.parametrize("p, m, name", [(0, 4, "stages"), (2, 0, "micro_batches"), (-1, 1, "stages")])
def test_bubble_fraction_rejects_below_one(p, m, name):
    with pytest.raises(ValueError, match=name):
        pipeline.bubble_fraction(p, m)


def test_bubble_fraction_rejects_non_integers():
    with pytest.raises(TypeError):
        pipeline.bubble_fraction(2.5, 4)


def test_schedule_orders():
    assert pipeline.schedule_order("gpipe", 2, 2) == [[("F", 0), ("F", 1), ("B", 0), ("B", 1)]] * 2
    one = pipeline.schedule_order("1f1b", 3, 4)
    assert one[2] == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    assert one[0][:3] == [("F", 0), ("F", 1), ("F", 2)]
    for order in one:  # every pass once
        assert sorted(order) == sorted([("F", i) for i in range(4)] + [("B", i) for i in range(4)])
    with pytest.raises(ValueError, match="kind"):
        pipeline.schedule_order("zero-bubble", 2, 2)
    with pytest.raises(ValueError, match="micro_batches"):
        pipeline.schedule_order("gpipe", 2, 0)


@pytest.mark.parametrize("kind", pipeline.KINDS)
@pytest.mark.parametrize("p, m", [(2, 1), (2, 4), (3, 5), (4, 8)])
def test_simulated_balanced_pipeline_matches_the_formula(kind, p, m):
    t = pipeline.simulate(kind, m, [1.0] * p)
    assert t.idle_fraction == pytest.approx(pipeline.bubble_fraction(p, m))
    assert t.span_s == pytest.approx((m + p - 1) * 3.0)


def test_1f1b_holds_fewer_activations_than_gpipe():
    assert pipeline.simulate("gpipe", 8, [1.0] * 4).max_in_flight() == [8] * 4
    assert pipeline.simulate("1f1b", 8, [1.0] * 4).max_in_flight() == [4, 3, 2, 1]


def test_simulated_imbalance_by_hand():
    # stage 0: F 6, B 12; stage 1: F 2, B 4; m = 4 -> rank 0 ends its last backward at 78 (worked out by hand)
    t = pipeline.simulate("gpipe", 4, [6.0, 2.0])
    assert t.span_s == pytest.approx(78.0)
    assert t.idle_fraction == pytest.approx(1 - 96 / 156)
    with pytest.raises(ValueError, match="backward_s"):
        pipeline.simulate("gpipe", 4, [1.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="forward_s"):
        pipeline.simulate("gpipe", 4, [])


def test_link_time_delays_the_receiving_stage():
    assert pipeline.simulate("gpipe", 1, [1.0, 1.0], link_s=0.5).span_s == pytest.approx(6.0 + 1.0)


def test_timeline_measures_idle_and_pass_times():
    t = pipeline.Timeline([[("F", 0, 10.0, 11.0), ("B", 0, 13.0, 15.0)], [("F", 0, 11.0, 12.0), ("B", 0, 12.0, 13.0)]])
    assert t.span_s == 5.0 and t.busy_s() == [3.0, 2.0]
    assert t.idle_fraction == pytest.approx(0.5)
    assert t.idle_per_rank() == pytest.approx([0.4, 0.6])
    assert t.pass_times() == ([1.0, 1.0], [2.0, 1.0])
    assert t.shifted().start == 0.0


# ----------------------------------------------------------------------------------------------
# splitting


def test_partition_is_optimal_and_contiguous():
    assert pipeline.partition([1, 1, 1, 1], 2) == [(0, 2), (2, 4)]
    assert pipeline.partition([5, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 6)]
    assert pipeline.partition([1, 2, 3], 3) == [(0, 1), (1, 2), (2, 3)]
    costs = [3, 1, 4, 1, 5, 9, 2, 6]
    bounds = pipeline.partition(costs, 3)
    worst = max(sum(costs[a:b]) for a, b in bounds)
    brute = min(max(sum(costs[:i]), sum(costs[i:j]), sum(costs[j:])) for i in range(1, 7) for j in range(i + 1, 8))
    assert worst == brute and bounds[0][0] == 0 and bounds[-1][1] == len(costs)


def test_more_stages_than_layers_is_a_value_error():
    with pytest.raises(ValueError, match=r"stages=5 is more than the 4 layers"):
        pipeline.partition([1, 1, 1, 1], 5)
    with pytest.raises(ValueError, match="more than the 5 layers"):
        pipeline.split_model(pipeline.mlp_stack(WIDTHS), 6)
    with pytest.raises(TypeError, match="nn.Sequential"):
        pipeline.split_model(tensor_parallel.MLPBlock(4, 8), 2)


def test_layer_costs_by_params_and_flops():
    model = pipeline.mlp_stack(WIDTHS)
    assert pipeline.layer_costs(model, "params") == [16 * 32 + 32, 0, 32 * 32 + 32, 0, 32 * 8 + 8]
    flops = pipeline.layer_costs(model, "flops", example=torch.zeros(5, 16))
    assert flops[0] == 2 * 5 * 16 * 32 and flops[4] == 2 * 5 * 32 * 8
    with pytest.raises(TypeError, match="example"):
        pipeline.layer_costs(model, "flops")
    with pytest.raises(ValueError, match="by"):
        pipeline.layer_costs(model, "bytes")
    parts = pipeline.split_model(model, 2)
    assert sum(len(p) for p in parts) == len(model) and parts[0][0] is model[0]


def test_mlp_stack_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    a, b = pipeline.mlp_stack(WIDTHS, seed=3), pipeline.mlp_stack(WIDTHS, seed=3)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not isinstance(a[-1], nn.ReLU)
    with pytest.raises(ValueError, match="widths"):
        pipeline.mlp_stack([4])


# ----------------------------------------------------------------------------------------------
# tensor parallel (pure parts)


def test_tensor_parallel_bytes_and_link_table():
    assert tensor_parallel.predicted_param_bytes(256, 1024, 2) == 4 * ((256 * 1024 * 2 + 1024) // 2 + 256)
    with pytest.raises(ValueError, match="divisible"):
        tensor_parallel.predicted_param_bytes(4, 10, 3)
    rows = tensor_parallel.allreduce_vs_compute(8192, 4096, 16384, 8, links=("nvlink4", "pcie4-x16"))
    assert rows[0]["ratio"] < 1 < rows[1]["ratio"]
    assert rows[1]["allreduce_s"] / rows[0]["allreduce_s"] == pytest.approx(450.0 / 31.51)
    with pytest.raises(ValueError, match="peak"):
        tensor_parallel.allreduce_vs_compute(8, 4, 8, 2, accelerator="tpu-v4", dtype="fp64")


# ----------------------------------------------------------------------------------------------
# real processes (one launch each)


def both_checks(x: torch.Tensor, y: torch.Tensor) -> dict:
    """Test worker: model parallelism by hand, then a library 1F1B step, in one launch."""
    return {
        "by_hand": pipeline.model_parallel_step(WIDTHS, x, y),
        "1f1b": pipeline.library_pipeline_step(WIDTHS, x, y, 4, "1f1b"),
    }


@pytest.mark.slow
def test_model_and_pipeline_parallel_equal_one_process():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, WIDTHS[0], generator=gen), torch.randint(0, WIDTHS[-1], (16,), generator=gen)
    one = pipeline.reference_step(pipeline.mlp_stack(WIDTHS), x, y)
    ranks = comm.launch(both_checks, 2, x, y)
    for key in ("by_hand", "1f1b"):
        grads = {**ranks[0][key]["grads"], **ranks[1][key]["grads"]}
        assert sorted(grads) == sorted(one["grads"])
        assert ranks[1][key]["loss"] == pytest.approx(one["loss"], abs=1e-6)
        for name, g in one["grads"].items():
            torch.testing.assert_close(grads[name], g, rtol=1e-5, atol=1e-6)
    assert ranks[0]["by_hand"]["bytes_sent"] == 16 * 32 * 4 == ranks[1]["by_hand"]["bytes_sent"]


@pytest.mark.slow
def test_tensor_parallel_equals_one_process_with_half_the_weights():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    one = tensor_parallel.reference(tensor_parallel.MLPBlock(8, 16), x)
    ranks = comm.launch(tensor_parallel.tensor_parallel_step, 2, 8, 16, x)
    for r in ranks:
        torch.testing.assert_close(r["output"], one["output"])
        torch.testing.assert_close(r["input_grad"], one["input_grad"])
        for name, g in one["grads"].items():
            torch.testing.assert_close(r["grads"][name], g)
        assert r["param_bytes"] == tensor_parallel.predicted_param_bytes(8, 16, 2) < one["param_bytes"]
        assert r["forward_comms"] == {"all_reduce": 1} == r["backward_comms"]


@pytest.mark.slow
def test_measure_schedules_small():
    settings = [dict(kind="gpipe", micro_batches=2), dict(kind="1f1b", micro_batches=2, layers=[1, 1])]
    ranks = comm.launch(
        pipeline.measure_schedules, 2, settings, repeats=1, micro_batch=8, width=32, warmup=0, threads_per_rank=1
    )
    measured = pipeline.timelines(ranks, settings)
    assert [len(reps) for reps in measured] == [1, 1]
    t = measured[0][0]
    assert [len(rank) for rank in t.intervals] == [4, 4] and 0 < t.idle_fraction < 1
    rows = pipeline.bubble_rows(measured)
    assert rows[0]["formula"] == pytest.approx(1 / 3) and rows[1]["kind"] == "1f1b"
    # the memory run: what autograd keeps per micro-batch (one 8 x 32 fp32 activation per layer) follows the schedule
    act = {(a["label"], a["rank"]): a for a in pipeline.activation_rows(ranks, settings, micro_batch=8, width=32)}
    one = 8 * 32 * 4
    assert act["gpipe, m=2", 0]["after_pass"] == [4 * one, 8 * one, 4 * one, 0]  # F0 F1 B0 B1, 4 layers
    assert act["gpipe, m=2", 0]["model_after_pass"] == act["gpipe, m=2", 0]["after_pass"]
    assert act["1f1b, m=2, layers (1, 1)", 1]["after_pass"] == [
        one + 4,
        0,
        one + 4,
        0,
    ]  # last stage, F B F B: + the loss
    assert act["gpipe, m=2", 1]["after_pass"][-1] == 0  # no received activation's gradient left behind
    assert all(a["peak_bytes"] >= a["measured_bytes"] for a in act.values())
    with pytest.raises(comm.RankError, match="layers"):
        comm.launch(
            pipeline.measure_schedules,
            2,
            [dict(kind="gpipe", micro_batches=1, layers=[1])],
            repeats=1,
            width=8,
            micro_batch=2,
        )


# ----------------------------------------------------------------------------------------------
# the plot


def test_timeline_chart():
    import matplotlib

    matplotlib.use("Agg")
    from course_lib import plots

    t = pipeline.simulate("1f1b", 3, [1.0, 1.0])
    fig, ax = plots.timeline_chart({"1F1B": t.intervals}, title="who computes when", unit="s")
    assert len(ax.get_yticks()) == 2
    with pytest.raises(ValueError, match="unit"):
        plots.timeline_chart({"a": t.intervals}, title="x", unit="h")
    with pytest.raises(ValueError, match="non-empty"):
        plots.timeline_chart({}, title="x")
    with pytest.raises(ValueError, match="pass"):
        plots.timeline_chart({"a": [[("X", 0, 0.0, 1.0)]]}, title="x")
    import matplotlib.pyplot as plt

    plt.close("all")


def test_partial_output_is_what_a_missing_all_reduce_leaves():
    """The ranks' partial sums add up to the block's output (with the bias once): each alone is far from it."""
    block = tensor_parallel.MLPBlock(16, 32, seed=0)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    whole = block(x).detach()
    parts = [tensor_parallel.partial_output(block, x, r, 2) for r in (0, 1)]
    assert torch.allclose(parts[0] + parts[1] - block.down.bias, whole, atol=1e-5)
    assert float((parts[0] - whole).abs().max()) > 1e-2
    with pytest.raises(ValueError, match="rank must be below"):
        tensor_parallel.partial_output(block, x, 2, 2)
    with pytest.raises(ValueError, match="do not split evenly"):
        tensor_parallel.partial_output(block, x, 0, 3)


def test_notebook_06_2_split_and_link_table():
    """What notebook 06.2 prints as computed, not measured: the best two-way split of the digits MLP (against
    every cut), more stages than layers refused, and the catalog's tensor-parallel link table."""
    model = pipeline.mlp_stack([64, 128, 128, 64, 10], seed=0)
    for by in ("params", "flops"):
        costs = pipeline.layer_costs(list(model), by, example=torch.zeros(128, 64))
        bounds = pipeline.partition(costs, 2)
        brute = min(max(sum(costs[:c]), sum(costs[c:])) for c in range(1, len(costs)))
        assert bounds == [(0, 3), (3, 7)] and max(sum(costs[a:b]) for a, b in bounds) == brute
    with pytest.raises(ValueError, match="stages=8"):
        pipeline.split_model(model, stages=8)
    rows = tensor_parallel.allreduce_vs_compute(tokens=8192, dim=4096, hidden=16384, world_size=8)
    assert rows[0]["ratio"] < 1 < rows[1]["ratio"]
    assert tensor_parallel.predicted_param_bytes(256, 1024, 2) == 1_051_648
