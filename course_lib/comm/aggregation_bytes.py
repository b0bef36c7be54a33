"""What each gradient-aggregation method sends: payload bytes, collective calls, seconds on a link.

The formulas behind ``comm.aggregation`` (which re-exports them), in their own module because they need no
process group: notebook 04 computes them by hand next to the bytes a real run counted.

What "bytes" means here
-----------------------
``bytes_per_step`` and the measured counts are the **payload handed to the collectives per rank**:
the size of every tensor this rank passes to ``dist.all_reduce`` (or its input to
``dist.all_gather``), counted while the training runs (:class:`CollectiveCounter`). That is not
what crosses the wire: a ring all-reduce of ``n`` bytes sends ``2(p-1)/p * n`` bytes per rank, and
an all-gather of ``n`` bytes per rank sends ``(p-1) * n`` (:func:`wire_factor`, the same factors as
``alpha_beta.busbw_factor``). On 2 ranks both factors are 1. Top-k's all-gather grows with the number of
ranks, the all-reduce does not: top-k (8 bytes per kept entry) sends fewer wire bytes than an fp32
all-reduce only while ``p * ratio < 1``, and fewer than an fp16 one only while ``2 * p * ratio < 1``.

Why PowerSGD can all-reduce and top-k cannot
--------------------------------------------
An all-reduce adds the ranks' tensors entry by entry, so it only works for a compressed form that
can be *added*. PowerSGD's factors can: with the same ``Q`` on every rank, ``P_i = M_i Q`` is linear
in each rank's gradient ``M_i``, so the all-reduced ``sum P_i = (sum M_i) Q`` (Vogels et al. 2019).
Top-k picks different positions on every rank; the sum of two sparse vectors has the union of their
supports, so the pieces are all-gathered, and the bytes each rank receives grow with the ranks.

Time on a link: :func:`link_seconds` is the bandwidth term only; :func:`exchange_seconds` adds the
latency term ``alpha`` per ring step of every collective call (:func:`collective_calls` counts them:
DDP's buckets, PowerSGD's three all-reduces per bucket, top-k's two all-gathers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from .. import arguments, catalog
from . import alpha_beta

METHODS = ("none", "fp16", "powersgd", "topk", "local_sgd")
"""The five ways to aggregate that notebook 04 compares with plain SGD."""
ALL_METHODS = METHODS + ("dgc",)
"""Also ``dgc``: top-k with momentum correction, which differs from ``topk`` only with momentum."""
_ALIASES = {
    "fp32": "none",
    "allreduce": "none",
    "all_reduce": "none",
    "power_sgd": "powersgd",
    "top-k": "topk",
    "top_k": "topk",
    "localsgd": "local_sgd",
    "local-sgd": "local_sgd",
    "deep_gradient_compression": "dgc",
    "topk_momentum_correction": "dgc",
}
POWERSGD_START_ITER = 2
"""PowerSGD runs plain all-reduces for the first 2 steps (torch's minimum with error feedback or warm
start: DDP rebuilds its buckets after the first step)."""
_POWERSGD_MIN_COMPRESSION_RATE = 2  # torch's default: compress a matrix only if it shrinks more than 2x
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""DDP's first (last-layer) gradient bucket: 1 MiB (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)."""
DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""DDP's other buckets: ``bucket_cap_mb=25`` (MiB)."""
_INDEX_DTYPE = torch.int32  # top-k indices travel as int32: 4 bytes, like an fp32 value


# ----------------------------------------------------------------------------------------------
# names and checks


def method_name(method: str) -> str:
    """The accepted spelling of an aggregation method: one of :data:`ALL_METHODS` (any case; "fp32",
    "top-k", "local-sgd" and similar spellings are accepted).

    Raises ``ValueError`` listing the accepted methods for an unknown name."""
    return arguments.choice("method", method, ALL_METHODS, aliases=_ALIASES)


def _ratio(ratio: Any) -> float:
    return arguments.number("ratio (the top-k fraction kept)", ratio, minimum=0, maximum=1, open_low=True)


def _powersgd_rank(value: Any) -> int:
    return arguments.integer("powersgd_rank", value, minimum=1)


def _period(value: Any) -> int:
    return arguments.integer("period (local steps between averages)", value, minimum=1)


def _momentum(value: Any) -> float:
    return arguments.number("momentum", value, minimum=0, maximum=1, open_high=True)


def topk_count(numel: int, ratio: float) -> int:
    """How many entries top-k keeps of ``numel``: ``ceil(ratio * numel)``, at least 1."""
    numel = arguments.positive_int("numel", numel)
    ratio = _ratio(ratio)
    return min(numel, max(1, math.ceil(ratio * numel - 1e-9)))


# ----------------------------------------------------------------------------------------------
# the formulas


def powersgd_payload(shapes: Iterable[Sequence[int]], powersgd_rank: int) -> dict[str, int]:
    """Elements PowerSGD all-reduces per step for parameters of these ``shapes``, as torch decides.

    Each tensor is viewed as a matrix ``n x m`` (first dimension x the rest; a bias is ``n x 1``)
    with ``r = min(n, m, powersgd_rank)``. It is compressed when ``2 * (n + m) * r < n * m``
    (torch's ``min_compression_rate`` of 2): then ``P`` (``n x r``) and ``Q`` (``m x r``) are
    all-reduced. Otherwise (biases, small matrices) it is all-reduced whole. Returns
    ``{"uncompressed", "p", "q", "total"}`` in elements.
    """
    r_max = _powersgd_rank(powersgd_rank)
    out = {"uncompressed": 0, "p": 0, "q": 0}
    for shape in shapes:
        dims = [arguments.positive_int("every dimension in shapes", d) for d in shape] or [1]
        n, m = dims[0], math.prod(dims[1:])
        r = min(n, m, r_max)
        if (n + m) * r * _POWERSGD_MIN_COMPRESSION_RATE < n * m:
            out["p"] += n * r
            out["q"] += m * r
        else:
            out["uncompressed"] += n * m
    out["total"] = out["uncompressed"] + out["p"] + out["q"]
    return out


def _shapes(n_params: int, shapes: Iterable[Sequence[int]] | None) -> list[tuple[int, ...]]:
    if shapes is None:
        raise ValueError(
            "method 'powersgd' needs shapes= (the parameter shapes, e.g. [tuple(p.shape) for p in model.parameters()])"
        )
    out = [tuple(s) for s in shapes]
    if sum(math.prod(s) for s in out) != n_params:
        raise ValueError(f"shapes hold {sum(math.prod(s) for s in out)} elements, but n_params={n_params}")
    return out


def bytes_per_step(
    method: str,
    n_params: int,
    world_size: int = 2,
    *,
    ratio: float = 0.01,
    powersgd_rank: int = 2,
    shapes: Iterable[Sequence[int]] | None = None,
    period: int = 8,
    bucket_numels: Sequence[int] | None = None,
    wire: bool = False,
) -> float:
    """Predicted bytes one rank hands to the collectives per step, in steady state. Notebook 04.

    For ``n_params`` fp32 gradients: ``none`` ``4n``; ``fp16`` ``2n``; ``powersgd`` ``4 x``
    :func:`powersgd_payload` (needs ``shapes``); ``topk`` (and ``dgc``) ``8 k`` per bucket (fp32 values and int32
    indices, ``k`` = :func:`topk_count` of the bucket; ``bucket_numels`` defaults to one bucket of
    ``n`` as DDP makes for a model under 1 MiB); ``local_sgd`` ``4n / period`` (one all-reduce of the
    parameters every ``period`` steps, averaged over the steps). PowerSGD's first
    :data:`POWERSGD_START_ITER` steps are plain all-reduces: :func:`bytes_total` counts them.

    This is the payload per rank, the number :class:`CollectiveCounter` measures; ``wire=True``
    multiplies it by :func:`wire_factor` (``world_size`` matters only then).
    """
    method = method_name(method)
    n = arguments.positive_int("n_params", n_params)
    p = arguments.positive_int("world_size", world_size)
    arguments.boolean("wire", wire)
    if method == "none":
        payload: float = 4 * n
    elif method == "fp16":
        payload = 2 * n
    elif method == "powersgd":
        payload = 4 * powersgd_payload(_shapes(n, shapes), powersgd_rank)["total"]
    elif method in ("topk", "dgc"):
        buckets = [n] if bucket_numels is None else arguments.int_list("bucket_numels", bucket_numels)
        if sum(buckets) != n:
            raise ValueError(f"bucket_numels add up to {sum(buckets)}, but n_params={n}")
        payload = sum(8 * topk_count(b, ratio) for b in buckets)
    else:
        payload = 4 * n / _period(period)
    return payload * wire_factor(method, p) if wire else payload


def bytes_total(method: str, n_params: int, steps: int, world_size: int = 2, **options: Any) -> int:
    """Predicted payload bytes one rank hands to the collectives over ``steps`` steps.

    ``options`` as for :func:`bytes_per_step`. ``powersgd`` sends ``4n`` on each of its first
    :data:`POWERSGD_START_ITER` steps; ``local_sgd`` averages after steps ``period, 2 period, ...``
    and once more after the last step when ``steps`` is not a multiple of ``period``:
    ``ceil(steps / period)`` all-reduces of ``4n`` bytes.
    """
    method = method_name(method)
    steps = arguments.positive_int("steps", steps)
    n = arguments.positive_int("n_params", n_params)
    if method == "local_sgd":
        return math.ceil(steps / _period(options.get("period", 8))) * 4 * n
    per_step = bytes_per_step(method, n, world_size, **options)
    if method == "powersgd":
        warm = min(steps, POWERSGD_START_ITER)
        return int(warm * 4 * n + (steps - warm) * per_step)
    return int(steps * per_step)


def wire_factor(method: str, world_size: int) -> float:
    """Bytes a rank sends on a ring per byte of payload it hands over.

    All-reduce methods (everything but ``topk``): ``2(p-1)/p`` (``alpha_beta.busbw_factor``; 1 on 2 ranks).
    ``topk``'s all-gather: every rank's ``8k`` bytes must reach the ``p-1`` others, ``p-1`` (equal to
    ``p x alpha_beta.busbw_factor(p, "all_gather")``): sparse exchange gets dearer as ranks are added.
    """
    method = method_name(method)
    p = arguments.positive_int("world_size", world_size)
    if method in ("topk", "dgc"):
        return p * alpha_beta.busbw_factor(p, "all_gather")
    return alpha_beta.busbw_factor(p, "all_reduce")


def link_seconds(method: str, payload_bytes: float, world_size: int, link: str) -> float:
    """Seconds the **bandwidth term** of one step's exchange takes on ``link`` (a key of
    ``catalog.link_names()``, e.g. "eth-1g", "nvlink4"). What the saved bytes are worth.

    ``payload_bytes`` is per rank per step (what :func:`bytes_per_step` predicts): a ring all-reduce
    (``alpha_beta.allreduce_time``) or, for ``topk``/``dgc``, a ring all-gather of ``p x payload`` bytes
    (``alpha_beta.allgather_time``), with latency set to 0. :func:`exchange_seconds` adds the latency
    term, which decides the time of small (compressed) payloads.
    """
    method = method_name(method)
    payload = arguments.nonnegative("payload_bytes", payload_bytes)
    p = arguments.positive_int("world_size", world_size)
    bw = catalog.get_link(link).bandwidth_bytes_per_s
    if method in ("topk", "dgc"):
        return alpha_beta.allgather_time(p * payload, p, 0.0, bw)
    return alpha_beta.allreduce_time(payload, p, 0.0, bw)


def ddp_bucket_numels(
    shapes: Iterable[Sequence[int]],
    *,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES,
    element_bytes: int = 4,
) -> list[int]:
    """Elements per gradient bucket, as DDP groups parameters of these ``shapes``. Notebook 04.

    DDP fills buckets in reverse parameter order (the last layer's gradients are ready first),
    closing a bucket once it holds at least its cap: 1 MiB for the first, 25 MiB after that
    (``bucket_cap_mb``), so a tensor larger than the cap gets a bucket of its own. The model of
    ``Reducer``'s assignment by size for one dtype; each bucket is one collective call per step.
    """
    sizes = [math.prod(arguments.positive_int("every dimension in shapes", d) for d in shape) or 1 for shape in shapes]
    if not sizes:
        raise ValueError("shapes must hold at least one parameter shape")
    cap_rest = arguments.positive_int("bucket_bytes", bucket_bytes)
    cap = arguments.positive_int("first_bucket_bytes", first_bucket_bytes)
    width = arguments.positive_int("element_bytes", element_bytes)
    buckets, current = [], 0
    for numel in reversed(sizes):
        current += numel
        if current * width >= cap:
            buckets.append(current)
            current, cap = 0, cap_rest
    if current:
        buckets.append(current)
    return buckets


def collective_calls(method: str, buckets: int = 1, *, period: int = 8) -> dict[str, float]:
    """Collective calls one rank makes per step, in steady state: ``{"all_reduce", "all_gather"}``.
    Each call pays the link's latency once per ring step (:func:`exchange_seconds`).

    ``none``/``fp16``: one all-reduce per DDP bucket; ``powersgd``: three per bucket (the tensors it
    leaves uncompressed, then ``P``, then ``Q``: torch's hook); ``topk``/``dgc``: two all-gathers
    per bucket (values and indices); ``local_sgd``: one all-reduce of all parameters per ``period``
    steps. :class:`CollectiveCounter` counts the same calls in a real run.
    """
    method = method_name(method)
    b = arguments.positive_int("buckets", buckets)
    if method in ("none", "fp16"):
        return {"all_reduce": float(b), "all_gather": 0.0}
    if method == "powersgd":
        return {"all_reduce": 3.0 * b, "all_gather": 0.0}
    if method in ("topk", "dgc"):
        return {"all_reduce": 0.0, "all_gather": 2.0 * b}
    return {"all_reduce": 1.0 / _period(period), "all_gather": 0.0}


def exchange_seconds(
    method: str, payload_bytes: float, world_size: int, link: str, *, alpha_s: float, buckets: int = 1, period: int = 8
) -> dict[str, float]:
    """Seconds one step's exchange takes on ``link``: bandwidth term plus latency term. Notebook 04.

    ``bandwidth_s`` is :func:`link_seconds`. ``latency_s`` charges ``alpha_s`` (seconds per message)
    for every ring step of every collective call of :func:`collective_calls`: ``2(p-1)`` per
    all-reduce, ``p-1`` per all-gather (``alpha_beta.allreduce_time``, ``alpha_beta.allgather_time``). Returns
    ``{"bandwidth_s", "latency_s", "total_s", "calls"}``. The ring model, no overlap with compute: a
    first-order estimate (NCCL switches to tree and low-latency protocols for small messages).
    """
    method = method_name(method)
    alpha = arguments.nonnegative("alpha_s (per-message latency in seconds)", alpha_s)
    p = arguments.positive_int("world_size", world_size)
    bandwidth = link_seconds(method, payload_bytes, p, link)
    calls = collective_calls(method, buckets, period=period)
    latency = calls["all_reduce"] * alpha_beta.allreduce_time(0, p, alpha, math.inf) + calls[
        "all_gather"
    ] * alpha_beta.allgather_time(0, p, alpha, math.inf)
    return {
        "bandwidth_s": bandwidth,
        "latency_s": latency,
        "total_s": bandwidth + latency,
        "calls": calls["all_reduce"] + calls["all_gather"],
    }
