"""The candidates of the decision guide (notebook 07.3): one ``Option`` per hardware, place and device count,
its memory layout, time, cost and energy, and why it is out. ``decision.recommend`` picks among them."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .. import catalog, comm, cost, names
from ..memory.formulas import model_states_bytes
from .assumptions import (CLOUD_MIN_HOURS, CPU_NAME, CPU_NAME_GIVEN, DESK_HOST_USD, DESK_HOST_W, DESK_MAX, DEVICE_COUNTS,
                          ELECTRICITY_ROW, FROZEN_BYTES, HOST_POWER_RATIO, PORTING_USD, PURCHASE_SHARE, STATES_FRACTION,
                          TOTAL_FRACTION, _OWNED_MAX)

_WHERE = {"cpu": "a CPU you have", "cloud": "cloud, on demand", "owned": "bought, with its host"}
_METHOD = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA (4-bit base weights)"}


@dataclass(frozen=True)
class Option:
    """One candidate of ``recommend``: a hardware, where it runs, how many devices, and its estimates."""

    hardware: str  # catalog key, or "cpu"
    name: str
    where: str  # "cpu" (this machine) | "cloud" | "owned"
    devices: int
    strategy: str  # "single" | "ddp" | "fsdp"
    zero_stage: int  # 0 (full replica) .. 3 (FSDP's full sharding)
    accumulation: int  # micro-batches per batch (gradient accumulation), 1 = none
    dtype: str  # compute dtype of the peak used
    peak_tflops: float  # dense peak of one device at ``dtype`` (the CPU: its fp32 rate)
    memory_bytes: int  # per device: model states (+ activations when given)
    device_bytes: float  # the device's memory (vendor GB x 1e9)
    fits: bool
    efficiency: float  # scaling efficiency (speed-up / devices), 1 for one device
    hours: float
    usd: float | None  # None: no price in the table
    kwh: float | None  # None: the vendor publishes no power figure
    co2_kg: float | None
    usd_per_hour: float | None  # per device (cloud), or None
    notes: tuple[str, ...] = ()
    feasible: bool = False
    why_not: str = ""
    method: str = "full"  # "full" (every weight trained) | "lora" | "qlora" (fine-tunes only)
    extra_usd: float = 0.0  # included in usd: porting (PyTorch code to TPUs), 0 when none

    def row(self) -> dict:
        """A flat dict for a table (``pandas.DataFrame(rec.table())``): GB, 3 significant digits."""
        row = {k: _sig(v) if k in ("hours", "usd", "kwh", "co2_kg", "extra_usd") else v for k, v in asdict(self).items()
               if k not in ("memory_bytes", "device_bytes", "notes")}
        return {**row, "where": _WHERE[self.where], "memory_gb": _sig(self.memory_bytes / 1e9),
                "device_gb": self.device_bytes / 1e9}


@dataclass(frozen=True)
class Recommendation:
    """What ``recommend`` advises, with its numbers, its reasons and the table it chose from."""

    hardware: str  # catalog key, "cpu", or "none" when no configuration holds the model
    name: str
    where: str  # "cpu" | "cloud" | "owned" | "none"
    devices: int
    strategy: str  # "single" | "ddp" | "fsdp"
    zero_stage: int
    accumulation: int  # micro-batches per batch (gradient accumulation), 1 = none
    dtype: str
    methods: tuple[str, ...]  # lightweight methods first, each "name: what it does, with numbers"
    memory_bytes: int  # per device, = memory.model_states_bytes (+ activation_bytes)
    hours: float | None
    usd: float | None
    kwh: float | None
    co2_kg: float | None
    reasons: tuple[str, ...]
    options: tuple[Option, ...] = field(repr=False)
    feasible: bool = True  # False: no option met every constraint; ``relax`` says what to change
    relax: str = ""
    method: str = "full"  # the fine-tuning method of the choice ("full" for training from scratch)
    assumptions: tuple[str, ...] = ()  # each assumption behind the numbers, with its value and keyword
    flips: tuple[str, ...] = ()  # for each assumption changed alone: what the choice becomes

    def headline(self) -> str:
        """One line: the choice and its time, cost and energy."""
        if self.hardware == "none":
            return "No configuration holds the model: " + self.relax
        what = (self.name if self.where == "cpu" else
                f"{self.devices} x {self.name} ({_WHERE[self.where]}, {_STRATEGY[self.strategy](self.zero_stage)})")
        what += f", {_METHOD[self.method]}" if self.method != "full" else ""
        est = f"{_hours(self.hours)}, {_money(self.usd)}, {_num(self.kwh, 'kWh')}, {_num(self.co2_kg, 'kg CO2')}"
        head = f"{what}: {est}; {self.memory_bytes / 1e9:.3g} GB per device"
        return head if self.feasible else f"Nothing meets every constraint. {self.relax} Then: {head}"

    def table(self, best_per_hardware: bool = True) -> list[dict]:
        """The options as rows; by default only the best device count of each hardware and place."""
        best: dict[tuple, Option] = {}
        for o in sorted(self.options, key=lambda o: _rank(o, "any"), reverse=True):  # the best of each key last
            best[(o.hardware, o.where, o.method) if best_per_hardware else (o.hardware, o.where, o.method, o.devices)] = o
        return [o.row() for o in self.options if o in best.values()]

    def __str__(self) -> str:
        return "\n".join([self.headline(), "Methods, lightest first:", *(f"  - {m}" for m in self.methods),
                          "Why:", *(f"  - {r}" for r in self.reasons),
                          *(["Assumptions (keyword = value):", *(f"  - {a}" for a in self.assumptions)]
                            if self.assumptions else []),
                          *(["What flips the choice (each assumption changed alone):",
                             *(f"  - {f}" for f in self.flips)] if self.flips else [])])


_STRATEGY = {"single": lambda s: "one device", "ddp": lambda s: "data parallel (DDP)",
             "fsdp": lambda s: f"sharded: ZeRO stage {s}" + (" = FSDP" if s == 3 else "")}


def _gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB"


def _sig(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.3g}")


def _hours(h: float | None) -> str:
    return "time unknown" if h is None else f"{h:.3g} h" if h < 48 else f"{h:.3g} h ({h / 24:.3g} days)"


def _money(usd: float | None) -> str:
    return "no price" if usd is None else f"{usd:,.3g} USD" if usd < 1000 else f"{usd:,.0f} USD"


def _num(x: float | None, unit: str) -> str:
    return f"{unit} unknown" if x is None else f"{x:.3g} {unit}"


def _rank(o: Option, energy: str) -> tuple:
    usd = math.inf if o.usd is None else o.usd
    kwh = math.inf if o.kwh is None else o.kwh
    return (kwh, usd, o.hours, o.devices) if energy == "low" else (usd, o.hours, o.devices)


# ----------------------------------------------------------------------------- the candidates

@dataclass(frozen=True)
class _Job:
    n_params: int
    flops: float
    step_flops: float  # one device's work per step
    precision: str
    optimizer: str
    activation_bytes: int | None
    batch_size: int | None  # samples the activation bytes hold (accumulation splits them)
    utilization: dict  # "cpu", a catalog key or a kind ("gpu", "tpu") -> model FLOPs utilisation; "default"
    grid: str
    method: str = "full"
    trainable: int = 0  # parameters trained (all of them, or the adapters); 0 = n_params
    xla_ready: bool = False
    porting_usd: float = PORTING_USD
    purchase_share: float = PURCHASE_SHARE
    spot: bool = False
    host_power_ratio: float = HOST_POWER_RATIO  # host watts per watt of chip in a server (cost.HOST_POWER_RATIO)
    markup: float = 0.0  # on cloud prices (sensitive data, where rules demand dedicated hosts)
    desk_host_usd: float = DESK_HOST_USD

    def util(self, key: str, kind: str) -> float:
        u = self.utilization
        return u.get(key, u.get(kind, u["default"]))


def _states(job: _Job, stage: int = 0, devices: int = 1) -> int:
    """Model states per device: trained parameters' (``memory.model_states_bytes``) plus the frozen weights
    (LoRA, QLoRA), which ZeRO stage 3 shards too."""
    if job.method == "full":
        return model_states_bytes(job.n_params, job.precision, job.optimizer, stage, devices)
    frozen = FROZEN_BYTES[job.method] * job.n_params / (devices if stage == 3 else 1)
    return int(frozen) + model_states_bytes(job.trainable, job.precision, job.optimizer, stage, devices)


def _fits(states: int, activations: int | None, device_bytes: float) -> bool:
    if activations is None:
        return states <= STATES_FRACTION * device_bytes
    return states + activations <= TOTAL_FRACTION * device_bytes


def _divisors(n: int) -> tuple[int, ...]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return tuple(sorted(set(small) | {n // k for k in small}))


def _micro(job: _Job, k: int) -> int:
    """Activation bytes of one micro-batch of ``batch_size / k`` samples (exact when they are a multiple
    of the batch, as ``memory.transformer_activation_bytes`` is)."""
    return job.activation_bytes * (job.batch_size // k) // job.batch_size


def _layout(job: _Job, devices: int, device_bytes: float) -> tuple[int, int, int, bool]:
    """(ZeRO stage, gradient accumulation steps, bytes per device, fits): the lowest stage, then the fewest
    micro-batches, that fit; else the most sharded layout (stage 3, or 0 on one device) as it is.

    Accumulation splits the batch into k micro-batches with k a divisor of ``batch_size`` (at most one
    sample per micro-batch): when one sample's activations do not fit, only a higher stage or more devices
    (the caller's next device count) can make room."""
    stages = (0,) if devices == 1 else (0, 1, 2, 3)
    acts = job.activation_bytes
    for stage in stages:
        states = _states(job, stage, devices)
        for k in _divisors(job.batch_size) if acts else (1,):
            part = None if acts is None else _micro(job, k)
            if _fits(states, part, device_bytes):
                return stage, k, states + (part or 0), True
    return stage, 1, states + (acts or 0), False


def _dtype(chip: catalog.Accelerator, precision: str) -> tuple[str, str]:
    """The compute dtype of ``precision`` on ``chip`` and a note where the chip lacks it."""
    want = names.precision_dtype(precision) or "fp32"
    for d in {"bf16": ("bf16", "fp16"), "fp16": ("fp16", "bf16"), "fp32": ("fp32", "bf16")}[want]:
        if d in chip.peak_tflops:
            if d == want:
                return d, ""
            if want == "fp32":
                return d, f"{chip.name} has no fp32 peak in the catalog: XLA computes fp32 matmuls in bf16 passes"
            return d, (f"{chip.name} has no {want} tensor cores: use {d}-mixed" +
                       (" with a GradScaler (notebook 04)" if d == "fp16" else ""))
    raise ValueError(f"{chip.name} has no 16- or 32-bit peak in the catalog")  # pragma: no cover - catalog checks


def _link_gbs(chip: catalog.Accelerator, devices: int) -> float:
    """Per-direction GB/s of the slowest link a ring over ``devices`` crosses."""
    if devices <= max(chip.pod_chips, 8):
        return chip.interconnect_gbs  # NVLink / ICI inside the pod; PCIe between the cards of one server
    return min(chip.interconnect_gbs, catalog.get_link("ib-ndr").bandwidth_gbs)  # across servers


def _efficiency(job: _Job, chip: catalog.Accelerator, devices: int, peak: float, stage: int) -> float:
    if devices == 1:
        return 1.0
    step_s = job.step_flops / (peak * job.util(chip.key, chip.kind))
    grad = (job.trainable or job.n_params) * (4 if job.precision == "fp32" else 2) * (1.5 if stage == 3 else 1.0)  # ZeRO-3: 3 vs 2 passes
    return comm.data_parallel_speedup(step_s, grad, devices, _link_gbs(chip, devices) * 1e9) / devices


def _chip_options(job: _Job, chip: catalog.Accelerator, framework: str, owned_card: str | None) -> list[Option]:
    dtype, dtype_note = _dtype(chip, job.precision)
    peak, u = chip.peak_flops(dtype), job.util(chip.key, chip.kind)
    try:
        hourly = cost.cloud_hourly(chip.key, spot=job.spot) * (1 + job.markup)
    except ValueError:
        hourly = None
    top = DEVICE_COUNTS[-1]
    cap = min(chip.pod_chips, top) if chip.kind == "tpu" else 8 if chip.pod_chips == 1 else top
    porting = job.porting_usd if chip.kind == "tpu" and framework == "pytorch" and not job.xla_ready else 0.0
    notes = tuple(n for n in (dtype_note, *_framework_notes(chip, framework, porting)) if n)
    out = []
    if owned_card is not None:  # the card plus its host (cost.host_share), the job charged purchase_share of both
        host = cost.host_share(owned_card)
        desk = host["where"] == "desk"  # one workstation for all the cards, not a share per card
        card_usd, owned_pue = cost.purchase_price(owned_card), host["pue"]
    g_per_kwh = catalog.get_price(cost.GRIDS[job.grid]).value
    for where in ("cloud", "owned") if owned_card is not None else ("cloud",):
        for n in (d for d in DEVICE_COUNTS if d <= (cap if where == "cloud" else
                                                     min(cap, DESK_MAX if desk else _OWNED_MAX))):
            stage, k, mem, fits = _layout(job, n, chip.memory_gb * 1e9)
            eff = _efficiency(job, chip, n, peak, stage)
            fp = cost.training_footprint(job.flops, chip.key, chips=n, utilization=u, dtype=dtype,
                                         grid=job.grid, scaling_efficiency=eff,
                                         pue="pue-google" if where == "cloud" else owned_pue)
            hours, kwh, co2 = fp["hours"], fp.get("kwh"), fp.get("co2_kg")
            # the host draws power too (cost's one rule): a chip in a server (rented, or a bought data-centre
            # card) host_power_ratio x its TDP; bought desk cards one workstation for all n cards
            server_w = None if chip.power_w is None else job.host_power_ratio * chip.power_w
            pue, host_w = (catalog.get_price("pue-google").value, server_w) if where == "cloud" else \
                (owned_pue, DESK_HOST_W / n if desk else server_w)
            if kwh is not None:
                kwh += n * hours * host_w * pue / 1000
                co2 = kwh * g_per_kwh / 1000
            if where == "cloud":  # billed for at least a minute per device
                usd = None if hourly is None else n * max(hours, CLOUD_MIN_HOURS) * hourly + porting
            else:
                buy = n * card_usd + (job.desk_host_usd if desk else n * host["usd"])
                usd = job.purchase_share * buy + (kwh or 0.0) * _electricity_usd() + porting
            strategy = "single" if n == 1 else "ddp" if stage == 0 else "fsdp"
            out.append(Option(chip.key, chip.name, where, n, strategy, stage, k, dtype, peak / 1e12, mem,
                              chip.memory_gb * 1e9, fits, eff, hours, usd, kwh, co2,
                              hourly if where == "cloud" else None, notes, method=job.method, extra_usd=porting))
    return out


def _framework_notes(chip: catalog.Accelerator, framework: str, porting: float) -> tuple[str, ...]:
    return tuple(note for cond, note in (
        (chip.kind == "tpu" and framework == "pytorch" and porting > 0,
         f"TPUs run PyTorch only through PyTorch/XLA (torch_xla): porting a CUDA code base is charged "
         f"{porting:,.0f} USD (porting_usd, assumed; xla_ready=True if the code already runs on XLA)"),
        (chip.kind == "tpu" and framework == "pytorch" and porting == 0,
         "TPUs run PyTorch through PyTorch/XLA (torch_xla): the code already runs on XLA (xla_ready=True)"),
        (chip.vendor.upper() == "AMD", "AMD GPUs need the ROCm builds of PyTorch, TensorFlow or JAX"),
    ) if cond)


def _electricity_usd() -> float:
    """USD per kWh for hardware you run yourself (the price table's ``ELECTRICITY_ROW``)."""
    return catalog.get_price(ELECTRICITY_ROW).value


def _cpu_option(job: _Job, gflops: float, memory_gb: float, watts: float, given: bool) -> Option:
    stage, k, mem, fits = _layout(job, 1, memory_gb * 1e9)
    u = job.util("cpu", "cpu")
    hours = job.flops / (gflops * 1e9 * u) / 3600
    kwh = hours * watts / 1000
    co2 = kwh * catalog.get_price(cost.GRIDS[job.grid]).value / 1000
    name = (CPU_NAME_GIVEN if given else CPU_NAME).format(gflops=gflops)
    return Option("cpu", name, "cpu", 1, "single", 0, k, "fp32", gflops / 1e3, mem, memory_gb * 1e9,
                  fits, 1.0, hours, kwh * _electricity_usd(), kwh, co2, None,
                  (f"CPU baseline at {gflops:g} GFLOP/s fp32 ({'given' if given else 'assumed'}) and {watts:g} W "
                   f"(assumed unless given; pass your own)",), method=job.method)


# ----------------------------------------------------------------------------- checks and the choice

def _why_not(o: Option, job: _Job, privacy: str, budget: float | None, deadline: float | None) -> str:
    """Why an option is out ('' if it is feasible)."""
    if not o.fits:
        room = STATES_FRACTION if job.activation_bytes is None else TOTAL_FRACTION
        why = f"needs {o.memory_bytes / 1e9:.3g} GB per device, more than {room:.0%} of {o.device_bytes / 1e9:.3g} GB"
        if job.activation_bytes is not None and job.batch_size > 1:
            why += (f", even with gradient accumulation down to one sample per micro-batch "
                    f"({_gb(_micro(job, job.batch_size))} of activations): shard, add devices, or checkpoint "
                    f"activations")
        return why
    if privacy == "regulated" and o.where == "cloud":
        return "regulated data may not leave the premises"
    if o.usd is None:
        return "no price in the table"
    if deadline is not None and o.hours > deadline:
        return f"{o.hours:.3g} h is past the {deadline:g} h deadline"
    if budget is not None and o.usd > budget:
        return f"{o.usd:,.0f} USD is over the {budget:,.0f} USD budget"
    return ""


def _relax(pool: list[Option], budget: float | None, deadline: float | None,
           energy: str) -> tuple[Option | None, str]:
    """The option the smallest change of deadline or budget makes feasible, and that change in words."""
    if not pool:
        return None, ""
    changes = []
    if deadline is not None:
        ok = [o for o in pool if budget is None or o.usd <= budget]
        if ok:
            o = min(ok, key=lambda o: (o.hours, _rank(o, energy)))
            changes.append((o.hours / deadline, o, f"allow {o.hours:.3g} h instead of {deadline:g} h"))
    if budget is not None:
        ok = [o for o in pool if deadline is None or o.hours <= deadline]
        if ok:
            o = min(ok, key=lambda o: (o.usd, o.hours))
            changes.append((o.usd / budget, o, f"raise the budget from {budget:,.0f} to {o.usd:,.0f} USD"))
    if not changes:  # neither alone is enough: change both, by the smallest factor
        o = min(pool, key=lambda o: max(o.hours / deadline, o.usd / budget))
        changes.append((0, o, f"allow {o.hours:.3g} h instead of {deadline:g} h and {o.usd:,.0f} USD instead of "
                              f"{budget:,.0f} USD"))
    _, o, text = min(changes, key=lambda c: c[0])
    return o, f"Smallest change: {text} ({o.devices} x {o.name}, {_WHERE[o.where]})."


