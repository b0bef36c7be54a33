"""Watching a training run: where a step's time goes, what it uses, and its curves (notebook 07.2).

Five parts: ``resources`` (sampling), ``profiler`` (traces, bottlenecks), ``scenarios`` (steps with a known
bottleneck), ``overlap`` (DDP against data parallelism by hand), ``curves`` (TensorBoard); everything is
importable from ``course_lib.benchmark.monitor`` directly.

* ``ResourceSampler``: a background thread that samples, every ``interval`` seconds, this process's
  CPU use (% of one core, so two busy threads read about 200 %), every core's use, the process's
  resident memory (RSS) and the system's used memory; on a CUDA device also
  ``torch.cuda.memory_allocated`` and the GPU's utilisation (``torch.cuda.utilization``, which
  needs the nvidia-ml-py package; otherwise ``nvidia-smi`` asked about this device by its UUID).
  ``plots.resource_use`` draws the samples of one or more runs.
* ``profile_training_step``: a few training steps under ``torch.profiler.profile`` with the phases
  labelled (``input``, ``forward``, ``communication`` by ``record_function``; ``backward`` and
  ``optimizer`` from the labels PyTorch itself records), a Chrome trace written to a file, and the
  time sorted into **compute** (matmul, convolution), **memory** (copies, elementwise ops,
  reductions, allocation), **input** (the data loading region), **communication** (c10d, gloo and
  NCCL collectives) and **overhead** (Python and framework time between operators); the largest
  share is the bottleneck (``find_bottleneck``).
* ``SCENARIOS`` / ``run_scenario``: training steps built so that their bottleneck is known in
  advance (a slow input pipeline, a matmul-heavy MLP, a two-rank data-parallel step whose gradient
  exchange dominates), so the classifier can be checked against the design; ``step_flops`` counts
  a training step's matrix-product FLOPs exactly (the input batch needs no gradient).
* ``ddp_overlap``: the two-rank step by hand (blocking all-reduces after backward) beside
  ``DistributedDataParallel`` (bucketed all-reduces launched during backward), with the share of the
  communication hidden under the backward computation (``hidden_share``).
* ``tensorboard_log`` writes a short real run's loss, accuracy, throughput and resource use as
  TensorBoard scalars; ``read_scalars`` reads them back; ``tensorboard_instructions`` says how to
  open them (a terminal, Colab, Vertex AI Workbench).
"""

from __future__ import annotations

from .curves import LoggedRun, read_scalars, tensorboard_instructions, tensorboard_log
from .overlap import ddp_overlap, ddp_overlap_worker, hidden_share
from .profiler import CATEGORIES, LABELS, StepProfile, find_bottleneck, op_category, profile_training_step
from .resources import MIB, ResourceSampler, Sample, data_dir, release_free_memory, sample_training
from .scenarios import SCENARIOS, Scenario, communication_worker, run_scenario, step_flops

__all__ = [
    "Sample",
    "ResourceSampler",
    "data_dir",
    "MIB",
    "release_free_memory",
    "sample_training",
    "CATEGORIES",
    "LABELS",
    "op_category",
    "StepProfile",
    "find_bottleneck",
    "profile_training_step",
    "Scenario",
    "SCENARIOS",
    "run_scenario",
    "step_flops",
    "communication_worker",
    "ddp_overlap",
    "ddp_overlap_worker",
    "hidden_share",
    "tensorboard_log",
    "read_scalars",
    "tensorboard_instructions",
    "LoggedRun",
]
