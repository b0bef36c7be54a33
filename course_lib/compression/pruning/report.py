"""How much of a model pruning removed: zeros, and the weights that only ever multiply a removed unit's 0."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .chains import _NORMS, _SPATIAL, _between
from .masks import effective_weight, prunable_layers


@dataclass(frozen=True)
class LayerSparsity:
    """One layer's row of a ``SparsityReport``: zero weights; ``dead`` weights, not zero but multiplying an input
    that is always 0 (a removed unit of the layer before); all its weights; their fractions."""

    name: str
    kind: str
    zeros: int
    parameters: int
    dead: int = 0

    @property
    def fraction(self) -> float:
        """Share of the weights that are exactly zero."""
        return self.zeros / self.parameters if self.parameters else 0.0

    @property
    def removed(self) -> int:
        """Weights that contribute nothing: the zeros and the dead ones."""
        return self.zeros + self.dead

    @property
    def removed_fraction(self) -> float:
        return self.removed / self.parameters if self.parameters else 0.0


@dataclass(frozen=True)
class SparsityReport:
    """Per-layer and total sparsity of the weights of a model's Linear and Conv2d layers. ``traced``: whether the
    layers' order could be followed (an ``nn.Sequential`` chain), so that dead weights were counted at all."""

    layers: tuple[LayerSparsity, ...]
    traced: bool = True

    @property
    def zeros(self) -> int:
        return sum(r.zeros for r in self.layers)

    @property
    def dead(self) -> int:
        return sum(r.dead for r in self.layers)

    @property
    def removed(self) -> int:
        return self.zeros + self.dead

    @property
    def parameters(self) -> int:
        return sum(r.parameters for r in self.layers)

    @property
    def fraction(self) -> float:
        """Share of the weights that are exactly zero (what a zero count sees)."""
        return self.zeros / self.parameters if self.parameters else 0.0

    @property
    def removed_fraction(self) -> float:
        """Share of the weights really removed: zero, or reading only a removed unit's 0."""
        return self.removed / self.parameters if self.parameters else 0.0

    def text(self) -> str:
        width = max(8, *(len(r.name) for r in self.layers))
        lines = [f"{'layer':<{width}}  {'kind':<7}{'zeros':>10}{'dead':>8}{'weights':>10}{'zero':>8}{'removed':>9}"]
        for r in self.layers:
            lines.append(
                f"{r.name:<{width}}  {r.kind:<7}{r.zeros:>10,}{r.dead:>8,}{r.parameters:>10,}"
                f"{r.fraction:>8.1%}{r.removed_fraction:>9.1%}"
            )
        lines.append(
            f"{'total':<{width}}  {'':<7}{self.zeros:>10,}{self.dead:>8,}{self.parameters:>10,}"
            f"{self.fraction:>8.1%}{self.removed_fraction:>9.1%}"
        )
        lines.append(
            "dead: not zero, but multiplying a removed unit's output (always 0); removed = zeros + dead"
            if self.traced
            else "dead: not counted (the model is not an nn.Sequential chain to follow)"
        )
        return "\n".join(lines)

    __str__ = text

    def __repr__(self) -> str:
        return self.text()


def _constant_through(between: list[nn.Module], c: torch.Tensor) -> torch.Tensor:
    """What a unit whose weights are all zero outputs after the modules between its layer and the next: its
    bias ``c`` (a constant) through activations and BatchNorm (eval statistics); pooling and dropout keep it."""
    with torch.no_grad():
        for m in between:
            if isinstance(m, _NORMS):
                scale = effective_weight(m)
                shift = effective_weight(m, "bias")
                c = (c - m.running_mean) / torch.sqrt(m.running_var + m.eps) if m.track_running_stats else c * 0
                c = c * (scale if scale is not None else 1) + (shift if shift is not None else 0)
            elif not isinstance(m, _SPATIAL + (nn.Dropout, nn.Identity)):
                c = m(c)
    return c


def _dead_counts(model: nn.Module) -> list[int] | None:
    """Per prunable layer, its non-zero weights that read an input which is always 0: a unit of the layer before
    whose weights are all zero and whose bias (through what lies between) gives 0. None: not a chain to follow."""
    between = _between(model, masks=False)
    if isinstance(between, str):
        return None
    layers = [m for _, m in prunable_layers(model)]
    counts = [0]
    for producer, mods, consumer in zip(layers, between, layers[1:]):
        w = effective_weight(producer).detach()
        bias = effective_weight(producer, "bias")
        c = bias.detach() if bias is not None else torch.zeros(w.shape[0], device=w.device, dtype=w.dtype)
        dead = (w.flatten(1) == 0).all(dim=1) & (_constant_through(mods, c) == 0)
        reads = effective_weight(consumer).detach()[:, dead]
        counts.append(int((reads != 0).sum()))
    return counts


def sparsity_report(model: nn.Module) -> SparsityReport:
    """Zeros, dead weights (not zero, but reading only a removed unit's 0) and all weights per Linear/Conv2d
    layer and in total (biases not counted), masked or permanent alike (notebook 05.1 sections 1-2). Dead
    weights are counted in ``nn.Sequential`` chains, where the order of the layers is known."""
    layers = prunable_layers(model)
    dead = _dead_counts(model)
    rows = []
    for i, (name, layer) in enumerate(layers):
        w = effective_weight(layer).detach()
        rows.append(
            LayerSparsity(
                name or type(layer).__name__,
                type(layer).__name__,
                int((w == 0).sum()),
                w.numel(),
                dead[i] if dead is not None else 0,
            )
        )
    return SparsityReport(tuple(rows), traced=dead is not None)
