"""Where a training step's time goes: a few steps under torch.profiler, their Chrome trace, and the time
sorted into categories whose largest is the bottleneck (notebook 07.2)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from ... import arguments, train
from ...hardware import synchronize
from ...procs import quiet_native_stderr
from .resources import data_dir

CATEGORIES = ("compute", "memory", "input", "communication", "overhead")
LABELS = ("input", "forward", "backward", "optimizer", "communication")
_COMM = re.compile(
    r"c10d|gloo|nccl|all_?reduce|all_?gather|reduce_scatter|broadcast|record_param_comms|barrier"
    r"|\bsend\b|\brecv\b",
    re.I,
)
_COMPUTE = re.compile(r"mm\b|matmul|conv|gemm|linear|_scaled_dot_product|attention|einsum|bmm", re.I)


def op_category(name: str) -> str:
    """The category of one profiler event by its name:
    "communication" (c10d/gloo/NCCL ops, all-reduce), "compute" (matmul, addmm, bmm, convolution),
    "memory" (every other ``aten::`` operator: copies, cat, elementwise, reductions, allocation) or
    "overhead" (labels and Python-level events). The "input" category comes from the region an
    event runs in, not from its name: see ``find_bottleneck``."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (a profiler event's name), got {type(name).__name__}")
    if _COMM.search(name):
        return "communication"
    if name.startswith("aten::") or name.startswith("cuda") or name.startswith("Memcpy") or "kernel" in name.lower():
        return "compute" if _COMPUTE.search(name.split("::")[-1]) else "memory"
    return "overhead"


@dataclass
class StepProfile:
    """Where the profiled steps spent their time (seconds per category and per phase)."""

    steps: int
    wall_s: float  # the profiled steps' wall time (input + step regions)
    seconds: dict[str, float]  # per category, summing to wall_s
    phases: dict[str, float]  # input, forward, backward, optimizer, communication
    top_ops: list[tuple[str, str, float]]  # (name, category, seconds), largest first
    trace_path: str | None = None
    device: str = "cpu"
    scenario: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # "per_step": each step's input/step/communication s

    @property
    def shares(self) -> dict[str, float]:
        """Each category's fraction of the wall time."""
        return {k: v / self.wall_s if self.wall_s > 0 else 0.0 for k, v in self.seconds.items()}

    @property
    def bottleneck(self) -> str:
        """The category with the largest share of the time."""
        return max(self.seconds, key=self.seconds.get)

    def table(self) -> str:
        """The categories as text, largest first, with the bottleneck marked."""
        rows = [f"{'category':14} {'ms/step':>9} {'share':>7}"]
        for k in sorted(self.seconds, key=self.seconds.get, reverse=True):
            mark = "  <- bottleneck" if k == self.bottleneck else ""
            rows.append(f"{k:14} {1e3 * self.seconds[k] / self.steps:9.2f} {self.shares[k]:7.1%}{mark}")
        return "\n".join(rows)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "shares": self.shares, "bottleneck": self.bottleneck}


def _time(evt, on_device: bool) -> float:
    if on_device:
        return getattr(evt, "self_device_time_total", getattr(evt, "self_cuda_time_total", 0.0)) / 1e6
    return evt.self_cpu_time_total / 1e6


def find_bottleneck(prof: profile, *, steps: int = 1, on_device: bool | None = None) -> StepProfile:
    """Sort a finished profile's time into ``CATEGORIES`` and name the largest.

    The wall time is the total of the top-level ``input`` and ``step`` regions. Everything inside an
    ``input`` region counts as input (a slow transform's convolutions included: the training loop
    waits for them); everything inside a ``communication`` region, and any collective elsewhere, as
    communication. Other operators count by name (``op_category``), with their *self* time (time not
    spent in a child operator), on the CPU; with ``on_device`` (a CUDA run) the kernels' device time is
    used for compute and memory, because CPU-side operators only queue GPU work. Whatever the
    operators do not cover (Python, the autograd engine, labels) is overhead.
    """
    if not callable(getattr(prof, "events", None)):
        raise TypeError(f"prof must be a finished torch.profiler.profile, got {type(prof).__name__}")
    events = list(prof.events())
    if on_device is None:
        on_device = any(getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA for e in events)
    regions = [e for e in events if e.name in ("input", "step") and e.cpu_parent is None]
    if not regions:
        raise ValueError(
            "the profile has no 'input' or 'step' region: record the steps with "
            "profile_training_step (or label them with record_function('step'))"
        )
    thread = regions[0].thread
    wall = sum(e.cpu_time_total for e in regions) / 1e6
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    phases = dict.fromkeys(LABELS, 0.0)
    per_op: dict[tuple[str, str], float] = {}
    for e in events:
        if (
            e.thread != thread
            or getattr(e, "device_type", torch.autograd.DeviceType.CPU) != torch.autograd.DeviceType.CPU
        ):
            continue
        chain, parent = [e.name], e.cpu_parent
        while parent is not None:
            chain.append(parent.name)
            parent = parent.cpu_parent
        top = chain[-1]
        if top not in ("input", "step"):
            continue
        if e.name in ("input", "communication") and e.name not in chain[1:]:
            seconds[e.name] += e.cpu_time_total / 1e6
            phases[e.name] += e.cpu_time_total / 1e6
            continue
        if e.name == "forward" and "forward" not in chain[1:]:
            phases["forward"] += e.cpu_time_total / 1e6
        elif e.name.startswith("autograd::engine::evaluate_function") and not any(
            c.startswith("autograd::engine") for c in chain[1:]
        ):
            phases["backward"] += e.cpu_time_total / 1e6
        elif e.name.startswith("Optimizer.") and not any(c.startswith("Optimizer.") for c in chain[1:]):
            phases["optimizer"] += e.cpu_time_total / 1e6
        if "input" in chain or "communication" in chain:
            continue  # counted with its region
        category = op_category(e.name)
        if category in ("compute", "memory"):
            t = _time(e, on_device)
        elif category == "communication":
            t = e.self_cpu_time_total / 1e6
        else:
            continue  # overhead is what is left over
        seconds[category] += t
        per_op[(e.name, category)] = per_op.get((e.name, category), 0.0) + t
    seconds["overhead"] = max(0.0, wall - sum(v for k, v in seconds.items() if k != "overhead"))
    if on_device:  # GPU kernels overlap the CPU: the total can exceed the CPU wall time
        wall = max(wall, sum(seconds.values()))
    top = sorted(((n, c, t) for (n, c), t in per_op.items()), key=lambda x: -x[2])[:8]
    per_step = {
        name: [e.cpu_time_total / 1e6 for e in events if e.name == name and e.thread == thread]
        for name in ("input", "step", "communication")
    }  # one entry per step: the least disturbed is min()
    return StepProfile(
        steps, wall, seconds, phases, top, device="cuda" if on_device else "cpu", extra={"per_step": per_step}
    )


class _Labelled(nn.Module):
    """The model with its forward pass inside ``record_function("forward")`` (same parameters)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.inner = model

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        with record_function("forward"):
            return self.inner(*xs)


def profile_training_step(
    model: nn.Module,
    batches: Iterable,
    optimizer: torch.optim.Optimizer,
    *,
    steps: int = 3,
    warmup: int = 1,
    loss_fn: Callable | None = None,
    communicate: Callable[[nn.Module], None] | None = None,
    trace_dir: str | Path | None = None,
    trace_name: str = "step",
) -> StepProfile:
    """Run ``warmup`` then ``steps`` training steps (``train.train_step``) under ``torch.profiler`` and
    return where the time went.

    Each step fetches its batch from ``batches`` (a DataLoader or any iterable of ``(x, y)``) inside
    ``record_function("input")``, runs the forward pass inside ``"forward"``, and calls
    ``communicate(model)`` (e.g. an all-reduce of the gradients) inside ``"communication"`` between
    the backward pass and the optimizer step. The Chrome trace goes to ``trace_dir/<trace_name>.json``
    (default: ``data_dir("traces")``): open it in https://ui.perfetto.dev or chrome://tracing.
    """
    arguments.instance("model", model, nn.Module, "a torch.nn.Module")
    arguments.instance("optimizer", optimizer, torch.optim.Optimizer, "a torch.optim.Optimizer")
    steps = arguments.positive_int("steps", steps)
    warmup = arguments.nonnegative_int("warmup", warmup)
    if communicate is not None:
        arguments.function("communicate", communicate)
    if not isinstance(trace_name, str) or not re.fullmatch(r"[\w.-]+", trace_name):
        raise ValueError(f"trace_name must be a plain file name (letters, digits, _ . -), got {trace_name!r}")
    params = next(model.parameters(), None)
    if params is None:
        raise ValueError("model has no parameters to train")
    device = params.device
    labelled = _Labelled(model)

    def hook(m: nn.Module) -> None:
        with record_function("communication"):
            communicate(model)

    it = iter(batches)

    def one_step() -> None:
        with record_function("input"):
            try:
                batch = next(it)
            except StopIteration:
                raise ValueError(
                    f"batches ran out: it must yield at least warmup + steps = {warmup + steps} batches"
                ) from None
        with record_function("step"):
            train.train_step(
                labelled, batch, optimizer, loss_fn, device, before_update=hook if communicate is not None else None
            )
            synchronize(device)

    for _ in range(warmup):
        one_step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = profile(activities=activities)
    with quiet_native_stderr():
        prof.start()
    try:
        for _ in range(steps):
            one_step()
    finally:
        with quiet_native_stderr():
            prof.stop()
    result = find_bottleneck(prof, steps=steps, on_device=device.type == "cuda")
    folder = Path(trace_dir) if trace_dir is not None else data_dir("traces")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{trace_name}.json"
    prof.export_chrome_trace(str(path))
    result.trace_path = str(path)
    return result
