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

from dataclasses import dataclass, field

from . import arguments
from .catalog import Accelerator, accelerators, get_accelerator
from .names import bytes_per_element
from .names import dtype as dtype_name


def matmul_intensity(m: int, n: int, k: int, dtype: str = "fp32") -> float:
    """FLOPs per byte of C = A @ B with A (m x k), B (k x n): 2mnk / (bytes of A + B + C).

    Assumes each matrix crosses the memory bus once (ideal caching). For square n x n in fp32
    this is n / 6: the bigger the matrix, the more work per byte.
    """
    for name, v in (("m", m), ("n", n), ("k", k)):
        arguments.positive_int(name, v)
    size = bytes_per_element(dtype)
    return 2 * m * n * k / (size * (m * k + k * n + m * n))


def elementwise_intensity(
    flops_per_element: float = 1.0, inputs: int = 2, outputs: int = 1, dtype: str = "fp32"
) -> float:
    """FLOPs per byte of an elementwise op such as c = a + b (1 FLOP, 2 reads, 1 write: 1/12 in fp32)."""
    arguments.positive("flops_per_element", flops_per_element)
    arguments.nonnegative_int("inputs", inputs)
    arguments.positive_int("outputs", outputs)
    return flops_per_element / ((inputs + outputs) * bytes_per_element(dtype))


def roofline(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Attainable FLOP/s at a given arithmetic intensity: min(peak, intensity x bandwidth)."""
    i = arguments.positive("intensity", intensity)
    return min(arguments.positive("peak_flops", peak_flops), i * arguments.positive("bandwidth", bandwidth))


def roofline_regime(intensity: float, peak_flops: float, bandwidth: float) -> tuple[float, str]:
    """Attainable FLOP/s and the roof that sets it: ``"memory"`` below the ridge point, else ``"compute"``.

    At exactly the ridge point it says ``"compute"``. Exercise 01, section 2 asks you to write this; its check
    refuses calls to it.
    """
    attainable = roofline(intensity, peak_flops, bandwidth)
    return attainable, "memory" if intensity * bandwidth < peak_flops else "compute"


def memory_bound(intensities: dict[str, float], peak_flops: float, bandwidth: float) -> set[str]:
    """The names in ``intensities`` (name -> FLOP/byte) that are memory-bound on this processor.

    The roofline plot draws the same split. Exercise 01 asks you to write this; its check refuses calls to it.
    """
    if not isinstance(intensities, dict):
        raise TypeError(f"intensities must be a dict of name -> FLOP/byte, got {type(intensities).__name__}")
    return {name for name, i in intensities.items() if roofline_regime(i, peak_flops, bandwidth)[1] == "memory"}


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Intensity (FLOP/byte) where the roofline bends: peak / bandwidth."""
    return arguments.positive("peak_flops", peak_flops) / arguments.positive("bandwidth", bandwidth)


def roofline_time(flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> float:
    """Predicted seconds for an op: the slower of doing its FLOPs and moving its bytes."""
    return max(
        arguments.nonnegative("flops", flops) / arguments.positive("peak_flops", peak_flops),
        arguments.nonnegative("nbytes", nbytes) / arguments.positive("bandwidth", bandwidth),
    )


def training_flops(n_params: float, n_tokens: float) -> float:
    """About 6 x parameters x tokens: forward 2 FLOPs per parameter per token, backward 4."""
    return 6.0 * arguments.positive("n_params", n_params) * arguments.positive("n_tokens", n_tokens)


def time_to_train(
    n_params: float, n_tokens: float, peak_flops: float, utilization: float = 0.4, n_devices: int = 1
) -> float:
    """Seconds to train: 6*N*D / (n_devices x peak FLOP/s x utilisation).

    ``utilization`` (model FLOPs utilisation, MFU) is the fraction of peak a real job reaches:
    0.3-0.5 is typical for well-tuned large-model training, far less for tiny models.
    """
    u = arguments.fraction("utilization", utilization, allow_one=True)
    arguments.positive_int("n_devices", n_devices)
    return training_flops(n_params, n_tokens) / (n_devices * arguments.positive("peak_flops", peak_flops) * u)


def days_to_train(
    n_params: float, n_tokens: float, peak_tflops: float, utilization: float = 0.4, n_devices: int = 1
) -> float:
    """``time_to_train`` in days, with the peak in TFLOP/s as data sheets print it.

    Exercise 01, section 3 asks you to write this; its check refuses calls to it.
    """
    return (
        time_to_train(n_params, n_tokens, arguments.positive("peak_tflops", peak_tflops) * 1e12, utilization, n_devices)
        / 86400
    )


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


def time_to_train_table(
    n_params: float,
    n_tokens: float,
    dtype: str = "bf16",
    utilization: float = 0.4,
    n_devices: int = 1,
    names: list[str] | None = None,
) -> list[TrainEstimate]:
    """``time_to_train`` for every catalog accelerator that supports ``dtype`` (notebook 01).

    ``names`` limits the table to those accelerators (keys or aliases)."""
    dtype = dtype_name(dtype)
    chips: list[Accelerator] = [get_accelerator(n) for n in names] if names else accelerators()
    rows = []
    for chip in chips:
        if dtype not in chip.peak_tflops:
            continue
        peak = chip.peak_flops(dtype)
        rows.append(
            TrainEstimate(
                chip.key,
                chip.name,
                dtype,
                peak / 1e12,
                training_flops(n_params, n_tokens),
                time_to_train(n_params, n_tokens, peak, utilization, n_devices),
            )
        )
    if not rows:
        raise ValueError(f"no accelerator in the selection supports dtype {dtype!r}")
    return rows


def format_duration(seconds: float) -> str:
    """4000 -> '1.1 h'; picks s / min / h / days / years."""
    s = arguments.nonnegative("seconds", seconds)
    for unit, scale in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


def overhead_model_time(work: float, overhead_s: float, rate: float) -> float:
    """Predicted seconds = overhead + work / rate."""
    return arguments.nonnegative("overhead_s", overhead_s) + arguments.nonnegative("work", work) / arguments.positive(
        "rate", rate
    )


@dataclass(frozen=True)
class ChipScale:
    """One accelerator per chip, per pod and per dollar (``scale_table``)."""

    key: str
    name: str
    dtype: str
    chip_tflops: float  # dense peak of one chip
    pod_chips: int  # chips on the chip's own fast link
    link_gbs: float  # that link, per chip, per direction
    usd_per_chip_hour: float | None  # an on-demand price, if one was given
    job_hours: float  # the job on one chip at the given utilisation

    @property
    def pod_pflops(self) -> float:
        """Peak of every chip one fast-link domain joins, in PFLOP/s."""
        return self.chip_tflops * self.pod_chips / 1e3

    @property
    def tflops_per_usd_hour(self) -> float | None:
        """Peak TFLOP/s bought per dollar per hour (None without a price)."""
        return None if self.usd_per_chip_hour is None else self.chip_tflops / self.usd_per_chip_hour

    @property
    def job_usd(self) -> float | None:
        """What the job costs on one chip (the same on many chips if they scaled perfectly)."""
        return None if self.usd_per_chip_hour is None else self.job_hours * self.usd_per_chip_hour


def scale_table(
    n_params: float,
    n_tokens: float,
    names: list[str],
    dtype: str = "bf16",
    utilization: float = 0.4,
    usd_per_chip_hour: dict[str, float] | None = None,
) -> list[ChipScale]:
    """Compare accelerators per chip, per pod and per dollar on one training job (notebook 01, section 7).

    ``usd_per_chip_hour`` maps keys (or names) to an hourly price; the catalog holds no prices, so
    the notebook passes on-demand list prices it cites. ValueError for a chip without ``dtype`` or
    a price that is not positive.
    """
    prices = {}
    for name, price in (usd_per_chip_hour or {}).items():
        prices[get_accelerator(name).key] = arguments.positive(f"usd_per_chip_hour[{name!r}]", price)
    if not isinstance(names, (list, tuple)) or not names:
        raise ValueError("names must be a non-empty list of accelerator keys, e.g. ['h100-sxm', 'tpu-v5p']")
    rows = []
    for est in time_to_train_table(n_params, n_tokens, dtype=dtype, utilization=utilization, names=list(names)):
        chip = get_accelerator(est.key)
        rows.append(
            ChipScale(
                chip.key,
                chip.name,
                est.dtype,
                est.peak_tflops,
                chip.pod_chips,
                chip.interconnect_gbs,
                prices.get(chip.key),
                est.seconds / 3600,
            )
        )
    missing = [n for n in names if get_accelerator(n).key not in {r.key for r in rows}]
    if missing:
        raise ValueError(f"no {dtype} peak in the catalog for {missing}; pick chips that support dtype={dtype!r}")
    return rows


# ----------------------------------------------------------------------------------------------
# notebook 01, section 6: a training step on the roofline

# Times one fp32 training step moves each weight: the forward pass reads it, the backward pass reads it
# again (gradient of the input) and writes its gradient, and plain SGD reads the weight and the gradient
# and writes the weight back. Activations are left out: at small batch the weights dominate.
STEP_WEIGHT_TOUCHES = 6


def training_step_bytes(n_params: float, dtype: str = "fp32", touches: int = STEP_WEIGHT_TOUCHES) -> float:
    """Bytes one training step moves for its weights: ``touches`` x parameters x bytes per value.

    In fp32 with plain SGD: 6 x 4 = 24 bytes per parameter, whatever the batch.
    """
    arguments.positive("n_params", n_params)
    arguments.positive_int("touches", touches)
    return touches * n_params * bytes_per_element(dtype)


def training_step_intensity(batch: int, dtype: str = "fp32", touches: int = STEP_WEIGHT_TOUCHES) -> float:
    """FLOPs per byte of a training step: 6 x N x batch / (touches x N x bytes) = batch / 4 in fp32 with SGD.

    Each weight is used by ``batch`` examples per step, so the batch sets where the
    step sits on the roofline (below the ridge point peak / bandwidth it is memory-bound).
    """
    arguments.positive_int("batch", batch)
    return 6.0 * batch / (arguments.positive_int("touches", touches) * bytes_per_element(dtype))


def training_step_intensity_with_activations(
    n_params: float, batch: int, activation_values: int, dtype: str = "fp32", activation_touches: int = 4
) -> float:
    """FLOPs per byte of a training step counting activations too (notebook 01, section 6): 6 x N x batch over the
    weights' bytes (``training_step_bytes``) plus ``activation_touches`` x batch x ``activation_values`` values,
    where ``activation_values`` is what the layers output per example (each Linear and each ReLU) and 4 touches are
    one write and one read forward, and the same for its gradient backward. Below ``training_step_intensity`` at
    every batch, and far below it at large batches, where activations outweigh the weights."""
    n = arguments.positive("n_params", n_params)
    b = arguments.positive_int("batch", batch)
    acts = arguments.positive_int("activation_values", activation_values)
    touches = arguments.positive_int("activation_touches", activation_touches)
    moved = training_step_bytes(n, dtype) + touches * b * acts * bytes_per_element(dtype)
    return 6.0 * n * b / moved


def step_time_models(
    n_params: float, batch: int, fixed_s: float, peak_flops: float, bandwidth: float
) -> dict[str, float]:
    """Seconds per training step under three models (notebook 01, section 6):

    * ``"roofline"``: fixed cost + the slower of its FLOPs at peak and its weight bytes at the bandwidth;
    * ``"compute only"``: fixed cost + FLOPs at peak (a compute-bound step);
    * ``"overhead only"``: the fixed cost alone (a step bound by per-call overhead).

    The roofline bounds one kernel; ``kernel_roofline_s`` applies it kernel by kernel, as a step runs them.
    """
    fixed = arguments.nonnegative("fixed_s", fixed_s)
    flops_s = 6.0 * arguments.positive("n_params", n_params) * arguments.positive_int("batch", batch)
    flops_s /= arguments.positive("peak_flops", peak_flops)
    bytes_s = training_step_bytes(n_params) / arguments.positive("bandwidth", bandwidth)
    return {
        "roofline": fixed + max(flops_s, bytes_s),
        "compute only": fixed + flops_s,
        "overhead only": fixed,
    }


def worst_miss(measured: list[float], predicted: list[float]) -> float:
    """The largest factor between a measurement and its prediction, either way (1.0: every point exact)."""
    if len(measured) != len(predicted) or not measured:
        raise ValueError(
            f"measured and predicted must be non-empty and of equal length ({len(measured)}, {len(predicted)})"
        )
    return max(max(m / p, p / m) for m, p in zip(measured, predicted))


@dataclass(frozen=True)
class StepSweep:
    """Training-step times of ``MLP(64, [width, width], 10)`` at several (batch, width) points (``step_sweep``)."""

    points: tuple[tuple[int, int], ...]  # (batch, width)
    seconds: dict[tuple[int, int], float]
    n_params: dict[int, int]  # width -> parameters
    noisy: bool
    extra: dict[str, float] = field(default_factory=dict)  # seconds of the ``extra`` functions, timed among them

    def time(self, batch: int, width: int) -> float:
        return self.seconds[(batch, width)]


def step_sweep(
    points: list[tuple[int, int]], device=None, rounds: int = 3, min_run_time: float = 0.05, extra=None
) -> StepSweep:
    """Time one SGD training step of ``models.MLP(64, [width, width], 10)`` at each ``(batch, width)``,
    interleaved so that a busy moment hits every point alike; ``extra`` (name -> function) is timed among them."""
    import torch

    from . import models, timing, train

    if not points or any(len(p) != 2 for p in points):
        raise ValueError("points must be a non-empty list of (batch, width) pairs")
    steps, n_params = {}, {}
    for batch, width in points:
        arguments.positive_int("batch", batch)
        arguments.positive_int("width", width)
        gen = torch.Generator().manual_seed(batch * 100003 + width)
        model = models.MLP(64, [width, width], 10)
        x, y = torch.randn(batch, 64, generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        n_params[width] = models.count_parameters(model)
        steps[(batch, width)] = train.make_step_fn(model.to(device or "cpu"), x, y, optimizer="sgd", lr=1e-3)
    fns = {f"{b},{w}": f for (b, w), f in steps.items()} | dict(extra or {})
    t = timing.compare_interleaved(fns, rounds=rounds, device=device, min_run_time=min_run_time)
    seconds = {(b, w): t[f"{b},{w}"].seconds for b, w in steps}
    return StepSweep(tuple(steps), seconds, n_params, timing.any_noisy(t), {k: t[k].seconds for k in extra or {}})


def step_models_over(
    sweep: StepSweep, batches: list[int], width: int, fixed_s: float, peak_flops: float, bandwidth: float
) -> dict[str, list[float]]:
    """``step_time_models`` at each batch of a ``StepSweep`` at one width: model name -> seconds per batch."""
    if not isinstance(sweep, StepSweep):
        raise TypeError(f"sweep must be a StepSweep (from step_sweep), got {type(sweep).__name__}")
    if width not in sweep.n_params:
        raise ValueError(f"width {width!r} was not swept; the sweep has widths {sorted(sweep.n_params)}")
    n = sweep.n_params[width]
    per = [step_time_models(n, b, fixed_s, peak_flops, bandwidth) for b in batches]
    models = {name: [p[name] for p in per] for name in per[0]}
    models["kernel by kernel"] = [fixed_s + kernel_roofline_s(b, width, peak_flops, bandwidth) for b in batches]
    return models


def kernel_roofline_s(
    batch: int, width: int, peak_flops: float, bandwidth: float, d_in: int = 64, d_out: int = 10
) -> float:
    """The roofline applied kernel by kernel to one SGD step of ``MLP(d_in, [width, width], d_out)`` (the
    ``"kernel by kernel"`` model of ``step_roofline``), fixed cost left out: the kernels run one after another,
    so each one's bound adds (Williams, Waterman and Patterson, 2009, bound one kernel). Each product of
    ``mlp_step_products`` takes the larger of its
    FLOPs at ``peak_flops`` and its bytes (read both operands, write the result, 4 bytes a value) at ``bandwidth``;
    each ReLU reads and writes its activations forward (8 bytes a value) and reads two, writes one backward (12);
    the update reads every weight and gradient and writes the weight (12 bytes a parameter)."""
    b, w = arguments.positive_int("batch", batch), arguments.positive_int("width", width)
    d_in, d_out = arguments.positive_int("d_in", d_in), arguments.positive_int("d_out", d_out)
    peak, bw = arguments.positive("peak_flops", peak_flops), arguments.positive("bandwidth", bandwidth)
    total = sum(
        max(2.0 * m * k * n / peak, 4.0 * (m * k + k * n + m * n) / bw)
        for m, k, n in mlp_step_products(b, w, d_in, d_out).values()
    )
    relus = 2 * (8 + 12) * b * w / bw  # two hidden layers, forward and backward
    n_params = d_in * w + w + w * w + w + w * d_out + d_out
    return total + relus + 12.0 * n_params / bw


def mlp_step_products(batch: int, width: int, d_in: int = 64, d_out: int = 10) -> dict[str, tuple[int, int, int]]:
    """The matrix products of one training step of ``MLP(d_in, [width, width], d_out)``: name -> (m, k, n) of an
    (m x k) @ (k x n) product (``step_part_fns`` times them, ``plots.step_parts_table`` prints them).

    Forward, each layer multiplies the batch by its weight (b x in @ in x out). Backward, the gradient of a layer's
    input is (b x out @ out x in), left out for the first layer; the gradient of its weight is (out x b @ b x in),
    whose inner dimension is the batch: at a small batch a thin product that writes the whole weight matrix.
    Their FLOPs add up to 6Nb less the first layer's input gradient and the biases.
    """
    b, w = arguments.positive_int("batch", batch), arguments.positive_int("width", width)
    d_in, d_out = arguments.positive_int("d_in", d_in), arguments.positive_int("d_out", d_out)
    return {
        "forward, layer 1": (b, d_in, w),
        "forward, layer 2": (b, w, w),
        "forward, layer 3": (b, w, d_out),
        "input gradient, layer 3": (b, d_out, w),
        "input gradient, layer 2": (b, w, w),
        "weight gradient, layer 3": (d_out, b, w),
        "weight gradient, layer 2": (w, b, w),
        "weight gradient, layer 1": (w, b, d_in),
    }


def step_part_fns(batch: int, width: int = 1024, device=None, lr: float = 1e-3) -> dict[str, object]:
    """The parts of the SGD step of ``MLP(64, [width, width], 10)`` at ``batch``, each a function to time alone:
    every product of ``mlp_step_products``, on the model's own weights as the step multiplies them (a fresh output
    each call, as autograd makes), and ``"update"``, the SGD update of all parameters (``torch._foreach_add_``).
    ``step_roofline`` times them."""
    import torch

    from . import models

    params = [p.detach() for p in models.MLP(64, [width, width], 10).to(device or "cpu").parameters()]
    grads = [torch.randn_like(p) for p in params]
    w1, w2, w3 = (p for p in params if p.dim() == 2)  # (width x 64), (width x width), (10 x width)

    def rand(*shape):
        return torch.randn(*shape, device=device)

    x, h, d3, d2 = rand(batch, 64), rand(batch, width), rand(batch, 10), rand(batch, width)
    operands = {
        "forward, layer 1": (x, w1.t()),
        "forward, layer 2": (h, w2.t()),
        "forward, layer 3": (h, w3.t()),
        "input gradient, layer 3": (d3, w3),
        "input gradient, layer 2": (d2, w2),
        "weight gradient, layer 3": (d3.t(), h),
        "weight gradient, layer 2": (d2.t(), h),
        "weight gradient, layer 1": (d2.t(), x),
    }
    assert {k: (a.shape[0], a.shape[1], b.shape[1]) for k, (a, b) in operands.items()} == mlp_step_products(
        batch, width
    )
    fns = {name: (lambda a=a, b=b: torch.mm(a, b)) for name, (a, b) in operands.items()}
    fns["update"] = lambda: torch._foreach_add_(params, grads, alpha=-lr)
    return fns


def rank1_update_bytes(m: int, n: int, k: int, dtype: str = "fp32") -> float:
    """Bytes the rank-1-update form of an (m x k) @ (k x n) product moves (notebook 01, section 6): it writes the
    m x n output once, then reads and writes it once per further update, (2k - 1) x m x n values; the k columns
    and rows it multiplies, k(m + n) values, are left out."""
    m, n, k = (arguments.positive_int(name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    return (2 * k - 1) * m * n * bytes_per_element(dtype)


def thin_product_forms(m: int, k: int, n: int, device=None) -> dict[str, object]:
    """The (m x k) @ (k x n) product two ways, each into its own preallocated output (``thin_product`` times them):
    ``"BLAS product"`` (``torch.mm``) and ``"rank-1 updates"``, the same sum as k elementwise passes over the
    output (``torch.mul`` of column 0 by row 0, then ``addcmul_`` of column j by row j): bandwidth-bound work."""
    import torch

    m, n, k = (arguments.positive_int(name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    gen = torch.Generator().manual_seed(m * 7 + k)
    a, g = torch.randn(m, k, generator=gen).to(device or "cpu"), torch.randn(k, n, generator=gen).to(device or "cpu")
    out_mm, out_r1 = torch.empty(m, n, device=device), torch.empty(m, n, device=device)

    def rank1():
        torch.mul(a[:, :1], g[0], out=out_r1)
        for j in range(1, k):
            out_r1.addcmul_(a[:, j : j + 1], g[j])
        return out_r1

    return {"BLAS product": lambda: torch.mm(a, g, out=out_mm), "rank-1 updates": rank1}


@dataclass(frozen=True)
class ThinProduct:
    """``thin_product``'s timings: the BLAS product, its rank-1-update form and that form's bandwidth model."""

    shape: tuple[int, int, int]  # (m, k, n)
    blas_s: float
    rank1_s: float
    model_s: float  # rank1_update_bytes / bandwidth
    noisy: bool
    bandwidth: float = 0.0  # bytes/s the model used
    blas_one_thread_s: float = 0.0  # the BLAS product on one thread (CPU only; 0 elsewhere)


def thin_product(batch: int, width: int, bandwidth: float, rounds: int = 5, device=None, copy=None) -> ThinProduct:
    """Time the thin weight gradient of notebook 01, section 6, (width x batch) @ (batch x width), as a BLAS product
    and as rank-1 updates (``thin_product_forms``), interleaved, beside ``rank1_update_bytes`` at ``bandwidth``
    (bytes/s); ``copy`` = (a copy function, the bytes it moves) is timed among them and its B replaces ``bandwidth``,
    so a burst of other work hits model and measurement alike. On a CPU the BLAS product is also timed on one
    thread: as fast or slower there, its time is its kernel's, not its threads'."""
    from . import timing

    b, w = arguments.positive_int("batch", batch), arguments.positive_int("width", width)
    fns = {**thin_product_forms(w, b, w, device), **({"copy": copy[0]} if copy else {})}
    one = {"1 thread": fns["BLAS product"]} if str(device or "cpu") == "cpu" else {}
    kw = {"rounds": rounds, "device": device, "min_run_time": 0.02, "num_threads": {"1 thread": 1}}
    t = timing.compare_interleaved({**fns, **one}, **kw)
    bw = copy[1] / t["copy"].seconds if copy else arguments.positive("bandwidth", bandwidth)
    s = {name: r.seconds for name, r in t.items()}
    model, noisy = rank1_update_bytes(w, w, b) / bw, timing.any_noisy(t)
    return ThinProduct((w, b, w), s["BLAS product"], s["rank-1 updates"], model, noisy, bw, s.get("1 thread", 0.0))


def minor_faults_per_call(fn, calls: int = 20) -> float | None:
    """Minor page faults per call of ``fn`` (``resource.getrusage``), after one warm-up call; None where the
    operating system does not count them (Windows). ``step_roofline`` counts them for one step: a fresh gradient
    first touched in fresh pages would fault once per 4 KiB page."""
    from .hardware.process_memory import minor_faults

    calls = arguments.positive_int("calls", calls)
    if minor_faults() is None:
        return None
    fn()
    before = minor_faults()
    for _ in range(calls):
        fn()
    return (minor_faults() - before) / calls


@dataclass(frozen=True)
class StepRoofline:
    """A training-step sweep beside its models (``step_roofline``): those of ``step_time_models``, ``"kernel by
    kernel"`` (``kernel_roofline_s``) and ``"parts timed alone"``, the fixed cost plus the step's products and
    update each timed on their own."""

    batches: tuple[int, ...]
    width: int
    sweep: StepSweep
    fixed_s: float  # the same step at width 8: the same calls, almost no weights
    step_s: tuple[float, ...]  # measured, one per batch, at ``width``
    models: dict[str, list[float]]  # model name -> seconds per batch
    parts: dict[int, dict[str, float]]  # smallest batch -> part of the step (a product, the update) -> seconds alone
    faults_per_step: float | None  # minor page faults per batch-2 step (None: not counted here)

    @property
    def width_ratio(self) -> float:
        """Batch-8 step at ``width`` over the same step at width 64 (same calls, far fewer weights)."""
        return self.sweep.time(8, self.width) / self.sweep.time(8, 64)

    def miss(self, model: str) -> float:
        """``worst_miss`` of one model over the batches."""
        return worst_miss(list(self.step_s), self.models[model])


def step_roofline(
    batches: list[int], peak_flops: float, bandwidth: float, width: int = 1024, device=None
) -> StepRoofline:
    """Time the SGD step of ``MLP(64, [width, width], 10)`` at each batch and, at batch 8, at widths 8 and 64; set
    each time beside ``step_time_models`` with this machine's measured peak and bandwidth."""
    if 8 not in batches:
        raise ValueError(f"batches must include 8 (the width comparison runs at batch 8), got {batches}")
    from . import timing

    def run_all(fns):
        return lambda: [f() for f in fns.values()]

    # each batch's parts, run one after another, are timed among the steps (a busy moment hits both alike)
    together = {f"parts {b}": run_all(step_part_fns(b, width, device)) for b in batches}
    sweep = step_sweep([(b, width) for b in batches] + [(8, 8), (8, 64)], device=device, extra=together)
    fixed = sweep.time(8, 8)
    models = step_models_over(sweep, batches, width, fixed, peak_flops, bandwidth)
    models["parts timed alone"] = [fixed + sweep.extra[f"parts {b}"] for b in batches]
    # the smallest batch's parts one by one, to show which one costs
    alone = timing.compare_interleaved(
        step_part_fns(batches[0], width, device), rounds=3, device=device, min_run_time=0.01
    )
    parts = {batches[0]: {name: t.seconds for name, t in alone.items()}}
    faults = None
    if (device is None or str(device) == "cpu") and batches[0] <= 8:
        import torch

        from . import models as nets, train

        net = nets.MLP(64, [width, width], 10)
        x, y = torch.randn(batches[0], 64), torch.randint(0, 10, (batches[0],))
        faults = minor_faults_per_call(train.make_step_fn(net, x, y, optimizer="sgd", lr=1e-3))
    step_s = tuple(sweep.time(b, width) for b in batches)
    return StepRoofline(tuple(batches), width, sweep, fixed, step_s, models, parts, faults)
