"""Process trees: find, kill and reap a process with everything it started, and tell multiprocessing's helpers apart.

``procs.Children`` stops its children with these; :func:`leftover_processes` and :func:`is_running` show that
nothing was left behind. On Windows there are no process groups: descendants are found with psutil and killed
one by one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

# the rest (_descendants, _kill_group, _reap, _is_helper, _KILL) is procs' own machinery
__all__ = ["is_running", "helper_processes", "leftover_processes"]

_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # Windows has no SIGKILL


def _descendants(pids: list[int | None]) -> list:
    """Every live descendant of the processes ``pids`` (psutil objects; None entries are skipped)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return []
    out = []
    for pid in pids:
        if pid is None:
            continue
        with contextlib.suppress(Exception):
            out += psutil.Process(pid).children(recursive=True)
    return out


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, waiting to be reaped by its parent).
    The tests and ``tools/launch_stress.py`` use it to check that nothing was left behind."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _reap(procs: list, deadline: float) -> None:
    """Wait until killed descendants are dead. They are no longer our children (their parent died
    with them), so they cannot be waited for, only watched."""
    left = [p.pid for p in procs]
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if is_running(pid)]
        if left:
            time.sleep(0.01)


def _kill_group(pid: int, group: bool = True) -> None:
    """SIGKILL process ``pid``, and the process group it leads (if it leads one and ``group``)."""
    if group and hasattr(os, "killpg"):
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, _KILL)
    with contextlib.suppress(OSError):
        os.kill(pid, _KILL)


def _is_helper(p, kinds: tuple[str, ...] = ("resource_tracker", "forkserver")) -> bool:
    """Whether psutil process ``p`` is one of multiprocessing's helpers (by its command line)."""
    try:
        cmd = " ".join(p.cmdline())
    except Exception:  # noqa: BLE001 - gone, or a zombie
        return False
    return any(kind in cmd for kind in kinds)


def helper_processes() -> list:
    """multiprocessing's long-lived helpers under this process (psutil objects): the resource
    tracker and the forkserver. They live as long as this process by design."""
    import psutil

    return [p for p in psutil.Process().children(recursive=False) if _is_helper(p)]


def leftover_processes() -> list:
    """Processes started from this one that are still running (psutil objects): children,
    grandchildren, and children of the forkserver, except the helpers themselves and zombies
    waiting to be reaped. The launches and the tests use it to show that nothing is left behind.
    """
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if _is_helper(p) or p.status() == psutil.STATUS_ZOMBIE:
                continue
            out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out
