"""Really smaller: a new model without the weakest hidden units (``remove_units``)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ... import arguments
from .chains import _NORMS, _check_chain
from .masks import _model, _share, effective_weight


def _rebuild(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    kw = dict(bias=bias is not None, device=weight.device, dtype=weight.dtype)
    if isinstance(layer, nn.Linear):
        new = nn.Linear(weight.shape[1], weight.shape[0], **kw)
    else:
        new = nn.Conv2d(
            weight.shape[1],
            weight.shape[0],
            layer.kernel_size,
            stride=layer.stride,
            padding=layer.padding,
            dilation=layer.dilation,
            padding_mode=layer.padding_mode,
            **kw,
        )
    with torch.no_grad():
        new.weight.copy_(weight)
        if bias is not None:
            new.bias.copy_(bias)
    return new


def _slice_norm(norm: nn.Module, keep: torch.Tensor) -> nn.Module:
    """A new BatchNorm with only the ``keep`` channels of ``norm`` (its masked scale and shift, if pruned)."""
    new = type(norm)(
        len(keep),
        eps=norm.eps,
        momentum=norm.momentum,
        affine=norm.affine,
        track_running_stats=norm.track_running_stats,
        device=keep.device,
    )
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
        raise ValueError(
            f"remove_units works on an nn.Sequential (such as models.MLP), got {type(model).__name__}: "
            "for other shapes, use prune_channels (masks) or rebuild the model by hand"
        )
    layers = list(model)
    kind = _check_chain(layers)
    last = max(i for i, m in enumerate(layers) if isinstance(m, kind))
    out, keep_in = [], None
    for i, layer in enumerate(layers):
        if isinstance(layer, _NORMS):
            everything = torch.arange(
                layer.num_features, device=layer.running_mean.device if layer.running_mean is not None else None
            )
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
