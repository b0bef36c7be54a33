"""Collectives measured and written by hand; run them under ``launch`` (notebook 03, interconnect).

* ``allreduce_benchmark``: ``dist.all_reduce`` time per message size, the slowest rank's, interleaved.
* ``ring_all_reduce``: a ring all-reduce from point-to-point sends (the lesson), and
  ``check_ring_against_library``, which compares it with ``dist.all_reduce``.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from .. import arguments, names, seeds
from ..timing import format_rate, representative
from ..hardware import synchronize
from .launcher import rank_info

__all__ = [
    "ALLREDUCE_SIZES",
    "ALLREDUCE_ALGORITHMS",
    "allreduce_benchmark",
    "allreduce_with_controls",
    "bytes_written",
    "ring_all_reduce",
    "naive_all_reduce",
    "root_all_reduce",
    "check_ring_against_library",
    "bytes_per_message_byte",
    "allreduce_table",
]

#: What ``allreduce_benchmark(algorithm=...)`` can time: the backend's own ``dist.all_reduce``, the ring
#: written by hand, the naive all-reduce (every rank sends its whole tensor to every other), or reduce to
#: rank 0 then broadcast ("root": rank 0 sends N-1 tensors, the others one each).
ALLREDUCE_ALGORITHMS: tuple[str, ...] = ("library", "ring", "naive", "root")

#: Message sizes for notebook 03's all-reduce sweep: 1 KB to 64 MB in steps of 4x.
ALLREDUCE_SIZES: tuple[int, ...] = tuple(4**k * 1024 for k in range(9))


def bytes_written() -> int | None:
    """Bytes this process has written through system calls so far (``wchar`` of /proc/self/io), or None."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _all_reduce_on(t: torch.Tensor, device: torch.device, op) -> torch.Tensor:
    """All-reduce a CPU tensor of results (NCCL reduces only GPU tensors: go through the device)."""
    on_device = t.to(device)
    dist.all_reduce(on_device, op=op)
    return on_device.cpu()


def allreduce_benchmark(
    sizes_bytes: list[int],
    repeats: int = 5,
    warmup: int = 2,
    dtype: str | torch.dtype = "float32",
    algorithm: str = "library",
    warm_below: int = 2**20,
) -> list[dict]:
    """Time ``dist.all_reduce`` (sum) for each message size; run it under :func:`launch`.
    Notebook 03 (interconnect), section "all-reduce: latency and bandwidth".

    Each size gets one pre-allocated tensor of ``size // element size`` elements (at least one).
    Every round times each size once (a barrier before each op, so all ranks start together),
    and the rounds are interleaved over sizes so that the machine's drift hits all sizes alike;
    ``warmup`` rounds are discarded. An op's time is the slowest rank's (a MAX all-reduce of the
    per-rank times at the end), so every rank returns the same rows::

        {"bytes", "numel", "seconds", "median_s", "times", "algbw_Bps", "busbw_Bps", "world_size",
         "cpu_s", "bytes_sent", "bytes_sent_max", "bytes_sent_min"}

    ``seconds`` is the low quantile (20th percentile) of the repeats, the time the operation takes
    when the operating system does not get in the way (``course_lib.timing`` explains why);
    ``median_s`` the median. ``algbw_Bps`` is bytes / ``seconds``; ``busbw_Bps`` multiplies it by 2 (N-1) / N, the
    bytes a
    ring all-reduce moves per rank, so different world sizes compare on one scale.

    ``cpu_s`` is the CPU time all ranks spent in one operation together (each rank's median over the repeats
    of ``time.process_time``, all its threads, summed over ranks): divided by the wall time, how many cores
    the operation keeps busy; notebook 03 compares it with the free cores to measure how much the ranks
    share them.

    ``bytes_sent`` is what one rank handed to the operating system to send in one all-reduce (the mean
    over ranks and repeats of the ``wchar`` counter in ``/proc/self/io``; gloo writes its messages
    with ``writev``); ``bytes_sent_max`` and ``bytes_sent_min`` are the busiest and the idlest rank's
    (each the mean over repeats): a mean over ranks cannot tell a ring from reduce-to-root plus
    broadcast, whose root sends N-1 times the message and the others once. All three are None where the
    operating system keeps no such count (macOS, Windows) or the backend does not write through it (NCCL).
    For a ring every rank sends 2 (N-1) / N times ``bytes``: notebook 03 checks that factor on the busiest
    rank, and that the idlest sends as much, whatever the wall time does on a shared CPU.

    ``algorithm`` (one of ``ALLREDUCE_ALGORITHMS``) times ``dist.all_reduce`` ("library"), the hand-written
    :func:`ring_all_reduce` ("ring"), :func:`naive_all_reduce` ("naive", (N-1) times the bytes per rank)
    or :func:`root_all_reduce` ("root": the same mean over ranks as a ring on 4 ranks, N-1 on the root):
    what the byte count in notebook 03 must tell from a ring.

    ``warm_below``: a message smaller than this many bytes is sent once, untimed, right before each timed
    one. The rounds rotate over the sizes, so without it a small message often follows the largest one and
    pays for what that message left cold (caches, sleeping receiver threads): a 4-byte all-reduce can then
    take longer than a 1-KiB one. Latency benchmarks time a message after others of its size (the OSU
    micro-benchmarks run warm-up iterations per size). 0 turns it off.
    """
    algorithm = arguments.choice("algorithm", algorithm, ALLREDUCE_ALGORITHMS)
    reduce = {"library": dist.all_reduce, "ring": ring_all_reduce, "naive": naive_all_reduce, "root": root_all_reduce}[
        algorithm
    ]
    sizes = arguments.int_list("sizes_bytes", sizes_bytes)
    repeats = arguments.positive_int("repeats", repeats)
    warmup = arguments.nonnegative_int("warmup", warmup)
    warm_below = arguments.nonnegative_int("warm_below", warm_below)
    dt = names.torch_dtype(dtype)
    info = rank_info()
    device, world = info["device"], info["world_size"]
    elem = names.bytes_per_element(dt)
    tensors = [torch.zeros(max(1, s // elem), dtype=dt, device=device) for s in sizes]
    times = torch.zeros(len(sizes), repeats, dtype=torch.float64)
    sent = torch.zeros(len(sizes), repeats, dtype=torch.float64)
    cpu = torch.zeros(len(sizes), repeats, dtype=torch.float64)
    for rnd in range(warmup + repeats):
        # rotate the order each round as well, so no size always follows the largest one
        order = [(i + rnd) % len(sizes) for i in range(len(sizes))]
        for i in order:
            if tensors[i].numel() * elem < warm_below:
                reduce(tensors[i])  # untimed: the message's path is warm again after a large one
            dist.barrier()
            synchronize(device)
            written = bytes_written()
            c, t = time.process_time(), time.perf_counter()
            reduce(tensors[i])
            synchronize(device)
            elapsed, used = time.perf_counter() - t, time.process_time() - c
            if rnd >= warmup:
                times[i, rnd - warmup] = elapsed
                cpu[i, rnd - warmup] = used
                if written is not None:
                    sent[i, rnd - warmup] = bytes_written() - written
    times = _all_reduce_on(times, device, dist.ReduceOp.MAX)  # the slowest rank's time
    cpu = _all_reduce_on(cpu.median(dim=1).values.contiguous(), device, dist.ReduceOp.SUM)  # all ranks' CPU time
    counted = bytes_written() is not None and device.type == "cpu"
    per_rank = sent.mean(dim=1)  # this rank's bytes per all-reduce, for each size
    sent_max = _all_reduce_on(per_rank.clone(), device, dist.ReduceOp.MAX)  # the busiest rank's
    sent_min = _all_reduce_on(per_rank.clone(), device, dist.ReduceOp.MIN)  # the idlest rank's
    sent = _all_reduce_on(sent, device, dist.ReduceOp.SUM) / world  # the mean over ranks
    rows = []
    for i, s in enumerate(sizes):
        nbytes = tensors[i].numel() * elem
        ts = times[i].tolist()
        low = representative(ts)
        algbw = nbytes / low if low > 0 else float("inf")
        rows.append(
            {
                "bytes": nbytes,
                "numel": tensors[i].numel(),
                "seconds": low,
                "median_s": statistics.median(ts),
                "times": ts,
                "algbw_Bps": algbw,
                "busbw_Bps": algbw * 2 * (world - 1) / world,
                "world_size": world,
                "cpu_s": float(cpu[i]),
                "bytes_sent": float(sent[i].mean()) if counted else None,
                "bytes_sent_max": float(sent_max[i]) if counted else None,
                "bytes_sent_min": float(sent_min[i]) if counted else None,
            }
        )
    return rows


def allreduce_with_controls(
    sizes_bytes: list[int],
    repeats: int = 5,
    controls: tuple[str, ...] = ("root", "naive"),
    control_bytes: int = 2**20,
    control_repeats: int = 2,
) -> dict[str, list[dict]]:
    """:func:`allreduce_benchmark` of the backend's all-reduce on ``sizes_bytes``, then of each algorithm in
    ``controls`` on one message of ``control_bytes``, in one launch; run it under :func:`launch`. Notebook 03,
    section "from 2 ranks to 4": the controls are what its byte count must reject, measured beside it.
    Returns ``{"library": rows, control: rows, ...}``."""
    controls = tuple(arguments.choice("controls", c, ALLREDUCE_ALGORITHMS) for c in controls)
    out = {"library": allreduce_benchmark(sizes_bytes, repeats=repeats)}
    for c in controls:
        out[c] = allreduce_benchmark([control_bytes], repeats=control_repeats, warmup=1, algorithm=c)
    return out


def bytes_per_message_byte(rows: list[dict]) -> dict[str, float] | None:
    """What a rank sent per byte of message, from :func:`allreduce_benchmark` rows: ``{"max", "min", "mean"}``
    (the busiest rank, the idlest, the mean over ranks), each the median over the rows. None where the
    operating system counted no bytes. Notebook 03, "what the bytes say": a ring sends ``2(N-1)/N``."""
    if not rows or any(r.get("bytes_sent") is None for r in rows):
        return None
    keys = {"max": "bytes_sent_max", "min": "bytes_sent_min", "mean": "bytes_sent"}
    return {k: statistics.median(r[key] / r["bytes"] for r in rows) for k, key in keys.items()}


def allreduce_table(rows: list[dict], predict, llc_bytes: int | None = None) -> str:
    """A text table of :func:`allreduce_benchmark` rows beside a model: size, measured and predicted time,
    their ratio, bus bandwidth and, given ``llc_bytes``, the ranks' tensors over the last-level cache
    (``N x bytes / llc_bytes``: past 1 they cannot all stay in it). Notebook 03, section 5. ``predict`` maps
    bytes to seconds (``AlphaBeta.predict``)."""
    head = f"{'bytes':>11}  {'measured*':>9}  {'model':>9}  model / measured  bus bw, best-case"
    lines = [head + ("  ranks' tensors / LLC" if llc_bytes else "")]
    for r in rows:
        model = float(predict(r["bytes"]))
        line = f"{r['bytes']:>11,}  {r['seconds'] * 1e3:6.3f} ms  {model * 1e3:6.3f} ms  {model / r['seconds']:15.2f}x"
        line += f"  {format_rate(r['busbw_Bps'], 'B/s'):>10}"
        if llc_bytes:
            line += f"  {r['world_size'] * r['bytes'] / llc_bytes:20.2f}"
        lines.append(line)
    return "\n".join(lines + ["* the 20th percentile of the repeats: the least disturbed runs, a best case"])


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
        incoming = scratch[: chunks[recv_idx].numel()]
        _exchange(chunks[send_idx], right, incoming, left)  # partial sum of chunk recv_idx from the left
        chunks[recv_idx] += incoming  # add our own contribution: one more rank is in the sum

    # Now rank r owns the full sum of chunk (r + 1) % N.
    # Phase 2: all-gather. In step s rank r forwards chunk (r + 1 - s), a finished sum, and receives
    # finished chunk (r - s) straight into place (no addition: it overwrites the partial sum).
    for step in range(world - 1):
        _exchange(chunks[(rank + 1 - step) % world], right, chunks[(rank - step) % world], left)
    return result


def naive_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """The naive all-reduce (sum): every rank sends its whole tensor to every other rank and adds what it
    receives; returns a new tensor. Each rank sends (N-1) times the tensor, against 2 (N-1)/N for the ring:
    the same on 2 ranks, twice on 4. Timed only to show what a byte count rejects."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    world, rank = dist.get_world_size(), dist.get_rank()
    result = tensor.detach().clone().contiguous()
    others = [p for p in range(world) if p != rank]
    inbox = [torch.empty_like(result) for _ in others]
    ops = [dist.P2POp(dist.isend, result, p) for p in others] + [
        dist.P2POp(dist.irecv, box, p) for box, p in zip(inbox, others)
    ]
    for request in dist.batch_isend_irecv(ops) if ops else ():
        request.wait()
    for box in inbox:
        result += box
    return result


def root_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Reduce to rank 0, then broadcast (sum), from point-to-point sends; returns a new tensor. Every other
    rank sends its tensor to rank 0, which adds them and sends the sum back to each: rank 0 sends N-1
    tensors, the others one each. On 4 ranks the mean over ranks, (3 + 1 + 1 + 1) / 4 = 1.5 tensors, equals
    a ring's; the busiest rank sends twice a ring's. Timed only to show what a per-rank byte count rejects."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    world, rank = dist.get_world_size(), dist.get_rank()
    result = tensor.detach().clone().contiguous()
    if world == 1:
        return result
    if rank == 0:
        inbox = [torch.empty_like(result) for _ in range(1, world)]
        for request in dist.batch_isend_irecv([dist.P2POp(dist.irecv, box, p) for p, box in enumerate(inbox, 1)]):
            request.wait()
        for box in inbox:
            result += box
        for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, result, p) for p in range(1, world)]):
            request.wait()
    else:
        dist.send(result, 0)
        dist.recv(result, 0)
    return result


def _exchange(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int) -> None:
    """Send ``send`` to rank ``dst`` and receive into ``recv`` from rank ``src`` at the same time.

    Both are posted together (``batch_isend_irecv``) and then waited for. Had every rank first made a
    blocking send, all of them could wait for a receiver at once: a cycle of waits around the ring,
    a deadlock. Posting the pair as one batch also lets NCCL, which needs the sends and receives of a
    step grouped, run the same code as gloo. Empty chunks (a tensor with fewer elements than ranks)
    are skipped.
    """
    ops = [
        dist.P2POp(op, t, peer) for op, t, peer in ((dist.isend, send, dst), (dist.irecv, recv, src)) if t.numel() > 0
    ]
    for request in dist.batch_isend_irecv(ops) if ops else ():
        request.wait()


def check_ring_against_library(sizes: list[int], seed: int = 0, algorithm: str = "ring") -> list[dict]:
    """Compare :func:`ring_all_reduce` with ``dist.all_reduce`` on seeded random tensors (different on
    every rank) of each size; run it under :func:`launch`. Notebook 03 (interconnect) and its exercise.

    Returns one row per size: ``{"size", "world_size", "max_abs_diff", "allclose"}``, the worst over every
    rank (the same rows on each), where ``allclose`` uses ``rtol=1e-5`` and ``atol=1e-5 x`` the largest
    magnitude of the sum. The two
    results need not be bit-identical: they add the same numbers in a different order, and
    floating-point addition is not associative. ``algorithm`` ("ring", "naive" or "root") picks the
    hand-written all-reduce compared.
    """
    by_hand = {"ring": ring_all_reduce, "naive": naive_all_reduce, "root": root_all_reduce}
    ours_fn = by_hand[arguments.choice("algorithm", algorithm, tuple(by_hand))]
    sizes = arguments.int_list("sizes", sizes)
    seed = arguments.nonnegative_int("seed", seed)
    info = rank_info()
    rank, world, device = info["rank"], info["world_size"], info["device"]
    rows = []
    for i, size in enumerate(sizes):
        gen = torch.Generator().manual_seed(seeds.derive(seed, "rank", rank, "size", i))
        x = torch.randn(size, generator=gen).to(device)
        ours = ours_fn(x)
        theirs = x.clone()
        dist.all_reduce(theirs)
        scale = max(1.0, float(theirs.abs().max()))
        close = bool(torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5 * scale))
        worst = torch.tensor([float((ours - theirs).abs().max()), 0.0 if close else 1.0], dtype=torch.float64)
        worst = worst.to(device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # every rank's result judged, not only the one returned
        rows.append(
            {
                "size": size,
                "world_size": world,
                "max_abs_diff": float(worst[0]),
                "allclose": not bool(worst[1]),
            }
        )
    return rows
