"""The course's one training step, and the small loop built on it.

    history = fit(model, split.train, eval_data=split.test, epochs=5, optimizer="adam")

``train_step`` is the only place in ``course_lib`` where a model is trained: the loop here, the
memory meters (notebook 02), the capped out-of-memory runs, the streaming pass, and later modules
all call it, so a feature added to it (autocast, gradient accumulation, loss scaling, a gradient
hook for compression, a DDP model) works everywhere. It sits low in the library (layer 1) for that
reason. The loop is split so a later module can replace one piece: ``train_step`` (one batch:
forward, loss, backward, update), ``train_epoch`` (all batches, with a progress bar) and ``fit``
(epochs, evaluation, per-epoch metrics). Used from notebook 01 (CPU vs GPU step time) onwards.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from . import names, validate
from .hardware import as_device
from .models import OPTIMIZERS, make_optimizer  # noqa: F401  (re-exported: train.make_optimizer)

PRECISIONS = names.PRECISIONS


@dataclass
class History:
    """Per-epoch metrics of a ``fit`` run: one dict per epoch."""

    epochs: list[dict] = field(default_factory=list)

    def __getitem__(self, key: str) -> list:
        return [e[key] for e in self.epochs if key in e]

    @property
    def last(self) -> dict:
        return self.epochs[-1] if self.epochs else {}


def _loader(data: Dataset | DataLoader, batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    if isinstance(data, DataLoader):
        return data
    if not isinstance(data, Dataset):
        raise TypeError(f"data must be a torch Dataset or DataLoader, got {type(data).__name__}")
    batch_size = validate.positive_int("batch_size", batch_size)
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle,
                      generator=torch.Generator().manual_seed(seed))


def autocast(precision: str, device: torch.device | str = "cpu"):
    """The autocast context of a precision: none for fp32, ``torch.autocast`` in bf16 or fp16 otherwise."""
    kind = names.precision_dtype(precision)
    if kind is None:
        return contextlib.nullcontext()
    return torch.autocast(as_device(device).type, dtype=names.torch_dtype(kind))


def grad_scaler(precision: str, device: torch.device | str = "cpu") -> torch.amp.GradScaler | None:
    """A ``torch.amp.GradScaler`` where ``precision`` needs loss scaling on ``device`` (fp16-mixed on a
    CUDA GPU: fp16's narrow range flushes small gradients to zero), else None. fit, train_epoch and
    make_step_fn use it, so fp16 training on a T4 scales its loss without being asked."""
    dev = as_device(device)
    return torch.amp.GradScaler(dev.type) if names.precision(precision) == "fp16-mixed" and dev.type == "cuda" else None


def default_loss(out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """Cross-entropy for integer targets, mean squared error for float targets, the output's sum
    without a target (memory measurements that need a backward pass but no labels)."""
    if target is None:
        return out.float().sum()
    if target.dtype.is_floating_point:
        return nn.functional.mse_loss(out.float(), target)
    return nn.functional.cross_entropy(out, target)


class StepResult(NamedTuple):
    """What one ``train_step`` did: the batch's mean loss, correct predictions (classification),
    and the number of examples. Unpacks like the tuple ``(loss, correct, examples)``."""

    loss: float
    correct: int
    examples: int


def _split_batch(batch: Any) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
    if isinstance(batch, torch.Tensor):
        return (batch,), None
    if not isinstance(batch, (tuple, list)) or not batch:
        raise TypeError(f"batch must be (inputs..., target) or a tensor, got {type(batch).__name__}")
    *inputs, target = batch
    if not inputs:
        return (target,), None
    if target is not None and not isinstance(target, torch.Tensor):
        raise TypeError(f"the batch's target must be a tensor or None, got {type(target).__name__}")
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("the batch's inputs must be tensors")
    return tuple(inputs), target


def train_step(model: nn.Module, batch: Sequence[torch.Tensor | None] | torch.Tensor,
               optimizer: torch.optim.Optimizer, loss_fn: Callable | None = None,
               device: torch.device | str | None = None, micro_batches: int = 1, *, precision: str = "fp32",
               scaler: torch.amp.GradScaler | None = None,
               before_update: Callable[[nn.Module], None] | None = None) -> StepResult:
    """One update on one batch: forward, loss, backward, optimizer step. Every training in the course.

    ``batch`` is ``(inputs..., target)``: the last element is the target (None: the loss is the
    output's sum), the others go to the model. ``loss_fn(output, target)`` defaults to
    ``default_loss``. ``device`` defaults to the model's.

    * ``micro_batches > 1`` is gradient accumulation (notebook 02: memory): the batch is split into
      that many slices, each slice's loss is scaled by its share of the batch and back-propagated on
      its own (only one slice's activations are alive at a time), and the summed gradients make one
      optimizer step: the same update as the whole batch for a loss that averages over examples
      (BatchNorm differs: it normalises each slice with its own statistics). A DDP model
      synchronises gradients on the last slice only (``no_sync`` for the others).
    * ``precision``: "fp32", "bf16-mixed" or "fp16-mixed" (``torch.autocast``; weights, gradients and
      optimizer state stay fp32). ``scaler``: a ``torch.amp.GradScaler`` for fp16 loss scaling.
    * ``before_update(model)`` runs after the backward pass, before the optimizer step, on real
      (unscaled) gradients: clip, compress or inspect them there. After the update the gradients
      are released (set to None), so they do not occupy memory during the next forward pass.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (see make_optimizer), got {type(optimizer).__name__}")
    micro_batches = validate.positive_int("micro_batches", micro_batches)
    precision = names.precision(precision)
    if before_update is not None:
        validate.function("before_update", before_update)
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    device = as_device(device)
    inputs, target = _split_batch(batch)
    inputs = tuple(t.to(device, non_blocking=True) for t in inputs)
    target = target.to(device, non_blocking=True) if target is not None else None
    n = len(inputs[0])
    if micro_batches > n:
        raise ValueError(f"micro_batches ({micro_batches}) cannot exceed the batch size ({n})")
    loss_fn = loss_fn or default_loss
    pieces = [t.tensor_split(micro_batches) for t in inputs]
    targets = target.tensor_split(micro_batches) if target is not None else [None] * micro_batches
    optimizer.zero_grad(set_to_none=True)
    total_loss, correct = 0.0, 0
    for i in range(micro_batches):
        xs = tuple(p[i] for p in pieces)
        ys = targets[i]
        sync = contextlib.nullcontext() if i == micro_batches - 1 or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            with autocast(precision, device):
                out = model(*xs)
                loss = loss_fn(out, ys) * (len(xs[0]) / n)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        total_loss += float(loss.detach())
        if ys is not None and out.dim() == 2 and ys.dim() == 1 and not ys.dtype.is_floating_point:
            correct += int((out.argmax(1) == ys).sum())
    if before_update is not None:
        if scaler is not None:
            scaler.unscale_(optimizer)
        before_update(model)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # gradients are not kept through the next forward pass
    return StepResult(total_loss, correct, n)


def train_epoch(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer,
                loss_fn: Callable | None = None, device: torch.device | str | None = None, progress: bool = True,
                desc: str = "train", *, precision: str = "fp32", micro_batches: int = 1) -> dict:
    """All batches of one epoch (``train_step`` each); returns mean loss, accuracy and seconds."""
    from tqdm.auto import tqdm

    model.train()
    total_loss, correct, seen = 0.0, 0, 0
    scaler = grad_scaler(precision, device if device is not None else next(model.parameters()).device)
    start = time.perf_counter()
    for batch in tqdm(loader, desc=desc, leave=False, disable=not progress):
        loss, c, n = train_step(model, batch, optimizer, loss_fn, device, micro_batches, precision=precision,
                                scaler=scaler)
        total_loss += loss * n
        correct += c
        seen += n
    return {"train_loss": total_loss / max(seen, 1), "train_acc": correct / max(seen, 1),
            "seconds": time.perf_counter() - start}


@torch.no_grad()
def evaluate(model: nn.Module, data: Dataset | DataLoader, device: torch.device | str = "cpu",
             loss_fn: Callable | None = None, batch_size: int = 256) -> dict:
    """Mean loss and accuracy on held-out data (model in eval mode)."""
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    device = as_device(device)
    loader = _loader(data, batch_size, shuffle=False, seed=0)
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        out = model(x)
        total_loss += float(loss_fn(out, y)) * len(y)
        if out.dim() == 2 and y.dim() == 1:
            correct += int((out.argmax(1) == y).sum())
        seen += len(y)
    return {"loss": total_loss / max(seen, 1), "acc": correct / max(seen, 1)}


def fit(model: nn.Module, train_data: Dataset | DataLoader, *, epochs: int = 5, lr: float = 1e-3,
        optimizer: str | torch.optim.Optimizer = "adam", batch_size: int = 64,
        eval_data: Dataset | DataLoader | None = None, loss_fn: Callable | None = None,
        device: torch.device | str | None = None, progress: bool = True, seed: int = 0,
        precision: str = "fp32", micro_batches: int = 1) -> History:
    """Train ``model`` for ``epochs`` epochs and return per-epoch metrics.

    ``optimizer`` is a name from OPTIMIZERS or a ready optimizer. ``device`` defaults to the
    model's device. ``precision`` and ``micro_batches`` go to ``train_step``. Each epoch records
    train loss/accuracy, seconds and, with ``eval_data``, test loss/accuracy.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    validate.positive_int("epochs", epochs)
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters to train")
    device = as_device(device) if device is not None else params[0].device
    model.to(device)
    opt = optimizer if isinstance(optimizer, torch.optim.Optimizer) else make_optimizer(optimizer, params, lr)
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    loader = _loader(train_data, batch_size, shuffle=True, seed=seed)
    history = History()
    from tqdm.auto import tqdm

    for epoch in tqdm(range(1, epochs + 1), desc="epochs", disable=not progress or epochs == 1):
        row = {"epoch": epoch, **train_epoch(model, loader, opt, loss_fn, device, progress=False,
                                             precision=precision, micro_batches=micro_batches)}
        if eval_data is not None:
            metrics = evaluate(model, eval_data, device, loss_fn)
            row.update(test_loss=metrics["loss"], test_acc=metrics["acc"])
        history.epochs.append(row)
    return history


def make_step_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor | None, optimizer: str = "sgd",
                 lr: float = 1e-3, loss_fn: Callable | None = None, micro_batches: int = 1,
                 precision: str = "fp32") -> Callable[[], float]:
    """A no-argument function doing one full ``train_step`` on a fixed batch (for timing it).

    Notebook 01 times it on the CPU and on a GPU when one is present; notebook 02 measures its
    memory with and without gradient accumulation (``micro_batches``) and mixed ``precision``.
    """
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


def measure_input_pipeline(loader: DataLoader, step: Callable[[torch.Tensor, torch.Tensor], object],
                           max_batches: int | None = None) -> dict:
    """Time a training loop split into waiting for data and computing (notebook 03: input pipelines).

    Returns seconds spent in ``next(batch)`` (``wait_s``), in ``step(x, y)`` (``compute_s``), the
    total, the number of batches and ``idle_fraction`` = wait / total: the share of time the
    processor that trains sits idle, starved of input.
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(f"loader must be a torch DataLoader, got {type(loader).__name__}")
    validate.optional(validate.positive_int, "max_batches", max_batches)
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
    return {"wait_s": wait, "compute_s": compute, "total_s": total, "batches": batches,
            "idle_fraction": wait / total if total > 0 else 0.0}
