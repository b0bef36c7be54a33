"""Pruning by masks, on ``torch.nn.utils.prune``: the rule written out, per layer, over the whole model, whole units.

``torch.nn.utils.prune`` keeps each pruned layer's original weight as ``weight_orig`` and a 0/1 ``weight_mask``
buffer, and recomputes ``weight = weight_orig * mask`` before every forward pass; ``make_permanent`` bakes the
zeros in, ``copy_model`` copies a pruned model.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.utils import prune

from ... import arguments
from .chains import _NORMS, PRUNABLE, _between


def _model(model: nn.Module, name: str = "model") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(model).__name__}")
    return model


def _share(name: str, value: float) -> float:
    """A fraction in [0, 1): 0 prunes nothing, 1 (everything) is refused."""
    return arguments.fraction(name, value, allow_zero=True)


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


def prune_channels(
    model: nn.Module, fraction: float, *, n: int = 2, include_output: bool = False, inputs: bool = True
) -> nn.Module:
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
        raise ValueError(
            f"prune_channels cannot follow the removed units into the layers that read them: {between}. "
            "Pass inputs=False to mask only the units' own weights and biases (the weights reading "
            "them then still count as alive)"
        )
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


def effective_weight(layer: nn.Module, name: str = "weight") -> torch.Tensor | None:
    """The tensor a layer computes with: ``<name>_orig * <name>_mask`` for a pruned one (always
    current, even after an optimizer step changed ``weight_orig``), else the parameter itself."""
    _model(layer, "layer")
    if hasattr(layer, f"{name}_orig") and hasattr(layer, f"{name}_mask"):
        return getattr(layer, f"{name}_orig") * getattr(layer, f"{name}_mask")
    return getattr(layer, name, None)


def _pruned_tensors(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(layer, tensor name) for every tensor of ``model`` that ``torch.nn.utils.prune`` masks: a pruned layer
    holds the original as the parameter ``<name>_orig`` and the mask as the buffer ``<name>_mask``."""
    return [
        (layer, name.removesuffix("_orig"))
        for layer in model.modules()
        if prune.is_pruned(layer)
        for name, _ in layer.named_parameters(recurse=False)
        if name.endswith("_orig")
        and isinstance(getattr(layer, name.removesuffix("_orig") + "_mask", None), torch.Tensor)
    ]


def _masked(layer: nn.Module, name: str) -> torch.Tensor:
    """``<name>_mask * <name>_orig``, computed as the pruning hook computes it before each forward pass."""
    orig, mask = getattr(layer, name + "_orig"), getattr(layer, name + "_mask")
    return mask.to(dtype=orig.dtype) * orig


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy that also works on a pruned model (``copy.deepcopy`` refuses the masked ``weight``,
    a computed tensor; the copy recomputes it from its own ``weight_orig`` and mask)."""
    memo = {id(getattr(layer, name)): None for layer, name in _pruned_tensors(_model(model))}
    new = copy.deepcopy(model, memo)
    for layer, name in _pruned_tensors(new):
        setattr(layer, name, _masked(layer, name))
    return new


def make_permanent(model: nn.Module) -> nn.Module:
    """Bake every pruning mask into its tensor (``prune.remove``): ``.weight`` becomes a plain
    parameter holding the zeros, ``weight_orig`` and ``weight_mask`` go. In place; returns ``model``.
    Before this a pruned model's file holds the weights *twice* (original and mask)."""
    for layer, name in _pruned_tensors(_model(model)):
        prune.remove(layer, name)
    return model
