"""The decision guide's words (notebook 07.3): the lightweight methods to try first and the reasons for a choice."""

from __future__ import annotations

from .. import catalog, cost, names
from ..memory.formulas import largest_model_that_fits, model_states_bytes
from .assumptions import (
    CPU_GFLOPS,
    DESK_HOST_W,
    DESK_MAX,
    FROZEN_BYTES,
    METHODS,
    STATES_FRACTION,
    TOTAL_FRACTION,
    _LORA_FRACTION,
)
from .candidates import _electricity_usd, _Job, _micro, _states
from .options import _WHERE, Option, _gb, _hours, _money, _num, _rank

# ----------------------------------------------------------------------------- methods and reasons


def _bpp(job: _Job) -> int:
    return model_states_bytes(1, job.precision, job.optimizer)


def _methods(o: Option, job: _Job, single: list[Option], finetune: bool = False) -> list[str]:
    """Lightweight methods first, each with its numbers; ``single`` holds the one-device options."""
    out = []
    chip = None if o.hardware in ("cpu", "none") else catalog.get_accelerator(o.hardware)
    if chip is None:
        out.append(
            "fp32 on the CPU: bf16 autocast pays only on CPUs with AMX or avx512_bf16 (notebook 04; "
            "cpu.profile() measures it), and costs no model-state memory either way"
        )
    else:
        half = o.dtype if o.dtype in ("bf16", "fp16") else next(d for d in ("bf16", "fp16") if d in chip.peak_tflops)
        p16, p32 = chip.peak_tflops[half], chip.peak_tflops.get("fp32")
        speed = f"{p16:g} TFLOP/s against {p32:g} in fp32 ({p16 / p32:.3g}x)" if p32 else f"{p16:g} TFLOP/s"
        chosen = (
            "as chosen"
            if job.precision != "fp32"
            else f"instead of fp32: about {o.hours * p32 / p16:.3g} h"
            if p32 and o.dtype == "fp32"
            else "XLA computes fp32 matmuls in bf16 passes here anyway"
        )
        scaler = "; fp16 needs a GradScaler (notebook 04)" if half == "fp16" else ""
        out.append(
            f"{half} mixed precision ({chosen}): {chip.name} runs {half} at {speed}; activations take half "
            f"the bytes; model states stay {_bpp(job)} B per trained parameter with {job.optimizer} "
            f"(memory.model_states_bytes){scaler}"
        )
    usable = (TOTAL_FRACTION if job.activation_bytes is not None else STATES_FRACTION) * o.device_bytes
    states = o.memory_bytes - (0 if job.activation_bytes is None else _micro(job, o.accumulation))
    free = (TOTAL_FRACTION if job.activation_bytes is not None else 1) * o.device_bytes - states
    if job.activation_bytes is None:
        out.append(
            f"gradient accumulation: the batch's activations must fit in the {_gb(max(free, 0))} left next to "
            f"the {_gb(states)} of model states; if they do not, split the batch into micro-batches and "
            "accumulate their gradients (same update, notebook 04)"
        )
    elif o.accumulation > 1:
        out.append(
            f"gradient accumulation over {o.accumulation} micro-batches of {job.batch_size // o.accumulation} "
            f"samples: the batch's activations ({job.batch_size} samples, {_gb(job.activation_bytes)}) do not "
            f"fit in the {_gb(free)} left, a micro-batch's ({_gb(_micro(job, o.accumulation))}) does; same "
            f"update (notebook 04)"
        )
    else:
        out.append(
            f"gradient accumulation: not needed, the batch's activations ({_gb(job.activation_bytes)}) fit in "
            f"the {_gb(free)} left next to the model states"
        )
    if o.accumulation > 1 or (job.activation_bytes is None and states > 0.5 * usable):
        out.append(
            f"activation checkpointing: keep only each block's input and recompute the rest in the backward "
            f"pass (notebook 02): activations shrink several-fold for one more forward pass, about 1/3 more "
            f"compute ({o.hours * 4 / 3:.3g} h instead of {o.hours:.3g} h)"
        )
    states1 = _states(job)
    if o.zero_stage > 0 or states > 0.5 * usable:
        out.extend(_savers(job, states1, finetune and job.method == "full"))
    if o.devices > 1:
        one = next((x for x in single if x.hardware == o.hardware and x.where == o.where), None)
        if o.zero_stage > 0:
            out.append(
                f"sharding (ZeRO stage {o.zero_stage}{', i.e. FSDP fully_shard' if o.zero_stage == 3 else ''}) "
                f"over {o.devices} devices: model states {_gb(states)} per device instead of {_gb(states1)} on "
                f"one (memory.model_states_bytes), at {o.efficiency:.0%} scaling efficiency"
            )
        else:
            out.append(
                f"data parallel (DDP) over {o.devices} devices, for the deadline: {o.hours:.3g} h instead of "
                f"{one.hours:.3g} h on one, at {o.efficiency:.0%} scaling efficiency (ring all-reduce of the "
                f"gradients after each step, notebook 03)"
                if one
                else f"data parallel (DDP) over {o.devices} devices, at {o.efficiency:.0%} scaling efficiency"
            )
    return out


def _savers(job: _Job, states1: int, finetune: bool = False) -> list[str]:
    """8-bit optimizer, LoRA and 4-bit quantization, with the model-state bytes each would leave."""
    buffers = names.OPTIMIZER_STATE_BUFFERS[job.optimizer]
    n = job.n_params
    out = []
    if buffers and job.method == "full":  # each fp32 state (4 B) kept in 1 B
        out.append(
            f"8-bit optimizer states (bitsandbytes' {'Adam' if buffers == 2 else 'SGD'}8bit, Dettmers et al. "
            f"2022): model states {_gb(states1)} -> {_gb(states1 - 3 * buffers * n)}"
        )
    lora = 2 * n + model_states_bytes(int(n * _LORA_FRACTION), job.precision, job.optimizer)
    qlora = n // 2 + model_states_bytes(int(n * _LORA_FRACTION), job.precision, job.optimizer)
    if not finetune:  # LoRA and QLoRA adapt a pretrained model: no use when training from scratch
        return out
    fit = _smallest_holding(lora)
    out.append(
        f"LoRA, when fine-tuning a pretrained model (Hu et al. 2021): frozen 16-bit weights plus "
        f"adapters of about {_LORA_FRACTION:.0%} of the parameters trained with {job.optimizer}: "
        f"{_gb(states1)} -> {_gb(lora)}" + (f", which fits one {fit}" if fit else "")
    )
    fit = _smallest_holding(qlora)
    out.append(
        f"4-bit quantized frozen weights under the adapters (QLoRA, Dettmers et al. 2023): {_gb(qlora)}"
        + (f", which fits one {fit}" if fit else "")
    )
    return out


def _smallest_holding(nbytes: float) -> str:
    """The catalog accelerator with the least memory that holds ``nbytes`` in STATES_FRACTION of it."""
    a = min(
        (a for a in catalog.accelerators() if nbytes <= STATES_FRACTION * a.memory_gb * 1e9),
        key=lambda a: (a.memory_gb, a.year),
        default=None,
    )
    return "" if a is None else f"{a.name} ({a.memory_gb:g} GB)"


def _reasons(
    o: Option,
    job: _Job,
    work: str,
    chosen_from: str,
    privacy: str,
    budget: float | None,
    deadline: float | None,
    feasible: list[Option],
) -> list[str]:
    """Why ``o``: the work, its memory, time, cost and energy, how it was chosen, the limits, privacy, notes."""
    return [
        work,
        _memory_reason(o, job),
        _time_reason(o, job),
        _cost_reason(o, job),
        _energy_reason(o, job),
        chosen_from,
        *_limit_reasons(o, budget, deadline),
        *_privacy_reasons(o, privacy),
        *_note_reasons(o, feasible),
    ]


def _memory_reason(o: Option, job: _Job) -> str:
    """The model states per device against the device's memory, with the rule of how much of it they may use."""
    states = _states(job, o.zero_stage, o.devices)
    on = "on each device" if o.devices > 1 else "on the device"
    fit_rule = (
        f"{STATES_FRACTION:.0%} of it may hold them, {1 - STATES_FRACTION:.0%} kept for activations and the "
        f"framework (memory.largest_model_that_fits: at most "
        f"{largest_model_that_fits(o.device_bytes, job.precision, job.optimizer):.3g} parameters on one)"
        if job.activation_bytes is None
        else f"states plus activations ({_gb(job.activation_bytes)} per batch"
        + (
            f", {_gb(_micro(job, o.accumulation))} per micro-batch of {job.batch_size // o.accumulation}"
            if o.accumulation > 1
            else ""
        )
        + f") may use {TOTAL_FRACTION:.0%} of it"
    )
    what = (
        f"Model states with {job.precision} and {job.optimizer}: {_bpp(job)} B per parameter"
        if job.method == "full"
        else f"Frozen weights ({FROZEN_BYTES[job.method]:g} B each) plus {job.trainable:.3g} adapter parameters "
        f"at {_bpp(job)} B"
    )
    return (
        f"{what}, {_gb(states)} "
        f"{on}"
        + (f" (ZeRO stage {o.zero_stage} over {o.devices})" if o.zero_stage else "")
        + f" (memory.model_states_bytes); {o.name} has {_gb(o.device_bytes)}: {fit_rule}."
    )


def _time_reason(o: Option, job: _Job) -> str:
    if o.hardware == "cpu":
        return (
            f"On {o.name} at {job.util('cpu', 'cpu'):.0%} of {o.peak_tflops * 1e3:.3g} GFLOP/s (fp32; "
            f"{o.kwh / o.hours * 1e3:g} W): {_hours(o.hours)}."
        )
    scale = f" at {o.efficiency:.0%} scaling efficiency (comm.data_parallel_speedup)" if o.devices > 1 else ""
    return (
        f"On {o.devices} x {o.name} at {job.util(o.hardware, catalog.get_accelerator(o.hardware).kind):.0%} of "
        f"{o.peak_tflops:g} TFLOP/s ({o.dtype}){scale}: {_hours(o.hours)}."
    )


def _cost_reason(o: Option, job: _Job) -> str:
    """What the option costs: rented (with the Spot price), bought (card, host and electricity) or electricity only."""
    if o.where == "cloud":
        line = (
            f"Cloud on demand (the host VM's share included) at {o.usd_per_hour:g} USD per device-hour: {_money(o.usd)}"
        )
        try:
            spot = cost.cloud_hourly(o.hardware, spot=True) * o.devices * o.hours
            line += (
                f"; on Spot (preemptible) capacity about {_money(spot)}, if the job checkpoints and resumes "
                f"(notebook 06.3)"
            )
        except ValueError:
            pass
        return line + "."
    if o.where == "owned":
        card = next(p for p in catalog.prices("purchase") if p.accelerator == o.hardware)
        host = cost.host_share(card.key)
        desk = host["where"] == "desk"
        what = (
            f"{o.devices} x {card.value:,.0f} USD for the card + one workstation of {job.desk_host_usd:,.0f} USD "
            f"(desk_host_usd, assumed)"
            if desk
            else f"{o.devices} x ({card.value:,.0f} USD for the card + {host['usd']:,.0f} USD, its share of a server, "
            f"cost.host_share, assumed)"
        )
        host_w = DESK_HOST_W if desk else job.host_power_ratio * catalog.get_accelerator(o.hardware).power_w
        return (
            f"Bought: {job.purchase_share:.0%} (purchase_share) of {what}; pass your own quote; plus "
            f"{_num(o.kwh, 'kWh')} (cards + {host_w:g} W of host"
            f"{' for the workstation' if desk else ' each, host_power_ratio x TDP'}, PUE {host['pue']:g}) at "
            f"{_electricity_usd():g} USD/kWh = {_money(o.usd)} charged to this job "
            f"(cost.owned_vs_cloud spreads a purchase over a project's months)."
        )
    return (
        f"On a CPU you already have only electricity counts: {_num(o.kwh, 'kWh')} at "
        f"{_electricity_usd():g} USD/kWh = {_money(o.usd)}."
    )


def _energy_reason(o: Option, job: _Job) -> str:
    g = catalog.get_price(cost.GRIDS[job.grid]).value
    return (
        f"Energy {_num(o.kwh, 'kWh')} (power x hours x PUE"
        + (
            f"; the chips plus {job.host_power_ratio:g} x their TDP of host each, host_power_ratio"
            if o.where == "cloud"
            else ""
        )
        + f") and {_num(o.co2_kg, 'kg CO2')} at the "
        f"{job.grid} grid's {g:g} g CO2 per kWh."
    )


def _limit_reasons(o: Option, budget: float | None, deadline: float | None) -> list[str]:
    """The deadline and the budget against the option's hours and cost, where they were given."""
    out = []
    if deadline is not None:
        out.append(
            f"Deadline {deadline:g} h: "
            + (f"met with {deadline - o.hours:.3g} h to spare." if o.hours <= deadline else f"missed: {o.hours:.3g} h.")
        )
    if budget is not None and o.usd is not None:
        out.append(
            f"Budget {budget:,.0f} USD: "
            + (f"{budget - o.usd:,.0f} USD left." if o.usd <= budget else f"exceeded: {_money(o.usd)}.")
        )
    return out


def _privacy_reasons(o: Option, privacy: str) -> list[str]:
    """What "sensitive" and "regulated" data mean for the choice; for regulated data also ECC memory and the cards
    the price table holds without a row in the accelerator catalog."""
    if privacy == "sensitive":
        return [
            "Sensitive data (e.g. finance): ordinary on-demand instances under the provider's contract, with "
            "encryption at rest and in transit, a region you choose and tight access control; dedicated "
            "(sole-tenant) hosts only if your rules demand them (sensitive_markup); bought hardware is in the "
            "table too."
        ]
    if privacy != "regulated":
        return []
    out = [
        "Regulated data (e.g. healthcare): the data may not leave the premises, so cloud rental is left "
        "out and only a CPU you have or hardware you buy counts."
    ]
    row = next((p for p in catalog.prices("purchase") if p.accelerator == o.hardware), None)
    if row is not None and o.where != "cloud":
        out.append(
            f"{row.name}: "
            + (
                "ECC memory on by default."
                if row.ecc and row.tier != "consumer"
                else "ECC memory only as an optional mode, off by default: turn it on (nvidia-smi -e 1), at some "
                "capacity and speed."
                if row.ecc
                else "no ECC memory: a flipped bit in the weights or the data goes unnoticed. For records you "
                "must be able to trust, weigh a card with ECC (pro and data-centre cards) in the table."
            )
        )
    cheap = [p for p in catalog.prices("purchase") if p.accelerator is None]
    if cheap:
        out.append(
            "Other cards in the price table have no row in the accelerator catalog, so their time is not "
            "estimated here: "
            + "; ".join(
                f"{p.name} {p.memory_gb:g} GB, {p.value:,.0f} USD, {'ECC' if p.ecc else 'no ECC'}"
                + (", needs ROCm" if (p.vendor or "").upper() == "AMD" else "")
                for p in cheap
            )
            + "."
        )
    return out


def _note_reasons(o: Option, feasible: list[Option]) -> list[str]:
    """The option's notes (an accelerator's), and for TPUs through PyTorch/XLA the cheapest option without them."""
    out = [f"{n}." for n in o.notes if o.hardware != "cpu"]
    if o.notes and "PyTorch/XLA" in " ".join(o.notes):
        cuda = [x for x in feasible if x.hardware == "cpu" or catalog.get_accelerator(x.hardware).kind != "tpu"]
        if cuda:
            c = min(cuda, key=lambda x: _rank(x, "any"))
            out.append(
                f"Without PyTorch/XLA the cheapest is {c.devices} x {c.name} ({_WHERE[c.where]}): "
                f"{_money(c.usd)} in {_hours(c.hours)}."
            )
    return out


def _finetune_line(options: list[Option]) -> str:
    """The cheapest feasible (else fitting) option of each fine-tuning method, side by side."""
    parts = []
    for m in METHODS:
        pool = [
            o
            for o in options
            if o.method == m and (o.feasible or not any(x.feasible for x in options if x.method == m)) and o.fits
        ]
        o = min(pool, key=lambda o: _rank(o, "any"), default=None)
        parts.append(
            f"{m}: "
            + (
                "no option holds it"
                if o is None
                else f"{o.devices} x {o.name} ({_WHERE[o.where]}), {_gb(o.memory_bytes)} per device, "
                f"{_hours(o.hours)}, {_money(o.usd)}" + ("" if o.feasible else " (not feasible)")
            )
        )
    return (
        "Fine-tune priced three ways (LoRA trains ~1 % of the weights as adapters, Hu et al. 2021, ICLR 2022; "
        "QLoRA keeps the base in 4 bits, Dettmers et al. 2023, NeurIPS; both usually match full fine-tuning on "
        "a task, not always): " + "; ".join(parts) + "."
    )


def _assumptions_text(job: _Job, args: dict, framework: str, privacy: str, finetune: bool) -> list[str]:
    """Each assumption behind a recommendation, as "keyword = value: what it means"."""
    u = {k: v for k, v in job.utilization.items()}
    out = [
        f"utilization = {u['default']:g}"
        + (f", {dict((k, v) for k, v in u.items() if k != 'default')}" if len(u) > 1 else "")
        + ": model FLOPs utilisation of every chip and the CPU (assumed); one figure for all makes the ranking "
        "one of price per peak FLOP: pass a dict by catalog key or kind ('gpu', 'tpu', 'cpu') to differ",
        f"purchase_share = {job.purchase_share:g}: the share of a bought card and its host charged to this job "
        f"(1 = all of it; 0.7 = resold for 30 %)",
        f"spot = {job.spot}: "
        + (
            "Spot prices, the table's estimate of on-demand x 0.4 where no Spot row is "
            "published (cost.cloud_hourly); the job must checkpoint (notebook 06.3)"
            if job.spot
            else "on-demand prices (Spot: about 0.4 x, an estimate)"
        ),
        f"host_power_ratio = {job.host_power_ratio:g}: every chip in a server (rented, or a bought data-centre "
        f"card) adds this x its TDP of host power (CPUs, memory, network) to the kWh (read from the DGX A100 data "
        f"sheet; 0 = the chips alone); bought desk cards add their workstation's {DESK_HOST_W:g} W instead",
        f"cpu_gflops = {args['cpu_gflops'] or CPU_GFLOPS:g}"
        + ("" if args["cpu_gflops"] else " (assumed)")
        + f", cpu_watts = {args['cpu_watts']:g}: the CPU option",
    ]
    out.append(
        f"desk_host_usd = {job.desk_host_usd:,.0f}: the workstation a bought consumer or pro card goes "
        f"into ({DESK_HOST_W:g} W, up to {DESK_MAX} cards); a bought data-centre card pays cost.host_share's "
        f"{cost.SERVER_USD_PER_GPU:,.0f} USD share of a server each"
    )
    if framework == "pytorch":
        out.append(
            f"xla_ready = {job.xla_ready}, porting_usd = {job.porting_usd:,.0f}: "
            + (
                "the code runs on PyTorch/XLA, TPUs cost no porting"
                if job.xla_ready
                else "a CUDA code base pays this (assumed: two engineer-weeks) to run on TPUs through PyTorch/XLA"
            )
        )
    if privacy == "sensitive":
        out.append(
            f"sensitive_markup = {job.markup:g}: extra cost of rented hosts for sensitive data, as a fraction "
            f"of the on-demand price (0: ordinary on-demand instances under the provider's contract and "
            f"controls; pass the cost of dedicated hosts only if your rules demand sole tenancy)"
        )
    out.append(
        f"finetune = {finetune}: "
        + (
            f"full fine-tuning, LoRA (adapters of {_LORA_FRACTION:.0%} of the weights over frozen 16-bit weights) and "
            f"QLoRA (4-bit frozen weights, {FROZEN_BYTES['qlora']:g} B each, qlora_slowdown = "
            f"{args['qlora_slowdown']:g}) priced; frozen weights cost 4 FLOPs per parameter and token, not 6"
            if finetune
            else "training from scratch, every weight trained (finetune=True prices LoRA and QLoRA)"
        )
    )
    return out
