"""Which layers pruning acts on, and the ``nn.Sequential`` chains whose units it can follow into the next layer.

A unit removed from one layer outputs 0, so the next layer's weights that read it can go too, but only where the
order of the layers is known (an ``nn.Sequential`` chain) and what lies between them keeps a 0 at 0.
"""

from __future__ import annotations

from torch import nn

#: Layer types the pruning functions act on.
PRUNABLE = (nn.Linear, nn.Conv2d)

_ELEMENTWISE = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.ELU, nn.Dropout, nn.Identity)
_SPATIAL = (nn.MaxPool2d, nn.AvgPool2d, nn.Dropout2d)
_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def _check_chain(layers: list[nn.Module]) -> type:
    """The one weighted kind (Linear or Conv2d) of a supported chain; ValueError naming the first misfit."""
    weighted = {type(m) for m in layers if isinstance(m, PRUNABLE)}
    if len(weighted) != 1:
        raise ValueError(
            "remove_units needs a chain of Linear layers or of Conv2d layers (not both, not none); "
            f"found {sorted(t.__name__ for t in weighted) or 'none'}"
        )
    kind = weighted.pop()
    allowed = _ELEMENTWISE + _NORMS + ((_SPATIAL + (nn.Conv2d,)) if kind is nn.Conv2d else (nn.Linear,))
    for i, m in enumerate(layers):
        if not isinstance(m, allowed) or (isinstance(m, nn.Conv2d) and m.groups != 1):
            what = type(m).__name__ + (" with groups" if isinstance(m, nn.Conv2d) else "")
            raise ValueError(
                f"remove_units cannot shrink layer {i} ({what}): "
                f"it works on nn.Sequential chains of {kind.__name__} layers with activations, dropout"
                f"{', pooling' if kind is nn.Conv2d else ''} and BatchNorm between them"
            )
    if sum(isinstance(m, kind) for m in layers) < 2:
        raise ValueError(f"remove_units needs at least two {kind.__name__} layers: only hidden units can go")
    return kind


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
