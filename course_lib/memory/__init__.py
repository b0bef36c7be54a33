"""Where the memory of a training step goes: estimates next to measurements (notebook 02).

One import for the whole memory toolkit; each part lives in its own file:

================  ============================================================================
``estimator``     ``estimate_training_memory``: one forward pass, a simulated backward pass and
                  the optimizer, phase by phase, without training (``MemoryEstimate``);
                  ``plausible_bugs``: what six wrong estimators would report;
                  ``conv_scratch_not_modelled``: where a convolution's scratch is left out
``meters``        ``measure_peak_memory``, ``measure_training_memory`` (live tensor bytes and the
                  resident peak), ``measure_activation_bytes_per_example`` (what the forward
                  keeps, per example), ``measure_allocator_peak`` and ``allocator_kept`` (the
                  allocator's own count, independent of the estimator), ``estimate_against_allocator``,
                  ``memtracker_peak``, ``storage_bytes``
``activation_checkpointing`` ``apply_activation_checkpointing``, ``CheckpointedBlock``
``formulas``      ``model_states_bytes`` (ZeRO), ``transformer_activation_bytes`` (Korthikanti et
                  al.), ``largest_model_that_fits``, ``largest_model_per_accelerator``,
                  ``large_model_memory``, an MLP by hand (``mlp_parameters``,
                  ``mlp_activation_bytes``, ``mlp_largest_batch``)
``torch_internals`` the private PyTorch APIs the estimator needs, behind one adapter
``demos``         notebook 02's models (``demo_model``), printed tables (``estimate_table``,
                  ``largest_model_table``) and measuring loops (``peaks_against_batch``,
                  ``activation_bytes_per_example``, ``state_bytes_per_parameter``)
================  ============================================================================

Out-of-memory runs in a capped subprocess (``course_lib.memory.limit``) and data sets larger than
memory (``course_lib.memory.streaming``) are part of the same lesson, so their main entry points can be
reached from here too: ``memory.run_with_memory_limit``, ``memory.find_max_batch_size``,
``memory.StreamingDataset``.
"""

from __future__ import annotations

from .limit import LimitedRun, find_max_batch_size, run_with_memory_limit
from ..names import OPTIMIZERS, PRECISIONS
from .streaming import MemmapDataset, StreamingDataset
from . import torch_internals
from .activation_checkpointing import CheckpointedBlock, apply_activation_checkpointing
from .estimator import MemoryEstimate, conv_scratch_not_modelled, estimate_training_memory, plausible_bugs
from .formulas import (
    large_model_memory,
    largest_model_per_accelerator,
    largest_model_that_fits,
    mlp_activation_bytes,
    mlp_largest_batch,
    mlp_parameters,
    model_states_bytes,
    transformer_activation_bytes,
)
from .meters import (
    LiveTensorTracker,
    PeakMemory,
    allocator_kept,
    allocator_peak,
    estimate_against_allocator,
    estimator_misses,
    measure_activation_bytes_per_example,
    measure_allocator_peak,
    measure_peak_memory,
    measure_training_memory,
    memtracker_peak,
    storage_bytes,
)
from .saved import first_examples, saved_bytes_by_dtype, saved_for_backward
from .demos import (
    activation_bytes_per_example,
    demo_model,
    estimate_table,
    largest_model_table,
    peaks_against_batch,
    state_bytes_per_parameter,
)

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "MemoryEstimate",
    "estimate_training_memory",
    "plausible_bugs",
    "conv_scratch_not_modelled",
    "PeakMemory",
    "LiveTensorTracker",
    "measure_peak_memory",
    "measure_training_memory",
    "measure_activation_bytes_per_example",
    "allocator_peak",
    "estimator_misses",
    "estimate_against_allocator",
    "allocator_kept",
    "measure_allocator_peak",
    "memtracker_peak",
    "storage_bytes",
    "first_examples",
    "saved_bytes_by_dtype",
    "saved_for_backward",
    "CheckpointedBlock",
    "apply_activation_checkpointing",
    "model_states_bytes",
    "transformer_activation_bytes",
    "largest_model_that_fits",
    "largest_model_per_accelerator",
    "large_model_memory",
    "mlp_parameters",
    "mlp_activation_bytes",
    "mlp_largest_batch",
    "torch_internals",
    "LimitedRun",
    "run_with_memory_limit",
    "find_max_batch_size",
    "StreamingDataset",
    "MemmapDataset",
    "demo_model",
    "estimate_table",
    "largest_model_table",
    "peaks_against_batch",
    "state_bytes_per_parameter",
    "activation_bytes_per_example",
]
