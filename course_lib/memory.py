"""Where the memory of a training step goes: estimates next to measurements.

Used by notebook 02 (memory). Three kinds of helper live here:

* **Estimating one model's training step** without training it:
  ``estimate_training_memory(model, x, optimizer="adam", precision="bf16-mixed")`` runs ONE
  forward pass (no backward, no optimizer step), records what autograd saves for backward, walks
  the autograd graph to simulate the backward pass, and adds the optimizer's state and
  temporaries. ``apply_activation_checkpointing(model)`` wraps the model's blocks in
  ``torch.utils.checkpoint`` so the estimate and the measurement see the same model.
* **Measuring** the same step: ``measure_peak_memory(fn)`` (peak live tensor bytes and the process
  resident peak) and ``measure_training_memory(model, x, ...)`` (a few real training steps).
* **Back-of-the-envelope formulas** for models too big to run here: ``model_states_bytes``
  (ZeRO), ``transformer_activation_bytes`` (Korthikanti et al. 2022),
  ``largest_model_that_fits`` and ``largest_model_per_accelerator``.

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
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .catalog import accelerators
from .hardware import proc_status_bytes, reset_peak_rss
from .models import OPTIMIZERS, make_optimizer

PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed")
_STATE_BUFFERS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
_MiB = 2**20

# Backward nodes that hand their incoming gradient on without allocating a new one
# (the gradient of an add is the incoming gradient; views and transposes return views).
_PASS_THROUGH = ("AddBackward0", "SubBackward0", "ViewBackward0", "UnsafeViewBackward0", "TBackward0",
                 "TransposeBackward0", "TransposeBackward1", "PermuteBackward0", "ReshapeAliasBackward0",
                 "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2", "SqueezeBackward3",
                 "SqueezeBackward4", "UnsqueezeBackward0", "AliasBackward0", "CloneBackward0",
                 "DetachBackward0", "ExpandBackward0", "ViewAsRealBackward0", "UnbindBackward0")


# ----------------------------------------------------------------------------- validation

def _choice(name: str, value: str, accepted: Sequence[str]) -> str:
    if not isinstance(value, str) or value.lower() not in accepted:
        raise ValueError(f"{name} {value!r} is not known; accepted values are {tuple(accepted)}")
    return value.lower()


def _nonneg_int(name: str, value: int, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def _check_model(model: nn.Module) -> list[nn.Parameter]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters; accepted: a module with at least one "
                         "parameter that requires grad")
    return params


def _as_inputs(name: str, example_input) -> tuple[torch.Tensor, ...]:
    inputs = (example_input,) if isinstance(example_input, torch.Tensor) else example_input
    if not isinstance(inputs, (tuple, list)) or not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError(f"{name} must be a tensor or a non-empty tuple of tensors, got {type(example_input).__name__}")
    return tuple(inputs)


# ----------------------------------------------------------------------------- storage helpers

def _storage(t: torch.Tensor):
    try:
        if t.device.type == "meta" or t.is_sparse:
            return None
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def _key(t: torch.Tensor) -> int | None:
    st = _storage(t)
    return None if st is None else st._cdata


def _tensors_of(objs: Iterable) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for o in objs:
        if isinstance(o, nn.Module):
            out += list(o.parameters()) + list(o.buffers())
        elif isinstance(o, torch.Tensor):
            out.append(o)
        elif isinstance(o, (tuple, list)):
            out += _tensors_of(o)
        elif o is not None:
            raise TypeError(f"include must hold modules or tensors, got {type(o).__name__}")
    return out


def storage_bytes(tensors: Iterable) -> int:
    """Bytes of the distinct storages behind ``tensors`` (modules count their parameters and buffers).

    Views of one storage count once. Used by notebook 02 (memory) for "what is already live".
    """
    seen: dict[int, int] = {}
    if isinstance(tensors, (nn.Module, torch.Tensor)):
        tensors = [tensors]
    for t in _tensors_of(tensors):
        st = _storage(t)
        if st is not None:
            seen[st._cdata] = st.nbytes()
    return sum(seen.values())


class LiveTensorTracker(TorchDispatchMode):
    """Counts the bytes of live tensor storages created while it is active (any device).

    Every ATen op's outputs are looked at; a storage not seen before (and not one of the op's
    inputs: in-place ops and views) is added, and a ``weakref.finalize`` on the storage subtracts
    it when it is freed. ``peak`` is the high-water mark of ``live``. Storages created before the
    tracker started are not counted (the caller adds them, see ``measure_peak_memory``), nor are
    scratch buffers a kernel allocates and frees inside one op. Used by notebook 02 (memory).
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}
        self._lock = threading.Lock()

    def _free(self, key: int) -> None:
        with self._lock:
            self.live -= self._sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        in_keys = {_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = _storage(t)
            if st is None:
                continue
            key, n = st._cdata, st.nbytes()
            with self._lock:
                if key in self._sizes:  # already tracked: follow resizes
                    self.live += n - self._sizes[key]
                    self._sizes[key] = n
                elif key not in in_keys and n:
                    self._sizes[key] = n
                    self.live += n
                    weakref.finalize(st, self._free, key)
                self.peak = max(self.peak, self.live)
        return out


# ----------------------------------------------------------------------------- measurement

@dataclass(frozen=True)
class PeakMemory:
    """Peak memory of one call, from ``measure_peak_memory`` (notebook 02, memory).

    ``live_bytes``: peak of live tensor bytes = bytes of the tensors passed as ``include`` (live
    before the call) + the peak increment of tensor bytes allocated by the call.
    ``baseline_bytes``: the ``include`` part. ``resident_bytes``: the process's resident-set peak
    during the call (``None`` where it cannot be read); it counts everything in the process
    (the Python interpreter, torch's libraries, the allocator's cache), so it is larger.
    """

    live_bytes: int
    baseline_bytes: int
    resident_bytes: int | None
    device: str
    resident_method: str = ""

    @property
    def increment_bytes(self) -> int:
        """Peak tensor bytes allocated by the call above what was live before it."""
        return self.live_bytes - self.baseline_bytes

    def __str__(self) -> str:
        rss = "n/a" if self.resident_bytes is None else f"{self.resident_bytes / _MiB:.1f} MiB"
        return (f"peak live tensors {self.live_bytes / _MiB:.1f} MiB on {self.device} "
                f"(of which {self.baseline_bytes / _MiB:.1f} MiB live before); process resident peak {rss}")


@contextlib.contextmanager
def _resident_peak():
    """Yields a dict that gets 'bytes' and 'method' on exit.

    Linux: write 5 to /proc/self/clear_refs (resets the high-water mark), read VmHWM after.
    Elsewhere: sample psutil's rss every millisecond in a thread (misses shorter spikes), or None.
    """
    result: dict = {"bytes": None, "method": "unavailable"}
    if reset_peak_rss() and proc_status_bytes("VmHWM") is not None:
        yield result
        result.update(bytes=proc_status_bytes("VmHWM"), method="VmHWM")
        return
    try:
        import psutil
    except ImportError:
        yield result
        return
    proc, stop, peak = psutil.Process(), threading.Event(), [0]

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        peak[0] = max(peak[0], proc.memory_info().rss)
        result.update(bytes=peak[0], method="psutil rss sampled every 1 ms")


def measure_peak_memory(fn: Callable[[], object], include: Iterable = (),
                        device: torch.device | str | None = None) -> PeakMemory:
    """Run ``fn()`` once and report its peak memory (notebook 02, memory: measuring).

    ``live_bytes`` is the peak of live tensor bytes: the storages of ``include`` (modules and
    tensors that exist before the call and belong to the job, e.g. the model and the batch;
    counted once each) plus the peak increment allocated while ``fn`` runs. This is the number an
    estimate's ``total`` is compared with.

    * CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus what was
      allocated at the start (sees kernel workspaces too; block sizes rounded up to 512 B).
    * CPU and other devices: a ``LiveTensorTracker`` (a TorchDispatchMode that follows every
      storage an op creates until it is freed). ``tracemalloc`` cannot see torch's allocations.

    ``resident_bytes`` is the process resident peak (Linux VmHWM after resetting it through
    /proc/self/clear_refs; elsewhere psutil's rss sampled every 1 ms, or None without psutil).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable with no arguments, got {type(fn).__name__}")
    tensors = _tensors_of(include if not isinstance(include, (nn.Module, torch.Tensor)) else [include])
    baseline = storage_bytes(tensors)
    if device is None:
        device = tensors[0].device if tensors else torch.device("cpu")
    device = torch.device(device)
    with _resident_peak() as rss:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            fn()
            torch.cuda.synchronize(device)
            increment = torch.cuda.max_memory_allocated(device) - start
        else:
            with LiveTensorTracker() as tracker:
                fn()
            increment = tracker.peak
    return PeakMemory(baseline + max(increment, 0), baseline, rss["bytes"], str(device), rss["method"])


def _autocast(precision: str, device: torch.device):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def _default_loss(out: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    if target is not None:
        if target.dtype.is_floating_point:
            return nn.functional.mse_loss(out.float(), target)
        return nn.functional.cross_entropy(out, target)
    return out.float().sum()


def measure_training_memory(model: nn.Module, example_input, target: torch.Tensor | None = None,
                            optimizer: str = "adam", precision: str = "fp32", steps: int = 3,
                            loss_fn: Callable | None = None, foreach: bool | None = None) -> PeakMemory:
    """Peak memory of ``steps`` real training steps on one batch (notebook 02, memory).

    Each step: forward (under ``torch.autocast`` for the mixed precisions) and loss, backward,
    ``optimizer.step()``, ``zero_grad(set_to_none=True)``. Several steps so the optimizer state
    (created in step 1) is live during later forward and backward passes. The model, input and
    target count as live before the call (``include``). The model's parameters are updated.
    Default loss: cross-entropy for an integer target, MSE for a float target, the output's sum
    without a target. fp16-mixed uses a GradScaler on CUDA only (fp16 is very slow on CPUs).
    """
    params = _check_model(model)
    precision = _choice("precision", precision, PRECISIONS)
    inputs = _as_inputs("example_input", example_input)
    _nonneg_int("steps", steps, 1)
    device = params[0].device
    opt = make_optimizer(optimizer, params, foreach=foreach)
    loss_fn = loss_fn or _default_loss
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16-mixed" and device.type == "cuda" else None
    model.train()

    def run() -> None:
        for _ in range(steps):
            with _autocast(precision, device):
                out = model(*inputs)
                loss = loss_fn(out, target) if target is not None or loss_fn is not _default_loss else loss_fn(out, None)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            opt.zero_grad(set_to_none=True)

    return measure_peak_memory(run, include=[model, *inputs, target], device=device)


# ----------------------------------------------------------------------------- checkpointing

class CheckpointedBlock(nn.Module):
    """Runs ``block`` under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``.

    Only the block's input is kept for backward; its inside is recomputed during backward.
    Notebook 02 (memory: activation checkpointing).
    """

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.checkpointing = True  # the estimator switches it off to look inside the block

    def forward(self, *args, **kwargs):
        if self.checkpointing and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(self.block, *args, use_reentrant=False, **kwargs)
        return self.block(*args, **kwargs)

    def __getattr__(self, name: str):
        # containers look inside their layers (nn.TransformerEncoder reads layers[0].self_attn)
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "block":
                raise
            return getattr(self.block, name)


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _sequential_groups(seq: nn.Sequential) -> list[list[str]]:
    """A layer with parameters plus the parameter-free layers after it, as lists of child names."""
    groups: list[list[str]] = []
    for name, child in seq.named_children():
        if _has_params(child) or not groups:
            groups.append([name])
        else:
            groups[-1].append(name)
    return groups


def _plan_blocks(model: nn.Module) -> list[tuple[nn.Module, list[str]]]:
    """The blocks ``apply_activation_checkpointing`` wraps: (container, child names) pairs."""
    plan: list[tuple[nn.Module, list[str]]] = []

    def visit(m: nn.Module) -> None:
        if isinstance(m, nn.TransformerEncoder):
            plan.extend((m.layers, [name]) for name, _ in m.layers.named_children())
        elif isinstance(m, nn.Sequential):
            plan.extend((m, g) for g in _sequential_groups(m)
                        if any(_has_params(m._modules[n]) for n in g))
        else:
            for child in m.children():
                visit(child)

    visit(model)
    return plan


def apply_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Wrap the model's blocks in ``CheckpointedBlock`` (in place) and return the model.

    What a "block" is, for the course's models (notebook 02, memory: activation checkpointing):

    * ``nn.TransformerEncoder``: each encoder layer (TinyTransformer);
    * ``nn.Sequential``: each layer that has parameters together with the parameter-free layers
      that follow it (MLP: Linear+ReLU; SmallCNN: Conv+BatchNorm+ReLU+MaxPool);
    * any other module: its children are visited; modules with parameters that are not in a
      Sequential or an encoder (an embedding, a classifier head) are left alone.

    Caveat: a recomputed block runs its forward twice, so BatchNorm running statistics are
    updated twice per step (training is unaffected; the running averages move faster).
    Parameter names change (``0.block.weight``): save the ``state_dict`` of an unwrapped model.
    """
    _check_model(model)
    if any(isinstance(m, CheckpointedBlock) for m in model.modules()):
        raise ValueError("model already has CheckpointedBlock wrappers; accepted: a model not yet wrapped")
    plan = _plan_blocks(model)
    by_container: dict[int, tuple[nn.Module, list[list[str]]]] = {}
    for container, names in plan:
        by_container.setdefault(id(container), (container, []))[1].append(names)
    for container, groups in by_container.values():
        if isinstance(container, nn.Sequential):
            wrapped = {g[0]: g for g in groups}
            children = list(container.named_children())
            for name, _ in children:
                del container._modules[name]
            skip: set[str] = set()
            i = 0
            for name, child in children:
                if name in skip:
                    continue
                if name in wrapped:
                    g = wrapped[name]
                    skip.update(g)
                    mods = [dict(children)[n] for n in g]
                    child = CheckpointedBlock(mods[0] if len(mods) == 1 else nn.Sequential(*mods))
                container.add_module(str(i), child)
                i += 1
        else:
            for (name,) in groups:
                container._modules[name] = CheckpointedBlock(container._modules[name])
    return model


# ----------------------------------------------------------------------------- the estimate

@dataclass(frozen=True)
class MemoryEstimate:
    """The estimated memory of one training step, in bytes (notebook 02, memory).

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

    def table(self) -> str:
        """The components and phase peaks in MiB, one per line."""
        lines = [f"{f.name:<16} {getattr(self, f.name) / _MiB:10.2f} MiB"
                 for f in fields(self) if f.name not in ("total", "peak_phase")]
        lines.append(f"{'total':<16} {self.total / _MiB:10.2f} MiB  (peak during the {self.peak_phase})")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _saved_of(node) -> list[torch.Tensor]:
    """The tensors an autograd node saved (unpacking them: only safe without checkpoint hooks)."""
    out: list[torch.Tensor] = []
    names = [a for a in dir(node) if a.startswith("_saved_")]
    if hasattr(node, "saved_tensors"):
        names.append("saved_tensors")
    for name in names:
        try:
            val = getattr(node, name)
        except RuntimeError:
            continue
        if isinstance(val, torch.Tensor):
            out.append(val)
        elif isinstance(val, (tuple, list)):
            out += [v for v in val if isinstance(v, torch.Tensor)]
    return out


def _meta_bytes(meta) -> int:
    try:
        return math.prod(meta.shape) * torch.empty((), dtype=meta.dtype).element_size()
    except (TypeError, RuntimeError):
        return 0


def _seq_now() -> int:
    """The autograd sequence number the next graph node will get (a throw-away node reads it)."""
    with torch.enable_grad():
        return (torch.zeros((), requires_grad=True) * 1).grad_fn._sequence_nr()


def _simulate_backward(root, excluded: set[int], storage_size: dict[int, int],
                       block_ranges: list[tuple[int, int]], block_inputs: dict[int, set[int]],
                       start_bytes: int) -> tuple[int, int]:
    """Simulate the backward pass over the autograd graph from ``root``.

    Returns (peak bytes of activations + gradients in flight + accumulated gradients,
    bytes of activations live when backward starts). Parameters, optimizer state and batch are
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
        seq = n._sequence_nr()
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
    materialized: set[int] = set()

    def release(k) -> None:
        nonlocal live
        holders[k] -= 1
        if holders[k] == 0 and k in live_keys:
            live_keys.discard(k)
            live -= nbytes_of(k)

    # gradient buffers: node id -> {input_nr: [bytes, refs-box]}
    buffers: dict[int, dict[int, list]] = {id(root): {0: [0, [1]]}}
    ready = [(-root._sequence_nr(), 0, id(root))]
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
            size = _meta_bytes(nxt._input_metadata[nr]) if nr < len(nxt._input_metadata) else 0
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
                heapq.heappush(ready, (-nxt._sequence_nr() if nxt.name() != "torch::autograd::AccumulateGrad"
                                       else -2**63, counter, id(nxt)))
                counter += 1
        live += new_alloc
        peak = max(peak, live + transient)
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
    return peak, acts_at_start


def _optimizer_bytes(optimizer: str, params: list[nn.Parameter], foreach: bool) -> tuple[int, int]:
    """(state bytes, step temporaries bytes) for the torch optimizers of ``make_optimizer``."""
    sizes = [p.numel() * p.element_size() for p in params]
    total = sum(sizes)
    state = _STATE_BUFFERS[optimizer] * total
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
    params = _check_model(model)
    optimizer = _choice("optimizer", optimizer, OPTIMIZERS)
    precision = _choice("precision", precision, PRECISIONS)
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
    loss_fn = loss_fn or _default_loss
    try:
        with torch.enable_grad(), LiveTensorTracker() as tracker, \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with _autocast(run_precision, device):
                out = model(*inputs)
                loss = loss_fn(out, target)
            fwd_live = tracker.live
            fwd_peak = tracker.peak
            out_bytes = storage_bytes([out, loss])
            saved_total = sum(storage_size.values())
            if loss.grad_fn is None:
                raise ValueError("the loss does not depend on the model's parameters; accepted: a model "
                                 "whose output requires grad")
            bwd_peak, acts_start = _simulate_backward(
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
    if target is None and loss_fn is _default_loss:
        pass
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
    return MemoryEstimate(p_bytes, g_bytes, o_bytes, activations, batch, t_bytes, fwd, bwd, step,
                          phases[phase], phase)



# ----------------------------------------------------------------------------- formulas

def _bytes_per_param(precision: str, optimizer: str) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes per parameter; see ``model_states_bytes``."""
    buffers = _STATE_BUFFERS[optimizer]
    if precision == "fp32":
        return 4, 4, 4 * buffers
    return 2, 2, 4 + 4 * buffers  # 16-bit weights and grads; fp32 master weights + fp32 states


def model_states_bytes(n_params: int, precision: str = "fp32", optimizer: str = "adam", zero_stage: int = 0,
                       data_parallel: int = 1) -> int:
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
    _nonneg_int("n_params", n_params)
    precision = _choice("precision", precision, PRECISIONS)
    optimizer = _choice("optimizer", optimizer, OPTIMIZERS)
    if isinstance(zero_stage, bool) or zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be one of (0, 1, 2, 3), got {zero_stage!r}")
    _nonneg_int("data_parallel", data_parallel, 1)
    w, g, o = (n_params * b for b in _bytes_per_param(precision, optimizer))

    def split(x: int, stage: int) -> int:
        return -(-x // data_parallel) if zero_stage >= stage else x

    return split(w, 3) + split(g, 2) + split(o, 1)


def transformer_activation_bytes(seq_len: int, batch: int, d_model: int, n_layers: int, n_heads: int,
                                 bytes_per_value: int = 2) -> int:
    """Activation bytes a transformer saves for backward, by the formula of Korthikanti et al.

    Notebook 02 (memory: activations). Korthikanti et al. 2022, "Reducing Activation Recomputation
    in Large Transformer Models" (arXiv:2205.05198), section 4.1: one layer with 16-bit
    activations saves ``s*b*h*(34 + 5*a*s/h)`` bytes (s sequence length, b batch, h hidden size,
    a attention heads; 34 s*b*h for the linear layers, layer norms, GeLU and 1-byte dropout masks,
    5*a*s^2*b for the attention scores, softmax and its dropout). The result is for ``n_layers``
    layers, scaled by ``bytes_per_value / 2`` for other activation widths (this slightly
    overcounts the 1-byte dropout masks at 4 bytes). Memory-efficient attention kernels (flash
    attention) do not save the s x s scores, which removes most of the 5*a*s/h term.
    """
    for name, v in (("seq_len", seq_len), ("batch", batch), ("d_model", d_model), ("n_layers", n_layers),
                    ("n_heads", n_heads), ("bytes_per_value", bytes_per_value)):
        _nonneg_int(name, v, 1)
    s, b, h, a = seq_len, batch, d_model, n_heads
    per_layer_16bit = s * b * h * 34 + 5 * a * s * s * b
    return per_layer_16bit * n_layers * bytes_per_value // 2


def largest_model_that_fits(memory_bytes: float, precision: str = "bf16-mixed", optimizer: str = "adam",
                            overhead_fraction: float = 0.2) -> int:
    """The most parameters whose model states fit in ``memory_bytes`` (no ZeRO, one device).

    Notebook 02 (memory: the largest model that fits). ``overhead_fraction`` of the memory is kept
    for activations, the framework and fragmentation; the rest is divided by the bytes per
    parameter of ``model_states_bytes``.
    """
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, (int, float)) or not memory_bytes >= 0:
        raise ValueError(f"memory_bytes must be a number >= 0, got {memory_bytes!r}")
    if isinstance(overhead_fraction, bool) or not isinstance(overhead_fraction, (int, float)) \
            or not 0 <= overhead_fraction < 1:
        raise ValueError(f"overhead_fraction must be in [0, 1), got {overhead_fraction!r}")
    per_param = sum(_bytes_per_param(_choice("precision", precision, PRECISIONS),
                                     _choice("optimizer", optimizer, OPTIMIZERS)))
    return int(memory_bytes * (1 - overhead_fraction) // per_param)


def largest_model_per_accelerator(precision: str = "bf16-mixed", optimizer: str = "adam",
                                  overhead_fraction: float = 0.2,
                                  kind: str | None = None) -> list[tuple[str, str, float, int]]:
    """(key, name, memory_gb, max_params) for every accelerator in ``course_lib.catalog``.

    Notebook 02 (memory: the largest model that fits). ``memory_gb`` is read as 1e9 bytes (the
    catalog keeps the vendor's unit; see its notes). ``kind``: None, "gpu" or "tpu".
    """
    return [(a.key, a.name, a.memory_gb,
             largest_model_that_fits(a.memory_gb * 1e9, precision, optimizer, overhead_fraction))
            for a in accelerators(kind)]


def memtracker_peak(model: nn.Module, example_input: torch.Tensor, target: torch.Tensor | None = None,
                    optimizer: str = "adam", precision: str = "fp32", steps: int = 3) -> int | None:
    """A second, independent meter: PyTorch's own ``MemTracker`` over the same training steps.

    Notebook 02 (memory: estimate vs measurement). Returns the peak tracked bytes (parameters,
    gradients, optimizer state, activations, temporaries), or ``None`` where this PyTorch has no
    ``torch.distributed._tools.mem_tracker`` (it is a private, CPU-capable tool).
    """
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError:
        return None
    params = _check_model(model)
    _nonneg_int("steps", steps, 1)
    precision = _choice("precision", precision, PRECISIONS)
    opt = make_optimizer(optimizer, params)
    device = params[0].device
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(steps):
            with _autocast(precision, device):
                loss = _default_loss(model(example_input), target)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            tracker.reset_mod_stats()  # MemTracker follows one iteration at a time
    peak = tracker.get_tracker_snapshot("peak")
    return int(sum(v.get("Total", 0) for v in peak.values()))


def large_model_memory(n_params: float, precision: str = "bf16-mixed", optimizer: str = "adam",
                       zero_stage: int = 0, data_parallel: int = 1, seq_len: int = 2048, batch: int = 1,
                       d_model: int = 4096, n_layers: int = 32, n_heads: int = 32) -> dict[str, int]:
    """Per-device bytes for training a large transformer: model states (ZeRO) + activations.

    Notebook 02 (memory calculator). Activations follow ``transformer_activation_bytes`` with
    16-bit values for the mixed precisions and 32-bit for fp32; they are per device (each
    data-parallel rank holds the activations of its own micro-batch).
    """
    states = model_states_bytes(int(n_params), precision, optimizer, zero_stage, data_parallel)
    width = 4 if _choice("precision", precision, PRECISIONS) == "fp32" else 2
    acts = transformer_activation_bytes(seq_len, batch, d_model, n_layers, n_heads, width)
    return {"model_states": states, "activations": acts, "total": states + acts}


# The capped-subprocess tools and the streaming dataset live in their own modules; they are
# part of the memory toolkit, so they can be reached from here too (notebook 02).
from .memlimit import LimitedRun, find_max_batch_size, run_with_memory_limit  # noqa: E402,F401
from .streaming import MemmapDataset, StreamingDataset  # noqa: E402,F401
