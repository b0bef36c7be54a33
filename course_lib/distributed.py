"""Launch a function on several local processes that talk through ``torch.distributed``.

Notebook 03 (interconnect) uses this module to measure all-reduce, to write a ring all-reduce by
hand and to compare it with the library; it is used by every later distributed module (data
parallel, sharding, pipelines), whose worker functions run under :func:`launch`.

``launch(fn, world_size, *args, **kwargs)`` starts ``world_size`` fresh Python processes (the
``spawn`` start method, which works the same from a Jupyter kernel and from a script), joins them
into one process group (gloo on CPU, NCCL when there is one GPU per rank), runs
``fn(*args, **kwargs)`` on every rank and returns the per-rank return values in rank order::

    from course_lib import distributed
    distributed.launch(distributed.demo_rank_sum, 2)   # [(0, 2, 3.0), (1, 2, 3.0)]

What it guarantees
------------------
* ``fn`` must be importable: a module-level function in a ``.py`` file (a function defined in a
  notebook cell, a lambda or a nested function cannot be pickled by ``spawn``). This is checked
  up front and reported as a ``TypeError``, not as a pickling traceback from a child.
* Rendezvous without a port race: the parent starts the ``TCPStore`` *server* itself on port 0
  (the operating system picks a free port and the server holds it from then on) and passes the
  port number to the children, which connect as clients and call
  ``init_process_group(backend, store=..., rank=..., world_size=...)``. Choosing a free port by
  binding port 0 and closing it again leaves a window in which another program (or the previous
  launch) can take it; a server that keeps the port has no such window. Every launch gets a new
  store, so no keys from an earlier (failed) job are ever seen again - the stale-store problem that
  makes ``torchrun`` restarts with a reused store unreliable.
* Every rank sets ``torch.set_num_threads(threads_per_rank)``, by default
  ``max(1, physical cores // world_size)``: 2 ranks x 2 threads on 2 cores oversubscribe the CPU
  and make gloo benchmarks crawl.
* A rank that raises makes ``launch`` raise :class:`RankError` (with the rank and its traceback);
  a job that runs past ``timeout`` seconds (counted after start-up) raises :class:`LaunchTimeout`
  naming the unfinished ranks. In both cases, and on Ctrl-C (``KeyboardInterrupt``), every child is
  terminated, then killed after a short grace period, then reaped: no process outlives the call
  and calling ``launch`` again right away works.
* Return values travel back pickled, so they must be picklable. Tensors are fine; CUDA tensors
  are moved to the CPU in the child before they are sent.

Scripts that call ``launch`` need the usual ``if __name__ == "__main__":`` guard, because
``spawn`` re-imports the main script in every child.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import statistics
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from .bench import bytes_per_element, to_dtype
from .memlimit import require_importable

__all__ = [
    "ALLREDUCE_SIZES", "launch", "rank_info", "RankError", "LaunchTimeout", "BACKENDS", "max_world_size",
    "default_threads_per_rank", "last_launch_stats", "port_is_free",
    "allreduce_benchmark", "ring_all_reduce", "check_ring_against_library",
    "demo_rank_sum", "demo_raise_on_rank", "demo_sleep_on_rank", "demo_rank_info",
]

BACKENDS = ("gloo", "nccl")
HOST = "127.0.0.1"
MAX_WORLD_SIZE = 64  # absolute cap on local processes, whatever the core count
_GRACE_S = 2.0  # SIGTERM -> SIGKILL grace period when stopping children
_ERROR_COLLECT_S = 0.5  # after the first error, how long to wait for the other ranks' reports

_LAST: dict[str, Any] = {}

#: Message sizes for notebook 03's all-reduce sweep: 1 KB to 64 MB in steps of 4x. With the default
#: repeats=5, warmup=2 a launch of allreduce_benchmark takes ~4 s (2 ranks) and ~10 s (4 ranks) on 2 cores.
ALLREDUCE_SIZES: tuple[int, ...] = tuple(4**k * 1024 for k in range(9))


class RankError(RuntimeError):
    """A rank raised inside ``fn`` (or could not start). Notebook 03 (interconnect).

    Attributes: ``rank`` (the rank whose error is reported first), ``error_type`` (e.g.
    ``"ValueError"``), ``traceback_text`` (that rank's formatted traceback) and ``errors``
    (``{rank: (error_type, traceback_text)}`` for every rank that reported a failure; peers of a
    failed rank often fail afterwards with a connection error).
    """

    def __init__(self, message: str, rank: int, error_type: str, traceback_text: str,
                 errors: dict[int, tuple[str, str]]):
        super().__init__(message)
        self.rank = rank
        self.error_type = error_type
        self.traceback_text = traceback_text
        self.errors = errors


class LaunchTimeout(TimeoutError):
    """The job did not finish in time; ``unfinished`` lists the ranks that had not returned.
    ``phase`` is ``"startup"`` (process start and ``init_process_group``) or ``"run"`` (``fn``).
    Notebook 03 (interconnect)."""

    def __init__(self, message: str, unfinished: list[int], phase: str):
        super().__init__(message)
        self.unfinished = unfinished
        self.phase = phase


# ----------------------------------------------------------------------------------------------
# validation

def _logical_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def _physical_cores() -> int:
    try:
        import psutil
        physical = psutil.cpu_count(logical=False) or _logical_cores()
    except ImportError:  # pragma: no cover
        physical = _logical_cores()
    return max(1, min(physical, _logical_cores()))


def max_world_size() -> int:
    """The largest ``world_size`` :func:`launch` accepts here: ``min(64, 4 x logical cores)``.
    Notebook 03 (interconnect)."""
    return max(1, min(MAX_WORLD_SIZE, 4 * _logical_cores()))


def default_threads_per_rank(world_size: int) -> int:
    """Threads each rank uses by default: ``max(1, physical cores // world_size)``, so the ranks
    together do not oversubscribe the CPU. Notebook 03 (interconnect)."""
    _check_world_size(world_size)
    return max(1, _physical_cores() // world_size)


def _check_world_size(world_size: int) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int >= 1 (the number of processes), got "
                        f"{type(world_size).__name__} {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be an int >= 1 (the number of processes), got {world_size}")
    limit = max_world_size()
    if world_size > limit:
        raise ValueError(
            f"world_size={world_size} is more processes than this machine can usefully run: launch accepts "
            f"at most {limit} (min({MAX_WORLD_SIZE}, 4 x {_logical_cores()} logical cores)). Use a smaller "
            "world_size (2-4 show every effect on a laptop), or run the script with torchrun on several "
            "machines.")
    return world_size


def _check_importable(fn: Callable[..., Any]) -> None:
    require_importable(fn, "fn", examples="e.g. course_lib.distributed has examples (demo_rank_sum, "
                                          "allreduce_benchmark)")


def _resolve_backend(backend: str | None, world_size: int) -> str:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend is None:
        return "nccl" if gpus >= world_size and dist.is_nccl_available() else "gloo"
    if not isinstance(backend, str) or backend.lower() not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None (automatic), got {backend!r}")
    backend = backend.lower()
    if backend == "nccl" and (gpus < world_size or not dist.is_nccl_available()):
        raise ValueError(f"backend='nccl' needs one CUDA GPU per rank and a PyTorch build with NCCL: "
                         f"world_size={world_size}, GPUs visible={gpus}, NCCL available="
                         f"{dist.is_nccl_available()}. Use backend='gloo' (CPU) or backend=None.")
    return backend


def _check_seconds(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def _loopback_interface() -> str | None:
    """Name of the interface that carries 127.0.0.1 ("lo" on Linux, "lo0" on macOS)."""
    try:
        import psutil
        import socket
        for name, addrs in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == HOST for a in addrs):
                return name
    except Exception:  # noqa: BLE001 - gloo then picks an interface itself
        pass
    return None


# ----------------------------------------------------------------------------------------------
# the child (one per rank)

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


def _send(conn, message: tuple) -> None:
    # Plain pickle, sent as bytes: multiprocessing's own pickler would pass tensors through shared
    # memory, which needs the sending process alive until the parent has read them.
    try:
        data = pickle.dumps(message)
    except Exception as exc:  # noqa: BLE001 - an unpicklable return value
        data = pickle.dumps(("error", message[1], "TypeError",
                             f"TypeError: the return value of fn on rank {message[1]} could not be pickled "
                             f"and sent back ({type(exc).__name__}: {exc}); return plain Python values, "
                             "numbers, lists, dicts or CPU tensors"))
    conn.send_bytes(data)


def _watch_parent(parent_pid: int) -> None:  # pragma: no cover - runs in the child
    """Exit if the parent disappears (e.g. the kernel was killed), so no rank is left running."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(1)


def _child(conn, rank: int, world_size: int, backend: str, port: int, timeout_s: float, startup_s: float,
           threads: int, payload: bytes, parent_pid: int, ifname: str | None) -> None:  # pragma: no cover - child
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is handled by the parent, which stops us
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    try:
        os.environ.update({"MASTER_ADDR": HOST, "MASTER_PORT": str(port), "RANK": str(rank),
                           "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                           "LOCAL_WORLD_SIZE": str(world_size)})
        if ifname and backend == "gloo":
            os.environ.setdefault("GLOO_SOCKET_IFNAME", ifname)  # gloo listens on 127.0.0.1 only
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        fn, args, kwargs = pickle.loads(payload)  # imports fn's module here, inside the try
        store = dist.TCPStore(HOST, port, world_size, is_master=False, timeout=timedelta(seconds=startup_s))
        kw = {"device_id": torch.device("cuda", rank)} if backend == "nccl" else {}
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s), **kw)
        _send(conn, ("started", rank))
        value = fn(*args, **kwargs)
        _send(conn, ("ok", rank, _to_cpu(value)))
    except BaseException as exc:  # noqa: BLE001 - report everything, never hang
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            _send(conn, ("error", rank, type(exc).__name__, text))
        except Exception:  # noqa: BLE001 - the parent is gone or stopped listening
            pass
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        conn.close()


# ----------------------------------------------------------------------------------------------
# the parent

def _stop_all(procs: list) -> None:
    """Terminate every live child, wait a grace period, kill what is left, reap all."""
    started = [p for p in procs if p._popen is not None]
    for p in started:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + _GRACE_S
    for p in started:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in started:
        if p.is_alive():
            p.kill()
    for p in started:
        p.join(5.0)
        try:
            p.close()
        except ValueError:  # pragma: no cover - still running after SIGKILL + 5 s
            pass


_COMM_ERROR_TYPES = ("DistBackendError", "DistNetworkError", "DistError", "DistStoreError")


def _is_peer_failure(error_type: str, text: str) -> bool:
    """A rank failing because a peer died (connection closed / reset) rather than on its own."""
    low = text.lower()
    return error_type in _COMM_ERROR_TYPES or "connection closed by peer" in low or "connection reset" in low \
        or ("gloo" in low and "timed out" not in low and error_type == "RuntimeError")


def last_launch_stats() -> dict[str, Any]:
    """Facts about the most recent :func:`launch` in this process: ``world_size``, ``backend``,
    ``threads_per_rank``, ``port`` (the store's port), ``startup_s`` (spawn, ``import torch`` and
    ``init_process_group``), ``run_s`` (``fn`` on the slowest rank), ``teardown_s`` (ranks leaving
    the process group and exiting), ``total_s``, and ``outcome``
    (``"ok"``, ``"error"``, ``"timeout"``, ``"interrupted"``). Notebook 03 (interconnect) uses it to
    show that start-up, not communication, dominates a short job."""
    return dict(_LAST)


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str | None = None,
           timeout: float = 60.0, threads_per_rank: int | None = None, startup_timeout: float | None = None,
           **kwargs: Any) -> list:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` local processes; return each rank's value in rank
    order. Notebook 03 (interconnect); used by every later distributed module.

    Inside ``fn`` the default process group is initialised: call ``dist.all_reduce`` etc. directly and
    :func:`rank_info` for rank, world size, backend and device.

    Arguments:
        fn: an importable function (module level, in a ``.py`` file). Its arguments and its return
            value must be picklable; return CPU tensors or plain values (CUDA tensors are moved to
            the CPU before they are sent back).
        world_size: number of processes, an int from 1 to :func:`max_world_size`.
        backend: ``"gloo"`` (CPU), ``"nccl"`` (one CUDA GPU per rank; each rank calls
            ``torch.cuda.set_device(rank)``) or None: NCCL when there are at least ``world_size``
            GPUs, else gloo.
        timeout: seconds ``fn`` may run (wall clock, counted once every rank has joined the process
            group); also the process group's collective timeout.
        threads_per_rank: ``torch.set_num_threads`` in each rank; default
            ``max(1, physical cores // world_size)``.
        startup_timeout: seconds allowed for spawning the ranks, ``import torch`` (~2 s a rank on 2
            cores) and ``init_process_group``; default ``30 + 10 * world_size``.

    ``backend``, ``timeout``, ``threads_per_rank`` and ``startup_timeout`` belong to ``launch``; every
    other keyword argument goes to ``fn``.

    Raises:
        TypeError: ``fn`` is not importable (lambda, nested, defined in a notebook) or its
            arguments cannot be pickled; ``world_size`` is not an int.
        ValueError: ``world_size`` < 1 or above :func:`max_world_size`; unknown ``backend``; NCCL
            without enough GPUs; non-positive timeouts or ``threads_per_rank``.
        RankError: a rank raised (message: rank number, exception type, its traceback).
        LaunchTimeout: the job did not start or finish in time (message: the unfinished ranks).
    """
    _check_importable(fn)
    world_size = _check_world_size(world_size)
    backend = _resolve_backend(backend, world_size)
    timeout = _check_seconds(timeout, "timeout")
    startup = _check_seconds(30.0 + 10.0 * world_size if startup_timeout is None else startup_timeout,
                             "startup_timeout")
    if threads_per_rank is None:
        threads = default_threads_per_rank(world_size)
    elif isinstance(threads_per_rank, bool) or not isinstance(threads_per_rank, int) or threads_per_rank < 1:
        raise ValueError(f"threads_per_rank must be None (automatic) or an int >= 1, got {threads_per_rank!r}")
    else:
        threads = threads_per_rank
    try:
        payload = pickle.dumps((fn, args, kwargs))
    except Exception as exc:  # noqa: BLE001
        raise TypeError(f"the arguments of fn must be picklable to reach the rank processes: "
                        f"{type(exc).__name__}: {exc}") from None

    # The parent owns the rendezvous store: port 0 lets the OS pick a free port, and the server keeps
    # it bound for the whole job, so no other process can take it between "pick" and "use".
    store = dist.TCPStore(HOST, 0, world_size, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=startup))
    port = store.port
    ctx = mp.get_context("spawn")
    ifname = _loopback_interface()
    procs: list = []
    receivers: dict[Any, int] = {}
    t0 = time.perf_counter()
    _LAST.clear()
    _LAST.update(world_size=world_size, backend=backend, threads_per_rank=threads, port=port,
                 startup_s=None, run_s=None, teardown_s=None, total_s=None, outcome="interrupted")
    started: set[int] = set()
    results: dict[int, Any] = {}
    errors: dict[int, tuple[str, str]] = {}
    exit_codes: dict[int, int | None] = {}
    t_all_started: float | None = None
    t_done: float | None = None
    first_error_at: float | None = None
    timed_out_phase: str | None = None
    try:
        for rank in range(world_size):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, name=f"course-rank-{rank}", daemon=True,
                            args=(send, rank, world_size, backend, port, timeout, startup, threads, payload,
                                  os.getpid(), ifname))
            procs.append(p)
            receivers[recv] = rank
            p.start()
            send.close()  # the parent keeps the reading end only: EOF means the child is gone
        open_recv = dict(receivers)
        alive = {p.sentinel: r for r, p in enumerate(procs)}
        while len(results) < world_size:
            now = time.perf_counter()
            if first_error_at is not None:
                deadline = first_error_at + _ERROR_COLLECT_S
            elif t_all_started is None:
                deadline = t0 + startup
            else:
                deadline = t_all_started + timeout
            remaining = deadline - now
            if remaining <= 0:
                if first_error_at is None:
                    timed_out_phase = "startup" if t_all_started is None else "run"
                break
            if not open_recv and not alive:
                break
            # Short slices: a Ctrl-C delivered to another thread only reaches the main thread when it
            # runs Python code again, so never block for long in one system call.
            ready = mp.connection.wait(list(open_recv) + list(alive), timeout=min(remaining, 0.2))
            for obj in ready:
                if obj in open_recv:
                    rank = open_recv[obj]
                    try:
                        msg = pickle.loads(obj.recv_bytes())
                    except (EOFError, OSError):
                        del open_recv[obj]
                        continue
                    except Exception as exc:  # noqa: BLE001 - e.g. a class the parent cannot import
                        msg = ("error", rank, "UnpicklingError",
                               f"the parent could not unpickle rank {rank}'s result: {type(exc).__name__}: {exc}")
                    if msg[0] == "started":
                        started.add(rank)
                        if len(started) == world_size:
                            t_all_started = time.perf_counter()
                    elif msg[0] == "ok":
                        results[rank] = msg[2]
                    else:
                        errors[rank] = (msg[2], msg[3])
                        if first_error_at is None:
                            first_error_at = time.perf_counter()
                elif obj in alive:
                    rank = alive.pop(obj)
                    proc = procs[rank]
                    proc.join(0.1)
                    exit_codes[rank] = proc.exitcode
            # a child that exited without a result and without an error: report it
            for rank in list(exit_codes):
                rx = next(c for c, r in receivers.items() if r == rank)
                if rank not in results and rank not in errors and rx not in open_recv:
                    code = exit_codes.pop(rank)
                    errors[rank] = ("ChildExited", f"rank {rank} exited with code {code} before reporting a "
                                    "result (killed by a signal if negative, e.g. out of memory)")
                    if first_error_at is None:
                        first_error_at = time.perf_counter()
        if len(results) == world_size:
            t_done = time.perf_counter()
            for p in procs:  # let them leave cleanly (destroy_process_group), briefly
                p.join(_GRACE_S)
    except KeyboardInterrupt:
        _LAST["outcome"] = "interrupted"
        raise
    finally:
        _stop_all(procs)
        for rx in receivers:
            rx.close()
        del store  # closes the server socket: the port is free for the next launch
        end = time.perf_counter()
        _LAST["total_s"] = end - t0
        if t_all_started is not None:
            _LAST["startup_s"] = t_all_started - t0
            _LAST["run_s"] = (t_done if t_done is not None else end) - t_all_started
        if t_done is not None:
            _LAST["teardown_s"] = end - t_done

    if errors:
        _LAST["outcome"] = "error"
        order = sorted(errors, key=lambda r: (_is_peer_failure(*errors[r]), r))
        rank = order[0]
        etype, text = errors[rank]
        others = [r for r in order[1:]]
        msg = f"rank {rank} of {world_size} raised {etype}:\n{text.rstrip()}"
        if others:
            msg += (f"\n(ranks {others} failed too, most likely because rank {rank} stopped; their errors "
                    "are in RankError.errors)")
        raise RankError(msg, rank, etype, text, dict(errors))
    if timed_out_phase is not None or len(results) < world_size:
        _LAST["outcome"] = "timeout"
        unfinished = [r for r in range(world_size) if r not in results]
        if timed_out_phase == "startup":
            not_started = [r for r in range(world_size) if r not in started]
            raise LaunchTimeout(
                f"the job did not start within startup_timeout={startup:g} s: ranks {not_started} had not joined "
                f"the process group (spawning and `import torch` take ~2 s a rank on 2 cores); all ranks were "
                "stopped. Raise startup_timeout on a slow machine.", unfinished, "startup")
        raise LaunchTimeout(
            f"ranks {unfinished} of {world_size} had not finished after timeout={timeout:g} s (counted after "
            f"start-up); all ranks were stopped. A rank waiting in a collective that another rank never "
            "calls hangs like this; otherwise raise timeout.", unfinished, "run")
    _LAST["outcome"] = "ok"
    return [results[r] for r in range(world_size)]


def port_is_free(port: int, reuse: bool = True) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound again (notebook 03: no launch leaves a busy port).

    ``reuse=True`` sets SO_REUSEADDR, as servers such as TCPStore do; a plain bind also fails
    while old connections sit in TIME_WAIT.
    """
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def rank_info() -> dict[str, Any]:
    """Inside a launched ``fn``: ``{"rank", "world_size", "backend", "device", "master_port",
    "num_threads"}``. ``device`` is ``cuda:<rank>`` under NCCL, else ``cpu``: create tensors there.
    Notebook 03 (interconnect); used by every later distributed module.

    Raises ``RuntimeError`` outside a process group (call it inside a function run by :func:`launch`
    or by ``torchrun``).
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("rank_info() works inside a function run by course_lib.distributed.launch (or "
                           "under torchrun): no process group is initialised in this process")
    backend = str(dist.get_backend())
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    port = os.environ.get("MASTER_PORT")
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": backend,
            "device": device, "master_port": int(port) if port else None, "num_threads": torch.get_num_threads()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------------------------
# worker functions for notebook 03 (run them with launch)

def _check_sizes(sizes: Any, name: str) -> list[int]:
    if isinstance(sizes, (int, str)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"{name} must be a list of positive ints, got {type(sizes).__name__}")
    out = list(sizes)
    if not out:
        raise ValueError(f"{name} must not be empty")
    for s in out:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"{name} must contain positive ints, got {s!r}")
    return out


def allreduce_benchmark(sizes_bytes: list[int], repeats: int = 5, warmup: int = 2,
                        dtype: str | torch.dtype = "float32") -> list[dict]:
    """Time ``dist.all_reduce`` (sum) for each message size; run it under :func:`launch`.
    Notebook 03 (interconnect), section "all-reduce: latency and bandwidth".

    Each size gets one pre-allocated tensor of ``size // element size`` elements (at least one).
    Every round times each size once (a barrier before each op, so all ranks start together),
    and the rounds are interleaved over sizes so that the machine's drift hits all sizes alike;
    ``warmup`` rounds are discarded. An op's time is the slowest rank's (a MAX all-reduce of the
    per-rank times at the end), so every rank returns the same rows::

        {"bytes", "numel", "median_s", "times", "algbw_Bps", "busbw_Bps", "world_size"}

    ``algbw_Bps`` is bytes / median time; ``busbw_Bps`` multiplies it by 2 (N-1) / N, the bytes a
    ring all-reduce moves per rank, so different world sizes compare on one scale.
    """
    sizes = _check_sizes(sizes_bytes, "sizes_bytes")
    for name, value, low in (("repeats", repeats, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    dt = to_dtype(dtype)
    info = rank_info()
    device, world = info["device"], info["world_size"]
    elem = bytes_per_element(dt)
    tensors = [torch.zeros(max(1, s // elem), dtype=dt, device=device) for s in sizes]
    times = torch.zeros(len(sizes), repeats, dtype=torch.float64)
    for rnd in range(warmup + repeats):
        # rotate the order each round as well, so no size always follows the largest one
        order = [(i + rnd) % len(sizes) for i in range(len(sizes))]
        for i in order:
            dist.barrier()
            _sync(device)
            t = time.perf_counter()
            dist.all_reduce(tensors[i])
            _sync(device)
            elapsed = time.perf_counter() - t
            if rnd >= warmup:
                times[i, rnd - warmup] = elapsed
    if device.type == "cuda":
        times_dev = times.to(device)
        dist.all_reduce(times_dev, op=dist.ReduceOp.MAX)
        times = times_dev.cpu()
    else:
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    rows = []
    for i, s in enumerate(sizes):
        nbytes = tensors[i].numel() * elem
        ts = times[i].tolist()
        med = statistics.median(ts)
        algbw = nbytes / med if med > 0 else float("inf")
        rows.append({"bytes": nbytes, "numel": tensors[i].numel(), "median_s": med, "times": ts,
                     "algbw_Bps": algbw, "busbw_Bps": algbw * 2 * (world - 1) / world, "world_size": world})
    return rows


def ring_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """A hand-written ring all-reduce (sum) from point-to-point sends; returns a new tensor (the input
    is not modified). Run it inside :func:`launch`. Notebook 03 (interconnect), section "write a ring
    all-reduce", where it is compared with ``dist.all_reduce``.

    The N ranks sit on a ring: rank r sends only to its right neighbour (r+1) % N and receives only
    from its left neighbour (r-1) % N. The tensor is cut into N chunks. Two phases of N-1 steps:

    1. reduce-scatter: in each step every rank passes one chunk to the right and adds the chunk it
       receives from the left into its own copy. After N-1 steps rank r holds the complete sum of
       chunk (r+1) % N.
    2. all-gather: the finished chunks travel once more around the ring, each rank overwriting its
       copy, until every rank has every finished chunk.

    Each rank sends 2 (N-1)/N of the tensor in total, whatever N is: that is why the ring is
    bandwidth-optimal, and why its latency grows with N (2 (N-1) steps one after another).
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    world = dist.get_world_size()
    rank = dist.get_rank()
    # Work on a flat, contiguous copy; chunks are views into it, so filling a chunk fills the result.
    result = tensor.detach().clone().contiguous()
    if world == 1:
        return result  # a ring of one: the sum over one rank is the tensor itself
    flat = result.view(-1)
    # tensor_split makes N chunks whose sizes differ by at most one element, so any size works;
    # if the tensor has fewer elements than ranks, some chunks are empty (and are simply skipped).
    chunks = list(torch.tensor_split(flat, world))
    right = (rank + 1) % world
    left = (rank - 1) % world
    scratch = torch.empty(max(c.numel() for c in chunks), dtype=flat.dtype, device=flat.device)

    # Phase 1: reduce-scatter. In step s rank r sends chunk (r - s) and receives chunk (r - s - 1),
    # which is exactly the chunk its left neighbour (r - 1) sends in that step.
    for step in range(world - 1):
        send_idx = (rank - step) % world
        recv_idx = (rank - step - 1) % world
        n = chunks[recv_idx].numel()
        req = None
        if chunks[send_idx].numel() > 0:
            # Post the send without blocking first: if every rank did a blocking send, all of them
            # could wait for a receiver at once and deadlock (a cycle of waits around the ring).
            req = dist.isend(chunks[send_idx], dst=right)
        if n > 0:
            incoming = scratch[:n]
            dist.recv(incoming, src=left)  # partial sum of chunk recv_idx from the left
            chunks[recv_idx] += incoming   # add our own contribution: one more rank is in the sum
        if req is not None:
            req.wait()  # the chunk we sent must not change before the send completes (it does not)

    # Now rank r owns the full sum of chunk (r + 1) % N.
    # Phase 2: all-gather. In step s rank r forwards chunk (r + 1 - s), a finished sum, and receives
    # finished chunk (r - s) straight into place (no addition: it overwrites the partial sum).
    for step in range(world - 1):
        send_idx = (rank + 1 - step) % world
        recv_idx = (rank - step) % world
        req = None
        if chunks[send_idx].numel() > 0:
            req = dist.isend(chunks[send_idx], dst=right)
        if chunks[recv_idx].numel() > 0:
            dist.recv(chunks[recv_idx], src=left)
        if req is not None:
            req.wait()
    return result


def check_ring_against_library(sizes: list[int], seed: int = 0) -> list[dict]:
    """Compare :func:`ring_all_reduce` with ``dist.all_reduce`` on seeded random tensors (different on
    every rank) of each size; run it under :func:`launch`. Notebook 03 (interconnect) and its exercise.

    Returns one row per size: ``{"size", "world_size", "max_abs_diff", "allclose"}``, where
    ``allclose`` uses ``rtol=1e-5`` and ``atol=1e-5 x`` the largest magnitude of the sum. The two
    results need not be bit-identical: they add the same numbers in a different order, and
    floating-point addition is not associative.
    """
    sizes = _check_sizes(sizes, "sizes")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    info = rank_info()
    rank, world, device = info["rank"], info["world_size"], info["device"]
    rows = []
    for i, size in enumerate(sizes):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + rank * 7_919 + i)
        x = torch.randn(size, generator=gen).to(device)
        ours = ring_all_reduce(x)
        theirs = x.clone()
        dist.all_reduce(theirs)
        diff = float((ours - theirs).abs().max())
        scale = max(1.0, float(theirs.abs().max()))
        rows.append({"size": size, "world_size": world, "max_abs_diff": diff,
                     "allclose": bool(torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5 * scale))})
    return rows


# ----------------------------------------------------------------------------------------------
# demo and test workers (importable, so spawned ranks can run them)

def demo_rank_sum() -> tuple[int, int, float]:
    """Return ``(rank, world_size, sum over ranks of rank + 1)``: the smallest useful job. Notebook 03
    (interconnect), first launch; the tests use it too. With 2 ranks every rank returns 1 + 2 = 3."""
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
