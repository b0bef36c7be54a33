"""Estimating a training step's peak memory from one forward pass, without training (notebook 02).

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

import contextlib
import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields

import torch
from torch import nn

from .. import names
from ..train import autocast, default_loss
from . import torch_internals as ti
from .activation_checkpointing import CheckpointedBlock, _plan_blocks
from .meters import LiveTensorTracker, _as_inputs, _check_model, _key, storage_bytes

_MiB = 2**20

# Backward nodes that hand their incoming gradient on without allocating a new one
# (the gradient of an add is the incoming gradient; views and transposes return views).
_PASS_THROUGH = (
    "AddBackward0",
    "SubBackward0",
    "ViewBackward0",
    "UnsafeViewBackward0",
    "TBackward0",
    "TransposeBackward0",
    "TransposeBackward1",
    "PermuteBackward0",
    "ReshapeAliasBackward0",
    "SqueezeBackward0",
    "SqueezeBackward1",
    "SqueezeBackward2",
    "SqueezeBackward3",
    "SqueezeBackward4",
    "UnsqueezeBackward0",
    "AliasBackward0",
    "CloneBackward0",
    "DetachBackward0",
    "ExpandBackward0",
    "ViewAsRealBackward0",
    "UnbindBackward0",
)


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
        lines = [
            f"{f.name:<16} {getattr(self, f.name) / _MiB:10.2f} MiB"
            for f in fields(self)
            if f.name not in ("total", "peak_phase", "peak_parts")
        ]
        lines.append(f"{'total':<16} {self.total / _MiB:10.2f} MiB  (peak during the {self.peak_phase})")
        if self.peak_parts:
            lines.append(
                "alive at that peak: "
                + " + ".join(f"{name} {b / _MiB:.2f}" for name, b in self.peak_parts)
                + f" = {sum(b for _, b in self.peak_parts) / _MiB:.2f} MiB"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


_saved_of = ti.saved_tensors
_seq_now = ti.next_sequence_nr
_GRAD_SINK = "torch::autograd::AccumulateGrad"  # the node that makes a gradient a parameter's .grad


# ----------------------------------------------------------------------------- the backward pass, simulated


def _graph(root) -> tuple[dict[int, object], dict[int, int]]:
    """Every node of the autograd graph below ``root``, by id, and how many edges lead into each."""
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
    return nodes, deps


@dataclass
class _Held:
    """What the backward nodes hold: the storages each node saved (``by_node``), how many holders each storage
    has, each node's checkpointed block, how many nodes of each block are still to run, and each block's
    recomputed storages (``virtual``: keys ``(block, storage)``)."""

    by_node: dict[int, set] = field(default_factory=dict)
    holders: dict = field(default_factory=dict)
    node_block: dict[int, int] = field(default_factory=dict)
    block_nodes_left: dict[int, int] = field(default_factory=dict)
    virtual: dict[int, set] = field(default_factory=dict)


def _held_tensors(
    nodes: dict[int, object],
    excluded: set[int],
    storage_size: dict[int, int],
    block_ranges: list[tuple[int, int]],
    block_inputs: dict[int, set[int]],
) -> _Held:
    """The saved storages of every node; inside a checkpointed block all but the block's input are recomputed
    copies. Checkpoint keeps each block's input until the block's backward ends: one more holder each."""
    held = _Held()
    for nid, n in nodes.items():
        seq = ti.sequence_nr(n)
        blk = next((i for i, (s0, s1) in enumerate(block_ranges) if s0 < seq < s1), None)
        keys = {k for k in (_key(t) for t in _saved_of(n)) if k is not None and k not in excluded and k in storage_size}
        if blk is not None:
            held.node_block[nid] = blk
            held.block_nodes_left[blk] = held.block_nodes_left.get(blk, 0) + 1
            keys = {k if k in block_inputs.get(blk, ()) else (blk, k) for k in keys}
            held.virtual.setdefault(blk, set()).update(k for k in keys if isinstance(k, tuple))
        held.by_node[nid] = keys
        for k in keys:
            held.holders[k] = held.holders.get(k, 0) + 1
    for blk, keys in block_inputs.items():
        for k in keys:
            held.holders[k] = held.holders.get(k, 0) + 1
    return held


class _Backward:
    """The backward pass replayed node by node in the engine's order, counting the bytes alive: saved tensors
    (released with their last holder), gradients in flight (``buffers``: node id -> {input_nr: [bytes, refs-box]})
    and the gradients kept for the parameters; ``peak`` is the largest sum, ``peak_parts`` what made it up."""

    def __init__(
        self,
        nodes: dict[int, object],
        deps: dict[int, int],
        held: _Held,
        storage_size: dict[int, int],
        block_inputs: dict[int, set[int]],
        start_bytes: int,
    ) -> None:
        self.nodes, self.deps, self.held = nodes, deps, held
        self.storage_size, self.block_inputs, self.start_bytes = storage_size, block_inputs, start_bytes
        self.live_keys = {k for k in held.holders if not isinstance(k, tuple)}
        self.live = start_bytes + sum(self._nbytes(k) for k in self.live_keys)
        self.acts_at_start = self.live - start_bytes
        self.peak = self.live
        self.peak_parts = {"activations still held": self.live, "parameter gradients": 0, "activation gradients": 0}
        self.leaf_kept = 0  # gradient bytes that reached a parameter (they stay as .grad)
        self.materialized: set[int] = set()
        self.buffers: dict[int, dict[int, list]] = {}
        self.ready: list = []
        self.counter = 0

    def _nbytes(self, k) -> int:
        return self.storage_size[k[1] if isinstance(k, tuple) else k]

    def _release(self, k) -> None:
        self.held.holders[k] -= 1
        if self.held.holders[k] == 0 and k in self.live_keys:
            self.live_keys.discard(k)
            self.live -= self._nbytes(k)

    def run(self, root) -> tuple[int, int, dict[str, int]]:
        self.buffers = {id(root): {0: [0, [1]]}}
        self.ready = [(-ti.sequence_nr(root), 0, id(root))]
        self.counter = 1
        while self.ready:
            _, _, nid = heapq.heappop(self.ready)
            self._run_node(nid)
        return self.peak, self.acts_at_start, self.peak_parts

    def _run_node(self, nid: int) -> None:
        n = self.nodes[nid]
        b = self.held.node_block.get(nid)
        if b is not None and b not in self.materialized:
            self.materialized.add(b)  # recomputation: the block's saved tensors come back at once
            for k in self.held.virtual.get(b, ()):
                self.live_keys.add(k)
                self.live += self._nbytes(k)
        inbuf = self.buffers.pop(nid, {})
        new_alloc, transient = self._send(n, inbuf)
        self.live += new_alloc
        if self.live + transient > self.peak:
            self._new_peak(self.live + transient)
        if n.name() == _GRAD_SINK:  # a gradient reaching AccumulateGrad stays (it becomes .grad)
            self.leaf_kept += sum(buf[0] for buf in inbuf.values())
        else:
            for buf in inbuf.values():
                buf[1][0] -= 1
                if buf[1][0] == 0:
                    self.live -= buf[0]
        for k in self.held.by_node.get(nid, ()):
            self._release(k)
        if b is not None:
            self.held.block_nodes_left[b] -= 1
            if self.held.block_nodes_left[b] == 0:
                for k in self.block_inputs.get(b, ()):
                    self._release(k)

    def _send(self, n, inbuf: dict[int, list]) -> tuple[int, int]:
        """Hand node ``n``'s gradients on to the nodes it feeds (a node that only passes its incoming gradient
        through hands that buffer on); queue the nodes whose every input has arrived. Returns the bytes newly
        allocated and those allocated only to be accumulated into an existing buffer at once."""
        passthrough = n.name() in _PASS_THROUGH and len(inbuf) == 1
        new_alloc, transient = 0, 0
        for nxt, nr in n.next_functions:
            if nxt is None:
                continue
            slots = self.buffers.setdefault(id(nxt), {})
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
            self.deps[id(nxt)] -= 1
            if self.deps[id(nxt)] == 0:
                heapq.heappush(
                    self.ready, (-ti.sequence_nr(nxt) if nxt.name() != _GRAD_SINK else -(2**63), self.counter, id(nxt))
                )
                self.counter += 1
        return new_alloc, transient

    def _new_peak(self, peak: int) -> None:
        self.peak = peak
        acts = self.start_bytes + sum(self._nbytes(k) for k in self.live_keys)
        seen: set[int] = set()
        param_grads = self.leaf_kept
        for target_id, slots in self.buffers.items():
            if self.nodes[target_id].name() == _GRAD_SINK:
                for buf in slots.values():
                    if id(buf) not in seen:
                        seen.add(id(buf))
                        param_grads += buf[0]
        self.peak_parts = {
            "activations still held": acts,
            "parameter gradients": param_grads,
            "activation gradients": peak - acts - param_grads,
        }


def _simulate_backward(
    root,
    excluded: set[int],
    storage_size: dict[int, int],
    block_ranges: list[tuple[int, int]],
    block_inputs: dict[int, set[int]],
    start_bytes: int,
) -> tuple[int, int, dict[str, int]]:
    """Simulate the backward pass over the autograd graph from ``root``.

    Returns (peak bytes of activations + gradients in flight + accumulated gradients,
    bytes of activations live when backward starts, those peak bytes split into "activations
    still held", "parameter gradients" and "activation gradients"). Parameters, optimizer state and batch are
    added by the caller. ``start_bytes`` is what the forward left live besides saved tensors
    (the output and the loss). ``block_ranges``: the sequence numbers of the graph nodes each
    checkpointed block created (empty without checkpointing); a block's saved tensors other
    than its input are recomputed copies that appear when the block's first node runs.
    """
    nodes, deps = _graph(root)
    held = _held_tensors(nodes, excluded, storage_size, block_ranges, block_inputs)
    return _Backward(nodes, deps, held, storage_size, block_inputs, start_bytes).run(root)


# ----------------------------------------------------------------------------- the forward pass, recorded


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


def _checkpointed_blocks(model: nn.Module, activation_checkpointing: bool) -> tuple[list, list]:
    """The model's ``CheckpointedBlock`` wrappers, and (first module, last module) of each block checkpointing
    runs: the wrapped blocks, or, for an unwrapped model planned with checkpointing, the blocks
    ``apply_activation_checkpointing`` would wrap."""
    wrappers = [m for m in model.modules() if isinstance(m, CheckpointedBlock)]
    if wrappers and not activation_checkpointing:
        raise ValueError(
            "model has CheckpointedBlock wrappers but activation_checkpointing=False; "
            "accepted: activation_checkpointing=True for a wrapped model"
        )
    if wrappers:
        return wrappers, [(w.block, w.block) for w in wrappers]
    if activation_checkpointing:
        return wrappers, [(c.get_submodule(group[0]), c.get_submodule(group[-1])) for c, group in _plan_blocks(model)]
    return wrappers, []


@dataclass
class _Recorder:
    """What the forward pass saves for backward (``storage_size`` by storage key, ``excluded`` left out), the
    autograd sequence numbers each checkpointed block's nodes lie between, and each block's input."""

    excluded: set
    block_ranges: list[list[int]]
    storage_size: dict[int, int] = field(default_factory=dict)
    block_inputs: dict[int, set[int]] = field(default_factory=dict)
    keep: list[torch.Tensor] = field(default_factory=list)

    def pack(self, t: torch.Tensor):
        k = _key(t)
        if k is not None and k not in self.excluded:
            self.storage_size[k] = t.untyped_storage().nbytes()
        return t

    def pre_hook(self, i: int):
        def hook(module, args):
            self.block_ranges[i][0] = _seq_now()
            self.block_inputs[i] = {_key(a) for a in args if isinstance(a, torch.Tensor)} - self.excluded
            for a in args:
                if isinstance(a, torch.Tensor) and _key(a) not in self.excluded:
                    self.storage_size.setdefault(_key(a), a.untyped_storage().nbytes())
                    self.keep.append(a)

        return hook

    def post_hook(self, i: int):
        def hook(module, args, out):
            self.block_ranges[i][1] = _seq_now()

        return hook


@contextlib.contextmanager
def _recording(model: nn.Module, blocks: list, wrappers: list, recorder: _Recorder) -> Iterator[None]:
    """The model in training mode, its blocks hooked to ``recorder``, checkpointing off; afterwards the hooks
    are gone, checkpointing on, the buffers (BatchNorm statistics) and the mode as they were."""
    state = {
        k: v.detach().clone()
        for k, v in model.state_dict(keep_vars=True).items()
        if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter)
    }
    handles = []
    for i, (first, last) in enumerate(blocks):
        handles.append(first.register_forward_pre_hook(recorder.pre_hook(i)))
        handles.append(last.register_forward_hook(recorder.post_hook(i)))
    for w in wrappers:
        w.checkpointing = False
    was_training = model.training
    model.train()
    try:
        yield
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


@dataclass(frozen=True)
class _Pass:
    """What one recorded forward pass and its simulated backward pass found, in bytes."""

    fwd_live: int
    fwd_peak: int
    out_bytes: int
    saved_total: int
    bwd_peak: int
    acts_start: int
    bwd_parts: dict[str, int]


def _record_step(
    model: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    target: torch.Tensor | None,
    loss_fn: Callable,
    blocks: list,
    wrappers: list,
    run_precision: str,
    device: torch.device,
) -> _Pass:
    """Run ONE forward pass under ``run_precision``, recording what autograd saves, then simulate the backward."""
    excluded = {_key(t) for t in list(model.parameters()) + list(model.buffers())} | {_key(t) for t in inputs}
    if target is not None:
        excluded.add(_key(target))
    rec = _Recorder(excluded, [[0, 0] for _ in blocks])
    with (
        _recording(model, blocks, wrappers, rec),
        torch.enable_grad(),
        LiveTensorTracker() as tracker,
        torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t),
    ):
        with autocast(run_precision, device):
            out = model(*inputs)
            loss = loss_fn(out, target)
        fwd_live = tracker.live
        fwd_peak = tracker.peak
        out_bytes = storage_bytes([out, loss])
        saved_total = sum(rec.storage_size.values())
        if loss.grad_fn is None:
            raise ValueError(
                "the loss does not depend on the model's parameters; accepted: a model whose output requires grad"
            )
        bwd_peak, acts_start, bwd_parts = _simulate_backward(
            loss.grad_fn, excluded, rec.storage_size, [tuple(r) for r in rec.block_ranges], rec.block_inputs, out_bytes
        )
        del out, loss, rec.keep[:]
    return _Pass(fwd_live, fwd_peak, out_bytes, saved_total, bwd_peak, acts_start, bwd_parts)


# ----------------------------------------------------------------------------- the estimate


def estimate_training_memory(
    model: nn.Module,
    example_input,
    optimizer: str = "adam",
    precision: str = "fp32",
    activation_checkpointing: bool = False,
    target: torch.Tensor | None = None,
    loss_fn: Callable | None = None,
    foreach: bool | None = None,
) -> MemoryEstimate:
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
    wrappers, blocks = _checkpointed_blocks(model, activation_checkpointing)
    run_precision = "bf16-mixed" if precision == "fp16-mixed" and device.type == "cpu" else precision
    step = _record_step(model, inputs, target, loss_fn or default_loss, blocks, wrappers, run_precision, device)
    batch = storage_bytes([*inputs, target]) if target is not None else storage_bytes(inputs)
    return _estimate(step, storage_bytes(model), params, optimizer, foreach, batch, activation_checkpointing)


def _estimate(
    rec: _Pass,
    p_bytes: int,
    params: list[nn.Parameter],
    optimizer: str,
    foreach: bool,
    batch: int,
    activation_checkpointing: bool,
) -> MemoryEstimate:
    """The three phases of the step from a recorded pass, and the largest of them."""
    g_bytes = sum(p.numel() * p.element_size() for p in params)
    o_bytes, t_bytes = _optimizer_bytes(optimizer, params, foreach)
    persistent = p_bytes + o_bytes + batch
    if activation_checkpointing:
        # the forward keeps block inputs and the tensors saved outside blocks; a block's own
        # temporaries come and go (bounded by what its backward recomputes)
        fwd = persistent + rec.acts_start + rec.out_bytes
        activations = rec.acts_start + rec.out_bytes
    else:
        fwd = persistent + max(rec.fwd_peak, rec.fwd_live)
        activations = min(rec.saved_total, rec.fwd_live) + rec.out_bytes if rec.saved_total else rec.fwd_live
    bwd = persistent + rec.bwd_peak
    step = p_bytes + g_bytes + o_bytes + batch + rec.out_bytes + t_bytes
    phases = {"forward pass": fwd, "backward pass": bwd, "optimizer step": step}
    phase = max(phases, key=phases.get)
    common = [("parameters", p_bytes), ("optimizer state", o_bytes), ("batch", batch)]
    parts = {
        "forward pass": common + [("forward pass tensors", fwd - persistent)],
        "backward pass": common + list(rec.bwd_parts.items()),
        "optimizer step": common
        + [("gradients", g_bytes), ("output and loss", rec.out_bytes), ("step temporaries", t_bytes)],
    }[phase]
    return MemoryEstimate(
        p_bytes,
        g_bytes,
        o_bytes,
        activations,
        batch,
        t_bytes,
        fwd,
        bwd,
        step,
        phases[phase],
        phase,
        tuple((n, b) for n, b in parts if b),
    )


def plausible_bugs(est: MemoryEstimate) -> dict[str, int]:
    """The totals three plausible estimator bugs would report for the step ``est`` describes (notebook 02).

    A claim that judges the estimator must reject each of them: "activations forgotten" (model states,
    optimizer temporaries and the batch only), "optimizer state forgotten", and "model states at 2 bytes per
    value" (weights, gradients and optimizer state counted as bfloat16, a common misreading of mixed precision).
    """
    if not isinstance(est, MemoryEstimate):
        raise TypeError(f"est must be a MemoryEstimate (from estimate_training_memory), got {type(est).__name__}")
    states = dict(est.peak_parts)
    at_peak = sum(b for name, b in states.items() if name in ("parameters", "optimizer state", "gradients"))
    at_peak += states.get("parameter gradients", 0)
    return {
        "activations forgotten": est.parameters + est.gradients + est.optimizer_state + est.batch + est.temporaries,
        "optimizer state forgotten": est.total - est.optimizer_state,
        "model states at 2 bytes per value": est.total - at_peak // 2,
    }
