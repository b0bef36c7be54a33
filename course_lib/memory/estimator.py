"""Estimating a training step's peak memory without running it (notebook 02).

``estimate_training_memory(model, x, optimizer="adam", precision="bf16-mixed")`` runs ONE forward
pass (no backward, no optimizer step), records what autograd saves for backward, walks the autograd
graph to simulate the backward pass, and adds the optimizer's state and temporaries. Wrap the model
with ``apply_activation_checkpointing`` first to plan a checkpointed step. ``course_lib.memory.meters``
measures the same step for comparison.

What the estimate counts (the notebook explains each term):

=================  ==============================================================================
parameters         parameters and buffers (fp32 master weights; BatchNorm running statistics)
gradients          one gradient per trainable parameter, in the parameter's dtype
optimizer_state    sgd: none; momentum: 1 buffer; adam/adamw: exp_avg + exp_avg_sq (+ a step scalar)
activations        tensors autograd saves for backward at the end of the forward pass (deduplicated
                   by storage, parameters and the input excluded), the model output and the loss
batch              the input (and the target)
temporaries        the optimizer step's temporaries (single-tensor Adam: ``sqrt`` and a division of
                   the largest parameter; foreach Adam: one parameter-sized list)
=================  ==============================================================================

The total is **not** the sum of these: they do not all live at the same time. The estimate
follows the three phases of a step and reports the largest (the ``peak_phase``):

* forward: parameters + optimizer state (from step 2 on) + batch + the live tensors of the
  forward pass (measured while running it: activations plus short-lived temporaries);
* backward: parameters + optimizer state + batch + a simulation of the backward pass over the
  recorded autograd graph: nodes run in the engine's order (highest sequence number first);
  each node allocates the gradients it sends on (unless it only passes its incoming gradient
  through: add, views, transposes), frees its incoming gradient and the saved tensors no other
  node still needs; gradients reaching a parameter stay (they become ``.grad``). With activation
  checkpointing a block's saved tensors reappear (recomputation) when its first node runs, and
  the block input is kept until its backward is done;
* optimizer step: parameters + gradients + optimizer state + batch + output + temporaries.

Not modelled: scratch buffers inside single kernels (oneDNN, attention kernels) and allocator
rounding. Mixed precision means ``torch.autocast``: fp32 master weights, gradients and optimizer
state; activations are saved in 16 bits where autocast produces 16-bit tensors, and autocast's
16-bit copies of the weights are saved too (they are counted as activations).
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import nn

from .. import names
from ..train import autocast, default_loss
from . import torch_internals as ti
from .checkpointing import CheckpointedBlock, _plan_blocks
from .meters import LiveTensorTracker, _as_inputs, _check_model, _key, storage_bytes

_MiB = 2**20

# Backward nodes that hand their incoming gradient on without allocating a new one
# (the gradient of an add is the incoming gradient; views and transposes return views).
_PASS_THROUGH = ("AddBackward0", "SubBackward0", "ViewBackward0", "UnsafeViewBackward0", "TBackward0",
                 "TransposeBackward0", "TransposeBackward1", "PermuteBackward0", "ReshapeAliasBackward0",
                 "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "SqueezeBackward3",
                 "SqueezeBackward4", "UnsqueezeBackward0", "AliasBackward0", "CloneBackward0",
                 "DetachBackward0", "ExpandBackward0", "ViewAsRealBackward0", "UnbindBackward0")



# ----------------------------------------------------------------------------- the estimate

@dataclass(frozen=True)
class MemoryEstimate:
    """The estimated memory of one training step, in bytes.

    Components (see the module docstring): parameters, gradients, optimizer_state, activations,
    batch, temporaries. The three phase peaks and ``total`` = the largest of them.
    """

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    batch: int
    temporaries: int
    forward_peak: int
    backward_peak: int
    step_peak: int
    total: int
    peak_phase: str
    # what is alive at the peak, part by part; the parts add up to ``total`` exactly
    peak_parts: tuple[tuple[str, int], ...] = ()

    def table(self) -> str:
        """The components and phase peaks in MiB, one per line, then what makes up the peak."""
        lines = [f"{f.name:<16} {getattr(self, f.name) / _MiB:10.2f} MiB"
                 for f in fields(self) if f.name not in ("total", "peak_phase", "peak_parts")]
        lines.append(f"{'total':<16} {self.total / _MiB:10.2f} MiB  (peak during the {self.peak_phase})")
        if self.peak_parts:
            lines.append("alive at that peak: " + " + ".join(f"{name} {b / _MiB:.2f}" for name, b in self.peak_parts)
                         + f" = {sum(b for _, b in self.peak_parts) / _MiB:.2f} MiB")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


_saved_of = ti.saved_tensors
_seq_now = ti.next_sequence_nr


def _simulate_backward(root, excluded: set[int], storage_size: dict[int, int],
                       block_ranges: list[tuple[int, int]], block_inputs: dict[int, set[int]],
                       start_bytes: int) -> tuple[int, int, dict[str, int]]:
    """Simulate the backward pass over the autograd graph from ``root``.

    Returns (peak bytes of activations + gradients in flight + accumulated gradients,
    bytes of activations live when backward starts, those peak bytes split into "activations
    still held", "parameter gradients" and "activation gradients"). Parameters, optimizer state and batch are
    added by the caller. ``start_bytes`` is what the forward left live besides saved tensors
    (the output and the loss). ``block_ranges``: the sequence numbers of the graph nodes each
    checkpointed block created (empty without checkpointing); a block's saved tensors other
    than its input are recomputed copies that appear when the block's first node runs.
    """
    nodes, deps, stack = {id(root): root}, {id(root): 0}, [root]
    while stack:
        n = stack.pop()
        for nxt, _ in n.next_functions:
            if nxt is None:
                continue
            deps[id(nxt)] = deps.get(id(nxt), 0) + 1
            if id(nxt) not in nodes:
                nodes[id(nxt)] = nxt
                stack.append(nxt)
    saved: dict[int, set] = {}
    holders: dict = {}
    node_block: dict[int, int] = {}
    block_nodes_left: dict[int, int] = {}
    virtual: dict[int, set] = {}  # block -> recomputed storages (block, key)
    for nid, n in nodes.items():
        seq = ti.sequence_nr(n)
        blk = next((i for i, (s0, s1) in enumerate(block_ranges) if s0 < seq < s1), None)
        keys = {k for k in (_key(t) for t in _saved_of(n)) if k is not None and k not in excluded and k in storage_size}
        if blk is not None:
            node_block[nid] = blk
            block_nodes_left[blk] = block_nodes_left.get(blk, 0) + 1
            keys = {k if k in block_inputs.get(blk, ()) else (blk, k) for k in keys}
            virtual.setdefault(blk, set()).update(k for k in keys if isinstance(k, tuple))
        saved[nid] = keys
        for k in keys:
            holders[k] = holders.get(k, 0) + 1
    for blk, keys in block_inputs.items():  # checkpoint keeps each block's input until its backward ends
        for k in keys:
            holders[k] = holders.get(k, 0) + 1

    def nbytes_of(k) -> int:
        return storage_size[k[1] if isinstance(k, tuple) else k]

    live_keys = {k for k in holders if not isinstance(k, tuple)}
    live = start_bytes + sum(nbytes_of(k) for k in live_keys)
    acts_at_start = live - start_bytes
    peak = live
    peak_parts = {"activations still held": live, "parameter gradients": 0, "activation gradients": 0}
    leaf_kept = 0  # gradient bytes that reached a parameter (they stay as .grad)
    materialized: set[int] = set()

    def release(k) -> None:
        nonlocal live
        holders[k] -= 1
        if holders[k] == 0 and k in live_keys:
            live_keys.discard(k)
            live -= nbytes_of(k)

    # gradient buffers: node id -> {input_nr: [bytes, refs-box]}
    buffers: dict[int, dict[int, list]] = {id(root): {0: [0, [1]]}}
    ready = [(-ti.sequence_nr(root), 0, id(root))]
    counter = 1
    while ready:
        _, _, nid = heapq.heappop(ready)
        n = nodes[nid]
        b = node_block.get(nid)
        if b is not None and b not in materialized:
            materialized.add(b)  # recomputation: the block's saved tensors come back at once
            for k in virtual.get(b, ()):
                live_keys.add(k)
                live += nbytes_of(k)
        inbuf = buffers.pop(nid, {})
        is_leaf = n.name() == "torch::autograd::AccumulateGrad"
        passthrough = n.name() in _PASS_THROUGH and len(inbuf) == 1
        new_alloc, transient = 0, 0
        for nxt, nr in n.next_functions:
            if nxt is None:
                continue
            slots = buffers.setdefault(id(nxt), {})
            size = ti.input_bytes(nxt, nr)
            buf = next(iter(inbuf.values())) if passthrough else None
            if buf is not None and buf[0] == size:  # handed on as it is (a broadcast is reduced: new)
                if nr not in slots:
                    buf[1][0] += 1
                    slots[nr] = buf
            elif nr in slots:
                transient += size  # accumulated into the existing buffer, then freed
            else:
                slots[nr] = [size, [1]]
                new_alloc += size
            deps[id(nxt)] -= 1
            if deps[id(nxt)] == 0:
                heapq.heappush(ready, (-ti.sequence_nr(nxt) if nxt.name() != "torch::autograd::AccumulateGrad"
                                       else -2**63, counter, id(nxt)))
                counter += 1
        live += new_alloc
        if live + transient > peak:
            peak = live + transient
            acts = start_bytes + sum(nbytes_of(k) for k in live_keys)
            seen: set[int] = set()
            param_grads = leaf_kept
            for target_id, slots in buffers.items():
                if nodes[target_id].name() == "torch::autograd::AccumulateGrad":
                    for buf in slots.values():
                        if id(buf) not in seen:
                            seen.add(id(buf))
                            param_grads += buf[0]
            peak_parts = {"activations still held": acts, "parameter gradients": param_grads,
                          "activation gradients": peak - acts - param_grads}
        if is_leaf:
            leaf_kept += sum(buf[0] for buf in inbuf.values())
        if not is_leaf:  # a gradient reaching AccumulateGrad stays (it becomes .grad)
            for buf in inbuf.values():
                buf[1][0] -= 1
                if buf[1][0] == 0:
                    live -= buf[0]
        for k in saved.get(nid, ()):
            release(k)
        if b is not None:
            block_nodes_left[b] -= 1
            if block_nodes_left[b] == 0:
                for k in block_inputs.get(b, ()):
                    release(k)
    return peak, acts_at_start, peak_parts


def _optimizer_bytes(optimizer: str, params: list[nn.Parameter], foreach: bool) -> tuple[int, int]:
    """(state bytes, step temporaries bytes) for the torch optimizers of ``make_optimizer``."""
    sizes = [p.numel() * p.element_size() for p in params]
    total = sum(sizes)
    state = names.OPTIMIZER_STATE_BUFFERS[optimizer] * total
    temps = 0
    if optimizer in ("adam", "adamw"):
        state += 4 * len(params)  # the fp32 'step' scalar per parameter tensor
        # foreach: sqrt of every exp_avg_sq at once; single tensor: sqrt, then a division, per tensor
        temps = total if foreach else 2 * max(sizes)
    return state, temps


def estimate_training_memory(model: nn.Module, example_input, optimizer: str = "adam", precision: str = "fp32",
                             activation_checkpointing: bool = False, target: torch.Tensor | None = None,
                             loss_fn: Callable | None = None, foreach: bool | None = None) -> MemoryEstimate:
    """Estimate the peak memory of training ``model`` on batches like ``example_input``.

    Notebook 02 (memory: where the bytes go). Runs ONE forward pass (under ``torch.autocast`` for
    the mixed precisions; on a CPU fp16-mixed is run as bf16, which has the same sizes and the same
    autocast op list, because fp16 compute on CPUs is very slow), never a backward pass or an
    optimizer step. The model's parameters and buffers are left as they were.

    ``optimizer``: one of ``OPTIMIZERS``; ``precision``: one of ``PRECISIONS``;
    ``activation_checkpointing``: the model's blocks run under ``torch.utils.checkpoint`` (as
    ``apply_activation_checkpointing`` wraps them; an unwrapped model is planned the same way
    without changing it). ``target``/``loss_fn``: as in ``measure_training_memory``.
    ``foreach``: the optimizer implementation, ``None`` = torch's default (foreach on CUDA,
    single-tensor on CPU). See the module docstring for every term.
    """
    ti.require()
    params = _check_model(model)
    optimizer = names.optimizer(optimizer)
    precision = names.precision(precision)
    if not isinstance(activation_checkpointing, bool):
        raise TypeError(f"activation_checkpointing must be True or False, got {activation_checkpointing!r}")
    inputs = _as_inputs("example_input", example_input)
    if target is not None and not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a tensor or None, got {type(target).__name__}")
    device = params[0].device
    if foreach is None:
        foreach = device.type in ("cuda", "xpu")
    wrappers = [m for m in model.modules() if isinstance(m, CheckpointedBlock)]
    if wrappers and not activation_checkpointing:
        raise ValueError("model has CheckpointedBlock wrappers but activation_checkpointing=False; "
                         "accepted: activation_checkpointing=True for a wrapped model")
    if wrappers:
        blocks = [(w.block, w.block) for w in wrappers]
    elif activation_checkpointing:
        blocks = [(c._modules[names[0]], c._modules[names[-1]]) for c, names in _plan_blocks(model)]
    else:
        blocks = []

    param_keys = {_key(t) for t in list(model.parameters()) + list(model.buffers())}
    excluded = param_keys | {_key(t) for t in inputs}
    if target is not None:
        excluded.add(_key(target))
    storage_size: dict[int, int] = {}
    block_ranges: list[list[int]] = [[0, 0] for _ in blocks]
    block_inputs: dict[int, set[int]] = {}
    keep: list[torch.Tensor] = []

    def pack(t: torch.Tensor):
        k = _key(t)
        if k is not None and k not in excluded:
            storage_size[k] = t.untyped_storage().nbytes()
        return t

    def pre_hook(i):
        def hook(module, args):
            block_ranges[i][0] = _seq_now()
            block_inputs[i] = {_key(a) for a in args if isinstance(a, torch.Tensor)} - excluded
            for a in args:
                if isinstance(a, torch.Tensor) and _key(a) not in excluded:
                    storage_size.setdefault(_key(a), a.untyped_storage().nbytes())
                    keep.append(a)
        return hook

    def post_hook(i):
        def hook(module, args, out):
            block_ranges[i][1] = _seq_now()
        return hook

    state = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()
             if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter)}
    handles = []
    for i, (first, last) in enumerate(blocks):
        handles.append(first.register_forward_pre_hook(pre_hook(i)))
        handles.append(last.register_forward_hook(post_hook(i)))
    for w in wrappers:
        w.checkpointing = False
    run_precision = "bf16-mixed" if precision == "fp16-mixed" and device.type == "cpu" else precision
    was_training = model.training
    model.train()
    loss_fn = loss_fn or default_loss
    try:
        with torch.enable_grad(), LiveTensorTracker() as tracker, \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with autocast(run_precision, device):
                out = model(*inputs)
                loss = loss_fn(out, target)
            fwd_live = tracker.live
            fwd_peak = tracker.peak
            out_bytes = storage_bytes([out, loss])
            saved_total = sum(storage_size.values())
            if loss.grad_fn is None:
                raise ValueError("the loss does not depend on the model's parameters; accepted: a model "
                                 "whose output requires grad")
            bwd_peak, acts_start, bwd_parts = _simulate_backward(
                loss.grad_fn, excluded, storage_size, [tuple(r) for r in block_ranges], block_inputs, out_bytes)
            del out, loss, keep[:]
    finally:
        for h in handles:
            h.remove()
        for w in wrappers:
            w.checkpointing = True
        with torch.no_grad():
            for k, v in model.state_dict(keep_vars=True).items():
                if k in state:
                    v.copy_(state[k])
        model.train(was_training)

    p_bytes = storage_bytes(model)
    g_bytes = sum(p.numel() * p.element_size() for p in params)
    o_bytes, t_bytes = _optimizer_bytes(optimizer, params, foreach)
    batch = storage_bytes([*inputs, target]) if target is not None else storage_bytes(inputs)
    persistent = p_bytes + o_bytes + batch
    if activation_checkpointing:
        # the forward keeps block inputs and the tensors saved outside blocks; a block's own
        # temporaries come and go (bounded by what its backward recomputes)
        fwd = persistent + acts_start + out_bytes
        activations = acts_start + out_bytes
    else:
        fwd = persistent + max(fwd_peak, fwd_live)
        activations = min(saved_total, fwd_live) + out_bytes if saved_total else fwd_live
    bwd = persistent + bwd_peak
    step = p_bytes + g_bytes + o_bytes + batch + out_bytes + t_bytes
    phases = {"forward pass": fwd, "backward pass": bwd, "optimizer step": step}
    phase = max(phases, key=phases.get)
    common = [("parameters", p_bytes), ("optimizer state", o_bytes), ("batch", batch)]
    parts = {"forward pass": common + [("forward pass tensors", fwd - persistent)],
             "backward pass": common + list(bwd_parts.items()),
             "optimizer step": common + [("gradients", g_bytes), ("output and loss", out_bytes),
                                         ("step temporaries", t_bytes)]}[phase]
    return MemoryEstimate(p_bytes, g_bytes, o_bytes, activations, batch, t_bytes, fwd, bwd, step,
                          phases[phase], phase, tuple((n, b) for n, b in parts if b))


