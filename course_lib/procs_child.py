"""The child's side of ``course_lib.procs``: what can be sent to a child, what it runs before ``entry``, and its
channel back.

:func:`require_importable` checks that a function can reach a child process (the child imports it by its module
and name). ``_bootstrap`` is the first code a child runs: it starts a session of its own (so it leads a process group
that holds everything it starts), sends its stdout and stderr to its log file, watches its lifeline (a pipe
only the parent writes to: at its end the child kills its own group and exits), then imports and runs
``entry(channel, *args)``. An exception escaping ``entry``, or raised while its module is imported, reaches the
parent as an ``"error"`` message with the child's traceback. :class:`Channel` is what ``entry`` gets to send
picklable objects to the parent.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["require_importable", "Channel"]


def require_importable(
    fn: Callable[..., Any],
    name: str = "fn",
    examples: str = "course_lib.memory.limit and course_lib.comm have examples",
) -> None:
    """Raise a helpful TypeError unless ``fn`` can be sent to a child process.

    A child imports ``fn`` by its module and name, so it must be a module-level function in a
    ``.py`` file, and picklable. Used by ``procs.Children.start``, ``run_with_memory_limit`` and ``comm.launch``.
    """
    if not callable(fn):
        raise TypeError(f"{name} must be a callable, got {type(fn).__name__}")
    target = getattr(fn, "func", fn)  # functools.partial
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", "") or ""
    where = f"{module}.{qualname}" if module else qualname or repr(target)
    hint = (
        f"{name} ({where}) cannot be sent to a child process: put the function in a .py module "
        f"({examples}, or your own my_functions.py next to the notebook) and import it. Functions "
        "defined in a notebook cell or in __main__, lambdas and nested functions are not importable "
        "by another process."
    )
    if module in (None, "__main__", "__mp_main__") or "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(hint)
    try:
        pickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing here
        raise TypeError(f"{hint} (pickling failed: {type(exc).__name__}: {exc})") from None


class Channel:
    """What ``entry`` gets as its first argument: ``send(obj)`` passes ``obj`` to the parent."""

    def __init__(self, conn) -> None:
        if not callable(getattr(conn, "send_bytes", None)):
            raise TypeError(f"conn must be the writing end of a multiprocessing pipe, got {type(conn).__name__}")
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, obj: Any) -> None:
        # Plain pickle sent as bytes: multiprocessing's own pickler would share tensors through shared
        # memory, which needs the sending process alive until the parent has read them.
        data = pickle.dumps(("message", obj))
        with self._lock:
            self._conn.send_bytes(data)


def _kill_own_group_and_exit() -> None:  # pragma: no cover - runs in the child
    try:
        import psutil

        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(Exception):
                p.kill()
    except Exception:  # noqa: BLE001
        pass
    with contextlib.suppress(Exception):
        if hasattr(os, "killpg") and os.getpgid(0) == os.getpid():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.killpg(os.getpid(), signal.SIGKILL)  # kills this process too
    os._exit(1)


def _watch_lifeline(lifeline) -> None:  # pragma: no cover - runs in the child
    try:
        lifeline.recv_bytes()  # the parent never writes: this returns only at EOF
    except (EOFError, OSError):
        pass
    _kill_own_group_and_exit()


def _bootstrap(
    payload: bytes,
    to_parent,
    lifeline,
    log_path: str,
    sys_path: list[str],
    cwd: str,
    env: dict[str, str],
    start_method: str | None,
) -> None:  # pragma: no cover - runs in the child
    """First code a child runs: its own session, its log, its lifeline, then ``entry``."""
    if hasattr(os, "setsid"):
        with contextlib.suppress(OSError):
            os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which stops us
    with contextlib.suppress(OSError):
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True, name="course-lifeline").start()
    channel = Channel(to_parent)
    code = 0
    try:
        os.environ.update(env)
        # processes this child starts (DataLoader workers) use the parent's start method, not ours
        mp.set_start_method(start_method, force=True)
        sys.path[:] = sys_path
        with contextlib.suppress(OSError):
            os.chdir(cwd)
        entry, args = pickle.loads(payload)  # imports entry's module (and its arguments') here
        entry(channel, *args)
    except BaseException as exc:  # noqa: BLE001 - report everything, never hang
        code = 1
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        with contextlib.suppress(Exception):
            to_parent.send_bytes(pickle.dumps(("error", (type(exc).__name__, text))))
        with contextlib.suppress(Exception):
            sys.stderr.write(text)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(Exception):
            to_parent.close()
    if code:
        os._exit(code)
