"""Activation checkpointing: keep each block's input, recompute its inside in backward (notebook 02).

``apply_activation_checkpointing(model)`` wraps the model's blocks in ``CheckpointedBlock``
(``torch.utils.checkpoint`` with ``use_reentrant=False``), so the estimator and a measurement see
the same model.
"""

from __future__ import annotations

import torch
from torch import nn

from .meters import _check_model


# ----------------------------------------------------------------------------- checkpointing


class CheckpointedBlock(nn.Module):
    """Runs ``block`` under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``.

    Only the block's input is kept for backward; its inside is recomputed during backward.
    """

    def __init__(self, block: nn.Module) -> None:
        if not isinstance(block, nn.Module):
            raise TypeError(f"block must be a torch.nn.Module, got {type(block).__name__}")
        super().__init__()
        self.block = block
        self.checkpointing = True  # the estimator switches it off to look inside the block

    def forward(self, *args, **kwargs):
        if self.checkpointing and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(self.block, *args, use_reentrant=False, **kwargs)
        return self.block(*args, **kwargs)

    def __getattr__(self, name: str):
        # containers look inside their layers (nn.TransformerEncoder reads layers[0].self_attn)
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "block":
                raise
            return getattr(self.block, name)


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _sequential_groups(seq: nn.Sequential) -> list[list[str]]:
    """A layer with parameters plus the parameter-free layers after it, as lists of child names."""
    groups: list[list[str]] = []
    for name, child in seq.named_children():
        if _has_params(child) or not groups:
            groups.append([name])
        else:
            groups[-1].append(name)
    return groups


def _plan_blocks(model: nn.Module) -> list[tuple[nn.Module, list[str]]]:
    """The blocks ``apply_activation_checkpointing`` wraps: (container, child names) pairs."""
    plan: list[tuple[nn.Module, list[str]]] = []

    def visit(m: nn.Module) -> None:
        if isinstance(m, nn.TransformerEncoder):
            plan.extend((m.layers, [name]) for name, _ in m.layers.named_children())
        elif isinstance(m, nn.Sequential):
            plan.extend((m, g) for g in _sequential_groups(m) if any(_has_params(m.get_submodule(n)) for n in g))
        else:
            for child in m.children():
                visit(child)

    visit(model)
    return plan


def apply_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Wrap the model's blocks in ``CheckpointedBlock`` (in place) and return the model.

    What a "block" is, for the course's models (notebook 02, memory: activation checkpointing):

    * ``nn.TransformerEncoder``: each encoder layer (TinyTransformer);
    * ``nn.Sequential``: each layer that has parameters together with the parameter-free layers
      that follow it (MLP: Linear+ReLU; SmallCNN: Conv+BatchNorm+ReLU+MaxPool);
    * any other module: its children are visited; modules with parameters that are not in a
      Sequential or an encoder (an embedding, a classifier head) are left alone.

    Caveat: a recomputed block runs its forward twice, so BatchNorm running statistics are
    updated twice per step (training is unaffected; the running averages move faster).
    Parameter names change (``0.block.weight``): save the ``state_dict`` of an unwrapped model.
    """
    _check_model(model)
    if any(isinstance(m, CheckpointedBlock) for m in model.modules()):
        raise ValueError("model already has CheckpointedBlock wrappers; accepted: a model not yet wrapped")
    plan = _plan_blocks(model)
    by_container: dict[int, tuple[nn.Module, list[list[str]]]] = {}
    for container, names in plan:
        by_container.setdefault(id(container), (container, []))[1].append(names)
    for container, groups in by_container.values():
        if isinstance(container, nn.Sequential):
            wrapped = {g[0]: g for g in groups}
            children = list(container.named_children())
            for name, _ in children:
                delattr(container, name)
            skip: set[str] = set()
            i = 0
            for name, child in children:
                if name in skip:
                    continue
                if name in wrapped:
                    g = wrapped[name]
                    skip.update(g)
                    mods = [dict(children)[n] for n in g]
                    child = CheckpointedBlock(mods[0] if len(mods) == 1 else nn.Sequential(*mods))
                container.add_module(str(i), child)
                i += 1
        else:
            for (name,) in groups:
                container.register_module(name, CheckpointedBlock(container.get_submodule(name)))
    return model
