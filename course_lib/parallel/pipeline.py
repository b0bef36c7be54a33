"""Model parallelism and pipeline parallelism (notebook 06.2).

* **Cost model.** :func:`bubble_fraction` is the share of time a pipeline of ``p`` stages and ``m``
  micro-batches stands idle, ``(p - 1) / (m + p - 1)``; :func:`schedule_order` writes the order in which
  each stage runs its forward (``F``) and backward (``B``) passes for GPipe or 1F1B, and :func:`simulate`
  turns such an order and per-stage times into a predicted :class:`Timeline` (balanced or not).
* **Splitting a model.** :func:`layer_costs` (parameters or FLOPs per layer), :func:`partition`
  (contiguous stages that minimise the largest stage) and :func:`split_model`.
* **Model parallelism by hand.** :func:`model_parallel_step`: layers on two ranks, the activation sent
  forward with ``send``/``recv`` and its gradient sent back.
* **Pipeline parallelism with PyTorch.** :func:`library_pipeline_step` runs ``torch.distributed.pipelining``
  (``PipelineStage`` with ``ScheduleGPipe`` or ``Schedule1F1B``).
* **The bubble, measured.** :func:`measure_schedules` runs a schedule by hand on ranks pinned to their own
  cores, with ``isend``/``irecv`` posted ahead, records when each rank computes, and returns measured
  :class:`Timeline` objects to set next to :func:`simulate`'s.

The worker functions (``*_step``, ``measure_schedules``) run inside ``comm.launch``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .. import arguments, seeds, timing
from ..memory import torch_internals
from ..comm import rank_info
from .pipeline_runner import _pin_to_core, _run_schedule

KINDS = ("gpipe", "1f1b")
"""Pipeline schedules that :func:`schedule_order` writes (and ``torch.distributed.pipelining`` runs)."""

_BY = ("params", "flops")
"""What :func:`layer_costs` counts per layer."""

_WIDTH = 1024
"""Width of the ``Linear(_WIDTH, _WIDTH)`` layers of the bubble measurement (section 4)."""


# ----------------------------------------------------------------------------------------------
# the cost model


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The pipeline bubble ``(p - 1) / (m + p - 1)`` for ``p = stages`` and ``m = micro_batches``: the
    share of each stage's time spent idle in one GPipe or 1F1B step when every stage takes the same
    time (notebook 06.2, section 3). Raises ``ValueError`` for ``stages`` or ``micro_batches`` below 1."""
    p = arguments.integer("stages", stages, minimum=1)
    m = arguments.integer("micro_batches", micro_batches, minimum=1)
    return (p - 1) / (m + p - 1)


def schedule_order(kind: str, stages: int, micro_batches: int) -> list[list[tuple[str, int]]]:
    """For each stage, the order of its passes: ``("F", i)`` forward and ``("B", i)`` backward of
    micro-batch ``i`` (notebook 06.2, section 4).

    * ``"gpipe"``: all forwards, then all backwards; a stage holds the activations of all ``m``
      micro-batches at its peak.
    * ``"1f1b"``: stage ``s`` runs ``p - 1 - s`` forwards to fill the pipeline, then alternates one
      forward and one backward, then drains; it holds at most ``p - s`` micro-batches. Same bubble.
    """
    kind = arguments.choice("kind", kind, KINDS)
    p = arguments.integer("stages", stages, minimum=1)
    m = arguments.integer("micro_batches", micro_batches, minimum=1)
    orders = []
    for s in range(p):
        if kind == "gpipe":
            orders.append([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
            continue
        warm = min(p - 1 - s, m)
        order = [("F", i) for i in range(warm)]
        for i in range(m - warm):
            order += [("F", warm + i), ("B", i)]
        order += [("B", i) for i in range(m - warm, m)]
        orders.append(order)
    return orders


@dataclass
class Timeline:
    """Who computes when: per rank, a list of ``(pass, micro_batch, start_s, end_s)`` with pass ``"F"``
    or ``"B"`` (measured by :func:`measure_schedules` or predicted by :func:`simulate`)."""

    intervals: list[list[tuple[str, int, float, float]]]
    label: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def stages(self) -> int:
        return len(self.intervals)

    @property
    def start(self) -> float:
        return min(iv[2] for rank in self.intervals for iv in rank)

    @property
    def span_s(self) -> float:
        """From the first pass on any rank to the last one's end: the step time."""
        return max(iv[3] for rank in self.intervals for iv in rank) - self.start

    def busy_s(self) -> list[float]:
        """Seconds each rank spent computing."""
        return [sum(iv[3] - iv[2] for iv in rank) for rank in self.intervals]

    @property
    def idle_fraction(self) -> float:
        """Share of ``stages x span`` in which no rank computed: the bubble (and any waiting on links)."""
        return 1.0 - sum(self.busy_s()) / (self.stages * self.span_s)

    def idle_per_rank(self) -> list[float]:
        """Per rank, the share of the step it spent not computing (section 5: the fast stage waits)."""
        return [1.0 - busy / self.span_s for busy in self.busy_s()]

    def max_in_flight(self) -> list[int]:
        """Per rank, the most micro-batches whose forward was done and backward not yet: the activations it holds."""
        peaks = []
        for rank in self.intervals:
            alive = peak = 0
            for kind, *_ in sorted(rank, key=lambda iv: iv[2]):
                alive += 1 if kind == "F" else -1
                peak = max(peak, alive)
            peaks.append(peak)
        return peaks

    def pass_times(self) -> tuple[list[float], list[float]]:
        """Per rank, the median seconds of one forward and of one backward pass (input to :func:`simulate`)."""
        # the median, not timing.representative: the prediction from these times is set beside the median idle
        # share of the same runs, disturbances included (bubble_rows), and notebook 06.2 prints both
        fwd = [median([b - a for k, _, a, b in rank if k == "F"]) for rank in self.intervals]
        bwd = [median([b - a for k, _, a, b in rank if k == "B"]) for rank in self.intervals]
        return fwd, bwd

    def shifted(self) -> Timeline:
        """The same timeline with the first pass at time 0."""
        t0 = self.start
        return Timeline(
            [[(k, i, a - t0, b - t0) for k, i, a, b in rank] for rank in self.intervals], self.label, dict(self.info)
        )


def _times(name: str, values: float | Sequence[float], stages: int) -> list[float]:
    if isinstance(values, (int, float)):
        values = [values] * stages
    values = [arguments.nonnegative(name, v) for v in values]
    if len(values) != stages:
        raise ValueError(f"{name} needs one time per stage ({stages}), got {len(values)}")
    return values


def simulate(
    kind: str,
    micro_batches: int,
    forward_s: Sequence[float],
    backward_s: Sequence[float] | None = None,
    *,
    link_s: float = 0.0,
) -> Timeline:
    """The predicted timeline of one step (notebook 06.2, sections 3-5): stage ``s`` needs
    ``forward_s[s]`` per micro-batch forward and ``backward_s[s]`` (default twice that) per backward,
    runs its passes in :func:`schedule_order`, and starts each as soon as its input has arrived
    (``link_s`` after the neighbouring stage finished it). Unequal stage times show the load imbalance:
    the slowest stage sets the pace."""
    fwd = [arguments.nonnegative("forward_s", v) for v in forward_s]
    if not fwd:
        raise ValueError("forward_s needs one time per stage, got none")
    p = len(fwd)
    bwd = _times("backward_s", [2 * f for f in fwd] if backward_s is None else backward_s, p)
    link = arguments.nonnegative("link_s", link_s)
    orders = schedule_order(kind, p, micro_batches)
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p
    pos = [0] * p
    out: list[list[tuple[str, int, float, float]]] = [[] for _ in range(p)]
    while any(pos[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind_, i = orders[s][pos[s]]
                if kind_ == "F":
                    dep = None if s == 0 else ("F", s - 1, i)
                else:
                    dep = ("F", s, i) if s == p - 1 else ("B", s + 1, i)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (link if dep[1] != s else 0.0)
                start = max(free[s], ready)
                end = start + (fwd[s] if kind_ == "F" else bwd[s])
                out[s].append((kind_, i, start, end))
                done[(kind_, s, i)] = free[s] = end
                pos[s] += 1
                progressed = True
        if not progressed:  # pragma: no cover - schedule_order never deadlocks
            raise RuntimeError("the schedule deadlocked")
    return Timeline(out, f"{kind}, predicted")


# ----------------------------------------------------------------------------------------------
# splitting a model into stages


def layer_costs(layers: Sequence[nn.Module], by: str = "params", example: torch.Tensor | None = None) -> list[float]:
    """Cost of each layer (notebook 06.2, section 1): its parameter count (``by="params"``) or the FLOPs
    of its forward pass on ``example``, the input of the first layer (``by="flops"``, counted with
    ``timing.count_flops``; the layers run in order)."""
    by = arguments.choice("by", by, _BY)
    layers = list(layers)
    if by == "params":
        return [float(sum(p.numel() for p in layer.parameters())) for layer in layers]
    if not isinstance(example, torch.Tensor):
        raise TypeError(f"by='flops' needs example=<a tensor: the first layer's input>, got {type(example).__name__}")
    costs, x = [], example
    with torch.no_grad():
        for layer in layers:
            costs.append(float(timing.count_flops(layer, x)))
            x = layer(x)
    return costs


def partition(costs: Sequence[float], stages: int) -> list[tuple[int, int]]:
    """Split layers with these ``costs`` into ``stages`` contiguous groups ``[start, end)`` so that the
    most expensive group is as cheap as possible (notebook 06.2, section 1; exact, by dynamic programming).
    Raises ``ValueError`` when there are more stages than layers."""
    costs = [arguments.nonnegative("costs", c) for c in costs]
    p = arguments.integer("stages", stages, minimum=1)
    n = len(costs)
    if p > n:
        raise ValueError(
            f"stages={p} is more than the {n} layers: every stage needs at least one layer; "
            f"use at most {n} stages or split the model into more layers"
        )
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(p + 1)]  # best[k][j]: first j layers in k stages
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        for j in range(k, n - (p - k) + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j] - prefix[i])
                if value < best[k][j] - 1e-12:
                    best[k][j], cut[k][j] = value, i
    bounds, j = [], n
    for k in range(p, 0, -1):
        bounds.append((cut[k][j], j))
        j = cut[k][j]
    return bounds[::-1]


def split_model(
    model: nn.Sequential, stages: int, *, by: str = "params", example: torch.Tensor | None = None
) -> list[nn.Sequential]:
    """``model``'s layers in ``stages`` balanced ``nn.Sequential`` parts (:func:`partition` of
    :func:`layer_costs`); the parts share the model's parameters. Notebook 06.2, section 1."""
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"model must be an nn.Sequential (a chain of layers), got {type(model).__name__}")
    layers = list(model)
    bounds = partition(layer_costs(layers, by, example), stages)
    return [nn.Sequential(*layers[a:b]) for a, b in bounds]


def mlp_stack(widths: Sequence[int], seed: int = 0) -> nn.Sequential:
    """A seeded ``nn.Sequential`` of ``Linear -> ReLU`` pairs (no ReLU after the last Linear) through
    ``widths``: the same weights in every process. Notebook 06.2's model for sections 2-3."""
    widths = arguments.int_list("widths", widths)
    if len(widths) < 2:
        raise ValueError(f"widths needs at least an input and an output width, got {widths}")
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    torch.random.set_rng_state(gen_state)
    return nn.Sequential(*layers[:-1])


def reference_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """Loss and gradients of one process on the whole batch (the yardstick of sections 2-3), through the
    course's ``train.train_step`` with a zero learning rate, so the weights stay as they were."""
    arguments.instance("model", model, nn.Module, "a torch.nn.Module")
    from .. import train

    model = copy.deepcopy(model)
    grads: dict[str, torch.Tensor] = {}

    def keep(m: nn.Module) -> None:
        grads.update({n: p.grad.detach().clone() for n, p in m.named_parameters()})

    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    res = train.train_step(model, (x, y), opt, nn.functional.cross_entropy, before_update=keep)
    return {"loss": float(res.loss), "grads": grads}


def _stage_grads(stage: nn.Module, offset: int) -> dict[str, torch.Tensor]:
    """Gradients named as in the whole model (layer index shifted by the stage's first layer)."""
    out = {}
    for name, p in stage.named_parameters():
        idx, rest = name.split(".", 1)
        out[f"{int(idx) + offset}.{rest}"] = p.grad.detach().clone()
    return out


# ----------------------------------------------------------------------------------------------
# workers (run inside comm.launch)


def _my_stage(widths: Sequence[int], seed: int, by: str) -> tuple[nn.Sequential, int, int, int, int]:
    """This rank's stage of ``mlp_stack(widths, seed)``, its first layer's index, rank, world size and
    the width of the activation that enters it."""
    info = rank_info()
    rank, world = info["rank"], info["world_size"]
    model = mlp_stack(widths, seed)
    bounds = partition(layer_costs(list(model), by, torch.zeros(1, widths[0]) if by == "flops" else None), world)
    a, b = bounds[rank]
    linears_before = sum(isinstance(layer, nn.Linear) for layer in list(model)[:a])
    return nn.Sequential(*list(model)[a:b]).to(info["device"]), a, rank, world, list(widths)[linears_before]


def model_parallel_step(widths: Sequence[int], x: torch.Tensor, y: torch.Tensor, seed: int = 0) -> dict[str, Any]:
    """Model parallelism by hand (notebook 06.2, section 2): the layers of ``mlp_stack(widths, seed)``
    split over the ranks by parameter count; each rank receives the activation from the rank before
    (``dist.recv``), runs its layers, sends the result on (``dist.send``); the last computes the loss.
    Backwards the other way: each rank receives the gradient of its output, back-propagates through its
    layers and sends the gradient of its input back. Returns this rank's gradients (named as in the
    whole model), the loss (last rank), the bytes this rank sent and which layers it held."""
    stage, first, rank, world, in_width = _my_stage(widths, seed, "params")
    device = rank_info()["device"]
    x, y = x.to(device), y.to(device)
    sent = 0
    if rank == 0:
        inp = x
    else:
        inp = torch.empty(x.shape[0], in_width, device=device)
        dist.recv(inp, rank - 1)
        inp.requires_grad_(True)
    out = stage(inp)
    loss = None
    if rank == world - 1:
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
    else:
        dist.send(out.detach(), rank + 1)
        sent += out.numel() * out.element_size()
        grad_out = torch.empty_like(out)
        dist.recv(grad_out, rank + 1)
        out.backward(grad_out)
    if rank > 0:
        dist.send(inp.grad, rank - 1)
        sent += inp.grad.numel() * inp.grad.element_size()
    return {
        "rank": rank,
        "layers": (first, first + len(stage)),
        "loss": None if loss is None else float(loss),
        "grads": _stage_grads(stage, first),
        "bytes_sent": sent,
    }


def library_pipeline_step(
    widths: Sequence[int], x: torch.Tensor, y: torch.Tensor, micro_batches: int, kind: str = "gpipe", seed: int = 0
) -> dict[str, Any]:
    """Pipeline parallelism with ``torch.distributed.pipelining`` (notebook 06.2, section 3): this rank's
    part of ``mlp_stack(widths, seed)`` as a ``PipelineStage``, one training step of ``ScheduleGPipe``
    or ``Schedule1F1B`` over ``micro_batches`` micro-batches of (``x``, ``y``). Returns the gradients
    (named as in the whole model), the mean loss over the micro-batches (last rank) and the layers held."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    kind = arguments.choice("kind", kind, KINDS)
    m = arguments.integer("micro_batches", micro_batches, minimum=1)
    device = rank_info()["device"]
    torch_internals.require_distributed("pipelining", device)
    stage_mod, first, rank, world, _ = _my_stage(widths, seed, "params")
    stage = PipelineStage(stage_mod, rank, world, device)
    schedule = (ScheduleGPipe if kind == "gpipe" else Schedule1F1B)(stage, m, loss_fn=nn.functional.cross_entropy)
    losses: list[torch.Tensor] = []
    if rank == 0:
        schedule.step(x.to(device))
    elif rank == world - 1:
        schedule.step(target=y.to(device), losses=losses)
    else:
        schedule.step()
    loss = float(torch.stack(losses).mean()) if losses else None
    return {
        "rank": rank,
        "layers": (first, first + len(stage_mod)),
        "loss": loss,
        "grads": _stage_grads(stage_mod, first),
    }


def measure_schedules(
    settings: Sequence[dict[str, Any]],
    repeats: int = 3,
    micro_batch: int = 128,
    width: int = _WIDTH,
    warmup: int = 1,
    pin: bool = True,
) -> dict[str, Any]:
    """The bubble, measured (notebook 06.2, sections 4-5). Each setting is a dict with ``kind``
    (``"gpipe"``/``"1f1b"``), ``micro_batches`` and optionally ``layers`` (``Linear(width, width)`` layers
    per stage, default 4 each: balanced). This rank pins itself to its own core (``pipeline_runner._pin_to_core``),
    builds its stage for every setting, and runs the settings interleaved (all settings once, then
    again, ``repeats`` times, after ``warmup`` rounds), so a slow moment of the machine hits all alike.
    Then each setting runs once more, untimed, under a ``memory.LiveTensorTracker`` with the weight
    gradients allocated beforehand, so that what it counts is what the schedule adds: the activations
    autograd keeps for the backward passes, and each pass's temporaries.
    Returns ``{"rank", "core", "runs": {setting index: [per repeat: this rank's intervals]},
    "layer_s": the median seconds of one layer's forward + backward on one micro-batch,
    "memory": {setting index: {"peak_bytes", "after_pass": [(pass, micro-batch, live bytes after it)]}}}``."""
    from ..memory import LiveTensorTracker

    info = rank_info()
    rank, world, device = info["rank"], info["world_size"], info["device"]
    repeats = arguments.positive_int("repeats", repeats)
    core = _pin_to_core() if pin else None
    gen = torch.Generator().manual_seed(rank)
    stages, data = [], []
    for k, s in enumerate(settings):
        layers = list(s.get("layers", [4] * world))
        if len(layers) != world:
            raise ValueError(f"settings[{k}]['layers'] needs one layer count per rank ({world}), got {layers}")
        torch.manual_seed(seeds.derive(0, "setting", k, "rank", rank))
        mods = []
        for _ in range(arguments.positive_int(f"settings[{k}]['layers']", layers[rank])):
            mods += [nn.Linear(width, width), nn.ReLU()]
        stages.append(nn.Sequential(*mods).to(device))
        m = arguments.positive_int(f"settings[{k}]['micro_batches']", s["micro_batches"])
        data.append(
            [torch.randn(micro_batch, width, generator=gen).to(device) for _ in range(m)] if rank == 0 else None
        )
    runs: dict[int, list] = {k: [] for k in range(len(settings))}
    shape = (micro_batch, width)
    plan = [(k, False) for k in range(len(settings))] * warmup + [(k, True) for k in range(len(settings))] * repeats
    for k, keep in plan:
        order = schedule_order(settings[k]["kind"], world, settings[k]["micro_batches"])[rank]
        dist.barrier()
        record = _run_schedule(stages[k], order, data[k], None, shape, shape, rank, world, device)
        for p in stages[k].parameters():
            p.grad = None
        if keep:
            runs[k].append(record)
    per_layer = []
    for k, s in enumerate(settings):
        n_layers = list(s.get("layers", [4] * world))[rank]
        for record in runs[k]:
            f = [b - a for kind, _, a, b in record if kind == "F"]
            bw = [b - a for kind, _, a, b in record if kind == "B"]
            per_layer.append((sum(f) + sum(bw)) / len(f) / n_layers)
    per_layer.sort()
    mem = {}
    for k, s in enumerate(settings):
        for p in stages[k].parameters():
            p.grad = torch.zeros_like(p)  # allocated before the tracker starts: not counted
        order = schedule_order(s["kind"], world, s["micro_batches"])[rank]
        tracker = LiveTensorTracker()
        dist.barrier()
        record = _run_schedule(stages[k], order, data[k], None, shape, shape, rank, world, device, tracker)
        mem[k] = {"peak_bytes": tracker.peak, "after_pass": [(kind, i, live) for kind, i, _, _, live in record]}
        for p in stages[k].parameters():
            p.grad = None
    # the middle of the sorted times (the upper one of an even count), not timing.representative: notebook 06.2
    # prints this figure, and a low quantile would print another number
    return {"rank": rank, "core": core, "runs": runs, "layer_s": per_layer[len(per_layer) // 2], "memory": mem}


def activation_rows(
    results: Sequence[dict[str, Any]], settings: Sequence[dict[str, Any]], micro_batch: int = 128, width: int = _WIDTH
) -> list[dict[str, Any]]:
    """Activation memory per setting and rank, measured against the count (notebook 06.2, section 4).

    Each ``Linear`` keeps its input for the backward pass and each ``ReLU`` its output, one and the same
    tensor, so a stage of *L* layers keeps *L* x ``micro_batch`` x ``width`` fp32 numbers per micro-batch
    until that micro-batch's backward pass. Rows hold ``label``, ``rank``, ``held`` (the most micro-batches
    whose forward ran and backward did not, from the schedule), ``model_bytes`` (``held`` x that count),
    ``measured_bytes`` (the most tensor bytes live after any pass in :func:`measure_schedules`' memory run)
    and ``peak_bytes`` (the same during the passes: also each pass's temporaries, such as a layer's weight
    gradient before it is added to ``.grad``); ``after_pass`` and ``model_after_pass`` give the measured and
    the counted bytes after each pass in the order the rank ran them."""
    rows = []
    for k, s in enumerate(settings):
        layers = list(s.get("layers", [4] * len(results)))
        label = f"{s['kind']}, m={s['micro_batches']}" + (f", layers {tuple(s['layers'])}" if "layers" in s else "")
        for res in results:
            r, mem = res["rank"], res["memory"][k]
            per_micro_batch, alive, counts = layers[r] * micro_batch * width * 4, 0, []
            for kind, _ in schedule_order(s["kind"], len(results), s["micro_batches"])[r]:
                alive += 1 if kind == "F" else -1
                counts.append(alive)
            rows.append(
                {
                    "label": label,
                    "rank": r,
                    "held": max(counts),
                    "model_bytes": max(counts) * per_micro_batch,
                    "measured_bytes": max(live for *_, live in mem["after_pass"]),
                    "peak_bytes": mem["peak_bytes"],
                    "model_after_pass": [n * per_micro_batch for n in counts],
                    "after_pass": [live for *_, live in mem["after_pass"]],
                }
            )
    return rows


def timelines(results: Sequence[dict[str, Any]], settings: Sequence[dict[str, Any]]) -> list[list[Timeline]]:
    """:func:`measure_schedules`' per-rank results as :class:`Timeline` objects: per setting, one per repeat."""
    out = []
    for k, s in enumerate(settings):
        label = f"{s['kind']}, m={s['micro_batches']}" + (f", layers {tuple(s['layers'])}" if "layers" in s else "")
        reps = len(results[0]["runs"][k])
        out.append([Timeline([res["runs"][k][r] for res in results], label, dict(s)) for r in range(reps)])
    return out


def median(values: Sequence[float]) -> float:
    """The median (section 4 reports medians over repeats)."""
    v = sorted(values)
    if not v:
        raise ValueError("median of no values")
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def bubble_rows(measured: Sequence[Sequence[Timeline]]) -> list[dict[str, Any]]:
    """One row per setting of :func:`measure_schedules` (notebook 06.2, section 4): ``label``, ``kind``,
    ``stages``, ``micro_batches``, ``formula`` (:func:`bubble_fraction`), ``idle`` (the median measured idle
    fraction over the repeats) with ``idle_min``/``idle_max``, ``span_s`` (median step time) and ``span_min``
    (the shortest: another program on the machine can only add time, so the low end is the best estimate of
    the undisturbed step, as in ``timing.compare_interleaved``), ``simulated``
    (the idle fraction :func:`simulate` predicts from the passes' measured median times, which holds any
    difference in speed between the ranks) and ``speed_ratio`` (slowest rank's pass time per layer over the
    fastest's)."""
    rows = []
    for reps in measured:
        first = reps[0]
        kind, m, p = first.info["kind"], first.info["micro_batches"], first.stages
        idles = [t.idle_fraction for t in reps]
        fwd = [median([t.pass_times()[0][r] for t in reps]) for r in range(p)]
        bwd = [median([t.pass_times()[1][r] for t in reps]) for r in range(p)]
        layers = list(first.info.get("layers", [1] * p))
        per_layer = [(f + b) / n for f, b, n in zip(fwd, bwd, layers)]
        rows.append(
            {
                "label": first.label,
                "kind": kind,
                "stages": p,
                "micro_batches": m,
                "formula": bubble_fraction(p, m),
                "idle": median(idles),
                "idle_min": min(idles),
                "idle_max": max(idles),
                "span_s": median([t.span_s for t in reps]),
                "span_min": min(t.span_s for t in reps),
                "simulated": simulate(kind, m, fwd, bwd).idle_fraction,
                "speed_ratio": max(per_layer) / min(per_layer),
            }
        )
    return rows
