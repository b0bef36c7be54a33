"""One batch at a time: the training step, and the evaluation pass built from the same pieces.

``train_step`` (forward, loss, backward, update) and ``evaluate`` (a held-out pass) split a batch, call the
loss and cut a TPU's lazy graph (``graph_cut``) once per batch, reading values only after the cut; a test
replaces ``graph_cut`` here to count the cuts.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .. import arguments, names
from ..hardware import as_device, graph_cut, peak_rss_bytes, reset_peak_rss, synchronize


def _loader(data: Dataset | DataLoader, batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    if isinstance(data, DataLoader):
        return data
    if not isinstance(data, Dataset):
        raise TypeError(f"data must be a torch Dataset or DataLoader, got {type(data).__name__}")
    batch_size = arguments.positive_int("batch_size", batch_size)
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=torch.Generator().manual_seed(seed))


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


def call_loss(
    loss_fn: Callable, out: torch.Tensor, target: torch.Tensor | None, inputs: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """``loss_fn(out, target)``, or ``loss_fn(out, target, inputs)`` for a loss whose ``wants_inputs``
    attribute is true: a loss that looks at the batch's inputs too (knowledge distillation runs its
    teacher on them)."""
    if getattr(loss_fn, "wants_inputs", False):
        return loss_fn(out, target, inputs)
    return loss_fn(out, target)


def default_loss(out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """Cross-entropy for integer targets, mean squared error for float targets, the output's sum
    without a target (memory measurements that need a backward pass but no labels)."""
    arguments.instance("out", out, torch.Tensor, "a torch.Tensor")
    if target is None:
        return out.float().sum()
    if target.dtype.is_floating_point:
        return nn.functional.mse_loss(out.float(), target)
    return nn.functional.cross_entropy(out, target)


@dataclass
class StepResult:
    """What one ``train_step`` did: the batch's mean loss, correct predictions (classification), the number
    of examples, and the step's metrics. Unpacks like the tuple ``(loss, correct, examples)``.

    ``seconds`` is the step's wall time (the device synchronised before and after when ``measure``);
    ``peak_bytes`` the step's peak memory where ``measure`` was on: allocated bytes on a CUDA GPU, the
    process's resident peak (VmHWM, Linux) on a CPU, None elsewhere; ``skipped`` is True when fp16 loss
    scaling found an inf or NaN gradient and skipped the update; ``scale`` the loss scale used (fp16)."""

    loss: float
    correct: int
    examples: int
    seconds: float = 0.0
    peak_bytes: int | None = None
    skipped: bool = False
    scale: float | None = None

    def __iter__(self):
        return iter((self.loss, self.correct, self.examples))

    @property
    def examples_per_s(self) -> float:
        """Throughput of this step (examples per second)."""
        return self.examples / self.seconds if self.seconds > 0 else float("inf")


FP16_ON_CPU = (
    "fp16 compute on a CPU is hundreds of times slower than fp32: most CPUs have no fp16 arithmetic "
    "(AVX-512 FP16 and Arm's FP16 are the exceptions), and PyTorch's CPU fp16 kernels convert "
    "the inputs and run in a slow fallback (a step can "
    "take minutes). Use bf16 (precision='bf16-mixed': the same 2 bytes per value, with fp32's range), "
    "or a GPU for fp16. To see what fp16 does to gradients on a CPU, cast tensors to torch.float16 "
    "(precision.underflow, notebook 04)."
)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "cpu":
        reset_peak_rss()


def _peak(device: torch.device) -> int | None:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    if device.type == "cpu":
        return peak_rss_bytes()
    return None


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


def train_step(
    model: nn.Module,
    batch: Sequence[torch.Tensor | None] | torch.Tensor,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable | None = None,
    device: torch.device | str | None = None,
    micro_batches: int = 1,
    *,
    precision: str = "fp32",
    scaler: torch.amp.GradScaler | None = None,
    before_update: Callable[[nn.Module], None] | None = None,
    measure: bool = False,
) -> StepResult:
    """One update on one batch: forward, loss, backward, optimizer step. Every training in the course.

    ``batch`` is ``(inputs..., target)``: the last element is the target (None: the loss is the
    output's sum), the others go to the model. ``loss_fn(output, target)`` defaults to
    ``default_loss``; a loss with ``wants_inputs = True`` is called as ``loss_fn(output, target,
    inputs)`` (``call_loss``: a distillation loss runs its teacher on the inputs). ``device``
    defaults to the model's.

    * ``micro_batches > 1`` is gradient accumulation (memory): the batch is split into
      that many slices, each slice's loss is scaled by its share of the batch and back-propagated on
      its own (only one slice's activations are alive at a time), and the summed gradients make one
      optimizer step: the same update as the whole batch for a loss that averages over examples
      (BatchNorm differs: it normalises each slice with its own statistics). A DDP model
      synchronises gradients on the last slice only (``no_sync`` for the others).
    * ``precision``: "fp32", "bf16-mixed" or "fp16-mixed" (``torch.autocast``; weights, gradients and
      optimizer state stay fp32). ``scaler``: a ``torch.amp.GradScaler`` for fp16 loss scaling (an inf
      or NaN gradient then skips the update and lowers the scale: ``StepResult.skipped``). fp16-mixed on
      a CPU raises a ValueError: it would run hundreds of times slower than fp32 (use bf16-mixed).
    * ``measure``: synchronise the device around the step and record its peak memory
      (``StepResult.seconds``, ``.peak_bytes``, ``.examples_per_s``; notebook 04's per-step metrics).
    * ``before_update(model)`` runs after the backward pass, before the optimizer step, on real
      (unscaled) gradients: clip, compress or inspect them there. After the update the gradients
      are released (set to None), so they do not occupy memory during the next forward pass.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer (see make_optimizer), got {type(optimizer).__name__}"
        )
    micro_batches = arguments.positive_int("micro_batches", micro_batches)
    precision = names.precision(precision)
    if before_update is not None:
        arguments.function("before_update", before_update)
    device = _step_device(model, device)
    if precision == "fp16-mixed" and device.type == "cpu":
        raise ValueError(FP16_ON_CPU)
    if measure:
        synchronize(device)
        _reset_peak(device)
    start = time.perf_counter()
    inputs, target = _split_batch(batch)
    inputs = tuple(t.to(device, non_blocking=True) for t in inputs)
    target = target.to(device, non_blocking=True) if target is not None else None
    n = len(inputs[0])
    if micro_batches > n:
        raise ValueError(f"micro_batches ({micro_batches}) cannot exceed the batch size ({n})")
    optimizer.zero_grad(set_to_none=True)
    losses, hits = _forward_backward(
        model, inputs, target, loss_fn or default_loss, micro_batches, precision, device, scaler
    )
    skipped, scale = _update(model, optimizer, scaler, before_update)
    graph_cut(device)  # a TPU compiles and runs this step as one graph; values are read after it
    total_loss, correct = sum(float(t) for t in losses), sum(int(t) for t in hits)
    if measure:
        synchronize(device)
    seconds = time.perf_counter() - start
    return StepResult(total_loss, correct, n, seconds, _peak(device) if measure else None, skipped, scale)


def _step_device(model: nn.Module, device: torch.device | str | None) -> torch.device:
    """``device``, or the model's (the CPU for a model without parameters), checked."""
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    return as_device(device)


def _forward_backward(
    model: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    target: torch.Tensor | None,
    loss_fn: Callable,
    micro_batches: int,
    precision: str,
    device: torch.device,
    scaler: torch.amp.GradScaler | None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Forward and backward pass of each micro-batch, its loss scaled by its share of the batch; returns the
    losses and the correct counts as tensors, read after the step's graph cut (reading one earlier splits a
    TPU's graph). A DDP model synchronises gradients on the last micro-batch only."""
    n = len(inputs[0])
    pieces = [t.tensor_split(micro_batches) for t in inputs]
    targets = target.tensor_split(micro_batches) if target is not None else [None] * micro_batches
    losses, hits = [], []
    for i in range(micro_batches):
        xs = tuple(p[i] for p in pieces)
        ys = targets[i]
        sync = contextlib.nullcontext() if i == micro_batches - 1 or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            with autocast(precision, device):
                out = model(*xs)
                loss = call_loss(loss_fn, out, ys, xs) * (len(xs[0]) / n)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        losses.append(loss.detach())
        if ys is not None and out.dim() == 2 and ys.dim() == 1 and not ys.dtype.is_floating_point:
            hits.append((out.argmax(1) == ys).sum())
    return losses, hits


def _update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    before_update: Callable[[nn.Module], None] | None,
) -> tuple[bool, float | None]:
    """``before_update`` on real (unscaled) gradients, the optimizer step (through ``scaler``: it may skip), and
    the gradients released; returns ``(skipped, the loss scale used)``."""
    if before_update is not None:
        if scaler is not None:
            scaler.unscale_(optimizer)
        before_update(model)
    skipped, scale = False, None
    if scaler is not None:
        scale = float(scaler.get_scale())
        scaler.step(optimizer)
        scaler.update()
        skipped = float(scaler.get_scale()) < scale  # the scaler lowers its scale only after skipping a step
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # gradients are not kept through the next forward pass
    return skipped, scale


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Dataset | DataLoader,
    device: torch.device | str = "cpu",
    loss_fn: Callable | None = None,
    batch_size: int = 256,
) -> dict:
    """Mean loss and accuracy on held-out data (model in eval mode). Batches take the forms ``train_step``
    takes, ``(inputs..., target)``, and the loss defaults to the same ``default_loss`` (cross-entropy for
    integer targets, mean squared error for float ones); accuracy counts only where the output has one
    score per class and the target one class per example (0 otherwise)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    loss_fn = loss_fn or default_loss
    device = as_device(device)
    loader = _loader(data, batch_size, shuffle=False, seed=0)
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    for batch in loader:
        inputs, y = _split_batch(batch)
        inputs = tuple(t.to(device) for t in inputs)
        y = y.to(device) if y is not None else None
        out = model(*inputs)
        loss = call_loss(loss_fn, out, y, inputs)
        hits = (
            (out.argmax(1) == y).sum()
            if y is not None and out.dim() == 2 and y.dim() == 1 and not y.dtype.is_floating_point
            else None
        )
        graph_cut(device)  # one graph per batch on a TPU, read after the cut
        n = len(inputs[0])
        total_loss += float(loss) * n
        correct += int(hits) if hits is not None else 0
        seen += n
    return {"loss": total_loss / max(seen, 1), "acc": correct / max(seen, 1)}
