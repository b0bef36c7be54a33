"""The small loop built on ``train_step``: epochs with a progress bar, per-epoch metrics, and timing helpers.

``train_epoch`` (all batches), ``fit`` (epochs and evaluation), ``make_step_fn`` (one step on a fixed batch, to
time it) and ``measure_input_pipeline`` (waiting for data against computing).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .. import arguments, names
from ..hardware import as_device
from ..models import make_optimizer
from .step import _loader, default_loss, evaluate, grad_scaler, train_step


@dataclass
class History:
    """Per-epoch metrics of a ``fit`` run: one dict per epoch."""

    epochs: list[dict] = field(default_factory=list)

    def __getitem__(self, key: str) -> list:
        return [e[key] for e in self.epochs if key in e]

    @property
    def last(self) -> dict:
        return self.epochs[-1] if self.epochs else {}


def progress_bar():
    """tqdm's notebook bar where ipywidgets can draw it, its text bar elsewhere (``tqdm.auto`` would warn
    "IProgress not found" in a kernel without ipywidgets, as a plain ``pip install`` has)."""
    if importlib.util.find_spec("ipywidgets") is None:
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm


def train_epoch(
    model: nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    desc: str = "train",
    *,
    precision: str = "fp32",
    micro_batches: int = 1,
    measure: bool = False,
) -> dict:
    """All batches of one epoch (``train_step`` each); returns mean loss, accuracy, seconds and
    examples per second; with ``measure``, also ``steps``: every step's ``StepResult`` (loss, time,
    throughput, peak memory) and the epoch's ``peak_bytes``."""
    arguments.instance("model", model, nn.Module, "a torch.nn.Module")
    arguments.instance("optimizer", optimizer, torch.optim.Optimizer, "a torch.optim.Optimizer")
    tqdm = progress_bar()

    model.train()
    total_loss, correct, seen = 0.0, 0, 0
    scaler = grad_scaler(precision, device if device is not None else next(model.parameters()).device)
    steps = []
    start = time.perf_counter()
    for batch in tqdm(loader, desc=desc, leave=False, disable=not progress):
        result = train_step(
            model, batch, optimizer, loss_fn, device, micro_batches, precision=precision, scaler=scaler, measure=measure
        )
        total_loss += result.loss * result.examples
        correct += result.correct
        seen += result.examples
        if measure:
            steps.append(result)
    seconds = time.perf_counter() - start
    row = {
        "train_loss": total_loss / max(seen, 1),
        "train_acc": correct / max(seen, 1),
        "seconds": seconds,
        "examples_per_s": seen / seconds if seconds > 0 else float("inf"),
    }
    if measure:
        peaks = [r.peak_bytes for r in steps if r.peak_bytes is not None]
        row.update(steps=steps, peak_bytes=max(peaks) if peaks else None)
    return row


def fit(
    model: nn.Module,
    train_data: Dataset | DataLoader,
    *,
    epochs: int = 5,
    lr: float = 1e-3,
    optimizer: str | torch.optim.Optimizer = "adam",
    batch_size: int = 64,
    eval_data: Dataset | DataLoader | None = None,
    loss_fn: Callable | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    seed: int = 0,
    precision: str = "fp32",
    micro_batches: int = 1,
    measure: bool = False,
) -> History:
    """Train ``model`` for ``epochs`` epochs and return per-epoch metrics.

    ``optimizer`` is a name from OPTIMIZERS or a ready optimizer. ``loss_fn`` defaults to ``default_loss``
    (cross-entropy for integer class labels, mean squared error for float targets). ``device`` defaults to the
    model's device. ``precision``, ``micro_batches`` and ``measure`` go to ``train_step``. Each epoch
    records train loss/accuracy, seconds, examples per second and, with ``eval_data``, test
    loss/accuracy; with ``measure``, also every step's metrics (``steps``) and ``peak_bytes``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    arguments.positive_int("epochs", epochs)
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters to train")
    device = as_device(device) if device is not None else params[0].device
    model.to(device)
    opt = optimizer if isinstance(optimizer, torch.optim.Optimizer) else make_optimizer(optimizer, params, lr)
    loss_fn = loss_fn or default_loss  # as train_step: cross-entropy for class labels, MSE for float targets
    loader = _loader(train_data, batch_size, shuffle=True, seed=seed)
    history = History()
    tqdm = progress_bar()

    for epoch in tqdm(range(1, epochs + 1), desc="epochs", disable=not progress or epochs == 1):
        row = {
            "epoch": epoch,
            **train_epoch(
                model,
                loader,
                opt,
                loss_fn,
                device,
                progress=False,
                precision=precision,
                micro_batches=micro_batches,
                measure=measure,
            ),
        }
        if eval_data is not None:
            metrics = evaluate(model, eval_data, device, loss_fn)
            row.update(test_loss=metrics["loss"], test_acc=metrics["acc"])
        history.epochs.append(row)
    return history


def make_step_fn(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor | None,
    optimizer: str = "sgd",
    lr: float = 1e-3,
    loss_fn: Callable | None = None,
    micro_batches: int = 1,
    precision: str = "fp32",
) -> Callable[[], float]:
    """A no-argument function doing one full ``train_step`` on a fixed batch (for timing it).

    Notebook 01 times it on the CPU and on a GPU when one is present; notebook 02 measures its
    memory with and without gradient accumulation (``micro_batches``) and mixed ``precision``.
    """
    arguments.instance("model", model, nn.Module, "a torch.nn.Module")
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters to train")
    device = params[0].device
    opt = make_optimizer(optimizer, params, lr)
    batch = (x.to(device), y.to(device) if y is not None else None)
    precision = names.precision(precision)
    scaler = grad_scaler(precision, device)
    model.train()

    def step() -> float:
        return train_step(model, batch, opt, loss_fn, device, micro_batches, precision=precision, scaler=scaler).loss

    return step


def measure_input_pipeline(
    loader: DataLoader, step: Callable[[torch.Tensor, torch.Tensor], object], max_batches: int | None = None
) -> dict:
    """Time a training loop split into waiting for data and computing.

    Returns seconds spent in ``next(batch)`` (``wait_s``), in ``step(x, y)`` (``compute_s``), the
    total, the number of batches and ``idle_fraction`` = wait / total: the share of time the
    processor that trains sits idle, starved of input.
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(f"loader must be a torch DataLoader, got {type(loader).__name__}")
    arguments.optional(arguments.positive_int, "max_batches", max_batches)
    wait = compute = 0.0
    batches = 0
    it = iter(loader)
    start = time.perf_counter()
    while max_batches is None or batches < max_batches:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        step(x, y)
        t2 = time.perf_counter()
        wait, compute, batches = wait + (t1 - t0), compute + (t2 - t1), batches + 1
    total = time.perf_counter() - start
    return {
        "wait_s": wait,
        "compute_s": compute,
        "total_s": total,
        "batches": batches,
        "idle_fraction": wait / total if total > 0 else 0.0,
    }
