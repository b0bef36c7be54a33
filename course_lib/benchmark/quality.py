"""Quality metrics on held-out data, cross-validation and a stress test with outliers (notebook 07.1, section 3).

A benchmark that reports only speed can be won by a model that learned nothing: MLPerf fixes a quality
target and times how long it takes to reach it. This part measures the quality side.

* ``classification_metrics`` / ``regression_metrics``: accuracy, macro precision, recall and F1; MSE, MAE
  and R^2, computed by ``sklearn.metrics`` (its BLAS and OpenMP pools limited to one thread: on a 2-core
  machine they otherwise fight torch's threads).
* ``cross_validate``: stratified k-fold cross-validation of a small MLP on the digits, one seeded model per
  fold trained with ``course_lib.train.fit``; per-fold metrics, their mean and standard deviation.
  ``binomial_std`` is the spread a held-out accuracy has from the luck of which examples were held out.
* ``outlier_stress``: a linear regression whose training targets are partly corrupted by large outliers,
  fitted with the mean squared error and with a robust loss (Huber, L1), scored on clean held-out data;
  ``predicted_test_mse`` is what least squares should score (the outliers' variance leaks into the
  weights), ``corrupt_targets`` makes the outliers.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import arguments, data, models, seeds, train

__all__ = [
    "classification_metrics",
    "regression_metrics",
    "binomial_std",
    "CVResult",
    "cross_validate",
    "corrupt_targets",
    "predicted_test_mse",
    "outlier_stress",
    "CLASSIFICATION_METRICS",
]

CLASSIFICATION_METRICS = ("accuracy", "precision", "recall", "f1")
_REGRESSION_METRICS = ("mse", "mae", "r2")
_LOSSES = ("mse", "huber", "l1")


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """scikit-learn's BLAS and OpenMP pools on one thread while it runs (torch's own pool untouched)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _as_array(name: str, values: Any) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    elif isinstance(values, (str, bytes)) or not isinstance(values, (np.ndarray, Sequence)):
        raise TypeError(f"{name} must be a list, numpy array or torch tensor, got {type(values).__name__}")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must hold numbers: {err}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must hold numbers, got values of type {arr.dtype}")
    if arr.ndim == 2 and arr.shape[1] == 1:  # a (n, 1) column, as a regression model outputs
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be one value per example (shape (n,) or (n, 1)), got shape {arr.shape}; "
            "for a classifier's scores pass the predicted class, e.g. logits.argmax(1)"
        )
    if len(arr) == 0:
        raise ValueError(f"{name} must not be empty")
    return arr


def _pair(y_true: Any, y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
    t, p = _as_array("y_true", y_true), _as_array("y_pred", y_pred)
    if len(t) != len(p):
        raise ValueError(f"y_true and y_pred must have the same length, got {len(t)} and {len(p)}")
    return t, p


def _labels(name: str, arr: np.ndarray) -> np.ndarray:
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise TypeError(
                f"{name} must hold class labels (integers), got fractional values; for a model's "
                "output pass the predicted class, e.g. logits.argmax(1)"
            )
        arr = arr.astype(np.int64)
    return arr


def classification_metrics(y_true: Any, y_pred: Any) -> dict[str, float]:
    """Accuracy and macro-averaged precision, recall and F1 of predicted class labels (notebook 07.1, section 3).

    Macro averaging computes each class's precision, recall and F1 and takes their plain mean, so a rare class
    counts as much as a common one: a model that never predicts a rare class keeps a high accuracy but loses
    F1. A class that is never predicted has precision 0 (scikit-learn's ``zero_division=0``). ``y_true`` and
    ``y_pred`` are 1-D integer labels (lists, numpy arrays or tensors: pass ``logits.argmax(1)``, not logits).
    """
    from sklearn import metrics

    t, p = _pair(y_true, y_pred)
    t, p = _labels("y_true", t), _labels("y_pred", p)
    with _one_thread():
        precision, recall, f1, _ = metrics.precision_recall_fscore_support(t, p, average="macro", zero_division=0)
        return {
            "accuracy": float(metrics.accuracy_score(t, p)),
            "precision": float(precision),
            "recall": float(recall),
            "f1": float(f1),
        }


def regression_metrics(y_true: Any, y_pred: Any) -> dict[str, float]:
    """Mean squared error, mean absolute error and R^2 of predictions (notebook 07.1, section 3).

    MSE squares each error, so one large miss dominates it; MAE weighs every unit of error alike; R^2 is
    1 - MSE / (variance of ``y_true``): 1 for a perfect fit, 0 for predicting the mean (needs at least two
    examples). Values must be finite; shapes (n,) or (n, 1).
    """
    from sklearn import metrics

    t, p = _pair(y_true, y_pred)
    for name, arr in (("y_true", t), ("y_pred", p)):
        if not np.all(np.isfinite(arr.astype(np.float64))):
            raise ValueError(f"{name} must hold finite numbers (no NaN or infinity)")
    if len(t) < 2:
        raise ValueError(f"regression_metrics needs at least 2 examples (R^2 divides by their variance), got {len(t)}")
    t, p = t.astype(np.float64), p.astype(np.float64)
    with _one_thread():
        return {
            "mse": float(metrics.mean_squared_error(t, p)),
            "mae": float(metrics.mean_absolute_error(t, p)),
            "r2": float(metrics.r2_score(t, p)),
        }


def binomial_std(accuracy: float, n: int) -> float:
    """Standard deviation of an accuracy measured on ``n`` held-out examples: sqrt(p (1 - p) / n).

    Each held-out example is right with probability ``accuracy``, so the count right is binomial: the spread a
    single train/test split has from the luck of which examples landed in its test set (notebook 07.1's
    prediction of the cross-validation spread).
    """
    p = arguments.fraction("accuracy", accuracy, allow_zero=True, allow_one=True)
    n = arguments.positive_int("n", n)
    return math.sqrt(p * (1 - p) / n)


@dataclass
class CVResult:
    """What ``cross_validate`` measured: one dict of metrics per fold (plus ``fold``, ``n_train``, ``n_val``,
    ``seconds``), and the mean and sample standard deviation (n - 1) of each metric over the folds."""

    folds: list[dict]
    mean: dict[str, float]
    std: dict[str, float]
    models: list[nn.Module] = field(default_factory=list, repr=False)

    @property
    def n_splits(self) -> int:
        return len(self.folds)

    def summary(self, metric: str = "accuracy") -> str:
        """'0.969 ± 0.004 over 5 folds' for one metric."""
        metric = arguments.choice("metric", metric, CLASSIFICATION_METRICS)
        return f"{self.mean[metric]:.3f} ± {self.std[metric]:.3f} over {self.n_splits} folds"

    def table(self) -> str:
        """One line per fold and the mean ± std line, as text."""
        head = f"{'fold':>5s}{'train':>7s}{'val':>5s}" + "".join(f"{m:>14s}" for m in CLASSIFICATION_METRICS)
        lines = [head + f"{'seconds':>9s}"]
        for f in self.folds:
            lines.append(
                f"{f['fold']:5d}{f['n_train']:7d}{f['n_val']:5d}"
                + "".join(f"{f[m]:14.3f}" for m in CLASSIFICATION_METRICS)
                + f"{f['seconds']:9.2f}"
            )
        lines.append(
            f"{'mean ± std':>17s}"
            + "".join(f"{self.mean[m]:.3f} ± {self.std[m]:.3f}".rjust(14) for m in CLASSIFICATION_METRICS)
        )
        return "\n".join(lines)


def _tensor(name: str, value: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(value).__name__}")
    return value if dtype is None else value.to(dtype)


def cross_validate(
    x: torch.Tensor | None = None,
    y: torch.Tensor | None = None,
    *,
    n_splits: int = 5,
    hidden: int = 32,
    epochs: int = 20,
    lr: float = 1e-2,
    batch_size: int = 32,
    seed: int = 0,
    device: torch.device | str | None = None,
    progress: bool = True,
    keep_models: bool = False,
) -> CVResult:
    """Stratified k-fold cross-validation of a small MLP classifier (notebook 07.1, section 3).

    The examples are split into ``n_splits`` folds with the same class proportions each
    (``sklearn.model_selection.StratifiedKFold``, shuffled with ``seed``); for each fold a fresh
    ``MLP(features, hidden, classes)``, seeded with ``seeds.derive(seed, "fold", fold)``, is trained on the other
    folds with ``train.fit`` (Adam) and scored on the held-out fold with ``classification_metrics``. Every example is
    held out exactly once. ``x``/``y`` default to the digits' training part (``data.load_digits()``: the test
    part stays untouched for a final check). ``keep_models`` keeps each fold's trained model in
    ``CVResult.models``. The MLP is tiny: run it on one thread (``torch.set_num_threads(1)``) on a CPU.
    """
    from sklearn.model_selection import StratifiedKFold
    from ..train import progress_bar

    tqdm = progress_bar()

    if (x is None) != (y is None):
        raise ValueError("pass both x and y, or neither (then the digits' training part is used)")
    if x is None:
        split = data.load_digits()
        x, y = split.x_train, split.y_train
    x = _tensor("x", x, torch.float32)
    y = _tensor("y", y)
    if y.dtype.is_floating_point or y.dim() != 1:
        raise TypeError(f"y must be a 1-D tensor of integer class labels, got dtype {y.dtype}, shape {tuple(y.shape)}")
    if x.dim() != 2 or len(x) != len(y):
        raise ValueError(
            f"x must be (examples, features) with one row per label, got {tuple(x.shape)} for {len(y)} labels"
        )
    n_splits = arguments.integer("n_splits", n_splits, minimum=2)
    if len(y) == 0 or int(y.min()) < 0:
        raise ValueError("y must hold class labels 0, 1, 2, ... (none negative, at least one example)")
    counts = torch.bincount(y)
    if int((counts > 0).sum()) < 2:
        raise ValueError("y must hold at least 2 classes")
    smallest = int(counts[counts > 0].min())
    if smallest < n_splits:
        raise ValueError(f"n_splits ({n_splits}) must not exceed the smallest class's size ({smallest} examples)")
    hidden, epochs, batch_size = (
        arguments.positive_int(k, v) for k, v in (("hidden", hidden), ("epochs", epochs), ("batch_size", batch_size))
    )
    lr = arguments.positive("lr", lr)
    seed = arguments.nonnegative_int("seed", seed)
    arguments.boolean("progress", progress)
    arguments.boolean("keep_models", keep_models)
    n_classes = int(y.max()) + 1
    with _one_thread():
        splits = list(StratifiedKFold(n_splits, shuffle=True, random_state=seed).split(x.numpy(), y.numpy()))
    folds, kept = [], []
    for k, (tr, va) in enumerate(tqdm(splits, desc="folds", disable=not progress)):
        tr, va = torch.as_tensor(tr), torch.as_tensor(va)
        fold_seed = seeds.derive(seed, "fold", k)
        torch.manual_seed(fold_seed)
        model = models.MLP(x.shape[1], hidden, n_classes)
        if device is not None:
            model.to(device)
        start = time.perf_counter()
        train.fit(
            model,
            torch.utils.data.TensorDataset(x[tr], y[tr]),
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            progress=False,
            seed=fold_seed,
        )
        dev = next(model.parameters()).device
        model.eval()
        with torch.no_grad():
            pred = model(x[va].to(dev)).argmax(1).cpu()
        folds.append(
            {
                "fold": k + 1,
                "n_train": len(tr),
                "n_val": len(va),
                **classification_metrics(y[va], pred),
                "seconds": time.perf_counter() - start,
            }
        )
        if keep_models:
            kept.append(model)
    mean = {m: statistics.fmean(f[m] for f in folds) for m in CLASSIFICATION_METRICS}
    std = {m: statistics.stdev(f[m] for f in folds) for m in CLASSIFICATION_METRICS}
    return CVResult(folds, mean, std, kept)


def corrupt_targets(
    y: torch.Tensor, fraction: float, magnitude: float = 50.0, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of regression targets ``y`` with ``round(fraction * len(y))`` of them moved by ±``magnitude``
    (random signs), and the indices moved (a stress test with outliers).

    Like a sensor that now and then reports garbage, or labels typed with a wrong unit. The moved entries are
    chosen with a seeded generator; the same seed picks nested sets for growing fractions.
    """
    y = _tensor("y", y)
    if not y.dtype.is_floating_point:
        raise TypeError(f"y must be float regression targets, got dtype {y.dtype}")
    fraction = arguments.fraction("fraction", fraction, allow_zero=True, allow_one=True)
    magnitude = arguments.nonnegative("magnitude", magnitude)
    seed = arguments.nonnegative_int("seed", seed)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=g)
    signs = torch.randint(0, 2, (len(y),), generator=g).to(y.dtype) * 2 - 1
    k = round(fraction * len(y))
    idx = order[:k]
    out = y.clone()
    shift = (magnitude * signs[:k]).reshape(-1, *([1] * (y.dim() - 1)))
    out[idx] += shift
    return out, idx


def predicted_test_mse(noise: float, fraction: float, magnitude: float, n_train: int, n_features: int) -> float:
    """Expected clean held-out MSE of least squares on targets with outliers (notebook 07.1's prediction).

    Least squares fits y = x·w + b. Its weights are off by an error whose variance is the targets' error
    variance times (parameters) / (examples - parameters - 1) for Gaussian inputs, and an outlier of size M
    at a fraction f of the examples adds f·M² to that variance: clean test MSE = noise² + (noise² + f·M²) ·
    p / (n - p - 1), with p = n_features + 1. The noise² term is the floor no model can beat.
    """
    noise = arguments.nonnegative("noise", noise)
    fraction = arguments.fraction("fraction", fraction, allow_zero=True, allow_one=True)
    magnitude = arguments.nonnegative("magnitude", magnitude)
    n_features = arguments.positive_int("n_features", n_features)
    p = n_features + 1
    n_train = arguments.integer("n_train", n_train, minimum=p + 2)
    return noise**2 + (noise**2 + fraction * magnitude**2) * p / (n_train - p - 1)


def _loss(name: str) -> nn.Module:
    name = arguments.choice("loss", name, _LOSSES)
    return {"mse": nn.MSELoss(), "huber": nn.HuberLoss(delta=1.0), "l1": nn.L1Loss()}[name]


def outlier_stress(
    fractions: Sequence[float] = (0.0, 0.05, 0.1, 0.2),
    *,
    losses: Sequence[str] = ("mse", "huber"),
    magnitude: float = 50.0,
    n_samples: int = 2000,
    n_features: int = 16,
    noise: float = 0.5,
    steps: int = 200,
    lr: float = 0.5,
    seed: int = 0,
) -> list[dict]:
    """Fit a linear model on targets with outliers, with each loss; score it on clean held-out data
    (notebook 07.1, section 3: a stress test with outliers).

    The data are ``data.make_regression(n_samples, n_features, noise, seed=seed)``; for each fraction the
    training targets are corrupted by ``corrupt_targets(..., magnitude, seed=seeds.derive(seed, "corrupt"))``
    (the test targets never are). Each fit is ``steps`` full-batch gradient steps (``train.train_step``, plain
    SGD at ``lr``) from the same seeded start: with the mean squared error this reaches the least-squares solution; the
    Huber loss (quadratic within 1 of the fit, linear beyond) and L1 give a large error a bounded pull.
    Returns one row per (fraction, loss): ``fraction``, ``loss``, ``outliers`` (count), the clean test
    ``mse``, ``mae``, ``r2``, the ``predicted_mse`` of least squares (``predicted_test_mse``) and ``seconds``.
    """
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, Sequence) or not fractions:
        raise TypeError("fractions must be a non-empty list of numbers in [0, 1]")
    fractions = [arguments.fraction("every entry of fractions", f, allow_zero=True, allow_one=True) for f in fractions]
    if isinstance(losses, (str, bytes)) or not isinstance(losses, Sequence) or not losses:
        raise TypeError(f"losses must be a non-empty list of names from {_LOSSES}")
    loss_fns = {arguments.choice("every entry of losses", name, _LOSSES): None for name in losses}
    loss_fns = {name: _loss(name) for name in loss_fns}
    magnitude = arguments.nonnegative("magnitude", magnitude)
    steps = arguments.positive_int("steps", steps)
    lr = arguments.positive("lr", lr)
    seed = arguments.nonnegative_int("seed", seed)
    split = data.make_regression(n_samples=n_samples, n_features=n_features, noise=noise, seed=seed)
    n_train = len(split.y_train)
    rows = []
    for f in fractions:
        y, idx = corrupt_targets(split.y_train, f, magnitude, seed=seeds.derive(seed, "corrupt"))
        for name, loss_fn in loss_fns.items():
            torch.manual_seed(seeds.derive(seed, "init"))  # not the data's stream
            model = nn.Linear(n_features, 1)
            opt = models.make_optimizer("sgd", model.parameters(), lr=lr)
            start = time.perf_counter()
            for _ in range(steps):
                train.train_step(model, (split.x_train, y), opt, loss_fn)
            with torch.no_grad():
                pred = model(split.x_test)
            rows.append(
                {
                    "fraction": f,
                    "loss": name,
                    "outliers": len(idx),
                    **regression_metrics(split.y_test, pred),
                    "predicted_mse": predicted_test_mse(noise, len(idx) / n_train, magnitude, n_train, n_features),
                    "seconds": time.perf_counter() - start,
                }
            )
    return rows
