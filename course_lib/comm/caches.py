"""Where the bytes live: a working-set sweep over this CPU's caches (notebook 03, section 2).

A core reads from its level-1 and level-2 caches (private, tens of KiB and about 1 MiB), a last-level
cache shared by several cores (tens of MiB), then main memory. :func:`working_set_bandwidth` reads one
working set over and over and reports bytes per second: while the set fits in a cache, the reads are
served there; once it is several times the last-level cache, they come from memory (Hennessy &
Patterson, *Computer Architecture*, ch. 2; McCalpin's STREAM rule: arrays at least 4x the caches).
The cache sizes come from ``course_lib.hardware.cache_sizes()`` (``{"L1d": bytes, "L2": ..., "L3": ...}``).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import psutil
import torch

from .. import arguments, timing

__all__ = [
    "working_set_sizes",
    "working_set_bandwidth",
    "memory_sizes",
    "cache_over_memory",
    "describe",
    "dependent_load_time",
]

_KIB = 2**10


def _check_dict(name: str, value: object) -> None:
    """TypeError unless ``value`` is a dict (``caches``: level -> bytes; ``bandwidth``: bytes -> bytes/s)."""
    if not isinstance(value, dict):
        raise TypeError(
            f"{name} must be a dict (hardware.cache_sizes() or working_set_bandwidth()), got {type(value).__name__}"
        )


def working_set_sizes(caches: dict[str, int], smallest: int = 32 * _KIB, limit: int | None = None) -> list[int]:
    """Powers of two from ``smallest`` to 4x the largest cache in ``caches`` (``hardware.cache_sizes()``;
    256 MiB when it is empty), at most ``limit`` bytes. ``limit=None`` (the default) allows up to a tenth
    of the memory available now and 4 GiB, so a machine with a huge last-level cache (a 320-MiB L3) still
    reaches 4x it when memory allows, and a small one stops short instead of swapping: then
    :func:`memory_sizes` says how far the sweep got. Notebook 03, section 2: what :func:`working_set_bandwidth`
    sweeps."""
    smallest = arguments.integer("smallest (bytes)", smallest, minimum=1024)
    if limit is None:
        limit = max(smallest, min(4 * 2**30, psutil.virtual_memory().available // 10))
    limit = arguments.integer("limit (bytes)", limit, minimum=smallest)
    if not isinstance(caches, dict):
        raise TypeError(
            f"caches must be a dict of level -> bytes (hardware.cache_sizes()), got {type(caches).__name__}"
        )
    top = min(limit, 4 * max(caches.values()) if caches else 256 * _KIB**2)
    sizes = [smallest]
    while sizes[-1] * 2 <= limit and sizes[-1] < top:
        sizes.append(sizes[-1] * 2)
    return sizes


def working_set_bandwidth(
    sizes_bytes: list[int], *, bytes_per_call: int = 32 * 2**20, rounds: int = 3, min_run_time: float = 0.02
) -> dict[int, float]:
    """Bytes per second one CPU thread reads from a working set of each size: ``{size: bytes/s}``.

    Notebook 03, section 2. Each call sums a float32 tensor of ``size`` bytes viewed ``bytes_per_call //
    size`` times over (``expand``: the same memory read again and again, no copy), so a small set is read
    from a cache many times in one call and the per-call overhead of a few microseconds does not count.
    One thread: the L1 and L2 caches belong to one core, and torch would split a large reduction over its
    threads (chunks of 32768 elements and up), turning one working set into several smaller ones. The sizes
    are timed interleaved (``timing.compare_interleaved``), so a busy spell hits them alike.
    """
    sizes = arguments.int_list("sizes_bytes", sizes_bytes)
    if any(s < 1024 for s in sizes):
        raise ValueError(f"sizes_bytes must be at least 1024 bytes each, got {sizes}")
    per_call = arguments.integer("bytes_per_call", bytes_per_call, minimum=1024)
    views, read = {}, {}
    for s in sizes:
        a = torch.ones(s // 4)
        times = max(1, per_call // s)
        views[s] = a.expand(times, a.numel())
        read[s] = times * a.numel() * 4
    fns = {str(s): (lambda v=views[s]: v.sum()) for s in sizes}
    t = timing.compare_interleaved(fns, rounds=rounds, num_threads=1, min_run_time=min_run_time)
    return {s: read[s] / t[str(s)].seconds for s in sizes}


def memory_sizes(bandwidth: dict[int, float], caches: dict[str, int]) -> list[int]:
    """The working sets :func:`cache_over_memory` counts as read from memory: those at least 4x the largest
    cache (McCalpin's rule; 256 MiB and up when the sizes are unknown), or, where memory allowed no such
    set, the largest one measured if it is at least twice the largest cache (most of its reads miss
    the caches; notebook 03 then says so). Empty when the sweep never got that far. Notebook 03, section 2."""
    _check_dict("bandwidth", bandwidth)
    _check_dict("caches", caches)
    llc = max(caches.values()) if caches else 64 * _KIB**2
    far = [s for s in bandwidth if s >= 4 * llc]
    if far or not bandwidth:
        return sorted(far)
    return [max(bandwidth)] if max(bandwidth) >= 2 * llc else []


def cache_over_memory(bandwidth: dict[int, float], caches: dict[str, int]) -> tuple[float, float]:
    """(in-cache, memory) bytes/s from :func:`working_set_bandwidth`'s result: the median over working sets
    well inside L2 (above twice L1d, at most half of L2; 64-256 KiB when the sizes are unknown) and over
    :func:`memory_sizes` (at least 4x the largest cache, or the largest set measured, at least twice it,
    where memory allowed no more). Notebook 03, section 2. ValueError when either group is empty."""
    _check_dict("bandwidth", bandwidth)
    _check_dict("caches", caches)
    l1, l2 = caches.get("L1d", 32 * _KIB), caches.get("L2", 512 * _KIB)
    inside = [bw for s, bw in bandwidth.items() if 2 * l1 <= s <= l2 // 2]
    outside = [bandwidth[s] for s in memory_sizes(bandwidth, caches)]
    if not inside or not outside:
        raise ValueError(
            f"bandwidth needs working sets inside L2 and at least twice the last cache; got {sorted(bandwidth)}"
        )
    return statistics.median(inside), statistics.median(outside)


def _size(s: int) -> str:
    return f"{s / 2**20:g} MiB" if s >= 2**20 else f"{s / 2**10:g} KiB"


def describe(bandwidth: dict[int, float], caches: dict[str, int]) -> str:
    """The sweep of :func:`working_set_bandwidth` as text, one line per cache level a working set fits in
    (``within L1d``, ..., ``beyond the caches``), after a line of the cache sizes. Notebook 03, section 2."""
    _check_dict("bandwidth", bandwidth)
    _check_dict("caches", caches)
    lines = ["caches: " + (", ".join(f"{k} {_size(v)}" for k, v in caches.items()) or "sizes unknown here")]
    fits = {s: next((f"within {k}" for k, v in caches.items() if s <= v), "beyond the caches") for s in bandwidth}
    for where in dict.fromkeys(fits.values()):
        sets = ", ".join(f"{_size(s)} {b / 1e9:.0f}" for s, b in bandwidth.items() if fits[s] == where)
        lines.append(f"{where:17s}: {sets} GB/s")
    knee = caches_end(bandwidth)
    if knee:
        lines.append(
            f"the caches this thread sees end between {_size(knee[0])} and {_size(knee[1])}: from there on every set "
            "is read at about the largest set's pace, memory's, whatever cache size the system reports (a VM may "
            "report its host chip's whole last-level cache)"
        )
    return "\n".join(lines)


def caches_end(bandwidth: dict[int, float], within: float = 1.15) -> tuple[int, int] | None:
    """Where the sweep reaches memory's pace: the two neighbouring sizes between which the bandwidth comes within
    ``within`` of the largest set's and stays there. None where even the smallest set runs at that pace, or the
    sweep has fewer than three sizes."""
    _check_dict("bandwidth", bandwidth)
    sizes = sorted(bandwidth)
    if len(sizes) < 3:
        return None
    pace = bandwidth[sizes[-1]]
    first = len(sizes) - 1
    while first > 0 and bandwidth[sizes[first - 1]] <= within * pace:
        first -= 1
    return (sizes[first - 1], sizes[first]) if first > 0 else None


def _pointer_chain(size_bytes: int, line: int, seed: int) -> memoryview:
    """A cycle through every ``line``-byte line of a ``size_bytes`` int32 array, in a random order: the first int
    of each line holds the index of the next line's first int (lmbench's ``lat_mem_rd`` with a random stride)."""
    per_line = line // 4
    lines = size_bytes // line
    order = np.random.default_rng(seed).permutation(lines).astype(np.int64) * per_line
    chain = np.zeros(lines * per_line, dtype=np.int32)
    chain[order] = np.roll(order, -1)
    return memoryview(chain)


def _chase(chain: memoryview, steps: int) -> float:
    """Seconds a step of ``i = chain[i]``: each load's address is the value the last one read."""
    i = 0
    start = time.perf_counter()
    for _ in range(steps):
        i = chain[i]
    return (time.perf_counter() - start) / steps


def dependent_load_time(
    size_bytes: int, *, small_bytes: int = 32 * _KIB, line: int = 64, steps: int = 100_000, rounds: int = 3
) -> dict[str, float]:
    """Seconds per load when each load's address comes from the one before (a *pointer chase*: McVoy & Staelin,
    "lmbench", USENIX 1996): ``{"cache": s on a small_bytes chain, "memory": s on a size_bytes chain}``.

    Notebook 03, Going deeper on the caches. One load is in flight at a time, so a step takes the latency of
    wherever the line lives, plus the Python interpreter's own work per step (tens of ns). On the small chain
    (inside L1) the step is almost all interpreter; the difference ``memory - cache`` is what a random load from
    memory adds. Two errors pull it from DRAM's own latency, in opposite directions: the out-of-order core overlaps
    part of the interpreter's work with the wait (lower), and, like lmbench, a random load also pays TLB misses and
    page walks (higher; twice over in a VM). The chain visits every ``line``-byte line of the set once, in a random
    order, so neither the caches nor the prefetchers can guess the next address. The two chains are timed in turns,
    ``rounds`` times each; the fastest of each is kept.
    """
    size = arguments.integer("size_bytes", size_bytes, minimum=1024)
    small = arguments.integer("small_bytes", small_bytes, minimum=1024)
    line = arguments.integer("line", line, minimum=8)
    steps = arguments.positive_int("steps", steps)
    rounds = arguments.positive_int("rounds", rounds)
    if small >= size:
        raise ValueError(f"small_bytes must be below size_bytes, got {small} and {size}")
    if line % 4 or small < 2 * line:
        raise ValueError(f"line must be a multiple of 4 bytes and at most half of small_bytes, got {line}")
    chains = {"cache": _pointer_chain(small, line, 0), "memory": _pointer_chain(size, line, 1)}
    best = {k: float("inf") for k in chains}
    for _ in range(rounds):
        for k, chain in chains.items():
            best[k] = min(best[k], _chase(chain, steps))
    return best
