"""Every compression technique on one model, measured side by side (notebook 05.4).

``build_variants`` applies every technique of the module to one trained model (pruning with
fine-tuning, removing units, low rank, int8 through torchao, pruning and int8 together, a distilled
student and the same student trained alone, its control) and times the training each one cost.
``measure`` returns one ``Row`` per variant: bytes on disk, bytes zipped (what a thin link ships), bytes
in memory, the latency of one example (batch 1: median and 95th percentile of single calls) and of a
large batch, every variant timed interleaved so the machine's drift hits all alike, and held-out
accuracy. ``best_variant`` is a pure function of those rows: for a constraint (memory, latency,
throughput or bandwidth) it picks the variant that does best on it among those that keep accuracy
within a given drop of the baseline, optionally among post-training methods only.
``accuracy_difference`` compares two models example by example, with the noise band of the test set
(McNemar), so that a gain is credited only where it exceeds it. ``label_groups`` says which points of the
trade-off chart would overlap, so that they share one label.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .. import arguments, hardware, models, timing, train
from . import distillation, lowrank, pruning, quantization, size

__all__ = [
    "Variant",
    "Row",
    "Prediction",
    "CallTiming",
    "Difference",
    "CONSTRAINTS",
    "build_variants",
    "accuracy_difference",
    "predict",
    "measure",
    "best_variant",
    "format_rows",
    "label_groups",
]

# constraint -> (Row field it minimises, what it means)
CONSTRAINTS = {
    "memory": ("memory_bytes", "the model must fit in little RAM or GPU memory"),
    "latency": ("latency1_s", "each single request must be answered sooner (batch 1, median)"),
    "throughput": ("latency_s", "a large batch must finish sooner (time per batch)"),
    "bandwidth": ("zipped_bytes", "the model (or its update) must cross a thin link: bytes shipped, compressed"),
}


@dataclass(frozen=True)
class Variant:
    """A compressed copy of the baseline, and the (re)training it took: ``training_s`` seconds of
    fine-tuning or distillation, 0 for a post-training method that needs no data."""

    model: nn.Module
    training_s: float = 0.0
    retrained: bool = False


@dataclass(frozen=True)
class Row:
    """One compressed variant, measured. ``latency_s``: a forward pass on a large batch (the
    low quantile of interleaved rounds); ``latency1_s`` and ``latency1_p95_s``: the median and the 95th
    percentile of single calls on one example (None when not measured)."""

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
    latency1_s: float | None = None
    latency1_p95_s: float | None = None


def _timed_fit(model: nn.Module, split, epochs: int, lr: float, seed: int, **kwargs) -> tuple[nn.Module, float]:
    start = time.perf_counter()
    train.fit(model, split.train, epochs=epochs, lr=lr, seed=seed, progress=False, **kwargs)
    return model, time.perf_counter() - start


def build_variants(
    baseline: nn.Module,
    split,
    *,
    sparsity: float = 0.9,
    unit_fraction: float = 0.5,
    rank: int = 32,
    student_hidden: int = 64,
    finetune_epochs: int = 5,
    student_epochs: int = 20,
    lr: float = 3e-4,
    student_lr: float = 3e-3,
    temperature: float = 4.0,
    alpha: float = 0.5,
    seed: int = 0,
) -> dict[str, Variant]:
    """Every technique of module 05 applied to one trained ``baseline`` (an MLP; it is not changed), notebook
    05.4:

    * global magnitude pruning at ``sparsity``, then fine-tuning with the masks kept (05.1);
    * ``unit_fraction`` of the hidden units removed (the model rebuilt smaller), then fine-tuning (05.1);
    * hidden Linear layers at ``rank``, then fine-tuning (05.3);
    * int8 weights and int8 dynamic quantization through torchao, post-training (05.2);
    * the pruned, fine-tuned model with int8 weights: pruning and quantization together, whose zeros stay
      exact zeros in int8 and compress (Han et al., *Deep Compression*, 2016);
    * a student MLP of ``student_hidden`` units distilled from the baseline (05.3: ``temperature``,
      ``alpha``), and its control: the same student (same initial weights, same batches, same epochs and
      learning rate) trained alone on the labels. Only the difference between the two is the teacher's.

    The torchao variants are left out when torchao is unusable (``quantization.torchao_problem()`` says why).
    Fine-tuning and the students use Adam (``lr``, ``student_lr``) through ``train.fit``. Returns
    name -> ``Variant``, the baseline first."""
    if not isinstance(baseline, nn.Module):
        raise TypeError(f"baseline must be a trained torch.nn.Module, got {type(baseline).__name__}")
    finetune_epochs = arguments.positive_int("finetune_epochs", finetune_epochs)
    student_epochs = arguments.positive_int("student_epochs", student_epochs)
    student_hidden = arguments.positive_int("student_hidden", student_hidden)
    loss = distillation.DistillationLoss(baseline, temperature=temperature, alpha=alpha)  # checks both
    baseline.eval()
    device = next(baseline.parameters()).device
    out = {"fp32 baseline": Variant(baseline)}
    pruned, t_pruned = _timed_fit(
        pruning.prune_global(pruning.copy_model(baseline), sparsity), split, finetune_epochs, lr, seed
    )
    pruned = pruning.make_permanent(pruned).eval()
    out[f"{sparsity:.0%} pruned, fine-tuned"] = Variant(pruned, t_pruned, True)
    shrunk, t = _timed_fit(pruning.remove_units(baseline, unit_fraction).to(device), split, finetune_epochs, lr, seed)
    out[f"{unit_fraction:.0%} units removed, fine-tuned"] = Variant(shrunk, t, True)
    hidden = [name for name, m in baseline.named_modules() if isinstance(m, nn.Linear)][1:-1] or None
    factored, t = _timed_fit(
        lowrank.factorize_model(baseline, hidden, rank=rank).to(device), split, finetune_epochs, lr, seed
    )
    out[f"rank {rank}, fine-tuned"] = Variant(factored, t, True)
    if quantization.torchao_problem() is None:
        out["int8 weights (torchao)"] = Variant(quantization.int8_weight_only(baseline))
        out["int8 dynamic (torchao)"] = Variant(quantization.int8_dynamic(baseline))
        out[f"{sparsity:.0%} pruned + int8 weights"] = Variant(quantization.int8_weight_only(pruned), t_pruned, True)
    linears = [m for m in baseline.modules() if isinstance(m, nn.Linear)]
    torch.manual_seed(seed)
    student = models.MLP(linears[0].in_features, student_hidden, linears[-1].out_features).to(device)
    alone = copy.deepcopy(student)  # the control: the same initial weights
    student, t = _timed_fit(student, split, student_epochs, student_lr, seed, loss_fn=loss)
    out[f"student, {student_hidden} units, distilled"] = Variant(student.eval(), t, True)
    alone, t = _timed_fit(alone, split, student_epochs, student_lr, seed)
    out[f"student, {student_hidden} units, alone"] = Variant(alone.eval(), t, True)
    baseline.eval()
    return out


@dataclass(frozen=True)
class Difference:
    """Two models on the same held-out examples (``accuracy_difference``): ``a_only`` examples only model a gets
    right, ``b_only`` only model b, of ``n``."""

    a_only: int
    b_only: int
    n: int

    @property
    def delta(self) -> float:
        """Accuracy of a minus accuracy of b (a fraction: 0.01 is 1 point)."""
        return (self.a_only - self.b_only) / self.n

    @property
    def noise(self) -> float:
        """Half-width of the band that ``delta`` stays within about 95 % of the time when the two models are
        equally good and differ only in which examples they miss: 2 sqrt(a_only + b_only) / n (McNemar's test
        in its normal approximation). It counts the test set's noise only, not that of another training run."""
        return 2 * math.sqrt(self.a_only + self.b_only) / self.n

    @property
    def within_noise(self) -> bool:
        return abs(self.delta) <= self.noise


def accuracy_difference(
    a: nn.Module, b: nn.Module, test_data, *, device: torch.device | str | None = None, batch_size: int = 512
) -> Difference:
    """How two classifiers differ on the same held-out examples, example by example (notebook 05.4: the distilled
    student against the same student trained alone, the only fair credit for the teacher). ``test_data`` is a
    TensorDataset of inputs and labels."""
    for name, m in (("a", a), ("b", b)):
        if not isinstance(m, nn.Module):
            raise TypeError(f"{name} must be a torch.nn.Module, got {type(m).__name__}")
    if not isinstance(test_data, torch.utils.data.TensorDataset) or len(test_data.tensors) != 2:
        raise TypeError("test_data must be a TensorDataset of (inputs, labels), such as data.load_digits().test")
    batch_size = arguments.positive_int("batch_size", batch_size)
    device = hardware.as_device(device) if device is not None else next(a.parameters()).device
    x, y = test_data.tensors
    right = []
    for model in (a, b):
        model.eval()
        with torch.inference_mode():
            pred = torch.cat(
                [model(x[i : i + batch_size].to(device)).argmax(-1).cpu() for i in range(0, len(x), batch_size)]
            )
        right.append(pred == y)
    return Difference(int((right[0] & ~right[1]).sum()), int((right[1] & ~right[0]).sum()), len(y))


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
    arguments.instance("variants", variants, Mapping, "a mapping of name -> model or Variant")
    batch_size = arguments.positive_int("batch_size", batch_size)
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


@dataclass(frozen=True)
class CallTiming:
    """Single calls of one variant, each timed alone (``_time_calls``): median, 95th percentile, fastest."""

    median_s: float
    p95_s: float
    min_s: float
    calls: int

    @property
    def tail(self) -> float:
        """p95 / median: how much slower the slow calls are (1.0: every call alike)."""
        return self.p95_s / self.median_s if self.median_s > 0 else float("nan")


def _time_calls(
    fns: Mapping[str, Callable[[], object]],
    *,
    calls: int = 200,
    warmup: int = 10,
    num_threads: int | None = 1,
    device: torch.device | str | None = None,
) -> dict[str, CallTiming]:
    """Time single calls, one at a time, interleaved: each round calls every function once (A B C, then
    B C A, ...: the order rotates so that no function always follows the same one), ``calls`` rounds after
    ``warmup`` untimed ones, the device synchronised after each call. Returns the median and the 95th
    percentile of each function's calls (batch-1 latency). A percentile of single calls sees
    what a block average hides: the slow calls a busy machine or a garbage collection causes. ``num_threads``
    (default 1: one request, one core) is set for the timing; None keeps torch's setting."""
    if not isinstance(fns, Mapping) or not fns:
        raise ValueError("fns must be a non-empty mapping of name -> callable")
    for name, fn in fns.items():
        arguments.function(f"fns[{name!r}]", fn)
    calls = arguments.integer("calls", calls, minimum=20)
    warmup = arguments.nonnegative_int("warmup", warmup)
    threads = torch.get_num_threads() if num_threads is None else arguments.positive_int("num_threads", num_threads)
    dev = hardware.as_device(device)
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in names}
    with timing.num_threads_set(threads):
        for r in range(warmup + calls):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                start = time.perf_counter()
                fns[name]()
                hardware.synchronize(dev)
                if r >= warmup:
                    times[name].append(time.perf_counter() - start)
    return {k: CallTiming(statistics.median(v), timing.quantile(v, 0.95), min(v), len(v)) for k, v in times.items()}


def _batch(test_data, batch_size: int, device) -> torch.Tensor:
    x = test_data.tensors[0][:batch_size].to(device)
    if len(x) < batch_size:  # repeat the held-out inputs up to the batch size
        x = x.repeat((batch_size + len(x) - 1) // len(x), *([1] * (x.dim() - 1)))[:batch_size]
    return x


def _forward(model: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    model.eval()

    def run() -> object:
        with torch.inference_mode():
            return model(x)

    return run


def measure(
    variants: Mapping[str, nn.Module | Variant],
    test_data,
    *,
    batch_size: int = 256,
    rounds: int = 5,
    single_calls: int = 200,
    single_threads: int | None = 1,
    device: torch.device | str = "cpu",
    baseline: str | None = None,
) -> list[Row]:
    """Size, latency and accuracy of each variant (a model, or a ``Variant`` from ``build_variants``),
    notebook 05.4. Latency twice, every variant interleaved with the others: a forward pass on ``batch_size``
    held-out examples (``timing.compare_interleaved``, ``rounds`` rounds on torch's threads) and, with
    ``single_calls``, single calls on one example (``_time_calls``: median and p95 of that many calls on
    ``single_threads``; 0 leaves it out). ``baseline`` (default: the first variant) is listed first."""
    if not isinstance(variants, Mapping) or not variants:
        raise ValueError("variants must be a non-empty mapping of name -> model")
    info = {k: v if isinstance(v, Variant) else Variant(v) for k, v in variants.items()}
    for name, v in info.items():
        if not isinstance(v.model, nn.Module):
            raise TypeError(f"variants[{name!r}] must be a torch.nn.Module, got {type(v.model).__name__}")
    first = baseline if baseline is not None else next(iter(info))
    if first not in info:
        raise ValueError(f"baseline {first!r} is not one of the variants: {', '.join(info)}")
    variants = {k: v.model for k, v in info.items()}
    batch_size = arguments.positive_int("batch_size", batch_size)
    single_calls = arguments.nonnegative_int("single_calls", single_calls)
    x = _batch(test_data, batch_size, device)
    timings = timing.compare_interleaved({k: _forward(m, x) for k, m in variants.items()}, rounds=rounds, device=device)
    single = {}
    if single_calls:
        x1 = _batch(test_data, 1, device)
        single = _time_calls(
            {k: _forward(m, x1) for k, m in variants.items()},
            calls=single_calls,
            num_threads=single_threads,
            device=device,
        )
    rows = []
    for name, model in variants.items():
        one = single.get(name)
        rows.append(
            Row(
                name,
                size.count_parameters(model),
                size.state_dict_bytes(model),
                size.compressed_bytes(model),
                size.memory_bytes(model),
                timings[name].seconds,
                train.evaluate(model, test_data, device)["acc"],
                timings[name].noisy,
                info[name].retrained,
                info[name].training_s,
                one.median_s if one else None,
                one.p95_s if one else None,
            )
        )
    return sorted(rows, key=lambda r: r.name != first)


def _rows(rows: Sequence[Row]) -> list[Row]:
    rows = list(rows) if not isinstance(rows, (str, bytes, Row)) and hasattr(rows, "__iter__") else None
    if not rows or not all(isinstance(r, Row) for r in rows):
        raise ValueError("rows must be a non-empty list of compare.Row (from compare.measure)")
    return rows


def best_variant(
    rows: Sequence[Row],
    constraint: str,
    *,
    max_accuracy_drop: float = 0.01,
    baseline: str | None = None,
    post_training_only: bool = False,
    min_gain: float = 1.25,
) -> Row:
    """The variant that does best on ``constraint`` ("memory", "latency": batch 1, median; "throughput": a
    large batch; "bandwidth": bytes zipped) among those whose accuracy is at most ``max_accuracy_drop`` (a
    fraction: 0.01 = 1 point) below the baseline's (the first row, or the one named); with
    ``post_training_only``, among those that needed no retraining (no training data, no training run). A
    variant must beat the baseline on the constraint by ``min_gain`` (1.25: 25 % fewer bytes or seconds) to
    count: a latency within timing noise of the baseline's is no reason to change anything, and then the
    baseline is the answer. Pure: it only reads the measured rows (notebook 05.4)."""
    post_training_only = arguments.boolean("post_training_only", post_training_only)
    min_gain = arguments.number("min_gain", min_gain, minimum=1)
    constraint = arguments.choice("constraint", constraint, CONSTRAINTS)
    max_accuracy_drop = arguments.number("max_accuracy_drop", max_accuracy_drop, minimum=0, maximum=1)
    rows = _rows(rows)
    base = next((r for r in rows if r.name == baseline), None) if baseline is not None else rows[0]
    if base is None:
        raise ValueError(f"baseline {baseline!r} is not one of the rows: {', '.join(r.name for r in rows)}")
    field = CONSTRAINTS[constraint][0]
    if any(getattr(r, field) is None for r in rows):
        raise ValueError(
            f"constraint {constraint!r} needs {field}, which these rows lack: measure them with single_calls > 0"
        )
    allowed = [
        r
        for r in rows
        if r.accuracy >= base.accuracy - max_accuracy_drop - 1e-12
        and not (post_training_only and r.retrained)
        and getattr(r, field) * min_gain <= getattr(base, field)
    ]
    if not allowed:
        return base
    return min(allowed, key=lambda r: (getattr(r, field), -r.accuracy))


def format_rows(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table, numbered as the trade-off chart numbers them, sizes and latencies
    relative to the first row too."""
    rows = _rows(rows)
    base = rows[0]
    single = all(r.latency1_s is not None for r in rows)
    lines = [
        "| # | variant | parameters | file | zipped | in memory | "
        + ("batch 1: median, p95 | " if single else "")
        + "large batch | accuracy | training |",
        "|---:|---|---:|---:|---:|---:|" + ("---:|" if single else "") + "---:|---:|---:|",
    ]
    for i, r in enumerate(rows, 1):
        one = (
            (
                f"{timing.format_seconds(r.latency1_s)} ({r.latency1_s / base.latency1_s:.2f}×), "
                f"{timing.format_seconds(r.latency1_p95_s)} | "
            )
            if single
            else ""
        )
        lines.append(
            f"| {i} | {r.name} | {r.parameters:,} | {r.file_bytes / 2**10:,.0f} KiB "
            f"({r.file_bytes / base.file_bytes:.2f}×) "
            f"| {r.zipped_bytes / 2**10:,.0f} KiB ({r.zipped_bytes / base.zipped_bytes:.2f}×) "
            f"| {r.memory_bytes / 2**10:,.0f} KiB ({r.memory_bytes / base.memory_bytes:.2f}×) | {one}"
            f"{timing.format_seconds(r.latency_s)} ({r.latency_s / base.latency_s:.2f}×)"
            f"{' (noisy)' if r.noisy else ''} "
            f"| {r.accuracy:.1%} | {f'{r.training_s:.1f} s' if r.retrained else 'none'} |"
        )
    return "\n".join(lines)


def label_groups(
    points: Sequence[tuple[float, float]], *, min_gap: float = 0.06, logx: bool = True, logy: bool = True
) -> list[list[int]]:
    """Which points of a scatter chart would overlap (notebook 05.4's trade-off chart): indices grouped so
    that each group can carry one label ("1, 2") and no two labels collide. Coordinates are scaled to the
    unit square of the points' range (on log scales, of their logarithms); a point joins a group when it lies
    within ``min_gap`` of the group's first point in both directions. Groups are in the order of their first
    point; pure, so it is tested without drawing."""
    pts = list(points)
    if not pts or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pts):
        raise ValueError("points must be a non-empty list of (x, y) pairs")
    min_gap = arguments.positive("min_gap", min_gap)
    scaled = []
    for axis, log in ((0, arguments.boolean("logx", logx)), (1, arguments.boolean("logy", logy))):
        values = [arguments.number(f"point {i}'s {'xy'[axis]}", p[axis]) for i, p in enumerate(pts)]
        if log:
            if min(values) <= 0:
                raise ValueError(f"a log axis needs positive values; got {'xy'[axis]} = {min(values)!r}")
            values = [math.log10(v) for v in values]
        span = (max(values) - min(values)) or 1.0
        scaled.append([(v - min(values)) / span for v in values])
    groups: list[list[int]] = []
    for i in range(len(pts)):
        for g in groups:
            if all(abs(scaled[a][i] - scaled[a][g[0]]) < min_gap for a in (0, 1)):
                g.append(i)
                break
        else:
            groups.append([i])
    return groups
