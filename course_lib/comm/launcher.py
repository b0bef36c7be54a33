"""Launch a function on several local processes that talk through ``torch.distributed``.

``launch(fn, world_size, *args, **kwargs)`` starts ``world_size`` child processes, joins them
into one process group (gloo between CPU processes unless ``backend="nccl"`` asks for one GPU per
rank), runs
``fn(*args, **kwargs)`` on every rank and returns the per-rank return values in rank order::

    from course_lib import comm
    comm.launch(comm.demo_rank_sum, 2)   # [(0, 2, 3.0), (1, 2, 3.0)]

What it guarantees
------------------
* Ranks are ordinary processes (``course_lib.procs.Children``), each in a session of its own: a
  rank may start DataLoader workers or subprocesses, and stopping the job kills every rank with
  everything it started. Ranks fork from a server that has already imported torch, so only the first
  launch pays for ``import torch`` (``last_launch_stats`` says what a launch cost here).
* ``fn`` must be importable: a module-level function in a ``.py`` file (a function defined in a
  notebook cell, a lambda or a nested function cannot reach another process). This is checked up
  front and reported as a ``TypeError``.
* Rendezvous without a port race: the parent starts the ``TCPStore`` *server* itself on port 0 (the
  operating system picks a free port and the server holds it from then on) and passes the port to
  the ranks, which connect as clients. Every launch gets a new store, so no keys from an earlier
  (failed) job are ever seen again.
* Every rank sets ``torch.set_num_threads(threads_per_rank)``, by default
  ``max(1, free physical cores // world_size)``: ranks that oversubscribe the cores, or whose
  threads wait for a core another program holds, make every collective wait.
* A rank that raises makes ``launch`` raise :class:`RankError` with the rank and its traceback; a
  rank that dies without reporting (a crash at import, a segfault, ``os._exit``) shows the tail of
  its own error output; a job that runs past ``timeout`` seconds (counted after start-up) raises
  :class:`LaunchTimeout` naming the unfinished ranks. In all these cases, and on Ctrl-C, every
  process is killed within a second or two, whether start-up is still going on or ``fn`` runs,
  and calling ``launch`` again right away works.
* Return values travel back pickled, so they must be picklable. Tensors are fine; CUDA tensors are
  moved to the CPU in the rank before they are sent.

Notebook 03 (interconnect) uses it to measure all-reduce; every later distributed module runs its
worker functions under it.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from .. import arguments
from ..procs import Children
from ..procs_child import require_importable

__all__ = [
    "launch",
    "tcp_store",
    "loopback_interface",
    "choose_backend",
    "init_process_group",
    "rank_info",
    "RankError",
    "LaunchTimeout",
    "BACKENDS",
    "max_world_size",
    "default_threads_per_rank",
    "last_launch_stats",
    "port_is_free",
]

BACKENDS = ("gloo", "nccl")
_HOST = "127.0.0.1"
_LOOPBACK_ADDRESSES = (_HOST, "localhost")
_MAX_WORLD_SIZE = 64  # absolute cap on local processes, whatever the core count
_GRACE_S = 2.0  # how long ranks that finished may take to leave the process group and exit
_ERROR_COLLECT_S = 0.5  # after the first error, how long to wait for the other ranks' reports

_LAST: dict[str, Any] = {}


class RankError(RuntimeError):
    """A rank raised inside ``fn`` (or could not start).

    Attributes: ``rank`` (the rank whose error is reported first), ``error_type`` (e.g.
    ``"ValueError"``), ``traceback_text`` (that rank's formatted traceback, or the tail of its
    output if it died without one) and ``errors`` (``{rank: (error_type, traceback_text)}`` for
    every rank that reported a failure; peers of a failed rank often fail afterwards with a
    connection error).
    """

    def __init__(
        self, message: str, rank: int, error_type: str, traceback_text: str, errors: dict[int, tuple[str, str]]
    ):
        super().__init__(message)
        self.rank = rank
        self.error_type = error_type
        self.traceback_text = traceback_text
        self.errors = errors


class LaunchTimeout(TimeoutError):
    """The job did not finish in time; ``unfinished`` lists the ranks that had not returned.
    ``phase`` is ``"startup"`` (process start and ``init_process_group``) or ``"run"`` (``fn``).
    """

    def __init__(self, message: str, unfinished: list[int], phase: str):
        super().__init__(message)
        self.unfinished = unfinished
        self.phase = phase


# ----------------------------------------------------------------------------------------------
# sizes and threads


def _logical_cores() -> int:
    from ..hardware import usable_cpus

    return usable_cpus()


def _free_physical_cores() -> int:
    from ..cpu import free_cores

    return free_cores()


def max_world_size() -> int:
    """The largest ``world_size`` :func:`launch` accepts here: ``min(64, 4 x usable logical cores)``."""
    return max(1, min(_MAX_WORLD_SIZE, 4 * _logical_cores()))


def default_threads_per_rank(world_size: int) -> int:
    """Threads each rank uses by default: ``max(1, free physical cores // world_size)``, so the ranks
    together neither oversubscribe the CPU nor wait for cores other programs hold."""
    _check_world_size(world_size)
    return max(1, _free_physical_cores() // world_size)


def _check_world_size(world_size: int) -> int:
    world_size = arguments.integer("world_size", world_size, minimum=1)
    limit = max_world_size()
    if world_size > limit:
        raise ValueError(
            f"world_size={world_size} is more processes than this machine can usefully run: launch accepts "
            f"at most {limit} (min({_MAX_WORLD_SIZE}, 4 x {_logical_cores()} logical cores)). Use a smaller "
            "world_size (2-4 show every effect on a laptop), or run the script with torchrun on several "
            "machines."
        )
    return world_size


def choose_backend(backend: str, local_world_size: int, *, auto: bool = False) -> str:
    """The course's one backend rule: NCCL needs one CUDA GPU per process on this machine (``local_world_size``
    of them visible) and a PyTorch build with NCCL; gloo runs anywhere. ``"auto"`` (allowed with ``auto=True``)
    takes NCCL where it fits, else gloo; an explicit ``"nccl"`` that does not fit is a ValueError."""
    names = ("auto", *BACKENDS) if auto else BACKENDS
    if not isinstance(backend, str) or backend.strip().lower() not in names:
        raise ValueError(f"backend must be one of {names}, got {backend!r}")
    backend = backend.strip().lower()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    fits = local_world_size <= gpus and dist.is_nccl_available()
    if backend == "auto":  # the same choice on every process of a machine
        return "nccl" if fits else "gloo"
    if backend == "nccl" and not fits:
        raise ValueError(
            f"backend='nccl' needs one CUDA GPU per rank and a PyTorch build with NCCL: "
            f"world_size={local_world_size}, GPUs visible={gpus}, NCCL available="
            f"{dist.is_nccl_available()}. Use backend='gloo' (CPU processes)."
        )
    return backend


# PyTorch's Windows wheels build TCPStore without libuv, which every other platform's default server uses since
# torch 2.4: asking for it there stops the first launch ("use_libuv was requested but PyTorch was built without
# libuv support"). The course's own stores ask for the plain server there (tcp_store). torchrun's rendezvous builds
# its store without asking (torch 2.13), so torchrun needs Linux, macOS or WSL.


def tcp_store(
    host: str, port: int, world_size: int, *, is_master: bool, platform: str | None = None, **kwargs
) -> dist.TCPStore:
    """``dist.TCPStore``, with the libuv server switched off on Windows, whose wheels have none."""
    if (platform or sys.platform) == "win32":
        kwargs.setdefault("use_libuv", False)
    return dist.TCPStore(host, port, world_size, is_master=is_master, **kwargs)


def loopback_interface(platform: str | None = None) -> str | None:
    """Name of the interface that carries 127.0.0.1 ("lo" on Linux, "lo0" on macOS), for GLOO_SOCKET_IFNAME; None
    on Windows, where psutil's names ("Loopback Pseudo-Interface 1") are not ones gloo looks up: gloo then uses the
    address the machine's name resolves to."""
    if (platform or sys.platform) == "win32":
        return None
    return _loopback_interface()


def init_process_group(
    backend: str,
    store: dist.Store,
    *,
    rank: int,
    world_size: int,
    local_rank: int,
    timeout: float,
    master_addr: str | None,
) -> torch.device:
    """Join the default process group: every process the course starts joins through here (``launch``'s
    ranks, the torchrun training script). Returns this process's device.

    ``backend`` comes from :func:`choose_backend`. The one interface rule: under gloo, with the master on this
    machine's loopback (``master_addr`` 127.0.0.1 or localhost), gloo listens on the loopback interface
    (``GLOO_SOCKET_IFNAME``, unless already set); with any other address, or None (a world of one, no
    network), gloo picks its interface itself (set ``GLOO_SOCKET_IFNAME`` or ``NCCL_SOCKET_IFNAME`` on a machine
    with several). Under NCCL the device is ``cuda:<local_rank>``, with full fp32 (no TF32). ``timeout``
    (seconds) is the collectives' timeout.
    """
    if backend == "gloo" and master_addr in _LOOPBACK_ADDRESSES:
        ifname = loopback_interface()
        if ifname:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", ifname)
    device, kw = torch.device("cpu"), {}
    if backend == "nccl":
        from .. import devices

        device = kw["device_id"] = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        devices.full_fp32()  # every "fp32" label true, as in the notebooks
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout), **kw
    )
    return device


def _loopback_interface() -> str | None:
    """Name of the interface that carries 127.0.0.1 ("lo" on Linux, "lo0" on macOS)."""
    try:
        import socket

        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == _HOST for a in addrs):
                return name
    except Exception:  # noqa: BLE001 - gloo then picks an interface itself
        pass
    return None


# ----------------------------------------------------------------------------------------------
# one rank


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _rank(
    channel,
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    rank: int,
    world_size: int,
    backend: str,
    port: int,
    timeout_s: float,
    startup_s: float,
    threads: int,
) -> None:  # pragma: no cover
    """What each rank process runs (inside ``procs.Children``)."""
    try:
        os.environ.update(
            {
                "MASTER_ADDR": _HOST,
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size),
            }
        )
        torch.set_num_threads(threads)
        store = tcp_store(_HOST, port, world_size, is_master=False, timeout=timedelta(seconds=startup_s))
        init_process_group(
            backend, store, rank=rank, world_size=world_size, local_rank=rank, timeout=timeout_s, master_addr=_HOST
        )
        channel.send(("started", None))
        value = fn(*args, **kwargs)
        try:
            channel.send(("ok", _to_cpu(value)))
        except Exception as exc:  # noqa: BLE001 - an unpicklable return value
            channel.send(
                (
                    "failed",
                    (
                        "TypeError",
                        f"TypeError: the return value of fn on rank {rank} could not be "
                        f"sent back ({type(exc).__name__}: {exc}); return plain Python values, "
                        "numbers, lists, dicts or CPU tensors",
                    ),
                )
            )
    except BaseException as exc:  # noqa: BLE001 - report everything, never hang
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        channel.send(("failed", (type(exc).__name__, text)))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


# ----------------------------------------------------------------------------------------------
# the parent

_COMM_ERROR_TYPES = ("DistBackendError", "DistNetworkError", "DistError", "DistStoreError")


def _is_peer_failure(error_type: str, text: str) -> bool:
    """A rank failing because a peer died (connection closed / reset) rather than on its own."""
    low = text.lower()
    return (
        error_type in _COMM_ERROR_TYPES
        or "connection closed by peer" in low
        or "connection reset" in low
        or ("gloo" in low and "timed out" not in low and error_type == "RuntimeError")
    )


def last_launch_stats() -> dict[str, Any]:
    """Facts about the most recent :func:`launch` in this process: ``world_size``, ``backend``,
    ``threads_per_rank``, ``port`` (the store's port), ``startup_s`` (process start and
    ``init_process_group``), ``run_s`` (``fn`` on the slowest rank), ``teardown_s`` (ranks leaving
    the process group and exiting), ``total_s``, ``outcome`` (``"ok"``, ``"error"``, ``"timeout"``,
    ``"interrupted"``) and ``output`` (``{rank: the end of what it printed}``, ranks that printed).
    It shows that start-up, not communication, dominates a short job."""
    return dict(_LAST)


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 60.0,
    threads_per_rank: int | None = None,
    startup_timeout: float | None = None,
    **kwargs: Any,
) -> list:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` local processes; return each rank's value in rank
    order. Notebook 03 (interconnect); used by every later distributed module.

    Inside ``fn`` the default process group is initialised: call ``dist.all_reduce`` etc. directly and
    :func:`rank_info` for rank, world size, backend and device.

    Arguments:
        fn: an importable function (module level, in a ``.py`` file). Its arguments and its return
            value must be picklable; return CPU tensors or plain values (CUDA tensors are moved to
            the CPU before they are sent back).
        world_size: number of processes, an int from 1 to :func:`max_world_size`.
        backend: ``"gloo"`` (the default: CPU processes, on any machine) or ``"nccl"`` (one CUDA GPU
            per rank; each rank calls ``torch.cuda.set_device(rank)``). Never chosen behind your
            back: a GPU machine runs the same gloo demo as a laptop unless you ask for NCCL
            (``devices.current_plan().backend`` says whether this machine can).
        timeout: seconds ``fn`` may run (wall clock, counted once every rank has joined the process
            group); also the process group's collective timeout.
        threads_per_rank: ``torch.set_num_threads`` in each rank; default
            ``max(1, free physical cores // world_size)``.
        startup_timeout: seconds allowed for starting the ranks and ``init_process_group``; default
            ``30 + 10 * world_size`` (the first launch in a process imports torch once, 2-4 s).

    ``backend``, ``timeout``, ``threads_per_rank`` and ``startup_timeout`` belong to ``launch``; every
    other keyword argument goes to ``fn``.

    Raises:
        TypeError: ``fn`` is not importable (lambda, nested, defined in a notebook) or its
            arguments cannot be pickled; ``world_size`` is not an int.
        ValueError: ``world_size`` < 1 or above :func:`max_world_size`; unknown ``backend``; NCCL
            without enough GPUs; non-positive timeouts or ``threads_per_rank``.
        RankError: a rank raised, or died (message: rank number, exception type, its traceback or
            the end of its output).
        LaunchTimeout: the job did not start or finish in time (message: the unfinished ranks).
    """
    require_importable(fn, "fn", examples="e.g. course_lib.comm has examples (demo_rank_sum, allreduce_benchmark)")
    world_size = _check_world_size(world_size)
    backend = choose_backend(backend, world_size)
    timeout = arguments.seconds("timeout", timeout)
    startup = arguments.seconds(
        "startup_timeout", 30.0 + 10.0 * world_size if startup_timeout is None else startup_timeout
    )
    threads = (
        default_threads_per_rank(world_size)
        if threads_per_rank is None
        else arguments.positive_int("threads_per_rank", threads_per_rank)
    )
    _LAST.clear()
    _LAST.update(
        world_size=world_size,
        backend=backend,
        threads_per_rank=threads,
        port=None,
        startup_s=None,
        run_s=None,
        teardown_s=None,
        total_s=None,
        outcome="interrupted",
        output={},
    )
    ranks = Children("course-rank")
    job = _Job(ranks, world_size, startup, timeout)
    # The parent owns the rendezvous store: port 0 lets the OS pick a free port, and the server keeps
    # it bound for the whole job, so no other process can take it between "pick" and "use".
    store = tcp_store(
        _HOST, 0, world_size, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=max(startup, 10.0))
    )
    _LAST["port"] = port = store.port
    try:
        for rank in range(world_size):
            ranks.start(_rank, fn, args, kwargs, rank, world_size, backend, port, timeout, startup, threads)
        # after all results, the ranks get _GRACE_S to leave the process group cleanly
        run = ranks.supervise(job.on_event, timeout=job.seconds_left, grace=_GRACE_S)
        if run.timed_out and job.first_error_at is None:
            job.timed_out_phase = "startup" if job.t_all_started is None else "run"
    finally:
        output = {r: ranks.log_tail(r, 2000) for r in range(len(ranks))}
        ranks.stop()
        del store  # closes the server socket: the port is free for the next launch
        end = time.perf_counter()
        _LAST.update(total_s=end - job.t0, output={r: text for r, text in output.items() if text})
        if job.t_all_started is not None:
            _LAST["startup_s"] = job.t_all_started - job.t0
            _LAST["run_s"] = (job.t_done if job.t_done is not None else end) - job.t_all_started
        if job.t_done is not None:
            _LAST["teardown_s"] = end - job.t_done
    return job.outcome()


class _Job:
    """The parent's view of one launch: which ranks started, returned or failed, and the deadline now (start-up,
    then ``fn``'s run, then a short window after the first failure for the other ranks' reports)."""

    def __init__(self, ranks: Children, world_size: int, startup: float, timeout: float) -> None:
        self.ranks, self.world_size, self.startup, self.timeout = ranks, world_size, startup, timeout
        self.t0 = time.perf_counter()
        self.started: set[int] = set()
        self.results: dict[int, Any] = {}
        self.errors: dict[int, tuple[str, str]] = {}
        self.t_all_started = self.t_done = self.first_error_at = None
        self.timed_out_phase: str | None = None

    def seconds_left(self) -> float:
        if self.first_error_at is not None:
            deadline = self.first_error_at + _ERROR_COLLECT_S
        elif self.t_all_started is None:
            deadline = self.t0 + self.startup
        else:
            deadline = self.t_all_started + self.timeout
        return deadline - time.perf_counter()

    def on_event(self, event) -> bool:
        """Record one rank's event; True once every rank has returned."""
        rank = event.index
        if event.kind == "message":
            tag, value = event.value
            if tag == "started":
                self.started.add(rank)
                if len(self.started) == self.world_size:
                    self.t_all_started = time.perf_counter()
            elif tag == "ok":
                self.results[rank] = value
            else:
                self.errors[rank] = value
        elif event.kind == "error":  # fn's module could not even be imported in the rank
            self.errors.setdefault(rank, event.value)
        elif rank not in self.results and rank not in self.errors:  # exited without reporting
            tail = self.ranks.log_tail(rank)
            self.errors[rank] = (
                "ChildExited",
                (
                    f"rank {rank} exited with code {event.value} before reporting a result (killed by a "
                    "signal if negative, e.g. out of memory). "
                    + (f"Its last output:\n{tail}" if tail else "It printed nothing.")
                ),
            )
        if self.errors and self.first_error_at is None:
            self.first_error_at = time.perf_counter()
        if len(self.results) == self.world_size:
            self.t_done = time.perf_counter()
            return True
        return False

    def outcome(self) -> list:
        """Every rank's value in rank order, or the RankError or LaunchTimeout the job ended with."""
        world_size, errors = self.world_size, self.errors
        if errors:
            _LAST["outcome"] = "error"
            order = sorted(errors, key=lambda r: (_is_peer_failure(*errors[r]), r))
            rank = order[0]
            etype, text = errors[rank]
            msg = f"rank {rank} of {world_size} raised {etype}:\n{text.rstrip()}"
            if order[1:]:
                msg += (
                    f"\n(ranks {order[1:]} failed too, most likely because rank {rank} stopped; their errors "
                    "are in RankError.errors)"
                )
            raise RankError(msg, rank, etype, text, dict(errors))
        if self.timed_out_phase is not None or len(self.results) < world_size:
            _LAST["outcome"] = "timeout"
            unfinished = [r for r in range(world_size) if r not in self.results]
            if self.timed_out_phase == "startup":
                not_started = [r for r in range(world_size) if r not in self.started]
                raise LaunchTimeout(
                    f"the job did not start within startup_timeout={self.startup:g} s: ranks {not_started} had not "
                    f"joined the process group (the first launch imports torch once, 2-4 s on 2 cores); all ranks "
                    "were stopped. Raise startup_timeout on a slow machine.",
                    unfinished,
                    "startup",
                )
            raise LaunchTimeout(
                f"ranks {unfinished} of {world_size} had not finished after timeout={self.timeout:g} s (counted after "
                f"start-up); all ranks were stopped. A rank waiting in a collective that another rank never "
                "calls hangs like this; otherwise raise timeout.",
                unfinished,
                "run",
            )
        _LAST["outcome"] = "ok"
        return [self.results[r] for r in range(world_size)]


def port_is_free(port: int, reuse: bool = True) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound again (no launch leaves a busy port).

    ``reuse=True`` sets SO_REUSEADDR, as servers such as TCPStore do; a plain bind also fails
    while old connections sit in TIME_WAIT.
    """
    import socket

    port = arguments.integer("port", port, minimum=1, maximum=65535)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((_HOST, port))
        except OSError:
            return False
    return True


def rank_info() -> dict[str, Any]:
    """Inside a launched ``fn``: ``{"rank", "world_size", "backend", "device", "master_port",
    "num_threads"}``. ``device`` is ``cuda:<rank>`` under NCCL, else ``cpu``: create tensors there.
    Used by every worker the course launches.

    Raises ``RuntimeError`` outside a process group (call it inside a function run by :func:`launch`
    or by ``torchrun``).
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "rank_info() works inside a function run by course_lib.comm.launch (or "
            "under torchrun): no process group is initialised in this process"
        )
    backend = str(dist.get_backend())
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    port = os.environ.get("MASTER_PORT")
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": backend,
        "device": device,
        "master_port": int(port) if port else None,
        "num_threads": torch.get_num_threads(),
    }
