"""What autograd saves for the backward pass of a small MLP and its loss, tensor by tensor, named where it is a
parameter, the input, the labels or the logits (exercise 02, section 3: the learner names the rest)."""

from __future__ import annotations

import torch

from .. import arguments

__all__ = ["saved_for_backward"]


def saved_for_backward(sizes, batch: int) -> list[tuple[tuple[int, ...], str, str]]:
    """``[(shape, dtype, what it is)]`` for each distinct tensor autograd saves for a float32 MLP of ``sizes`` (ReLU
    between layers, none after the last) and its cross-entropy loss on ``batch`` random examples; a tensor saved by
    two operations is listed once, and one that is none of the named ones is marked ``"?"``."""
    if not isinstance(sizes, (list, tuple)) or len(sizes) < 2:
        raise ValueError(f"sizes must be a list of at least two layer widths, got {sizes!r}")
    sizes = [arguments.positive_int("sizes[i]", s) for s in sizes]
    batch = arguments.positive_int("batch", batch)
    layers: list[torch.nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])  # no ReLU after the last layer: its outputs are the logits
    x, y = torch.randn(batch, sizes[0]), torch.randint(0, sizes[-1], (batch,))
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = model(x)  # the logits
        torch.nn.functional.cross_entropy(out, y)
    known = {p.untyped_storage().data_ptr(): f"parameter {n}" for n, p in model.named_parameters()}
    known |= {
        x.untyped_storage().data_ptr(): "the input batch",
        y.untyped_storage().data_ptr(): "the labels",
        out.untyped_storage().data_ptr(): "the logits",
    }
    distinct: dict[int, tuple[tuple[int, ...], str, str]] = {}
    for t in saved:
        ptr = t.untyped_storage().data_ptr()
        what = known.get(ptr, "one number for the whole batch" if t.dim() == 0 else "?")
        distinct.setdefault(ptr, (tuple(t.shape), str(t.dtype).removeprefix("torch."), what))
    return list(distinct.values())
