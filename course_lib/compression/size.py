"""What a model costs to store and to hold: bytes on disk, bytes in memory, zeros (notebooks 05.1-05.4).

``state_dict_bytes`` is the size of the file ``torch.save(model.state_dict())`` writes (what you
ship); ``memory_bytes`` adds up the parameters and buffers as they sit in memory, looking inside
quantized tensors (torchao stores int8 values and their scales in tensor subclasses). The two differ
by the file format's small overhead and by anything shared. Zeros left by pruning cost as much as
any other value in both: only a smaller shape or a sparse format saves bytes.
"""

from __future__ import annotations

import io
import zlib

import torch
from torch import nn

__all__ = ["state_dict_bytes", "compressed_bytes", "memory_bytes", "tensor_bytes", "sparsity", "count_parameters"]


def _module(model: nn.Module) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


def _serialized(model: nn.Module) -> bytes:
    buffer = io.BytesIO()
    torch.save(_module(model).state_dict(), buffer)
    return buffer.getvalue()


def state_dict_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())``: the model's size on disk."""
    return len(_serialized(model))


def compressed_bytes(model: nn.Module, level: int = 6) -> int:
    """Bytes of the saved state dict after zlib compression: runs of zeros compress, a dense file
    does not (notebook 05.1: pruned zeros shrink the *zipped* file, not the file itself)."""
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise ValueError(f"level must be an int from 0 to 9 (zlib's levels), got {level!r}")
    return len(zlib.compress(_serialized(model), level))


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds, looking inside tensor subclasses (torchao's quantized weights keep an
    int8 tensor and its scales as inner tensors: ``__tensor_flatten__``) and sparse formats (CSR; COO, coalesced)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"t must be a torch.Tensor, got {type(t).__name__}")
    if type(t) not in (torch.Tensor, nn.Parameter) and hasattr(t, "__tensor_flatten__"):
        inner, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, name)) for name in inner)
    if t.layout == torch.sparse_csr:
        return sum(tensor_bytes(p) for p in (t.crow_indices(), t.col_indices(), t.values()))
    if t.is_sparse:  # COO, counted coalesced (one entry per index): its indices and values are public only so
        t = t.coalesce()  # (a coalesced tensor is returned as it is)
        return tensor_bytes(t.indices()) + tensor_bytes(t.values())
    return t.numel() * t.element_size()


def _pruned_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weights ``torch.nn.utils.prune`` computes (``weight = weight_orig * weight_mask``): plain
    attributes, neither parameters nor buffers, but real tensors in memory."""
    out = []
    for module in model.modules():
        for name, _ in module.named_parameters(recurse=False):
            computed = getattr(module, name[: -len("_orig")], None) if name.endswith("_orig") else None
            if isinstance(computed, torch.Tensor):
                out.append(computed)
    return out


def memory_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters and buffers in memory, each tensor counted once. A layer
    pruned with masks holds three tensors of its weight's size (the original, the mask and the masked
    weight) until ``prune.remove`` makes the pruning permanent."""
    seen, total = set(), 0
    for t in list(_module(model).parameters()) + list(model.buffers()) + _pruned_weights(model):
        if id(t) not in seen:
            seen.add(id(t))
            total += tensor_bytes(t)
    return total


def _weights(model: nn.Module) -> list[torch.Tensor]:
    """Weight tensors (not biases or norms' scales); for a pruned module, the masked weight in use."""
    out = []
    for module in _module(model).modules():
        w = getattr(module, "weight", None)
        if isinstance(w, torch.Tensor) and w.dim() >= 2:
            out.append(w.detach())
    return out


def sparsity(model: nn.Module) -> float:
    """Fraction of exact zeros among the weights of layers with 2-D or larger weights."""
    weights = _weights(model)
    total = sum(w.numel() for w in weights)
    if total == 0:
        raise ValueError("model has no weight matrices to measure")
    return sum(int((w == 0).sum()) for w in weights) / total


def count_parameters(model: nn.Module, nonzero: bool = False) -> int:
    """Parameters of the model (for pruned modules: the weights in use); ``nonzero``: only those not zero."""
    total = 0
    for module in _module(model).modules():
        for name, p in module.named_parameters(recurse=False):
            if name.endswith("_orig"):  # torch.nn.utils.prune keeps weight_orig and computes weight from a mask
                p = getattr(module, name[: -len("_orig")])
            total += int((p != 0).sum()) if nonzero else p.numel()
    return total
