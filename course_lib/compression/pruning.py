"""Pruning: set the weights that matter least to zero, or remove whole units (notebook 05.1).

Built on ``torch.nn.utils.prune``, which keeps each pruned layer's original weight as
``weight_orig`` and a 0/1 ``weight_mask`` buffer, and recomputes ``weight = weight_orig * mask``
before every forward pass. Training a pruned model therefore keeps the pruned entries at zero by
itself: their gradient reaches ``weight_orig`` multiplied by 0.

* ``magnitude_mask``: the rule written out (the reference for exercise 05).
* ``prune_unstructured`` (each layer), ``prune_global`` (one threshold over the whole model) and
  ``prune_channels`` (whole output units or channels, by their L2 norm, *and* the next layer's weights
  that read them): masks only, the shapes stay.
* ``sparsity_report`` (zeros, and the weights that are not zero but only ever multiply a removed unit's
  output, which is always 0: what is really removed) and ``make_permanent`` (bake the zeros into
  ``.weight``, drop the masks).
* ``remove_units``: a new, really smaller model without the weakest hidden units.
* ``sensitivity_scan``: each layer pruned alone at rising sparsity, accuracy measured (which layers
  tolerate pruning).
* ``SparseLinear`` / ``to_sparse``: the weights stored in a sparse format (CSR), multiplied with
  ``torch.sparse.mm`` so that only the non-zeros are stored and multiplied.
* ``accuracy_sweep`` and ``speed_models``: the notebook's experiments (accuracy against sparsity
  with and without fine-tuning; dense, zeros, shrunk and sparse models to time side by side).

Zeros in a dense tensor save nothing by themselves: the file and the memory keep every entry, and
a dense matrix product multiplies the zeros like any other number. A smaller shape saves both; a
sparse format saves only at high sparsity (it stores an index with every value).
"""
from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils import prune

from .. import arguments, models, train

__all__ = ["PRUNABLE", "magnitude_mask", "prunable_layers", "prune_unstructured", "prune_global", "prune_channels",
           "LayerSparsity", "SparsityReport", "sparsity_report", "make_permanent", "effective_weight",
           "copy_model", "remove_units", "SparseLinear", "sparse_device", "csr_bytes", "to_sparse", "useful_flops", "norm_removed",
           "PRUNERS", "accuracy_sweep", "Sensitivity", "sensitivity_scan", "speed_models", "inference_fn"]

#: Layer types the pruning functions act on.
PRUNABLE = (nn.Linear, nn.Conv2d)


def _model(model: nn.Module, name: str = "model") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(model).__name__}")
    return model


def _share(name: str, value: float) -> float:
    """A fraction in [0, 1): 0 prunes nothing, 1 (everything) is refused."""
    return arguments.fraction(name, value, allow_zero=True)


# --------------------------------------------------------------------------------------------------
# the rule, written out


def magnitude_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """The magnitude-pruning mask of ``weight``: True = keep (notebook 05.1 section 1, exercise 05).

    Exactly ``round(sparsity * weight.numel())`` entries are False: those of smallest ``|w|``.
    ``round`` is Python's (halves go to the even integer), as in ``torch.nn.utils.prune``.
    Ties are broken deterministically: among entries of equal ``|w|``, the one that comes first in
    row-major (flattened) order is pruned first. ``prune.l1_unstructured`` picks the same entries
    whenever the magnitudes are distinct (it leaves ties to ``torch.topk``).
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    sparsity = _share("sparsity", sparsity)
    magnitude = weight.detach().abs().flatten()
    if magnitude.is_floating_point() and torch.isnan(magnitude).any():
        raise ValueError("weight contains NaN: a NaN has no magnitude to rank")
    k = round(sparsity * magnitude.numel())
    keep = torch.ones(magnitude.numel(), dtype=torch.bool, device=weight.device)
    if k:
        order = torch.sort(magnitude, stable=True).indices  # stable: equal magnitudes keep row-major order
        keep[order[:k]] = False
    return keep.view(weight.shape)


# --------------------------------------------------------------------------------------------------
# masks through torch.nn.utils.prune


def prunable_layers(model: nn.Module, include_output: bool = True) -> list[tuple[str, nn.Module]]:
    """The ``Linear`` and ``Conv2d`` layers of ``model``, in module order, with their names.

    ``include_output=False`` leaves out the last one: in the course's models it produces the
    classes, whose units must not be removed.
    """
    _model(model)
    arguments.boolean("include_output", include_output)
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, PRUNABLE)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no Linear or Conv2d layer to prune")
    return layers if include_output else layers[:-1]


def prune_unstructured(model: nn.Module, sparsity: float) -> nn.Module:
    """Zero the ``sparsity`` share of smallest-magnitude weights in *each* layer (``prune.l1_unstructured``).

    Works in place on every Linear and Conv2d layer (masks; biases untouched) and returns ``model``.
    Used in notebook 05.1 section 4 (50 % scattered zeros to time).
    """
    sparsity = _share("sparsity", sparsity)
    for _, layer in prunable_layers(model):
        prune.l1_unstructured(layer, "weight", amount=sparsity)
    return model


def prune_global(model: nn.Module, sparsity: float) -> nn.Module:
    """Zero the ``sparsity`` share of smallest-magnitude weights over *all* layers together
    (``prune.global_unstructured``): layers with many small weights lose more (notebook 05.1 section 2)."""
    sparsity = _share("sparsity", sparsity)
    params = [(layer, "weight") for _, layer in prunable_layers(model)]
    prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=sparsity)
    return model


def prune_channels(model: nn.Module, fraction: float, *, n: int = 2, include_output: bool = False,
                   inputs: bool = True) -> nn.Module:
    """Remove whole output units (Linear rows) or channels (Conv2d filters) by masks: in every layer, the
    ``fraction`` with the smallest L``n`` norm, ``round(fraction * units)`` of them (at least one stays), ranked
    as ``prune.ln_structured`` ranks them (dim 0) and applied with ``prune.custom_from_mask``. In place; returns
    ``model``. Notebook 05.1 section 2.

    A removed unit must output exactly 0, so its bias is masked too, and so are the scale and shift of a
    BatchNorm after it. Then the next layer's weights that read it (a Linear's column, a Conv2d's input-channel
    slice) multiply 0 on every input: they are removed as well, and with ``inputs`` (the default) they are
    masked, so that ``sparsity_report`` counts what is really gone and the model computes exactly what
    ``remove_units`` builds. (``prune.ln_structured`` alone masks only the rows: the dead columns still count as
    weights.) Units are ranked on their live weights, after the columns reading removed units are masked.
    Following the units needs an ``nn.Sequential`` chain whose activations map 0 to 0 (ReLU, GELU, Tanh ...;
    not Sigmoid, whose 0.5 would still reach the next layer); elsewhere ``inputs=True`` raises a ValueError
    and ``inputs=False`` masks only the units' own weights and biases. The output layer is left alone unless
    ``include_output`` (its units are the classes).
    """
    fraction = _share("fraction", fraction)
    n = arguments.positive_int("n", n)
    arguments.boolean("inputs", inputs)
    layers = prunable_layers(model)
    arguments.boolean("include_output", include_output)
    between = _between(model) if inputs else None
    if inputs and isinstance(between, str):
        raise ValueError(f"prune_channels cannot follow the removed units into the layers that read them: {between}. "
                         "Pass inputs=False to mask only the units' own weights and biases (the weights reading "
                         "them then still count as alive)")
    last = len(layers) - 1
    removed_in = None  # the inputs of the current layer that a removed unit of the previous one feeds
    for i, (_, layer) in enumerate(layers):
        weight = effective_weight(layer).detach()
        keep = torch.ones_like(weight, dtype=torch.bool)
        if removed_in is not None:
            keep[:, removed_in] = False
        removed = None
        if i < last or include_output:
            norms = (weight * keep).flatten(1).norm(p=n, dim=1)  # live weights only
            k = min(round(fraction * len(norms)), len(norms) - 1)
            removed = torch.zeros(len(norms), dtype=torch.bool, device=weight.device)
            removed[torch.sort(norms, stable=True).indices[:k]] = True
            keep[removed] = False
        if removed is not None or removed_in is not None:
            prune.custom_from_mask(layer, "weight", mask=keep)
        if removed is not None and layer.bias is not None:
            prune.custom_from_mask(layer, "bias", mask=~removed)
        removed_in = None
        if inputs and removed is not None and i < last:
            for norm in (m for m in between[i] if isinstance(m, _NORMS)):
                for name in ("weight", "bias"):
                    prune.custom_from_mask(norm, name, mask=~removed)
            removed_in = removed
    return model


def _between(model: nn.Module, *, masks: bool = True) -> list[list[nn.Module]] | str:
    """For an ``nn.Sequential`` chain of Linear (or Conv2d) layers, the modules between each weighted layer
    and the next; otherwise why not. With ``masks``, also refused: a module in which a removed unit's 0 does not
    stay 0 (so the next layer's weights reading it cannot simply be masked)."""
    if not isinstance(model, nn.Sequential):
        return f"{type(model).__name__} is not an nn.Sequential chain (it has its own forward)"
    try:
        kind = _check_chain(list(model))
    except ValueError as err:
        return str(err).replace("remove_units", "this")
    groups: list[list[nn.Module]] = []
    for i, m in enumerate(model):
        if isinstance(m, kind):
            groups.append([])
        elif groups:
            if not masks:
                groups[-1].append(m)
                continue
            if isinstance(m, nn.Sigmoid):
                return f"layer {i} (Sigmoid) maps 0 to 0.5, so a removed unit still feeds the next layer"
            if isinstance(m, _NORMS) and not m.affine:
                return f"layer {i} ({type(m).__name__} without affine) shifts a zero channel by its running mean"
            groups[-1].append(m)
    return groups[:-1]


def effective_weight(layer: nn.Module, name: str = "weight") -> torch.Tensor | None:
    """The tensor a layer computes with: ``<name>_orig * <name>_mask`` for a pruned one (always
    current, even after an optimizer step changed ``weight_orig``), else the parameter itself."""
    _model(layer, "layer")
    if hasattr(layer, f"{name}_orig") and hasattr(layer, f"{name}_mask"):
        return getattr(layer, f"{name}_orig") * getattr(layer, f"{name}_mask")
    return getattr(layer, name, None)


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
            lines.append(f"{r.name:<{width}}  {r.kind:<7}{r.zeros:>10,}{r.dead:>8,}{r.parameters:>10,}"
                         f"{r.fraction:>8.1%}{r.removed_fraction:>9.1%}")
        lines.append(f"{'total':<{width}}  {'':<7}{self.zeros:>10,}{self.dead:>8,}{self.parameters:>10,}"
                     f"{self.fraction:>8.1%}{self.removed_fraction:>9.1%}")
        lines.append("dead: not zero, but multiplying a removed unit's output (always 0); removed = zeros + dead"
                     if self.traced else "dead: not counted (the model is not an nn.Sequential chain to follow)")
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
        rows.append(LayerSparsity(name or type(layer).__name__, type(layer).__name__, int((w == 0).sum()), w.numel(),
                                  dead[i] if dead is not None else 0))
    return SparsityReport(tuple(rows), traced=dead is not None)


def _pruning_hooks(model: nn.Module):
    for layer in model.modules():
        for hook in list(layer._forward_pre_hooks.values()):
            if isinstance(hook, prune.BasePruningMethod):
                yield layer, hook


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy that also works on a pruned model (``copy.deepcopy`` refuses the masked ``weight``,
    a computed tensor; the copy recomputes it from its own ``weight_orig`` and mask)."""
    memo = {id(getattr(layer, hook._tensor_name)): None for layer, hook in _pruning_hooks(_model(model))}
    new = copy.deepcopy(model, memo)
    for layer, hook in _pruning_hooks(new):
        setattr(layer, hook._tensor_name, hook.apply_mask(layer))
    return new


def make_permanent(model: nn.Module) -> nn.Module:
    """Bake every pruning mask into its tensor (``prune.remove``): ``.weight`` becomes a plain
    parameter holding the zeros, ``weight_orig`` and ``weight_mask`` go. In place; returns ``model``.
    Before this a pruned model's file holds the weights *twice* (original and mask)."""
    for layer, hook in list(_pruning_hooks(_model(model))):
        prune.remove(layer, hook._tensor_name)
    return model


# --------------------------------------------------------------------------------------------------
# really smaller: removing units

_ELEMENTWISE = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.ELU, nn.Dropout,
                nn.Identity)
_SPATIAL = (nn.MaxPool2d, nn.AvgPool2d, nn.Dropout2d)
_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def _check_chain(layers: list[nn.Module]) -> type:
    """The one weighted kind (Linear or Conv2d) of a supported chain; ValueError naming the first misfit."""
    weighted = {type(m) for m in layers if isinstance(m, PRUNABLE)}
    if len(weighted) != 1:
        raise ValueError("remove_units needs a chain of Linear layers or of Conv2d layers (not both, not none); "
                         f"found {sorted(t.__name__ for t in weighted) or 'none'}")
    kind = weighted.pop()
    allowed = _ELEMENTWISE + _NORMS + ((_SPATIAL + (nn.Conv2d,)) if kind is nn.Conv2d else (nn.Linear,))
    for i, m in enumerate(layers):
        if not isinstance(m, allowed) or (isinstance(m, nn.Conv2d) and m.groups != 1):
            what = type(m).__name__ + (" with groups" if isinstance(m, nn.Conv2d) else "")
            raise ValueError(f"remove_units cannot shrink layer {i} ({what}): "
                             f"it works on nn.Sequential chains of {kind.__name__} layers with activations, dropout"
                             f"{', pooling' if kind is nn.Conv2d else ''} and BatchNorm between them")
    if sum(isinstance(m, kind) for m in layers) < 2:
        raise ValueError(f"remove_units needs at least two {kind.__name__} layers: only hidden units can go")
    return kind


def _rebuild(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    kw = dict(bias=bias is not None, device=weight.device, dtype=weight.dtype)
    if isinstance(layer, nn.Linear):
        new = nn.Linear(weight.shape[1], weight.shape[0], **kw)
    else:
        new = nn.Conv2d(weight.shape[1], weight.shape[0], layer.kernel_size, stride=layer.stride, padding=layer.padding,
                        dilation=layer.dilation, padding_mode=layer.padding_mode, **kw)
    with torch.no_grad():
        new.weight.copy_(weight)
        if bias is not None:
            new.bias.copy_(bias)
    return new


def _slice_norm(norm: nn.Module, keep: torch.Tensor) -> nn.Module:
    """A new BatchNorm with only the ``keep`` channels of ``norm`` (its masked scale and shift, if pruned)."""
    new = type(norm)(len(keep), eps=norm.eps, momentum=norm.momentum, affine=norm.affine,
                     track_running_stats=norm.track_running_stats, device=keep.device)
    with torch.no_grad():
        for name in ("weight", "bias"):
            if norm.affine:
                getattr(new, name).copy_(effective_weight(norm, name).detach()[keep])
        if norm.track_running_stats:
            new.running_mean.copy_(norm.running_mean[keep])
            new.running_var.copy_(norm.running_var[keep])
            new.num_batches_tracked.copy_(norm.num_batches_tracked)
    return new.train(norm.training)


def remove_units(model: nn.Module, fraction: float, *, n: int = 2) -> nn.Sequential:
    """A NEW, smaller ``nn.Sequential``: each hidden Linear (or Conv2d) loses the ``fraction`` of output
    units (channels) with the smallest L``n`` weight norm, with their biases, and the next layer loses
    the matching input columns (notebook 05.1 sections 2 and 4: a model that really is smaller and faster).
    Units are ranked on the weights left once the columns reading the previous layer's removed units are gone.

    Works on ``models.MLP`` and any ``nn.Sequential`` chain of Linear layers, or of Conv2d layers
    (groups 1), with elementwise activations, dropout, pooling (Conv2d) and BatchNorm between them;
    anything else is refused with a ValueError naming the layer. ``round(fraction * units)`` units go
    per layer (at least one stays), as in ``prune_channels``; on a model that ``prune_channels``
    masked with the same fraction, exactly the masked units go (their norm is 0), so both compute the
    same outputs (the activations map 0 to 0 there), and the parameters that go are exactly those
    ``sparsity_report`` counts as removed, plus the masked biases. The input model is not changed;
    masks are applied, and the result has plain layers.
    """
    _model(model)
    fraction = _share("fraction", fraction)
    n = arguments.positive_int("n", n)
    if not isinstance(model, nn.Sequential):
        raise ValueError(f"remove_units works on an nn.Sequential (such as models.MLP), got {type(model).__name__}: "
                         "for other shapes, use prune_channels (masks) or rebuild the model by hand")
    layers = list(model)
    kind = _check_chain(layers)
    last = max(i for i, m in enumerate(layers) if isinstance(m, kind))
    out, keep_in = [], None
    for i, layer in enumerate(layers):
        if isinstance(layer, _NORMS):
            everything = torch.arange(layer.num_features, device=layer.running_mean.device
                                      if layer.running_mean is not None else None)
            out.append(_slice_norm(layer, keep_in if keep_in is not None else everything))
            continue
        if not isinstance(layer, kind):
            out.append(copy.deepcopy(layer))
            continue
        weight = effective_weight(layer).detach()
        bias = effective_weight(layer, "bias")
        bias = bias.detach() if bias is not None else None
        if keep_in is not None:
            weight = weight[:, keep_in]
        norms = weight.flatten(1).norm(p=n, dim=1)  # whole rows of live weights, as prune_channels ranks them
        if i < last:
            k = min(round(fraction * len(norms)), len(norms) - 1)
            keep_in = torch.sort(torch.sort(norms, stable=True).indices[k:]).values
            weight, bias = weight[keep_in], (bias[keep_in] if bias is not None else None)
        out.append(_rebuild(layer, weight, bias))
    return nn.Sequential(*out).train(model.training)


# --------------------------------------------------------------------------------------------------
# a sparse format


class SparseLinear(nn.Module):
    """A Linear layer whose weight is stored in CSR (compressed sparse rows: the non-zero values, their
    column indices, and where each row starts) and multiplied with ``torch.sparse.mm``, so only the
    non-zeros are stored and multiplied. Inference only (notebook 05.1 section 4).

    CSR keeps an index with every value (int64 by default, 8 bytes beside a 4-byte fp32 value), so it
    is smaller than the dense matrix only above about 2/3 sparsity, and sparse kernels reach a small
    fraction of a dense kernel's FLOP rate, so it is faster only at higher sparsity still.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = effective_weight(linear).detach()
        bias = effective_weight(linear, "bias")
        with warnings.catch_warnings():  # torch says once that CSR support is "beta"
            warnings.simplefilter("ignore", UserWarning)
            csr = weight.to_sparse_csr()
            # compact copies: to_sparse_csr's column indices are a view into a larger index tensor,
            # which torch.save would store whole
            csr = torch.sparse_csr_tensor(csr.crow_indices().clone(), csr.col_indices().clone(), csr.values().clone(),
                                          csr.shape)
            self.register_buffer("weight", csr)
        self.register_buffer("bias", bias.detach().clone() if bias is not None else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.sparse.mm(self.weight, flat.T.contiguous()).T  # (out x in, sparse) @ (in x batch)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        nnz = self.weight.values().numel()
        return f"in_features={self.in_features}, out_features={self.out_features}, nonzeros={nnz:,}, format=CSR"


def csr_bytes(rows: int, nonzeros: int, *, value_bytes: int = 4, index_bytes: int = 8) -> int:
    """Bytes of a CSR matrix by formula: each non-zero's value and column index, plus one row-start
    index per row and one more (notebook 05.1 section 5's prediction; int64 indices by default)."""
    rows, nonzeros = arguments.nonnegative_int("rows", rows), arguments.nonnegative_int("nonzeros", nonzeros)
    value_bytes = arguments.positive_int("value_bytes", value_bytes)
    index_bytes = arguments.positive_int("index_bytes", index_bytes)
    return nonzeros * (value_bytes + index_bytes) + (rows + 1) * index_bytes


def to_sparse(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` replaced by a ``SparseLinear`` holding its current
    (masked) weights; other layers stay dense. For inference; the copy is in eval mode."""
    new = make_permanent(copy_model(model))
    for parent in list(new.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, SparseLinear(child))
    return new.eval()


def useful_flops(model: nn.Module, batch: int) -> int:
    """FLOPs of the multiplications by non-zero weights of the Linear layers in one forward pass of
    ``batch`` examples: 2 per non-zero weight per example. The work a sparse format could skip is the
    rest; ``timing.count_flops`` counts what a dense kernel really does (the zeros included)."""
    batch = arguments.positive_int("batch", batch)
    total = 0
    for layer in _model(model).modules():
        if isinstance(layer, (nn.Linear, SparseLinear)):
            w = layer.weight.values() if layer.weight.layout == torch.sparse_csr else effective_weight(layer)
            total += int(w.ne(0).sum())
    return 2 * batch * total


# --------------------------------------------------------------------------------------------------
# the notebook's experiments


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
    "global": prune_global, "layer": prune_unstructured, "channels": prune_channels}


def accuracy_sweep(model: nn.Module, method: str, amounts: Sequence[float], train_data, test_data, *,
                   finetune_epochs: int = 2, lr: float = 1e-3, device: torch.device | str | None = None,
                   seed: int = 0) -> list[dict]:
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
        row = {"amount": amount, "sparsity": report.fraction, "removed": report.removed_fraction,
               "norm_removed": norm_removed(model, pruned),
               "acc": train.evaluate(pruned, test_data, device)["acc"]}
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


def sensitivity_scan(model: nn.Module, amounts: Sequence[float], test_data, *,
                     device: torch.device | str | None = None) -> list[Sensitivity]:
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


def sparse_device(device: torch.device | str) -> torch.device:
    """``device`` where PyTorch has sparse CSR kernels (CPUs, CUDA GPUs); the CPU elsewhere (Apple's GPU and TPUs
    have no sparse layouts), after saying so: notebook 05.1 times its sparse models there."""
    device = torch.device(device)
    if device.type in ("cpu", "cuda"):
        return device
    print(f"{device.type} has no sparse tensor layouts (CSR), so this section runs on the CPU")
    return torch.device("cpu")


def speed_models(width: int = 1024, *, in_features: int = 64, out_features: int = 10, depth: int = 2,
                 fraction: float = 0.5, sparse_at: Sequence[float] = (0.5, 0.95), seed: int = 0,
                 device: torch.device | str = "cpu") -> dict[str, nn.Module]:
    """The models notebook 05.1 section 4 times side by side, all from one seeded ``models.MLP``
    (``depth`` hidden layers of ``width``), in eval mode: "dense"; "zeros" (``fraction`` of each
    layer's weights zeroed, same shapes); "shrunk" (``fraction`` of the hidden units removed);
    "CSR 50%" etc. (each layer pruned to that sparsity, stored in CSR). Untrained weights: speed
    and size do not depend on what the weights are, only on their shapes and how many are zero."""
    width, depth = arguments.positive_int("width", width), arguments.positive_int("depth", depth)
    fraction = _share("fraction", fraction)
    torch.manual_seed(arguments.nonnegative_int("seed", seed))
    dense = models.MLP(in_features, [width] * depth, out_features).to(device).eval()
    out = {"dense": dense,
           "zeros": make_permanent(prune_unstructured(copy.deepcopy(dense), fraction)),
           "shrunk": remove_units(dense, fraction)}
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
