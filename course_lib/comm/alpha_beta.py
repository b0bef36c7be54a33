"""Communication cost models: how long a collective takes, and what that does to scaling.

Used by notebook 03 (interconnect): predicting all-reduce time, reading nccl-tests style
bandwidths, fitting a latency-bandwidth line to gloo measurements, data-parallel
speedup, and a cited table of link bandwidths (PCIe, NVLink, InfiniBand, Ethernet, TPU ICI).

The alpha-beta (Hockney) model
------------------------------
Sending one message of ``n`` bytes costs ``alpha + n * beta``: ``alpha`` is a fixed
per-message latency in seconds (software stack, wake-up, wire latency) and
``beta = 1 / bandwidth`` is seconds per byte. Collectives are built from such messages,
and the formulas here are the classic ones from Thakur, Rabenseifner & Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005
(https://doi.org/10.1177/1094342005051521), and NVIDIA's nccl-tests notes
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). Every function
takes ``bandwidth`` in **bytes per second** (not GB/s) and returns seconds. The
reduction arithmetic (the ``gamma`` term of Thakur et al.) is left out: on real links
it is small next to the transfer time.

What the model gets wrong on a laptop or a shared VM: a single alpha-beta line fitted over
kilobytes to tens of megabytes of gloo all-reduce timings misses the small messages badly,
because their time is the operating system waking the receiving process (it jumps from run to
run), not the wire. Fitted on sizes >= 1 MB only (``fit_alpha_beta(..., min_bytes=2**20)``)
the line follows the measurements much more closely; notebook 03 prints both fits and their
misses on the machine it runs on.

The link table
--------------
``catalog.links()`` / ``catalog.get_link()`` list what common links can carry **per direction**, in
GB/s (10^9 bytes/s). Links are full duplex: a PCIe 4.0 x16 slot moves ~31.5 GB/s each
way at the same time. Vendors often print the sum of both directions (NVLink "900 GB/s",
TPU "bidirectional ICI bandwidth"); those are halved here and each row's notes say so.
Network rates quoted in Gb/s are divided by 8. The rows live with the other data tables in
``course_lib/tables/links.json`` (loaded by ``course_lib.catalog``); the NVLink, TPU and PCIe
rows must equal the accelerator table's ``interconnect_gbs`` (per direction as well), and the
tests check that the two tables agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from .. import arguments

ALGORITHMS = ("ring", "tree", "parameter_server")
"""All-reduce algorithms that ``allreduce_time`` models."""

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")
"""Collective names ``busbw`` knows the nccl-tests correction factor for."""

_SCALINGS = ("weak", "strong")
"""``data_parallel_speedup`` modes: fixed per-rank batch (weak) or fixed global batch."""

_NVIDIA_NCCL_TESTS = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"

# --------------------------------------------------------------------------------------
# Argument checks (shared)
# --------------------------------------------------------------------------------------


def _ceil_log2(p: int) -> int:
    """Rounds of a binary/binomial tree over p ranks: ceil(log2 p), 0 for p = 1."""
    return (p - 1).bit_length()


# --------------------------------------------------------------------------------------
# 1. Alpha-beta cost of the collectives
# --------------------------------------------------------------------------------------


def _link_args(nbytes, world_size, alpha, bandwidth) -> tuple[float, int, float, float]:
    """The checked (bytes, ranks, alpha, bandwidth) every collective's time takes."""
    return (
        arguments.nonnegative("nbytes", nbytes),
        arguments.integer("world_size (the number of ranks)", world_size, minimum=1),
        arguments.nonnegative("alpha (per-message latency in seconds)", alpha),
        arguments.positive("bandwidth (bytes per second; float('inf') is a free link)", bandwidth, allow_inf=True),
    )


def allreduce_time(
    nbytes: float,
    world_size: int,
    alpha: float,
    bandwidth: float,
    algorithm: str = "ring",
) -> float:
    """Predicted seconds for an all-reduce of ``nbytes`` (the buffer size on each rank).

    Notebook 03, "predicting an all-reduce". With ``p = world_size``,
    ``n = nbytes`` and ``bw = bandwidth`` (bytes/s, per link and per direction):

    * ``"ring"`` (reduce-scatter then all-gather around a ring; what NCCL and gloo use
      for large buffers): ``2(p-1)*alpha + 2(p-1)/p * n/bw``. Each rank sends and
      receives ``2(p-1)`` chunks of ``n/p`` bytes. Assumes every rank has its own
      full-duplex link to its ring neighbour, so all ``p`` links run at once. The
      bandwidth term is within a factor ``2(p-1)/p < 2`` of ``n/bw``: it hardly grows
      with ``p`` (bandwidth-optimal), but the latency term grows linearly.
    * ``"tree"`` (binary-tree reduce to a root, then broadcast back down, whole
      messages, no pipelining): ``2*ceil(log2 p)*(alpha + n/bw)``. Latency grows only as
      ``log p``, but every round moves the whole buffer: good for small messages. (NCCL's
      tree pipelines chunks and does much better on large ones than this.)
    * ``"parameter_server"`` (one server rank; the ``p-1`` workers push ``n`` bytes and
      pull ``n`` bytes back, all through the server's single link, one message at a
      time): ``2(p-1)*(alpha + n/bw)``. The server's link is the bottleneck, so time
      grows linearly in ``p`` for large messages too.

    ``world_size == 1`` costs 0. The reduction arithmetic itself is ignored. Formulas
    after Thakur, Rabenseifner & Gropp (2005) and the NCCL documentation.

    Raises TypeError/ValueError for negative ``nbytes``, ``world_size < 1``,
    ``alpha < 0``, ``bandwidth <= 0`` or an ``algorithm`` not in ``ALGORITHMS``.
    """
    n, p, a, bw = _link_args(nbytes, world_size, alpha, bandwidth)
    algorithm = arguments.choice("algorithm", algorithm, ALGORITHMS)
    if p == 1:
        return 0.0
    if algorithm == "ring":
        return 2 * (p - 1) * a + 2 * (p - 1) / p * n / bw
    if algorithm == "tree":
        return 2 * _ceil_log2(p) * (a + n / bw)
    return 2 * (p - 1) * (a + n / bw)  # parameter_server


def double_tree_allreduce_time(nbytes: float, world_size: int, alpha: float, bandwidth: float) -> float:
    """Predicted seconds for a pipelined double-binary-tree all-reduce of ``nbytes`` (per rank).

    ``ring_vs_tree`` tabulates it. Two binary trees, each carrying half the message in
    small pipelined chunks, every rank a leaf in one tree and an inner node in the other (Sanders,
    Speck & Traeff 2009, "Two-tree algorithms for full bandwidth broadcast, reduction and scan";
    NCCL 2.4 uses it for latency at scale): a reduce up and a broadcast down, each ``ceil(log2 p)``
    hops deep, so ``2*ceil(log2 p)*alpha + 2*n/bw`` (the pipeline's fill, a few chunks, is left
    out). Against the ring's ``2(p-1)*alpha + 2(p-1)/p*n/bw`` it pays up to twice the bandwidth term
    but a latency term that grows with ``log p``, not ``p``: :func:`ring_tree_crossover_bytes`.
    ``world_size == 1`` costs 0. Same argument checks as :func:`allreduce_time`.
    """
    n, p, a, bw = _link_args(nbytes, world_size, alpha, bandwidth)
    if p == 1:
        return 0.0
    return 2 * _ceil_log2(p) * a + 2 * n / bw


def ring_tree_crossover_bytes(world_size: int, alpha: float, bandwidth: float) -> float:
    """The message size (bytes) above which the ring all-reduce beats the double binary tree.

    ``ring_vs_tree`` uses it. Equating :func:`allreduce_time` (ring) with
    :func:`double_tree_allreduce_time`: ``2(p-1-ceil(log2 p))*alpha = 2*n/(p*bw)``, so
    ``n = p*(p-1-ceil(log2 p))*alpha*bw``. 0 where the tree never wins (p <= 2, or alpha = 0).
    """
    p = arguments.integer("world_size (the number of ranks)", world_size, minimum=1)
    a = arguments.nonnegative("alpha (per-message latency in seconds)", alpha)
    bw = arguments.positive("bandwidth (bytes per second)", bandwidth)
    return float(p * max(0, p - 1 - _ceil_log2(p)) * a * bw)


def ring_vs_tree(
    alpha: float, bandwidth: float, world_sizes: Sequence[int] = (8, 64, 1024), sizes: Sequence[float] = (2**12, 2**28)
) -> list[dict]:
    """Ring against double-binary-tree all-reduce times for each world size and message size.

    Notebook 03 (interconnect), "ring or tree". One row per world size: ``{"world_size",
    "crossover_bytes", "times": {size: (ring_s, tree_s)}}`` from :func:`allreduce_time` and
    :func:`double_tree_allreduce_time` with this ``alpha`` (seconds per message) and ``bandwidth``.
    """
    rows = []
    for p in world_sizes:
        times = {
            s: (allreduce_time(s, p, alpha, bandwidth), double_tree_allreduce_time(s, p, alpha, bandwidth))
            for s in sizes
        }
        rows.append(
            {"world_size": p, "crossover_bytes": ring_tree_crossover_bytes(p, alpha, bandwidth), "times": times}
        )
    return rows


def allgather_time(nbytes: float, world_size: int, alpha: float, bandwidth: float) -> float:
    """Predicted seconds for a ring all-gather; ``nbytes`` is the **total output** size.

    All-gather is the second half of a ring all-reduce (and
    what FSDP does before each layer). Each rank starts with ``n/p`` bytes and ends with
    all ``n``: ``(p-1)*alpha + (p-1)/p * n/bw`` (Thakur et al. 2005, ring algorithm).
    ``world_size == 1`` costs 0. Same argument checks as ``allreduce_time``.
    """
    n, p, a, bw = _link_args(nbytes, world_size, alpha, bandwidth)
    if p == 1:
        return 0.0
    return (p - 1) * a + (p - 1) / p * n / bw


def reduce_scatter_time(nbytes: float, world_size: int, alpha: float, bandwidth: float) -> float:
    """Predicted seconds for a ring reduce-scatter; ``nbytes`` is the **total input** size.

    The first half of a ring all-reduce (and how FSDP reduces
    gradients). Each rank starts with ``n`` bytes and ends owning the reduced ``n/p``:
    ``(p-1)*alpha + (p-1)/p * n/bw``. ``allgather_time + reduce_scatter_time`` equals
    the ring ``allreduce_time``. ``world_size == 1`` costs 0.
    """
    return allgather_time(nbytes, world_size, alpha, bandwidth)  # the same messages, run in the other direction


def broadcast_time(nbytes: float, world_size: int, alpha: float, bandwidth: float) -> float:
    """Predicted seconds for a binomial-tree broadcast of ``nbytes`` from one root.

    ``ceil(log2 p) * (alpha + n/bw)``: in each round every
    rank that already has the data sends the whole buffer to one that does not, so the
    number of holders doubles per round (Thakur et al. 2005, short-message algorithm;
    for long messages MPICH switches to scatter + all-gather). ``world_size == 1``
    costs 0.
    """
    n, p, a, bw = _link_args(nbytes, world_size, alpha, bandwidth)
    return _ceil_log2(p) * (a + n / bw)


# --------------------------------------------------------------------------------------
# 2. nccl-tests bandwidths
# --------------------------------------------------------------------------------------


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: ``nbytes / seconds`` (nccl-tests' ``algbw``).

    The number a naive benchmark prints. For collectives it
    falls as ranks are added even when the links are fully used; see ``busbw``.
    Source: NVIDIA nccl-tests, doc/PERFORMANCE.md.
    """
    n = arguments.nonnegative("nbytes", nbytes)
    t = arguments.number("seconds", seconds, allow_inf=True)
    if t <= 0 or math.isinf(t):
        raise ValueError(f"seconds must be a finite number > 0, got {t!r}")
    return n / t


def busbw_factor(world_size: int, op: str = "all_reduce") -> float:
    """The nccl-tests correction factor from ``algbw`` to ``busbw`` for ``op``.

     With ``p = world_size`` (NVIDIA nccl-tests,
    doc/PERFORMANCE.md, "Summary"): all_reduce ``2(p-1)/p``; all_gather,
    reduce_scatter and all_to_all ``(p-1)/p``; broadcast and reduce ``1``.
    """
    p = arguments.integer("world_size (the number of ranks)", world_size, minimum=1)
    op = arguments.choice("op", op, OPS)
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) / p
    return 1.0  # broadcast, reduce


def busbw(nbytes: float, seconds: float, world_size: int, op: str = "all_reduce") -> float:
    """Bus bandwidth in bytes/s: ``algbw * busbw_factor(world_size, op)``.

    The nccl-tests number that, for a ring, equals the speed
    each link actually ran at, so it can be compared with the link's peak (one
    direction) whatever the number of ranks. For a ring all-reduce timed at exactly the
    alpha = 0 model, ``busbw`` returns the ``bandwidth`` that went in. ``nbytes`` follows
    nccl-tests: the buffer size for all_reduce/broadcast/reduce, the total (all ranks')
    size for all_gather/reduce_scatter. Source: NVIDIA nccl-tests, doc/PERFORMANCE.md.
    """
    return algbw(nbytes, seconds) * busbw_factor(world_size, op)


# --------------------------------------------------------------------------------------
# 3. Fitting alpha and beta to measurements
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlphaBeta:
    """A fitted latency-bandwidth model: ``t(n) = a * alpha_s + b * n / bandwidth``.

    ``latency_factor`` (a) and ``bandwidth_factor`` (b) are 1 for a plain line
    (``fit_alpha_beta``); ``fit_ring_allreduce`` sets them to ``2(p-1)`` and
    ``2(p-1)/p`` so that ``alpha_s`` is the per-message latency and
    ``bandwidth_bytes_per_s`` the per-link bandwidth of the ring formula.
    ``alpha_clamped`` says the unconstrained fit gave a negative intercept and the
    line was refitted through the origin (alpha = 0).
    """

    alpha_s: float
    bandwidth_bytes_per_s: float
    latency_factor: float = 1.0
    bandwidth_factor: float = 1.0
    model: str = "line"
    n_points: int = 0
    min_bytes: float = 0.0
    alpha_clamped: bool = False

    def __post_init__(self) -> None:
        # A model that predicts infinite or negative times is not a model: refuse it up front.
        arguments.nonnegative("alpha_s (per-message latency in seconds)", self.alpha_s)
        arguments.positive("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        arguments.nonnegative("latency_factor", self.latency_factor)
        arguments.positive("bandwidth_factor", self.bandwidth_factor)
        arguments.nonnegative("min_bytes", self.min_bytes)

    @property
    def beta_s_per_byte(self) -> float:
        """Seconds per byte: ``1 / bandwidth_bytes_per_s``."""
        return 1.0 / self.bandwidth_bytes_per_s

    def predict(self, nbytes):
        """Predicted seconds for ``nbytes`` (a number, or an array of sizes -> an array)."""
        n = np.asarray(nbytes, dtype=float)
        if np.any(n < 0):
            raise ValueError("nbytes must be >= 0")
        t = self.latency_factor * self.alpha_s + self.bandwidth_factor * n / self.bandwidth_bytes_per_s
        return float(t) if t.ndim == 0 else t

    @property
    def intercept_s(self) -> float:
        """The fitted line's value at 0 bytes, ``latency_factor * alpha_s`` (seconds).

        An intercept read off messages of 1 MB and more, not the
        measured time of a tiny message (which follows other rules on a busy machine).
        """
        return self.latency_factor * self.alpha_s

    @property
    def crossover_bytes(self) -> float:
        """The message size at which the latency term equals the bandwidth term (bytes).

        Smaller messages are latency-bound, larger ones bandwidth-bound.
        ``intercept_s / (bandwidth_factor / bandwidth)``: ``alpha * bandwidth`` for a plain line,
        ``p * alpha * bandwidth`` for the ring formula on p ranks. 0 when alpha is 0.
        """
        return self.intercept_s * self.bandwidth_bytes_per_s / self.bandwidth_factor

    def relative_errors(self, sizes_bytes: Sequence[float], seconds: Sequence[float]) -> np.ndarray:
        """``(predicted - measured) / measured`` for each point: 0.25 means 25% too slow.

        How far the line misses each measurement (e.g. the
        small messages a fit on >= 1 MB ignores).
        """
        n, t = _points(sizes_bytes, seconds)
        return (np.asarray(self.predict(n), dtype=float) - t) / t


def _points(sizes_bytes: Sequence[float], seconds: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    try:
        n = np.asarray(sizes_bytes, dtype=float).reshape(-1)
        t = np.asarray(seconds, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise TypeError("sizes_bytes and seconds must be sequences of numbers") from exc
    if n.shape != t.shape:
        raise ValueError(f"sizes_bytes and seconds must have the same length, got {n.size} and {t.size}")
    if not (np.all(np.isfinite(n)) and np.all(n >= 0)):
        raise ValueError("sizes_bytes must be finite numbers >= 0")
    if not (np.all(np.isfinite(t)) and np.all(t > 0)):
        raise ValueError("seconds must be finite numbers > 0")
    return n, t


def _fit_line(
    sizes_bytes: Sequence[float], seconds: Sequence[float], min_bytes: float
) -> tuple[float, float, int, bool]:
    """Least squares ``t = c0 + c1 * n`` on points with n >= min_bytes, in relative error; c0 clamped >= 0.

    Each point's residual is divided by its measured time, so a 1 MB message counts as much as a
    64 MB one (plain least squares in seconds would fit the largest messages and ignore the rest).
    """
    min_bytes = arguments.nonnegative("min_bytes", min_bytes)
    n, t = _points(sizes_bytes, seconds)
    keep = n >= min_bytes
    n, t = n[keep], t[keep]
    if np.unique(n).size < 2:
        raise ValueError(
            f"need measurements at >= 2 distinct sizes >= min_bytes={min_bytes:g} to fit a "
            f"line; got {np.unique(n).size}"
        )
    design = np.column_stack([np.ones_like(n), n]) / t[:, None]
    (c0, c1), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    clamped = False
    if c0 < 0:
        # A negative latency is unphysical (noise at small sizes): refit through 0.
        r = n / t
        c0, c1, clamped = 0.0, float(r.sum() / (r @ r)), True
    if not c1 > 0:
        raise ValueError(
            "the fitted time does not grow with message size (slope <= 0), so no bandwidth "
            "can be read off; measure larger sizes or raise min_bytes"
        )
    return float(c0), float(c1), int(n.size), clamped


def fit_alpha_beta(sizes_bytes: Sequence[float], seconds: Sequence[float], min_bytes: float = 0) -> AlphaBeta:
    """Fit ``t = alpha + n / bandwidth`` by least squares in relative error.

    Only points with ``size >= min_bytes`` are used. Residuals are relative (divided by the measured time), so
    every size counts alike; still, tiny messages follow other rules; use ``min_bytes`` (e.g. ``2**20``) to leave out
    the small ones whose time
    is OS wake-up noise rather than the link. If the best line has a negative intercept
    it is refitted through the origin with ``alpha_s = 0`` (``alpha_clamped=True``),
    since a negative latency means nothing.

    Raises ValueError for mismatched lengths, negative sizes, non-positive times, fewer
    than 2 distinct sizes left, or a slope <= 0.
    """
    c0, c1, count, clamped = _fit_line(sizes_bytes, seconds, min_bytes)
    return AlphaBeta(
        alpha_s=c0,
        bandwidth_bytes_per_s=1.0 / c1,
        model="line",
        n_points=count,
        min_bytes=float(min_bytes),
        alpha_clamped=clamped,
    )


def fit_ring_allreduce(
    sizes_bytes: Sequence[float],
    seconds: Sequence[float],
    world_size: int,
    min_bytes: float = 0,
) -> AlphaBeta:
    """Fit the ring all-reduce formula ``t = 2(p-1)*alpha + 2(p-1)/p * n/bw``.

    The same least-squares line as ``fit_alpha_beta``,
    rescaled so that ``alpha_s`` is the per-message latency and
    ``bandwidth_bytes_per_s`` the **per-link** bandwidth of ``allreduce_time(...,
    algorithm="ring")`` (for p = 2 they equal the plain line's). The returned model's
    ``predict`` uses the ring formula. ``world_size`` must be >= 2.
    """
    p = arguments.integer("world_size (the number of ranks)", world_size, minimum=1)
    if p < 2:
        raise ValueError("world_size must be >= 2 to fit a ring all-reduce (p = 1 sends nothing)")
    c0, c1, count, clamped = _fit_line(sizes_bytes, seconds, min_bytes)
    latency_factor = 2.0 * (p - 1)
    bandwidth_factor = 2.0 * (p - 1) / p
    return AlphaBeta(
        alpha_s=c0 / latency_factor,
        bandwidth_bytes_per_s=bandwidth_factor / c1,
        latency_factor=latency_factor,
        bandwidth_factor=bandwidth_factor,
        model=f"ring_allreduce(p={p})",
        n_points=count,
        min_bytes=float(min_bytes),
        alpha_clamped=clamped,
    )


def with_measured_latency(fit: AlphaBeta, small_message_s: float) -> AlphaBeta:
    """``fit`` with its alpha replaced by a measured small-message time (Hockney's latency).

    Notebook 03 (interconnect), section 5. A line fitted on large messages has an intercept, not a
    latency: Hockney (1991) takes ``t0`` from the smallest messages and the asymptotic bandwidth
    from the largest. ``small_message_s`` (the time of a tiny all-reduce on the fit's ranks) becomes
    ``latency_factor * alpha_s``, so ``alpha_s`` is the cost of one of the ring's messages; the
    bandwidth is kept. ``crossover_bytes`` is then Hockney's ``n_1/2``, the size that reaches half the
    bandwidth.
    """
    if not isinstance(fit, AlphaBeta):
        raise TypeError(f"fit must be an AlphaBeta (fit_ring_allreduce), got {type(fit).__name__}")
    t0 = arguments.positive("small_message_s (seconds)", small_message_s)
    alpha = t0 / fit.latency_factor if fit.latency_factor > 0 else t0
    return replace(fit, alpha_s=alpha, alpha_clamped=False, model=f"{fit.model}, alpha measured")


# --------------------------------------------------------------------------------------
# 4. Data-parallel step time and speedup
# --------------------------------------------------------------------------------------


def data_parallel_step_time(
    compute_s: float,
    grad_bytes: float,
    world_size: int,
    bandwidth: float,
    alpha: float = 0.0,
    overlap: float = 0.0,
    algorithm: str = "ring",
) -> float:
    """Seconds per data-parallel step with a fixed per-rank batch (weak scaling).

    ``compute_s + (1 - overlap) * allreduce_time(grad_bytes,
    world_size, alpha, bandwidth, algorithm)``. ``compute_s`` is one rank's forward +
    backward + optimizer time, ``grad_bytes`` the gradient size (parameters x bytes per
    element), ``overlap`` the fraction of the all-reduce hidden behind the backward pass
    (DDP's gradient buckets). The model assumes the hidden part fits inside the compute;
    ``overlap=1`` is only realistic when the all-reduce is shorter than the backward pass.
    """
    c = arguments.nonnegative("compute_s", compute_s)
    ov = arguments.number("overlap (0: none, 1: communication fully hidden)", overlap, minimum=0, maximum=1)
    comm = allreduce_time(grad_bytes, world_size, alpha, bandwidth, algorithm)
    return c + (1.0 - ov) * comm


def data_parallel_speedup(
    compute_s: float,
    grad_bytes: float,
    world_size: int,
    bandwidth: float,
    alpha: float = 0.0,
    overlap: float = 0.0,
    scaling: str = "weak",
    algorithm: str = "ring",
) -> float:
    """Speedup of ``world_size`` data-parallel ranks over one rank.

    Notebook 03, "does adding machines help?". With
    ``comm = allreduce_time(grad_bytes, world_size, alpha, bandwidth, algorithm)``:

    * ``scaling="weak"`` (each rank keeps its batch; the global batch grows with p):
      throughput relative to one rank, ``p * compute_s / (compute_s + (1-overlap)*comm)``.
      It tends to ``p`` as bandwidth -> infinity (and alpha = 0) and can drop below 1
      on a slow link.
    * ``scaling="strong"`` (the global batch is fixed; each rank does ``compute_s / p``):
      ``compute_s / (compute_s/p + (1-overlap)*comm)``. Communication does not shrink
      with p, so this saturates (and eventually falls) much sooner than weak scaling.

    ``compute_s`` is one rank's step time on its own and must be > 0.
    """
    c = arguments.number("compute_s", compute_s, allow_inf=True)
    if c <= 0 or math.isinf(c):
        raise ValueError(f"compute_s must be a finite number of seconds > 0, got {c!r}")
    p = arguments.integer("world_size (the number of ranks)", world_size, minimum=1)
    ov = arguments.number("overlap (0: none, 1: communication fully hidden)", overlap, minimum=0, maximum=1)
    scaling = arguments.choice("scaling", scaling, _SCALINGS)
    comm = allreduce_time(grad_bytes, p, alpha, bandwidth, algorithm)
    if scaling == "weak":
        return p * c / (c + (1.0 - ov) * comm)
    return c / (c / p + (1.0 - ov) * comm)


def core_sharing(world_size: int, reference_world_size: int, free_cores: int, busy: float = 1.0) -> float:
    """How many times longer a transfer takes on ``world_size`` local ranks than the same per-rank
    bytes on ``reference_world_size`` ranks, when the "link" is the processor copying the bytes.

    Notebook 03 (interconnect), "from 2 ranks to 4". Ranks on one machine talk through the operating
    system, and their own cores do the copying: each rank wants ``busy`` of a core (1.0: all of it; notebook
    03 measures it, CPU time / wall time of the reference ranks' all-reduce) and gets ``min(1, free_cores /
    (ranks x busy))`` of what it wants, so a link fitted on ``reference_world_size`` ranks runs ``min(1, free
    / (reference x busy)) / min(1, free / (world_size x busy))`` times slower on ``world_size`` ranks. 1.0 when
    the cores cover every rank's demand; 2.0 for 4 ranks against 2 on 2 free cores (or on 1) with ``busy=1``.
    """
    p = arguments.integer("world_size (the number of ranks)", world_size, minimum=1)
    ref = arguments.integer("reference_world_size", reference_world_size, minimum=1)
    cores = arguments.integer("free_cores", free_cores, minimum=1)
    want = arguments.positive("busy (the share of a core a rank keeps busy)", busy)
    return min(1.0, cores / (ref * want)) / min(1.0, cores / (p * want))


def bandwidth_needed(compute_s: float, grad_bytes: float, world_size: int, efficiency: float) -> float:
    """The link bandwidth (bytes/s, per direction) at which weak-scaling data parallelism on a ring
    reaches ``efficiency`` (speed-up / world_size), with no latency and no overlap.

    Notebook 03 (interconnect), "how far does data parallelism scale", and its exercise ("which link
    does the job need?"). The all-reduce may take at most ``compute_s * (1 / efficiency - 1)``
    seconds; the ring moves ``2(p-1)/p * grad_bytes`` per rank in that time. ``world_size == 1``
    needs no link (0.0). Raises ValueError for ``efficiency`` outside (0, 1) or ``compute_s <= 0``.
    """
    c = arguments.positive("compute_s", compute_s)
    g = arguments.nonnegative("grad_bytes", grad_bytes)
    p = arguments.integer("world_size (the number of ranks)", world_size, minimum=1)
    e = arguments.fraction("efficiency (speed-up / world_size; 1 would need an infinite link)", efficiency)
    if p == 1:
        return 0.0
    return busbw_factor(p) * g / (c * (1 / e - 1))


__all__ = [
    "ALGORITHMS",
    "OPS",
    "AlphaBeta",
    "algbw",
    "allgather_time",
    "allreduce_time",
    "bandwidth_needed",
    "broadcast_time",
    "busbw",
    "busbw_factor",
    "core_sharing",
    "data_parallel_speedup",
    "data_parallel_step_time",
    "double_tree_allreduce_time",
    "fit_alpha_beta",
    "fit_ring_allreduce",
    "reduce_scatter_time",
    "ring_tree_crossover_bytes",
    "ring_vs_tree",
    "with_measured_latency",
]
