"""The decision guide: from a training job and its constraints to the hardware to run it on (notebook 07.3).

``recommend(n_params, n_samples, ...)`` is a pure function. It prices every candidate (a 2-core CPU as
the baseline, assumed at ``CPU_GFLOPS`` unless you pass your own measured rate; each catalog accelerator
rented or bought, on 1, 2, 4, ... devices) with the estimators of the earlier modules, then picks one:

* **memory** per device: the model states of ``memory.model_states_bytes`` (weights, gradients and
  optimizer state, the ZeRO paper's bytes per parameter), sharded with the lowest ZeRO stage that
  fits when one device cannot hold them (ZeRO-1/2, FSDP's full sharding = stage 3). Without an
  activation estimate the states may fill 80 % of the device, the rule of
  ``memory.largest_model_that_fits``; with ``activation_bytes`` (e.g. from
  ``memory.transformer_activation_bytes``) states plus activations must leave 10 % spare, the rule
  of notebook 02's memory calculator (``memory.large_model_memory``). When they do not fit, gradient
  accumulation splits the batch of ``batch_size`` samples into k micro-batches (k divides the batch, so
  at most one sample per micro-batch); when one sample's activations do not fit either, only sharding or
  more devices can help here (activation checkpointing, named in ``methods``, is not modelled).
* **time**: training FLOPs (``compute.training_flops``: 6 x parameters x tokens, or FLOPs per sample
  x samples x epochs) over devices x dense peak at the compute dtype x utilisation x scaling
  efficiency, the last from the ring all-reduce model of notebook 03 (``comm.data_parallel_speedup``
  with a fixed micro-batch per device and no overlap, so a pessimistic bound).
* **cost, energy, CO2**: ``cost.training_footprint`` (on-demand price per device-hour, billed for at
  least a minute; power x PUE; grid intensity); bought cards cost their price plus their share of a
  server (``cost.host_share``: an assumption, ``cost.SERVER_USD_PER_GPU`` and ``cost.SERVER_W_PER_GPU``
  per data-centre GPU) plus the electricity of both in a server room (``OWNED_PUE_ROW``); the CPU you
  have costs only its electricity. Spot prices are named in the reasons, for jobs that checkpoint.
* **the choice**: the cheapest option that fits memory, the deadline and the budget and that the
  privacy rule allows ("regulated": data may not leave the premises, so only hardware you own); with
  ``energy="low"`` the one with the lowest kWh instead. Lightweight methods come first in
  ``methods``; more devices only when the deadline needs them. Nothing feasible: the
  recommendation says the smallest change (deadline, budget) that makes one feasible.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from . import catalog, comm, cost, names, validate
from .memory.formulas import largest_model_that_fits, model_states_bytes

__all__ = ["FRAMEWORKS", "PRIVACY", "ENERGY", "STATES_FRACTION", "TOTAL_FRACTION", "MICRO_BATCH", "DEVICE_COUNTS",
           "CPU_GFLOPS", "CPU_NAME", "CPU_MEMORY_GB", "CPU_WATTS", "Option", "Recommendation", "recommend"]

FRAMEWORKS = ("pytorch", "tensorflow", "jax")
PRIVACY = ("none", "sensitive", "regulated")
ENERGY = ("any", "low")

#: Share of a device's memory the model states may use when no activation estimate is given: the
#: 20 % kept for activations, the framework and fragmentation of ``memory.largest_model_that_fits``.
STATES_FRACTION = 0.8
#: Share states + activations may use when ``activation_bytes`` is given (notebook 02's calculator).
TOTAL_FRACTION = 0.9
#: Work per device per step in the scaling model (one step's compute against its all-reduce): 32 samples,
#: and for jobs counted in tokens at least ``STEP_TOKENS`` tokens (e.g. 16 sequences of 2,048).
MICRO_BATCH, STEP_TOKENS = 32, 32_768
#: Device counts tried: PCIe cards up to one server (8), NVLink GPUs beyond it over InfiniBand NDR,
#: TPUs up to their pod; bought hardware up to one 8-card server (``_OWNED_MAX``).
DEVICE_COUNTS, _OWNED_MAX = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), 8
#: Compute Engine bills vCPUs, GPUs and memory per second after a one-minute minimum (its billing model,
#: https://cloud.google.com/compute/vm-instance-pricing, as published; not re-checked): a tiny job pays a minute.
CLOUD_MIN_HOURS = 1 / 60
#: The CPU baseline, an ASSUMED 2-core cloud VM like Colab's free runtime: ~100 GFLOP/s fp32 (the 2-thread
#: matmul rate measured on such machines, notebook 00), ~12 GB RAM, ~30 W for its share of a server.
#: Not this machine unless you pass its numbers (e.g. ``cpu.calibrate()`` or ``course benchmark``'s
#: matmul_gflops as ``cpu_gflops``).
CPU_GFLOPS, CPU_MEMORY_GB, CPU_WATTS = 100.0, 12.0, 30.0
#: The CPU option's name with the assumed rate (``CPU_GFLOPS``), and with a rate you pass.
CPU_NAME, CPU_NAME_GIVEN = "a 2-core CPU (assumed {gflops:g} GFLOP/s)", "your CPU (given: {gflops:.3g} GFLOP/s)"
#: Hardware you run yourself: the US commercial tariff (a business, a hospital, a lab) and, for the
#: data-centre GPUs the guide can buy (they need a server), an average server room's PUE, the default of
#: ``cost.owned_vs_cloud`` for data-centre cards too. The cloud's rows use the provider's PUE and its
#: price includes electricity.
ELECTRICITY_ROW, OWNED_PUE_ROW = cost.ELECTRICITY["commercial"], cost.SERVER_ROOM_PUE_ROW
_LORA_FRACTION = 0.01  # LoRA adapters: ~0.01-1 % of the weights (Hu et al. 2021); 1 % is the generous end

_WHERE = {"cpu": "a CPU you have", "cloud": "cloud, on demand", "owned": "bought, with its server share"}


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

    def row(self) -> dict:
        """A flat dict for a table (``pandas.DataFrame(rec.table())``): GB, 3 significant digits."""
        row = {k: _sig(v) if k in ("hours", "usd", "kwh", "co2_kg") else v for k, v in asdict(self).items()
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

    def headline(self) -> str:
        """One line: the choice and its time, cost and energy."""
        if self.hardware == "none":
            return "No configuration holds the model: " + self.relax
        what = (self.name if self.where == "cpu" else
                f"{self.devices} x {self.name} ({_WHERE[self.where]}, {_STRATEGY[self.strategy](self.zero_stage)})")
        est = f"{_hours(self.hours)}, {_money(self.usd)}, {_num(self.kwh, 'kWh')}, {_num(self.co2_kg, 'kg CO2')}"
        head = f"{what}: {est}; {self.memory_bytes / 1e9:.3g} GB per device"
        return head if self.feasible else f"Nothing meets every constraint. {self.relax} Then: {head}"

    def table(self, best_per_hardware: bool = True) -> list[dict]:
        """The options as rows; by default only the best device count of each hardware and place."""
        best: dict[tuple, Option] = {}
        for o in sorted(self.options, key=lambda o: _rank(o, "any"), reverse=True):  # the best of each key last
            best[(o.hardware, o.where) if best_per_hardware else (o.hardware, o.where, o.devices)] = o
        return [o.row() for o in self.options if o in best.values()]

    def __str__(self) -> str:
        return "\n".join([self.headline(), "Methods, lightest first:", *(f"  - {m}" for m in self.methods),
                          "Why:", *(f"  - {r}" for r in self.reasons)])


_STRATEGY = {"single": lambda s: "one device", "ddp": lambda s: "data parallel (DDP)",
             "fsdp": lambda s: f"sharded: ZeRO stage {s}" + (" = FSDP" if s == 3 else "")}


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
    utilization: float
    grid: str


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
        states = model_states_bytes(job.n_params, job.precision, job.optimizer, stage, devices)
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
    step_s = job.step_flops / (peak * job.utilization)
    grad = job.n_params * (4 if job.precision == "fp32" else 2) * (1.5 if stage == 3 else 1.0)  # ZeRO-3: 3 vs 2 passes
    return comm.data_parallel_speedup(step_s, grad, devices, _link_gbs(chip, devices) * 1e9) / devices


def _framework_notes(chip: catalog.Accelerator, framework: str) -> tuple[str, ...]:
    return tuple(note for cond, note in (
        (chip.kind == "tpu" and framework == "pytorch",
         "TPUs run PyTorch only through PyTorch/XLA (torch_xla); JAX and TensorFlow target them natively"),
        (chip.vendor.upper() == "AMD", "AMD GPUs need the ROCm builds of PyTorch, TensorFlow or JAX"),
    ) if cond)


def _chip_options(job: _Job, chip: catalog.Accelerator, framework: str, owned_card: str | None) -> list[Option]:
    dtype, dtype_note = _dtype(chip, job.precision)
    peak = chip.peak_flops(dtype)
    try:
        hourly = cost.cloud_hourly(chip.key)
    except ValueError:
        hourly = None
    top = DEVICE_COUNTS[-1]
    cap = min(chip.pod_chips, top) if chip.kind == "tpu" else 8 if chip.pod_chips == 1 else top
    notes = tuple(n for n in (dtype_note, *_framework_notes(chip, framework)) if n)
    out = []
    if owned_card is not None:  # the card plus its share of a server, in a server room (cost.host_share)
        host = cost.host_share(owned_card)
        owned_usd, owned_pue = cost.purchase_price(owned_card) + host["usd"], host["pue"]
    g_per_kwh = catalog.get_price(cost.GRIDS[job.grid]).value
    for where in ("cloud", "owned") if owned_card is not None else ("cloud",):
        for n in (d for d in DEVICE_COUNTS if d <= (cap if where == "cloud" else min(cap, _OWNED_MAX))):
            stage, k, mem, fits = _layout(job, n, chip.memory_gb * 1e9)
            eff = _efficiency(job, chip, n, peak, stage)
            fp = cost.training_footprint(job.flops, chip.key, chips=n, utilization=job.utilization, dtype=dtype,
                                         grid=job.grid, scaling_efficiency=eff,
                                         pue="pue-google" if where == "cloud" else owned_pue)
            hours, kwh, co2 = fp["hours"], fp.get("kwh"), fp.get("co2_kg")
            if where == "cloud":  # billed for at least a minute per device
                usd = None if hourly is None else n * max(hours, CLOUD_MIN_HOURS) * hourly
            else:  # the server's share draws power too
                if kwh is not None:
                    kwh += n * hours * host["watts"] * owned_pue / 1000
                    co2 = kwh * g_per_kwh / 1000
                usd = n * owned_usd + (kwh or 0.0) * _electricity_usd()
            strategy = "single" if n == 1 else "ddp" if stage == 0 else "fsdp"
            out.append(Option(chip.key, chip.name, where, n, strategy, stage, k, dtype, peak / 1e12, mem,
                              chip.memory_gb * 1e9, fits, eff, hours, usd, kwh, co2,
                              hourly if where == "cloud" else None, notes))
    return out


def _electricity_usd() -> float:
    """USD per kWh for hardware you run yourself (the price table's ``ELECTRICITY_ROW``)."""
    return catalog.get_price(ELECTRICITY_ROW).value


def _cpu_option(job: _Job, gflops: float, memory_gb: float, watts: float, given: bool) -> Option:
    stage, k, mem, fits = _layout(job, 1, memory_gb * 1e9)
    hours = job.flops / (gflops * 1e9 * job.utilization) / 3600
    kwh = hours * watts / 1000
    co2 = kwh * catalog.get_price(cost.GRIDS[job.grid]).value / 1000
    name = (CPU_NAME_GIVEN if given else CPU_NAME).format(gflops=gflops)
    return Option("cpu", name, "cpu", 1, "single", 0, k, "fp32", gflops / 1e3, mem, memory_gb * 1e9,
                  fits, 1.0, hours, kwh * _electricity_usd(), kwh, co2, None,
                  (f"CPU baseline at {gflops:g} GFLOP/s fp32 ({'given' if given else 'assumed'}) and {watts:g} W "
                   f"(assumed unless given; pass your own)",))


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


# ----------------------------------------------------------------------------- methods and reasons

def _gb(x: float) -> str:
    return f"{x / 1e9:.3g} GB"


def _bpp(job: _Job) -> int:
    return model_states_bytes(1, job.precision, job.optimizer)


def _methods(o: Option, job: _Job, single: list[Option]) -> list[str]:
    """Lightweight methods first, each with its numbers; ``single`` holds the one-device options."""
    out = []
    chip = None if o.hardware in ("cpu", "none") else catalog.get_accelerator(o.hardware)
    if chip is None:
        out.append("fp32 on the CPU: bf16 autocast pays only on CPUs with AMX or avx512_bf16 (notebook 04; "
                   "cpu.profile() measures it), and costs no model-state memory either way")
    else:
        half = o.dtype if o.dtype in ("bf16", "fp16") else next(d for d in ("bf16", "fp16") if d in chip.peak_tflops)
        p16, p32 = chip.peak_tflops[half], chip.peak_tflops.get("fp32")
        speed = f"{p16:g} TFLOP/s against {p32:g} in fp32 ({p16 / p32:.3g}x)" if p32 else f"{p16:g} TFLOP/s"
        chosen = "as chosen" if job.precision != "fp32" else f"instead of fp32: about {o.hours * p32 / p16:.3g} h" \
            if p32 and o.dtype == "fp32" else "XLA computes fp32 matmuls in bf16 passes here anyway"
        scaler = "; fp16 needs a GradScaler (notebook 04)" if half == "fp16" else ""
        out.append(f"{half} mixed precision ({chosen}): {chip.name} runs {half} at {speed}; activations take half "
                   f"the bytes; model states stay {_bpp(job)} B per parameter with {job.optimizer} "
                   f"(memory.model_states_bytes){scaler}")
    usable = (TOTAL_FRACTION if job.activation_bytes is not None else STATES_FRACTION) * o.device_bytes
    states = o.memory_bytes - (0 if job.activation_bytes is None else _micro(job, o.accumulation))
    free = (TOTAL_FRACTION if job.activation_bytes is not None else 1) * o.device_bytes - states
    if job.activation_bytes is None:
        out.append(f"gradient accumulation: the batch's activations must fit in the {_gb(max(free, 0))} left next to "
                   f"the {_gb(states)} of model states; if they do not, split the batch into micro-batches and "
                   "accumulate their gradients (same update, notebook 04)")
    elif o.accumulation > 1:
        out.append(f"gradient accumulation over {o.accumulation} micro-batches of {job.batch_size // o.accumulation} "
                   f"samples: the batch's activations ({job.batch_size} samples, {_gb(job.activation_bytes)}) do not "
                   f"fit in the {_gb(free)} left, a micro-batch's ({_gb(_micro(job, o.accumulation))}) does; same "
                   f"update (notebook 04)")
    else:
        out.append(f"gradient accumulation: not needed, the batch's activations ({_gb(job.activation_bytes)}) fit in "
                   f"the {_gb(free)} left next to the model states")
    if o.accumulation > 1 or (job.activation_bytes is None and states > 0.5 * usable):
        out.append(f"activation checkpointing: keep only each block's input and recompute the rest in the backward "
                   f"pass (notebook 02): activations shrink several-fold for one more forward pass, about 1/3 more "
                   f"compute ({o.hours * 4 / 3:.3g} h instead of {o.hours:.3g} h)")
    states1 = model_states_bytes(job.n_params, job.precision, job.optimizer)
    if o.zero_stage > 0 or states > 0.5 * usable:
        out.extend(_savers(job, states1))
    if o.devices > 1:
        one = next((x for x in single if x.hardware == o.hardware and x.where == o.where), None)
        if o.zero_stage > 0:
            out.append(f"sharding (ZeRO stage {o.zero_stage}{', i.e. FSDP fully_shard' if o.zero_stage == 3 else ''}) "
                       f"over {o.devices} devices: model states {_gb(states)} per device instead of {_gb(states1)} on "
                       f"one (memory.model_states_bytes), at {o.efficiency:.0%} scaling efficiency")
        else:
            out.append(f"data parallel (DDP) over {o.devices} devices, for the deadline: {o.hours:.3g} h instead of "
                       f"{one.hours:.3g} h on one, at {o.efficiency:.0%} scaling efficiency (ring all-reduce of the "
                       f"gradients after each step, notebook 03)" if one else
                       f"data parallel (DDP) over {o.devices} devices, at {o.efficiency:.0%} scaling efficiency")
    return out


def _savers(job: _Job, states1: int) -> list[str]:
    """8-bit optimizer, LoRA and 4-bit quantization, with the model-state bytes each would leave."""
    buffers = names.OPTIMIZER_STATE_BUFFERS[job.optimizer]
    n = job.n_params
    out = []
    if buffers:  # each fp32 state (4 B) kept in 1 B
        out.append(f"8-bit optimizer states (bitsandbytes' {'Adam' if buffers == 2 else 'SGD'}8bit, Dettmers et al. "
                   f"2022): model states {_gb(states1)} -> {_gb(states1 - 3 * buffers * n)}")
    lora = 2 * n + model_states_bytes(int(n * _LORA_FRACTION), job.precision, job.optimizer)
    qlora = n // 2 + model_states_bytes(int(n * _LORA_FRACTION), job.precision, job.optimizer)
    fit = _smallest_holding(lora)
    out.append(f"LoRA, when fine-tuning a pretrained model (Hu et al. 2021): frozen 16-bit weights plus "
               f"adapters of about {_LORA_FRACTION:.0%} of the parameters trained with {job.optimizer}: "
               f"{_gb(states1)} -> {_gb(lora)}"
               + (f", which fits one {fit}" if fit else ""))
    fit = _smallest_holding(qlora)
    out.append(f"4-bit quantized frozen weights under the adapters (QLoRA, Dettmers et al. 2023): {_gb(qlora)}"
               + (f", which fits one {fit}" if fit else ""))
    return out


def _smallest_holding(nbytes: float) -> str:
    """The catalog accelerator with the least memory that holds ``nbytes`` in STATES_FRACTION of it."""
    a = min((a for a in catalog.accelerators() if nbytes <= STATES_FRACTION * a.memory_gb * 1e9),
            key=lambda a: (a.memory_gb, a.year), default=None)
    return "" if a is None else f"{a.name} ({a.memory_gb:g} GB)"


def _reasons(o: Option, job: _Job, work: str, chosen_from: str, privacy: str, budget: float | None,
             deadline: float | None, feasible: list[Option]) -> list[str]:
    out = [work]
    states = model_states_bytes(job.n_params, job.precision, job.optimizer, o.zero_stage, o.devices)
    on = "on each device" if o.devices > 1 else "on the device"
    fit_rule = (f"{STATES_FRACTION:.0%} of it may hold them, {1 - STATES_FRACTION:.0%} kept for activations and the "
                f"framework (memory.largest_model_that_fits: at most "
                f"{largest_model_that_fits(o.device_bytes, job.precision, job.optimizer):.3g} parameters on one)"
                if job.activation_bytes is None else
                f"states plus activations ({_gb(job.activation_bytes)} per batch"
                + (f", {_gb(_micro(job, o.accumulation))} per micro-batch of {job.batch_size // o.accumulation}"
                   if o.accumulation > 1 else "")
                + f") may use {TOTAL_FRACTION:.0%} of it")
    out.append(f"Model states with {job.precision} and {job.optimizer}: {_bpp(job)} B per parameter, {_gb(states)} "
               f"{on}" + (f" (ZeRO stage {o.zero_stage} over {o.devices})" if o.zero_stage else "") +
               f" (memory.model_states_bytes); {o.name} has {_gb(o.device_bytes)}: {fit_rule}.")
    if o.hardware == "cpu":
        out.append(f"On {o.name} at {job.utilization:.0%} of {o.peak_tflops * 1e3:.3g} GFLOP/s (fp32; "
                   f"{o.kwh / o.hours * 1e3:g} W): {_hours(o.hours)}.")
    else:
        scale = f" at {o.efficiency:.0%} scaling efficiency (comm.data_parallel_speedup)" if o.devices > 1 else ""
        out.append(f"On {o.devices} x {o.name} at {job.utilization:.0%} of {o.peak_tflops:g} TFLOP/s "
                   f"({o.dtype}){scale}: {_hours(o.hours)}.")
    if o.where == "cloud":
        line = (f"Cloud on demand (the host VM's share included) at {o.usd_per_hour:g} USD per device-hour: "
                f"{_money(o.usd)}")
        try:
            spot = cost.cloud_hourly(o.hardware, spot=True) * o.devices * o.hours
            line += (f"; on Spot (preemptible) capacity about {_money(spot)}, if the job checkpoints and resumes "
                     f"(notebook 06.3)")
        except ValueError:
            pass
        out.append(line + ".")
    elif o.where == "owned":
        card = next(p for p in catalog.prices("purchase") if p.accelerator == o.hardware)
        host = cost.host_share(card.key)
        out.append(f"Bought: {o.devices} x ({card.value:,.0f} USD for the card + {host['usd']:,.0f} USD, an assumed "
                   f"share of the server it needs, cost.host_share; pass your own quote) plus {_num(o.kwh, 'kWh')} "
                   f"(card + {host['watts']:g} W of server, PUE {host['pue']:g} of a {host['where']}) at "
                   f"{_electricity_usd():g} USD/kWh = {_money(o.usd)}, all charged to this one job "
                   f"(cost.owned_vs_cloud spreads a purchase over a project's months).")
    else:
        out.append(f"On a CPU you already have only electricity counts: {_num(o.kwh, 'kWh')} at "
                   f"{_electricity_usd():g} USD/kWh = {_money(o.usd)}.")
    g = catalog.get_price(cost.GRIDS[job.grid]).value
    out.append(f"Energy {_num(o.kwh, 'kWh')} (power x hours x PUE"
               + ("; the chips only, their host is in the hourly price" if o.where == "cloud" else "")
               + f") and {_num(o.co2_kg, 'kg CO2')} at the "
               f"{job.grid} grid's {g:g} g CO2 per kWh.")
    out.append(chosen_from)
    if deadline is not None:
        out.append(f"Deadline {deadline:g} h: " + (f"met with {deadline - o.hours:.3g} h to spare."
                                                   if o.hours <= deadline else f"missed: {o.hours:.3g} h."))
    if budget is not None and o.usd is not None:
        out.append(f"Budget {budget:,.0f} USD: " + (f"{budget - o.usd:,.0f} USD left." if o.usd <= budget
                                                      else f"exceeded: {_money(o.usd)}."))
    if privacy == "sensitive":
        out.append("Sensitive data (e.g. finance): renting is allowed with encryption at rest and in transit, a region "
                   "you choose and tight access control; bought hardware is in the table too.")
    elif privacy == "regulated":
        out.append("Regulated data (e.g. healthcare): the data may not leave the premises, so cloud rental is left "
                   "out and only a CPU you have or hardware you buy counts.")
        cheap = [p for p in catalog.prices("purchase") if p.accelerator is None]
        if cheap:
            out.append("Other cards in the price table have no row in the accelerator catalog, so their time is not "
                       "estimated here: " + "; ".join(
                           f"{p.name} {p.memory_gb:g} GB, {p.value:,.0f} USD, {'ECC' if p.ecc else 'no ECC'}"
                           + (", needs ROCm" if (p.vendor or "").upper() == "AMD" else "") for p in cheap) + ".")
    out.extend(f"{n}." for n in o.notes if o.hardware != "cpu")
    if o.notes and "PyTorch/XLA" in " ".join(o.notes):
        cuda = [x for x in feasible if x.hardware == "cpu" or catalog.get_accelerator(x.hardware).kind != "tpu"]
        if cuda:
            c = min(cuda, key=lambda x: _rank(x, "any"))
            out.append(f"Without PyTorch/XLA the cheapest is {c.devices} x {c.name} ({_WHERE[c.where]}): "
                       f"{_money(c.usd)} in {_hours(c.hours)}.")
    return out


def recommend(n_params: float, n_samples: float, *, tokens_per_sample: float = 1.0, epochs: float = 1,
              flops_per_sample: float | None = None, framework: str = "pytorch", budget_usd: float | None = None,
              deadline_hours: float | None = None, privacy: str = "none", energy: str = "any",
              precision: str = "bf16-mixed", optimizer: str = "adam", activation_bytes: float | None = None,
              batch_size: int | None = None, utilization: float = 0.4, grid: str = "world",
              cpu_gflops: float | None = None,
              cpu_memory_gb: float = CPU_MEMORY_GB, cpu_watts: float = CPU_WATTS) -> Recommendation:
    """The hardware to train on, with its memory, time, cost and energy estimates and the reasons.

    Notebook 07.3 (choosing hardware: the decision guide) and exercise 07. A pure function of:

    * the job: ``n_params`` parameters; ``n_samples`` training examples of ``tokens_per_sample``
      tokens each (1, the default, makes ``n_samples`` a token count), ``epochs`` passes; training
      FLOPs 6 x parameters x tokens (``compute.training_flops``), or ``flops_per_sample`` (forward and
      backward of one example, e.g. 3 x the forward FLOPs of a CNN) x samples x epochs;
      ``activation_bytes``: activations of one batch of ``batch_size`` samples per device (e.g.
      ``memory.transformer_activation_bytes(batch=batch_size, ...)``; both or neither), or None to keep
      20 % of the memory for them. Gradient accumulation splits that batch into k micro-batches, k a
      divisor of ``batch_size``; when one sample does not fit, the option needs sharding or more devices;
    * the setting: ``framework`` (one of ``FRAMEWORKS``), ``budget_usd`` and ``deadline_hours`` (None:
      no limit), ``privacy`` (``PRIVACY``: "none"; "sensitive", e.g. finance; "regulated", e.g.
      healthcare: the data may not leave the premises), ``energy`` ("any", or "low": the feasible option
      with the fewest kWh), ``precision`` and ``optimizer`` (``names.PRECISIONS``, ``names.OPTIMIZERS``);
    * the estimate's assumptions: ``utilization`` (model FLOPs utilisation, 0.4), ``grid`` (a name of
      ``cost.GRIDS``), and the CPU option: by default an ASSUMED 2-core CPU (``CPU_GFLOPS`` = 100
      GFLOP/s fp32, ``CPU_MEMORY_GB``, ``CPU_WATTS``), named so in the output; pass ``cpu_gflops`` (e.g.
      ``cpu.calibrate().fp32_flops / 1e9``), ``cpu_memory_gb`` and ``cpu_watts`` for your machine.
    * owned hardware: the purchase price plus ``cost.host_share`` (an assumed share of a GPU server per
      data-centre card, in a server room's PUE); cloud prices include their host.

    Returns a ``Recommendation``; when nothing meets every constraint, ``feasible`` is False and
    ``relax`` says the smallest change that makes an option feasible (the recommendation is then that
    option). Raises ValueError (TypeError for the wrong kind of value) naming the argument and what it
    accepts.
    """
    n = validate.number("n_params", n_params, minimum=1)  # a count: 0.5 would round to no parameters
    samples = validate.positive("n_samples", n_samples)
    tps = validate.positive("tokens_per_sample", tokens_per_sample)
    epochs = validate.positive("epochs", epochs)
    fps = validate.optional(validate.positive, "flops_per_sample", flops_per_sample)
    framework = validate.choice("framework", framework, FRAMEWORKS, aliases={"torch": "pytorch", "tf": "tensorflow"})
    budget = validate.optional(validate.positive, "budget_usd", budget_usd)
    deadline = validate.optional(validate.positive, "deadline_hours", deadline_hours)
    privacy = validate.choice("privacy", privacy, PRIVACY,
                              aliases={"finance": "sensitive", "healthcare": "regulated", "public": "none"})
    energy = validate.choice("energy", energy, ENERGY)
    precision, optimizer = names.precision(precision), names.optimizer(optimizer)
    acts = validate.optional(validate.nonnegative, "activation_bytes", activation_bytes)
    batch = validate.optional(validate.positive_int, "batch_size", batch_size)
    if (acts is None) != (batch is None):
        raise ValueError(f"activation_bytes and batch_size go together (the activations of a batch of batch_size "
                         f"samples, which gradient accumulation may split); got activation_bytes={activation_bytes!r}, "
                         f"batch_size={batch_size!r}")
    utilization = validate.fraction("utilization", utilization, allow_one=True)
    grid = validate.choice("grid", grid, tuple(cost.GRIDS))
    cpu_given = cpu_gflops is not None
    cpu = [validate.positive(k, v) for k, v in
           (("cpu_gflops", CPU_GFLOPS if cpu_gflops is None else cpu_gflops), ("cpu_memory_gb", cpu_memory_gb),
            ("cpu_watts", cpu_watts))]

    tokens = samples * tps * epochs
    per_sample = fps if fps is not None else 6.0 * n * tps
    flops = per_sample * samples * epochs
    work = (f"Training does {flops:.3g} FLOPs: 6 x {n:.3g} parameters x {tokens:.3g} tokens"
            + (f" ({samples:.3g} samples x {tps:g} tokens x {epochs:g} epochs)." if tps != 1 or epochs != 1 else ".")
            if fps is None else
            f"Training does {flops:.3g} FLOPs: {fps:.3g} FLOPs per sample x {samples:.3g} samples x {epochs:g} epochs.")
    step = MICRO_BATCH * fps if fps is not None else 6.0 * n * max(MICRO_BATCH * tps, STEP_TOKENS)
    job = _Job(int(n), flops, step, precision, optimizer, None if acts is None else int(acts), batch, utilization,
               grid)

    owned = {p.accelerator: p.key for p in catalog.prices("purchase") if p.accelerator}
    options = [_cpu_option(job, *cpu, cpu_given)]
    for chip in catalog.accelerators():
        options.extend(_chip_options(job, chip, framework, owned.get(chip.key)))
    options = [replace(o, why_not=w, feasible=not w) for o in options
               for w in (_why_not(o, job, privacy, budget, deadline),)]
    feasible = [o for o in options if o.feasible]
    single = [o for o in options if o.devices == 1]
    relax = ""
    if feasible:
        best = min(feasible, key=lambda o: _rank(o, energy))
        if energy == "any":  # more devices only when they pay: within 2 % of the cheapest, the fewest
            best = min((o for o in feasible if (o.hardware, o.where) == (best.hardware, best.where)
                        and o.usd <= 1.02 * best.usd), key=lambda o: (o.devices, o.usd))
        other = min((o for o in feasible if (o.hardware, o.where) != (best.hardware, best.where)),
                    key=lambda o: _rank(o, "any"), default=None)  # energy "low": the cheapest; else the next
        other_text = "" if other is None else (f"{other.devices} x {other.name} ({_WHERE[other.where]}): "
                                               f"{_money(other.usd)}, {_hours(other.hours)}, {_num(other.kwh, 'kWh')}")
        chosen_from = (f"{'Lowest energy' if energy == 'low' else 'Cheapest'} of {len(feasible)} feasible options (of "
                       f"{len(options)} candidates)" + (f"; {'the cheapest' if energy == 'low' else 'next'}: "
                                                        f"{other_text}" if other else "") + "."
                       + (" Options without a published power figure (recent TPUs) come last."
                          if energy == "low" else ""))
    else:
        pool = [o for o in options if o.fits and o.usd is not None and (privacy != "regulated" or o.where != "cloud")]
        best, relax = _relax(pool, budget, deadline, energy)
        chosen_from = "No option meets every constraint. " + relax
        if best is None:
            return _nothing_fits(job, options, work, privacy)
    methods = _methods(best, job, single)
    reasons = _reasons(best, job, work, chosen_from, privacy, budget, deadline, feasible)
    c = min((o for o in options if privacy == "regulated" and o.where == "cloud" and o.fits and o.usd is not None
             and (deadline is None or o.hours <= deadline) and (budget is None or o.usd <= budget)),
            key=lambda o: _rank(o, energy), default=None)
    if c is not None and (not feasible or c.usd < best.usd):
        reasons.append(f"Only if the rules let the data leave (e.g. de-identified): {c.devices} x {c.name} in the "
                       f"cloud would take {c.hours:.3g} h for {_money(c.usd)}.")
    return Recommendation(best.hardware, best.name, best.where, best.devices, best.strategy, best.zero_stage,
                          best.accumulation, best.dtype, tuple(methods), best.memory_bytes, best.hours, best.usd,
                          best.kwh, best.co2_kg, tuple(reasons), tuple(options), bool(feasible), relax)


def _nothing_fits(job: _Job, options: list[Option], work: str, privacy: str) -> Recommendation:
    states1 = model_states_bytes(job.n_params, job.precision, job.optimizer)
    where = "hardware you own (one server of up to 8 cards)" if privacy == "regulated" else "any catalog configuration"
    relax = (f"the model states ({_gb(states1)} on one device) do not fit on {where}: train fewer parameters "
             f"(LoRA, 8-bit optimizer states, 4-bit weights, see methods)"
             + (", or let the data leave the premises" if privacy == "regulated" and
                any(o.fits for o in options if o.where == "cloud") else "") + ".")
    return Recommendation("none", "none", "none", 0, "single", 0, 1, "-", tuple(_savers(job, states1)), states1,
                          None, None, None, None, (work, relax[0].upper() + relax[1:]), tuple(options), False, relax)
