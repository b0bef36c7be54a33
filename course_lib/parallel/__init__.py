"""Training on several processes or machines (module 06: notebooks 06.1-06.5).

==================  ==========================================================================
``data_parallel``   data parallelism with DDP and sharded data parallelism with ``fully_shard``
                    (FSDP2): results equal to one process, throughput for 1/2/4 ranks against the
                    interconnect module's model, memory per rank against the ZeRO formulas
``pipeline``        model parallelism (layers on different ranks, activations sent between them)
                    and pipeline parallelism with micro-batches (``torch.distributed.pipelining``,
                    GPipe and 1F1B); the bubble ``(p - 1) / (m + p - 1)``, measured and predicted
``pipeline_runner`` the ranks of a measured schedule, each pinned to a core of its own
``tensor_parallel`` one layer split across ranks with DTensor
``fault_tolerance`` atomic checkpoints (model, optimizer, RNG, data position), sharded ones with
                    ``torch.distributed.checkpoint``, resuming on the same trajectory, process-group
                    timeouts and retries
``train_script``    the training script that runs unchanged under ``torchrun``: one machine or
                    several, CPU or GPU, restarted after a failure
``torchrun_launch`` that script under ``torchrun`` from a notebook, a worker killed on purpose, its
                    logs read back and what the restart cost (re-exported by ``train_script``)
``orchestration``   the digits job as a small dependency-ordered pipeline, and the command each
                    step's container runs; re-exports the three parts below
``job_steps``       a job's steps in dependency order, with retries and a record of what ran
``vertex_job``      the same job for Vertex AI: a CustomJob spec, validated, and the cluster's
                    variables on each machine
``kubeflow_job``    the same job for Kubeflow Pipelines: a pipeline spec, validated, as YAML
``federated``       FedAvg over simulated clients (IID and non-IID), client sampling, bytes sent
==================  ==========================================================================

The parts load on first use (``parallel.pipeline`` imports ``pipeline``), so importing the package
stays light; worker functions live in these modules so that spawned ranks can import them.
"""

from __future__ import annotations

from ..lazy import parts_loader

PARTS = (
    "data_parallel",
    "pipeline",
    "pipeline_runner",
    "tensor_parallel",
    "fault_tolerance",
    "train_script",
    "torchrun_launch",
    "orchestration",
    "job_steps",
    "vertex_job",
    "kubeflow_job",
    "federated",
)
__all__ = list(PARTS)
__getattr__, __dir__ = parts_loader(__name__, PARTS, globals())
