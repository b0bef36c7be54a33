"""Worker processes that never outlive their caller (the capped memory runs, every multi-process demo).

:class:`Children` runs importable Python functions in separate processes and stops them together.
``comm.launch`` (one process per rank) and ``memory.limit.run_with_memory_limit`` (one capped
process) are both built on it, so they share these guarantees:

* **Ordinary processes in a session of their own.** A child is not a daemon, so it may start
  processes itself (``DataLoader(num_workers=2)``, ``subprocess``). It calls ``setsid()`` first,
  so it leads a process group that holds everything it starts; stopping a child kills that whole
  group, and any descendant that left the group too.
* **Fast starts.** Children fork from a server process that has already imported torch
  (multiprocessing's ``forkserver`` with torch preloaded): a child starts in a small fraction of the
  time a fresh interpreter spends on ``import torch``. ``fresh=True`` starts a fresh interpreter
  instead (``spawn``), which is what environment variables read at start-up need (glibc's
  ``MALLOC_*``). Where ``forkserver`` does not exist (Windows) every child is fresh.
* **A lifeline.** Each child holds the reading end of a pipe whose writing end only the parent
  has. When the parent closes it, or dies (a killed Jupyter kernel), the child kills its own
  process group and exits, whatever its main thread is doing.
* **Its own log.** A child's stdout and stderr go to a log file, so when a child dies before
  reporting (a crash while importing its module, a segfault, ``os._exit``) the parent can show
  the tail of the child's own error output: :meth:`Children.log_tail`.
* **Stop is total and prompt.** :meth:`Children.stop` closes the lifelines, kills every group and
  descendant with SIGKILL, and reaps the children, in well under a second; Ctrl-C arriving while it
  runs is held back until it is done. ``with Children() as kids:`` calls it on every exit.
* **One supervision loop.** :meth:`Children.supervise` waits for the children, hands each event to
  the caller, enforces a deadline (which the caller may move) and stops everything on a timeout or
  Ctrl-C: every launch, capped run and demo that starts processes watches them with it.

A child runs ``entry(channel, *args)``, where ``entry`` is an importable function and
``channel.send(obj)`` passes a picklable object to the parent, which reads it with
:meth:`Children.events` (or :meth:`Children.supervise`). An exception escaping ``entry`` (or raised while
its module is imported) reaches the parent as an ``"error"`` event with the child's traceback. What
runs in the child is ``course_lib.procs_child``; how it is started, ``course_lib.procs_start``; how a process
tree is found and killed, ``course_lib.procs_tree``.

Limits: on Windows there are no process groups or ``setsid``; children and their descendants are
found with psutil and killed one by one. The forkserver itself is a helper process that lives as
long as the parent, like multiprocessing's resource tracker (:func:`helper_processes`).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .procs_child import _bootstrap, require_importable
from .procs_start import _START_TIMEOUT_S, start_method
from .procs_start import _main_module_hidden
from .procs_start import mp_context as _context
from .procs_start import start_watched as _start_watched
from .procs_tree import _descendants
from .procs_tree import helper_processes, is_running, leftover_processes
from .procs_tree import _kill_group
from .procs_tree import _reap

__all__ = [
    "Children",
    "Event",
    "Supervision",
    "start_method",
    "helper_processes",
    "leftover_processes",
    "is_running",
    "quiet_native_stderr",
]

_LOG_TAIL_CHARS = 3000
_LOG_KEPT_BYTES = 16384  # the end of each child's log, kept when the log file is removed


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence what C++ code writes to file descriptor 2 meanwhile (``torch.profiler`` prints its own start and
    stop lines there; they are not warnings, and a notebook would show them as errors). Python's warnings and
    exceptions still come through ``sys.stderr`` afterwards."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# ----------------------------------------------------------------------------------------------
# the parent side


@dataclass(frozen=True)
class Event:
    """Something one child did: ``kind`` is ``"message"`` (``value`` is what it sent), ``"error"``
    (``value`` is ``(exception type name, traceback text)``) or ``"exit"`` (``value`` is the exit
    code; negative: killed by that signal)."""

    index: int
    kind: str
    value: Any


@dataclass
class Supervision:
    """What :meth:`Children.supervise` saw. ``messages``: ``{index: [what the child sent, in order]}``;
    ``errors``: ``{index: (exception type name, traceback text)}``; ``exits``: ``{index: exit code}``, in the
    order the children exited; ``done``: the caller's ``on_event`` ended the watch; ``timed_out``: the deadline
    passed first (every child was then stopped)."""

    messages: dict[int, list] = field(default_factory=dict)
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)
    exits: dict[int, int | None] = field(default_factory=dict)
    done: bool = False
    timed_out: bool = False

    def record(self, event: Event) -> None:
        """Add one event."""
        if event.kind == "message":
            self.messages.setdefault(event.index, []).append(event.value)
        elif event.kind == "error":
            self.errors[event.index] = event.value
        else:
            self.exits[event.index] = event.value


class _Child:
    def __init__(self, index: int, proc, messages, lifeline, log_path: str) -> None:
        self.index = index
        self.proc = proc
        self.pid: int | None = proc.pid
        self.messages = messages
        self.lifeline = lifeline
        self.log_path = log_path
        self.exitcode: int | None = None
        self.reported_exit = False
        self.open = True
        self.kept: tuple[int, bytes] | None = None  # (log size, its end), once the log file is removed


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold back Ctrl-C until the block is done (main thread only), then deliver it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[Any] = []
    try:
        old = signal.signal(signal.SIGINT, lambda *a: pending.append(a))
    except ValueError:  # pragma: no cover - signals unavailable here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if pending and callable(old):
            old(*pending[0])


class Children:
    """A set of child processes that are started one by one and always stopped together.

    ``fresh`` starts fresh interpreters instead of forking from the torch-preloaded server;
    ``env`` adds environment variables for the children (with ``fresh=False`` they are set once the
    child runs, too late for what a process reads at start-up: pass ``fresh=True`` for those).
    """

    def __init__(self, label: str = "course", *, fresh: bool = False, env: dict[str, str] | None = None) -> None:
        if env is not None and (
            not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise TypeError(f"env must be a dict of str to str, got {env!r}")
        self.label = label
        self.fresh = fresh
        self.env = dict(env or {})
        self._ctx = _context(fresh)
        self.start_timeout = _START_TIMEOUT_S
        self._children: list[_Child] = []
        self._pending: list[Event] = []  # read, not yet handed out (supervise)
        self._stopped = False

    # -- starting --------------------------------------------------------------------------------
    def start(self, entry: Callable[..., Any], *args: Any) -> int:
        """Start one child running ``entry(channel, *args)``; returns its index (0, 1, ...)."""
        if self._stopped:
            raise RuntimeError("these children were stopped; make a new Children()")
        require_importable(entry, "entry")
        try:
            payload = pickle.dumps((entry, args))
        except Exception as exc:  # noqa: BLE001
            raise TypeError(
                f"the arguments could not be sent to a child process (they must be picklable): "
                f"{type(exc).__name__}: {exc}"
            ) from None
        fd, log_path = tempfile.mkstemp(prefix=f"{self.label}-", suffix=".log")
        os.close(fd)
        for attempt in (1, 2):
            messages, to_parent = self._ctx.Pipe(duplex=False)
            from_parent, lifeline = self._ctx.Pipe(duplex=False)
            proc = self._ctx.Process(
                target=_bootstrap,
                name=f"{self.label}-{len(self._children)}",
                daemon=False,
                args=(
                    payload,
                    to_parent,
                    from_parent,
                    log_path,
                    list(sys.path),
                    os.getcwd(),
                    self.env,
                    mp.get_start_method(allow_none=True),
                ),
            )
            saved = {k: os.environ.get(k) for k in self.env}
            try:
                if self.fresh:
                    os.environ.update(self.env)  # a fresh interpreter copies the parent's environment
                with _main_module_hidden():
                    if self.fresh:
                        proc.start()
                        started = True
                    else:
                        started = _start_watched(proc, self.start_timeout)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                to_parent.close()  # the parent keeps only the reading end: EOF means the child is gone
                from_parent.close()
            if started:
                break
            messages.close()
            lifeline.close()
        else:
            raise RuntimeError(
                f"could not start a child process: the process server did not answer within "
                f"{self.start_timeout:.0f} s, twice. The machine may be overloaded (close other notebooks "
                f"and programs), then run the cell again; `course doctor` shows how busy the cores are."
            )
        child = _Child(len(self._children), proc, messages, lifeline, log_path)
        self._children.append(child)
        return child.index

    # -- watching --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._children)

    @property
    def pids(self) -> list[int | None]:
        return [c.pid for c in self._children]

    def exitcode(self, index: int) -> int | None:
        return self._children[index].exitcode

    def _read(self, child: _Child) -> list[Event]:
        out = []
        while child.open:
            try:
                if not child.messages.poll():
                    break
                kind, value = pickle.loads(child.messages.recv_bytes())
            except (EOFError, OSError):
                child.open = False
                break
            except Exception as exc:  # noqa: BLE001 - e.g. a class the parent cannot import
                kind, value = (
                    "error",
                    (
                        "UnpicklingError",
                        f"the parent could not read a message of child {child.index}: {type(exc).__name__}: {exc}",
                    ),
                )
            out.append(Event(child.index, kind, value))
        return out

    def events(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds for something to happen; return every event that did.

        A child's ``"exit"`` event comes after all its messages; events that :meth:`supervise` read but did
        not hand out come first. Waits in slices of 0.2 s, so a Ctrl-C reaches the caller promptly.
        """
        if self._pending:
            out, self._pending = self._pending, []
            return out
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            waiting = {}
            for c in self._children:
                if c.open:
                    waiting[c.messages] = c
                if not c.reported_exit:
                    waiting[c.proc.sentinel] = c
            if not waiting:
                return []
            remaining = deadline - time.monotonic()
            ready = mp.connection.wait(list(waiting), timeout=max(0.0, min(remaining, 0.2)))
            out: list[Event] = []
            for obj in ready:
                c = waiting[obj]
                if obj is c.proc.sentinel or not c.open:
                    continue
                out += self._read(c)
            for obj in ready:
                c = waiting[obj]
                if obj is c.proc.sentinel and not c.reported_exit:
                    c.proc.join(0.5)
                    out += self._read(c)  # what it sent just before exiting
                    c.exitcode = c.proc.exitcode
                    c.reported_exit = True
                    out.append(Event(c.index, "exit", c.exitcode))
            if out or remaining <= 0:
                return out

    def supervise(
        self,
        on_event: Callable[[Event], Any] | None = None,
        *,
        timeout: float | Callable[[], float] | None = None,
        every: Callable[[], Any] | None = None,
        tick: float = 0.2,
        grace: float = 0.0,
    ) -> Supervision:
        """Watch the children until ``on_event`` returns True, every child has exited, or time runs out.

        Each event goes into the returned :class:`Supervision` and to ``on_event(event)``, which may raise to
        end the watch; events after the one that ended it stay for the next call. ``timeout``: seconds from
        now, or a function giving the seconds left (asked again after every wait, so a handler can move the
        deadline); None waits as long as it takes. ``every()`` runs after each wait of at most ``tick``
        seconds. Once ``on_event`` has said done, the children get ``grace`` seconds to exit by themselves.
        Past the deadline, and on any exception (Ctrl-C included), every child is stopped with everything
        it started; :meth:`log_tail` still shows their output.
        """
        end = time.monotonic() + (math.inf if timeout is None or callable(timeout) else timeout)
        left = timeout if callable(timeout) else lambda: end - time.monotonic()
        seen = Supervision()
        try:
            while True:
                remaining = left()
                if remaining <= 0:
                    seen.timed_out = True
                    self.stop()
                    return seen
                if not self._pending and all(c.reported_exit for c in self._children):
                    return seen
                batch = self.events(min(remaining, tick))
                for i, event in enumerate(batch):
                    seen.record(event)
                    if on_event is not None and on_event(event):
                        self._pending = batch[i + 1 :] + self._pending
                        seen.done = True
                        if grace > 0:
                            self.join(grace)
                        return seen
                if every is not None:
                    every()
        except BaseException:
            self.stop()
            raise

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every child to exit by itself; True if all did."""
        if self._stopped:
            return True
        deadline = time.monotonic() + timeout
        for c in self._children:
            c.proc.join(max(0.0, deadline - time.monotonic()))
            if c.exitcode is None:
                c.exitcode = c.proc.exitcode
        return all(c.exitcode is not None for c in self._children)

    def log_tail(self, index: int, max_chars: int = _LOG_TAIL_CHARS) -> str:
        """The end of child ``index``'s stdout and stderr ('' if it printed nothing), also after :meth:`stop`."""
        child = self._children[index]
        size, data = child.kept or _read_end(child.log_path, max_chars) or (0, b"")
        text = data[-max_chars:].decode(errors="replace") if max_chars > 0 else ""
        return ("..." if size > max_chars else "") + text.strip()

    # -- stopping --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Kill every child with everything it started, reap them, release pipes and logs.

        Safe to call at any time and more than once; Ctrl-C during it is delivered afterwards.
        """
        if self._stopped:
            return
        with _sigint_held():
            for c in self._children:  # a closed lifeline makes each child take down its own group
                with contextlib.suppress(OSError):
                    c.lifeline.close()
            descendants = _descendants([c.pid for c in self._children if c.proc.exitcode is None])
            for c in self._children:  # the descendants were found above, once
                _kill_group(c.pid)
            for p in descendants:
                with contextlib.suppress(Exception):
                    p.kill()
            deadline = time.monotonic() + 5.0
            for c in self._children:
                c.proc.join(max(0.05, deadline - time.monotonic()))
                if c.exitcode is None:
                    c.exitcode = c.proc.exitcode
            _reap(descendants, deadline)
            for c in self._children:
                with contextlib.suppress(Exception):
                    c.messages.close()
                with contextlib.suppress(ValueError):
                    if c.proc.exitcode is not None:
                        c.proc.close()
                c.kept = _read_end(c.log_path, _LOG_KEPT_BYTES) or (0, b"")
                with contextlib.suppress(OSError):
                    os.unlink(c.log_path)
            self._stopped = True

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _read_end(path: str, max_bytes: int) -> tuple[int, bytes] | None:
    """(size, its last ``max_bytes`` bytes) of a file, or None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return size, f.read()
    except OSError:
        return None
