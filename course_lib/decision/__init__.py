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
  of the memory calculator (``widgets.memory_calculator_text``). When they do not fit, gradient
  accumulation splits the batch of ``batch_size`` samples into k micro-batches (k divides the batch, so
  at most one sample per micro-batch); when one sample's activations do not fit either, only sharding or
  more devices can help here (activation checkpointing, named in ``methods``, is not modelled).
* **time**: training FLOPs (``compute.training_flops``: 6 x parameters x tokens, or FLOPs per sample
  x samples x epochs) over devices x dense peak at the compute dtype x utilisation x scaling
  efficiency, the last from the ring all-reduce model of module 03 (``comm.data_parallel_speedup``
  with a fixed micro-batch per device and no overlap, so a pessimistic bound).
* **cost, energy, CO2**: ``cost.training_footprint`` (on-demand price per device-hour, billed for at
  least a minute; power x PUE; grid intensity) plus the host, by ``cost``'s one rule: every chip in a server
  (rented, or a bought data-centre card) draws ``HOST_POWER_RATIO`` x its TDP of host power; a bought
  data-centre card also pays its share of a server (``cost.host_share``: ``cost.SERVER_USD_PER_GPU``, an
  assumption) in a server room (``OWNED_PUE_ROW``); bought consumer and pro cards pay one workstation per
  ``DESK_MAX`` cards (``desk_host_usd``, ``DESK_HOST_W``) at a desk; the CPU you have costs only its
  electricity. Spot prices are named in the reasons, for jobs that checkpoint.
* **the choice**: the cheapest option that fits memory, the deadline and the budget and that the
  privacy rule allows ("regulated": data may not leave the premises, so only hardware you own); with
  ``energy="low"`` the one with the lowest kWh instead. Lightweight methods come first in
  ``methods``; more devices only when the deadline needs them. Nothing feasible: the
  recommendation says the smallest change (deadline, budget) that makes one feasible.

The parts: ``assumptions`` (every constant, each printed with a result), ``candidates`` (the options
priced), ``choice`` (picking one), ``options`` (``Option`` and ``Recommendation``, built by keyword) and
``explain`` (the methods to try first and the reasons, in words); ``recommend`` itself is here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import arguments, catalog, cost, names
from ..cost import HOST_POWER_RATIO
from ..memory.formulas import model_states_bytes
from .assumptions import *  # noqa: F403  the constants, re-exported
from .assumptions import (
    CPU_GFLOPS,
    CPU_MEMORY_GB,
    CPU_WATTS,
    DESK_HOST_USD,
    ENERGY,
    FLOPS_PER_PARAM_TOKEN,
    FRAMEWORKS,
    METHODS,
    MICRO_BATCH,
    PORTING_USD,
    PRIVACY,
    PURCHASE_SHARE,
    QLORA_SLOWDOWN,
    SENSITIVE_MARKUP,
    STEP_TOKENS,
    UTILIZATION,
    _LORA_FRACTION,
)
from .assumptions import __all__ as _constants
from .candidates import _chip_options, _cpu_option, _Job
from .choice import _choose, _why_not
from .explain import _assumptions_text, _finetune_line, _methods, _reasons, _savers
from .options import Option, Recommendation, _gb, _money, _rank

__all__ = [*(c for c in _constants if not c.startswith("_")), "Option", "Recommendation", "recommend"]


def recommend(
    n_params: float,
    n_samples: float,
    *,
    tokens_per_sample: float = 1.0,
    epochs: float = 1,
    flops_per_sample: float | None = None,
    framework: str = "pytorch",
    budget_usd: float | None = None,
    deadline_hours: float | None = None,
    privacy: str = "none",
    energy: str = "any",
    precision: str = "bf16-mixed",
    optimizer: str = "adam",
    activation_bytes: float | None = None,
    batch_size: int | None = None,
    utilization: float | dict = UTILIZATION,
    grid: str = "world",
    cpu_gflops: float | None = None,
    cpu_memory_gb: float = CPU_MEMORY_GB,
    cpu_watts: float = CPU_WATTS,
    finetune: bool = False,
    xla_ready: bool = False,
    porting_usd: float = PORTING_USD,
    purchase_share: float = PURCHASE_SHARE,
    spot: bool = False,
    host_power_ratio: float = HOST_POWER_RATIO,
    sensitive_markup: float = SENSITIVE_MARKUP,
    qlora_slowdown: float = QLORA_SLOWDOWN,
    desk_host_usd: float = DESK_HOST_USD,
    flips: bool = True,
) -> Recommendation:
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
    * owned hardware: the purchase price plus its host (``cost.host_share``: a share of a GPU server for a
      data-centre card, a workstation per ``DESK_MAX`` consumer or pro cards); cloud prices include their host.

    * what the guide assumes, each printed in ``assumptions`` with its keyword, and ``flips`` (with
      ``flips=True``) says for each changed alone whether the choice changes: ``utilization`` (0.4 for
      every chip and the CPU, or a dict by catalog key, kind "gpu"/"tpu", "cpu" and "default"),
      ``finetune`` (True: the job starts from published weights; full fine-tuning, LoRA and QLoRA are
      priced side by side, ``METHODS``), ``xla_ready`` and ``porting_usd`` (a PyTorch code base pays
      ``PORTING_USD`` for TPUs unless it already runs on XLA), ``purchase_share`` (the share of a purchase
      this job pays, 1.0), ``spot`` (rent Spot capacity, for jobs that checkpoint), ``host_power_ratio``
      (host watts per watt of chip in a server, ``cost.HOST_POWER_RATIO``; 0: the chips alone),
      ``sensitive_markup`` (extra cost of rented hosts for "sensitive" data, 0: the on-demand price),
      ``qlora_slowdown``, ``desk_host_usd`` (the workstation bought consumer or pro cards go into).

    Returns a ``Recommendation``; when nothing meets every constraint, ``feasible`` is False and
    ``relax`` says the smallest change that makes an option feasible (the recommendation is then that
    option). Raises ValueError (TypeError for the wrong kind of value) naming the argument and what it
    accepts.
    """
    args = {k: v for k, v in locals().items() if k != "flips"}
    req = _checked(args, flips)
    work, flops, step = _work(req)
    jobs, options = _priced(req, flops, step)
    job = jobs["full"]
    options = [
        replace(o, why_not=w, feasible=not w)
        for o in options
        for w in (_why_not(o, job, req.privacy, req.budget, req.deadline),)
    ]
    best, relax, chosen_from = _choose(options, req.privacy, req.budget, req.deadline, req.energy)
    if best is None:
        return _nothing_fits(job, options, work, req.privacy)
    job = jobs[best.method]
    feasible = [o for o in options if o.feasible]
    single = [o for o in options if o.devices == 1 and o.method == best.method]
    rec = Recommendation(
        hardware=best.hardware,
        name=best.name,
        where=best.where,
        devices=best.devices,
        strategy=best.strategy,
        zero_stage=best.zero_stage,
        accumulation=best.accumulation,
        dtype=best.dtype,
        methods=tuple(_methods(best, job, single, req.finetune)),
        memory_bytes=best.memory_bytes,
        hours=best.hours,
        usd=best.usd,
        kwh=best.kwh,
        co2_kg=best.co2_kg,
        reasons=tuple(_why(best, job, options, req, work, chosen_from)),
        options=tuple(options),
        feasible=bool(feasible),
        relax=relax,
        method=best.method,
        assumptions=tuple(_assumptions_text(job, args, req.framework, req.privacy, req.finetune)),
    )
    return replace(rec, flips=tuple(_flips(rec, args, req.framework, req.privacy, req.energy))) if flips else rec


@dataclass(frozen=True, kw_only=True)
class _Request:
    """``recommend``'s arguments, checked: the job, its setting, and the assumptions behind the estimates."""

    n: float
    samples: float
    tps: float
    epochs: float
    fps: float | None
    framework: str
    budget: float | None
    deadline: float | None
    privacy: str
    energy: str
    precision: str
    optimizer: str
    acts: float | None
    batch: int | None
    util: dict
    finetune: bool
    xla_ready: bool
    spot: bool
    porting: float
    share: float
    host_ratio: float
    markup: float
    slow: float
    desk_usd: float
    grid: str
    cpu: tuple[float, float, float]  # GFLOP/s, memory GB, watts
    cpu_given: bool


def _checked(a: dict, flips: bool) -> _Request:
    """The arguments of ``recommend`` (``a``, its keywords) checked, in the order ``recommend`` lists them."""
    n = arguments.number("n_params", a["n_params"], minimum=1)  # a count: 0.5 would round to no parameters
    samples = arguments.positive("n_samples", a["n_samples"])
    tps = arguments.positive("tokens_per_sample", a["tokens_per_sample"])
    epochs = arguments.positive("epochs", a["epochs"])
    fps = arguments.optional(arguments.positive, "flops_per_sample", a["flops_per_sample"])
    framework = arguments.choice(
        "framework", a["framework"], FRAMEWORKS, aliases={"torch": "pytorch", "tf": "tensorflow"}
    )
    budget = arguments.optional(arguments.positive, "budget_usd", a["budget_usd"])
    deadline = arguments.optional(arguments.positive, "deadline_hours", a["deadline_hours"])
    privacy = arguments.choice(
        "privacy", a["privacy"], PRIVACY, aliases={"finance": "sensitive", "healthcare": "regulated", "public": "none"}
    )
    energy = arguments.choice("energy", a["energy"], ENERGY)
    precision, optimizer = names.precision(a["precision"]), names.optimizer(a["optimizer"])
    acts = arguments.optional(arguments.nonnegative, "activation_bytes", a["activation_bytes"])
    batch = arguments.optional(arguments.positive_int, "batch_size", a["batch_size"])
    if (acts is None) != (batch is None):
        raise ValueError(
            f"activation_bytes and batch_size go together (the activations of a batch of batch_size "
            f"samples, which gradient accumulation may split); got activation_bytes="
            f"{a['activation_bytes']!r}, batch_size={a['batch_size']!r}"
        )
    util = _checked_utilization(a["utilization"])
    for k, v in (("finetune", a["finetune"]), ("xla_ready", a["xla_ready"]), ("spot", a["spot"]), ("flips", flips)):
        if not isinstance(v, bool):
            raise TypeError(f"{k} must be True or False, got {v!r}")
    porting = arguments.nonnegative("porting_usd", a["porting_usd"])
    share = arguments.fraction("purchase_share", a["purchase_share"], allow_one=True)
    host_ratio = arguments.nonnegative("host_power_ratio", a["host_power_ratio"])
    markup = arguments.nonnegative("sensitive_markup", a["sensitive_markup"])
    slow = arguments.number("qlora_slowdown", a["qlora_slowdown"], minimum=1)
    desk_usd = arguments.nonnegative("desk_host_usd", a["desk_host_usd"])
    grid = arguments.choice("grid", a["grid"], tuple(cost.GRIDS))
    cpu_gflops = a["cpu_gflops"]
    cpu = tuple(
        arguments.positive(k, v)
        for k, v in (
            ("cpu_gflops", CPU_GFLOPS if cpu_gflops is None else cpu_gflops),
            ("cpu_memory_gb", a["cpu_memory_gb"]),
            ("cpu_watts", a["cpu_watts"]),
        )
    )
    return _Request(
        n=n,
        samples=samples,
        tps=tps,
        epochs=epochs,
        fps=fps,
        framework=framework,
        budget=budget,
        deadline=deadline,
        privacy=privacy,
        energy=energy,
        precision=precision,
        optimizer=optimizer,
        acts=acts,
        batch=batch,
        util=util,
        finetune=a["finetune"],
        xla_ready=a["xla_ready"],
        spot=a["spot"],
        porting=porting,
        share=share,
        host_ratio=host_ratio,
        markup=markup,
        slow=slow,
        desk_usd=desk_usd,
        grid=grid,
        cpu=cpu,
        cpu_given=cpu_gflops is not None,
    )


def _checked_utilization(utilization: float | dict) -> dict:
    """``utilization`` as a dict by catalog key or kind with a "default" (one number: the default for all)."""
    if isinstance(utilization, dict):
        kinds = ("cpu", "gpu", "tpu", "default", *catalog.accelerator_names())
        for k, v in utilization.items():
            arguments.choice("utilization key", k, kinds)
            arguments.fraction(f"utilization[{k!r}]", v, allow_one=True)
        return {"default": UTILIZATION, **utilization}
    return {"default": arguments.fraction("utilization", utilization, allow_one=True)}


def _work(req: _Request) -> tuple[str, float, float]:
    """(the sentence on the job's work, its training FLOPs, one device's FLOPs per step in the scaling model)."""
    n, samples, tps, epochs, fps = req.n, req.samples, req.tps, req.epochs, req.fps
    tokens = samples * tps * epochs
    per_sample = fps if fps is not None else 6.0 * n * tps
    flops = per_sample * samples * epochs
    work = (
        f"Training does {flops:.3g} FLOPs: 6 x {n:.3g} parameters x {tokens:.3g} tokens"
        + (f" ({samples:.3g} samples x {tps:g} tokens x {epochs:g} epochs)." if tps != 1 or epochs != 1 else ".")
        if fps is None
        else f"Training does {flops:.3g} FLOPs: {fps:.3g} FLOPs per sample x {samples:.3g} samples x {epochs:g} epochs."
    )
    step = MICRO_BATCH * fps if fps is not None else 6.0 * n * max(MICRO_BATCH * tps, STEP_TOKENS)
    return work, flops, step


def _priced(req: _Request, flops: float, step: float) -> tuple[dict[str, _Job], list[Option]]:
    """The job for each fine-tuning method priced (only "full" unless ``finetune``), and every candidate of each:
    the CPU and each catalog accelerator, rented or bought, on each device count."""
    base = _Job(
        n_params=int(req.n),
        flops=flops,
        step_flops=step,
        precision=req.precision,
        optimizer=req.optimizer,
        activation_bytes=None if req.acts is None else int(req.acts),
        batch_size=req.batch,
        utilization=req.util,
        grid=req.grid,
        xla_ready=req.xla_ready,
        porting_usd=req.porting,
        purchase_share=req.share,
        spot=req.spot,
        host_power_ratio=req.host_ratio,
        markup=req.markup if req.privacy == "sensitive" else 0.0,
        desk_host_usd=req.desk_usd,
    )
    owned = {p.accelerator: p.key for p in catalog.prices("purchase") if p.accelerator}
    options, jobs = [], {}
    for m in METHODS if req.finetune else ("full",):  # frozen weights: 4 FLOPs per parameter and token, not 6
        f = FLOPS_PER_PARAM_TOKEN[m] / 6.0 * (req.slow if m == "qlora" else 1.0)
        jobs[m] = job = replace(
            base,
            flops=flops * f,
            step_flops=step * f,
            method=m,
            trainable=int(req.n) if m == "full" else max(1, int(req.n * _LORA_FRACTION)),
        )
        options.append(_cpu_option(job, *req.cpu, req.cpu_given))
        for chip in catalog.accelerators():
            options.extend(_chip_options(job, chip, req.framework, owned.get(chip.key)))
    return jobs, options


def _why(best: Option, job: _Job, options: list[Option], req: _Request, work: str, chosen_from: str) -> list[str]:
    """The reasons for ``best`` (``job`` priced with its method): ``_reasons``, with the fine-tuning methods side by
    side and, for regulated data, what the cloud would cost were the data allowed to leave."""
    feasible = [o for o in options if o.feasible]
    if best.method != "full":
        work += (
            f" With frozen weights ({best.method}) the backward pass skips their gradients: "
            f"{FLOPS_PER_PARAM_TOKEN[best.method]:g} instead of 6 FLOPs per parameter and token"
            + (f", x {req.slow:g} for dequantising 4-bit weights" if best.method == "qlora" else "")
            + f" = {job.flops:.3g} FLOPs."
        )
    reasons = _reasons(best, job, work, chosen_from, req.privacy, req.budget, req.deadline, feasible)
    if req.finetune:
        reasons.insert(1, _finetune_line(options))
    c = min(
        (
            o
            for o in options
            if req.privacy == "regulated"
            and o.where == "cloud"
            and o.fits
            and o.usd is not None
            and (req.deadline is None or o.hours <= req.deadline)
            and (req.budget is None or o.usd <= req.budget)
        ),
        key=lambda o: _rank(o, req.energy),
        default=None,
    )
    if c is not None and (not feasible or c.usd < best.usd):
        reasons.append(
            f"Only if the rules let the data leave (e.g. de-identified): {c.devices} x {c.name} in the "
            f"cloud would take {c.hours:.3g} h for {_money(c.usd)}."
        )
    return reasons


def _same(a: Recommendation, b: Recommendation) -> bool:
    return (a.hardware, a.where, a.devices, a.method, a.feasible) == (
        b.hardware,
        b.where,
        b.devices,
        b.method,
        b.feasible,
    )


def _shown(value: object) -> str:
    """An assumption's value as printed: floats to 4 significant digits (a widget's 0.4 may arrive as
    0.39999999999999997), a per-chip dict without its default."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_shown(v)}" for k, v in value.items() if k != "default") + "}"
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def _flips(rec: Recommendation, args: dict, framework: str, privacy: str, energy: str) -> list[str]:
    """Each assumption changed alone, and what the choice becomes (a fresh ``recommend`` without flips)."""
    util = args["utilization"] if isinstance(args["utilization"], dict) else {"default": args["utilization"]}
    u = util.get(rec.hardware, util.get("default", UTILIZATION))
    trials = [
        (
            "purchase_share",
            0.7 if args["purchase_share"] == 1.0 else 1.0,
            "a purchase resold for 30 % (cost.owned_vs_cloud's default)"
            if args["purchase_share"] == 1.0
            else "the job pays the whole purchase",
        ),
        ("spot", not args["spot"], "Spot capacity (jobs that checkpoint)" if not args["spot"] else "on demand"),
    ]
    if framework == "pytorch":
        trials.append(
            (
                "xla_ready",
                not args["xla_ready"],
                "the code already runs on PyTorch/XLA"
                if not args["xla_ready"]
                else "CUDA code that must be ported to XLA",
            )
        )
    if rec.hardware != "none":
        trials.append(("utilization", {**util, rec.hardware: u / 2}, f"{rec.name} at half the utilisation"))
    if energy == "low":
        trials.append(
            (
                "host_power_ratio",
                0.0 if args["host_power_ratio"] else HOST_POWER_RATIO,
                "the chips alone, no host power" if args["host_power_ratio"] else "host power counted",
            )
        )
    if privacy == "sensitive":
        trials.append(
            (
                "sensitive_markup",
                0.0 if args["sensitive_markup"] else 0.5,
                "the on-demand price" if args["sensitive_markup"] else "dedicated hosts, an example: +50 %",
            )
        )
    out = []
    for key, value, what in trials:
        other = recommend(**{**args, key: value}, flips=False)
        out.append(
            f"{key}={_shown(value)} ({what}): "
            + ("the same choice" if _same(rec, other) else "changes to " + other.headline())
        )
    return out


def _nothing_fits(job: _Job, options: list[Option], work: str, privacy: str) -> Recommendation:
    states1 = model_states_bytes(job.n_params, job.precision, job.optimizer)
    where = "hardware you own (one server of up to 8 cards)" if privacy == "regulated" else "any catalog configuration"
    relax = (
        f"the model states ({_gb(states1)} on one device) do not fit on {where}: train fewer parameters "
        f"(LoRA, 8-bit optimizer states, 4-bit weights, see methods)"
        + (
            ", or let the data leave the premises"
            if privacy == "regulated" and any(o.fits for o in options if o.where == "cloud")
            else ""
        )
        + "."
    )
    return Recommendation(
        hardware="none",
        name="none",
        where="none",
        devices=0,
        strategy="single",
        zero_stage=0,
        accumulation=1,
        dtype="-",
        methods=tuple(_savers(job, states1)),
        memory_bytes=states1,
        hours=None,
        usd=None,
        kwh=None,
        co2_kg=None,
        reasons=(work, relax[0].upper() + relax[1:]),
        options=tuple(options),
        feasible=False,
        relax=relax,
    )
