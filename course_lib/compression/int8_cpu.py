"""int8 on a CPU: what the instructions offer, what each software path makes of them, and why batch 1 is a
question of bytes.

Two software paths run int8 Linear layers on a CPU. PyTorch's own quantized engine
(``torch.ao.quantization.quantize_dynamic``, deprecated since torch 2.10 in favour of torchao) calls FBGEMM on
x86 and QNNPACK on Arm; torchao's ``quantize_`` (``quantization.int8_dynamic``) multiplies through
``torch._int_mm`` in eager mode, and through whatever kernel ``torch.compile`` picks once compiled. The same
instructions serve both; how much each path makes of them differs, which is why notebook 05.2 times both and
``product_profile`` names the op each spends its time in. ``INT8_UNITS`` is the course's table of the int8
instructions by CPU flag: ``int8_units`` names those torchao's path can use here (``INT8_EXPECTATIONS`` says what
each means), ``fbgemm_isa`` those FBGEMM runs on.

At batch 1 a Linear layer multiplies a matrix by a vector: every weight is read once and used once, so on weights
larger than the caches the time is about ``weight bytes / memory bandwidth`` (the roofline of module 01), and
fewer bytes per weight make it shorter whether or not the CPU has int8 arithmetic (``batch1_sweep``).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import platform
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .. import arguments, hardware, timing
from ..procs import quiet_native_stderr

__all__ = [
    "INT8_UNITS",
    "INT8_EXPECTATIONS",
    "int8_units",
    "fbgemm_isa",
    "pytorch_int8_problem",
    "pytorch_int8_dynamic",
    "product_profile",
    "read_bandwidth",
    "Batch1Point",
    "batch1_sweep",
    "ms_per_token",
    "largest_model_within",
]

# FBGEMM picks its int8 kernels from the CPU's flags; this variable holds it lower (AVX2, AVX512, AVX512_E1 = VNNI)
_FBGEMM_ENV = "FBGEMM_ENABLE_INSTRUCTIONS"
_FBGEMM_LEVELS = {
    "AVX2": "AVX2",
    "AVX512": "AVX-512",
    "AVX512_256": "AVX-512",
    "AVX512_E1": "AVX-512 VNNI",
    "AVX512_E1_256": "AVX-512 VNNI",
}
_ORDER = ("none", "AVX2", "AVX-512", "AVX-512 VNNI")
_X86 = ("x86_64", "amd64", "i386", "i686", "x86")

#: The CPU's int8 dot-product instructions, by their Linux / macOS flag names: the course's one table of them
#: (``int8_units`` and ``fbgemm_isa`` read it; ``INT8_EXPECTATIONS`` says what each means for the software paths).
INT8_UNITS = {
    "amx_int8": "AMX INT8",
    "avx512_vnni": "AVX-512 VNNI",
    "avx512vnni": "AVX-512 VNNI",
    "avx_vnni": "AVX-VNNI",
    "avxvnni": "AVX-VNNI",
}
INT8_EXPECTATIONS = {
    "AMX INT8": "AMX tiles multiply whole int8 blocks: compiled int8 should beat fp32 at large batches.",
    "AVX-512 VNNI": "VNNI fuses 4 int8 multiply-adds per 32-bit lane into one instruction: compiled int8 should beat "
    "fp32 at large batches; eager pays per-call overhead.",
    "AVX-VNNI": "256-bit int8 dot products, without AVX-512: FBGEMM (PyTorch's own int8 path) runs its AVX2 "
    "kernels; torch._int_mm, torchao's int8 product, calls oneDNN only with AVX-512 VNNI and runs a plain "
    "loop here, so torchao's int8 can be many times slower than fp32 (not asserted).",
    "none": "no fused int8 dot-product instruction (VNNI, AMX): AVX2 still multiplies and adds int8 pairs in three "
    "steps (VPMADDUBSW, VPMADDWD, VPADDD), which FBGEMM (PyTorch's own int8 path) uses to beat fp32; "
    "torchao's int8 product goes through torch._int_mm, which calls oneDNN only on CPUs with AVX-512 VNNI "
    "and here runs a plain loop, one pair of numbers at a time, tens of times slower than fp32: a property "
    "of that software path, not of the instructions.",
    "held": "the CPU has fused int8 instructions, but oneDNN (where torchao's int8 product runs on such a CPU) is "
    "held below them by ONEDNN_MAX_CPU_ISA: its int8 runs on the kernels the hold allows (AVX2's three "
    "steps, say), not on the plain loop a CPU without VNNI gets; FBGEMM has its own hold "
    "(FBGEMM_ENABLE_INSTRUCTIONS).",
    "unknown": "an int8 path this course has not measured (Arm, Apple): the notebook prints the result only.",
}


def int8_units(flags: set[str] | frozenset[str] | None = None, architecture: str | None = None) -> str:
    """Which int8 dot-product instructions PyTorch's int8 kernels can use here (notebook 05.2, section 4):
    "AMX INT8", "AVX-512 VNNI", "AVX-VNNI", "none" (an x86 CPU without them), "held" (an x86 CPU with them,
    oneDNN held below them by ``ONEDNN_MAX_CPU_ISA``) or "unknown" (Arm and others).
    ``flags``: the CPU's flag names (default: this CPU's); ``INT8_EXPECTATIONS`` says what each means."""
    if flags is None:
        flags = hardware.cpu_flags()
    if not isinstance(flags, (set, frozenset)):
        raise TypeError(f"flags must be a set of CPU flag names, got {type(flags).__name__}")
    if (architecture or platform.machine()).lower() not in _X86:
        return "unknown"
    found = [INT8_UNITS[f.lower()] for f in flags if f.lower() in INT8_UNITS]
    best = next((name for name in ("AMX INT8", "AVX-512 VNNI", "AVX-VNNI") if name in found), "none")
    if best != "none" and hardware.onednn_isa_limit() in hardware.ONEDNN_BELOW_VNNI:  # oneDNN kept below them
        return "held"
    return best


def fbgemm_isa(
    flags: set[str] | frozenset[str] | None = None, architecture: str | None = None, env: str | None = None
) -> str:
    """The instructions FBGEMM's int8 product runs on here: "AVX-512 VNNI" (``VPDPBUSD``: four int8 products
    summed into each 32-bit lane in one instruction), "AVX-512" or "AVX2" (``VPMADDUBSW``, ``VPMADDWD``, then
    ``VPADDD``: the same in three), or "none" (not x86, where PyTorch uses QNNPACK, or no AVX2). FBGEMM uses no
    AMX. ``flags``: the CPU's flags (default: this CPU's); ``env``: the value of ``FBGEMM_ENABLE_INSTRUCTIONS``
    (default: this process's), which can only hold FBGEMM lower than the CPU allows."""
    if flags is None:
        flags = hardware.cpu_flags()
    if not isinstance(flags, (set, frozenset)):
        raise TypeError(f"flags must be a set of CPU flag names, got {type(flags).__name__}")
    if (architecture or platform.machine()).lower() not in _X86:
        return "none"
    flags = {f.lower() for f in flags}
    best = "none"
    if {"avx2", "fma"} <= flags:
        best = "AVX2"
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        best = "AVX-512"
        if any(INT8_UNITS.get(f) == "AVX-512 VNNI" for f in flags):
            best = "AVX-512 VNNI"
    held = _FBGEMM_LEVELS.get((os.environ.get(_FBGEMM_ENV, "") if env is None else env).strip().upper())
    return min(best, held, key=_ORDER.index) if held and best != "none" else best


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Hold back torch.ao's deprecation warnings: the notebook says it once, in prose."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)


def pytorch_int8_problem() -> str | None:
    """Why PyTorch's own int8 path cannot run here (None when it can): this torch lacks
    ``torch.ao.quantization.quantize_dynamic`` (removed after its deprecation) or has no quantized engine."""
    try:
        from torch.ao.quantization import quantize_dynamic  # noqa: F401
    except ImportError:
        return (
            "this torch has no torch.ao.quantization.quantize_dynamic (deprecated in torch 2.10 and since "
            "removed): torchao's int8 (the rows above) is the path that remains"
        )
    engines = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if not engines:
        return "this torch build has no quantized engine (FBGEMM on x86, QNNPACK on Arm)"
    return None


def pytorch_int8_dynamic(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose Linear layers keep int8 weights (one scale per output row) and quantize their
    input on every call, through PyTorch's own engine (``torch.ao.quantization.quantize_dynamic``: FBGEMM on
    x86, QNNPACK on Arm). The copy runs on the CPU. Raises RuntimeError where ``pytorch_int8_problem`` says why."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    problem = pytorch_int8_problem()
    if problem:
        raise RuntimeError(problem)
    from torch.ao.quantization import quantize_dynamic

    source = copy.deepcopy(model).cpu().float().eval()
    with _quiet():
        return quantize_dynamic(source, {nn.Linear}, dtype=torch.qint8, inplace=True)


def product_profile(model: nn.Module, batch: int, *, calls: int = 3) -> tuple[str, float, float]:
    """Where a model's time goes (notebook 05.2, section 4): ``(op, share, rate)`` for the op with the most
    self time under ``torch.profiler`` over ``calls`` calls on a ``batch`` of random inputs (on this process's
    thread setting), its share of all the ops' time, and the multiply-adds per second the model's Linear layers
    reach if all of them run in that op (batch x in x out per layer). A matrix-product op far below the rate
    of another path on the same CPU points at a kernel that does not use the CPU's vector instructions."""
    from torch.profiler import ProfilerActivity, profile

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    n, calls = arguments.positive_int("batch", batch), arguments.positive_int("calls", calls)
    linears = [m for m in model.modules() if hasattr(m, "in_features") and hasattr(m, "out_features")]
    if not linears:
        raise ValueError("model has no Linear layers (modules with in_features and out_features) to count")
    x = torch.randn(n, linears[0].in_features)
    with torch.no_grad():
        model(x)  # the first call may prepare weights or caches: not profiled
        prof = profile(activities=[ProfilerActivity.CPU])
        with quiet_native_stderr():
            prof.start()
        try:
            for _ in range(calls):
                model(x)
        finally:
            with quiet_native_stderr():
                prof.stop()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    top = max(events, key=lambda e: e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    macs = calls * n * sum(m.in_features * m.out_features for m in linears)
    return top.key, top.self_cpu_time_total / total, macs / (top.self_cpu_time_total * 1e-6)


def read_bandwidth(n_bytes: int = 256 * 2**20, *, num_threads: int | None = None, min_run_time: float = 0.2) -> float:
    """Bytes/s of reading one buffer of ``n_bytes`` (summing it: one read per byte, nothing written) on ``num_threads``
    threads (default: torch's setting): the rate a batch-1 matrix product needs, since it reads each weight once and
    writes almost nothing. Pick ``n_bytes`` well above the last-level cache (default 256 MiB)."""
    n = arguments.integer("n_bytes", n_bytes, minimum=1024) // 4
    threads = None if num_threads is None else arguments.positive_int("num_threads", num_threads)
    buffer = torch.ones(n)
    t = timing.time_fn(buffer.sum, label="read", min_run_time=min_run_time, num_threads=threads)
    return timing.achieved_bandwidth(n * 4, t.seconds)


def _weight_stack(n_params: int, width: int = 1024, *, seed: int = 0) -> nn.Sequential:
    """Square bias-free Linear layers of ``width`` (default 1024: 4 MiB each in fp32, within most CPUs' last-level
    cache) holding about ``n_params`` weights in fp32 (at least one layer):
    a stand-in for a model's weights at batch 1, where only their bytes matter."""
    n_params = arguments.integer("n_params", n_params, minimum=1)
    width = arguments.integer("width", width, minimum=8)
    gen = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(max(1, round(n_params / width**2))):
        layer = nn.Linear(width, width, bias=False)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(width, width, generator=gen) / width**0.5)
        layers.append(layer)
    return nn.Sequential(*layers).eval()


@dataclass
class Batch1Point:
    """One size of ``batch1_sweep``: fp32 weight bytes, and per kind (``fp32``, ``bf16``, ``int8``) the weight
    bytes read per call and the interleaved ``timing.Timing`` of one batch-1 forward pass."""

    n_params: int
    weight_bytes: dict[str, int]
    timings: dict[str, timing.Timing]

    def predicted_s(self, kind: str, bandwidth: float) -> float:
        """Seconds predicted for ``kind``: its weight bytes / ``bandwidth``."""
        return self.weight_bytes[kind] / bandwidth


_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}


def batch1_sweep(
    param_counts: Sequence[int],
    *,
    kinds: Sequence[str] = ("fp32", "bf16", "int8"),
    width: int = 1024,
    rounds: int = 3,
    min_run_time: float = 0.05,
    num_threads: int | None = None,
) -> list[Batch1Point]:
    """Time one batch-1 forward pass of ``_weight_stack(n)`` for each ``n`` in ``param_counts``, with its weights in
    each of ``kinds`` (fp32; bf16 weights and input; int8 weights through ``pytorch_int8_dynamic``), interleaved
    per size, on ``num_threads`` threads (default: torch's setting). Sizes are built one at a time and freed, so the
    largest sets the memory needed (7 bytes a weight)."""
    counts = arguments.int_list("param_counts", param_counts)
    threads = None if num_threads is None else arguments.positive_int("num_threads", num_threads)
    unknown = [k for k in kinds if k not in _BYTES]
    if unknown or not kinds:
        raise ValueError(f"kinds must be some of {tuple(_BYTES)}, got {list(kinds)}")
    if "int8" in kinds and pytorch_int8_problem():
        raise RuntimeError(pytorch_int8_problem())
    out = []
    for n in counts:
        fp32 = _weight_stack(n, width)
        x = torch.randn(1, width)
        models = {"fp32": (fp32, x)}
        if "bf16" in kinds:
            models["bf16"] = (copy.deepcopy(fp32).to(torch.bfloat16), x.to(torch.bfloat16))
        if "int8" in kinds:
            models["int8"] = (pytorch_int8_dynamic(fp32), x)
        models = {k: models[k] for k in kinds}
        weights = sum(p.numel() for p in fp32.parameters())

        def call(model: nn.Module, inp: torch.Tensor):
            return lambda: model(inp)

        with torch.inference_mode():
            timed = timing.compare_interleaved(
                {k: call(m, i) for k, (m, i) in models.items()},
                rounds=rounds,
                min_run_time=min_run_time,
                num_threads=threads,
            )
        out.append(Batch1Point(weights, {k: weights * _BYTES[k] for k in kinds}, timed))
        del models, fp32
    return out


def ms_per_token(n_params: float, bytes_per_weight: float, bandwidth: float) -> float:
    """Milliseconds to generate one token at batch 1 if every weight is read once from memory at ``bandwidth``
    bytes/s (a decoder reads all its weights per token; the cache of keys and values is left out)."""
    for name, value in (("n_params", n_params), ("bytes_per_weight", bytes_per_weight), ("bandwidth", bandwidth)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return 1e3 * n_params * bytes_per_weight / bandwidth


def largest_model_within(budget_ms: float, bytes_per_weight: float, bandwidth: float) -> float:
    """Parameters of the largest model whose weights can be read once within ``budget_ms`` at ``bandwidth``."""
    if not isinstance(budget_ms, (int, float)) or isinstance(budget_ms, bool) or budget_ms <= 0:
        raise ValueError(f"budget_ms must be a positive number, got {budget_ms!r}")
    return budget_ms / ms_per_token(1, bytes_per_weight, bandwidth)
