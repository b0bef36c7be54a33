"""Notebook 02's demo models and the tables it prints (memory, sections 3, 7b and 10).

``demo_model(name, scale)`` builds the four models whose estimates the lesson checks against the allocator (each
with one batch, seed 0); ``estimate_table`` and ``largest_model_table`` format what the lesson prints, so its cells
show the comparison and not the formatting.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import arguments, models

__all__ = [
    "DEMO_MODELS",
    "activation_bytes_per_example",
    "demo_model",
    "estimate_table",
    "largest_model_table",
    "peaks_against_batch",
    "state_bytes_per_parameter",
]

MiB = 2**20
DEMO_MODELS = ("MLP", "CNN", "Conv1d", "Transformer")


def demo_model(name: str, scale: float = 1.0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """``(model, inputs, targets)`` of one of :data:`DEMO_MODELS` at notebook 02's size (seed 0): the MLP
    64-1024-1024-10 on 2,048 examples, ``models.SmallCNN`` (width 32, 32x32 images) and a convolution over sequences
    (Conv1d, GELU, LayerNorm: not a course model) on 128, ``models.TinyTransformer`` (2 layers, d_model 128, 64
    tokens) on 32. ``scale`` (0-1] shrinks each batch (at least one example)."""
    if name not in DEMO_MODELS:
        raise ValueError(f"name must be one of {', '.join(DEMO_MODELS)}; got {name!r}")
    scale = arguments.positive("scale", scale)
    if scale > 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    torch.manual_seed(0)
    n2048, n128, n32 = (max(1, int(n * scale)) for n in (2048, 128, 32))
    if name == "MLP":
        return models.MLP(64, [1024, 1024], 10), torch.randn(n2048, 64), torch.randint(0, 10, (n2048,))
    if name == "CNN":
        return models.SmallCNN(width=32, image_size=32), torch.randn(n128, 1, 32, 32), torch.randint(0, 10, (n128,))
    if name == "Conv1d":
        net = nn.Sequential(
            nn.Conv1d(4, 32, 5, padding=2),
            nn.GELU(),
            nn.LayerNorm(64),
            nn.Conv1d(32, 32, 5, padding=2),
            nn.GELU(),
            nn.Flatten(),
            nn.Linear(32 * 64, 10),
        )
        return net, torch.randn(n128, 4, 64), torch.randint(0, 10, (n128,))
    model = models.TinyTransformer(vocab_size=64, seq_len=64, d_model=128, n_layers=2)
    return model, torch.randint(0, 64, (n32, 64)), torch.randint(0, 2, (n32,))


def estimate_table(rows) -> str:
    """``rows`` of ``(label, MemoryEstimate, allocated bytes)`` as a table: estimate, the allocator's peak, their
    ratio and the estimated peak phase (notebook 02, section 3)."""
    lines = [f"{'configuration':42s}{'est. MiB':>10}{'alloc. MiB':>11}{'est/alloc':>10}  peak phase"]
    for label, est, allocated in rows:
        if not allocated or allocated <= 0:
            raise ValueError(f"row {label!r}: allocated must be a positive byte count, got {allocated!r}")
        ratio = est.total / allocated
        lines.append(f"{label:42s}{est.total / MiB:9.1f}{allocated / MiB:11.1f}{ratio:10.3f}  {est.peak_phase}")
    return "\n".join(lines)


def largest_model_table(table) -> str:
    """``formulas.largest_model_per_accelerator``'s rows ``(key, name, memory GB, max parameters)`` as a table
    (notebook 02, section 10)."""
    table = list(table)
    w = max((len(key) for key, *_ in table), default=11) + 2
    lines = [f"{'accelerator':{w}s}{'memory (GB)':>12}{'max params (16-bit mixed Adam)':>32}"]
    lines += [f"{key:{w}s}{mem_gb:12.0f}{max_params / 1e9:30.2f} B" for key, _name, mem_gb, max_params in table]
    return "\n".join(lines)


def state_bytes_per_parameter(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, optimizer: torch.optim.Optimizer, precision: str = "bf16-mixed"
) -> tuple[float, str]:
    """Bytes per parameter of the weights, gradients and optimizer state after one real step (``train.train_step``
    keeps no gradients, so this runs the step by hand) with ``optimizer`` (built on ``model``'s parameters), counted
    from the tensors, and their dtypes as
    ``"weights float32, gradients float32"`` (notebook 02, section 10: the measured side of the ZeRO formula)."""
    from ..models import count_parameters
    from ..train import autocast, default_loss
    from .meters import storage_bytes

    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer built on the model, got {type(optimizer).__name__}")
    opt = optimizer
    device = next(model.parameters()).device
    with autocast(precision, device.type):
        loss = default_loss(model(x), y)
    loss.backward()
    opt.step()
    params = list(model.parameters())
    states = params + [p.grad for p in params if p.grad is not None]
    states += [s for st in opt.state.values() for s in st.values() if torch.is_tensor(s) and s.dim() > 0]
    grad = params[0].grad.dtype if params[0].grad is not None else None
    dtypes = f"weights {str(params[0].dtype).replace('torch.', '')}, gradients {str(grad).replace('torch.', '')}"
    return storage_bytes(states) / count_parameters(model), dtypes


def peaks_against_batch(make, batches, optimizer: str = "adam") -> tuple[list, list[int]]:
    """For each batch size in ``batches``: the estimate and the allocator's peak over two steps of ``make(batch)``'s
    ``(model, x, y)`` (the live-tensor meter where the profiler reports no allocations). Notebook 02, section 4."""
    from .estimator import estimate_training_memory
    from .meters import measure_allocator_peak, measure_training_memory

    ests, measured = [], []
    for b in batches:
        model, x, y = make(arguments.positive_int("batch", b))
        ests.append(estimate_training_memory(model, x, optimizer=optimizer, target=y))
        allocated = measure_allocator_peak(model, x, y, optimizer, "fp32", steps=2)
        measured.append(allocated or measure_training_memory(model, x, y, optimizer=optimizer).live_bytes)
    return ests, measured


def activation_bytes_per_example(model: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str):
    """Activation bytes one more example adds, ``(measured by the allocator, estimated)``, from batches of 2 and 4 of
    ``x, y`` (notebook 02, section 7b)."""
    from .estimator import estimate_training_memory
    from .meters import measure_activation_bytes_per_example
    from .saved import first_examples

    batch = first_examples(x, y)
    measured = measure_activation_bytes_per_example(model, batch, (2, 4), precision, meter="allocator")
    acts = [
        estimate_training_memory(model, xb, "sgd", precision, target=yb).activations for xb, yb in (batch(2), batch(4))
    ]
    return measured, (acts[1] - acts[0]) / 2
