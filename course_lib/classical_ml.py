"""Classical machine learning on a CPU (notebook 01, section 5): what a FLOP count sees of a logistic regression's
fit, and what it does not.

``logreg_flops`` counts the two matrix products of each iteration; ``evaluations_in_fit`` counts and times the
evaluations of the loss and gradient inside a fit that calls SciPy's ``minimize`` (scikit-learn's L-BFGS does);
``logreg_evaluation_steps`` takes one evaluation apart into its numpy steps, to time each alone; ``line_through``
reads a fit's fixed cost and cost per iteration off two timed fits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import arguments

__all__ = ["logreg_flops", "EvaluationsInFit", "evaluations_in_fit", "logreg_evaluation_steps", "line_through"]


def logreg_flops(
    n_rows: int, n_features: int, n_classes: int, iterations: int = 1, fit_intercept: bool = True
) -> float:
    """FLOPs of the two matrix products in each iteration of a softmax logistic regression.

    Notebook 01, section 5 (classical ML). Per iteration: scores X @ W and gradient X.T @ (P - Y),
    each 2 x rows x (features + intercept) x classes FLOPs. The count leaves out what a FLOP model
    cannot see: the softmax (an exp and a log per score), extra loss evaluations of the solver's line
    search, its bookkeeping, and each call's fixed overhead; on a small data set those dominate.
    """
    for name, v in (
        ("n_rows", n_rows),
        ("n_features", n_features),
        ("n_classes", n_classes),
        ("iterations", iterations),
    ):
        arguments.positive_int(name, v)
    if not isinstance(fit_intercept, bool):
        raise TypeError(f"fit_intercept must be True or False, got {type(fit_intercept).__name__}")
    return 2.0 * 2 * n_rows * (n_features + int(fit_intercept)) * n_classes * iterations


@dataclass(frozen=True)
class EvaluationsInFit:
    """What ``evaluations_in_fit`` saw: the fit's time, and the solver's calls of the loss and gradient in it."""

    fit_s: float  # the whole fit, as the caller ran it
    evaluations: int  # calls of the loss and gradient
    iterations: int  # the solver's iterations (each needs one evaluation; a rejected line-search step, one more)
    evaluations_s: float  # time spent inside those calls

    @property
    def per_evaluation_s(self) -> float:
        return self.evaluations_s / self.evaluations

    @property
    def share(self) -> float:
        """The evaluations' share of the fit; the rest is the solver's own steps and the fit's set-up."""
        return self.evaluations_s / self.fit_s


def evaluations_in_fit(fit, repeats: int = 3) -> EvaluationsInFit | None:
    """Run ``fit()`` (a function of no arguments that calls ``scipy.optimize.minimize`` once, as scikit-learn's
    ``LogisticRegression(solver="lbfgs").fit`` does) ``repeats`` times with the loss-and-gradient function it passes
    wrapped in a timer; return the fastest repeat's counts and times, or None where no call of ``minimize`` was
    seen: a release that reaches the solver another way, or a ``minimize`` imported by name before the call (the
    count replaces the module's attribute while ``fit`` runs, which scikit-learn looks up at each call)."""
    import scipy.optimize

    if not callable(fit):
        raise TypeError(f"fit must be a function of no arguments, got {type(fit).__name__}")
    repeats = arguments.positive_int("repeats", repeats)
    original, seen = scipy.optimize.minimize, []

    def counting_minimize(fun, x0, *args, **kwargs):
        calls = [0, 0.0]

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                return fun(*a, **k)
            finally:
                calls[0] += 1
                calls[1] += time.perf_counter() - start

        result = original(timed, x0, *args, **kwargs)
        seen.append((calls[0], int(getattr(result, "nit", 0)), calls[1]))
        return result

    best = None
    scipy.optimize.minimize = counting_minimize
    try:
        for _ in range(repeats):
            seen.clear()
            start = time.perf_counter()
            fit()
            fit_s = time.perf_counter() - start
            if len(seen) != 1 or not seen[0][0]:
                return None
            found = EvaluationsInFit(fit_s, *seen[0])
            best = found if best is None or found.fit_s < best.fit_s else best
    finally:
        scipy.optimize.minimize = original
    return best


def logreg_evaluation_steps(x, y_onehot) -> dict:
    """The steps of one evaluation of a softmax logistic regression's loss and gradient, each as a function to time
    alone: ``{step: fn}``, in the order notebook 01's ``loss_grad`` (section 5) runs them.

    ``x``: rows x (features + 1) numpy array, the last column ones (the intercept); ``y_onehot``: rows x classes, the
    same float dtype. The weights are small random numbers (seed 0), as in the middle of a fit. The two products are
    the FLOPs :func:`logreg_flops` counts; the others are elementwise work and row reductions along the short class
    axis, whose cost a FLOP count does not see.
    """
    import numpy as np

    if not (isinstance(x, np.ndarray) and isinstance(y_onehot, np.ndarray)):
        raise TypeError(f"x and y_onehot must be numpy arrays, got {type(x).__name__} and {type(y_onehot).__name__}")
    if x.ndim != 2 or y_onehot.ndim != 2 or len(x) != len(y_onehot) or x.shape[1] < 2:
        raise ValueError(
            f"x must be rows x (features + 1) and y_onehot rows x classes, got {x.shape} and {y_onehot.shape}"
        )
    if x.dtype != y_onehot.dtype or x.dtype.kind != "f":
        raise ValueError(f"x and y_onehot must share one float dtype, got {x.dtype} and {y_onehot.dtype}")
    n, f, k = len(x), x.shape[1] - 1, y_onehot.shape[1]
    w = np.random.default_rng(0).normal(0, 0.01, (f + 1) * k)
    wt = w.reshape(f + 1, -1).astype(x.dtype)
    z = x @ wt
    z -= z.max(1, keepdims=True)
    pr = np.exp(z)
    s = pr.sum(1, keepdims=True)
    g = x.T @ (pr / s - y_onehot) / n
    return {
        "weights in, as float32/64": lambda: w.reshape(f + 1, -1).astype(x.dtype),
        "scores X @ W (a product)": lambda: x @ wt,
        f"row max, {k} wide": lambda: z.max(1, keepdims=True),
        "subtract it": lambda: z - s,
        "exp": lambda: np.exp(z),
        f"row sum, {k} wide": lambda: pr.sum(1, keepdims=True),
        "divide by it": lambda: pr / s,
        "gradient X^T (P - Y) / n (a product)": lambda: x.T @ (pr - y_onehot) / n,
        "L2 term's gradient": lambda: g[:f] + wt[:f] / n,
        "loss: log, Z * Y, row sum, mean": lambda: float((np.log(s).ravel() - (z * y_onehot).sum(1)).mean()),
        "L2 term": lambda: 0.5 * (wt[:f] ** 2).sum() / n,
        "gradient out, as float64": lambda: g.ravel().astype(float),
    }


def line_through(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float]:
    """(intercept, slope) of the line through two measurements, e.g. fit time at two iteration counts.

    Notebook 01, section 5: the fixed cost of a fit and its cost per iteration, read off two fits
    that run a fixed number of iterations. ValueError if the two x values are equal.
    """
    x0, y0, x1, y1 = (arguments.number(n, v) for n, v in (("x0", x0), ("y0", y0), ("x1", x1), ("y1", y1)))
    if x0 == x1:
        raise ValueError(f"x0 and x1 must differ to define a line, both are {x0}")
    slope = (y1 - y0) / (x1 - x0)
    return y0 - slope * x0, slope
