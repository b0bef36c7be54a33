"""Efficient layers: the same job with less arithmetic (notebook 05.3, section 3).

* **Depthwise separable convolution** (MobileNets, Howard et al. 2017): a standard ``k x k``
  convolution mixes space and channels at once, ``c_in * c_out * k^2`` weights. The separable one
  splits the two: a depthwise ``k x k`` convolution filters each channel on its own
  (``groups = c_in``: ``c_in * k^2`` weights), then a pointwise ``1 x 1`` convolution mixes channels
  (``c_in * c_out``). Parameters and FLOPs shrink by ``1/c_out + 1/k^2``.
* **Linear attention** (Katharopoulos et al. 2020, "Transformers are RNNs"): softmax attention
  compares every position with every other, an ``n x n`` score matrix per head, so time and memory
  grow as ``n^2``. Replacing ``softmax(q k^T)`` by a kernel ``phi(q) phi(k)^T`` with a positive feature
  map (``phi = elu + 1``) lets the product be regrouped, ``phi(q) (phi(k)^T v)``: a ``d x d`` state per
  head, time and memory linear in ``n``. The price: a different (weaker) attention, and more work than
  softmax at short lengths where ``n < d``.

The formulas count what ``torch.utils.flop_counter`` counts (matrix products and convolutions, two
FLOPs per multiply-add; elementwise work is not counted), so the notebook compares them with
``timing.count_flops``; the byte formulas count the forward pass's live tensors, which the notebook
compares with ``memory.meters.measure_peak_memory``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .. import arguments, timing
from ..timing import Timing
from ..memory.meters import measure_peak_memory

__all__ = [
    "DepthwiseSeparableConv2d",
    "conv_parameters",
    "separable_parameters",
    "conv_flops",
    "separable_flops",
    "SoftmaxAttention",
    "LinearAttention",
    "FusedAttention",
    "ATTENTION_KINDS",
    "make_attention",
    "attention_flops",
    "attention_bytes",
    "score_matrix_bytes",
    "state_bytes",
    "crossover_length",
    "AttentionPoint",
    "attention_sweep",
    "measured_crossover",
]

_pos = arguments.positive_int


def _out_size(size: int, kernel_size: int, stride: int, padding: int) -> int:
    out = (size + 2 * padding - kernel_size) // stride + 1
    if out < 1:
        raise ValueError(f"the input ({size}) is smaller than the kernel ({kernel_size}) with padding {padding}")
    return out


class DepthwiseSeparableConv2d(nn.Sequential):
    """A depthwise ``k x k`` convolution (``groups=in_channels``) then a pointwise ``1 x 1`` one: the
    drop-in replacement for ``nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding)``
    that MobileNets are built from (notebook 05.3, section 3). ``self.depthwise``, ``self.pointwise``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int = 0,
        bias: bool = True,
    ) -> None:
        for name, v in (
            ("in_channels", in_channels),
            ("out_channels", out_channels),
            ("kernel_size", kernel_size),
            ("stride", stride),
        ):
            _pos(name, v)
        arguments.nonnegative_int("padding", padding)
        arguments.boolean("bias", bias)
        super().__init__()
        self.depthwise = nn.Conv2d(
            in_channels, in_channels, kernel_size, stride, padding, groups=in_channels, bias=bias
        )
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=bias)


def conv_parameters(in_channels: int, out_channels: int, kernel_size: int, bias: bool = True) -> int:
    """Parameters of ``nn.Conv2d(in, out, k)``: ``in * out * k^2`` (+ ``out`` biases)."""
    ci, co, k = _pos("in_channels", in_channels), _pos("out_channels", out_channels), _pos("kernel_size", kernel_size)
    return ci * co * k * k + (co if arguments.boolean("bias", bias) else 0)


def separable_parameters(in_channels: int, out_channels: int, kernel_size: int, bias: bool = True) -> int:
    """Parameters of ``DepthwiseSeparableConv2d(in, out, k)``: ``in * k^2 + in * out`` (+ ``in + out`` biases)."""
    ci, co, k = _pos("in_channels", in_channels), _pos("out_channels", out_channels), _pos("kernel_size", kernel_size)
    return ci * k * k + ci * co + ((ci + co) if arguments.boolean("bias", bias) else 0)


def conv_flops(
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    height: int,
    width: int,
    batch: int = 1,
    stride: int = 1,
    padding: int = 0,
) -> int:
    """Forward FLOPs of a standard convolution on ``batch x in x height x width`` inputs:
    ``2 * batch * out * in * k^2`` per output pixel (bias adds not counted, as FlopCounterMode)."""
    ci, co, k = _pos("in_channels", in_channels), _pos("out_channels", out_channels), _pos("kernel_size", kernel_size)
    b, s = _pos("batch", batch), _pos("stride", stride)
    p = arguments.nonnegative_int("padding", padding)
    pixels = _out_size(_pos("height", height), k, s, p) * _out_size(_pos("width", width), k, s, p)
    return 2 * b * pixels * co * ci * k * k


def separable_flops(
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    height: int,
    width: int,
    batch: int = 1,
    stride: int = 1,
    padding: int = 0,
) -> int:
    """Forward FLOPs of ``DepthwiseSeparableConv2d``: ``2 * batch * (in * k^2 + in * out)`` per output
    pixel. The ratio to ``conv_flops`` is ``1/out + 1/k^2`` (notebook 05.3, section 3)."""
    ci, co, k = _pos("in_channels", in_channels), _pos("out_channels", out_channels), _pos("kernel_size", kernel_size)
    b, s = _pos("batch", batch), _pos("stride", stride)
    p = arguments.nonnegative_int("padding", padding)
    pixels = _out_size(_pos("height", height), k, s, p) * _out_size(_pos("width", width), k, s, p)
    return 2 * b * pixels * (ci * k * k + ci * co)


# ------------------------------------------------------------------------------------------- attention


class _Attention(nn.Module):
    """Shared part: ``x`` (batch, n, dim) -> q, k, v projections, split into heads -> mix -> output
    projection. Subclasses define ``mix(q, k, v)`` on (batch, heads, n, head_dim) tensors."""

    def __init__(self, dim: int, heads: int = 1, bias: bool = True) -> None:
        super().__init__()
        _pos("dim", dim)
        _pos("heads", heads)
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=arguments.boolean("bias", bias))
        self.out = nn.Linear(dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(
                f"x must be a tensor of shape (batch, n, {self.dim}), got "
                f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        mixed = self.mix(q, k, v)  # (b, heads, n, head_dim)
        return self.out(mixed.transpose(1, 2).reshape(b, n, self.dim))

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


class SoftmaxAttention(_Attention):
    """Ordinary (non-causal) scaled dot-product attention, written out so the ``n x n`` score matrix
    is really built: ``softmax(q k^T / sqrt(d)) v`` per head. Fused kernels
    (FlashAttention, ``F.scaled_dot_product_attention``) compute the same thing in tiles without
    storing the matrix, but still do the ``n^2`` work. Input and output: (batch, n, dim)."""

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)).mul_(1.0 / math.sqrt(self.head_dim))  # (b, h, n, n)
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class LinearAttention(_Attention):
    """Linear attention with the feature map ``phi(x) = elu(x) + 1`` (Katharopoulos et al. 2020):
    ``phi(q) (phi(k)^T v) / (phi(q) sum_j phi(k_j))`` per head, a ``head_dim x head_dim`` state instead
    of the ``n x n`` scores. Same interface as ``SoftmaxAttention``."""

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k = F.elu(q) + 1, F.elu(k) + 1
        state = torch.matmul(k.transpose(-2, -1), v)  # (b, h, d, d): sum_j phi(k_j) v_j^T
        norm = torch.matmul(q, k.sum(dim=-2).unsqueeze(-1))  # (b, h, n, 1): phi(q_i) . sum_j phi(k_j)
        return torch.matmul(q, state) / norm


class FusedAttention(_Attention):
    """The same softmax attention as ``SoftmaxAttention`` through ``F.scaled_dot_product_attention``, which picks a
    fused kernel (FlashAttention-style on CPUs and recent GPUs: the scores are computed block by block and never
    stored whole, Dao et al. 2022) where one applies, the explicit product otherwise. Same interface, the same
    ``4 n^2 d`` FLOPs; its memory depends on the kernel picked, so only a measurement gives it."""

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


ATTENTION_KINDS = {"softmax": SoftmaxAttention, "linear": LinearAttention}
_MODULES = {**ATTENTION_KINDS, "fused": FusedAttention}


def make_attention(kind: str, dim: int, heads: int = 1) -> _Attention:
    """``SoftmaxAttention``, ``LinearAttention`` or ``FusedAttention`` by name ("softmax", "linear", "fused")."""
    return _MODULES[arguments.choice("kind", kind, _MODULES)](dim, heads)


def _attention_args(kind: str, seq_len: int, dim: int, heads: int, batch: int) -> tuple[str, int, int, int, int]:
    kind = arguments.choice("kind", kind, ATTENTION_KINDS)
    n, d, h, b = _pos("seq_len", seq_len), _pos("dim", dim), _pos("heads", heads), _pos("batch", batch)
    if d % h:
        raise ValueError(f"dim ({d}) must be divisible by heads ({h})")
    return kind, n, d, h, b


def attention_flops(kind: str, seq_len: int, dim: int, heads: int = 1, batch: int = 1, projections: bool = True) -> int:
    """Forward FLOPs of ``make_attention(kind, dim, heads)`` on (batch, seq_len, dim), counted as
    FlopCounterMode counts (matrix products only). Projections (q, k, v and output): ``8 b n d^2``,
    the same for both kinds. Softmax: ``q k^T`` and ``p v``, ``4 b n^2 d``. Linear: ``phi(k)^T v`` and
    ``phi(q) S``, ``4 b n d d_head``, plus the normaliser ``2 b n d`` (notebook 05.3, section 3). "fused": softmax's
    FLOPs (a fused kernel does the same products)."""
    kind, n, d, h, b = _attention_args("softmax" if kind == "fused" else kind, seq_len, dim, heads, batch)
    proj = 8 * b * n * d * d if arguments.boolean("projections", projections) else 0
    if kind == "softmax":
        return proj + 4 * b * n * n * d
    return proj + 4 * b * n * d * (d // h) + 2 * b * n * d


def score_matrix_bytes(seq_len: int, heads: int = 1, batch: int = 1, bytes_per_value: int = 4) -> int:
    """Bytes of softmax attention's scores: ``batch * heads * n^2`` values."""
    return (
        _pos("batch", batch)
        * _pos("heads", heads)
        * _pos("seq_len", seq_len) ** 2
        * _pos("bytes_per_value", bytes_per_value)
    )


def state_bytes(dim: int, heads: int = 1, batch: int = 1, bytes_per_value: int = 4) -> int:
    """Bytes of linear attention's state: ``batch * heads * d_head^2`` values."""
    d, h = _pos("dim", dim), _pos("heads", heads)
    return _pos("batch", batch) * h * (d // h) ** 2 * _pos("bytes_per_value", bytes_per_value)


def attention_bytes(kind: str, seq_len: int, dim: int, heads: int = 1, batch: int = 1) -> int:
    """Peak bytes of live tensors during an inference forward pass (``torch.no_grad``, fp32) of
    ``make_attention(kind, dim, heads)``, the input and weights not counted (notebook 05.3, section 3).

    Counted from the code, in values of 4 bytes. The q, k, v projection (``3 b n d``) lives throughout.
    On top of it the peak is the larger of the mixing step and the tail. Softmax's mixing step: the
    scores, their softmax and ``p v`` coexist, ``2 b h n^2 + b n d`` (with several heads also a contiguous
    copy of v that the batched product makes, ``b n d`` more). Linear's: ``phi(q)``, ``phi(k)``,
    ``phi(q) S`` and the division's result (``4 b n d``), the state ``b h d_head^2`` and the normaliser
    ``b h n``. The tail: the mixed heads, their merged copy (a view for one head) and the output
    projection, ``2 b n d`` (``3 b n d`` with several heads).
    """
    kind, n, d, h, b = _attention_args(kind, seq_len, dim, heads, batch)
    bnd = b * n * d
    tail = (3 if h > 1 else 2) * bnd
    core = (
        2 * b * h * n * n + (2 if h > 1 else 1) * bnd
        if kind == "softmax"
        else 4 * bnd + b * h * (d // h) ** 2 + b * h * n
    )
    return 4 * (3 * bnd + max(core, tail))


def crossover_length(cost, low: int = 1, high: int = 1 << 20) -> int:
    """The smallest sequence length ``n`` in [low, high] with ``cost("linear", n) < cost("softmax", n)``,
    found by bisection (both costs are increasing; softmax's grows faster). ``cost(kind, n)`` is e.g.
    ``lambda kind, n: attention_flops(kind, n, 64)``. Notebook 05.3, section 3: the predicted
    crossover. ValueError if linear is not cheaper even at ``high``."""
    arguments.function("cost", cost)
    lo, hi = _pos("low", low), _pos("high", high)
    if lo > hi:
        raise ValueError(f"low ({lo}) must be <= high ({hi})")

    def linear_wins(n: int) -> bool:
        return cost("linear", n) < cost("softmax", n)

    if not linear_wins(hi):
        raise ValueError(f"linear attention is not cheaper than softmax even at n = {hi}")
    if linear_wins(lo):
        return lo
    while hi - lo > 1:  # invariant: softmax wins (or ties) at lo, linear wins at hi
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if linear_wins(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class AttentionPoint:
    """One sequence length of ``attention_sweep``: forward time (``timing.Timing``, measured
    interleaved) and peak live bytes (measured) of both kinds, with their FLOP and byte formulas."""

    seq_len: int
    softmax: Timing
    linear: Timing
    softmax_bytes: int
    linear_bytes: int
    softmax_flops: int
    linear_flops: int
    predicted_softmax_bytes: int
    predicted_linear_bytes: int
    fused: Timing | None = None  # softmax attention through F.scaled_dot_product_attention, when swept
    fused_bytes: int | None = None

    @property
    def time_ratio(self) -> float:
        """Linear time / softmax time: below 1, linear attention is faster."""
        return self.linear.seconds / self.softmax.seconds


def attention_sweep(
    lengths: Iterable[int],
    dim: int = 64,
    heads: int = 1,
    batch: int = 1,
    *,
    rounds: int = 3,
    min_run_time: float = 0.02,
    seed: int = 0,
    fused: bool = False,
    num_threads: int | None = None,
    device: torch.device | str = "cpu",
) -> list[AttentionPoint]:
    """Softmax against linear attention at each sequence length (notebook 05.3, section 3).

    One module of each kind (same dimensions; inference, ``torch.no_grad``) runs on a random input of
    shape (batch, n, dim); ``fused=True`` adds ``FusedAttention`` with the softmax module's weights. Time:
    ``timing.compare_interleaved`` (the kinds alternate, low quantile of the rounds) on ``num_threads`` threads
    (default: torch's setting). Memory: ``memory.meters.measure_peak_memory`` on a CPU copy (live tensor
    bytes above the input and weights, counted exactly; a GPU's allocator would add rounding and
    library workspaces). FLOPs and bytes come from the formulas.
    """
    lengths = arguments.int_list("lengths", lengths)
    arguments.positive_int("rounds", rounds)
    threads = None if num_threads is None else arguments.positive_int("num_threads", num_threads)
    torch.manual_seed(arguments.nonnegative_int("seed", seed))
    mods = {kind: make_attention(kind, dim, heads).to(device).eval() for kind in ATTENTION_KINDS}
    if arguments.boolean("fused", fused):
        mods["fused"] = make_attention("fused", dim, heads).to(device).eval()
        mods["fused"].load_state_dict(mods["softmax"].state_dict())
    cpu_mods = {kind: copy.deepcopy(m).cpu() for kind, m in mods.items()}
    out = []
    for n in lengths:
        x = torch.randn(batch, n, dim, device=device)
        calls = {kind: _no_grad_call(m, x) for kind, m in mods.items()}
        timed = timing.compare_interleaved(
            calls, rounds=rounds, device=device, min_run_time=min_run_time, num_threads=threads
        )
        x_cpu = x.cpu()  # memory is counted on the CPU: live tensors, exactly, whatever the device
        peak = {
            kind: measure_peak_memory(_no_grad_call(cpu_mods[kind], x_cpu), device="cpu").increment_bytes
            for kind in calls
        }
        out.append(
            AttentionPoint(
                n,
                timed["softmax"],
                timed["linear"],
                peak["softmax"],
                peak["linear"],
                *(attention_flops(k, n, dim, heads, batch) for k in ATTENTION_KINDS),
                *(attention_bytes(k, n, dim, heads, batch) for k in ATTENTION_KINDS),
                fused=timed.get("fused"),
                fused_bytes=peak.get("fused"),
            )
        )
    return out


def _no_grad_call(module: nn.Module, x: torch.Tensor):
    def call() -> torch.Tensor:
        with torch.no_grad():
            return module(x)

    return call


def measured_crossover(lengths: Sequence[int], ratios: Sequence[float]) -> float | None:
    """Where measured ``ratios`` (linear cost / softmax cost, one per length, lengths increasing) first
    fall below 1: the length interpolated geometrically between the last length where softmax was
    cheaper and the first where linear was (notebook 05.3, section 3). ``lengths[0]`` if linear is
    already cheaper there; None if it never is."""
    lengths = arguments.int_list("lengths", lengths)
    if len(ratios) != len(lengths):
        raise ValueError(f"ratios ({len(ratios)}) and lengths ({len(lengths)}) must have the same length")
    if any(b <= a for a, b in zip(lengths, lengths[1:])):
        raise ValueError(f"lengths must increase, got {lengths}")
    ratios = [arguments.positive(f"ratios[{i}]", r) for i, r in enumerate(ratios)]
    for i, r in enumerate(ratios):
        if r < 1:
            if i == 0:
                return float(lengths[0])
            r0, n0, n1 = ratios[i - 1], lengths[i - 1], lengths[i]
            t = math.log(r0) / (math.log(r0) - math.log(r))  # where log(ratio) crosses 0
            return float(math.exp(math.log(n0) + t * (math.log(n1) - math.log(n0))))
    return None
