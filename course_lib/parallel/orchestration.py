"""Orchestration: a training job's steps in dependency order, with retries and a record (notebook 06.4).

    steps = digits_job(steps=30)                      # prepare data -> train -> evaluate -> export
    record = run_pipeline(steps, "runs/job")          # runs what is missing, retries, writes run_record.json
    record = run_pipeline(steps, "runs/job")          # again: every step's outputs exist, all skipped

A :class:`Step` names the files it writes (``outputs``, relative to the work directory) and the steps it
needs (``deps``). :func:`pipeline_order` checks the graph (unknown dependencies and cycles are a
ValueError naming them) and orders it; :func:`run_pipeline` runs each step, retries a failing one with
back-off, skips a step whose outputs are all there (unless a step it depends on ran again), and writes what
happened to a JSON record: step, status, attempts, start and end times, outputs with their sizes, errors.

The same job for managed orchestrators, as text that is checked but never submitted:
:func:`vertex_custom_job` (a Vertex AI CustomJob: worker pools of machines running the training script
under torchrun) with :func:`validate_vertex_job`, and :func:`kubeflow_pipeline` (a pipeline spec in the shape
of Kubeflow Pipelines v2's compiled YAML) with :func:`validate_kubeflow_pipeline`. Inside the "train" step,
torchrun's elastic agent is the orchestrator of the workers (``torchrun_launch.run_torchrun``).

Those parts live in ``job_steps`` (the local runner), ``vertex_job`` and ``kubeflow_job``, and are re-exported
here; this module holds the digits job and is what every step's container runs
(``python -m course_lib.parallel.orchestration``).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import arguments
from ..files import write_atomic
from .job_steps import Step, TransientError, flaky, pipeline_order, run_pipeline
from .kubeflow_job import kubeflow_pipeline, to_yaml, validate_kubeflow_pipeline
from .vertex_job import (
    ACCELERATORS,
    MACHINE_TYPES,
    cluster_env,
    torchrun_env_from_cluster_spec,
    validate_vertex_job,
    vertex_custom_job,
)

__all__ = [
    "Step",
    "pipeline_order",
    "run_pipeline",
    "flaky",
    "TransientError",
    "digits_job",
    "vertex_custom_job",
    "validate_vertex_job",
    "cluster_env",
    "kubeflow_pipeline",
    "validate_kubeflow_pipeline",
    "to_yaml",
    "torchrun_env_from_cluster_spec",
    "MACHINE_TYPES",
    "ACCELERATORS",
]


# ----------------------------------------------------------------------------------------------
# the digits job: prepare data -> train -> evaluate -> export


def _prepare(workdir: Path) -> None:
    from .train_script import prepare_data

    prepare_data(workdir / "data.pt")


def _train_args(workdir: Path, steps: int, extra: Sequence[str]) -> list[str]:
    return ["--run-dir", str(workdir / "run"), "--data", str(workdir / "data.pt"), "--steps", str(steps), *extra]


@dataclass(frozen=True)
class _Train:
    steps: int
    extra: tuple[str, ...]
    nproc: int

    def __call__(self, workdir: Path) -> None:
        from . import torchrun_launch, train_script

        args = _train_args(workdir, self.steps, self.extra)
        if self.nproc == 1:
            train_script.main(args)
        else:  # torchrun's elastic agent runs the workers (and restarts them after a failure)
            torchrun_launch.run_torchrun(args[2:], workdir / "run", nproc_per_node=self.nproc, max_restarts=2)


@dataclass(frozen=True)
class _Evaluate:
    steps: int
    hidden: int

    def __call__(self, workdir: Path) -> None:
        import torch

        from ..train import evaluate
        from . import fault_tolerance as ft
        from .train_script import load_data, make_model

        state = ft.load_checkpoint(ft.checkpoint_path(workdir / "run" / "checkpoints", self.steps))
        model = make_model(self.hidden)
        model.load_state_dict(state["model"])
        d = load_data(workdir / "data.pt")
        metrics = evaluate(model, torch.utils.data.TensorDataset(d["x_test"], d["y_test"]))
        write_atomic(workdir / "metrics.json", json.dumps({"steps": self.steps, **metrics}, indent=1))


@dataclass(frozen=True)
class _Export:
    steps: int
    hidden: int

    def __call__(self, workdir: Path) -> None:
        import torch

        from . import fault_tolerance as ft

        state = ft.load_checkpoint(ft.checkpoint_path(workdir / "run" / "checkpoints", self.steps))
        model = {
            "state_dict": state["model"],
            "hidden": self.hidden,
            "metrics": json.loads((workdir / "metrics.json").read_text()),
        }
        write_atomic(workdir / "model.pt", lambda f: torch.save(model, f))


def digits_job(
    steps: int = 30,
    *,
    hidden: int = 256,
    nproc: int = 1,
    train_args: Sequence[str] = (),
    retries: int = 2,
    export_failures: int = 0,
) -> list[Step]:
    """The course's training job as four steps: ``prepare`` (data.pt), ``train`` (the training script, in
    this process for ``nproc == 1``, else under torchrun), ``evaluate`` (metrics.json) and ``export``
    (model.pt, weights only). ``export_failures`` makes the export fail that many times first, to show a
    retry. Notebook 06.4."""
    steps = arguments.positive_int("steps", steps)
    nproc = arguments.positive_int("nproc", nproc)
    extra = ("--hidden", str(arguments.positive_int("hidden", hidden)), *train_args)
    ck = f"run/checkpoints/ckpt-{steps:08d}.pt"
    export: Callable[[Path], Any] = _Export(steps, hidden)
    if export_failures:
        export = flaky(export, export_failures)
    return [
        Step("prepare", _prepare, ("data.pt",)),
        Step("train", _Train(steps, tuple(extra), nproc), (ck,), deps=("prepare",), retries=retries),
        Step("evaluate", _Evaluate(steps, hidden), ("metrics.json",), deps=("train",)),
        Step("export", export, ("model.pt",), deps=("evaluate",), retries=retries, retry_delay=0.05),
    ]


def _main(argv: Sequence[str] | None = None) -> None:
    """Run one step of :func:`digits_job` (what each Kubeflow container runs)."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m course_lib.parallel.orchestration",
        description="Run one step of the digits job (prepare, train, evaluate, export).",
    )
    p.add_argument("--step", choices=["prepare", "train", "evaluate", "export"])
    p.add_argument("--workdir", help="storage every step sees (e.g. a mounted bucket)")
    p.add_argument("--steps", type=int, default=30, help="training steps")
    p.add_argument(
        "--cluster-env",
        type=int,
        metavar="MACHINES",
        help="print `export` lines for torchrun's MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK on a job of "
        "MACHINES machines (from the environment or CLUSTER_SPEC), or stop with the reason",
    )
    args = p.parse_args(argv)
    if args.cluster_env is not None:
        import sys

        try:
            env = cluster_env(os.environ, args.cluster_env)
        except ValueError as exc:
            print(f"cluster-env: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))
        return
    if args.step is None or args.workdir is None:
        p.error("--step and --workdir are required (or --cluster-env)")
    step = {s.name: s for s in digits_job(args.steps)}[args.step]
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if step.outputs and all((workdir / out).exists() for out in step.outputs):  # run_pipeline's check: a retried
        print(f"{step.name}: its outputs are in {workdir} already, skipped")  # task whose work is done
        return
    step.fn(workdir)


if __name__ == "__main__":
    _main()
