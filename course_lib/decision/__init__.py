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
  of the memory calculator (``memory.large_model_memory``). When they do not fit, gradient
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
"""
from __future__ import annotations

from dataclasses import replace

from .. import arguments, catalog, cost, names
from ..memory.formulas import model_states_bytes
from .assumptions import *  # noqa: F403  the constants, re-exported
from .assumptions import (CPU_GFLOPS, CPU_MEMORY_GB, CPU_WATTS, DESK_HOST_USD, ENERGY, FLOPS_PER_PARAM_TOKEN, FRAMEWORKS,
                          HOST_POWER_RATIO, METHODS, MICRO_BATCH, PORTING_USD, PRIVACY, PURCHASE_SHARE, QLORA_SLOWDOWN,
                          SENSITIVE_MARKUP, STEP_TOKENS, UTILIZATION, _LORA_FRACTION)
from .assumptions import __all__ as _constants
from .explain import _methods, _reasons, _savers, assumptions_text
from .options import (_WHERE, _gb, Option, Recommendation, _chip_options, _cpu_option, _Job, _money, _hours,
                      _num, _rank, _relax, _why_not)

__all__ = [*(c for c in _constants if not c.startswith("_")), "Option", "Recommendation", "recommend"]



def recommend(n_params: float, n_samples: float, *, tokens_per_sample: float = 1.0, epochs: float = 1,
              flops_per_sample: float | None = None, framework: str = "pytorch", budget_usd: float | None = None,
              deadline_hours: float | None = None, privacy: str = "none", energy: str = "any",
              precision: str = "bf16-mixed", optimizer: str = "adam", activation_bytes: float | None = None,
              batch_size: int | None = None, utilization: float | dict = UTILIZATION, grid: str = "world",
              cpu_gflops: float | None = None, cpu_memory_gb: float = CPU_MEMORY_GB, cpu_watts: float = CPU_WATTS,
              finetune: bool = False, xla_ready: bool = False, porting_usd: float = PORTING_USD,
              purchase_share: float = PURCHASE_SHARE, spot: bool = False, host_power_ratio: float = HOST_POWER_RATIO,
              sensitive_markup: float = SENSITIVE_MARKUP, qlora_slowdown: float = QLORA_SLOWDOWN,
              desk_host_usd: float = DESK_HOST_USD, flips: bool = True) -> Recommendation:
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
    n = arguments.number("n_params", n_params, minimum=1)  # a count: 0.5 would round to no parameters
    samples = arguments.positive("n_samples", n_samples)
    tps = arguments.positive("tokens_per_sample", tokens_per_sample)
    epochs = arguments.positive("epochs", epochs)
    fps = arguments.optional(arguments.positive, "flops_per_sample", flops_per_sample)
    framework = arguments.choice("framework", framework, FRAMEWORKS, aliases={"torch": "pytorch", "tf": "tensorflow"})
    budget = arguments.optional(arguments.positive, "budget_usd", budget_usd)
    deadline = arguments.optional(arguments.positive, "deadline_hours", deadline_hours)
    privacy = arguments.choice("privacy", privacy, PRIVACY,
                              aliases={"finance": "sensitive", "healthcare": "regulated", "public": "none"})
    energy = arguments.choice("energy", energy, ENERGY)
    precision, optimizer = names.precision(precision), names.optimizer(optimizer)
    acts = arguments.optional(arguments.nonnegative, "activation_bytes", activation_bytes)
    batch = arguments.optional(arguments.positive_int, "batch_size", batch_size)
    if (acts is None) != (batch is None):
        raise ValueError(f"activation_bytes and batch_size go together (the activations of a batch of batch_size "
                         f"samples, which gradient accumulation may split); got activation_bytes={activation_bytes!r}, "
                         f"batch_size={batch_size!r}")
    if isinstance(utilization, dict):
        kinds = ("cpu", "gpu", "tpu", "default", *catalog.accelerator_names())
        for k, v in utilization.items():
            arguments.choice("utilization key", k, kinds)
            arguments.fraction(f"utilization[{k!r}]", v, allow_one=True)
        util = {"default": UTILIZATION, **utilization}
    else:
        util = {"default": arguments.fraction("utilization", utilization, allow_one=True)}
    for k, v in (("finetune", finetune), ("xla_ready", xla_ready), ("spot", spot), ("flips", flips)):
        if not isinstance(v, bool):
            raise TypeError(f"{k} must be True or False, got {v!r}")
    porting = arguments.nonnegative("porting_usd", porting_usd)
    share = arguments.fraction("purchase_share", purchase_share, allow_one=True)
    host_ratio = arguments.nonnegative("host_power_ratio", host_power_ratio)
    markup = arguments.nonnegative("sensitive_markup", sensitive_markup)
    slow = arguments.number("qlora_slowdown", qlora_slowdown, minimum=1)
    desk_usd = arguments.nonnegative("desk_host_usd", desk_host_usd)
    grid = arguments.choice("grid", grid, tuple(cost.GRIDS))
    cpu_given = cpu_gflops is not None
    cpu = [arguments.positive(k, v) for k, v in
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
    base = _Job(int(n), flops, step, precision, optimizer, None if acts is None else int(acts), batch, util, grid,
                xla_ready=xla_ready, porting_usd=porting, purchase_share=share, spot=spot, host_power_ratio=host_ratio,
                markup=markup if privacy == "sensitive" else 0.0, desk_host_usd=desk_usd)
    owned = {p.accelerator: p.key for p in catalog.prices("purchase") if p.accelerator}
    options, jobs = [], {}
    for m in METHODS if finetune else ("full",):  # frozen weights: 4 FLOPs per parameter and token, not 6
        f = FLOPS_PER_PARAM_TOKEN[m] / 6.0 * (slow if m == "qlora" else 1.0)
        jobs[m] = job = replace(base, flops=flops * f, step_flops=step * f, method=m,
                                trainable=int(n) if m == "full" else max(1, int(n * _LORA_FRACTION)))
        options.append(_cpu_option(job, *cpu, cpu_given))
        for chip in catalog.accelerators():
            options.extend(_chip_options(job, chip, framework, owned.get(chip.key)))
    job = jobs["full"]
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
    job = jobs[best.method]
    single = [o for o in single if o.method == best.method]
    methods = _methods(best, job, single, finetune)
    if best.method != "full":
        work += (f" With frozen weights ({best.method}) the backward pass skips their gradients: "
                 f"{FLOPS_PER_PARAM_TOKEN[best.method]:g} instead of 6 FLOPs per parameter and token"
                 + (f", x {slow:g} for dequantising 4-bit weights" if best.method == "qlora" else "")
                 + f" = {job.flops:.3g} FLOPs.")
    reasons = _reasons(best, job, work, chosen_from, privacy, budget, deadline, feasible)
    if finetune:
        reasons.insert(1, _finetune_line(options, best))
    c = min((o for o in options if privacy == "regulated" and o.where == "cloud" and o.fits and o.usd is not None
             and (deadline is None or o.hours <= deadline) and (budget is None or o.usd <= budget)),
            key=lambda o: _rank(o, energy), default=None)
    if c is not None and (not feasible or c.usd < best.usd):
        reasons.append(f"Only if the rules let the data leave (e.g. de-identified): {c.devices} x {c.name} in the "
                       f"cloud would take {c.hours:.3g} h for {_money(c.usd)}.")
    rec = Recommendation(best.hardware, best.name, best.where, best.devices, best.strategy, best.zero_stage,
                         best.accumulation, best.dtype, tuple(methods), best.memory_bytes, best.hours, best.usd,
                         best.kwh, best.co2_kg, tuple(reasons), tuple(options), bool(feasible), relax, best.method,
                         tuple(assumptions_text(jobs[best.method], args, framework, privacy, finetune)))
    return replace(rec, flips=tuple(_flips(rec, args, framework, privacy, energy))) if flips else rec


def _finetune_line(options: list[Option], best: Option) -> str:
    """The cheapest feasible (else fitting) option of each fine-tuning method, side by side."""
    parts = []
    for m in METHODS:
        pool = [o for o in options if o.method == m and (o.feasible or not any(x.feasible for x in options
                                                                               if x.method == m)) and o.fits]
        o = min(pool, key=lambda o: _rank(o, "any"), default=None)
        parts.append(f"{m}: " + ("no option holds it" if o is None else
                                 f"{o.devices} x {o.name} ({_WHERE[o.where]}), {_gb(o.memory_bytes)} per device, "
                                 f"{_hours(o.hours)}, {_money(o.usd)}" + ("" if o.feasible else " (not feasible)")))
    return ("Fine-tune priced three ways (LoRA trains ~1 % of the weights as adapters, Hu et al. 2021, ICLR 2022; "
            "QLoRA keeps the base in 4 bits, Dettmers et al. 2023, NeurIPS; both usually match full fine-tuning on "
            "a task, not always): " + "; ".join(parts) + ".")


def _same(a: Recommendation, b: Recommendation) -> bool:
    return (a.hardware, a.where, a.devices, a.method, a.feasible) == (b.hardware, b.where, b.devices, b.method,
                                                                      b.feasible)


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
    trials = [("purchase_share", 0.7 if args["purchase_share"] == 1.0 else 1.0,
               "a purchase resold for 30 % (cost.owned_vs_cloud's default)" if args["purchase_share"] == 1.0
               else "the job pays the whole purchase"),
              ("spot", not args["spot"], "Spot capacity (jobs that checkpoint)" if not args["spot"] else "on demand")]
    if framework == "pytorch":
        trials.append(("xla_ready", not args["xla_ready"], "the code already runs on PyTorch/XLA"
                       if not args["xla_ready"] else "CUDA code that must be ported to XLA"))
    if rec.hardware != "none":
        trials.append(("utilization", {**util, rec.hardware: u / 2}, f"{rec.name} at half the utilisation"))
    if energy == "low":
        trials.append(("host_power_ratio", 0.0 if args["host_power_ratio"] else HOST_POWER_RATIO,
                       "the chips alone, no host power" if args["host_power_ratio"] else "host power counted"))
    if privacy == "sensitive":
        trials.append(("sensitive_markup", 0.0 if args["sensitive_markup"] else 0.5,
                       "the on-demand price" if args["sensitive_markup"] else "dedicated hosts, an example: +50 %"))
    out = []
    for key, value, what in trials:
        other = recommend(**{**args, key: value}, flips=False)
        out.append(f"{key}={_shown(value)} ({what}): " + ("the same choice" if _same(rec, other) else
                                                    "changes to " + other.headline()))
    return out


def _nothing_fits(job: _Job, options: list[Option], work: str, privacy: str) -> Recommendation:
    states1 = model_states_bytes(job.n_params, job.precision, job.optimizer)
    where = "hardware you own (one server of up to 8 cards)" if privacy == "regulated" else "any catalog configuration"
    relax = (f"the model states ({_gb(states1)} on one device) do not fit on {where}: train fewer parameters "
             f"(LoRA, 8-bit optimizer states, 4-bit weights, see methods)"
             + (", or let the data leave the premises" if privacy == "regulated" and
                any(o.fits for o in options if o.where == "cloud") else "") + ".")
    return Recommendation("none", "none", "none", 0, "single", 0, 1, "-", tuple(_savers(job, states1)), states1,
                          None, None, None, None, (work, relax[0].upper() + relax[1:]), tuple(options), False, relax)

