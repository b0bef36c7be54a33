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

What the model gets wrong on a laptop or a CI VM (measured, see CONVENTIONS.md): a
single alpha-beta line fitted over 1 KB-64 MB of gloo all-reduce timings misses by up
to 130%, because small messages are dominated by the operating system waking the
receiving process (their latency jumps ~9x from run to run), not by the wire. Fitted
on sizes >= 1 MB only (``fit_alpha_beta(..., min_bytes=2**20)``) the line stays within
25%: 2 ranks ~1.1-1.3 GB/s, 4 ranks on 2 cores ~0.5-0.7 GB/s.

The link table
--------------
``links()`` / ``get_link()`` list what common links can carry **per direction**, in
GB/s (10^9 bytes/s). Links are full duplex: a PCIe 4.0 x16 slot moves ~31.5 GB/s each
way at the same time. Vendors often print the sum of both directions (NVLink "900 GB/s",
TPU "bidirectional ICI bandwidth"); those are halved here and each row's notes say so.
Network rates quoted in Gb/s are divided by 8. The NVLink and TPU rows are computed from
``course_lib.catalog`` (whose ``interconnect_gbs`` counts both directions) so the two
tables cannot disagree. This module imports only the standard library, numpy and
``course_lib.catalog``.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import catalog
from .catalog import build_lookup, find_row, rows_of_kind

ALGORITHMS = ("ring", "tree", "parameter_server")
"""All-reduce algorithms that ``allreduce_time`` models."""

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")
"""Collective names ``busbw`` knows the nccl-tests correction factor for."""

SCALINGS = ("weak", "strong")
"""``data_parallel_speedup`` modes: fixed per-rank batch (weak) or fixed global batch."""

LINK_KINDS = ("pcie", "nvlink", "infiniband", "ethernet", "tpu-ici", "memory")

_NVIDIA_NCCL_TESTS = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"

# --------------------------------------------------------------------------------------
# Argument checks (shared)
# --------------------------------------------------------------------------------------


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} ({value!r})")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, got NaN")
    return value


def _nonneg(name: str, value: object, *, finite: bool = True) -> float:
    value = _real(name, value)
    if value < 0 or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def _alpha(value: object) -> float:
    value = _real("alpha", value)
    if value < 0 or math.isinf(value):
        raise ValueError(
            f"alpha (per-message latency in seconds) must be finite and >= 0, got {value!r}"
        )
    return value


def _bandwidth(value: object) -> float:
    value = _real("bandwidth", value)
    if value <= 0:
        raise ValueError(
            f"bandwidth must be > 0 bytes per second (float('inf') is allowed: a free link), "
            f"got {value!r}"
        )
    return value


def _world_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"world_size must be an int >= 1, got {type(value).__name__} ({value!r})")
    value = int(value)
    if value < 1:
        raise ValueError(f"world_size must be an int >= 1 (the number of ranks), got {value}")
    return value


def _choice(name: str, value: object, accepted: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {accepted}; got {type(value).__name__}")
    if value not in accepted:
        raise ValueError(f"{name}={value!r} is not one of {accepted}")
    return value


def _ceil_log2(p: int) -> int:
    """Rounds of a binary/binomial tree over p ranks: ceil(log2 p), 0 for p = 1."""
    return (p - 1).bit_length()


# --------------------------------------------------------------------------------------
# 1. Alpha-beta cost of the collectives
# --------------------------------------------------------------------------------------


def allreduce_time(
    nbytes: float,
    world_size: int,
    alpha: float,
    bandwidth: float,
    algorithm: str = "ring",
) -> float:
    """Predicted seconds for an all-reduce of ``nbytes`` (the buffer size on each rank).

    Notebook 03 (interconnect): "predicting an all-reduce". With ``p = world_size``,
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
    n = _nonneg("nbytes", nbytes)
    p = _world_size(world_size)
    a = _alpha(alpha)
    bw = _bandwidth(bandwidth)
    algorithm = _choice("algorithm", algorithm, ALGORITHMS)
    if p == 1:
        return 0.0
    if algorithm == "ring":
        return 2 * (p - 1) * a + 2 * (p - 1) / p * n / bw
    if algorithm == "tree":
        return 2 * _ceil_log2(p) * (a + n / bw)
    return 2 * (p - 1) * (a + n / bw)  # parameter_server


def allgather_time(nbytes: float, world_size: int, alpha: float, bandwidth: float) -> float:
    """Predicted seconds for a ring all-gather; ``nbytes`` is the **total output** size.

    Notebook 03 (interconnect): all-gather is the second half of a ring all-reduce (and
    what FSDP does before each layer). Each rank starts with ``n/p`` bytes and ends with
    all ``n``: ``(p-1)*alpha + (p-1)/p * n/bw`` (Thakur et al. 2005, ring algorithm).
    ``world_size == 1`` costs 0. Same argument checks as ``allreduce_time``.
    """
    n = _nonneg("nbytes", nbytes)
    p = _world_size(world_size)
    a = _alpha(alpha)
    bw = _bandwidth(bandwidth)
    if p == 1:
        return 0.0
    return (p - 1) * a + (p - 1) / p * n / bw


def reduce_scatter_time(nbytes: float, world_size: int, alpha: float, bandwidth: float) -> float:
    """Predicted seconds for a ring reduce-scatter; ``nbytes`` is the **total input** size.

    Notebook 03 (interconnect): the first half of a ring all-reduce (and how FSDP reduces
    gradients). Each rank starts with ``n`` bytes and ends owning the reduced ``n/p``:
    ``(p-1)*alpha + (p-1)/p * n/bw``. ``allgather_time + reduce_scatter_time`` equals
    the ring ``allreduce_time``. ``world_size == 1`` costs 0.
    """
    n = _nonneg("nbytes", nbytes)
    p = _world_size(world_size)
    a = _alpha(alpha)
    bw = _bandwidth(bandwidth)
    if p == 1:
        return 0.0
    return (p - 1) * a + (p - 1) / p * n / bw


def broadcast_time(nbytes: float, world_size: int, alpha: float, bandwidth: float) -> float:
    """Predicted seconds for a binomial-tree broadcast of ``nbytes`` from one root.

    Notebook 03 (interconnect): ``ceil(log2 p) * (alpha + n/bw)``: in each round every
    rank that already has the data sends the whole buffer to one that does not, so the
    number of holders doubles per round (Thakur et al. 2005, short-message algorithm;
    for long messages MPICH switches to scatter + all-gather). ``world_size == 1``
    costs 0.
    """
    n = _nonneg("nbytes", nbytes)
    p = _world_size(world_size)
    a = _alpha(alpha)
    bw = _bandwidth(bandwidth)
    return _ceil_log2(p) * (a + n / bw)


# --------------------------------------------------------------------------------------
# 2. nccl-tests bandwidths
# --------------------------------------------------------------------------------------


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: ``nbytes / seconds`` (nccl-tests' ``algbw``).

    Notebook 03 (interconnect): the number a naive benchmark prints. For collectives it
    falls as ranks are added even when the links are fully used; see ``busbw``.
    Source: NVIDIA nccl-tests, doc/PERFORMANCE.md.
    """
    n = _nonneg("nbytes", nbytes)
    t = _real("seconds", seconds)
    if t <= 0 or math.isinf(t):
        raise ValueError(f"seconds must be a finite number > 0, got {t!r}")
    return n / t


def busbw_factor(world_size: int, op: str = "all_reduce") -> float:
    """The nccl-tests correction factor from ``algbw`` to ``busbw`` for ``op``.

    Notebook 03 (interconnect). With ``p = world_size`` (NVIDIA nccl-tests,
    doc/PERFORMANCE.md, "Summary"): all_reduce ``2(p-1)/p``; all_gather,
    reduce_scatter and all_to_all ``(p-1)/p``; broadcast and reduce ``1``.
    """
    p = _world_size(world_size)
    op = _choice("op", op, OPS)
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) / p
    return 1.0  # broadcast, reduce


def busbw(nbytes: float, seconds: float, world_size: int, op: str = "all_reduce") -> float:
    """Bus bandwidth in bytes/s: ``algbw * busbw_factor(world_size, op)``.

    Notebook 03 (interconnect): the nccl-tests number that, for a ring, equals the speed
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
    line was refitted through the origin (alpha = 0). Notebook 03 (interconnect).
    """

    alpha_s: float
    bandwidth_bytes_per_s: float
    latency_factor: float = 1.0
    bandwidth_factor: float = 1.0
    model: str = "line"
    n_points: int = 0
    min_bytes: float = 0.0
    alpha_clamped: bool = False

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

    def relative_errors(self, sizes_bytes: Sequence[float], seconds: Sequence[float]) -> np.ndarray:
        """``(predicted - measured) / measured`` for each point: 0.25 means 25% too slow.

        Notebook 03 (interconnect): how far the line misses each measurement (e.g. the
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
        raise ValueError(
            f"sizes_bytes and seconds must have the same length, got {n.size} and {t.size}"
        )
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
    min_bytes = _nonneg("min_bytes", min_bytes)
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


def fit_alpha_beta(
    sizes_bytes: Sequence[float], seconds: Sequence[float], min_bytes: float = 0
) -> AlphaBeta:
    """Fit ``t = alpha + n / bandwidth`` by least squares in relative error.

    Notebook 03 (interconnect): "fitting the line". Only points with
    ``size >= min_bytes`` are used. Residuals are relative (divided by the measured time), so
    every size counts alike; still, tiny messages follow other rules; use ``min_bytes`` (e.g. ``2**20``) to leave out the small ones whose time
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

    Notebook 03 (interconnect): the same least-squares line as ``fit_alpha_beta``,
    rescaled so that ``alpha_s`` is the per-message latency and
    ``bandwidth_bytes_per_s`` the **per-link** bandwidth of ``allreduce_time(...,
    algorithm="ring")`` (for p = 2 they equal the plain line's). The returned model's
    ``predict`` uses the ring formula. ``world_size`` must be >= 2.
    """
    p = _world_size(world_size)
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


# --------------------------------------------------------------------------------------
# 4. Data-parallel step time and speedup
# --------------------------------------------------------------------------------------


def _overlap(value: object) -> float:
    value = _real("overlap", value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(
            f"overlap must be in [0, 1] (0: no overlap, 1: communication fully hidden), "
            f"got {value!r}"
        )
    return value


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

    Notebook 03 (interconnect): ``compute_s + (1 - overlap) * allreduce_time(grad_bytes,
    world_size, alpha, bandwidth, algorithm)``. ``compute_s`` is one rank's forward +
    backward + optimizer time, ``grad_bytes`` the gradient size (parameters x bytes per
    element), ``overlap`` the fraction of the all-reduce hidden behind the backward pass
    (DDP's gradient buckets). The model assumes the hidden part fits inside the compute;
    ``overlap=1`` is only realistic when the all-reduce is shorter than the backward pass.
    """
    c = _nonneg("compute_s", compute_s)
    ov = _overlap(overlap)
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

    Notebook 03 (interconnect): "does adding machines help?". With
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
    c = _real("compute_s", compute_s)
    if c <= 0 or math.isinf(c):
        raise ValueError(f"compute_s must be a finite number of seconds > 0, got {c!r}")
    p = _world_size(world_size)
    ov = _overlap(overlap)
    scaling = _choice("scaling", scaling, SCALINGS)
    comm = allreduce_time(grad_bytes, p, alpha, bandwidth, algorithm)
    if scaling == "weak":
        return p * c / (c + (1.0 - ov) * comm)
    return c / (c / p + (1.0 - ov) * comm)


# --------------------------------------------------------------------------------------
# 5. Cited table of link bandwidths
# --------------------------------------------------------------------------------------

_CHECKED = "2026-11"


@dataclass(frozen=True)
class Link:
    """One kind of link and what it carries **per direction** (GB/s = 10^9 bytes/s).

    Rows of the link table of notebook 03 (interconnect); see ``links()``.
    """

    key: str  # short id, e.g. "pcie4-x16"
    name: str  # e.g. "PCIe 4.0 x16"
    kind: str  # one of LINK_KINDS
    bandwidth_gbs: float  # per direction, after line encoding, before packet overheads
    latency_us: float | None  # None unless a source gives one
    source: str  # URL(s), separated by "; "
    source_date: str  # "YYYY-MM", when read
    notes: str = ""

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise ValueError(f"{self.key}: kind={self.kind!r} is not one of {LINK_KINDS}")

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """``bandwidth_gbs`` in bytes per second, ready for ``allreduce_time``."""
        return self.bandwidth_gbs * 1e9


def _pcie_x16_gbs(gt_per_s: float) -> float:
    """x16 payload rate per direction: GT/s per lane x 128/130 coding x 16 lanes / 8 bits."""
    return round(gt_per_s * 128 / 130 * 16 / 8, 2)


def _half(accelerator_key: str) -> float:
    """Per-direction share of a catalog row's both-directions ``interconnect_gbs``."""
    return catalog.get_accelerator(accelerator_key).interconnect_gbs / 2


_PCIE_SOURCES = (
    "https://pcisig.com/specifications; "
    "https://firmwaresecurity.com/2019/05/31/pcie-5-0-spec-released/; "
    "https://hpc-notes.pages.dev/reference/pcie"
)
_PCIE_NOTE = (
    "Arithmetic from the PCI-SIG per-lane rate: {gt} GT/s x 128/130 (128b/130b line "
    "coding, 1.5% overhead) x 16 lanes / 8 = {gbs} GB/s each way, {both} GB/s counting "
    "both directions{cat}. The "
    "PCI-SIG specifications themselves are not in the stored material; the rates were "
    "read from the PCI-SIG PCIe 5.0 announcement as reprinted by firmwaresecurity.com "
    "('32 GT/s raw bit rate and up to 128 GB/s via x16', i.e. both directions) and a "
    "table of the official rates (hpc-notes). Packet headers (TLP/DLLP) and flow "
    "control take a further few percent, so measured copies land below this.{tail} "
    "source_date = when read."
)
_NVLINK_PAGE = "https://www.nvidia.com/en-au/data-center/nvlink/"
_NVLINK_SECONDARY = "https://wikimili.com/en/NVLink"
_IB_NDR = "https://docs.nvidia.com/dgx-superpod/design-guide-cabling-data-centers/latest/ndr-overview.html"
_IB_SPEEDS = "https://atgbics.com/pages/direct-attach-infiniband-port-speed-overview"
_IB_NOTE = (
    "InfiniBand 4x port data rate {gbit} Gb/s = {lanes}; /8 = {gbs} GB/s in each "
    "direction (links are full duplex). The lanes signal a little faster than this "
    "because of line coding{extra}; the quoted Gb/s is already the data rate. "
    "Transport headers take a few percent more.{tail} source_date = when read."
)
_IEEE_8023 = (
    "https://standards.ieee.org/ieee/802.3/10422/; "
    "https://bsbedge.com/standard/ieee-standard-for-ethernet/IEEE802.3"
)
_ETH_NOTE = (
    "IEEE 802.3 (Ethernet) MAC data rate {gbit} Gb/s; /8 = {gbs} GB/s in each direction "
    "(full duplex). The PHY's line coding and error correction run at a higher symbol "
    "rate on top of this, so nothing is subtracted for them. Each frame also carries 38 "
    "bytes the payload does not see (8 preamble + SFD, 14 header, 4 FCS, 12 interframe "
    "gap, per the 802.3 frame format): with a 1,500-byte MTU the payload gets "
    "1500/1538 = 97.5%, and TCP over IPv4 (40 more header bytes) about 1460/1538 = 95% "
    "(derived). IEEE 802.3-2022 covers 1 Mb/s to "
    "400 Gb/s (abstract, via bsbedge.com; the IEEE page is not in the stored material). "
    "{extra}source_date = when read."
)
_GOOGLE_V5P_BLOG = (
    "https://cloud.google.com/blog/products/ai-machine-learning/"
    "introducing-cloud-tpu-v5p-and-ai-hypercomputer"
)

_LINKS: tuple[Link, ...] = (
    # ---- PCIe (host <-> accelerator, and GPU <-> GPU without NVLink) -------------------
    Link(
        key="pcie3-x16",
        name="PCIe 3.0 x16",
        kind="pcie",
        bandwidth_gbs=_pcie_x16_gbs(8),
        latency_us=None,
        source=_PCIE_SOURCES,
        source_date=_CHECKED,
        notes=_PCIE_NOTE.format(
            gt=8, gbs=_pcie_x16_gbs(8), both=round(2 * _pcie_x16_gbs(8), 2),
            cat=" (the catalog rounds this link to 32 GB/s both ways)",
            tail=" The T4 and P100 of Colab and Kaggle sit on this link.",
        ),
    ),
    Link(
        key="pcie4-x16",
        name="PCIe 4.0 x16",
        kind="pcie",
        bandwidth_gbs=_pcie_x16_gbs(16),
        latency_us=None,
        source=_PCIE_SOURCES,
        source_date=_CHECKED,
        notes=_PCIE_NOTE.format(
            gt=16, gbs=_pcie_x16_gbs(16), both=round(2 * _pcie_x16_gbs(16), 2),
            cat=" (the catalog rounds this link to 64 GB/s both ways)",
            tail=" The L4 and L40S use this link.",
        ),
    ),
    Link(
        key="pcie5-x16",
        name="PCIe 5.0 x16",
        kind="pcie",
        bandwidth_gbs=_pcie_x16_gbs(32),
        latency_us=None,
        source=_PCIE_SOURCES,
        source_date=_CHECKED,
        notes=_PCIE_NOTE.format(
            gt=32, gbs=_pcie_x16_gbs(32), both=round(2 * _pcie_x16_gbs(32), 2),
            cat=" (PCI-SIG's rounded '128 GB/s via x16')",
            tail="",
        ),
    ),
    # ---- NVLink (GPU <-> GPU inside a server); values derived from course_lib.catalog --
    Link(
        key="nvlink2",
        name="NVLink 2 (V100)",
        kind="nvlink",
        bandwidth_gbs=_half("v100-16gb"),
        latency_us=None,
        source=f"https://www.nvidia.com/en-us/data-center/v100/; {_NVLINK_SECONDARY}",
        source_date=_CHECKED,
        notes=(
            "NVIDIA: 300 GB/s total per V100, counting both directions (catalog row "
            "v100-16gb), so 150 GB/s each way: 6 links x 25 GB/s per direction (the link "
            "breakdown from a secondary source, WikiMili's NVLink article). Total over all "
            "links of one GPU: a single GPU pair joined by one or two links gets less. "
            "source_date = when read."
        ),
    ),
    Link(
        key="nvlink3",
        name="NVLink 3 (A100)",
        kind="nvlink",
        bandwidth_gbs=_half("a100-40gb"),
        latency_us=None,
        source=(
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            f"nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf; {_NVLINK_SECONDARY}"
        ),
        source_date=_CHECKED,
        notes=(
            "NVIDIA A100 datasheet: NVLink 600 GB/s per GPU, counting both directions "
            "(catalog row a100-40gb), so 300 GB/s each way: 12 links x 25 GB/s per "
            "direction (breakdown per WikiMili). source_date = when read."
        ),
    ),
    Link(
        key="nvlink4",
        name="NVLink 4 (H100/H200)",
        kind="nvlink",
        bandwidth_gbs=_half("h100-sxm"),
        latency_us=None,
        source=f"https://www.nvidia.com/en-us/data-center/h100/; {_NVLINK_PAGE}; {_NVLINK_SECONDARY}",
        source_date=_CHECKED,
        notes=(
            "NVIDIA: 900 GB/s per H100 SXM, counting both directions (catalog row "
            "h100-sxm; the NVLink page: '1.5X compared to the previous generation'), so "
            "450 GB/s each way: 18 links x 25 GB/s per direction (per WikiMili). "
            "source_date = when read."
        ),
    ),
    Link(
        key="nvlink5",
        name="NVLink 5 (B200)",
        kind="nvlink",
        bandwidth_gbs=900.0,
        latency_us=None,
        source=(
            f"{_NVLINK_PAGE}; "
            "https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html"
        ),
        source_date=_CHECKED,
        notes=(
            "NVIDIA's NVLink page: a Blackwell GPU 'supports up to 18 NVLink 100 GB/s "
            "connections for a total bandwidth of 1.8 TB/s', 'a 1.8TB/s bidirectional' "
            "interconnect, so 900 GB/s each way. The DGX B200 guide's 14.4 TB/s of NVSwitch "
            "bandwidth for 8 GPUs is the same 1.8 TB/s per GPU. Not in the catalog (no "
            "B200 row). source_date = when read."
        ),
    ),
    # ---- InfiniBand (between servers) ---------------------------------------------------
    Link(
        key="ib-edr",
        name="InfiniBand EDR 4x (100 Gb/s)",
        kind="infiniband",
        bandwidth_gbs=100 / 8,
        latency_us=None,
        source=f"{_IB_SPEEDS}; https://github.com/open-mpi/ompi/pull/4946.patch; {_IB_NDR}",
        source_date=_CHECKED,
        notes=_IB_NOTE.format(
            gbit=100,
            lanes="4 lanes x 25 Gb/s",
            gbs=12.5,
            extra=" (64b/66b for EDR: Open MPI's port-speed code says 'EDR: 25.78125 Gbps * 64/66')",
            tail=" Lane rates from a cable vendor's overview (ATGBICS, which dates EDR to "
            "around 2014-2015); NVIDIA's NDR guide confirms EDR interoperability.",
        ),
    ),
    Link(
        key="ib-hdr",
        name="InfiniBand HDR 4x (200 Gb/s)",
        kind="infiniband",
        bandwidth_gbs=200 / 8,
        latency_us=None,
        source=f"{_IB_NDR}; {_IB_SPEEDS}",
        source_date=_CHECKED,
        notes=_IB_NOTE.format(
            gbit=200, lanes="4 lanes x 50 Gb/s", gbs=25.0, extra="",
            tail=" NVIDIA's NDR guide: HDR is 'four lanes of 50 Gbps'. ConnectX-6 generation.",
        ),
    ),
    Link(
        key="ib-ndr",
        name="InfiniBand NDR 4x (400 Gb/s)",
        kind="infiniband",
        bandwidth_gbs=400 / 8,
        latency_us=None,
        source=f"{_IB_NDR}; https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html",
        source_date=_CHECKED,
        notes=_IB_NOTE.format(
            gbit=400, lanes="4 lanes x 100 Gb/s", gbs=50.0, extra="",
            tail=" NVIDIA's NDR guide: 'Link speeds of 400 Gbps (four lanes of 100 Gbps)'; "
            "NDR200 is 2 lanes. ConnectX-7 (the DGX B200 guide: 'InfiniBand (default): Up "
            "to 400Gbps', one card per GPU).",
        ),
    ),
    Link(
        key="ib-xdr",
        name="InfiniBand XDR (800 Gb/s)",
        kind="infiniband",
        bandwidth_gbs=800 / 8,
        latency_us=None,
        source=(
            "https://docs.nvidia.com/networking/display/connectx8firmwarev40440208/"
            "changes+and+new+features"
        ),
        source_date=_CHECKED,
        notes=(
            "ConnectX-8 SuperNIC firmware release notes: 'supports 800Gb/s or XDR IB'; "
            "/8 = 100 GB/s each way. The lane breakdown is not given in the stored "
            "sources. source_date = when read."
        ),
    ),
    # ---- Ethernet -----------------------------------------------------------------------
    Link(
        key="eth-1g",
        name="1 Gigabit Ethernet (1GbE)",
        kind="ethernet",
        bandwidth_gbs=1 / 8,
        latency_us=None,
        source=f"{_IEEE_8023}",
        source_date=_CHECKED,
        notes=_ETH_NOTE.format(
            gbit=1, gbs=0.125, extra="The office or home network: about 119 MB/s of TCP "
            "payload (0.125 GB/s x 1460/1538). ",
        ),
    ),
    Link(
        key="eth-10g",
        name="10 Gigabit Ethernet (10GbE)",
        kind="ethernet",
        bandwidth_gbs=10 / 8,
        latency_us=None,
        source=f"{_IEEE_8023}",
        source_date=_CHECKED,
        notes=_ETH_NOTE.format(gbit=10, gbs=1.25, extra=""),
    ),
    Link(
        key="eth-25g",
        name="25 Gigabit Ethernet (25GbE)",
        kind="ethernet",
        bandwidth_gbs=25 / 8,
        latency_us=None,
        source=f"{_IEEE_8023}; https://owiki.org/wiki/Ethernet_Technology_Consortium",
        source_date=_CHECKED,
        notes=_ETH_NOTE.format(
            gbit=25, gbs=3.125,
            extra="Single-lane 25GbE is IEEE 802.3by, approved 30 June 2016 (per an "
            "encyclopedia page on the Ethernet Technology Consortium). ",
        ),
    ),
    Link(
        key="eth-100g",
        name="100 Gigabit Ethernet (100GbE)",
        kind="ethernet",
        bandwidth_gbs=100 / 8,
        latency_us=None,
        source=f"{_IEEE_8023}; https://acemap.info/field/2035726179",
        source_date=_CHECKED,
        notes=_ETH_NOTE.format(
            gbit=100, gbs=12.5,
            extra="First defined by IEEE 802.3ba-2010 (per acemap's summary). ",
        ),
    ),
    Link(
        key="eth-400g",
        name="400 Gigabit Ethernet (400GbE)",
        kind="ethernet",
        bandwidth_gbs=400 / 8,
        latency_us=None,
        source=(
            f"{_IEEE_8023}; https://friendlywiki.com/article/index.php?title=Terabit_Ethernet"
            f"%23802.3cm_project"
        ),
        source_date=_CHECKED,
        notes=_ETH_NOTE.format(
            gbit=400, gbs=50.0,
            extra="IEEE 802.3bs, approved 6 December 2017 (per a Terabit Ethernet "
            "encyclopedia page). ",
        ),
    ),
    # ---- TPU inter-chip interconnect; values derived from course_lib.catalog ------------
    Link(
        key="tpu-v4-ici",
        name="TPU v4 ICI (per chip)",
        kind="tpu-ici",
        bandwidth_gbs=_half("tpu-v4"),
        latency_us=None,
        source=f"https://cloud.google.com/tpu/docs/v4; {_GOOGLE_V5P_BLOG}",
        source_date=_CHECKED,
        notes=(
            "Half of the catalog's 600 GB/s both directions (row tpu-v4), which is itself "
            "derived: the v5p launch post gives 2,400 Gbps per v4 chip, per direction by "
            "Google's later restatements, i.e. 300 GB/s each way. Summed over all of a "
            "chip's ICI ports (3D torus: up to 6 neighbours), not one link. "
            "source_date = when read."
        ),
    ),
    Link(
        key="tpu-v5e-ici",
        name="TPU v5e ICI (per chip)",
        kind="tpu-ici",
        bandwidth_gbs=_half("tpu-v5e"),
        latency_us=None,
        source="https://cloud.google.com/tpu/docs/v5e",
        source_date=_CHECKED,
        notes=(
            "Google: 400 GB/s bidirectional ICI per chip (catalog row tpu-v5e; an older "
            "docs revision said 1,600 Gbps = 200 GB/s per direction), so 200 GB/s each "
            "way, summed over the chip's 4 ICI ports. source_date = when read."
        ),
    ),
    Link(
        key="tpu-v5p-ici",
        name="TPU v5p ICI (per chip)",
        kind="tpu-ici",
        bandwidth_gbs=_half("tpu-v5p"),
        latency_us=None,
        source=f"https://cloud.google.com/tpu/docs/v5p; {_GOOGLE_V5P_BLOG}",
        source_date=_CHECKED,
        notes=(
            "Google: 'Bidirectional inter-chip interconnect (ICI) bandwidth (per chip) "
            "1200 GBps' (catalog row tpu-v5p; older revision: 4,800 Gbps, per "
            "direction), so 600 GB/s each way, summed over all the chip's ICI ports (3D "
            "torus). "
            "source_date = when read."
        ),
    ),
    Link(
        key="tpu-v6e-ici",
        name="TPU v6e (Trillium) ICI (per chip)",
        kind="tpu-ici",
        bandwidth_gbs=_half("tpu-v6e"),
        latency_us=None,
        source="https://cloud.google.com/tpu/docs/v6e",
        source_date=_CHECKED,
        notes=(
            "Google: 800 GB/s bidirectional ICI per chip, 4 ports (catalog row tpu-v6e), "
            "so 400 GB/s each way, summed over the ports. source_date = when read."
        ),
    ),
)


def _memory_link(storage_key: str, key: str) -> Link:
    """A memory-channel row built from ``catalog``'s storage table (one source of truth)."""
    tier = catalog.get_storage(storage_key)
    return Link(
        key=key,
        name=f"{tier.name} (shared-memory transport between ranks on one host)",
        kind="memory",
        bandwidth_gbs=tier.sequential_read_gbs,
        latency_us=None,
        source=tier.source,
        source_date=tier.source_date,
        notes=(
            f"Peak of one memory channel from the catalog (row {storage_key}): "
            f"{tier.sequential_read_gbs:g} GB/s. Unlike the other rows DRAM is not full "
            "duplex: reads and writes share this figure, and a copy from one rank's "
            "buffer to another's both reads and writes, so it moves at most half of it "
            "per channel. Ranks on one machine talk through memory (gloo over the "
            "127.0.0.1 TCP stack, or shared memory), so this is their ceiling; the "
            "course's 2-core VMs measured ~1.1-1.3 GB/s for a 2-rank gloo all-reduce, far "
            "below it (the software stack, not DRAM, is the limit). source_date = when read."
        ),
    )


_LINKS = _LINKS + (
    _memory_link("ddr4-3200", "mem-ddr4-3200"),
    _memory_link("ddr5-4800", "mem-ddr5-4800"),
)

_LINK_BY_KEY: dict[str, Link] = {link.key: link for link in _LINKS}

# Other names; matching ignores case, spaces and punctuation ("PCIe 4", "pcie-4" ...).
_LINK_ALIASES: dict[str, str] = {
    "pcie3": "pcie3-x16", "pcie 3.0": "pcie3-x16", "pcie gen3": "pcie3-x16", "gen3": "pcie3-x16",
    "pcie4": "pcie4-x16", "pcie 4.0": "pcie4-x16", "pcie gen4": "pcie4-x16", "gen4": "pcie4-x16",
    "pcie5": "pcie5-x16", "pcie 5.0": "pcie5-x16", "pcie gen5": "pcie5-x16", "gen5": "pcie5-x16",
    "nvlink 2.0": "nvlink2", "v100 nvlink": "nvlink2",
    "nvlink 3.0": "nvlink3", "a100 nvlink": "nvlink3",
    "nvlink 4.0": "nvlink4", "h100 nvlink": "nvlink4", "h200 nvlink": "nvlink4",
    "nvlink 5.0": "nvlink5", "b200 nvlink": "nvlink5",
    "edr": "ib-edr", "infiniband edr": "ib-edr",
    "hdr": "ib-hdr", "infiniband hdr": "ib-hdr",
    "ndr": "ib-ndr", "infiniband ndr": "ib-ndr",
    "xdr": "ib-xdr", "infiniband xdr": "ib-xdr",
    "1gbe": "eth-1g", "gbe": "eth-1g", "gige": "eth-1g", "gigabit ethernet": "eth-1g",
    "1g ethernet": "eth-1g",
    "10gbe": "eth-10g", "10g ethernet": "eth-10g",
    "25gbe": "eth-25g", "25g ethernet": "eth-25g",
    "100gbe": "eth-100g", "100g ethernet": "eth-100g",
    "400gbe": "eth-400g", "400g ethernet": "eth-400g",
    "v4 ici": "tpu-v4-ici", "tpu v4": "tpu-v4-ici", "v4": "tpu-v4-ici",
    "v5e ici": "tpu-v5e-ici", "tpu v5e": "tpu-v5e-ici", "v5e": "tpu-v5e-ici",
    "v5p ici": "tpu-v5p-ici", "tpu v5p": "tpu-v5p-ici", "v5p": "tpu-v5p-ici",
    "v6e ici": "tpu-v6e-ici", "tpu v6e": "tpu-v6e-ici", "v6e": "tpu-v6e-ici",
    "trillium": "tpu-v6e-ici",
    "ddr4": "mem-ddr4-3200", "ddr5": "mem-ddr5-4800",
}


_LINK_LOOKUP = build_lookup(_LINKS, _LINK_ALIASES)


def links(kind: str | None = None) -> list[Link]:
    """All link rows, or only those of one ``kind`` (one of ``LINK_KINDS``).

    Notebook 03 (interconnect): the link table. Raises ValueError for an unknown kind.
    """
    return rows_of_kind(_LINKS, kind, LINK_KINDS)


def link_names() -> list[str]:
    """The short keys of every link row, e.g. ["pcie3-x16", ..., "mem-ddr5-4800"].

    Notebook 03 (interconnect).
    """
    return [link.key for link in _LINKS]


def get_link(name: str) -> Link:
    """Look up one link by key, name or alias; case, spaces and punctuation are ignored.

    Notebook 03 (interconnect). "1GbE", "10GbE", "nvlink3", "NVLink 4", "pcie4",
    "PCIe 5.0 x16", "NDR", "v5e" all work. Raises TypeError if ``name`` is not a string,
    ValueError (listing the keys) if nothing matches.
    """
    return find_row(name, _LINK_LOOKUP, _LINK_BY_KEY, "link", "'1GbE', '100GbE', 'nvlink3', 'pcie4', 'NDR', 'v5e'")


def link_rows() -> list[dict]:
    """One flat dict per link, ready for a table (e.g. ``pandas.DataFrame``).

    Notebook 03 (interconnect): the link table, bandwidths in GB/s per direction.
    """
    return [
        {
            "key": link.key,
            "name": link.name,
            "kind": link.kind,
            "bandwidth_gbs_per_direction": link.bandwidth_gbs,
            "latency_us": link.latency_us,
            "source": link.source,
        }
        for link in _LINKS
    ]


__all__ = [
    "ALGORITHMS",
    "LINK_KINDS",
    "OPS",
    "SCALINGS",
    "AlphaBeta",
    "Link",
    "algbw",
    "allgather_time",
    "allreduce_time",
    "broadcast_time",
    "busbw",
    "busbw_factor",
    "data_parallel_speedup",
    "data_parallel_step_time",
    "fit_alpha_beta",
    "fit_ring_allreduce",
    "get_link",
    "link_names",
    "link_rows",
    "links",
    "reduce_scatter_time",
]
