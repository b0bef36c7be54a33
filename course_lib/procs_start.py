"""How a child process starts: forked from a server that has imported torch already, or a fresh interpreter.

``procs.Children`` starts its children with these. :func:`mp_context` gives the multiprocessing context
(``forkserver`` with torch preloaded where it exists, else ``spawn``); :func:`start_watched` starts a process and
kills a forkserver that hangs, so the start can be tried again; :func:`_main_module_hidden` keeps children from
re-importing the caller's main script.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .procs_tree import _KILL, _is_helper

# the rest (mp_context, start_watched, _forkserver_pid, _main_module_hidden) is procs' own machinery
__all__ = ["start_method"]

# Modules the forkserver imports once, so children start with them loaded: torch itself (~2-4 s),
# torch._dynamo (~1.5 s; creating any torch optimizer imports it), psutil (a rank finds its network
# interface with it) and the course library.
_PRELOAD = ["torch", "torch._dynamo", "psutil", "course_lib.procs"]


def start_method(fresh: bool = False) -> str:
    """``"forkserver"`` where it exists (Linux, macOS) unless ``fresh``, else ``"spawn"``."""
    if not fresh and "forkserver" in mp.get_all_start_methods():
        return "forkserver"
    return "spawn"


_ATEXIT = False


def _stop_forkserver_at_exit() -> None:
    """Stop the forkserver when this process exits. Idle, it would notice by itself; but a process
    interrupted while the server still imports torch would leave it running for seconds."""
    pid = _forkserver_pid()
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, _KILL)


# A child starts from the forkserver in ~0.05 s, and the server itself in a few seconds (it imports
# torch). A start still waiting after _START_TIMEOUT_S has hung on a server that never answers: the
# server is killed (which ends the wait), and the start is tried once more with a new server.
_START_TIMEOUT_S = 120.0


def _forkserver_pid() -> int | None:
    """The forkserver among this process's children (found by its command line, as :func:`helper_processes`
    finds it), or None while there is none."""
    try:
        import psutil

        children = psutil.Process().children(recursive=False)
    except Exception:  # noqa: BLE001 - psutil missing, or this process cannot be read
        return None
    return next((p.pid for p in children if _is_helper(p, ("forkserver",))), None)


def start_watched(proc: Any, timeout: float) -> bool:
    """``proc.start()``, killing the forkserver if it takes over ``timeout`` s; False if it had to."""
    done, fired = threading.Event(), []

    def watch() -> None:
        if not done.wait(timeout):
            pid = _forkserver_pid()
            if pid:
                fired.append(pid)
                with contextlib.suppress(OSError):
                    os.kill(pid, _KILL)

    threading.Thread(target=watch, daemon=True, name="course-start-watchdog").start()
    try:
        proc.start()
        return True
    except (EOFError, OSError):
        if not fired:
            raise
        return False
    finally:
        done.set()


def mp_context(fresh: bool):
    """The multiprocessing context children start from (:func:`start_method`); the forkserver preloads
    :data:`_PRELOAD` and is stopped when this process exits."""
    global _ATEXIT
    method = start_method(fresh)
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)  # only read when the server starts (once per process)
        if not _ATEXIT:
            import atexit

            atexit.register(_stop_forkserver_at_exit)
            _ATEXIT = True
    return ctx


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start children without the caller's main script.

    multiprocessing makes every child re-import the parent's ``__main__`` (a script without an
    ``if __name__ == "__main__":`` guard then runs again in every child, and a script read from stdin
    cannot be re-imported at all). Our children only need ``entry``'s own module, so while a child is
    being started ``__main__`` is replaced by an empty module that names no file to re-import.
    """
    import types

    with _MAIN_LOCK:
        real = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if real is not None:
                sys.modules["__main__"] = real
