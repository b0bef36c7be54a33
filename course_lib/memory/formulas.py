"""Back-of-the-envelope memory formulas for models too big to run here (notebook 02).

``model_states_bytes`` (the ZeRO paper's bytes per parameter), ``transformer_activation_bytes``
(Korthikanti et al. 2022), ``largest_model_that_fits``, ``largest_model_per_accelerator`` and
``large_model_memory`` (the memory calculator's numbers); ``mlp_parameters``,
``mlp_activation_bytes`` and ``mlp_largest_batch`` (section 2 by hand).
"""

from __future__ import annotations

from .. import arguments, names
from ..catalog import accelerators


# ----------------------------------------------------------------------------- formulas


def _bytes_per_param(precision: str, optimizer: str) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes per parameter; see ``model_states_bytes``."""
    buffers = names.OPTIMIZER_STATE_BUFFERS[optimizer]
    if precision == "fp32":
        return 4, 4, 4 * buffers
    return 2, 2, 4 + 4 * buffers  # 16-bit weights and grads; fp32 master weights + fp32 states


def model_states_bytes(
    n_params: int, precision: str = "fp32", optimizer: str = "adam", zero_stage: int = 0, data_parallel: int = 1
) -> int:
    """Bytes of the model states (weights, gradients, optimizer state) per data-parallel rank.

    Notebook 02 (memory: model states and ZeRO). The recipe of the ZeRO paper (Rajbhandari et al.
    2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"):

    * fp32: 4 B weights + 4 B gradients + optimizer (sgd 0, momentum 4, adam/adamw 8) per parameter
      -> Adam 16 B/param.
    * bf16-mixed / fp16-mixed: 2 B 16-bit weights + 2 B 16-bit gradients + optimizer in fp32:
      4 B master weights + (sgd 0, momentum 4, adam/adamw 8) -> Adam 2 + 2 + 12 = 16 B/param.
      (``torch.autocast`` keeps fp32 weights and gradients instead: 4 + 4 + 8, also 16 B/param
      for Adam; ``estimate_training_memory`` follows autocast.)
    * ZeRO stage 1 splits the optimizer part (with the master weights) over ``data_parallel``
      ranks, stage 2 also the gradients, stage 3 also the weights. Each part is rounded up.
    """
    arguments.nonnegative_int("n_params", n_params)
    precision = names.precision(precision)
    optimizer = names.optimizer(optimizer)
    arguments.integer("zero_stage", zero_stage, minimum=0, maximum=3)
    arguments.positive_int("data_parallel", data_parallel)
    w, g, o = (n_params * b for b in _bytes_per_param(precision, optimizer))

    def split(x: int, stage: int) -> int:
        return -(-x // data_parallel) if zero_stage >= stage else x

    return split(w, 3) + split(g, 2) + split(o, 1)


def transformer_activation_bytes(
    seq_len: int,
    batch: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
    bytes_per_value: int = 2,
    flash_attention: bool = False,
) -> int:
    """Activation bytes a transformer saves for backward, by the formula of Korthikanti et al.

    Korthikanti et al. 2022, "Reducing Activation Recomputation
    in Large Transformer Models" (arXiv:2205.05198), section 4.1: one layer with 16-bit
    activations saves ``s*b*h*(34 + 5*a*s/h)`` bytes (s sequence length, b batch, h hidden size,
    a attention heads; 34 s*b*h for the linear layers, layer norms, GeLU and 1-byte dropout masks,
    5*a*s^2*b for the attention scores, softmax and its dropout). The result is for ``n_layers``
    layers, scaled by ``bytes_per_value / 2`` for other activation widths (this slightly
    overcounts the 1-byte dropout masks at 4 bytes). The 5*a*s/h term assumes the s x s attention
    scores are stored. ``flash_attention=True``: a memory-efficient attention kernel (FlashAttention, Dao
    et al. 2022; PyTorch's ``scaled_dot_product_attention`` picks one where it can) stores none of them,
    only a float32 log-sum-exp per row and head (``4*a*s*b`` bytes), and the term drops.
    """
    for name, v in (
        ("seq_len", seq_len),
        ("batch", batch),
        ("d_model", d_model),
        ("n_layers", n_layers),
        ("n_heads", n_heads),
        ("bytes_per_value", bytes_per_value),
    ):
        arguments.positive_int(name, v)
    arguments.boolean("flash_attention", flash_attention)
    s, b, h, a = seq_len, batch, d_model, n_heads
    if flash_attention:
        return (s * b * h * 34 * bytes_per_value // 2 + 4 * a * s * b) * n_layers
    per_layer_16bit = s * b * h * 34 + 5 * a * s * s * b
    return per_layer_16bit * n_layers * bytes_per_value // 2


def largest_model_that_fits(
    memory_bytes: float, precision: str = "bf16-mixed", optimizer: str = "adam", overhead_fraction: float = 0.2
) -> int:
    """The most parameters whose model states fit in ``memory_bytes`` (no ZeRO, one device).

    ``overhead_fraction`` of the memory is kept
    for activations, the framework and fragmentation; the rest is divided by the bytes per
    parameter of ``model_states_bytes``.
    """
    memory_bytes = arguments.nonnegative("memory_bytes", memory_bytes)
    overhead_fraction = arguments.fraction("overhead_fraction", overhead_fraction, allow_zero=True)
    per_param = sum(_bytes_per_param(names.precision(precision), names.optimizer(optimizer)))
    return int(memory_bytes * (1 - overhead_fraction) // per_param)


def largest_model_per_accelerator(
    precision: str = "bf16-mixed", optimizer: str = "adam", overhead_fraction: float = 0.2, kind: str | None = None
) -> list[tuple[str, str, float, int]]:
    """(key, name, memory_gb, max_params) for every accelerator in ``course_lib.catalog``.

    Notebook 02 (memory: the largest model that fits). ``memory_gb`` is read as 1e9 bytes (the
    catalog keeps the vendor's unit; see its notes). ``kind``: None, "gpu" or "tpu".
    """
    return [
        (
            a.key,
            a.name,
            a.memory_gb,
            largest_model_that_fits(a.memory_gb * 1e9, precision, optimizer, overhead_fraction),
        )
        for a in accelerators(kind)
    ]


def large_model_memory(
    n_params: float,
    precision: str = "bf16-mixed",
    optimizer: str = "adam",
    zero_stage: int = 0,
    data_parallel: int = 1,
    seq_len: int = 2048,
    batch: int = 1,
    d_model: int = 4096,
    n_layers: int = 32,
    n_heads: int = 32,
    flash_attention: bool = False,
) -> dict[str, int]:
    """Per-device bytes for training a large transformer: model states (ZeRO) + activations.

    Activations follow ``transformer_activation_bytes`` with
    16-bit values for the mixed precisions and 32-bit for fp32; they are per device (each
    data-parallel rank holds the activations of its own micro-batch). ``flash_attention``: the attention
    scores are not stored (see ``transformer_activation_bytes``).
    """
    n_params = arguments.nonnegative("n_params", n_params)
    states = model_states_bytes(int(n_params), precision, optimizer, zero_stage, data_parallel)
    width = 4 if names.precision(precision) == "fp32" else 2
    acts = transformer_activation_bytes(seq_len, batch, d_model, n_layers, n_heads, width, flash_attention)
    return {"model_states": states, "activations": acts, "total": states + acts}


# The capped-subprocess tools and the streaming dataset live in their own modules; they are


# ----------------------------------------------------------------------------- an MLP by hand
# The arithmetic of notebook 02, section 2, for an MLP Linear -> ReLU -> ... -> Linear trained in
# float32 with cross-entropy; exercise 02 asks the learner to write these, and its checks refuse calls to them.


def _mlp_sizes(sizes) -> list[int]:
    sizes = arguments.int_list("sizes", sizes)
    if len(sizes) < 2:
        raise ValueError(f"sizes must list at least the inputs and the outputs, e.g. [64, 1024, 10]; got {sizes}")
    return sizes


def mlp_parameters(sizes) -> int:
    """Parameters of an MLP with layer widths ``sizes`` = [inputs, hidden..., outputs] (weights and biases)."""
    sizes = _mlp_sizes(sizes)
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def mlp_activation_bytes(sizes, batch: int) -> int:
    """Bytes autograd keeps for the backward pass of a float32 MLP on ``batch`` examples: every
    ReLU output (one value per hidden unit), the log-softmax the loss saves (autograd keeps no copy of the
    logits) and the logits, which stay alive while the training loop holds them through the backward pass (one
    value per class each). Not counted: the gradients of these activations, which exist only during the
    backward pass (``estimate_training_memory`` follows them)."""
    sizes = _mlp_sizes(sizes)
    arguments.positive_int("batch", batch)
    return 4 * batch * (sum(sizes[1:-1]) + 2 * sizes[-1])


def mlp_largest_batch(sizes, optimizer: str, memory_bytes: int) -> int:
    """The largest batch whose model states plus activations fit ``memory_bytes`` (0 if the states
    alone do not): the simple plan of exercise 02, which leaves out the activation gradients."""
    arguments.nonnegative_int("memory_bytes", memory_bytes)
    free = memory_bytes - model_states_bytes(mlp_parameters(sizes), "fp32", optimizer)
    return max(0, free // mlp_activation_bytes(sizes, 1))
