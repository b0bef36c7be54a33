"""The training job as a Kubeflow Pipelines spec (the shape of kfp v2's compiled YAML), checked but never submitted.

:func:`kubeflow_pipeline` turns a job's steps (``job_steps.Step``) into a pipeline spec whose containers run
``python -m course_lib.parallel.orchestration --step <name>``; :func:`validate_kubeflow_pipeline` checks one
(a dict or YAML text), :func:`to_yaml` writes it. ``orchestration`` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .job_steps import Step, _topological_order, pipeline_order
from .vertex_job import ACCELERATORS

__all__ = ["kubeflow_pipeline", "validate_kubeflow_pipeline", "to_yaml"]


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
    return _topological_order(graph)


def to_yaml(spec: Mapping[str, Any]) -> str:
    """``spec`` as YAML text (PyYAML), keys in the order given."""
    import yaml

    return yaml.safe_dump(dict(spec), sort_keys=False, width=110)
