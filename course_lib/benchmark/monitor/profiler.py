"""Where a training step's time goes: torch.profiler traces, the bottleneck, and steps built to have a
known one (notebook 07.2)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from ... import arguments, data, models, train
from ...hardware import as_device, seed_everything, synchronize
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


# --------------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class Scenario:
    """A training step built so that one category dominates."""

    name: str
    designed: str  # the category the design makes the bottleneck (notebook 07.2 reveals it after the guesses)
    what: str  # what the step does, in one sentence, without naming its bottleneck


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "slow-input",
            "input",
            "the DataLoader (no workers) blurs every 32x32 image 5 times with a 5x5 "
            "convolution; the model is an MLP 1024 -> 64 -> 10",
        ),
        Scenario(
            "big-matmuls",
            "compute",
            "an MLP 1024 -> 2048 -> 2048 -> 10 on batches of 256 already in memory: "
            "8.6 GFLOP of matrix products per step (forward 3.2, backward 5.4: the input needs no gradient)",
        ),
        Scenario(
            "tiny-batch-ddp",
            "communication",
            "two processes (gloo) each train an MLP 512 -> 2048 -> 2048 -> 10 "
            "(5.3 M parameters) on batches of 4 and all-reduce its 21 MB of gradients every step",
        ),
    )
}


def _random_batches(n: int, batch: int, features: int, classes: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, features, generator=g), torch.randint(0, classes, (batch,), generator=g)) for _ in range(n)
    ]


def _time_items(ds: torch.utils.data.Dataset, batch: int, repeats: int = 3) -> float:
    """Seconds per item: the best of ``repeats`` timings of ``batch`` items fetched one after another,
    after one untimed item (the first call sets the kernels up). The best, because another program can
    only make a timing slower."""
    # the fastest of 3, not timing.representative (which lies between the fastest and the second of 3): notebook
    # 07.2 states "best of 3" for this and the other three timings of run_scenario, and judges them against profiles
    ds[0]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(batch):
            ds[i % len(ds)]
        best = min(best, time.perf_counter() - t0)
    return best / batch


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_flops(batch: int, widths: list[int]) -> int:
    """The matrix-product FLOPs of one training step of an MLP with these layer ``widths`` (notebook
    07.2, "Big matrix products"): per layer of ``a x b`` weights, 2·batch·a·b for the forward product
    and as much for each of the backward pass's two products, the weights' gradient (dW) and the
    input's gradient (dX); the first layer skips dX, because the input batch needs no gradient.
    In all 2·batch·(3·ΣW - W1): backward does (2·ΣW - W1)/ΣW times the forward work, not twice it."""
    batch = arguments.positive_int("batch", batch)
    if not isinstance(widths, (list, tuple)) or len(widths) < 2:
        raise ValueError(f"widths must be a list of at least 2 layer widths (input ... output), got {widths!r}")
    sizes = [
        arguments.positive_int("widths", w) * arguments.positive_int("widths", v) for w, v in zip(widths, widths[1:])
    ]
    return 2 * batch * (3 * sum(sizes) - sizes[0])


def _bare_matmul_seconds(
    batch: int, widths: list[int], repeats: int = 3, device: torch.device | None = None
) -> tuple[float, float]:
    """Best times (forward, backward) of one step's matrix products run alone, in the shapes autograd
    uses (weights stored out x in as in ``nn.Linear``): forward x @ W.T; backward dW = g.T @ x and,
    except for the first layer, dX = g @ W. The compute model behind ``step_flops``."""
    device = device if device is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(1)
    layers = [
        (
            torch.randn(batch, a, generator=g).to(device),
            torch.randn(b, a, generator=g).to(device),
            torch.randn(batch, b, generator=g).to(device),
        )
        for a, b in zip(widths, widths[1:])
    ]

    def forward() -> None:
        for x, w, _ in layers:
            x @ w.t()

    def backward() -> None:
        for i, (x, w, gout) in enumerate(layers):
            gout.t() @ x
            if i > 0:
                gout @ w

    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for k, fn in enumerate((forward, backward)):
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            best[k] = min(best[k], time.perf_counter() - t0)
    return best[0], best[1]


def _allreduce_grads(model: nn.Module) -> None:
    import torch.distributed as dist

    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def communication_worker(
    width: int = 2048, batch: int = 4, steps: int = 3, seed: int = 0, trace_dir: str | None = None
) -> dict[str, Any]:
    """One rank of the "tiny-batch-ddp" scenario, run by ``comm.launch``: data
    parallelism by hand (every gradient all-reduced, then averaged) on a large MLP and a tiny batch.
    Also times a bare all-reduce of the same gradients, for the prediction."""
    import torch.distributed as dist

    seed_everything(seed)
    rank = dist.get_rank()
    model = models.MLP(512, [width, width], 10)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = _random_batches(steps + 1, batch, 512, 10, seed + rank)
    prof = profile_training_step(
        model,
        batches,
        opt,
        steps=steps,
        warmup=1,
        communicate=_allreduce_grads,
        trace_dir=trace_dir,
        trace_name=f"tiny-batch-ddp-rank{rank}",
    )
    grads = [torch.ones_like(p) for p in model.parameters()]
    best = float("inf")
    for _ in range(3):
        dist.barrier()
        t0 = time.perf_counter()
        for g in grads:
            dist.all_reduce(g)
        best = min(best, time.perf_counter() - t0)
    prof.extra.update(
        allreduce_s=best,
        grad_bytes=sum(g.numel() * 4 for g in grads),
        params=models.count_parameters(model),
        world_size=dist.get_world_size(),
        batch=batch,
    )
    return prof.to_dict() | {"rank": rank}


def _from_dict(d: dict[str, Any]) -> StepProfile:
    keys = StepProfile.__dataclass_fields__
    return StepProfile(**{k: v for k, v in d.items() if k in keys})


def run_scenario(
    name: str,
    *,
    steps: int = 5,
    seed: int = 0,
    trace_dir: str | Path | None = None,
    passes: int = 5,
    device: torch.device | str | None = None,
) -> StepProfile:
    """Profile one of ``SCENARIOS`` (notebook 07.2, "Three steps with a known bottleneck").

    ``device`` (default the CPU) is where "slow-input" and "big-matmuls" train: the input pipeline of
    "slow-input" always runs on the CPU, as a DataLoader does; "tiny-batch-ddp" runs two CPU processes
    over gloo on every machine (``device`` other than the CPU is refused there).
    Returns the ``StepProfile`` with ``scenario`` set and, in ``extra``, what a prediction needs:
    "slow-input": ``item_s`` (one image through the transform: the best of 3 timings of 16 images, alone), ``step_s``
    (one training step on a batch already on the device, best of 3), ``batch``;
    "big-matmuls": ``flops`` per step (``step_flops``), ``matmul_s`` (the step's matrix products timed alone, best
    of 3: forward and backward, the sum of ``matmul_forward_s`` and ``matmul_backward_s``);
    "tiny-batch-ddp": ``grad_bytes``, ``allreduce_s`` (a bare all-reduce of the gradients, best of 3), ``params``,
    ``batch``, and rank 1's profile as ``other_rank``.
    """
    arguments.choice("name", name, SCENARIOS)
    steps = arguments.positive_int("steps", steps)
    passes = arguments.positive_int("passes", passes)
    device = as_device(device)
    if name == "tiny-batch-ddp" and device.type != "cpu":
        raise ValueError(f"device must be 'cpu' for tiny-batch-ddp (two CPU processes over gloo), got {device}")
    seed_everything(seed)
    trace_dir = str(trace_dir) if trace_dir is not None else str(data_dir("traces"))
    if name == "slow-input":
        ds = data.CostlyTransformDataset(n=16 * (steps + 1), size=32, passes=passes, seed=seed)
        loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=False)
        model = models.MLP(32 * 32, 64, 10).to(device)
        flat = ((x.flatten(1), y) for x, y in loader)  # train_step moves each batch to the model's device
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        item_s = _time_items(ds, 16)
        prof = profile_training_step(model, flat, opt, steps=steps, trace_dir=trace_dir, trace_name=name)
        ready = (ds.images[:16].flatten(1).to(device), ds.labels[:16].to(device))  # the step alone

        def one_step() -> None:
            train.train_step(model, ready, opt, device=device)
            synchronize(device)

        step_s = min(_timed(one_step) for _ in range(3))
        prof.extra.update(item_s=item_s, step_s=step_s, batch=16, passes=passes)
    elif name == "big-matmuls":
        widths, batch = [1024, 2048, 2048, 10], 256
        model = models.MLP(widths[0], widths[1:-1], widths[-1]).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = [(x.to(device), y.to(device)) for x, y in _random_batches(steps + 1, batch, widths[0], 10, seed)]
        prof = profile_training_step(model, batches, opt, steps=steps, trace_dir=trace_dir, trace_name=name)
        fwd, bwd = _bare_matmul_seconds(batch, widths, device=device)
        prof.extra.update(
            flops=step_flops(batch, widths),
            matmul_s=fwd + bwd,
            matmul_forward_s=fwd,
            matmul_backward_s=bwd,
            batch=batch,
        )
    else:
        from ...comm import launch

        ranks = launch(communication_worker, 2, steps=steps, seed=seed, trace_dir=trace_dir, timeout=120)
        prof = _from_dict(ranks[0])
        prof.extra["other_rank"] = ranks[1]
    prof.scenario = name
    return prof


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def hidden_share(comm: list[tuple[float, float]], compute: tuple[float, float]) -> tuple[float, float]:
    """(seconds of communication in flight, the share of them inside ``compute``), from (start, end) intervals.

    The communication intervals are merged first (buckets queued behind each other count once). Notebook
    07.2, "DDP overlaps, by hand does not". A share of 0 means nothing was hidden under the computation."""
    if not isinstance(compute, tuple) or len(compute) != 2 or compute[1] < compute[0]:
        raise ValueError(f"compute must be a (start, end) tuple with end >= start, got {compute!r}")
    for iv in comm:
        if not isinstance(iv, tuple) or len(iv) != 2 or iv[1] < iv[0]:
            raise ValueError(f"comm must hold (start, end) tuples with end >= start, got {iv!r}")
    merged = _union(comm)
    total = sum(b - a for a, b in merged)
    inside = sum(max(0.0, min(b, compute[1]) - max(a, compute[0])) for a, b in merged)
    return total, (inside / total if total > 0 else 0.0)


def ddp_overlap_worker(
    width: int = 2048, batch: int = 4, steps: int = 3, seed: int = 0, bucket_cap_mb: float = 4.0
) -> dict[str, Any]:
    """One rank (of 2, gloo) comparing data parallelism by hand with ``DistributedDataParallel`` on the
    "tiny-batch-ddp" model, steps interleaved (hand, DDP, hand, DDP, ...).

    By hand: forward, backward, then one blocking ``all_reduce`` per gradient tensor: nothing can overlap.
    DDP: gradients grouped into buckets of ``bucket_cap_mb`` MB, each bucket's all-reduce launched by a
    comm hook as soon as its last gradient is ready, while backward goes on. DDP fills buckets in the order
    backward produces the gradients (last layer first) and closes a bucket once it passes its cap, so a tensor
    larger than the cap ends a bucket with it; the first bucket's cap is 1 MB (``dist._DEFAULT_FIRST_BUCKET_BYTES``),
    so that the first all-reduce starts early. Here (21 MB: a 16.8 MB and a 4.2 MB weight) that gives 2 buckets,
    16.9 MB (the last two layers) and 4.2 MB (the first), with the 4 MB cap or DDP's default of 25 MB alike. The hook
    records each
    bucket's launch and completion; the backward computation ends when the last bucket is launched
    (it holds the first layer, computed last). Returned per method, medians over ``steps``: ``step_s``,
    ``compute_s`` (forward and backward computation), ``backward_s`` (the backward computation alone: the
    most communication that could hide under it), ``comm_s`` (communication in flight),
    ``hidden`` (its share inside the backward computation), ``buckets``.
    """
    import statistics

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed_everything(seed)
    world, rank = dist.get_world_size(), dist.get_rank()
    hand = models.MLP(512, [width, width], 10)
    ddp_inner = models.MLP(512, [width, width], 10)
    ddp_inner.load_state_dict(hand.state_dict())
    ddp = DDP(ddp_inner, bucket_cap_mb=bucket_cap_mb)
    events: list[list[float]] = []

    def hook(state, bucket):
        rec = [time.perf_counter(), math.nan]
        events.append(rec)
        fut = dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()

        def done(f):
            rec[1] = time.perf_counter()
            return f.value()[0]

        return fut.then(done)

    ddp.register_comm_hook(None, hook)
    loss_fn = nn.CrossEntropyLoss()
    batches = _random_batches(steps + 1, batch, 512, 10, seed + rank)
    rows: dict[str, list[dict]] = {"by hand": [], "DDP": []}
    for i, (x, y) in enumerate(batches):
        for name, model in (("by hand", hand), ("DDP", ddp)):
            model.zero_grad(set_to_none=True)
            events.clear()
            dist.barrier()
            t0 = time.perf_counter()
            loss = loss_fn(model(x), y)
            tb = time.perf_counter()
            loss.backward()
            t_ret = time.perf_counter()
            if name == "by hand":
                comm = []
                for p in model.parameters():
                    a = time.perf_counter()
                    dist.all_reduce(p.grad)
                    comm.append((a, time.perf_counter()))
                    p.grad.div_(world)
                compute_end, t_end = t_ret, time.perf_counter()
            else:
                comm = [(a, b) for a, b in events]
                compute_end, t_end = max(a for a, _ in comm), t_ret
            total, share = hidden_share(comm, (tb, compute_end))
            if i:  # the first step of each warms up
                rows[name].append(
                    {
                        "step_s": t_end - t0,
                        "compute_s": compute_end - t0,
                        "backward_s": compute_end - tb,
                        "comm_s": total,
                        "hidden": share,
                        "buckets": len(comm),
                    }
                )
    # medians over the steps, not timing.representative for the times: "hidden" is a share, not a time, and
    # notebook 07.2 prints the step, backward and communication times beside it from the same steps
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in rows.items()}
    return {
        "rank": rank,
        "batch": batch,
        "bucket_cap_mb": bucket_cap_mb,
        "per_method": med,
        "steps": {name: rs for name, rs in rows.items()},
        "grad_bytes": sum(p.numel() * 4 for p in hand.parameters()),
    }


def ddp_overlap(
    *, batches: Iterable[int] = (4, 256), steps: int = 3, seed: int = 0, bucket_cap_mb: float = 4.0
) -> list[dict[str, Any]]:
    """Run :func:`ddp_overlap_worker` on 2 CPU processes (gloo) for each batch size; rank 0's results, with
    rank 1's as ``other_rank``. Notebook 07.2, "DDP overlaps, by hand does not"."""
    from ...comm import launch

    batches = [arguments.positive_int("batches", b) for b in batches]
    if not batches:
        raise ValueError("batches must name at least one batch size, got none")
    steps = arguments.positive_int("steps", steps)
    bucket_cap_mb = arguments.positive("bucket_cap_mb", bucket_cap_mb)
    out = []
    for b in batches:
        ranks = launch(
            ddp_overlap_worker,
            2,
            batch=b,
            steps=steps,
            seed=seed,
            bucket_cap_mb=bucket_cap_mb,
            timeout=180,
            threads_per_rank=1,
        )
        out.append(ranks[0] | {"other_rank": ranks[1]})
    return out
