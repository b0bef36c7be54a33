"""Making a model smaller and cheaper to run (module 05: notebooks 05.1-05.4).

================  ============================================================================
``size``          what a model costs: bytes on disk (``state_dict_bytes``), bytes in memory
                  (``memory_bytes``, quantized tensors included), ``sparsity``, ``count_parameters``
``pruning``       magnitude pruning on ``torch.nn.utils.prune`` (unstructured, global, channels),
                  sparsity reports, making it permanent, removing units for real, a sparse format
``fake_quant``    fake quantization written by hand (any bit width, symmetric or affine, per tensor
                  or per channel), its error, quantization-aware training
``quantization``  real int8 through torchao: int8 copies of a model, compiled and timed
``int8_cpu``      int8 on a CPU: the table of int8 instructions and which ones FBGEMM and torchao
                  use here, PyTorch's own int8 path, batch-1 latency as weight bytes / memory bandwidth
``distillation``  the distillation loss (soft targets at a temperature plus the hard loss), and a
                  loss object the shared training step calls with the batch's inputs
``lowrank``       SVD factorisation of Linear layers at a rank or an energy fraction
``layers``        efficient layers: depthwise separable convolution, linear attention, and their
                  parameter, FLOP and byte counts
``compare``       every technique on one trained model: size, latency, accuracy (``measure``), and
                  which to reach for first under a memory, latency or bandwidth limit (``best_variant``)
================  ============================================================================

The parts load on first use (``compression.pruning`` imports ``pruning``), so importing the
package does not import torchao.
"""

from __future__ import annotations

from ..lazy import parts_loader

PARTS = ("size", "pruning", "fake_quant", "quantization", "int8_cpu", "distillation", "lowrank", "layers", "compare")
__all__ = list(PARTS)
__getattr__, __dir__ = parts_loader(__name__, PARTS, globals())
