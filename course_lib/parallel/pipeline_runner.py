"""Running a pipeline schedule by hand on ranks pinned to cores of their own (``pipeline.measure_schedules``
uses it): every receive posted ahead, every send ``isend``, only the passes timed."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..comm import rank_info

__all__: list[str] = []


def _one_cpu_per_physical_core(cpus: list[int]) -> list[int]:
    """The first of ``cpus`` on each physical core: two hyperthreads of one core share its arithmetic
    units, so ranks pinned to them would not run side by side at full speed (Colab's two logical CPUs
    are one core). Where Linux does not say which core a CPU belongs to, every CPU counts as a core."""
    seen: set[tuple[str, str]] = set()
    out = []
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as f, open(f"{topology}/core_id") as g:
                key = (f.read().strip(), g.read().strip())
        except OSError:
            key = ("cpu", str(cpu))
        if key not in seen:
            seen.add(key)
            out.append(cpu)
    return out


def _pin_to_core() -> int | None:
    """Pin this process (all its threads) to one core of its own, chosen by rank among the cores it
    may use; return the core, or None where that is not possible (macOS and Windows have no
    ``os.sched_setaffinity``; fewer usable physical cores than ranks; GPU ranks, which need no pinning).
    """
    info = rank_info()
    if info["device"].type != "cpu" or not hasattr(os, "sched_setaffinity"):
        return None
    cores = _one_cpu_per_physical_core(sorted(os.sched_getaffinity(0)))
    if len(cores) < info["world_size"]:
        return None
    core = cores[info["rank"]]
    tids = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:  # a thread that just ended
            pass
    return core


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_schedule(
    stage: nn.Module,
    order: list[tuple[str, int]],
    inputs: list[torch.Tensor] | None,
    targets: list[torch.Tensor] | None,
    act_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    rank: int,
    world: int,
    device: torch.device,
    tracker: Any = None,
) -> list[tuple[str, int, float, float]]:
    """One step of a schedule by hand; every receive is posted before the first pass, every send is
    ``isend``, so no rank waits on a message it could have had earlier. Only the passes are timed.
    With a ``tracker`` (a ``memory.LiveTensorTracker``, entered once the receives are posted) each
    record gets a fifth field: the tensor bytes live after that pass."""
    m = len(order) // 2
    recv_act = recv_grad = None
    if rank > 0:
        recv_act = [torch.empty(act_shape, device=device) for _ in range(m)]
        act_reqs = [dist.irecv(recv_act[i], rank - 1, tag=i) for i in range(m)]
    if rank < world - 1:
        recv_grad = [torch.empty(out_shape, device=device) for _ in range(m)]
        grad_reqs = [dist.irecv(recv_grad[i], rank + 1, tag=m + i) for i in range(m)]
    sends, saved, record = [], {}, []
    if tracker is not None:
        tracker.__enter__()
    for kind, i in order:
        if kind == "F":
            if rank == 0:
                inp = inputs[i]
            else:
                act_reqs[i].wait()
                inp = recv_act[i].requires_grad_(True)
            _sync(device)
            t0 = time.perf_counter()
            out = stage(inp)
            if rank == world - 1:
                out = out.square().mean() if targets is None else nn.functional.mse_loss(out, targets[i])
            _sync(device)
            record.append(("F", i, t0, time.perf_counter()))
            if tracker is not None:
                record[-1] += (tracker.live,)
            if rank < world - 1:
                sends.append(dist.isend(out.detach(), rank + 1, tag=i))
                if tracker is not None:  # the memory run frees each message once delivered
                    sends.pop().wait()
            saved[i] = (inp, out)
        else:
            inp, out = saved.pop(i)
            if rank < world - 1:
                grad_reqs[i].wait()
            _sync(device)
            t0 = time.perf_counter()
            out.backward(None if rank == world - 1 else recv_grad[i])
            _sync(device)
            record.append(("B", i, t0, time.perf_counter()))
            if rank > 0:
                sends.append(dist.isend(inp.grad, rank - 1, tag=m + i))
                if tracker is not None:  # delivered: the received activation's gradient is no longer needed
                    sends.pop().wait()
                    inp.grad = None
            del inp, out
            if tracker is not None:
                record[-1] += (tracker.live,)
    if tracker is not None:
        tracker.__exit__(None, None, None)
    for req in sends:
        req.wait()
    return record
