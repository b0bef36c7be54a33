"""What autograd saves for the backward pass of a small MLP and its loss, tensor by tensor, named where it is a
parameter, the input, the labels or the logits (exercise 02, section 3: the learner names the rest)."""

from __future__ import annotations

import torch

from .. import arguments

__all__ = ["first_examples", "saved_bytes_by_dtype", "saved_for_backward"]


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


def saved_bytes_by_dtype(
    model: torch.nn.Module, batch, precision: str, sizes: tuple[int, int] = (2, 4)
) -> dict[str, float]:
    """Bytes that one more example adds to what autograd saves for the backward pass of ``model`` (and its default
    loss), by dtype: the saved bytes at two batch sizes ``sizes`` (``batch(n)`` returns ``(x, target)``), their
    difference over the difference in examples, so what does not grow with the batch (autocast's weight copies)
    cancels; parameters are left out and each storage counted once (notebook 02, section 7b: which saved tensors
    autocast does not shrink)."""
    from ..train import autocast, default_loss

    arguments.instance("model", model, torch.nn.Module, "a torch.nn.Module")
    small, large = (arguments.positive_int("sizes[i]", n) for n in sizes)
    if large <= small:
        raise ValueError(f"sizes must be two increasing batch sizes, got {sizes!r}")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def saved(n: int) -> dict[str, int]:
        x, target = batch(n)
        seen, out = set(params), {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                key = str(t.dtype).removeprefix("torch.")
                out[key] = out.get(key, 0) + t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(precision, "cpu"):
            default_loss(model(x), target)
        return out

    a, b = saved(small), saved(large)
    per = {k: (b.get(k, 0) - a.get(k, 0)) / (large - small) for k in set(a) | set(b)}
    return {k: v for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0}


def first_examples(x: torch.Tensor, target: torch.Tensor):
    """A function ``batch(n)`` returning copies of the first ``n`` examples of ``(x, target)`` (notebook 02,
    section 7b: per-example bytes from two batch sizes)."""
    arguments.instance("x", x, torch.Tensor, "a torch.Tensor")
    arguments.instance("target", target, torch.Tensor, "a torch.Tensor")

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = arguments.positive_int("n", n)
        return x[:n].clone(), target[:n].clone()

    return batch
