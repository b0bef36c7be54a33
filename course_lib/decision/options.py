"""What the decision guide returns (notebook 07.3): an ``Option`` per candidate and the ``Recommendation``, with
the few formats their text uses."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

_WHERE = {"cpu": "a CPU you have", "cloud": "cloud, on demand", "owned": "bought, with its host"}
_METHOD = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA (4-bit base weights)"}


@dataclass(frozen=True, kw_only=True)
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
        row = {
            k: _sig(v) if k in ("hours", "usd", "kwh", "co2_kg", "extra_usd") else v
            for k, v in asdict(self).items()
            if k not in ("memory_bytes", "device_bytes", "notes")
        }
        return {
            **row,
            "where": _WHERE[self.where],
            "memory_gb": _sig(self.memory_bytes / 1e9),
            "device_gb": self.device_bytes / 1e9,
        }


@dataclass(frozen=True, kw_only=True)
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
        what = (
            self.name
            if self.where == "cpu"
            else f"{self.devices} x {self.name} ({_WHERE[self.where]}, {_STRATEGY[self.strategy](self.zero_stage)})"
        )
        what += f", {_METHOD[self.method]}" if self.method != "full" else ""
        est = f"{_hours(self.hours)}, {_money(self.usd)}, {_num(self.kwh, 'kWh')}, {_num(self.co2_kg, 'kg CO2')}"
        head = f"{what}: {est}; {self.memory_bytes / 1e9:.3g} GB per device"
        return head if self.feasible else f"Nothing meets every constraint. {self.relax} Then: {head}"

    def table(self, best_per_hardware: bool = True) -> list[dict]:
        """The options as rows; by default only the best device count of each hardware and place."""
        best: dict[tuple, Option] = {}
        for o in sorted(self.options, key=lambda o: _rank(o, "any"), reverse=True):  # the best of each key last
            best[
                (o.hardware, o.where, o.method) if best_per_hardware else (o.hardware, o.where, o.method, o.devices)
            ] = o
        return [o.row() for o in self.options if o in best.values()]

    def __str__(self) -> str:
        return "\n".join(
            [
                self.headline(),
                "Methods, lightest first:",
                *(f"  - {m}" for m in self.methods),
                "Why:",
                *(f"  - {r}" for r in self.reasons),
                *(
                    ["Assumptions (keyword = value):", *(f"  - {a}" for a in self.assumptions)]
                    if self.assumptions
                    else []
                ),
                *(
                    ["What flips the choice (each assumption changed alone):", *(f"  - {f}" for f in self.flips)]
                    if self.flips
                    else []
                ),
            ]
        )


_STRATEGY = {
    "single": lambda s: "one device",
    "ddp": lambda s: "data parallel (DDP)",
    "fsdp": lambda s: f"sharded: ZeRO stage {s}" + (" = FSDP" if s == 3 else ""),
}


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
