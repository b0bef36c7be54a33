"""The pruning notebook's experiments: accuracy against sparsity, per-layer sensitivity, models to time."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils import prune

from ... import arguments, models, train
from .masks import (
    _model,
    _share,
    copy_model,
    effective_weight,
    make_permanent,
    prunable_layers,
    prune_channels,
    prune_global,
    prune_unstructured,
)
from .report import sparsity_report
from .shrink import remove_units
from .sparse import to_sparse


def norm_removed(original: nn.Module, pruned: nn.Module) -> float:
    """Share of the weights' squared L2 norm (all Linear/Conv2d weights together) that pruning took
    away: 1 - |w_pruned|^2 / |w|^2. Magnitude pruning takes the smallest weights, so at a given
    sparsity it removes little of the norm; removing whole units takes large weights too (notebook
    05.1 section 2's prediction of which method hurts accuracy more)."""
    before = [effective_weight(m).detach() for _, m in prunable_layers(original)]
    after = [effective_weight(m).detach() for _, m in prunable_layers(pruned)]
    if [w.shape for w in before] != [w.shape for w in after]:
        raise ValueError("original and pruned must have the same layers and shapes (prune a copy of original)")
    total = sum(float(w.pow(2).sum()) for w in before)
    return 1 - sum(float(w.pow(2).sum()) for w in after) / total if total else 0.0


#: Pruning method name -> function(model, amount), for ``accuracy_sweep``.
PRUNERS: dict[str, Callable[[nn.Module, float], nn.Module]] = {
    "global": prune_global,
    "layer": prune_unstructured,
    "channels": prune_channels,
}


def accuracy_sweep(
    model: nn.Module,
    method: str,
    amounts: Sequence[float],
    train_data,
    test_data,
    *,
    finetune_epochs: int = 2,
    lr: float = 1e-3,
    device: torch.device | str | None = None,
    seed: int = 0,
) -> list[dict]:
    """Accuracy against sparsity (notebook 05.1 section 2): for each amount, a copy of the trained
    ``model`` pruned by ``method`` ("global", "layer" or "channels"), evaluated, fine-tuned with
    ``train.fit`` (Adam, masks kept: pruned weights stay 0) and evaluated again.

    Returns one dict per amount: ``amount``, ``sparsity`` (zero fraction of the weights), ``removed``
    (the fraction really removed: zero, or reading only a removed unit's 0; ``sparsity_report``),
    ``norm_removed`` (the prediction: ``norm_removed``), ``acc`` (before fine-tuning),
    ``acc_finetuned`` and ``still_sparse`` (the zeros survived training).
    """
    _model(model)
    prune_fn = PRUNERS[arguments.choice("method", method, PRUNERS)]
    amounts = [_share("every entry of amounts", a) for a in amounts]
    finetune_epochs = arguments.nonnegative_int("finetune_epochs", finetune_epochs)
    device = device if device is not None else next(model.parameters()).device
    rows = []
    for amount in amounts:
        pruned = prune_fn(copy_model(model), amount)
        report = sparsity_report(pruned)
        row = {
            "amount": amount,
            "sparsity": report.fraction,
            "removed": report.removed_fraction,
            "norm_removed": norm_removed(model, pruned),
            "acc": train.evaluate(pruned, test_data, device)["acc"],
        }
        if finetune_epochs:
            train.fit(pruned, train_data, epochs=finetune_epochs, lr=lr, optimizer="adam", progress=False, seed=seed)
        row["acc_finetuned"] = train.evaluate(pruned, test_data, device)["acc"]
        row["still_sparse"] = sparsity_report(pruned).zeros >= report.zeros
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Sensitivity:
    """One layer of ``sensitivity_scan``: held-out accuracy with only this layer pruned to each sparsity."""

    layer: str
    weights: int
    amounts: tuple[float, ...]
    accuracy: tuple[float, ...]
    baseline: float

    @property
    def drops(self) -> tuple[float, ...]:
        """Accuracy lost at each amount, in points (baseline minus pruned, x 100)."""
        return tuple(100 * (self.baseline - a) for a in self.accuracy)

    def drop_at(self, amount: float) -> float:
        """Points lost at one of the scanned ``amounts``."""
        if amount not in self.amounts:
            raise ValueError(f"amount {amount!r} was not scanned; scanned: {', '.join(map(str, self.amounts))}")
        return self.drops[self.amounts.index(amount)]

    def tolerated(self, max_drop: float) -> float:
        """The highest scanned sparsity at which this layer, and every lower one, lost at most ``max_drop``
        points (0.0 when even the lowest lost more): how far this layer can be pruned alone."""
        max_drop = arguments.nonnegative("max_drop", max_drop)
        best = 0.0
        for amount, drop in sorted(zip(self.amounts, self.drops)):
            if drop > max_drop:
                break
            best = amount
        return best


def sensitivity_scan(
    model: nn.Module, amounts: Sequence[float], test_data, *, device: torch.device | str | None = None
) -> list[Sensitivity]:
    """Which layers tolerate pruning (notebook 05.1 section 3): each Linear/Conv2d layer of the trained
    ``model`` is pruned *alone*, by magnitude (``prune.l1_unstructured``), to each of ``amounts``, on a copy,
    and the copy is evaluated on ``test_data``, with no fine-tuning. One ``Sensitivity`` per layer, in module
    order. This is the per-layer sensitivity analysis that sets a pruning threshold per layer (Han et al.,
    *Learning both Weights and Connections*, 2015; Li et al., *Pruning Filters for Efficient ConvNets*, 2017,
    did the same with whole filters)."""
    _model(model)
    amounts = tuple(_share("every entry of amounts", a) for a in amounts)
    if not amounts:
        raise ValueError("amounts must list at least one sparsity, e.g. [0.5, 0.9]")
    device = device if device is not None else next(model.parameters()).device
    baseline = train.evaluate(model, test_data, device)["acc"]
    out = []
    for name, layer in prunable_layers(model):
        accs = []
        for amount in amounts:
            pruned = copy_model(model)
            prune.l1_unstructured(pruned.get_submodule(name), "weight", amount=amount)
            accs.append(train.evaluate(pruned, test_data, device)["acc"])
        out.append(Sensitivity(name, effective_weight(layer).numel(), amounts, tuple(accs), baseline))
    return out


def speed_models(
    width: int = 1024,
    *,
    in_features: int = 64,
    out_features: int = 10,
    depth: int = 2,
    fraction: float = 0.5,
    sparse_at: Sequence[float] = (0.5, 0.95),
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> dict[str, nn.Module]:
    """The models notebook 05.1 section 4 times side by side, all from one seeded ``models.MLP``
    (``depth`` hidden layers of ``width``), in eval mode: "dense"; "zeros" (``fraction`` of each
    layer's weights zeroed, same shapes); "shrunk" (``fraction`` of the hidden units removed);
    "CSR 50%" etc. (each layer pruned to that sparsity, stored in CSR). Untrained weights: speed
    and size do not depend on what the weights are, only on their shapes and how many are zero."""
    width, depth = arguments.positive_int("width", width), arguments.positive_int("depth", depth)
    fraction = _share("fraction", fraction)
    torch.manual_seed(arguments.nonnegative_int("seed", seed))
    dense = models.MLP(in_features, [width] * depth, out_features).to(device).eval()
    out = {
        "dense": dense,
        "zeros": make_permanent(prune_unstructured(copy.deepcopy(dense), fraction)),
        "shrunk": remove_units(dense, fraction),
    }
    for s in sparse_at:
        out[f"CSR {_share('every entry of sparse_at', s):.0%}"] = to_sparse(prune_unstructured(copy.deepcopy(dense), s))
    return {name: m.eval() for name, m in out.items()}


def inference_fn(model: nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """A no-argument function running ``model(x)`` without autograd (``torch.inference_mode``), to time."""
    _model(model)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    return run
