"""Every compression technique on one model, measured side by side (notebook 05.4).

``measure`` takes compressed variants of one trained model and returns one ``Row`` each: bytes on
disk, bytes zipped (what a thin link ships), bytes in memory, forward latency (measured interleaved,
so the machine's drift hits every variant alike) and held-out accuracy. ``recommend`` is a pure
function of those rows: for a constraint (memory, latency or bandwidth) it picks the variant that
does best on it among those that keep accuracy within a given drop of the baseline.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .. import bench, train, validate
from . import size

__all__ = ["Row", "CONSTRAINTS", "measure", "recommend", "format_rows"]

# constraint -> (Row field it minimises, what it means)
CONSTRAINTS = {
    "memory": ("memory_bytes", "the model must fit in little RAM or GPU memory"),
    "latency": ("latency_s", "each forward pass must finish sooner"),
    "bandwidth": ("zipped_bytes", "the model (or its update) must cross a thin link: bytes shipped, compressed"),
}


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


def measure(variants: Mapping[str, nn.Module], test_data, *, batch_size: int = 256, rounds: int = 5,
            device: torch.device | str = "cpu", baseline: str | None = None) -> list[Row]:
    """Size, latency at ``batch_size`` and accuracy of each variant; latencies timed interleaved
    (``bench.compare_interleaved``). ``baseline`` (default: the first variant) is listed first."""
    if not isinstance(variants, Mapping) or not variants:
        raise ValueError("variants must be a non-empty mapping of name -> model")
    for name, model in variants.items():
        if not isinstance(model, nn.Module):
            raise TypeError(f"variants[{name!r}] must be a torch.nn.Module, got {type(model).__name__}")
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
                        train.evaluate(model, test_data, device)["acc"], timings[name].noisy))
    first = baseline if baseline is not None else rows[0].name
    if first not in variants:
        raise ValueError(f"baseline {first!r} is not one of the variants: {', '.join(variants)}")
    return sorted(rows, key=lambda r: r.name != first)


def recommend(rows: Sequence[Row], constraint: str, *, max_accuracy_drop: float = 0.01,
              baseline: str | None = None) -> Row:
    """The variant that does best on ``constraint`` ("memory", "latency", "bandwidth") among those
    whose accuracy is at most ``max_accuracy_drop`` (a fraction: 0.01 = 1 point) below the baseline's
    (the first row, or the one named). Pure: it only reads the measured rows (notebook 05.4)."""
    constraint = validate.choice("constraint", constraint, CONSTRAINTS)
    max_accuracy_drop = validate.number("max_accuracy_drop", max_accuracy_drop, minimum=0, maximum=1)
    rows = list(rows)
    if not rows or not all(isinstance(r, Row) for r in rows):
        raise ValueError("rows must be a non-empty list of compare.Row (from compare.measure)")
    base = next((r for r in rows if r.name == baseline), None) if baseline is not None else rows[0]
    if base is None:
        raise ValueError(f"baseline {baseline!r} is not one of the rows: {', '.join(r.name for r in rows)}")
    field = CONSTRAINTS[constraint][0]
    allowed = [r for r in rows if r.accuracy >= base.accuracy - max_accuracy_drop - 1e-12]
    return min(allowed, key=lambda r: (getattr(r, field), -r.accuracy))


def format_rows(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table, sizes and latency relative to the first row too."""
    base = rows[0]
    lines = ["| variant | parameters | file | zipped | in memory | latency | accuracy |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.parameters:,} | {r.file_bytes / 2**10:,.0f} KiB ({r.file_bytes / base.file_bytes:.2f}×) "
                     f"| {r.zipped_bytes / 2**10:,.0f} KiB ({r.zipped_bytes / base.zipped_bytes:.2f}×) "
                     f"| {r.memory_bytes / 2**10:,.0f} KiB ({r.memory_bytes / base.memory_bytes:.2f}×) "
                     f"| {bench.format_seconds(r.latency_s)} ({r.latency_s / base.latency_s:.2f}×){' (noisy)' if r.noisy else ''} "
                     f"| {r.accuracy:.1%} |")
    return "\n".join(lines)
