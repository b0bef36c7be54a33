"""Low-rank factorisation: one weight matrix becomes two thin ones, through the SVD (notebook 05.3).

A Linear layer computes ``y = W x + b`` with ``W`` of shape ``out x in``: ``out * in`` weights. The
singular value decomposition writes ``W = U diag(s) V^T`` with ``s`` sorted from large to small.
Keeping the first ``r`` singular values gives ``W_r = (U_r diag(s_r)^1/2) (diag(s_r)^1/2 V_r^T)``: a
Linear ``in -> r`` without bias followed by a Linear ``r -> out`` with the bias, ``r * (in + out)``
weights instead of ``in * out``. It saves parameters (and FLOPs) when ``r < in * out / (in + out)``.

Eckart and Young (1936): no rank-``r`` matrix is closer to ``W`` in the Frobenius norm than ``W_r``,
and the distance is exactly the discarded singular values::

    ||W - W_r||_F / ||W||_F = sqrt(sum_{i > r} s_i^2 / sum_i s_i^2)

so the error is *predicted* before anything is rebuilt (``predicted_error``) and measured after
(``measured_error``). ``rank_for_energy`` picks the smallest rank keeping a fraction of the "energy"
(the sum of squared singular values): keeping 99 % of it means a relative error of at most 10 %.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from .. import arguments
from ..models import count_parameters
from ..train import evaluate, fit

__all__ = [
    "LowRankLinear",
    "singular_values",
    "rank_for_energy",
    "predicted_error",
    "measured_error",
    "factorize_linear",
    "factorize_model",
    "linear_parameters",
    "lowrank_parameters",
    "break_even_rank",
    "RankPoint",
    "rank_sweep",
]


def _linear(name: str, layer: nn.Module) -> nn.Linear:
    if not isinstance(layer, nn.Linear):
        raise TypeError(f"{name} must be a torch.nn.Linear, got {type(layer).__name__}")
    return layer


def _matrix(weight: torch.Tensor | nn.Linear) -> torch.Tensor:
    if isinstance(weight, nn.Linear):
        weight = weight.weight
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a 2-D tensor or an nn.Linear, got {type(weight).__name__}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be a 2-D matrix, got shape {tuple(weight.shape)}")
    return weight.detach()


def singular_values(weight: torch.Tensor | nn.Linear) -> torch.Tensor:
    """The singular values of a weight matrix (or a Linear layer's weight), largest first, in float64
    (notebook 05.3, section 2: the spectrum of a trained layer)."""
    return torch.linalg.svdvals(_matrix(weight).detach().cpu().double())  # to the CPU first: MPS has no float64


def _check_rank(rank: int, max_rank: int) -> int:
    return arguments.integer("rank", rank, minimum=1, maximum=max_rank)


def _check_energy(energy: float) -> float:
    return arguments.fraction("energy", energy, allow_one=True)


def rank_for_energy(s: torch.Tensor, energy: float) -> int:
    """The smallest rank ``r`` whose first ``r`` singular values hold at least ``energy`` (in (0, 1]) of
    ``sum(s**2)``. ``s`` must be sorted from large to small."""
    energy = _check_energy(energy)
    s = _singular(s)
    kept = torch.cumsum(s.double() ** 2, 0) / (s.double() ** 2).sum()
    # a relative tolerance so that energy=1.0 is reached by the full rank despite rounding
    return min(int((kept < energy - 1e-12).sum()) + 1, len(s))


def _singular(s: torch.Tensor) -> torch.Tensor:
    if not isinstance(s, torch.Tensor) or s.dim() != 1 or len(s) == 0:
        raise TypeError("s must be a non-empty 1-D tensor of singular values (singular_values(layer))")
    if (s < 0).any() or (s[1:] > s[:-1] * (1 + 1e-12)).any():
        raise ValueError("s must hold non-negative singular values sorted from large to small")
    return s


def predicted_error(weight_or_s: torch.Tensor | nn.Linear, rank: int) -> float:
    """Eckart-Young: the relative Frobenius error ``||W - W_r|| / ||W||`` of the best rank-``rank``
    approximation, ``sqrt(sum of the discarded s_i^2 / sum of all s_i^2)``.
    Pass the weight (or layer), or its singular values (a 1-D tensor)."""
    s = (
        _singular(weight_or_s)
        if isinstance(weight_or_s, torch.Tensor) and weight_or_s.dim() == 1
        else singular_values(weight_or_s)
    )
    rank = _check_rank(rank, len(s))
    s2 = s.double() ** 2
    total = float(s2.sum())
    return math.sqrt(float(s2[rank:].sum()) / total) if total > 0 else 0.0


class LowRankLinear(nn.Sequential):
    """``Linear(in, rank, bias=False)`` then ``Linear(rank, out)``: a factorised Linear layer.

    Built by ``factorize_linear``; it remembers the ``rank``, the layer's ``singular_values`` and the
    ``predicted_error`` (Eckart-Young) of the cut, and ``weight()`` rebuilds the product ``W2 @ W1``
    (the matrix it applies).
    """

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True) -> None:
        arguments.positive_int("in_features", in_features)
        arguments.positive_int("out_features", out_features)
        _check_rank(rank, min(in_features, out_features))
        super().__init__(nn.Linear(in_features, rank, bias=False), nn.Linear(rank, out_features, bias=bias))
        self.rank = rank
        self.in_features, self.out_features = in_features, out_features
        self.singular_values: torch.Tensor | None = None
        self.predicted_error: float | None = None

    def weight(self) -> torch.Tensor:
        """The rebuilt ``out x in`` matrix ``W2 @ W1`` this layer applies (detached)."""
        return (self[1].weight @ self[0].weight).detach()

    def extra_repr(self) -> str:
        return f"rank={self.rank}"


def factorize_linear(layer: nn.Linear, rank: int | None = None, energy: float | None = None) -> LowRankLinear:
    """A ``LowRankLinear`` approximating ``layer`` through its truncated SVD.

    Give exactly one of ``rank`` (1 to min(in, out)) or ``energy`` (in (0, 1]: the smallest rank
    keeping that fraction of the squared singular values). The SVD runs in float64; each factor
    gets the square root of the singular values, ``W1 = sqrt(s_r) V_r^T`` and ``W2 = U_r sqrt(s_r)``, so
    both have the same scale. The bias moves to the second Linear unchanged. ``layer`` is not modified.
    """
    layer = _linear("layer", layer)
    if (rank is None) == (energy is None):
        raise ValueError("give exactly one of rank (an int from 1 to min(in, out)) or energy (a fraction in (0, 1])")
    w = _matrix(layer).detach().cpu().double()  # to the CPU first: MPS has no float64
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    r = _check_rank(rank, len(s)) if rank is not None else rank_for_energy(s, energy)
    root = s[:r].sqrt()
    out = LowRankLinear(layer.in_features, layer.out_features, r, bias=layer.bias is not None)
    dtype, device = layer.weight.dtype, layer.weight.device
    out.to(device=device, dtype=dtype)
    with torch.no_grad():
        out[0].weight.copy_((root[:, None] * vh[:r]).to(dtype))
        out[1].weight.copy_((u[:, :r] * root[None, :]).to(dtype))
        if layer.bias is not None:
            out[1].bias.copy_(layer.bias)
    out.singular_values = s
    out.predicted_error = predicted_error(s, r)
    return out


def measured_error(layer: nn.Linear, factored: LowRankLinear) -> float:
    """``||W - W2 W1||_F / ||W||_F`` computed from the rebuilt weights (the
    measurement set against ``predicted_error``)."""
    layer = _linear("layer", layer)
    if not isinstance(factored, LowRankLinear):
        raise TypeError(f"factored must be a LowRankLinear (factorize_linear), got {type(factored).__name__}")
    w = layer.weight.detach().cpu().double()  # MPS has no float64
    rebuilt = factored.weight().detach().cpu().double()
    if rebuilt.shape != w.shape:
        raise ValueError(f"factored rebuilds a {tuple(rebuilt.shape)} matrix, layer's weight is {tuple(w.shape)}")
    return float(torch.linalg.matrix_norm(w - rebuilt) / torch.linalg.matrix_norm(w))


def factorize_model(
    model: nn.Module, layers: Iterable[str] | None = None, *, rank: int | None = None, energy: float | None = None
) -> nn.Module:
    """A copy of ``model`` whose Linear layers named in ``layers`` (``model.named_modules()`` names;
    default: every Linear) are ``LowRankLinear`` at ``rank`` (capped at each layer's min(in, out)) or
    at the rank keeping ``energy``. ``model`` itself is untouched."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if (rank is None) == (energy is None):
        raise ValueError("give exactly one of rank (an int >= 1) or energy (a fraction in (0, 1])")
    if rank is not None:
        arguments.positive_int("rank", rank)
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    names = list(linears) if layers is None else list(layers)
    unknown = [n for n in names if n not in linears]
    if unknown or not names:
        raise ValueError(
            f"layers must name Linear layers of the model; unknown: {unknown}; its Linear layers are {list(linears)}"
        )
    new = copy.deepcopy(model)
    for name in names:
        old = linears[name]
        r = min(rank, old.in_features, old.out_features) if rank is not None else None
        factored = factorize_linear(old, rank=r, energy=energy)
        parent_name, _, child = name.rpartition(".")
        parent = new.get_submodule(parent_name) if parent_name else new
        setattr(parent, child, factored)
    return new


def linear_parameters(in_features: int, out_features: int, bias: bool = True) -> int:
    """Parameters of ``nn.Linear(in, out)``: ``in * out`` (+ ``out`` bias)."""
    arguments.positive_int("in_features", in_features)
    arguments.positive_int("out_features", out_features)
    return in_features * out_features + (out_features if arguments.boolean("bias", bias) else 0)


def lowrank_parameters(in_features: int, out_features: int, rank: int, bias: bool = True) -> int:
    """Parameters of the factorised layer at ``rank``: ``rank * (in + out)`` (+ ``out`` bias), notebook
    05.3, section 2. ``rank`` must be from 1 to min(in, out)."""
    linear_parameters(in_features, out_features, bias)
    rank = _check_rank(rank, min(in_features, out_features))
    return rank * (in_features + out_features) + (out_features if bias else 0)


def break_even_rank(in_features: int, out_features: int) -> int:
    """The largest rank at which the factorised layer has fewer weights than the dense one:
    the largest ``r`` with ``r * (in + out) < in * out`` (0 when no rank saves anything)."""
    arguments.positive_int("in_features", in_features)
    arguments.positive_int("out_features", out_features)
    return (in_features * out_features - 1) // (in_features + out_features)


@dataclass(frozen=True)
class RankPoint:
    """One rank of ``rank_sweep``: the factorised model's parameter count, each factorised layer's
    predicted (Eckart-Young) and measured relative error, and its held-out accuracy before and
    after a short fine-tune (None when not fine-tuned)."""

    rank: int
    parameters: int
    predicted_error: dict[str, float]
    measured_error: dict[str, float]
    accuracy: float
    finetuned_accuracy: float | None


def rank_sweep(
    model: nn.Module,
    layers: Iterable[str],
    ranks: Iterable[int],
    test_data: Dataset,
    *,
    finetune_data: Dataset | DataLoader | None = None,
    finetune_epochs: int = 1,
    lr: float = 1e-4,
    device: torch.device | str = "cpu",
) -> list[RankPoint]:
    """Factorise ``layers`` of a trained ``model`` at each rank and measure what it costs (notebook 05.3,
    section 2): parameters, the error of each layer predicted from its discarded singular values and
    measured from the rebuilt weights, held-out accuracy on ``test_data``, and, with
    ``finetune_data``, the accuracy after ``finetune_epochs`` of Adam at ``lr`` (``train.fit``)."""
    layers = list(layers)
    ranks = arguments.int_list("ranks", ranks)
    arguments.positive_int("finetune_epochs", finetune_epochs)
    originals = dict(model.named_modules())
    out = []
    for rank in ranks:
        small = factorize_model(model, layers, rank=rank).to(device)
        parts = {name: small.get_submodule(name) for name in layers}
        predicted = {name: part.predicted_error for name, part in parts.items()}
        measured = {name: measured_error(originals[name], part) for name, part in parts.items()}
        accuracy = evaluate(small, test_data, device)["acc"]
        tuned = None
        if finetune_data is not None:
            fit(small, finetune_data, epochs=finetune_epochs, lr=lr, device=device, progress=False)
            tuned = evaluate(small, test_data, device)["acc"]
        out.append(RankPoint(rank, count_parameters(small), predicted, measured, accuracy, tuned))
    return out
