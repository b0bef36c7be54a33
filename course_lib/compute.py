"""Cost models of compute you can do by hand: arithmetic intensity, the roofline, training FLOPs
and time to train. Notebook 01 puts each next to a measurement; exercise 01 asks you to write them.

* Arithmetic intensity = FLOPs / bytes moved to and from memory.
* Roofline: attainable FLOP/s = min(peak FLOP/s, intensity x memory bandwidth).
  Below the ridge point (peak / bandwidth) an operation is bandwidth-bound, above it compute-bound.
* Training a dense transformer costs about 6 x parameters x tokens FLOPs
  (2 for the forward multiply-add, 4 for the backward pass).
* Time to train = training FLOPs / (devices x peak FLOP/s x utilisation).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import validate
from .catalog import Accelerator, accelerators, get_accelerator
from .names import bytes_per_element
from .names import dtype as dtype_name


def matmul_intensity(m: int, n: int, k: int, dtype: str = "fp32") -> float:
    """FLOPs per byte of C = A @ B with A (m x k), B (k x n): 2mnk / (bytes of A + B + C).

    Assumes each matrix crosses the memory bus once (ideal caching). For square n x n in fp32
    this is n / 6: the bigger the matrix, the more work per byte.
    """
    for name, v in (("m", m), ("n", n), ("k", k)):
        validate.positive_int(name, v)
    size = bytes_per_element(dtype)
    return 2 * m * n * k / (size * (m * k + k * n + m * n))


def elementwise_intensity(flops_per_element: float = 1.0, inputs: int = 2, outputs: int = 1,
                          dtype: str = "fp32") -> float:
    """FLOPs per byte of an elementwise op such as c = a + b (1 FLOP, 2 reads, 1 write: 1/12 in fp32)."""
    validate.positive("flops_per_element", flops_per_element)
    validate.nonnegative_int("inputs", inputs)
    validate.positive_int("outputs", outputs)
    return flops_per_element / ((inputs + outputs) * bytes_per_element(dtype))


def roofline(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Attainable FLOP/s at a given arithmetic intensity: min(peak, intensity x bandwidth)."""
    i = validate.positive("intensity", intensity)
    return min(validate.positive("peak_flops", peak_flops), i * validate.positive("bandwidth", bandwidth))


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Intensity (FLOP/byte) where the roofline bends: peak / bandwidth."""
    return validate.positive("peak_flops", peak_flops) / validate.positive("bandwidth", bandwidth)


def roofline_time(flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> float:
    """Predicted seconds for an op: the slower of doing its FLOPs and moving its bytes."""
    return max(validate.nonnegative("flops", flops) / validate.positive("peak_flops", peak_flops),
               validate.nonnegative("nbytes", nbytes) / validate.positive("bandwidth", bandwidth))


def training_flops(n_params: float, n_tokens: float) -> float:
    """About 6 x parameters x tokens: forward 2 FLOPs per parameter per token, backward 4."""
    return 6.0 * validate.positive("n_params", n_params) * validate.positive("n_tokens", n_tokens)


def time_to_train(n_params: float, n_tokens: float, peak_flops: float, utilization: float = 0.4,
                  n_devices: int = 1) -> float:
    """Seconds to train: 6*N*D / (n_devices x peak FLOP/s x utilisation).

    ``utilization`` (model FLOPs utilisation, MFU) is the fraction of peak a real job reaches:
    0.3-0.5 is typical for well-tuned large-model training, far less for tiny models.
    """
    u = validate.fraction("utilization", utilization, allow_one=True)
    validate.positive_int("n_devices", n_devices)
    return training_flops(n_params, n_tokens) / (n_devices * validate.positive("peak_flops", peak_flops) * u)


@dataclass(frozen=True)
class TrainEstimate:
    key: str
    accelerator: str
    dtype: str
    peak_tflops: float
    flops: float
    seconds: float

    @property
    def days(self) -> float:
        return self.seconds / 86400


def time_to_train_table(n_params: float, n_tokens: float, dtype: str = "bf16", utilization: float = 0.4,
                        n_devices: int = 1, names: list[str] | None = None) -> list[TrainEstimate]:
    """``time_to_train`` for every catalog accelerator that supports ``dtype`` (notebook 01).

    ``names`` limits the table to those accelerators (keys or aliases)."""
    dtype = dtype_name(dtype)
    chips: list[Accelerator] = [get_accelerator(n) for n in names] if names else accelerators()
    rows = []
    for chip in chips:
        if dtype not in chip.peak_tflops:
            continue
        peak = chip.peak_flops(dtype)
        rows.append(TrainEstimate(chip.key, chip.name, dtype, peak / 1e12, training_flops(n_params, n_tokens),
                                  time_to_train(n_params, n_tokens, peak, utilization, n_devices)))
    if not rows:
        raise ValueError(f"no accelerator in the selection supports dtype {dtype!r}")
    return rows


def format_duration(seconds: float) -> str:
    """4000 -> '1.1 h'; picks s / min / h / days / years."""
    s = validate.nonnegative("seconds", seconds)
    for unit, scale in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


def overhead_model_time(work: float, overhead_s: float, rate: float) -> float:
    """Predicted seconds = overhead + work / rate."""
    return validate.nonnegative("overhead_s", overhead_s) + validate.nonnegative("work", work) / validate.positive("rate", rate)
