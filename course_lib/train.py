"""One small, readable training loop that later modules extend instead of copying.

    history = fit(model, split.train, eval_data=split.test, epochs=5, optimizer="adam")

The loop is split into three functions so a later module can replace one piece:
``train_step`` (one batch: forward, loss, backward, update), ``train_epoch`` (all batches,
with a progress bar) and ``fit`` (epochs, evaluation, per-epoch metrics).
Used from notebook 01 (CPU vs GPU step time) onwards.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .models import OPTIMIZERS, make_optimizer  # noqa: F401  (re-exported: train.make_optimizer)

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
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle,
                      generator=torch.Generator().manual_seed(seed))


def train_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], optimizer: torch.optim.Optimizer,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               device: torch.device | str = "cpu", micro_batches: int = 1) -> tuple[float, int, int]:
    """One update on one batch. Returns (loss, correct predictions, examples).

    ``micro_batches > 1`` is gradient accumulation (notebook 02: memory): the batch is split
    into that many slices, each slice's loss is scaled by its share of the batch and
    back-propagated on its own (so only one slice's activations are alive at a time), and the
    summed gradients make one optimizer step: the same update as the whole batch for a loss that
    averages over examples (BatchNorm statistics differ: they see one slice at a time).
    """
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(f"micro_batches must be a positive int, got {micro_batches!r}")
    x, y = (t.to(device, non_blocking=True) for t in batch)
    if micro_batches > len(y):
        raise ValueError(f"micro_batches ({micro_batches}) cannot exceed the batch size ({len(y)})")
    optimizer.zero_grad(set_to_none=True)
    total_loss, correct = 0.0, 0
    for xs, ys in zip(x.tensor_split(micro_batches), y.tensor_split(micro_batches)):
        out = model(xs)
        loss = loss_fn(out, ys) * (len(ys) / len(y))
        loss.backward()
        total_loss += float(loss.detach())
        if out.dim() == 2 and ys.dim() == 1:
            correct += int((out.argmax(1) == ys).sum())
    optimizer.step()
    return total_loss, correct, len(y)


def train_epoch(model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer,
                loss_fn: Callable, device: torch.device | str = "cpu", progress: bool = True,
                desc: str = "train") -> dict:
    """All batches of one epoch; returns mean loss, accuracy and seconds."""
    from tqdm.auto import tqdm

    model.train()
    total_loss, correct, seen = 0.0, 0, 0
    start = time.perf_counter()
    for batch in tqdm(loader, desc=desc, leave=False, disable=not progress):
        loss, c, n = train_step(model, batch, optimizer, loss_fn, device)
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
        device: torch.device | str | None = None, progress: bool = True, seed: int = 0) -> History:
    """Train ``model`` for ``epochs`` epochs and return per-epoch metrics.

    ``optimizer`` is a name from OPTIMIZERS or a ready optimizer. ``device`` defaults to the
    model's device. Each epoch records train loss/accuracy, seconds and, with ``eval_data``,
    test loss/accuracy.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters to train")
    device = torch.device(device) if device is not None else params[0].device
    model.to(device)
    opt = optimizer if isinstance(optimizer, torch.optim.Optimizer) else make_optimizer(optimizer, params, lr)
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    loader = _loader(train_data, batch_size, shuffle=True, seed=seed)
    history = History()
    from tqdm.auto import tqdm

    for epoch in tqdm(range(1, epochs + 1), desc="epochs", disable=not progress or epochs == 1):
        row = {"epoch": epoch, **train_epoch(model, loader, opt, loss_fn, device, progress=False)}
        if eval_data is not None:
            metrics = evaluate(model, eval_data, device, loss_fn)
            row.update(test_loss=metrics["loss"], test_acc=metrics["acc"])
        history.epochs.append(row)
    return history


def make_step_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor, optimizer: str = "sgd", lr: float = 1e-3,
                 loss_fn: Callable | None = None, micro_batches: int = 1) -> Callable[[], float]:
    """A no-argument function doing one full training step on a fixed batch (for timing it).

    Notebook 01 times it on the CPU and on a GPU when one is present; notebook 02 measures its
    memory with and without gradient accumulation (``micro_batches``).
    """
    params = list(model.parameters())
    if not params:
        raise ValueError("model has no parameters to train")
    device = params[0].device
    opt = make_optimizer(optimizer, params, lr)
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    batch = (x.to(device), y.to(device))
    model.train()

    def step() -> float:
        return train_step(model, batch, opt, loss_fn, device, micro_batches)[0]

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
    if max_batches is not None and (isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1):
        raise ValueError(f"max_batches must be a positive int or None, got {max_batches!r}")
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
