"""Every compression technique on one model, measured side by side (notebook 05.4).

``build_variants`` applies every technique of the module to one trained model (pruning with
fine-tuning, removing units, low rank, int8 through torchao, a distilled student) and times the
training each one cost. ``measure`` returns one ``Row`` per variant: bytes on disk, bytes zipped (what
a thin link ships), bytes in memory, forward latency (measured interleaved, so the machine's drift
hits every variant alike) and held-out accuracy. ``recommend`` is a pure function of those rows: for a
constraint (memory, latency or bandwidth) it picks the variant that does best on it among those that
keep accuracy within a given drop of the baseline, optionally among post-training methods only.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .. import bench, models, train, validate
from . import distillation, lowrank, pruning, quantization, size

__all__ = ["Variant", "Row", "Prediction", "CONSTRAINTS", "build_variants", "predict", "measure", "recommend",
           "format_rows"]

# constraint -> (Row field it minimises, what it means)
CONSTRAINTS = {
    "memory": ("memory_bytes", "the model must fit in little RAM or GPU memory"),
    "latency": ("latency_s", "each forward pass must finish sooner"),
    "bandwidth": ("zipped_bytes", "the model (or its update) must cross a thin link: bytes shipped, compressed"),
}


@dataclass(frozen=True)
class Variant:
    """A compressed copy of the baseline, and the (re)training it took: ``training_s`` seconds of
    fine-tuning or distillation, 0 for a post-training method that needs no data (notebook 05.4)."""

    model: nn.Module
    training_s: float = 0.0
    retrained: bool = False


@dataclass(frozen=True)
class Row:
    """One compressed variant, measured (notebook 05.4)."""

    name: str
    parameters: int
    file_bytes: int
    zipped_bytes: int
    memory_bytes: int
    latency_s: float
    accuracy: float
    noisy: bool = False
    retrained: bool = False
    training_s: float = 0.0


def _timed_fit(model: nn.Module, split, epochs: int, lr: float, seed: int, **kwargs) -> tuple[nn.Module, float]:
    start = time.perf_counter()
    train.fit(model, split.train, epochs=epochs, lr=lr, seed=seed, progress=False, **kwargs)
    return model, time.perf_counter() - start


def build_variants(baseline: nn.Module, split, *, sparsity: float = 0.9, unit_fraction: float = 0.5,
                   rank: int = 32, student_hidden: int = 64, finetune_epochs: int = 5, student_epochs: int = 20,
                   lr: float = 3e-4, student_lr: float = 3e-3, seed: int = 0) -> dict[str, Variant]:
    """Every technique of module 05 applied to one trained ``baseline`` (an MLP; it is not changed):
    global magnitude pruning at ``sparsity`` then fine-tuning with the masks kept (05.1); ``unit_fraction``
    of the hidden units removed, then fine-tuning (05.1); hidden Linear layers at ``rank``, then
    fine-tuning (05.3); int8 weights and int8 dynamic quantization through torchao, post-training
    (05.2; left out, with the reason in ``skipped``, when torchao is unusable); and a student MLP of
    ``student_hidden`` units distilled from the baseline (05.3). Fine-tuning and distillation use Adam
    (``lr``, ``student_lr``) through ``train.fit``. Returns name -> ``Variant``, the baseline first."""
    if not isinstance(baseline, nn.Module):
        raise TypeError(f"baseline must be a trained torch.nn.Module, got {type(baseline).__name__}")
    finetune_epochs = validate.positive_int("finetune_epochs", finetune_epochs)
    student_epochs = validate.positive_int("student_epochs", student_epochs)
    baseline.eval()
    device = next(baseline.parameters()).device
    out = {"fp32 baseline": Variant(baseline)}
    pruned, t = _timed_fit(pruning.prune_global(pruning.copy_model(baseline), sparsity), split, finetune_epochs, lr,
                           seed)
    out[f"{sparsity:.0%} pruned, fine-tuned"] = Variant(pruning.make_permanent(pruned), t, True)
    shrunk, t = _timed_fit(pruning.remove_units(baseline, unit_fraction).to(device), split, finetune_epochs, lr, seed)
    out[f"{unit_fraction:.0%} units removed, fine-tuned"] = Variant(shrunk, t, True)
    hidden = [name for name, m in baseline.named_modules() if isinstance(m, nn.Linear)][1:-1] or None
    factored, t = _timed_fit(lowrank.factorize_model(baseline, hidden, rank=rank).to(device), split, finetune_epochs, lr, seed)
    out[f"rank {rank}, fine-tuned"] = Variant(factored, t, True)
    if quantization.torchao_problem() is None:
        out["int8 weights (torchao)"] = Variant(quantization.int8_weight_only(baseline))
        out["int8 dynamic (torchao)"] = Variant(quantization.int8_dynamic(baseline))
    in_features = next(m for m in baseline.modules() if isinstance(m, nn.Linear)).in_features
    out_features = [m for m in baseline.modules() if isinstance(m, nn.Linear)][-1].out_features
    torch.manual_seed(seed)
    student = models.MLP(in_features, student_hidden, out_features).to(device)
    loss = distillation.DistillationLoss(baseline, temperature=4.0, alpha=0.5)
    student, t = _timed_fit(student, split, student_epochs, student_lr, seed, loss_fn=loss)
    out[f"student, {student_hidden} units, distilled"] = Variant(student, t, True)
    baseline.eval()
    return out


@dataclass(frozen=True)
class Prediction:
    """What a variant should cost, by hand: ``memory_bytes`` (4 bytes per fp32 value; int8 weights 1 byte
    each plus a scale and a zero point per row) and ``flops`` of a forward pass at the batch size
    (2 x batch x in x out per Linear layer, zeros included: a dense kernel multiplies them too)."""

    memory_bytes: int
    flops: int


def _is_quantized(t: torch.Tensor) -> bool:
    return type(t) not in (torch.Tensor, nn.Parameter)


def predict(variants: Mapping[str, nn.Module | Variant], batch_size: int = 256) -> dict[str, Prediction]:
    """The analytic cost of each variant (notebook 05.4's predictions, before measuring)."""
    batch_size = validate.positive_int("batch_size", batch_size)
    out = {}
    for name, v in variants.items():
        model = v.model if isinstance(v, Variant) else v
        if not isinstance(model, nn.Module):
            raise TypeError(f"variants[{name!r}] must be a torch.nn.Module, got {type(model).__name__}")
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if any(_is_quantized(m.weight) for m in linears):
            nbytes = quantization.predicted_int8_bytes(model)
        else:
            nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        out[name] = Prediction(nbytes, sum(2 * batch_size * m.in_features * m.out_features for m in linears))
    return out


def measure(variants: Mapping[str, nn.Module | Variant], test_data, *, batch_size: int = 256, rounds: int = 5,
            device: torch.device | str = "cpu", baseline: str | None = None) -> list[Row]:
    """Size, latency at ``batch_size`` and accuracy of each variant (a model, or a ``Variant`` from
    ``build_variants``); latencies timed interleaved (``bench.compare_interleaved``). ``baseline``
    (default: the first variant) is listed first."""
    if not isinstance(variants, Mapping) or not variants:
        raise ValueError("variants must be a non-empty mapping of name -> model")
    info = {k: v if isinstance(v, Variant) else Variant(v) for k, v in variants.items()}
    for name, v in info.items():
        if not isinstance(v.model, nn.Module):
            raise TypeError(f"variants[{name!r}] must be a torch.nn.Module, got {type(v.model).__name__}")
    variants = {k: v.model for k, v in info.items()}
    batch_size = validate.positive_int("batch_size", batch_size)
    x = test_data.tensors[0][:batch_size].to(device)
    if len(x) < batch_size:  # repeat the held-out inputs up to the batch size
        x = x.repeat((batch_size + len(x) - 1) // len(x), *([1] * (x.dim() - 1)))[:batch_size]

    def forward(model: nn.Module) -> Callable[[], object]:
        model.eval()

        def run() -> object:
            with torch.inference_mode():
                return model(x)
        return run

    timings = bench.compare_interleaved({k: forward(m) for k, m in variants.items()}, rounds=rounds, device=device)
    rows = []
    for name, model in variants.items():
        rows.append(Row(name, size.count_parameters(model), size.state_dict_bytes(model), size.compressed_bytes(model),
                        size.memory_bytes(model), timings[name].seconds,
                        train.evaluate(model, test_data, device)["acc"], timings[name].noisy, info[name].retrained,
                        info[name].training_s))
    first = baseline if baseline is not None else rows[0].name
    if first not in variants:
        raise ValueError(f"baseline {first!r} is not one of the variants: {', '.join(variants)}")
    return sorted(rows, key=lambda r: r.name != first)


def recommend(rows: Sequence[Row], constraint: str, *, max_accuracy_drop: float = 0.01,
              baseline: str | None = None, post_training_only: bool = False, min_gain: float = 1.25) -> Row:
    """The variant that does best on ``constraint`` ("memory", "latency", "bandwidth") among those
    whose accuracy is at most ``max_accuracy_drop`` (a fraction: 0.01 = 1 point) below the baseline's
    (the first row, or the one named); with ``post_training_only``, among those that needed no
    retraining (no training data, no training run). A variant must beat the baseline on the constraint
    by ``min_gain`` (1.25: 25 % fewer bytes or seconds) to count: a latency within timing noise of
    the baseline's is no reason to change anything, and then the baseline is the answer.
    Pure: it only reads the measured rows (notebook 05.4)."""
    post_training_only = validate.boolean("post_training_only", post_training_only)
    min_gain = validate.number("min_gain", min_gain, minimum=1)
    constraint = validate.choice("constraint", constraint, CONSTRAINTS)
    max_accuracy_drop = validate.number("max_accuracy_drop", max_accuracy_drop, minimum=0, maximum=1)
    rows = list(rows)
    if not rows or not all(isinstance(r, Row) for r in rows):
        raise ValueError("rows must be a non-empty list of compare.Row (from compare.measure)")
    base = next((r for r in rows if r.name == baseline), None) if baseline is not None else rows[0]
    if base is None:
        raise ValueError(f"baseline {baseline!r} is not one of the rows: {', '.join(r.name for r in rows)}")
    field = CONSTRAINTS[constraint][0]
    allowed = [r for r in rows if r.accuracy >= base.accuracy - max_accuracy_drop - 1e-12
               and not (post_training_only and r.retrained) and getattr(r, field) * min_gain <= getattr(base, field)]
    if not allowed:
        return base
    return min(allowed, key=lambda r: (getattr(r, field), -r.accuracy))


def format_rows(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table, sizes and latency relative to the first row too."""
    base = rows[0]
    lines = ["| variant | parameters | file | zipped | in memory | latency | accuracy | training |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.parameters:,} | {r.file_bytes / 2**10:,.0f} KiB ({r.file_bytes / base.file_bytes:.2f}×) "
                     f"| {r.zipped_bytes / 2**10:,.0f} KiB ({r.zipped_bytes / base.zipped_bytes:.2f}×) "
                     f"| {r.memory_bytes / 2**10:,.0f} KiB ({r.memory_bytes / base.memory_bytes:.2f}×) "
                     f"| {bench.format_seconds(r.latency_s)} ({r.latency_s / base.latency_s:.2f}×){' (noisy)' if r.noisy else ''} "
                     f"| {r.accuracy:.1%} | {f'{r.training_s:.1f} s' if r.retrained else 'none'} |")
    return "\n".join(lines)
