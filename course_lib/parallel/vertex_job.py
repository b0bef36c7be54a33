"""The training job as a Vertex AI CustomJob: a spec checked but never submitted, and the cluster's variables.

:func:`vertex_custom_job` writes the job body (worker pools of machines running the training script under
torchrun) and checks it with :func:`validate_vertex_job`; :func:`cluster_env` and
:func:`torchrun_env_from_cluster_spec` give torchrun the machines' addresses and ranks on every replica.
``orchestration`` re-exports these names.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from .. import arguments, catalog

__all__ = [
    "vertex_custom_job",
    "validate_vertex_job",
    "cluster_env",
    "torchrun_env_from_cluster_spec",
    "MACHINE_TYPES",
    "ACCELERATORS",
]

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
_CLUSTER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


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
    if all(environ.get(k) for k in _CLUSTER_VARIABLES):
        env, source = {k: environ[k] for k in _CLUSTER_VARIABLES}, "the environment"
    elif environ.get("CLUSTER_SPEC"):
        env, source = torchrun_env_from_cluster_spec(environ["CLUSTER_SPEC"]), "CLUSTER_SPEC"
    elif machines == 1:
        return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "1", "RANK": "0"}
    else:
        raise ValueError(
            f"this job has {machines} machines, but neither {', '.join(_CLUSTER_VARIABLES)} nor CLUSTER_SPEC "
            "is set here, so this machine cannot find the others. Vertex AI sets CLUSTER_SPEC on every "
            "replica of a custom job; elsewhere, export the four variables before the command."
        )
    if env["WORLD_SIZE"] != str(machines):
        raise ValueError(
            f"{source} describes {env['WORLD_SIZE']} machine(s), the job asked for {machines}: "
            "check the worker pools' replica counts"
        )
    return env
