"""course_lib.compression.compare: variants measured side by side and the pure recommendation (notebook 05.4)."""

from __future__ import annotations

import math
import time

import pytest
import torch

from course_lib import data, models, train
from course_lib.compression import compare


def _row(name, file_kib, latency_ms, acc, memory_kib=None, zipped_kib=None, latency1_us=None):
    kib = 2**10
    return compare.Row(
        name,
        1000,
        file_kib * kib,
        (zipped_kib or file_kib) * kib,
        (memory_kib or file_kib) * kib,
        latency_ms / 1e3,
        acc,
        latency1_s=(latency1_us or 10 * latency_ms) / 1e6,
        latency1_p95_s=2 * (latency1_us or 10 * latency_ms) / 1e6,
    )


def _retrained(row):
    return compare.Row(**{**row.__dict__, "retrained": True, "training_s": 1.0})


ROWS = [
    _row("fp32", 400, 2.0, 0.97, latency1_us=50),
    _row("int8", 100, 3.0, 0.968, zipped_kib=90, latency1_us=90),
    _retrained(_row("structured", 200, 1.0, 0.962, latency1_us=30)),
    _retrained(_row("student", 20, 0.2, 0.90, zipped_kib=18, latency1_us=15)),
    _retrained(_row("pruned 90%", 400, 2.0, 0.969, zipped_kib=60, latency1_us=50)),
]


def test_recommend_picks_the_best_on_the_constraint_within_the_accuracy_budget():
    assert compare.best_variant(ROWS, "memory").name == "int8"
    assert compare.best_variant(ROWS, "throughput").name == "structured"  # 0.8 points below the baseline: allowed
    assert compare.best_variant(ROWS, "latency").name == "structured"  # batch 1: 30 us against 50
    assert compare.best_variant(ROWS, "bandwidth").name == "pruned 90%"
    assert compare.best_variant(ROWS, "throughput", max_accuracy_drop=0.1).name == "student"
    assert compare.best_variant(ROWS, "Throughput", max_accuracy_drop=0.0).name == "fp32"  # only the baseline is left
    assert compare.best_variant(ROWS, "memory", baseline="structured", max_accuracy_drop=0.0).name == "int8"
    assert compare.best_variant(ROWS, "memory", max_accuracy_drop=0.1, post_training_only=True).name == "int8"
    assert compare.best_variant(ROWS, "throughput", post_training_only=True).name == "fp32"  # int8 is slower here
    near = [_row("fp32", 400, 2.0, 0.97), _row("slightly faster", 400, 1.8, 0.97)]
    assert compare.best_variant(near, "throughput").name == "fp32"  # 10 % is within timing noise: keep the baseline
    assert compare.best_variant(near, "throughput", min_gain=1.05).name == "slightly faster"


def test_latency_and_throughput_can_pick_different_variants():
    """At batch 1 fixed costs flatten the gains: a variant far faster on a large batch may not be at batch 1."""
    rows = [
        _row("fp32", 400, 2.0, 0.97, latency1_us=50),
        _retrained(_row("wide but shallow", 400, 1.0, 0.97, latency1_us=48)),
        _retrained(_row("few layers", 400, 1.5, 0.97, latency1_us=30)),
    ]
    assert compare.best_variant(rows, "throughput").name == "wide but shallow"
    assert compare.best_variant(rows, "latency").name == "few layers"
    untimed = [compare.Row(**{**r.__dict__, "latency1_s": None}) for r in rows]
    with pytest.raises(ValueError, match="single_calls"):
        compare.best_variant(untimed, "latency")
    assert compare.best_variant(untimed, "throughput").name == "wide but shallow"


def test_recommend_rejects_bad_input():
    with pytest.raises(ValueError, match="accepted values"):
        compare.best_variant(ROWS, "energy")
    with pytest.raises(ValueError, match="max_accuracy_drop"):
        compare.best_variant(ROWS, "memory", max_accuracy_drop=2)
    with pytest.raises(ValueError, match="baseline"):
        compare.best_variant(ROWS, "memory", baseline="nope")
    with pytest.raises(ValueError, match="compare.Row"):
        compare.best_variant([], "memory")
    with pytest.raises(ValueError, match="min_gain"):
        compare.best_variant(ROWS, "memory", min_gain=0.5)
    with pytest.raises(TypeError, match="post_training_only"):
        compare.best_variant(ROWS, "memory", post_training_only="yes")


@pytest.mark.slow
def test_measure_times_and_sizes_every_variant():
    split = data.load_digits()
    torch.manual_seed(0)
    wide, narrow = models.MLP(hidden=[256, 256]), models.MLP(hidden=[32])
    rows = compare.measure(
        {"narrow": narrow, "wide": wide}, split.test, batch_size=64, rounds=1, single_calls=30, baseline="wide"
    )
    assert [r.name for r in rows] == ["wide", "narrow"]
    w, n = rows
    assert w.parameters == sum(p.numel() for p in wide.parameters()) and w.memory_bytes == 4 * w.parameters
    assert n.file_bytes < w.file_bytes and n.latency_s > 0 and 0 <= n.accuracy <= 1
    assert 0 < n.latency1_s <= n.latency1_p95_s and 0 < w.latency1_s <= w.latency1_p95_s
    assert w.accuracy == pytest.approx(train.evaluate(wide, split.test)["acc"])
    table = compare.format_rows(rows)
    assert (
        table.count("\n") == 3
        and "(1.00×)" in table
        and "batch 1" in table
        and table.splitlines()[2].startswith("| 1 |")
    )
    untimed = compare.measure({"narrow": narrow}, split.test, batch_size=8, rounds=1, single_calls=0)
    assert untimed[0].latency1_s is None and "batch 1" not in compare.format_rows(untimed)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        compare.measure({"x": "model"}, split.test)
    with pytest.raises(ValueError, match="baseline"):
        compare.measure({"wide": wide}, split.test, rounds=1, baseline="fp32")


def test_tradeoff_chart_draws_one_labelled_point_per_variant():
    from course_lib import plots

    fig, ax = plots.tradeoff_chart(ROWS, title="Smaller is not always faster")
    assert len(ax.texts) == len(ROWS) and ax.get_xscale() == "log"
    with pytest.raises(TypeError, match="compare.Row"):
        plots.tradeoff_chart([object()], title="x")
    with pytest.raises(ValueError, match="compare.Row"):
        plots.tradeoff_chart([], title="x")
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_time_calls_times_single_calls_interleaved():
    order = []

    def fn(name, seconds):
        def run():
            order.append(name)
            time.sleep(seconds)

        return run

    t = compare._time_calls({"slow": fn("slow", 0.002), "fast": fn("fast", 0.0)}, calls=20, warmup=2)
    assert t["slow"].calls == t["fast"].calls == 20 and len(order) == 44
    assert order[:4] == ["slow", "fast", "fast", "slow"], "each round calls all, in a rotating order"
    assert t["slow"].median_s >= 0.002 > t["fast"].median_s and t["slow"].p95_s >= t["slow"].median_s >= t["slow"].min_s
    assert t["slow"].tail >= 1
    with pytest.raises(ValueError, match="calls"):
        compare._time_calls({"a": fn("a", 0)}, calls=5)
    with pytest.raises(ValueError, match="non-empty"):
        compare._time_calls({})
    with pytest.raises(TypeError):
        compare._time_calls({"a": 1})


def test_call_timing_tail_is_p95_over_median():
    assert compare.CallTiming(1e-5, 3e-5, 9e-6, 100).tail == pytest.approx(3.0)


def test_accuracy_difference_counts_digit_by_digit():
    x = torch.eye(4)
    y = torch.tensor([0, 1, 2, 3])
    right = torch.nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        right.weight.copy_(torch.eye(4))
    wrong_on_two = torch.nn.Linear(4, 4, bias=False)
    with torch.no_grad():
        wrong_on_two.weight.copy_(torch.eye(4)[[1, 0, 2, 3]])  # swaps the answers of the first two
    d = compare.accuracy_difference(right, wrong_on_two, torch.utils.data.TensorDataset(x, y))
    assert (d.a_only, d.b_only, d.n) == (2, 0, 4) and d.delta == 0.5
    assert d.noise == pytest.approx(2 * math.sqrt(2) / 4) and d.within_noise  # 2 of 4: no evidence either way
    same = compare.accuracy_difference(right, right, torch.utils.data.TensorDataset(x, y))
    assert same.delta == 0 and same.noise == 0 and same.within_noise
    big = compare.Difference(a_only=40, b_only=10, n=450)
    assert big.delta == pytest.approx(30 / 450) and not big.within_noise
    with pytest.raises(TypeError, match="TensorDataset"):
        compare.accuracy_difference(right, right, [(x, y)])
    with pytest.raises(TypeError, match="b must"):
        compare.accuracy_difference(right, "model", torch.utils.data.TensorDataset(x, y))


def test_label_groups_share_a_label_only_where_points_would_overlap():
    pts = [(1000, 100), (1010, 101), (20, 30), (300, 300), (310, 100)]
    assert compare.label_groups(pts) == [[0, 1], [2], [3], [4]]
    assert compare.label_groups(pts, min_gap=0.4) == [[0, 1, 4], [2], [3]]
    assert compare.label_groups([(5, 5)]) == [[0]]
    assert compare.label_groups([(1, 1), (2, 1)], logx=False, logy=False) == [[0], [1]]
    with pytest.raises(ValueError, match="log axis"):
        compare.label_groups([(0, 1), (1, 2)])
    with pytest.raises(ValueError, match="pairs"):
        compare.label_groups([1, 2])
    with pytest.raises(ValueError, match="min_gap"):
        compare.label_groups(pts, min_gap=0)


def test_build_variants_applies_every_technique_and_leaves_the_baseline_alone():
    from course_lib.compression import quantization

    split = data.load_digits()
    torch.manual_seed(0)
    base = models.MLP(hidden=[64, 64])
    before = {k: v.clone() for k, v in base.state_dict().items()}
    v = compare.build_variants(base, split, rank=8, student_hidden=8, finetune_epochs=1, student_epochs=1)
    assert all(torch.equal(before[k], base.state_dict()[k]) for k in before)
    names = list(v)
    assert names[0] == "fp32 baseline" and not v[names[0]].retrained
    assert {
        "90% pruned, fine-tuned",
        "50% units removed, fine-tuned",
        "rank 8, fine-tuned",
        "student, 8 units, distilled",
        "student, 8 units, alone",
    } <= set(names)
    assert (
        ("int8 dynamic (torchao)" in v)
        == ("90% pruned + int8 weights" in v)
        == (quantization.torchao_problem() is None)
    )
    assert all(v[n].retrained and v[n].training_s > 0 for n in names if "torchao" not in n and n != names[0])
    from course_lib.compression import size

    assert size.sparsity(v["90% pruned, fine-tuned"].model) == pytest.approx(0.9, abs=0.01)
    assert v["50% units removed, fine-tuned"].model[0].out_features == 32
    # the control: the same student, trained alone from the same initial weights, differs only by the teacher
    distilled, alone = v["student, 8 units, distilled"].model, v["student, 8 units, alone"].model
    torch.manual_seed(0)
    start = models.MLP(64, 8, 10)
    twin = models.MLP(64, 8, 10)
    twin.load_state_dict(start.state_dict())
    train.fit(twin, split.train, epochs=1, lr=3e-3, seed=0, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(alone.state_dict().values(), twin.state_dict().values()))
    assert not all(torch.equal(a, b) for a, b in zip(alone.state_dict().values(), distilled.state_dict().values()))
    if "90% pruned + int8 weights" in v:
        combo = quantization.dequantized_weights(v["90% pruned + int8 weights"].model)
        pruned = [m.weight for m in v["90% pruned, fine-tuned"].model.modules() if isinstance(m, torch.nn.Linear)]
        assert all(torch.equal(q == 0, p == 0) for q, p in zip(combo, pruned)), "int8 keeps the pruned zeros exact"
        assert size.compressed_bytes(v["90% pruned + int8 weights"].model) < 0.5 * size.compressed_bytes(
            v["int8 weights (torchao)"].model
        )
    with pytest.raises(TypeError, match="baseline"):
        compare.build_variants("model", split)
    with pytest.raises(ValueError, match="temperature"):
        compare.build_variants(base, split, temperature=0)


def test_predicted_bytes_and_flops_match_what_is_measured_and_counted():
    from course_lib import timing
    from course_lib.compression import quantization, size

    torch.manual_seed(0)
    base = models.MLP(hidden=[128, 128])
    x = torch.randn(32, 64)
    variants = {"fp32": base, "half": models.MLP(hidden=[64, 64])}
    if quantization.torchao_problem() is None:
        variants["int8"] = quantization.int8_weight_only(base)
    pred = compare.predict(variants, batch_size=32)
    for name, model in variants.items():
        if name == "int8":  # the count gives each row 5 bytes (scale, zero point); this torchao may store other
            rows = 128 + 128 + 10
            missed = rows * (quantization.row_bytes(model) - quantization.ROW_BYTES)
            assert size.memory_bytes(model) - pred[name].memory_bytes == missed, name
        else:
            assert pred[name].memory_bytes == size.memory_bytes(model), name
    assert pred["fp32"].flops == timing.count_flops(base, x) and pred["half"].flops == timing.count_flops(
        variants["half"], x
    )
    with pytest.raises(ValueError, match="batch_size"):
        compare.predict(variants, batch_size=0)
