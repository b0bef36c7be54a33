"""Where a mixed-precision step's time goes: its matrix products (``record_matmuls``, ``products_fn``), the rest, and
the hand model ``share x product_ratio + (1 - share)`` (``predicted_step_ratio``, ``step_decomposition``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from .. import arguments, names
from .formats import _TORCH, format_name

_MATMULS = ("mm", "addmm", "bmm", "baddbmm")


class Product(NamedTuple):
    """One matrix product of a step (:func:`record_matmuls`): ``batch`` products of ``m x k`` by ``k x n``;
    ``a_t``/``b_t``: that operand was a transposed view (kernels take different paths for it)."""

    batch: int
    m: int
    k: int
    n: int
    a_t: bool
    b_t: bool

    @property
    def flops(self) -> int:
        """Floating-point operations: ``2 batch m k n`` (a multiply and an add per term)."""
        return 2 * self.batch * self.m * self.k * self.n


def _transposed(t: torch.Tensor) -> bool:
    return t.dim() >= 2 and t.stride(-2) == 1 and t.stride(-1) != 1


def record_matmuls(fn: Any) -> list[Product]:
    """Call ``fn()`` once and list the matrix products it ran (where a step's time goes).

    A ``TorchDispatchMode`` sees every ``aten.mm``/``addmm`` (``batch`` 1) and ``bmm``/``baddbmm``
    below autograd, so the backward pass's products are listed too: a ``Linear`` layer shows up as
    its forward product, the gradient of its input (absent for the first layer, whose input needs no
    gradient) and the gradient of its weight, with the layout of each operand (a weight enters
    transposed). Shapes only: the dtype autocast picks does not change them.
    """
    from ..memory.torch_internals import TorchDispatchMode

    arguments.function("fn", fn)
    found: list[Product] = []
    ops = {getattr(torch.ops.aten, name).default: name for name in _MATMULS}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = ops.get(func)
            if name is not None:
                a, b = (args[0], args[1]) if name in ("mm", "bmm") else (args[1], args[2])
                batch = 1 if name in ("mm", "addmm") else a.shape[0]
                found.append(Product(batch, a.shape[-2], a.shape[-1], b.shape[-1], _transposed(a), _transposed(b)))
            return func(*args, **(kwargs or {}))

    with Record():
        fn()
    return found


def _operand(batch: int, rows: int, cols: int, transposed: bool, gen: torch.Generator) -> torch.Tensor:
    t = (
        torch.randn(batch, cols, rows, generator=gen).transpose(-2, -1)
        if transposed
        else torch.randn(batch, rows, cols, generator=gen)
    )
    return t[0] if batch == 1 else t


def products_fn(products: Sequence[Product], dtype: Any, device: torch.device | str = "cpu"):
    """A no-argument function that runs ``products`` (from :func:`record_matmuls`) on random ``dtype``
    matrices of the same shapes and layouts, one after the other (a step's products
    without the rest of the step)."""
    key = format_name(dtype, accepted=("fp32", "bf16", "fp16"))
    dev = torch.device(device) if isinstance(device, str) else device
    if not isinstance(dev, torch.device):
        raise TypeError(f"device must be a torch.device or a str, got {type(device).__name__}")
    if not isinstance(products, (list, tuple)) or not products:
        raise ValueError("products must be a non-empty list of Product, as record_matmuls returns")
    if not all(isinstance(p, Product) for p in products):
        raise TypeError("products must hold Product tuples (record_matmuls returns them)")
    gen = torch.Generator().manual_seed(0)
    pairs = []
    for p in products:
        for size in (p.batch, p.m, p.k, p.n):
            arguments.positive_int("every size of products", size)
        a = _operand(p.batch, p.m, p.k, p.a_t, gen).to(dev, _TORCH[key])
        b = _operand(p.batch, p.k, p.n, p.b_t, gen).to(dev, _TORCH[key])
        pairs.append((a, b))

    def run() -> None:
        for a, b in pairs:
            torch.matmul(a, b)

    return run


def predicted_step_ratio(share: float, product_ratio: float, rest_ratio: float = 1.0) -> float:
    """Mixed-precision step time over fp32 step time, from the step's parts:
    ``share x product_ratio + (1 - share) x rest_ratio``.

    ``share`` is the fraction of the fp32 step spent in matrix products, ``product_ratio`` their
    16-bit time over their fp32 time, ``rest_ratio`` the same for everything else (optimizer update,
    elementwise work, autocast's casts): about 1, since 16 bits do not speed them up much on a CPU.
    Amdahl's law: a step whose products take 10 % of its time can gain at most 10 %.
    """
    share = arguments.number("share", share, minimum=0, maximum=1)
    product_ratio = arguments.positive("product_ratio", product_ratio)
    rest_ratio = arguments.positive("rest_ratio", rest_ratio)
    return share * product_ratio + (1 - share) * rest_ratio


@dataclass(frozen=True)
class StepDecomposition:
    """A training step split into its matrix products and the rest, in fp32 and mixed precision,
    all timed interleaved. Seconds per call; ``casts_low``: autocast's casts of every
    weight to 16 bits and of every weight gradient back to fp32, timed alone; ``noisy``: a timing
    spread widely."""

    batch: int
    low: str
    products: int
    step_fp32: float
    step_low: float
    products_fp32: float
    products_low: float
    casts_low: float
    noisy: bool

    @property
    def share(self) -> float:
        """Fraction of the fp32 step spent in its matrix products (at most 1)."""
        return min(1.0, self.products_fp32 / self.step_fp32)

    @property
    def product_ratio(self) -> float:
        """The same products in 16 bits over fp32."""
        return self.products_low / self.products_fp32

    @property
    def rest_ratio(self) -> float:
        """Everything but the products, 16-bit step over fp32 step (measured as step minus products)."""
        rest = self.step_fp32 - self.products_fp32
        return (self.step_low - self.products_low) / rest if rest > 0 else float("nan")

    @property
    def predicted(self) -> float:
        """:func:`predicted_step_ratio` from the share and the products' ratio (the rest unchanged)."""
        return predicted_step_ratio(self.share, self.product_ratio)

    @property
    def predicted_with_casts(self) -> float:
        """:attr:`predicted` plus autocast's casts (``casts_low``) as a share of the fp32 step."""
        return self.predicted + self.casts_low / self.step_fp32

    @property
    def measured(self) -> float:
        """Mixed-precision step time over fp32 step time, measured."""
        return self.step_low / self.step_fp32


def _casts_fn(model: nn.Module, half: torch.dtype):
    """What autocast adds per step for ``model``: each weight cast to ``half`` (forward) and a ``half``
    gradient of each cast back to fp32 (backward, into the fp32 ``.grad``)."""
    weights = [p.detach() for p in model.parameters() if p.dim() >= 2]
    grads = [torch.zeros_like(w, dtype=half) for w in weights]

    def run() -> None:
        for w, g in zip(weights, grads):
            w.to(half)
            g.to(torch.float32)

    return run


def step_decomposition(
    make_model: Any,
    batch: Sequence[torch.Tensor],
    *,
    low: str = "bf16-mixed",
    optimizer: str = "adam",
    rounds: int = 3,
    min_run_time: float = 0.05,
) -> StepDecomposition:
    """Time a training step of ``make_model()`` on ``batch`` in fp32 and in ``low`` precision, the same
    step's matrix products alone in fp32 and in 16 bits, and autocast's weight casts, interleaved
    (A B C D E A B ...; notebook 04).

    The products are the ones :func:`record_matmuls` sees in one fp32 step, replayed on random
    matrices (:func:`products_fn`); ``train.make_step_fn`` makes the steps (each its own model, the
    same seed). ``timing.compare_interleaved`` times the five, ``rounds`` rounds. Autocast casts the
    weights of products (``Linear``, convolutions), so the casts timed are those of every parameter
    with two or more dimensions.
    """
    from .. import timing
    from ..train import make_step_fn

    arguments.function("make_model", make_model)
    low = names.precision(low)
    if low == "fp32":
        raise ValueError("low must be a mixed precision ('bf16-mixed' or 'fp16-mixed'), not 'fp32'")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError("batch must be a pair (inputs, targets) of tensors")
    steps, built = {}, {}
    for p in ("fp32", low):
        torch.manual_seed(0)
        built[p] = make_model()
        if not isinstance(built[p], nn.Module):
            raise TypeError(f"make_model must return a torch.nn.Module, got {type(built[p]).__name__}")
        steps[p] = make_step_fn(built[p], batch[0], batch[1], optimizer, precision=p)
    shapes = record_matmuls(steps["fp32"])
    if not shapes:
        raise ValueError("the step ran no matrix products (mm, addmm, bmm): nothing to decompose")
    dev = batch[0].device
    half = "bf16" if low == "bf16-mixed" else "fp16"
    fns = {
        "step fp32": steps["fp32"],
        f"step {low}": steps[low],
        "products fp32": products_fn(shapes, "fp32", dev),
        f"products {half}": products_fn(shapes, half, dev),
        "casts": _casts_fn(built[low], _TORCH[half]),
    }
    timed = timing.compare_interleaved(fns, rounds=rounds, device=dev, min_run_time=min_run_time)
    s = [timed[k].seconds for k in fns]
    return StepDecomposition(len(batch[0]), low, len(shapes), *s, any(t.noisy for t in timed.values()))
