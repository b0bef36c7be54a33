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
torchrun's elastic agent is the orchestrator of the workers (``train_script.run_torchrun``).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import arguments, catalog
from ..files import write_atomic

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

RECORD = "run_record.json"


# ----------------------------------------------------------------------------------------------
# the local pipeline


@dataclass(frozen=True)
class Step:
    """One step: ``fn(workdir)`` writes ``outputs`` (paths relative to the work directory) after the steps
    in ``deps`` have run; a failure is tried again up to ``retries`` times, waiting ``retry_delay`` seconds,
    doubled each time."""

    name: str
    fn: Callable[[Path], Any]
    outputs: tuple[str, ...]
    deps: tuple[str, ...] = ()
    retries: int = 0
    retry_delay: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty string, got {self.name!r}")
        arguments.function("fn", self.fn)
        for field, value in (("outputs", self.outputs), ("deps", self.deps)):
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"{field} of step {self.name!r} must be a tuple of strings, got {value!r}")
        if not self.outputs:
            raise ValueError(f"step {self.name!r} must name at least one output file (how else to tell it is done?)")
        arguments.nonnegative_int("retries", self.retries)
        arguments.nonnegative("retry_delay", self.retry_delay)


def pipeline_order(steps: Sequence[Step]) -> list[str]:
    """The step names in an order that runs every dependency first (ties keep the given order).

    ValueError for duplicate names, a dependency that is not a step, or a cycle (naming its steps)."""
    if not isinstance(steps, Sequence) or not all(isinstance(s, Step) for s in steps):
        raise TypeError("steps must be a list of Step")
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names must be unique, got {names}")
    for s in steps:
        unknown = [d for d in s.deps if d not in names]
        if unknown:
            raise ValueError(f"step {s.name!r} depends on {unknown}, which are not steps; the steps are {names}")
    return _topological({s.name: list(s.deps) for s in steps})


def _topological(graph: Mapping[str, Sequence[str]]) -> list[str]:
    """Kahn's algorithm over ``{node: [nodes it depends on]}``; ValueError naming the nodes of a cycle."""
    left = {n: set(d) for n, d in graph.items()}
    order: list[str] = []
    while left:
        ready = [n for n in graph if n in left and not left[n]]
        if not ready:
            raise ValueError(f"the dependencies form a cycle among {sorted(left)}: each of them waits for another")
        for n in ready:
            order.append(n)
            del left[n]
        for deps in left.values():
            deps.difference_update(ready)
    return order


class TransientError(ConnectionError):
    """A failure that may pass when tried again (a network blip, a busy service): what retries are for."""


class flaky:  # noqa: N801 - used like a function: flaky(fn, failures=1)
    """``fn`` made to raise :class:`TransientError` on its first ``failures`` calls (a demo of retries)."""

    def __init__(self, fn: Callable[[Path], Any], failures: int = 1) -> None:
        self.fn = arguments.function("fn", fn)
        self.failures = arguments.nonnegative_int("failures", failures)
        self.calls = 0

    def __call__(self, workdir: Path) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientError(f"transient failure {self.calls} of {self.failures} (made on purpose)")
        return self.fn(workdir)


def run_pipeline(
    steps: Sequence[Step],
    workdir: str | os.PathLike,
    *,
    force: Sequence[str] = (),
    record: str = RECORD,
    sleep: Callable[[float], Any] = time.sleep,
) -> list[dict]:
    """Run the steps in dependency order in ``workdir``; return and write (``workdir/record``) one entry per
    step: ``step``, ``status`` ("ran", "skipped": outputs already there, "failed", "blocked": a dependency
    failed), ``attempts``, ``start``/``end`` (Unix times), ``seconds``, ``outputs`` ({path: bytes}) and
    ``errors``. A step in ``force`` runs even when its outputs exist. Notebook 06.4."""
    order = pipeline_order(steps)
    by_name = {s.name: s for s in steps}
    unknown = [f for f in force if f not in by_name]
    if unknown:
        raise ValueError(f"force names {unknown}, which are not steps; the steps are {order}")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    status: dict[str, str] = {}
    entries = []
    for name in order:
        step = by_name[name]
        paths = [workdir / o for o in step.outputs]
        entry: dict[str, Any] = {
            "step": name,
            "deps": list(step.deps),
            "attempts": 0,
            "errors": [],
            "start": time.time(),
        }
        if any(status[d] in ("failed", "blocked") for d in step.deps):
            entry["status"] = "blocked"
        elif name not in force and all(p.exists() for p in paths) and not any(status[d] == "ran" for d in step.deps):
            entry["status"] = "skipped"
        else:
            entry["status"] = _run_step(step, workdir, paths, entry, sleep)
        entry["end"] = time.time()
        entry["seconds"] = entry["end"] - entry["start"]
        entry["outputs"] = {
            o: (p.stat().st_size if p.is_file() else None) for o, p in zip(step.outputs, paths) if p.exists()
        }
        status[name] = entry["status"]
        entries.append(entry)
    write_atomic(workdir / record, json.dumps(entries, indent=1))
    return entries


def _run_step(
    step: Step, workdir: Path, paths: list[Path], entry: dict[str, Any], sleep: Callable[[float], Any]
) -> str:
    """Run one step with ``fault_tolerance.retry`` (any exception is retried: a step's failure is recorded, not
    raised); ``entry`` gets its attempts and errors. Returns "ran" or "failed"."""
    from .fault_tolerance.robust import retry

    def attempt() -> None:
        entry["attempts"] += 1
        step.fn(workdir)
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise RuntimeError(f"step {step.name!r} finished without writing {missing}")

    def failed(number: int, exc: BaseException, delay: float = 0.0) -> None:
        entry["errors"].append(f"attempt {number}: {type(exc).__name__}: {exc}")

    try:  # waits retry_delay, doubled after each failure (factor 2), before the next attempt
        retry(
            attempt,
            attempts=step.retries + 1,
            backoff=step.retry_delay,
            retry_on=Exception,
            on_retry=failed,
            sleep=sleep,
        )
    except Exception as exc:  # noqa: BLE001 - recorded, then reported as "failed"
        failed(entry["attempts"], exc)
        return "failed"
    return "ran"


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
        from . import train_script

        args = _train_args(workdir, self.steps, self.extra)
        if self.nproc == 1:
            train_script.main(args)
        else:  # torchrun's elastic agent runs the workers (and restarts them after a failure)
            train_script.run_torchrun(args[2:], workdir / "run", nproc_per_node=self.nproc, max_restarts=2)


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


# ----------------------------------------------------------------------------------------------
# the same job for Vertex AI: a CustomJob spec

# Machine types and the accelerators each takes: the cited table tables/vertex_machines.json (a selection, not every
# type). MACHINE_TYPES: {machine type: (the accelerator it takes, or its series ("N1") where any of several attach, or
# None for CPU only; the accelerator counts it takes)}.
_MACHINES = {m.key: m for m in catalog.vertex_machines()}
MACHINE_TYPES: dict[str, tuple[str | None, tuple[int, ...]]] = {
    key: (
        m.accelerators[0] if len(m.accelerators) == 1 else m.kind.upper() if m.accelerators else None,
        m.accelerator_counts,
    )
    for key, m in _MACHINES.items()
}
N1_GPUS = catalog.vertex_machines("n1")[0].accelerators
ACCELERATORS = tuple(sorted({a for m in _MACHINES.values() for a in m.accelerators}))
# Every machine first takes the cluster's variables from the environment (Vertex AI's PyTorch containers set them)
# or from CLUSTER_SPEC (set everywhere, also in an image of your own), and stops if it finds neither: with a
# default of one machine, N replicas would each train alone into the same run directory.
_TORCHRUN_ON_VERTEX = (
    "cluster=$(python -m course_lib.parallel.orchestration --cluster-env {machines}) || exit 1; "
    'eval "$cluster"; '
    "torchrun --nnodes=$WORLD_SIZE --node-rank=$RANK --nproc-per-node={nproc} "
    "--master-addr=$MASTER_ADDR --master-port=$MASTER_PORT --max-restarts=2 "
    "-m course_lib.parallel.train_script {args}"
)
CLUSTER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def vertex_custom_job(
    display_name: str,
    *,
    image_uri: str,
    script_args: Sequence[str],
    machine_type: str = "n1-standard-8",
    accelerator_type: str | None = None,
    accelerator_count: int = 0,
    replica_count: int = 1,
    output_uri: str | None = None,
) -> dict:
    """A Vertex AI CustomJob body (REST shape) that runs the training script under torchrun on
    ``replica_count`` machines: worker pool 0 is the primary replica (1 machine), pool 1 the other
    ``replica_count - 1``; each machine runs one process per GPU (one process on a CPU machine). Checked
    with :func:`validate_vertex_job` before it is returned; never submitted. Notebook 06.4."""
    replica_count = arguments.positive_int("replica_count", replica_count)
    nproc = max(1, arguments.nonnegative_int("accelerator_count", accelerator_count))
    machine: dict[str, Any] = {"machineType": machine_type}
    if accelerator_type is not None:
        machine.update(acceleratorType=accelerator_type, acceleratorCount=accelerator_count)
    command = (
        _TORCHRUN_ON_VERTEX.replace("{machines}", str(replica_count))
        .replace("{nproc}", str(nproc))
        .replace("{args}", shlex.join(script_args))
    )
    pool = {
        "machineSpec": machine,
        "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 100},
        "containerSpec": {"imageUri": image_uri, "command": ["sh", "-c", command]},
    }
    pools = [{**pool, "replicaCount": 1}]
    if replica_count > 1:
        pools.append({**pool, "replicaCount": replica_count - 1})
    job: dict[str, Any] = {"displayName": display_name, "jobSpec": {"workerPoolSpecs": pools}}
    if output_uri is not None:
        job["jobSpec"]["baseOutputDirectory"] = {"outputUriPrefix": output_uri}
    validate_vertex_job(job)
    return job


def validate_vertex_job(job: Mapping[str, Any]) -> None:
    """Check a CustomJob body; ValueError listing every problem (missing fields, the primary pool's
    replicaCount, unknown machine or accelerator names with the valid ones, an accelerator the machine type
    does not take, a container or Python package spec that is missing or incomplete)."""
    problems: list[str] = []
    if not isinstance(job, Mapping):
        raise TypeError(f"job must be a dict, got {type(job).__name__}")
    if not isinstance(job.get("displayName"), str) or not job.get("displayName"):
        problems.append("displayName is missing")
    pools = job.get("jobSpec", {}).get("workerPoolSpecs") if isinstance(job.get("jobSpec"), Mapping) else None
    if not isinstance(pools, list) or not pools:
        problems.append("jobSpec.workerPoolSpecs must be a non-empty list")
        pools = []
    if len(pools) > 4:
        problems.append(f"at most 4 worker pools (primary, workers, parameter servers, evaluators), got {len(pools)}")
    for i, pool in enumerate(pools):
        where = f"workerPoolSpecs[{i}]"
        if not isinstance(pool, Mapping):
            problems.append(f"{where} must be a dict")
            continue
        count = pool.get("replicaCount")
        if not isinstance(count, int) or count < 1 or (i == 0 and count != 1):
            problems.append(
                f"{where}.replicaCount must be {'1 (the primary replica)' if i == 0 else 'a positive int'}, "
                f"got {count!r}"
            )
        spec = pool.get("machineSpec", {})
        mtype, acc, n = spec.get("machineType"), spec.get("acceleratorType"), spec.get("acceleratorCount", 0)
        if mtype not in MACHINE_TYPES:
            problems.append(
                f"{where}.machineSpec.machineType {mtype!r} is not a known machine type; valid: "
                f"{', '.join(MACHINE_TYPES)}"
            )
        elif acc is not None:
            allowed, counts = _MACHINES[mtype].accelerators, _MACHINES[mtype].accelerator_counts
            if acc not in ACCELERATORS:
                problems.append(
                    f"{where}.machineSpec.acceleratorType {acc!r} is unknown; valid: {', '.join(ACCELERATORS)}"
                )
            elif acc not in allowed:
                problems.append(
                    f"{where}: {mtype} does not take {acc}; it takes {', '.join(allowed) or 'no accelerator'}"
                )
            elif n not in counts:
                problems.append(f"{where}.machineSpec.acceleratorCount must be one of {counts} for {mtype}, got {n!r}")
        containers = [k for k in ("containerSpec", "pythonPackageSpec") if k in pool]
        if len(containers) != 1:
            problems.append(f"{where} needs exactly one of containerSpec or pythonPackageSpec, got {containers}")
        elif containers[0] == "containerSpec" and not pool["containerSpec"].get("imageUri"):
            problems.append(f"{where}.containerSpec.imageUri is missing")
        elif containers[0] == "pythonPackageSpec":
            pkg = pool["pythonPackageSpec"]
            for key in ("executorImageUri", "packageUris", "pythonModule"):
                if not pkg.get(key):
                    problems.append(f"{where}.pythonPackageSpec.{key} is missing")
    if problems:
        raise ValueError("invalid Vertex AI CustomJob:\n- " + "\n- ".join(problems))


def torchrun_env_from_cluster_spec(cluster_spec: str | Mapping[str, Any]) -> dict[str, str]:
    """MASTER_ADDR, MASTER_PORT, WORLD_SIZE (machines) and RANK (this machine) from Vertex AI's
    ``CLUSTER_SPEC``: the names Vertex AI's PyTorch containers set and the command of
    :func:`vertex_custom_job` reads (``torchrun --nnodes=$WORLD_SIZE --node-rank=$RANK ...``, after
    :func:`cluster_env`), for a
    container of your own to export before that command. The primary replica (workerpool0) is the master,
    pool 1's replica i is machine 1 + i. (torchrun gives its workers their own per-process RANK and
    WORLD_SIZE.) Notebook 06.4."""
    spec = json.loads(cluster_spec) if isinstance(cluster_spec, str) else dict(cluster_spec)
    try:
        cluster, task = spec["cluster"], spec["task"]
        primary = cluster["workerpool0"][0]
        workers = cluster.get("workerpool1", [])
        kind, index = task["type"], int(task["index"])
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"cluster_spec needs cluster.workerpool0 and task.type/index, got {spec!r} ({exc})") from None
    if kind not in ("workerpool0", "workerpool1"):
        raise ValueError(f"task.type must be workerpool0 or workerpool1 for torchrun, got {kind!r}")
    host, _, port = primary.rpartition(":")
    return {
        "MASTER_ADDR": host,
        "MASTER_PORT": port,
        "WORLD_SIZE": str(1 + len(workers)),
        "RANK": str(0 if kind == "workerpool0" else 1 + index),
    }


def cluster_env(environ: Mapping[str, str], machines: int) -> dict[str, str]:
    """The four variables :func:`vertex_custom_job`'s command hands torchrun, for a job of ``machines`` machines:
    from the environment where all four are set (Vertex AI's PyTorch containers), else from ``CLUSTER_SPEC``
    (:func:`torchrun_env_from_cluster_spec`), else, for one machine only, this machine alone. Anything else is a
    ValueError that says what is missing: a replica that guessed "one machine" would train alone."""
    machines = arguments.positive_int("machines", machines)
    if all(environ.get(k) for k in CLUSTER_VARIABLES):
        env, source = {k: environ[k] for k in CLUSTER_VARIABLES}, "the environment"
    elif environ.get("CLUSTER_SPEC"):
        env, source = torchrun_env_from_cluster_spec(environ["CLUSTER_SPEC"]), "CLUSTER_SPEC"
    elif machines == 1:
        return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "1", "RANK": "0"}
    else:
        raise ValueError(
            f"this job has {machines} machines, but neither {', '.join(CLUSTER_VARIABLES)} nor CLUSTER_SPEC "
            "is set here, so this machine cannot find the others. Vertex AI sets CLUSTER_SPEC on every "
            "replica of a custom job; elsewhere, export the four variables before the command."
        )
    if env["WORLD_SIZE"] != str(machines):
        raise ValueError(
            f"{source} describes {env['WORLD_SIZE']} machine(s), the job asked for {machines}: "
            "check the worker pools' replica counts"
        )
    return env


# ----------------------------------------------------------------------------------------------
# the same job for Kubeflow Pipelines: a pipeline spec (YAML)


def kubeflow_pipeline(
    steps: Sequence[Step],
    *,
    name: str,
    image: str,
    accelerator: str | None = None,
    gpus: int = 0,
    root: str = "/gcs/pipeline-root",
) -> dict:
    """A pipeline spec in the shape of Kubeflow Pipelines v2's compiled YAML (the fields kfp 2.17's compiler
    writes for container steps; kfp's own loader reads it): one task per step, its
    ``dependentTasks`` from the step's deps, ``retryPolicy`` from its retries, one container executor per
    step (``python -m course_lib.parallel.orchestration --step <name> --workdir <root>/<this run's id>``, with
    the train step's ``--steps``); the train step gets ``accelerator`` x ``gpus``. ``root`` is storage every
    step's container sees: ``/gcs/`` is where Vertex AI Pipelines mounts Cloud Storage; on open-source Kubeflow,
    a shared volume. Each pipeline run works in a folder of its own (Kubeflow fills in
    ``{{$.pipeline_job_uuid}}``), so no run reads another's checkpoints. Checked by
    :func:`validate_kubeflow_pipeline`; never submitted. Notebook 06.4."""
    pipeline_order(steps)
    if not isinstance(root, str) or not root.startswith("/"):
        raise ValueError(f"root must be an absolute path every step's container sees, got {root!r}")
    workdir = root.rstrip("/") + "/{{$.pipeline_job_uuid}}"
    trained = next((getattr(s.fn, "steps", None) for s in steps if s.name == "train"), None)
    tasks, components, executors = {}, {}, {}
    for s in steps:
        task: dict[str, Any] = {
            "taskInfo": {"name": s.name},
            "componentRef": {"name": f"comp-{s.name}"},
            # off: Kubeflow's cache key is the task's spec and its declared inputs, and these steps
            # share files in a folder outside their declared artifacts, so a cached "train" would be
            # skipped after "prepare" wrote new data; each step's own check decides instead
            "cachingOptions": {"enableCache": False},
        }
        if s.deps:
            task["dependentTasks"] = list(s.deps)
        if s.retries:
            task["retryPolicy"] = {
                "maxRetryCount": s.retries,
                "backoffDuration": f"{round(s.retry_delay)}s",
                "backoffFactor": 2.0,
                "backoffMaxDuration": "3600s",
            }
        tasks[s.name] = task
        components[f"comp-{s.name}"] = {"executorLabel": f"exec-{s.name}"}
        container: dict[str, Any] = {
            "image": image,
            "command": ["python", "-m", "course_lib.parallel.orchestration"],
            "args": ["--step", s.name, "--workdir", workdir] + (["--steps", str(trained)] if trained else []),
        }
        if s.name == "train" and accelerator is not None:
            container["resources"] = {
                "accelerator": {
                    "type": accelerator,
                    "count": str(gpus),
                    "resourceType": accelerator,
                    "resourceCount": str(gpus),
                }
            }
        executors[f"exec-{s.name}"] = {"container": container}
    spec = {
        "pipelineInfo": {"name": name},
        "schemaVersion": "2.1.0",
        "sdkVersion": "kfp-2.17.3",
        "root": {"dag": {"tasks": tasks}},
        "components": components,
        "deploymentSpec": {"executors": executors},
    }
    validate_kubeflow_pipeline(spec)
    return spec


def validate_kubeflow_pipeline(spec: Mapping[str, Any]) -> list[str]:
    """Check a pipeline spec (a dict, or YAML text); return the task order. ValueError for a missing field,
    a task whose component or executor does not exist, a task that caches its result while its component
    declares no inputs or outputs, a dependency that is not a task, a cycle, or an accelerator not in
    :data:`ACCELERATORS` (listing them). Notebook 06.4."""
    if isinstance(spec, str):
        import yaml

        spec = yaml.safe_load(spec)
    if not isinstance(spec, Mapping):
        raise TypeError(f"spec must be a dict or YAML text, got {type(spec).__name__}")
    for key in ("pipelineInfo", "root", "components", "deploymentSpec", "schemaVersion"):
        if key not in spec:
            raise ValueError(f"pipeline spec is missing {key!r}")
    if not spec["pipelineInfo"].get("name"):
        raise ValueError("pipelineInfo.name is missing")
    tasks = spec["root"].get("dag", {}).get("tasks")
    if not isinstance(tasks, Mapping) or not tasks:
        raise ValueError("root.dag.tasks must name at least one task")
    executors = spec["deploymentSpec"].get("executors", {})
    graph = {}
    for name, task in tasks.items():
        comp = task.get("componentRef", {}).get("name")
        if comp not in spec["components"]:
            raise ValueError(f"task {name!r} refers to component {comp!r}, which is not in components")
        declared = {"inputDefinitions", "outputDefinitions"} & set(spec["components"][comp])
        if task.get("cachingOptions", {}).get("enableCache") and not declared:
            raise ValueError(
                f"task {name!r} caches its result but its component declares no inputs or outputs: the cache "
                "key cannot see the files it shares with other steps, so it would be skipped after they "
                "change. Declare them as artifacts, or set cachingOptions.enableCache to false"
            )
        label = spec["components"][comp].get("executorLabel")
        container = executors.get(label, {}).get("container")
        if not container or not container.get("image"):
            raise ValueError(f"component {comp!r}: executor {label!r} is missing or has no container image")
        acc = container.get("resources", {}).get("accelerator", {}).get("type")
        if acc is not None and acc not in ACCELERATORS:
            raise ValueError(f"task {name!r} asks for accelerator {acc!r}; valid: {', '.join(ACCELERATORS)}")
        unknown = [d for d in task.get("dependentTasks", []) if d not in tasks]
        if unknown:
            raise ValueError(f"task {name!r} depends on {unknown}, which are not tasks; the tasks are {list(tasks)}")
        graph[name] = list(task.get("dependentTasks", []))
    return _topological(graph)


def to_yaml(spec: Mapping[str, Any]) -> str:
    """``spec`` as YAML text (PyYAML), keys in the order given."""
    import yaml

    return yaml.safe_dump(dict(spec), sort_keys=False, width=110)


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
