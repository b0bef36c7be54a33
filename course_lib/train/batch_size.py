"""How the batch size matters: held-out accuracy against examples seen, and the gradient noise scale.

``progress_by_examples`` trains a fresh model and records its held-out metrics per example seen (batch sizes
compared per example, not per step); ``gradient_noise_scale`` estimates the batch size above which larger
batches stop saving steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .. import arguments
from ..hardware import as_device
from ..models import make_optimizer
from .step import default_loss, evaluate, train_step


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
