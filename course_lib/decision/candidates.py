"""The candidates of the decision guide: one ``Option`` per hardware, place and device count, with its memory
layout (ZeRO stage, gradient accumulation), time, cost and energy."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import catalog, comm, cost, names
from ..memory.formulas import model_states_bytes
from .assumptions import (
    CLOUD_MIN_HOURS,
    CPU_NAME,
    CPU_NAME_GIVEN,
    DESK_HOST_USD,
    DESK_HOST_W,
    DESK_MAX,
    DEVICE_COUNTS,
    ELECTRICITY_ROW,
    FROZEN_BYTES,
    PORTING_USD,
    PURCHASE_SHARE,
    STATES_FRACTION,
    TOTAL_FRACTION,
    _OWNED_MAX,
)
from .options import Option


@dataclass(frozen=True, kw_only=True)
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
    host_power_ratio: float = cost.HOST_POWER_RATIO  # host watts per watt of chip in a server
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
            return d, (
                f"{chip.name} has no {want} tensor cores: use {d}-mixed"
                + (" with a GradScaler (notebook 04)" if d == "fp16" else "")
            )
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
    grad = (
        (job.trainable or job.n_params) * (4 if job.precision == "fp32" else 2) * (1.5 if stage == 3 else 1.0)
    )  # ZeRO-3: 3 vs 2 passes
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
        for n in (
            d for d in DEVICE_COUNTS if d <= (cap if where == "cloud" else min(cap, DESK_MAX if desk else _OWNED_MAX))
        ):
            stage, k, mem, fits = _layout(job, n, chip.memory_gb * 1e9)
            eff = _efficiency(job, chip, n, peak, stage)
            fp = cost.training_footprint(
                job.flops,
                chip.key,
                chips=n,
                utilization=u,
                dtype=dtype,
                grid=job.grid,
                scaling_efficiency=eff,
                pue="pue-google" if where == "cloud" else owned_pue,
            )
            hours, kwh, co2 = fp["hours"], fp.get("kwh"), fp.get("co2_kg")
            # the host draws power too (cost's one rule): a chip in a server (rented, or a bought data-centre
            # card) host_power_ratio x its TDP; bought desk cards one workstation for all n cards
            server_w = None if chip.power_w is None else job.host_power_ratio * chip.power_w
            pue, host_w = (
                (catalog.get_price("pue-google").value, server_w)
                if where == "cloud"
                else (owned_pue, DESK_HOST_W / n if desk else server_w)
            )
            if kwh is not None:
                kwh += n * hours * host_w * pue / 1000
                co2 = kwh * g_per_kwh / 1000
            if where == "cloud":  # billed for at least a minute per device
                usd = None if hourly is None else n * max(hours, CLOUD_MIN_HOURS) * hourly + porting
            else:
                buy = n * card_usd + (job.desk_host_usd if desk else n * host["usd"])
                usd = job.purchase_share * buy + (kwh or 0.0) * _electricity_usd() + porting
            strategy = "single" if n == 1 else "ddp" if stage == 0 else "fsdp"
            out.append(
                Option(
                    hardware=chip.key,
                    name=chip.name,
                    where=where,
                    devices=n,
                    strategy=strategy,
                    zero_stage=stage,
                    accumulation=k,
                    dtype=dtype,
                    peak_tflops=peak / 1e12,
                    memory_bytes=mem,
                    device_bytes=chip.memory_gb * 1e9,
                    fits=fits,
                    efficiency=eff,
                    hours=hours,
                    usd=usd,
                    kwh=kwh,
                    co2_kg=co2,
                    usd_per_hour=hourly if where == "cloud" else None,
                    notes=notes,
                    method=job.method,
                    extra_usd=porting,
                )
            )
    return out


def _framework_notes(chip: catalog.Accelerator, framework: str, porting: float) -> tuple[str, ...]:
    return tuple(
        note
        for cond, note in (
            (
                chip.kind == "tpu" and framework == "pytorch" and porting > 0,
                f"TPUs run PyTorch only through PyTorch/XLA (torch_xla): porting a CUDA code base is charged "
                f"{porting:,.0f} USD (porting_usd, assumed; xla_ready=True if the code already runs on XLA)",
            ),
            (
                chip.kind == "tpu" and framework == "pytorch" and porting == 0,
                "TPUs run PyTorch through PyTorch/XLA (torch_xla): the code already runs on XLA (xla_ready=True)",
            ),
            (chip.vendor.upper() == "AMD", "AMD GPUs need the ROCm builds of PyTorch, TensorFlow or JAX"),
        )
        if cond
    )


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
    return Option(
        hardware="cpu",
        name=name,
        where="cpu",
        devices=1,
        strategy="single",
        zero_stage=0,
        accumulation=k,
        dtype="fp32",
        peak_tflops=gflops / 1e3,
        memory_bytes=mem,
        device_bytes=memory_gb * 1e9,
        fits=fits,
        efficiency=1.0,
        hours=hours,
        usd=kwh * _electricity_usd(),
        kwh=kwh,
        co2_kg=co2,
        usd_per_hour=None,
        notes=(
            f"CPU baseline at {gflops:g} GFLOP/s fp32 ({'given' if given else 'assumed'}) and {watts:g} W "
            f"(assumed unless given; pass your own)",
        ),
        method=job.method,
    )
