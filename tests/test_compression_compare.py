"""course_lib.compression.compare: variants measured side by side and the pure recommendation (notebook 05.4)."""
from __future__ import annotations

import pytest
import torch

from course_lib import data, models, train
from course_lib.compression import compare


def _row(name, file_kib, latency_ms, acc, memory_kib=None, zipped_kib=None):
    kib = 2**10
    return compare.Row(name, 1000, file_kib * kib, (zipped_kib or file_kib) * kib, (memory_kib or file_kib) * kib,
                       latency_ms / 1e3, acc)


def _retrained(row):
    return compare.Row(**{**row.__dict__, "retrained": True, "training_s": 1.0})


ROWS = [_row("fp32", 400, 2.0, 0.97), _row("int8", 100, 3.0, 0.968, zipped_kib=90),
        _retrained(_row("structured", 200, 1.0, 0.962)), _retrained(_row("student", 20, 0.2, 0.90, zipped_kib=18)),
        _retrained(_row("pruned 90%", 400, 2.0, 0.969, zipped_kib=60))]


def test_recommend_picks_the_best_on_the_constraint_within_the_accuracy_budget():
    assert compare.recommend(ROWS, "memory").name == "int8"
    assert compare.recommend(ROWS, "latency").name == "structured"  # 0.8 points below the baseline: allowed
    assert compare.recommend(ROWS, "bandwidth").name == "pruned 90%"
    assert compare.recommend(ROWS, "latency", max_accuracy_drop=0.1).name == "student"
    assert compare.recommend(ROWS, "Latency", max_accuracy_drop=0.0).name == "fp32"  # only the baseline is left
    assert compare.recommend(ROWS, "memory", baseline="structured", max_accuracy_drop=0.0).name == "int8"
    assert compare.recommend(ROWS, "memory", max_accuracy_drop=0.1, post_training_only=True).name == "int8"
    assert compare.recommend(ROWS, "latency", post_training_only=True).name == "fp32"  # int8 is slower here
    near = [_row("fp32", 400, 2.0, 0.97), _row("slightly faster", 400, 1.8, 0.97)]
    assert compare.recommend(near, "latency").name == "fp32"  # 10 % is within timing noise: keep the baseline
    assert compare.recommend(near, "latency", min_gain=1.05).name == "slightly faster"


def test_recommend_rejects_bad_input():
    with pytest.raises(ValueError, match="accepted values"):
        compare.recommend(ROWS, "energy")
    with pytest.raises(ValueError, match="max_accuracy_drop"):
        compare.recommend(ROWS, "memory", max_accuracy_drop=2)
    with pytest.raises(ValueError, match="baseline"):
        compare.recommend(ROWS, "memory", baseline="nope")
    with pytest.raises(ValueError, match="compare.Row"):
        compare.recommend([], "memory")
    with pytest.raises(ValueError, match="min_gain"):
        compare.recommend(ROWS, "memory", min_gain=0.5)
    with pytest.raises(TypeError, match="post_training_only"):
        compare.recommend(ROWS, "memory", post_training_only="yes")


@pytest.mark.slow
def test_measure_times_and_sizes_every_variant():
    split = data.load_digits()
    torch.manual_seed(0)
    wide, narrow = models.MLP(hidden=[256, 256]), models.MLP(hidden=[32])
    rows = compare.measure({"narrow": narrow, "wide": wide}, split.test, batch_size=64, rounds=1, baseline="wide")
    assert [r.name for r in rows] == ["wide", "narrow"]
    w, n = rows
    assert w.parameters == sum(p.numel() for p in wide.parameters()) and w.memory_bytes == 4 * w.parameters
    assert n.file_bytes < w.file_bytes and n.latency_s > 0 and 0 <= n.accuracy <= 1
    assert w.accuracy == pytest.approx(train.evaluate(wide, split.test)["acc"])
    table = compare.format_rows(rows)
    assert table.count("\n") == 3 and "(1.00×)" in table
    with pytest.raises(TypeError, match="torch.nn.Module"):
        compare.measure({"x": "model"}, split.test)
    with pytest.raises(ValueError, match="baseline"):
        compare.measure({"wide": wide}, split.test, rounds=1, baseline="fp32")


def test_tradeoff_chart_draws_one_labelled_point_per_variant():
    from course_lib import plots

    fig, ax = plots.tradeoff_chart(ROWS, title="Smaller is not always faster")
    assert len(ax.texts) == len(ROWS) and ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="compare.Row"):
        plots.tradeoff_chart([object()], title="x")
    import matplotlib.pyplot as plt

    plt.close(fig)


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
    assert {"90% pruned, fine-tuned", "50% units removed, fine-tuned", "rank 8, fine-tuned",
            "student, 8 units, distilled"} <= set(names)
    assert ("int8 dynamic (torchao)" in v) == (quantization.torchao_problem() is None)
    assert all(v[n].retrained and v[n].training_s > 0 for n in names if "torchao" not in n and n != names[0])
    from course_lib.compression import size

    assert size.sparsity(v["90% pruned, fine-tuned"].model) == pytest.approx(0.9, abs=0.01)
    assert v["50% units removed, fine-tuned"].model[0].out_features == 32
    with pytest.raises(TypeError, match="baseline"):
        compare.build_variants("model", split)


def test_predicted_bytes_and_flops_match_what_is_measured_and_counted():
    from course_lib import bench
    from course_lib.compression import quantization, size

    torch.manual_seed(0)
    base = models.MLP(hidden=[128, 128])
    x = torch.randn(32, 64)
    variants = {"fp32": base, "half": models.MLP(hidden=[64, 64])}
    if quantization.torchao_problem() is None:
        variants["int8"] = quantization.int8_weight_only(base)
    pred = compare.predict(variants, batch_size=32)
    for name, model in variants.items():
        assert pred[name].memory_bytes == size.memory_bytes(model), name
    assert pred["fp32"].flops == bench.count_flops(base, x) and pred["half"].flops == bench.count_flops(variants["half"], x)
    with pytest.raises(ValueError, match="batch_size"):
        compare.predict(variants, batch_size=0)
