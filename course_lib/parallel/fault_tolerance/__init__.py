"""Fault tolerance: checkpoints that survive a crash, resuming on the same trajectory, timeouts and
retries (notebook 06.3; the training script of notebook 06.4 builds on it).

    state = capture_state(model, optimizer, {"epoch": 0, "batch": 7, "seed": 0})
    save_checkpoint(checkpoint_path("runs/ckpt", step=7), state, keep=3)
    ...                                       # a crash, a restart, fresh objects
    state = load_latest("runs/ckpt")          # None when there is no checkpoint yet
    position = restore_state(state, model, optimizer)

A checkpoint holds everything the next step depends on: the model's and the optimizer's state
dicts, every random number generator (torch, numpy, Python's ``random``, CUDA where present) and the
data position (epoch, batch, the shuffle seed: :class:`ShuffledBatches` then yields the same
batches). Writes are atomic (a temporary file in the same directory, flushed and fsynced, then
``os.replace``), so a process killed mid-write leaves the previous checkpoint as it was. Every file
carries a SHA-256 digest of its content: a truncated *or* bit-flipped file is refused with
:class:`CheckpointError` naming it, and :func:`load_latest` falls back to the previous good one.
Everything loads with ``torch.load(weights_only=True)``: RNG states are stored as tensors and
plain numbers, never as pickled numpy objects.

Parts: ``checkpoint`` (the files), ``demos`` (the notebook's experiments: resuming in a fresh
process, a writer killed mid-write, sharded checkpoints with ``torch.distributed.checkpoint`` on 2
ranks, a process-group timeout detecting a stuck peer) and ``robust`` (:func:`retry` with
exponential back-off, redundancy, the cost of checkpointing and the best interval between them).
"""

from __future__ import annotations

from .checkpoint import *  # noqa: F403
from .checkpoint import __all__ as _checkpoint_all
from .demos import *  # noqa: F403
from .demos import __all__ as _demos_all
from .robust import *  # noqa: F403
from .robust import __all__ as _robust_all

__all__ = [*_checkpoint_all, *_demos_all, *_robust_all]
