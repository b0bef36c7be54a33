"""The course's one training step, and the small loop built on it.

    history = fit(model, split.train, eval_data=split.test, epochs=5, optimizer="adam")

``train_step`` is the only place in ``course_lib`` where a model is trained: the loop here, the
memory meters (notebook 02), the capped out-of-memory runs, the streaming pass, and later modules
all call it, so a feature added to it (autocast, gradient accumulation, loss scaling, a gradient
hook for compression, a DDP model) works everywhere. It sits low in the library (layer 1) for that
reason. The loop is split so a later module can replace one piece: ``train_step`` (one batch:
forward, loss, backward, update), ``train_epoch`` (all batches, with a progress bar) and ``fit``
(epochs, evaluation, per-epoch metrics). Used from notebook 01 (CPU vs GPU step time) onwards.

Each piece has its own file: ``step`` (``train_step`` and ``evaluate``: one batch at a time, one graph cut
each), ``loop`` (``train_epoch``, ``fit``, ``make_step_fn``, ``measure_input_pipeline``) and ``batch_size``
(``progress_by_examples``, ``gradient_noise_scale``); every name can be reached from here.
"""

from __future__ import annotations

from .. import names
from ..models import OPTIMIZERS, make_optimizer
from .batch_size import ExampleCurve, gradient_noise_scale, progress_by_examples
from .loop import History, fit, make_step_fn, measure_input_pipeline, progress_bar, train_epoch
from .step import FP16_ON_CPU, StepResult, autocast, call_loss, default_loss, evaluate, grad_scaler, train_step

PRECISIONS = names.PRECISIONS

__all__ = [
    "PRECISIONS",
    "OPTIMIZERS",
    "FP16_ON_CPU",
    "History",
    "StepResult",
    "ExampleCurve",
    "make_optimizer",
    "autocast",
    "grad_scaler",
    "call_loss",
    "default_loss",
    "progress_bar",
    "train_step",
    "train_epoch",
    "evaluate",
    "fit",
    "make_step_fn",
    "measure_input_pipeline",
    "progress_by_examples",
    "gradient_noise_scale",
]
