"""The backward pass of a training step, replayed over the recorded autograd graph without running it (notebook 02).

``estimator.estimate_training_memory`` records one forward pass and hands the graph to ``simulate_backward``,
which counts the bytes alive node by node: saved tensors, gradients in flight, the parameters' gradients and,
on a CPU, a convolution's backward scratch.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import torch

from . import torch_internals as ti
from .meters import _key

_saved_of = ti.saved_tensors
_GRAD_SINK = "torch::autograd::AccumulateGrad"  # the node that makes a gradient a parameter's .grad

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
        conv_scratch: bool = False,
        accumulating: bool = False,
    ) -> None:
        self.nodes, self.deps, self.held = nodes, deps, held
        self.accumulating = accumulating  # every .grad exists already: a new gradient is added in and freed
        self.storage_size, self.block_inputs, self.start_bytes = storage_size, block_inputs, start_bytes
        self.conv_scratch = conv_scratch
        self.live_keys = {k for k in held.holders if not isinstance(k, tuple)}
        self.live = start_bytes + sum(self._nbytes(k) for k in self.live_keys)
        self.acts_at_start = self.live - start_bytes
        self.acts_live = self.live  # saved tensors, output and loss: the live bytes that are not gradients
        self.peak = self.live
        self.peak_parts = {"activations still held": self.live, "parameter gradients": 0, "activation gradients": 0}
        self.peak_without_act_grads = self.live  # what an estimator that forgets activation gradients would see
        self.leaf_kept = 0  # gradient bytes that reached a parameter (they stay as .grad)
        self.sink_pending = 0  # gradient bytes on their way to a parameter (queued for AccumulateGrad)
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
            self.acts_live -= self._nbytes(k)

    def run(self, root) -> tuple[int, int, dict[str, int], int]:
        self.buffers = {id(root): {0: [0, [1]]}}
        self.ready = [(-ti.sequence_nr(root), 0, id(root))]
        self.counter = 1
        while self.ready:
            _, _, nid = heapq.heappop(self.ready)
            self._run_node(nid)
        return self.peak, self.acts_at_start, self.peak_parts, self.peak_without_act_grads

    def _scratch(self, n, inbuf: dict[int, list]) -> int:
        """Bytes a node's kernel allocates and frees inside the op. Modelled for one kernel, measured in notebook
        02: a convolution's backward on a CPU (oneDNN) copies its incoming gradient, its saved input and its
        weights into oneDNN's blocked memory layout before computing, and frees the copies before returning."""
        if not self.conv_scratch or n.name() != "ConvolutionBackward0":
            return 0
        saved = {id(t): t for t in _saved_of(n) if isinstance(t, torch.Tensor)}
        return sum(buf[0] for buf in inbuf.values()) + sum(t.numel() * t.element_size() for t in saved.values())

    def _run_node(self, nid: int) -> None:
        n = self.nodes[nid]
        b = self.held.node_block.get(nid)
        if b is not None and b not in self.materialized:
            self.materialized.add(b)  # recomputation: the block's saved tensors come back at once
            for k in self.held.virtual.get(b, ()):
                self.live_keys.add(k)
                self.live += self._nbytes(k)
                self.acts_live += self._nbytes(k)
        inbuf = self.buffers.pop(nid, {})
        new_alloc, transient = self._send(n, inbuf)
        self.live += new_alloc
        scratch = self._scratch(n, inbuf)
        if self.live + transient + scratch > self.peak:
            self._new_peak(self.live + transient + scratch, scratch)
        self.peak_without_act_grads = max(
            self.peak_without_act_grads, self.acts_live + self.leaf_kept + self.sink_pending + scratch
        )
        if n.name() == _GRAD_SINK and not self.accumulating:  # a gradient reaching AccumulateGrad becomes .grad
            for buf in inbuf.values():
                self.leaf_kept += buf[0]
                if len(buf) == 3 and buf[2]:
                    buf[2] = False
                    self.sink_pending -= buf[0]
        else:  # used up; when accumulating, a parameter's new gradient is added into its .grad, then freed
            for buf in inbuf.values():
                if n.name() == _GRAD_SINK and len(buf) == 3 and buf[2]:
                    buf[2] = False
                    self.sink_pending -= buf[0]
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
            if nxt.name() == _GRAD_SINK and nr in slots and slots[nr][0] == size and len(slots[nr]) == 2:
                slots[nr].append(True)  # counted once as a parameter's gradient on its way
                self.sink_pending += size
            self.deps[id(nxt)] -= 1
            if self.deps[id(nxt)] == 0:
                heapq.heappush(
                    self.ready, (-ti.sequence_nr(nxt) if nxt.name() != _GRAD_SINK else -(2**63), self.counter, id(nxt))
                )
                self.counter += 1
        return new_alloc, transient

    def _new_peak(self, peak: int, scratch: int = 0) -> None:
        self.peak = peak
        acts = self.start_bytes + sum(self._nbytes(k) for k in self.live_keys)
        seen: set[int] = set()
        param_grads = self.leaf_kept
        for target_id, slots in self.buffers.items():
            if _heads_to_parameter(self.nodes[target_id]):
                for buf in slots.values():
                    if id(buf) not in seen:
                        seen.add(id(buf))
                        param_grads += buf[0]
        self.peak_parts = {
            "activations still held": acts,
            "parameter gradients": param_grads,
            "activation gradients": peak - acts - param_grads - scratch,
            "kernel scratch": scratch,
        }


def _heads_to_parameter(node, depth: int = 4) -> bool:
    """Whether a gradient sent to ``node`` becomes a parameter's gradient: ``node`` is AccumulateGrad, or passes its
    gradient through (a transpose, a view) to nothing but AccumulateGrad, as a linear layer's weight gradient does."""
    if node.name() == _GRAD_SINK:
        return True
    nexts = [nxt for nxt, _ in node.next_functions if nxt is not None]
    return (
        depth > 0
        and node.name() in _PASS_THROUGH
        and bool(nexts)
        and all(_heads_to_parameter(nxt, depth - 1) for nxt in nexts)
    )


def _simulate_backward(
    root,
    excluded: set[int],
    storage_size: dict[int, int],
    block_ranges: list[tuple[int, int]],
    block_inputs: dict[int, set[int]],
    start_bytes: int,
    conv_scratch: bool = False,
    accumulating: bool = False,
) -> tuple[int, int, dict[str, int], int]:
    """Simulate the backward pass over the autograd graph from ``root``.

    Returns (peak bytes of activations + gradients in flight + accumulated gradients + kernel scratch,
    bytes of activations live when backward starts, those peak bytes split into "activations
    still held", "parameter gradients", "activation gradients" and "kernel scratch", and the peak an
    estimator that forgot the activation gradients would find). Parameters, optimizer state and batch are
    added by the caller. ``start_bytes`` is what the forward left live besides saved tensors
    (the output and the loss). ``block_ranges``: the sequence numbers of the graph nodes each
    checkpointed block created (empty without checkpointing); a block's saved tensors other
    than its input are recomputed copies that appear when the block's first node runs. ``conv_scratch``:
    add the scratch of a CPU convolution's backward (``_Backward._scratch``). ``accumulating``: every parameter
    already has a ``.grad`` (a later micro-batch of gradient accumulation), so a gradient reaching a parameter is
    a temporary, added in place and freed; "parameter gradients" then counts those in flight.
    """
    nodes, deps = _graph(root)
    held = _held_tensors(nodes, excluded, storage_size, block_ranges, block_inputs)
    return _Backward(nodes, deps, held, storage_size, block_inputs, start_bytes, conv_scratch, accumulating).run(root)
