"""Quantization for real: int8 copies of a model through torchao, compiled and timed (notebook 05.2, section 4).

``int8_dynamic`` and ``int8_weight_only`` return quantized copies; ``torchao_problem`` / ``torchao_ready`` say
what to install when torchao is missing or too old; ``dequantized_weights`` and ``predicted_int8_bytes`` set them
beside the fake quantization written by hand (``compression.fake_quant``). ``compile_timed`` reports compile time
apart from per-call time (``compile_ready``: whether ``torch.compile`` can build kernels here); ``latency`` times
models interleaved. Which int8 instructions a CPU offers is ``compression.int8_cpu``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import importlib.metadata
import io
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType

import torch
from torch import nn

from .. import arguments, hardware, timing

__all__ = [
    "torchao_problem",
    "torchao_ready",
    "int8_dynamic",
    "int8_weight_only",
    "dequantized_weights",
    "predicted_int8_bytes",
    "ROW_BYTES",
    "row_bytes",
    "Compiled",
    "compile_timed",
    "compile_ready",
    "latency",
]


def _model(model: nn.Module) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return model


_TORCHAO_MIN_VERSION = (0, 10)
_INSTALL = "pip install -U torchao  (its release must match your torch: see https://github.com/pytorch/ao#installation)"
_QUIET_LOGGERS = ("torchao", "torch.utils._pytree", "torch.utils.cpp_extension")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Hold back what importing torchao prints: "Failed to load ... .so" (its optional CUDA kernels), torch's pytree
    deprecation notice and a CUDA build's "No CUDA runtime is found" (all through logging), and any warning, so no
    notebook shows stderr."""
    levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _version(text: str) -> tuple[int, ...]:
    """'0.18.0+cpu' -> (0, 18, 0); '0.10.0.dev2025' -> (0, 10, 0)."""
    return tuple(int(p) for p in re.findall(r"\d+", re.match(r"[\d.]*", text).group(0))[:3])


_TORCHAO: list = []  # [module] once imported, [None, reason] when it cannot be used


def _load_torchao() -> ModuleType | None:
    if not _TORCHAO:
        try:
            found = importlib.metadata.version("torchao")
        except importlib.metadata.PackageNotFoundError:
            _TORCHAO.extend([None, f"torchao is not installed. To run the int8 cells: {_INSTALL}"])
            return None
        if _version(found) < _TORCHAO_MIN_VERSION:
            need = ".".join(map(str, _TORCHAO_MIN_VERSION))
            _TORCHAO.extend([None, f"torchao {found} is too old (int8 configs need torchao >= {need}): {_INSTALL}"])
            return None
        try:
            with _quiet():
                module = importlib.import_module("torchao.quantization")
            for name in ("quantize_", "Int8DynamicActivationInt8WeightConfig", "Int8WeightOnlyConfig"):
                getattr(module, name)
        except Exception as exc:  # an import error, a torch it was not built for, a renamed API
            _TORCHAO.extend(
                [
                    None,
                    f"torchao {found} does not work with torch {torch.__version__} "
                    f"({type(exc).__name__}: {str(exc)[:200]}): {_INSTALL}",
                ]
            )
            return None
        _TORCHAO.append(module)
    return _TORCHAO[0]


def torchao_problem() -> str | None:
    """None when torchao's int8 API is usable here; otherwise why not and what to install (a lesson
    prints it and skips its int8 cells). Importing torchao happens here, with its import noise held back."""
    _load_torchao()
    return _TORCHAO[1] if len(_TORCHAO) > 1 else None


def torchao_ready() -> bool:
    """True when torchao's int8 API works here; otherwise prints why the cell skips and what to install
    (every int8 cell of notebook 05.2 starts with ``if quantization.torchao_ready():``)."""
    problem = torchao_problem()
    if problem is not None:
        print(f"Skipped (the hand-written quantization above needs only PyTorch): {problem}")
    return problem is None


def _cxx_compiler(platform: str | None = None, which=None) -> str | None:
    """The C++ compiler ``torch.compile``'s CPU back end (inductor) would call, or None: on Windows Microsoft's
    ``cl`` (from Visual Studio's Build Tools, found only in a developer prompt), elsewhere $CXX, g++ or clang++."""
    import shutil

    which = which or shutil.which
    system = platform or sys.platform
    if system == "darwin" and which is shutil.which and not _xcode_tools():
        return None  # /usr/bin/clang++ is a stub that only offers to install the Command Line Tools
    names = ("cl",) if system == "win32" else (os.environ.get("CXX", ""), "g++", "clang++", "c++")
    return next((path for name in names if name and (path := which(name))), None)


def _xcode_tools() -> bool:
    """Whether Apple's Command Line Tools (the real compiler behind /usr/bin/clang++) are installed."""
    import subprocess

    try:
        return subprocess.run(["xcode-select", "-p"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def compile_ready(device: torch.device | str = "cpu") -> bool:
    """True when ``torch.compile`` can build kernels for ``device`` here; otherwise prints why the compiled timings
    are left out (a CPU needs a C++ compiler; a GPU's kernels come from Triton, which PyTorch brings)."""
    if torch.device(device).type != "cpu" or _cxx_compiler() is not None:
        return True
    how = (
        "install Visual Studio's Build Tools (the C++ workload) and start Jupyter from a developer prompt"
        if sys.platform == "win32"
        else "run `xcode-select --install`"
        if sys.platform == "darwin"
        else "install g++ (e.g. `apt install g++`) or clang++"
    )
    print(
        f"Skipped: torch.compile builds CPU kernels with a C++ compiler, and none was found here; {how} to "
        "time the compiled model. The eager timings still run."
    )
    return False


def _quantized_copy(model: nn.Module, config_name: str) -> nn.Module:
    module = _load_torchao()
    if module is None:
        raise RuntimeError(_TORCHAO[1])
    out = copy.deepcopy(_model(model)).eval()
    with _quiet():
        module.quantize_(out, getattr(module, config_name)())
    return out


def int8_dynamic(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with int8 weights and activations quantized to int8 on every call (torchao's
    ``Int8DynamicActivationInt8WeightConfig``: per-row weight scales, per-token activation scales)."""
    return _quantized_copy(model, "Int8DynamicActivationInt8WeightConfig")


def int8_weight_only(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with int8 weights, dequantized inside the matrix product (torchao's
    ``Int8WeightOnlyConfig``): saves memory and bandwidth, computes in float."""
    return _quantized_copy(model, "Int8WeightOnlyConfig")


@dataclass
class Compiled:
    """A ``torch.compile``d model; seconds of the first call per input shape (compilation) and of the second."""

    module: Callable
    compile_s: dict[tuple[int, ...], float] = field(default_factory=dict)
    call_s: dict[tuple[int, ...], float] = field(default_factory=dict)

    @property
    def total_compile_s(self) -> float:
        return sum(self.compile_s.values())

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def _threads(threads: int | Mapping[int, int] | None, batch: int):
    """Run a batch of ``batch`` rows on its thread count (``threads``: one count, or {batch size: count})."""
    n = threads.get(batch) if isinstance(threads, Mapping) else threads
    return timing.num_threads_set(n) if n is not None else contextlib.nullcontext()


def compile_timed(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    *,
    threads: int | Mapping[int, int] | None = None,
    **compile_kwargs,
) -> Compiled:
    """``torch.compile(model)`` and call it once per example input (one compilation per shape: ``dynamic=False``
    unless given), timing the first call (compilation) apart from the second (notebook 05.2). ``threads`` (one
    count, or {batch size: count}) is baked into the compiled kernels. Compiler warnings are held back."""
    _model(model)
    if not example_inputs or not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise TypeError("example_inputs must be a non-empty list of tensors (one per input shape to compile for)")
    compiled = Compiled(torch.compile(model, **{"dynamic": False, **compile_kwargs}))
    for x in example_inputs:
        for record in (compiled.compile_s, compiled.call_s):
            start = time.perf_counter()
            with torch.no_grad(), _quiet(), _threads(threads, len(x)):
                compiled(x)
            hardware.synchronize(x.device)
            record[tuple(x.shape)] = time.perf_counter() - start
    return compiled


def latency(
    models_by_name: Mapping[str, Callable],
    batch_sizes: Sequence[int],
    in_features: int,
    *,
    device: torch.device | str = "cpu",
    threads: int | Mapping[int, int] | None = None,
    rounds: int = 3,
    min_run_time: float = 0.05,
    seed: int = 0,
) -> dict[int, dict[str, timing.Timing]]:
    """Time one forward pass (no gradients) of each model on a batch of each size, interleaved (A B A B ...,
    ``timing.compare_interleaved``) so drifts of the machine hit all alike (notebook 05.2, section 4). ``threads``:
    one count, or {batch size: count} (default: torch's current setting)."""
    if not isinstance(models_by_name, Mapping) or not models_by_name:
        raise ValueError("models_by_name must be a non-empty mapping name -> model")
    batch_sizes = arguments.int_list("batch_sizes", batch_sizes)
    in_features = arguments.positive_int("in_features", in_features)
    dev = hardware.as_device(device)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for n in batch_sizes:
        x = torch.randn(n, in_features, generator=gen).to(dev)
        fns = {k: functools.partial(_forward, m, x) for k, m in models_by_name.items()}
        count = threads.get(n) if isinstance(threads, Mapping) else threads
        out[n] = timing.compare_interleaved(
            fns, rounds=rounds, device=dev, min_run_time=min_run_time, num_threads=count
        )
    return out


@torch.no_grad()
def _forward(model: Callable, x: torch.Tensor) -> None:
    model(x)


def dequantized_weights(model: nn.Module) -> list[torch.Tensor]:
    """The float weights a quantized model computes with, one per Linear layer: torchao's int8 weights
    dequantized (``Int8Tensor.dequantize()``), plain weights as they are (notebook 05.2 compares torchao's
    rounding error with the hand-written one)."""
    out = []
    for layer in _model(model).modules():
        if isinstance(layer, nn.Linear):
            w = layer.weight
            # older torchao (for torch 2.6) wraps a dynamic int8 weight with the activation's quantizer
            w = getattr(w, "original_weight_tensor", w)
            out.append(
                (w.dequantize() if hasattr(w, "dequantize") and type(w) not in (torch.Tensor, nn.Parameter) else w)
                .detach()
                .float()
            )
    return out


#: Bytes per output row that the hand count gives an int8 weight besides its weights: one fp32 scale and one int8
#: zero point. What a library stores per row is its own choice and differs between torchao releases; ``row_bytes``
#: reads what the installed one stores.
ROW_BYTES = 5


def predicted_int8_bytes(model: nn.Module, row_bytes: int = ROW_BYTES) -> int:
    """Bytes of ``model`` with every Linear weight in int8, ``row_bytes`` per output row besides (a scale and a zero
    point), everything else in its own dtype: the size notebook 05.2 predicts before quantizing."""
    row_bytes = arguments.nonnegative_int("row_bytes", row_bytes)
    total = 0
    for layer in _model(model).modules():
        for name, p in layer.named_parameters(recurse=False):
            if isinstance(layer, nn.Linear) and name == "weight":
                total += p.numel() + row_bytes * p.shape[0]
            else:
                total += p.numel() * p.element_size()
    return total


def row_bytes(model: nn.Module) -> int:
    """Bytes per output row that a quantized model's int8 Linear weights hold besides one byte per weight (scales
    and zero points, as the installed torchao stores them). Raises ValueError when no Linear weight is quantized."""
    from .size import tensor_bytes

    per_row = set()
    for layer in _model(model).modules():
        w = getattr(layer, "weight", None)
        if isinstance(layer, nn.Linear) and type(w) not in (torch.Tensor, nn.Parameter):
            per_row.add((tensor_bytes(w) - w.numel()) / w.shape[0])
    if not per_row:
        raise ValueError("model has no quantized Linear weight: pass a copy made by int8_dynamic or int8_weight_only")
    if len(per_row) > 1:
        raise ValueError(f"the quantized layers store different bytes per row: {sorted(per_row)}")
    if not float(next(iter(per_row))).is_integer():
        raise ValueError(f"the quantized layers store {per_row.pop():g} bytes per row, not a whole number (per-group?)")
    return int(per_row.pop())
