"""A sparse format: Linear weights stored in CSR, so that only the non-zeros are stored and multiplied."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ... import arguments
from .masks import _model, copy_model, effective_weight, make_permanent


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
            csr = torch.sparse_csr_tensor(
                csr.crow_indices().clone(), csr.col_indices().clone(), csr.values().clone(), csr.shape
            )
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


def sparse_device(device: torch.device | str) -> torch.device:
    """``device`` where PyTorch has sparse CSR kernels (CPUs, CUDA GPUs); the CPU elsewhere (Apple's GPU and TPUs
    have no sparse layouts), after saying so: notebook 05.1 times its sparse models there."""
    device = torch.device(device)
    if device.type in ("cpu", "cuda"):
        return device
    print(f"{device.type} has no sparse tensor layouts (CSR), so this section runs on the CPU")
    return torch.device("cpu")
