"""course_lib.benchmark.quality: metrics against hand-computed values and scikit-learn, cross-validation,
the outlier stress test, and bad input (notebook 07.1, section 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn import metrics as skm

from course_lib.benchmark import quality as q


def test_classification_metrics_by_hand():
    # classes 0, 1, 2; true [0,0,1,1,2,2], predicted [0,1,1,1,2,0]
    m = q.classification_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0])
    assert m["accuracy"] == pytest.approx(4 / 6)
    # precision per class: 0: 1/2, 1: 2/3, 2: 1/1; recall: 0: 1/2, 1: 2/2, 2: 1/2
    assert m["precision"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert m["recall"] == pytest.approx((1 / 2 + 1 + 1 / 2) / 3)
    f1 = [2 * p * r / (p + r) for p, r in ((1 / 2, 1 / 2), (2 / 3, 1), (1, 1 / 2))]
    assert m["f1"] == pytest.approx(sum(f1) / 3)
    assert set(m) == set(q.CLASSIFICATION_METRICS)


def test_classification_rare_class_never_predicted():
    # 9 negatives, 1 positive, a model that always says 0: accuracy 0.9, macro F1 far lower
    m = q.classification_metrics(torch.tensor([0] * 9 + [1]), torch.zeros(10, dtype=torch.long))
    assert m["accuracy"] == pytest.approx(0.9)
    assert m["precision"] == pytest.approx(0.45)  # class 1 never predicted: precision 0 (zero_division=0)
    assert m["f1"] == pytest.approx((2 * 0.9 * 1 / 1.9) / 2)


def test_classification_matches_sklearn_random():
    rng = np.random.default_rng(0)
    t, p = rng.integers(0, 5, 300), rng.integers(0, 5, 300)
    m = q.classification_metrics(t, p)
    assert m["accuracy"] == pytest.approx(skm.accuracy_score(t, p))
    assert m["f1"] == pytest.approx(skm.f1_score(t, p, average="macro"))
    assert m["precision"] == pytest.approx(skm.precision_score(t, p, average="macro"))
    assert m["recall"] == pytest.approx(skm.recall_score(t, p, average="macro"))
    # integral floats are accepted as labels
    assert q.classification_metrics(t.astype(float), p) == m


def test_regression_metrics_by_hand():
    m = q.regression_metrics([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 6.0])
    assert m["mse"] == pytest.approx(1.0)  # errors 0, 0, 0, 2: 4 / 4
    assert m["mae"] == pytest.approx(0.5)
    assert m["r2"] == pytest.approx(1 - 1.0 / 1.25)  # variance of y_true: 1.25
    col = q.regression_metrics(torch.tensor([[1.0], [2.0], [3.0], [4.0]]), torch.tensor([[1.0], [2.0], [3.0], [6.0]]))
    assert col == pytest.approx(m)
    rng = np.random.default_rng(1)
    t, p = rng.normal(size=50), rng.normal(size=50)
    m = q.regression_metrics(t, p)
    assert m["mse"] == pytest.approx(skm.mean_squared_error(t, p))
    assert m["r2"] == pytest.approx(skm.r2_score(t, p))


@pytest.mark.parametrize(
    "fn, args, error, words",
    [
        (q.classification_metrics, ([0, 1], [0]), ValueError, "same length"),
        (q.classification_metrics, ([], []), ValueError, "empty"),
        (q.classification_metrics, ([0, 1], [[0.2, 0.8], [0.9, 0.1]]), ValueError, "argmax"),
        (q.classification_metrics, ([0, 1], [0.5, 1.0]), TypeError, "argmax"),
        (q.classification_metrics, ("01", [0, 1]), TypeError, "y_true"),
        (q.classification_metrics, ([0, 1], ["a", "b"]), TypeError, "numbers"),
        (q.regression_metrics, ([1.0, float("nan")], [1.0, 2.0]), ValueError, "finite"),
        (q.regression_metrics, ([1.0], [1.0]), ValueError, "at least 2"),
        (q.regression_metrics, (None, [1.0]), TypeError, "y_true"),
    ],
)
def test_metric_bad_input(fn, args, error, words):
    with pytest.raises(error, match=words):
        fn(*args)


def test_binomial_std():
    assert q.binomial_std(0.5, 100) == pytest.approx(0.05)
    assert q.binomial_std(1.0, 10) == 0.0
    with pytest.raises(ValueError, match="accuracy"):
        q.binomial_std(1.5, 10)
    with pytest.raises(ValueError, match="n"):
        q.binomial_std(0.5, 0)


@pytest.mark.slow
def test_cross_validate_small():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    y = torch.arange(3).repeat(40)
    x = torch.randn(120, 4, generator=g) * 0.3 + torch.nn.functional.one_hot(y, 4).float() * 2
    r = q.cross_validate(x, y, n_splits=4, hidden=8, epochs=5, lr=0.05, progress=False, keep_models=True)
    assert r.n_splits == 4 and len(r.models) == 4
    assert sum(f["n_val"] for f in r.folds) == 120  # every example held out once
    assert all(f["n_train"] + f["n_val"] == 120 for f in r.folds)
    accs = [f["accuracy"] for f in r.folds]
    assert r.mean["accuracy"] == pytest.approx(sum(accs) / 4)
    assert r.std["accuracy"] == pytest.approx(float(np.std(accs, ddof=1)))
    assert r.mean["accuracy"] > 0.9  # well separated classes
    assert "over 4 folds" in r.summary() and "mean ± std" in r.table()
    again = q.cross_validate(x, y, n_splits=4, hidden=8, epochs=5, lr=0.05, progress=False)
    assert [f["accuracy"] for f in again.folds] == accs  # seeded


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(x=torch.zeros(10, 2)), ValueError, "both x and y"),
        (dict(x=torch.zeros(10, 2), y=torch.zeros(10)), TypeError, "integer class labels"),
        (dict(x=torch.zeros(10, 2), y=torch.zeros(9, dtype=torch.long)), ValueError, "one row per label"),
        (dict(x=torch.zeros(10, 2), y=torch.zeros(10, dtype=torch.long)), ValueError, "2 classes"),
        (dict(x=torch.zeros(6, 2), y=torch.tensor([0, 0, 0, 1, 1, 1])), ValueError, "smallest class"),
        (dict(n_splits=1), ValueError, "n_splits"),
        (dict(epochs=0), ValueError, "epochs"),
        (dict(x=[[0.0]], y=[0]), TypeError, "torch tensor"),
    ],
)
def test_cross_validate_bad_input(kwargs, error, words):
    with pytest.raises(error, match=words):
        q.cross_validate(progress=False, **kwargs)


def test_corrupt_targets():
    y = torch.zeros(100, 1)
    out, idx = q.corrupt_targets(y, 0.1, 50.0, seed=3)
    assert len(idx) == 10 and torch.equal(y, torch.zeros(100, 1))  # a copy
    assert sorted(out.abs().flatten().nonzero().flatten().tolist()) == sorted(idx.tolist())
    assert set(out[idx].flatten().tolist()) <= {-50.0, 50.0}
    bigger, idx2 = q.corrupt_targets(y, 0.2, 50.0, seed=3)
    assert set(idx.tolist()) <= set(idx2.tolist())  # nested for growing fractions
    with pytest.raises(ValueError, match="fraction"):
        q.corrupt_targets(y, 1.5)
    with pytest.raises(TypeError, match="float"):
        q.corrupt_targets(torch.zeros(5, dtype=torch.long), 0.1)


def test_predicted_test_mse():
    # noise 1, no outliers, 10 features (p = 11), 112 examples: 1 + 1 * 11 / 100
    assert q.predicted_test_mse(1.0, 0.0, 50.0, 112, 10) == pytest.approx(1.11)
    assert q.predicted_test_mse(0.0, 0.1, 10.0, 112, 10) == pytest.approx(10 * 11 / 100)
    with pytest.raises(ValueError, match="n_train"):
        q.predicted_test_mse(1.0, 0.0, 1.0, 5, 10)


def test_outlier_stress_robust_loss_wins():
    torch.set_num_threads(1)
    rows = q.outlier_stress((0.0, 0.1), losses=("mse", "huber"), n_samples=600, n_features=4, steps=100)
    by = {(r["fraction"], r["loss"]): r for r in rows}
    assert len(rows) == 4 and by[(0.1, "mse")]["outliers"] == 45
    clean = by[(0.0, "mse")]["mse"]
    assert clean == pytest.approx(by[(0.0, "huber")]["mse"], rel=0.05)  # without outliers the losses agree
    assert by[(0.1, "mse")]["mse"] > 3 * clean  # least squares absorbs the outliers
    assert by[(0.1, "huber")]["mse"] < 1.2 * clean  # Huber barely notices them
    ratio = by[(0.1, "mse")]["mse"] / by[(0.1, "mse")]["predicted_mse"]
    assert 0.3 < ratio < 3, ratio


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(fractions=()), TypeError, "fractions"),
        (dict(fractions=(0.1, 2.0)), ValueError, "fractions"),
        (dict(losses=("mse", "hinge")), ValueError, "huber"),
        (dict(losses="mse"), TypeError, "losses"),
        (dict(steps=0), ValueError, "steps"),
    ],
)
def test_outlier_stress_bad_input(kwargs, error, words):
    with pytest.raises(error, match=words):
        q.outlier_stress(**kwargs)


def test_metrics_do_not_change_torch_threads():
    before = torch.get_num_threads()
    q.classification_metrics([0, 1], [0, 1])
    assert torch.get_num_threads() == before
    assert math.isfinite(q.regression_metrics([0.0, 1.0], [0.0, 1.0])["r2"])
