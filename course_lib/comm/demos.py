"""Small importable workers that show what ``launch`` does (notebook 03, and the tests).

Each runs under ``launch`` (a function defined in a notebook cannot reach another process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from ..files import write_atomic
from .launcher import rank_info

__all__ = [
    "demo_rank_sum",
    "demo_rank_info",
    "demo_raise_on_rank",
    "demo_sleep_on_rank",
    "demo_dataloader_sum",
    "demo_subprocess_then_hang",
    "demo_workers_then_hang",
]


def demo_rank_sum() -> tuple[int, int, float]:
    """Return ``(rank, world_size, sum over ranks of rank + 1)``: the smallest useful job,
    a first launch. With 2 ranks every rank returns 1 + 2 = 3."""
    info = rank_info()
    t = torch.tensor([float(info["rank"] + 1)], device=info["device"])
    dist.all_reduce(t)
    return info["rank"], info["world_size"], float(t.item())


def demo_rank_info() -> dict[str, Any]:
    """Return :func:`rank_info` with the device as a string (demo and test worker)."""
    info = rank_info()
    return {**info, "device": str(info["device"])}


def demo_raise_on_rank(rank_to_fail: int = 1, error: str = "ValueError") -> int:
    """Raise ``error`` (a built-in exception name) on ``rank_to_fail``; the other ranks wait in an
    all-reduce that never completes. Shows what :class:`RankError` looks like (demo and test worker)."""
    info = rank_info()
    if info["rank"] == rank_to_fail:
        import builtins

        exc = getattr(builtins, error, None)
        if not (isinstance(exc, type) and issubclass(exc, Exception)):
            exc = ValueError
        raise exc(f"rank {rank_to_fail} failed on purpose (demo_raise_on_rank)")
    t = torch.ones(1, device=info["device"])
    dist.all_reduce(t)  # blocks: the failed rank never joins
    return info["rank"]


def demo_sleep_on_rank(rank_to_sleep: int = 1, seconds: float = 3600.0) -> int:
    """Sleep ``seconds`` on ``rank_to_sleep`` (a hung rank); the others return at once. Shows what
    :class:`LaunchTimeout` looks like (demo and test worker)."""
    info = rank_info()
    if info["rank"] == rank_to_sleep:
        time.sleep(seconds)
    return info["rank"]


class _NumbersWithPid(torch.utils.data.Dataset):
    """0..n-1, each with the pid of the process that loaded it (picklable for any start method)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.tensor(float(i), dtype=torch.float64), torch.tensor(os.getpid())


def demo_dataloader_sum(n: int = 256, num_workers: int = 2, batch_size: int = 16) -> dict[str, Any]:
    """Sum 0..n-1 through a ``DataLoader`` with ``num_workers`` worker processes on every rank, then
    all-reduce the sums: ranks are ordinary processes, so they may start workers of their own.
    Returns ``{"rank", "local_sum", "total", "worker_pids"}`` (demo and test worker)."""
    from torch.utils.data import DataLoader

    info = rank_info()
    ds = _NumbersWithPid(n)
    local, pids = 0.0, set()
    for x, pid in DataLoader(ds, batch_size=batch_size, num_workers=num_workers):
        local += float(x.sum())
        pids.update(int(p) for p in pid)
    t = torch.tensor([local], dtype=torch.float64, device=info["device"])
    dist.all_reduce(t)
    return {"rank": info["rank"], "local_sum": local, "total": float(t.item()), "worker_pids": sorted(pids)}


def _check_pid_file(pid_file: Any) -> None:
    if not isinstance(pid_file, (str, os.PathLike)):
        raise TypeError(f"pid_file must be a path (str), got {type(pid_file).__name__}")


def demo_subprocess_then_hang(pid_file: str, rank_to_hang: int = 1) -> int:
    """On ``rank_to_hang``: start a subprocess that sleeps for an hour, write its pid (and ours) to
    ``pid_file``, then hang. Shows that a timeout kills what a rank started too (demo and test worker)."""
    _check_pid_file(pid_file)
    info = rank_info()
    if info["rank"] == rank_to_hang:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        write_atomic(pid_file, f"{os.getpid()} {child.pid}\n")  # the file appears complete or not at all
        time.sleep(3600)
    return info["rank"]


def demo_workers_then_hang(pid_file: str, rank_to_hang: int = 1, num_workers: int = 2) -> int:
    """On ``rank_to_hang``: keep a ``DataLoader`` with ``num_workers`` persistent worker processes
    alive, write our pid and theirs to ``pid_file``, then hang. Shows that an interrupt or a timeout
    stops the workers of a rank too (demo and test worker; ``tools/launch_stress.py``)."""
    from torch.utils.data import DataLoader

    _check_pid_file(pid_file)
    info = rank_info()
    if info["rank"] == rank_to_hang:
        loader = DataLoader(_NumbersWithPid(64), batch_size=8, num_workers=num_workers, persistent_workers=True)
        pids = set()
        for _, pid in loader:
            pids.update(int(p) for p in pid)
        write_atomic(pid_file, " ".join(str(p) for p in [os.getpid(), *sorted(pids)]) + "\n")  # complete or absent
        time.sleep(3600)
    return info["rank"]
