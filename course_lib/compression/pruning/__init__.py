"""Pruning: set the weights that matter least to zero, or remove whole units (notebook 05.1).

Built on ``torch.nn.utils.prune``, which keeps each pruned layer's original weight as
``weight_orig`` and a 0/1 ``weight_mask`` buffer, and recomputes ``weight = weight_orig * mask``
before every forward pass. Training a pruned model therefore keeps the pruned entries at zero by
itself: their gradient reaches ``weight_orig`` multiplied by 0.

* ``magnitude_mask``: the rule written out (the reference for exercise 05).
* ``prune_unstructured`` (each layer), ``prune_global`` (one threshold over the whole model) and
  ``prune_channels`` (whole output units or channels, by their L2 norm, *and* the next layer's weights
  that read them): masks only, the shapes stay.
* ``sparsity_report`` (zeros, and the weights that are not zero but only ever multiply a removed unit's
  output, which is always 0: what is really removed) and ``make_permanent`` (bake the zeros into
  ``.weight``, drop the masks).
* ``remove_units``: a new, really smaller model without the weakest hidden units.
* ``sensitivity_scan``: each layer pruned alone at rising sparsity, accuracy measured (which layers
  tolerate pruning).
* ``SparseLinear`` / ``to_sparse``: the weights stored in a sparse format (CSR), multiplied with
  ``torch.sparse.mm`` so that only the non-zeros are stored and multiplied.
* ``accuracy_sweep`` and ``speed_models``: the notebook's experiments (accuracy against sparsity
  with and without fine-tuning; dense, zeros, shrunk and sparse models to time side by side).

Zeros in a dense tensor save nothing by themselves: the file and the memory keep every entry, and
a dense matrix product multiplies the zeros like any other number. A smaller shape saves both; a
sparse format saves only at high sparsity (it stores an index with every value).

Each part lives in its own file: ``masks`` (the rule, the masks, ``copy_model``, ``make_permanent``),
``chains`` (the layers pruning follows), ``report``, ``shrink``, ``sparse`` and ``experiments``.
"""

from __future__ import annotations

from .chains import PRUNABLE
from .experiments import (
    PRUNERS,
    Sensitivity,
    accuracy_sweep,
    inference_fn,
    norm_removed,
    sensitivity_scan,
    speed_models,
)
from .masks import (
    copy_model,
    effective_weight,
    magnitude_mask,
    make_permanent,
    prunable_layers,
    prune_channels,
    prune_global,
    prune_unstructured,
)
from .report import LayerSparsity, SparsityReport, sparsity_report
from .shrink import remove_units
from .sparse import SparseLinear, csr_bytes, sparse_device, to_sparse, useful_flops

__all__ = [
    "PRUNABLE",
    "magnitude_mask",
    "prunable_layers",
    "prune_unstructured",
    "prune_global",
    "prune_channels",
    "LayerSparsity",
    "SparsityReport",
    "sparsity_report",
    "make_permanent",
    "effective_weight",
    "copy_model",
    "remove_units",
    "SparseLinear",
    "sparse_device",
    "csr_bytes",
    "to_sparse",
    "useful_flops",
    "norm_removed",
    "PRUNERS",
    "accuracy_sweep",
    "Sensitivity",
    "sensitivity_scan",
    "speed_models",
    "inference_fn",
]
