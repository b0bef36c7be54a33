"""Making a model smaller and cheaper to run (module 05: notebooks 05.1-05.4).

================  ============================================================================
``size``          what a model costs: bytes on disk (``state_dict_bytes``), bytes in memory
                  (``memory_bytes``, quantized tensors included), ``sparsity``, ``count_parameters``
``pruning``       magnitude pruning on ``torch.nn.utils.prune`` (unstructured, global, channels),
                  sparsity reports, making it permanent, removing units for real, a sparse format
``quantization``  fake quantization written by hand (any bit width, symmetric or affine, per tensor
                  or per channel), quantization-aware training, real int8 through torchao
``distillation``  the distillation loss (soft targets at a temperature plus the hard loss), and a
                  loss object the shared training step calls with the batch's inputs
``lowrank``       SVD factorisation of Linear layers at a rank or an energy fraction
``layers``        efficient layers: depthwise separable convolution, linear attention, and their
                  parameter, FLOP and byte counts
``compare``       every technique on one trained model: size, latency, accuracy (``measure``), and
                  which to reach for first under a memory, latency or bandwidth limit (``recommend``)
================  ============================================================================

The parts load on first use (``compression.pruning`` imports ``pruning``), so importing the
package does not import torchao.
"""
from __future__ import annotations

import importlib
from types import ModuleType

PARTS = ("size", "pruning", "quantization", "distillation", "lowrank", "layers", "compare")
__all__ = list(PARTS)


def __getattr__(name: str) -> ModuleType:
    if name in PARTS:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its parts are {', '.join(PARTS)}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(PARTS))
