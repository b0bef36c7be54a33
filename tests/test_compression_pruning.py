"""course_lib.compression.pruning: masks, reports, removing units, the sparse format (notebook 05.1)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils import prune

from course_lib import data, models, timing, train
from course_lib.compression import pruning, size


def _mlp(seed: int = 0, hidden=(32, 16)) -> models.MLP:
    torch.manual_seed(seed)
    return models.MLP(64, list(hidden), 10)


# --- magnitude_mask: the reference rule ------------------------------------------------------------


def test_magnitude_mask_by_hand_with_ties():
    w = torch.tensor([[1.0, -1.0, 2.0], [0.5, 1.0, -0.5]])
    # |w| sorted: 0.5 (index 3), 0.5 (index 5), then the three 1.0s: the first in row-major order goes
    assert pruning.magnitude_mask(w, 0.5).tolist() == [[False, True, True], [False, True, False]]
    assert pruning.magnitude_mask(w, 0.0).all()
    assert pruning.magnitude_mask(w, 0.99).sum() == 0  # round(0.99 * 6) = 6
    assert pruning.magnitude_mask(torch.zeros(4), 0.5).tolist() == [False, False, True, True]


def test_magnitude_mask_counts_with_pythons_round():
    w = torch.randn(5)
    assert (~pruning.magnitude_mask(w, 0.5)).sum() == round(2.5) == 2  # halves go to the even number
    assert (~pruning.magnitude_mask(w, 0.7)).sum() == round(3.5) == 4
    for s in (0.1, 0.33, 0.5, 0.9):
        w = torch.randn(7, 11)
        assert int((~pruning.magnitude_mask(w, s)).sum()) == round(s * 77)


def test_magnitude_mask_matches_torch_prune_without_ties():
    for seed in range(5):
        torch.manual_seed(seed)
        layer = nn.Linear(20, 30)
        expected = pruning.magnitude_mask(layer.weight, 0.6)
        prune.l1_unstructured(layer, "weight", amount=0.6)
        assert torch.equal(layer.weight_mask.bool(), expected)


def test_magnitude_mask_keeps_the_largest_and_shape_and_device():
    w = torch.randn(3, 4, 5)
    mask = pruning.magnitude_mask(w, 0.75)
    assert mask.shape == w.shape and mask.dtype == torch.bool
    assert w.abs()[mask].min() >= w.abs()[~mask].max()


def test_magnitude_mask_bad_input():
    with pytest.raises(TypeError, match="weight"):
        pruning.magnitude_mask([[1.0, 2.0]], 0.5)
    for bad in (-0.1, 1.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="sparsity"):
            pruning.magnitude_mask(torch.ones(3), bad)
    with pytest.raises(TypeError, match="sparsity"):
        pruning.magnitude_mask(torch.ones(3), "0.5")
    with pytest.raises(ValueError, match="NaN"):
        pruning.magnitude_mask(torch.tensor([1.0, float("nan")]), 0.5)


# --- masks through torch.nn.utils.prune ------------------------------------------------------------


def test_unstructured_prunes_each_layer_to_the_sparsity():
    model = pruning.prune_unstructured(_mlp(), 0.5)
    report = pruning.sparsity_report(model)
    assert [r.fraction for r in report.layers] == [0.5, 0.5, 0.5]
    assert report.parameters == 64 * 32 + 32 * 16 + 16 * 10
    assert all(hasattr(m, "weight_mask") for m in (model[0], model[2], model[4]))


def test_global_prunes_the_total_and_layers_unevenly():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 10))
    with torch.no_grad():
        model[1].weight.abs_().add_(1)  # every weight of the second layer is larger than any of the first's
    pruning.prune_global(model, 0.5)
    report = pruning.sparsity_report(model)
    assert report.fraction == 0.5 and [r.fraction for r in report.layers] == [1.0, 0.0]


def test_channels_zero_whole_rows_and_their_biases_not_the_output_layer():
    model = pruning.prune_channels(_mlp(), 0.25)
    for layer, units in ((model[0], 32), (model[2], 16)):
        rows = layer.weight.flatten(1).abs().sum(1) == 0
        assert int(rows.sum()) == round(0.25 * units)
        assert torch.all(layer.bias[rows] == 0) and torch.all(layer.bias_mask[~rows] == 1)
    assert not hasattr(model[4], "bias_mask") and (model[4].weight != 0).all(0).sum() == 12  # only columns go
    # the lowest-L2 rows went, the same ones torch's ln_structured picks
    ref = pruning.copy_model(_mlp())
    prune.ln_structured(ref[0], "weight", amount=0.25, n=2, dim=0)
    assert torch.equal(ref[0].weight_mask, model[0].weight_mask)


def test_channels_mask_the_columns_that_read_removed_units():
    """A removed unit outputs 0: the next layer's weights reading it are removed too, and masked, so the zero count
    is what is really gone (9,472 weights of a 64 -> 128 -> 10 MLP all belong to some hidden unit)."""
    torch.manual_seed(0)
    model = pruning.prune_channels(models.MLP(), 0.9)
    report = pruning.sparsity_report(model)
    assert report.zeros == 115 * 64 + 115 * 10 and report.dead == 0
    assert report.fraction == report.removed_fraction == pytest.approx(115 / 128)
    dead_rows = (model[0].weight == 0).all(1)
    assert torch.all(model[2].weight[:, dead_rows] == 0) and torch.all(model[2].weight[:, ~dead_rows] != 0)
    rows_only = pruning.prune_channels(models.MLP(), 0.9, inputs=False)
    assert pruning.sparsity_report(rows_only).zeros == 115 * 64 and not hasattr(rows_only[2], "weight_mask")


def test_channels_rank_the_next_layer_on_its_live_weights():
    torch.manual_seed(1)
    model = _mlp()
    masked = pruning.prune_channels(pruning.copy_model(model), 0.5)
    cols = ~(masked[0].weight == 0).all(1)  # the units of layer 0 that stay
    norms = model[2].weight[:, cols].norm(dim=1)  # layer 2's rows without the columns that read removed units
    assert set(torch.where((masked[2].weight == 0).all(1))[0].tolist()) == set(norms.argsort()[:8].tolist())


def test_sparsity_report_counts_dead_weights_of_torch_row_masks():
    """torch's ln_structured masks a unit's row only: the report finds the next layer's weights that read it."""
    torch.manual_seed(0)
    model = models.MLP()
    prune.ln_structured(model[0], "weight", amount=0.9, n=2, dim=0)
    report = pruning.sparsity_report(model)
    rows = model[0].weight_mask[:, 0] == 0
    # a zero row outputs relu(bias): dead only where the bias is <= 0
    assert report.dead == 10 * int((model[0].bias[rows] <= 0).sum()) and 0 < report.dead < 1150
    prune.custom_from_mask(model[0], "bias", model[0].weight_mask[:, 0])
    report = pruning.sparsity_report(model)
    assert (report.zeros, report.dead, report.removed) == (115 * 64, 115 * 10, 115 * 74)
    assert report.fraction == pytest.approx(7360 / 9472) and report.removed_fraction == pytest.approx(8510 / 9472)
    assert [r.dead for r in report.layers] == [0, 1150] and report.layers[1].removed_fraction == pytest.approx(
        0.898, abs=1e-3
    )
    text = str(report)
    assert "dead" in text and "89.8%" in text and "77.7%" in text and "1,150" in text
    # a unit whose inputs are all zero and whose bias is negative is dead under ReLU, not under Sigmoid
    net = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 4))
    with torch.no_grad():
        net[0].weight[0] = 0
        net[0].bias[0] = -1.0
    assert pruning.sparsity_report(net).dead == 4
    net[1] = nn.Sigmoid()
    report = pruning.sparsity_report(net)
    assert report.dead == 0 and report.traced, "sigmoid(-1) is not 0: the unit still feeds a constant"


def test_channels_on_conv_layers():
    torch.manual_seed(0)
    cnn = pruning.prune_channels(models.SmallCNN(), 0.5, inputs=False)
    report = pruning.sparsity_report(cnn)
    assert [(r.name, r.kind, r.fraction) for r in report.layers] == [
        ("features.0", "Conv2d", 0.5),
        ("features.4", "Conv2d", 0.5),
        ("head", "Linear", 0.0),
    ]
    assert not report.traced and "not counted" in str(report)
    filters = cnn.features[0].weight.flatten(1).abs().sum(1)
    assert int((filters == 0).sum()) == 8
    with pytest.raises(ValueError, match="inputs=False"):
        pruning.prune_channels(models.SmallCNN(), 0.5)


def test_channels_follow_a_conv_chain_through_batchnorm():
    """In a Conv2d chain the removed filter's BatchNorm scale and shift are masked (else it outputs a constant) and
    the next convolution's kernels that read it too; remove_units then computes exactly the same."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 6, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(6, 4, 1),
    )
    with torch.no_grad():
        net[1].bias.uniform_(-1, 1)
        net[1].running_mean.uniform_(-1, 1)
    net.eval()
    masked = pruning.prune_channels(pruning.copy_model(net), 0.5)
    gone = (masked[0].weight == 0).flatten(1).all(1)
    assert int(gone.sum()) == 4 and torch.all(masked[1].weight[gone] == 0) and torch.all(masked[1].bias[gone] == 0)
    assert torch.all(masked[4].weight[:, gone] == 0)
    report = pruning.sparsity_report(masked)
    assert report.dead == 0 and report.layers[1].zeros == 6 * 8 * 9 - 3 * 4 * 9
    small = pruning.remove_units(masked, 0.5)
    x = torch.randn(2, 1, 8, 8)
    assert torch.allclose(small(x), masked(x), atol=1e-6)
    assert models.count_parameters(net) - models.count_parameters(small) == (
        report.removed + 4 + 2 * 4 + 3
    )  # weights + conv biases + BatchNorm scale and shift + the second conv's biases


def test_channels_refuse_what_they_cannot_follow():
    with pytest.raises(ValueError, match="Sigmoid"):
        pruning.prune_channels(nn.Sequential(nn.Linear(4, 4), nn.Sigmoid(), nn.Linear(4, 2)), 0.5)
    with pytest.raises(ValueError, match="affine"):
        pruning.prune_channels(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4, affine=False), nn.Linear(4, 2)), 0.5)
    pruning.prune_channels(nn.Sequential(nn.Linear(4, 4), nn.Sigmoid(), nn.Linear(4, 2)), 0.5, inputs=False)
    with pytest.raises(TypeError, match="inputs"):
        pruning.prune_channels(_mlp(), 0.5, inputs="yes")


def test_report_text_and_totals():
    report = pruning.sparsity_report(pruning.prune_unstructured(_mlp(), 0.5))
    text = str(report)
    assert "total" in text and "50.0%" in text and "2,720" in text
    assert report.zeros == 1360 and report.fraction == 0.5


def test_fine_tuning_keeps_the_mask_and_make_permanent_bakes_it():
    split = data.load_digits(fraction=0.3)
    model = pruning.prune_global(_mlp(), 0.8)
    zeros = model[0].weight == 0
    train.fit(model, split.train, epochs=2, lr=1e-2, progress=False)
    w = pruning.effective_weight(model[0])
    assert torch.all(w[zeros] == 0) and pruning.sparsity_report(model).fraction == pytest.approx(0.8, abs=1e-3)
    keys = set(model.state_dict())
    assert "0.weight_orig" in keys and "0.weight_mask" in keys
    x = split.test.tensors[0][:8]
    before = model(x)
    pruning.make_permanent(model)
    assert set(model.state_dict()) == set(_mlp().state_dict())
    assert torch.allclose(model(x), before) and isinstance(model[0].weight, nn.Parameter)
    assert pruning.sparsity_report(model).fraction == pytest.approx(0.8, abs=1e-3)
    pruning.make_permanent(model)  # nothing left to remove: no error


def test_effective_weight_is_current_after_an_optimizer_step():
    model = pruning.prune_unstructured(_mlp(), 0.5)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.randn(4, 64)).sum().backward()
    opt.step()  # weight_orig changed; the stored .weight is the one of the last forward pass
    expected = model[0].weight_orig * model[0].weight_mask
    assert torch.equal(pruning.effective_weight(model[0]), expected)
    assert not torch.equal(model[0].weight, expected)


def test_copy_model_works_on_pruned_models():
    model = pruning.prune_global(_mlp(), 0.5)
    model(torch.randn(2, 64))
    with pytest.raises(RuntimeError):
        copy.deepcopy(model)
    twin = pruning.copy_model(model)
    x = torch.randn(3, 64)
    assert torch.equal(twin(x), model(x)) and twin[0].weight_orig is not model[0].weight_orig


def test_pruning_bad_input():
    for fn, arg in (
        (pruning.prune_unstructured, "sparsity"),
        (pruning.prune_global, "sparsity"),
        (pruning.prune_channels, "fraction"),
        (pruning.remove_units, "fraction"),
    ):
        for bad in (-0.5, 1.0, 2):
            with pytest.raises(ValueError, match=arg):
                fn(_mlp(), bad)
        with pytest.raises(TypeError, match="model"):
            fn("not a model", 0.5)
    with pytest.raises(TypeError, match="model"):
        pruning.sparsity_report(42)
    with pytest.raises(TypeError, match="model"):
        pruning.make_permanent(None)
    with pytest.raises(ValueError, match="no Linear or Conv2d"):
        pruning.prune_global(nn.Sequential(nn.ReLU()), 0.5)
    with pytest.raises(ValueError, match="n must"):
        pruning.prune_channels(_mlp(), 0.5, n=0)


# --- remove_units: really smaller --------------------------------------------------------------------


def test_remove_units_shapes_and_parameter_count():
    small = pruning.remove_units(_mlp(hidden=(100, 50)), 0.5)
    assert [tuple(m.weight.shape) for m in small if isinstance(m, nn.Linear)] == [(50, 64), (25, 50), (10, 25)]
    assert models.count_parameters(small) == 64 * 50 + 50 + 50 * 25 + 25 + 25 * 10 + 10
    assert isinstance(small, nn.Sequential) and small(torch.randn(3, 64)).shape == (3, 10)


def test_remove_units_equals_the_channel_masks():
    model = _mlp()
    x = torch.randn(16, 64)
    masked = pruning.prune_channels(pruning.copy_model(model), 0.5)
    for source in (model, masked):  # from the dense model or from the masked one: the same units go
        small = pruning.remove_units(source, 0.5)
        assert torch.allclose(small(x), masked(x), atol=1e-6)
    assert models.count_parameters(pruning.remove_units(model, 0.0)) == models.count_parameters(model)


def test_remove_units_removes_exactly_what_the_report_counts():
    for hidden, fraction in (((32, 16), 0.5), ((128,), 0.9), ((20, 30, 10), 0.3)):
        model = _mlp(hidden=hidden)
        masked = pruning.prune_channels(pruning.copy_model(model), fraction)
        biases = sum(int((pruning.effective_weight(m, "bias") == 0).sum()) for m in masked if isinstance(m, nn.Linear))
        fewer = models.count_parameters(model) - models.count_parameters(pruning.remove_units(masked, fraction))
        assert fewer == pruning.sparsity_report(masked).removed + biases, hidden


def test_remove_units_leaves_the_input_model_alone_and_keeps_one_unit():
    model = _mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tiny = pruning.remove_units(model, 0.99)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert [m.out_features for m in tiny if isinstance(m, nn.Linear)] == [1, 1, 10]


def test_remove_units_conv_chain_with_batchnorm():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 6, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(6, 4, 1),
    ).eval()
    small = pruning.remove_units(net, 0.5)
    assert [m.out_channels for m in small if isinstance(m, nn.Conv2d)] == [4, 3, 4]
    assert small[1].num_features == 4 and small[1].running_mean.shape == (4,)
    assert small(torch.randn(2, 1, 8, 8)).shape == (2, 4, 4, 4)


def test_remove_units_refuses_other_shapes():
    with pytest.raises(ValueError, match="nn.Sequential"):
        pruning.remove_units(models.SmallCNN(), 0.5)
    with pytest.raises(ValueError, match="layer 1"):
        pruning.remove_units(nn.Sequential(nn.Linear(4, 4), nn.Flatten(), nn.Linear(4, 2)), 0.5)
    with pytest.raises(ValueError, match="not both"):
        pruning.remove_units(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(4, 2)), 0.5)
    with pytest.raises(ValueError, match="at least two"):
        pruning.remove_units(nn.Sequential(nn.Linear(4, 2)), 0.5)
    with pytest.raises(ValueError, match="groups"):
        pruning.remove_units(nn.Sequential(nn.Conv2d(2, 2, 3, groups=2), nn.Conv2d(2, 2, 1)), 0.5)


# --- the sparse format ---------------------------------------------------------------------------------


def test_sparse_linear_computes_the_same():
    model = pruning.prune_global(_mlp(), 0.9)
    sparse = pruning.to_sparse(model)
    x = torch.randn(7, 64)
    assert torch.allclose(sparse(x), model(x), atol=1e-5)
    layer = sparse[0]
    assert isinstance(layer, pruning.SparseLinear) and layer.weight.layout == torch.sparse_csr
    assert layer.weight.values().numel() == int((model[0].weight != 0).sum())
    assert sparse(torch.randn(2, 3, 64)).shape == (2, 3, 10)
    assert "format=CSR" in repr(sparse)
    assert hasattr(model[0], "weight_mask"), "to_sparse works on a copy"
    with pytest.raises(TypeError, match="linear"):
        pruning.SparseLinear(nn.Conv2d(1, 1, 1))


def test_useful_flops_and_csr_formula():
    model = pruning.make_permanent(pruning.prune_unstructured(_mlp(), 0.5))
    assert pruning.useful_flops(model, 4) == 2 * 4 * 1360
    assert pruning.useful_flops(pruning.to_sparse(model), 4) == 2 * 4 * 1360
    assert pruning.csr_bytes(3, 5) == 5 * 12 + 4 * 8
    assert pruning.csr_bytes(3, 5, index_bytes=4) == 5 * 8 + 4 * 4
    with pytest.raises(ValueError, match="rows"):
        pruning.csr_bytes(-1, 5)
    with pytest.raises(ValueError, match="batch"):
        pruning.useful_flops(model, 0)


def test_sizes_zeros_masks_shrunk_and_csr():
    dense = _mlp(hidden=(256, 256))
    masked = pruning.prune_unstructured(pruning.copy_model(dense), 0.5)
    zeros = pruning.make_permanent(pruning.copy_model(masked))
    base = size.state_dict_bytes(dense)
    assert abs(size.state_dict_bytes(zeros) - base) < 0.01 * base, "zeros do not shrink the file"
    assert size.state_dict_bytes(masked) > 1.9 * base, "weight_orig and the mask: twice the file"
    assert size.compressed_bytes(zeros) < 0.75 * size.compressed_bytes(dense), "zeros compress"
    csr = pruning.to_sparse(zeros)
    formula = sum(
        pruning.csr_bytes(m.out_features, m.weight.values().numel()) + 4 * m.out_features
        for m in csr
        if isinstance(m, pruning.SparseLinear)
    )
    assert abs(size.state_dict_bytes(csr) - formula) < 0.02 * formula
    assert size.state_dict_bytes(csr) > 1.4 * base, "int64 indices: CSR at 50 % is larger than dense"


# --- the notebook's experiments ------------------------------------------------------------------------


def test_norm_removed_orders_the_methods():
    model = _mlp()
    unstructured = pruning.norm_removed(model, pruning.prune_global(pruning.copy_model(model), 0.4))
    assert 0 < unstructured < 0.4 * 0.5  # the smallest 40 % of the weights hold far less than 40 % of the norm
    assert pruning.norm_removed(model, pruning.copy_model(model)) == 0
    with pytest.raises(ValueError, match="same layers"):
        pruning.norm_removed(model, _mlp(hidden=(8, 8)))


def test_sensitivity_scan_prunes_one_layer_at_a_time():
    split = data.load_digits(fraction=0.3)
    model = _mlp()
    train.fit(model, split.train, epochs=3, lr=1e-2, progress=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scan = pruning.sensitivity_scan(model, [0.0, 0.5, 0.95], split.test)
    assert [s.layer for s in scan] == ["0", "2", "4"] and [s.weights for s in scan] == [64 * 32, 32 * 16, 16 * 10]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "the scan prunes copies"
    base = train.evaluate(model, split.test)["acc"]
    for s in scan:
        assert s.baseline == base and s.accuracy[0] == base and s.drop_at(0.0) == 0
        assert s.drops == tuple(100 * (base - a) for a in s.accuracy)
    # the scan's accuracy is the model with that one layer, and only that one, pruned by magnitude
    twin = pruning.copy_model(model)
    prune.l1_unstructured(twin[2], "weight", amount=0.95)
    assert scan[1].accuracy[2] == train.evaluate(twin, split.test)["acc"]
    with pytest.raises(ValueError, match="not scanned"):
        scan[0].drop_at(0.9)
    with pytest.raises(ValueError, match="amounts"):
        pruning.sensitivity_scan(model, [1.0], split.test)
    with pytest.raises(ValueError, match="at least one"):
        pruning.sensitivity_scan(model, [], split.test)
    with pytest.raises(TypeError, match="model"):
        pruning.sensitivity_scan("model", [0.5], split.test)


def test_sensitivity_tolerated_sparsity():
    s = pruning.Sensitivity("0", 10, (0.5, 0.8, 0.9, 0.95), (0.97, 0.965, 0.90, 0.96), 0.97)
    assert s.drops == pytest.approx((0.0, 0.5, 7.0, 1.0))
    assert s.tolerated(1.0) == 0.8, "the first amount past the budget ends it, even if a higher one looks fine"
    assert s.tolerated(10) == 0.95 and pruning.Sensitivity("0", 1, (0.5,), (0.5,), 0.9).tolerated(1) == 0.0
    with pytest.raises(ValueError, match="max_drop"):
        s.tolerated(-1)


def test_accuracy_sweep_rows():
    split = data.load_digits(fraction=0.3)
    model = _mlp()
    train.fit(model, split.train, epochs=3, lr=1e-2, progress=False)
    rows = pruning.accuracy_sweep(model, "global", [0.0, 0.9], split.train, split.test, finetune_epochs=1, lr=1e-2)
    assert [r["amount"] for r in rows] == [0.0, 0.9]
    assert rows[1]["sparsity"] == pytest.approx(0.9, abs=1e-3) and all(r["still_sparse"] for r in rows)
    assert rows[1]["removed"] >= rows[1]["sparsity"]
    units = pruning.accuracy_sweep(model, "channels", [0.5], split.train, split.test, finetune_epochs=1)
    assert units[0]["removed"] == units[0]["sparsity"] == pytest.approx((16 * 64 + 16 * 16 + 8 * 16 + 8 * 10) / 2720)
    assert rows[0]["norm_removed"] == 0 and rows[1]["norm_removed"] > 0
    assert not hasattr(model[0], "weight_mask"), "the sweep prunes copies"
    with pytest.raises(ValueError, match="method"):
        pruning.accuracy_sweep(model, "random", [0.5], split.train, split.test)
    with pytest.raises(ValueError, match="amounts"):
        pruning.accuracy_sweep(model, "global", [1.0], split.train, split.test)


def test_speed_models_are_what_they_say():
    ms = pruning.speed_models(128, sparse_at=(0.5, 0.9))
    assert list(ms) == ["dense", "zeros", "shrunk", "CSR 50%", "CSR 90%"]
    x = torch.randn(4, 64)
    assert pruning.sparsity_report(ms["zeros"]).fraction == 0.5 and not hasattr(ms["zeros"][0], "weight_mask")
    assert [m.out_features for m in ms["shrunk"] if isinstance(m, nn.Linear)] == [64, 64, 10]
    assert ms["CSR 90%"][2].weight.values().numel() == round(0.1 * 128 * 128)
    out = pruning.inference_fn(ms["CSR 50%"], x)()
    assert out.shape == (4, 10) and not out.requires_grad
    assert torch.allclose(out, ms["zeros"](x).detach(), atol=1e-5), "CSR 50% and zeros: the same pruned weights"
    with pytest.raises(TypeError, match="x"):
        pruning.inference_fn(ms["dense"], [1.0])


def test_the_notebook_matrix_of_05_1():
    """Notebook 05.1 prints this as computed: torch's l1_unstructured keeps the weights the rule keeps, as a mask."""
    w = torch.tensor([[0.9, -0.1, 0.4, -1.2], [0.05, 0.7, -0.3, 0.2], [-0.6, 0.02, 1.5, -0.25]])
    keep = pruning.magnitude_mask(w, 0.5)
    assert keep.tolist() == [[True, False, True, True], [False, True, False, False], [True, False, True, False]]
    layer = nn.Linear(4, 3)
    with torch.no_grad():
        layer.weight.copy_(w)
    prune.l1_unstructured(layer, "weight", amount=0.5)
    assert torch.equal(layer.weight_mask.bool(), keep) and int((layer.weight == 0).sum()) == 6
    assert [n for n, _ in layer.named_parameters()] == ["bias", "weight_orig"]
    assert [n for n, _ in layer.named_buffers()] == ["weight_mask"]


@pytest.mark.parametrize("fraction", [0.5, 0.75, 0.9, 0.95])
def test_global_pruning_removes_less_norm_than_structured_at_the_same_zeros(fraction):
    """True by construction (magnitude pruning removes the least sum of w^2 for its number of zeros): notebook 05.1
    prints it as computed, and measures what it does to accuracy."""
    model = _mlp(hidden=(128,))
    structured = pruning.prune_channels(pruning.copy_model(model), fraction)
    report = pruning.sparsity_report(structured)
    unstructured = pruning.prune_global(pruning.copy_model(model), report.fraction)
    assert pruning.sparsity_report(unstructured).zeros == report.zeros
    assert pruning.norm_removed(model, unstructured) < pruning.norm_removed(model, structured)


def test_flops_and_files_of_the_05_1_speed_models():
    """Notebook 05.1's counts: the zeros model does the dense model's FLOPs, the shrunk one 3.75x fewer; the zeros
    file is the dense one's, masks double it, zipping shrinks only zeros, CSR is larger at 50 % and small at 95 %."""
    speed = pruning.speed_models(1024, fraction=0.5, sparse_at=(0.5, 0.95), seed=0)
    x = torch.randn(512, 64)
    flops = {k: timing.count_flops(pruning.inference_fn(m, x)) for k, m in speed.items() if not k.startswith("CSR")}
    assert flops["dense"] == flops["zeros"] == 2 * 512 * (64 * 1024 + 1024 * 1024 + 1024 * 10)
    assert 3 < flops["dense"] / flops["shrunk"] < 4
    assert pruning.useful_flops(speed["zeros"], 512) == flops["dense"] // 2
    dense = size.state_dict_bytes(speed["dense"])
    masked = pruning.prune_unstructured(pruning.copy_model(speed["dense"]), 0.5)
    assert abs(size.state_dict_bytes(speed["zeros"]) / dense - 1) < 0.01
    assert size.state_dict_bytes(masked) > 1.9 * dense
    assert size.compressed_bytes(speed["zeros"]) < 0.75 * size.state_dict_bytes(speed["zeros"])
    assert size.compressed_bytes(speed["dense"]) > 0.85 * dense
    assert size.state_dict_bytes(speed["CSR 50%"]) > dense > 4 * size.state_dict_bytes(speed["CSR 95%"])
