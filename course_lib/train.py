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
import importlib.util
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from . import arguments, names
from .hardware import as_device, graph_cut, peak_rss_bytes, reset_peak_rss, synchronize
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


def progress_bar():
    """tqdm's notebook bar where ipywidgets can draw it, its text bar elsewhere (``tqdm.auto`` would warn
    "IProgress not found" in a kernel without ipywidgets, as a plain ``pip install`` has)."""
    if importlib.util.find_spec("ipywidgets") is None:
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm


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
    """Time a training loop split into waiting for data and computing (notebook 03: input pipelines).

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


@dataclass
class ExampleCurve:
    """What ``progress_by_examples`` recorded: held-out metrics at set numbers of examples seen.

    ``examples[i]`` training examples had been used when ``test_acc[i]`` and ``test_loss[i]`` were
    measured (``examples[0] == 0``: the untrained model); ``step_losses`` holds every optimizer step's
    batch loss; ``steps`` counts the optimizer steps."""

    batch_size: int
    micro_batches: int
    lr: float
    examples: list[int]
    test_acc: list[float]
    test_loss: list[float]
    step_losses: list[float]
    steps: int

    @property
    def peak_loss(self) -> float:
        """The highest batch loss of any step (a diverging run climbs far above the untrained loss)."""
        return max(self.step_losses)

    def at(self, examples: int) -> dict:
        """Held-out metrics at the last evaluation with at most ``examples`` examples seen."""
        examples = arguments.nonnegative_int("examples", examples)
        i = max(j for j, e in enumerate(self.examples) if e <= examples)
        return {"examples": self.examples[i], "acc": self.test_acc[i], "loss": self.test_loss[i]}


def progress_by_examples(
    make_model: Callable[[], nn.Module],
    train_data: Dataset,
    eval_data: Dataset,
    *,
    batch_size: int,
    lr: float,
    epochs: int = 10,
    micro_batches: int = 1,
    optimizer: str = "sgd",
    evals_per_epoch: int = 2,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> ExampleCurve:
    """Train a fresh ``make_model()`` and record held-out accuracy and loss against examples seen.
    Notebook 04 (small batches): batch sizes compared per example, not per step.

    Every run is seeded (``seed``: the model's initialisation and the shuffling), takes
    ``len(train_data) // batch_size`` batches an epoch (the last partial batch dropped, so every step
    sees ``batch_size`` examples) through ``train_step`` with ``micro_batches`` (accumulation), and is
    evaluated on ``eval_data`` before training and ``evals_per_epoch`` times an epoch.
    """
    arguments.function("make_model", make_model)
    for name, value in (("train_data", train_data), ("eval_data", eval_data)):
        if not isinstance(value, Dataset):
            raise TypeError(f"{name} must be a torch Dataset, got {type(value).__name__}")
    batch_size = arguments.positive_int("batch_size", batch_size)
    lr = arguments.positive("lr", lr)
    epochs = arguments.positive_int("epochs", epochs)
    micro_batches = arguments.positive_int("micro_batches", micro_batches)
    evals_per_epoch = arguments.positive_int("evals_per_epoch", evals_per_epoch)
    seed = arguments.nonnegative_int("seed", seed)
    if batch_size > len(train_data):
        raise ValueError(f"batch_size ({batch_size}) is larger than the training set ({len(train_data)} examples)")
    if micro_batches > batch_size:
        raise ValueError(f"micro_batches ({micro_batches}) cannot exceed batch_size ({batch_size})")
    device = as_device(device)
    torch.manual_seed(seed)
    model = make_model()
    if not isinstance(model, nn.Module):
        raise TypeError(f"make_model must return a torch.nn.Module, got {type(model).__name__}")
    model.to(device)
    opt = make_optimizer(optimizer, model.parameters(), lr)
    loader = DataLoader(
        train_data, batch_size=batch_size, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(seed)
    )
    per_epoch = len(loader)
    marks = {round(per_epoch * (i + 1) / evals_per_epoch) for i in range(evals_per_epoch)}
    curve = ExampleCurve(batch_size, micro_batches, lr, [], [], [], [], 0)

    def record() -> None:
        metrics = evaluate(model, eval_data, device)
        curve.examples.append(curve.steps * batch_size)
        curve.test_acc.append(metrics["acc"])
        curve.test_loss.append(metrics["loss"])

    record()
    for _ in range(epochs):
        model.train()
        for i, batch in enumerate(loader, start=1):
            curve.step_losses.append(train_step(model, batch, opt, device=device, micro_batches=micro_batches).loss)
            curve.steps += 1
            if i in marks:
                record()
    return curve


#: The layers that normalise over the batch: an example's output depends on the others in its batch.
_BATCH_NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
)


def gradient_noise_scale(
    model: nn.Module,
    data: Dataset | Sequence[torch.Tensor],
    loss_fn: Callable | None = None,
    *,
    max_examples: int = 4096,
) -> dict:
    """The "simple" gradient noise scale ``B_simple = tr(Sigma) / |G|^2`` of McCandlish et al. (2018),
    from per-example gradients. Notebook 04 (small batches): the batch size above which larger batches
    stop saving steps and start wasting examples (the critical batch size is of this order).

    ``G`` is the mean gradient over the examples and ``Sigma`` the covariance of the per-example
    gradients, so ``tr(Sigma) / B`` is the noise a batch of ``B`` adds to ``G``: at ``B = B_simple`` the
    noise is as large as the signal. ``|G|^2`` is corrected for the noise of its own estimate
    (``|mean|^2 - tr(Sigma) / n``). Per-example gradients come from ``torch.func`` (``vmap`` of
    ``grad``) on up to ``max_examples`` examples. Returns ``{"b_simple", "trace_sigma",
    "grad_norm_sq", "examples"}``. The model must have no batch-coupled layer (BatchNorm).
    """
    from torch.func import functional_call, grad, vmap

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if any(isinstance(m, _BATCH_NORMS) for m in model.modules()):
        raise ValueError("model has BatchNorm: per-example gradients are not defined when examples share statistics")
    max_examples = arguments.integer("max_examples", max_examples, minimum=2)
    if isinstance(data, Dataset) and hasattr(data, "tensors"):
        x, y = data.tensors[0], data.tensors[-1]
    elif isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data):
        x, y = data
    else:
        raise TypeError("data must be a TensorDataset or a pair (inputs, targets) of tensors")
    if len(x) < 2:
        raise ValueError("data needs at least 2 examples to estimate a variance")
    params = {k: v.detach() for k, v in model.named_parameters()}
    if not params:
        raise ValueError("model has no parameters")
    device = next(iter(params.values())).device
    x, y = x[:max_examples].to(device), y[:max_examples].to(device)
    loss_fn = loss_fn or default_loss

    def one(p, xi, yi):
        return loss_fn(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    was_training = model.training
    model.eval()
    try:
        per = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
    finally:
        model.train(was_training)
    flat = torch.cat([g.flatten(1) for g in per.values()], 1).double()
    n = len(flat)
    mean = flat.mean(0)
    trace = float((flat - mean).pow(2).sum(1).sum() / (n - 1))
    g2 = float(mean.pow(2).sum()) - trace / n
    if g2 <= 0:
        raise ValueError(
            "the mean gradient is indistinguishable from noise here (|G|^2 <= 0 after the correction): "
            "use more examples, or a model that is not at a minimum"
        )
    return {"b_simple": trace / g2, "trace_sigma": trace, "grad_norm_sq": g2, "examples": n}
