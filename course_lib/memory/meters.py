"""Measuring a training step's memory: live tensor bytes and the process's resident peak.

* ``measure_peak_memory(fn)``: peak live tensor bytes of one call (a ``LiveTensorTracker`` on the
  CPU, ``torch.cuda.max_memory_allocated`` on a GPU) and the process resident peak.
* ``measure_training_memory(model, x, ...)``: the same over a few real training steps
  (``course_lib.train.train_step``).
* ``measure_allocator_peak(model, x, ...)``: the meter that shares no code with the estimator: the
  allocator's own count of the bytes it handed out (``torch.profiler`` with ``profile_memory=True`` on the
  CPU, ``torch.cuda.max_memory_allocated`` on a GPU), over the same training steps.
* ``memtracker_peak(model, x, ...)``: PyTorch's own ``MemTracker`` (it follows tensors, as the course's
  ``LiveTensorTracker`` does).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from .. import arguments, names
from ..hardware import proc_status_bytes, reset_peak_rss
from ..models import make_optimizer
from ..train import autocast, default_loss, grad_scaler, train_step
from . import torch_internals as ti

_MiB = 2**20


def _check_model(model: nn.Module) -> list[nn.Parameter]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(
            "model has no trainable parameters; accepted: a module with at least one parameter that requires grad"
        )
    return params


def _as_inputs(name: str, example_input) -> tuple[torch.Tensor, ...]:
    inputs = (example_input,) if isinstance(example_input, torch.Tensor) else example_input
    if not isinstance(inputs, (tuple, list)) or not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError(f"{name} must be a tensor or a non-empty tuple of tensors, got {type(example_input).__name__}")
    return tuple(inputs)


_storage = ti.storage
_key = ti.storage_key


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

    Views of one storage count once. The memory lesson counts "what is already live" with it (``demos``,
    ``glibc_heap``).
    """
    seen: dict[int, int] = {}
    if isinstance(tensors, (nn.Module, torch.Tensor)):
        tensors = [tensors]
    for t in _tensors_of(tensors):
        st = _storage(t)
        if st is not None:
            seen[ti.storage_id(st)] = st.nbytes()
    return sum(seen.values())


class LiveTensorTracker(ti.TorchDispatchMode):
    """Counts the bytes of live tensor storages created while it is active (any device).

    Every ATen op's outputs are looked at; a storage not seen before (and not one of the op's
    inputs: in-place ops and views) is added, and a ``weakref.finalize`` on the storage subtracts
    it when it is freed. ``peak`` is the high-water mark of ``live``. Storages created before the
    tracker started are not counted (the caller adds them, see ``measure_peak_memory``), nor are
    scratch buffers a kernel allocates and frees inside one op.
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
        in_keys = {_key(t) for t in ti.flatten((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in ti.flatten(out):
            if not isinstance(t, torch.Tensor):
                continue
            st = _storage(t)
            if st is None:
                continue
            key, n = ti.storage_id(st), st.nbytes()
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
    """Peak memory of one call, from ``measure_peak_memory``.

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
        return (
            f"peak live tensors {self.live_bytes / _MiB:.1f} MiB on {self.device} "
            f"(of which {self.baseline_bytes / _MiB:.1f} MiB live before); process resident peak {rss}"
        )


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


def measure_peak_memory(
    fn: Callable[[], object], include: Iterable = (), device: torch.device | str | None = None
) -> PeakMemory:
    """Run ``fn()`` once and report its peak memory (the meter of :func:`measure_training_memory`).

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


def measure_training_memory(
    model: nn.Module,
    example_input,
    target: torch.Tensor | None = None,
    optimizer: str = "adam",
    precision: str = "fp32",
    steps: int = 3,
    loss_fn: Callable | None = None,
    foreach: bool | None = None,
    micro_batches: int = 1,
) -> PeakMemory:
    """Peak memory of ``steps`` real training steps on one batch (notebook 02, memory).

    Each step is ``course_lib.train.train_step``: forward (under ``torch.autocast`` for the mixed
    precisions) and loss, backward, optimizer step, gradients released. Several steps so the
    optimizer state (created in step 1) is live during later forward and backward passes. The
    model, input and target count as live before the call (``include``). The model's parameters
    are updated. Default loss: ``train.default_loss``. fp16-mixed uses a GradScaler on CUDA only
    (fp16 is very slow on CPUs). ``micro_batches``: each step splits the batch (gradient accumulation, section 7a).
    """
    run, include, device = _training_steps(
        model, example_input, target, optimizer, precision, steps, foreach, loss_fn, micro_batches
    )
    return measure_peak_memory(run, include=include, device=device)


def _plain_bytes(objs: Iterable) -> int:
    """Bytes of the distinct tensors in ``objs`` (modules: parameters and buffers) as numel x element size: the
    allocator meter's count of what was live before, without the estimator's storage bookkeeping."""
    seen: dict[int, int] = {}
    for t in _tensors_of(objs):
        seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def allocator_peak(fn: Callable[[], object], include: Iterable = (), device: torch.device | str = "cpu") -> int | None:
    """Peak bytes the allocator had handed out while ``fn()`` ran, plus the bytes of ``include``.

    CPU: ``torch.profiler.profile(profile_memory=True)`` records every block the CPU allocator hands out and
    takes back; the peak of their running sum is the peak. CUDA: ``torch.cuda.max_memory_allocated`` after
    ``reset_peak_memory_stats``. Neither follows tensors or the autograd graph, so neither shares code with
    the estimator; both also see the scratch buffers a kernel allocates and frees inside one op. Returns None
    where this PyTorch's profiler does not expose its allocation events (other devices, old releases).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable with no arguments, got {type(fn).__name__}")
    device = torch.device(device)
    baseline = _plain_bytes(include if not isinstance(include, (nn.Module, torch.Tensor)) else [include])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return baseline + torch.cuda.max_memory_allocated(device) - start
    if device.type != "cpu":
        return None
    from torch.profiler import ProfilerActivity, profile

    from ..procs import quiet_native_stderr

    with quiet_native_stderr():  # the profiler prints its start and stop lines on the C++ side
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        events = ti.allocation_events(prof)
    if events is None:
        return None
    live = peak = 0
    for _, nbytes, dev in events:
        if dev == "cpu":
            live += nbytes
            peak = max(peak, live)
    return baseline + peak


def allocator_kept(fn: Callable[[], object]) -> int | None:
    """Bytes the CPU allocator handed out while ``fn()`` ran and had not taken back when it returned, with what
    ``fn`` returned still alive: what a forward pass keeps for the backward pass, as
    ``measure_activation_bytes_per_example(..., meter="allocator")`` counts it.

    The net sum of the allocation events ``torch.profiler`` (``profile_memory=True``) recorded: like
    :func:`allocator_peak`, it follows neither tensors nor the autograd graph. None where this PyTorch's
    profiler does not expose its allocation events.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable with no arguments, got {type(fn).__name__}")
    from torch.profiler import ProfilerActivity, profile

    from ..procs import quiet_native_stderr

    with quiet_native_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            result = fn()
        events = ti.allocation_events(prof)
    del result
    if events is None:
        return None
    return sum(nbytes for _, nbytes, dev in events if dev == "cpu")


def measure_allocator_peak(
    model: nn.Module,
    example_input,
    target: torch.Tensor | None = None,
    optimizer: str = "adam",
    precision: str = "fp32",
    steps: int = 2,
    foreach: bool | None = None,
    micro_batches: int = 1,
) -> int | None:
    """The allocator's peak over ``steps`` real training steps (the memory lesson, through
    :func:`estimate_against_allocator`; ``micro_batches``: gradient accumulation, section 7a).

    The same steps as :func:`measure_training_memory` (``train.train_step``, optimizer state made in step
    one), measured by :func:`allocator_peak`: a meter independent of the estimator. The model is updated.
    ``foreach``: the optimizer's implementation, as in ``models.make_optimizer`` (None: torch's default).
    """
    run, include, device = _training_steps(
        model, example_input, target, optimizer, precision, steps, foreach, None, micro_batches
    )
    return allocator_peak(run, include=include, device=device)


def estimate_against_allocator(
    model: nn.Module,
    example_input: torch.Tensor,
    target: torch.Tensor | None = None,
    optimizer: str = "adam",
    precision: str = "fp32",
    checkpointing: bool = False,
    foreach: bool = False,
    steps: int = 2,
):
    """The estimate and the allocator's peak of one configuration, on the model's device (notebook 02, sections
    3 and its GPU check): ``(MemoryEstimate, allocated bytes or None)``; judge them with :func:`estimator_misses`.

    CPU: the profiler's allocation events; CUDA: ``max_memory_allocated``. On CUDA a small linear layer's forward and
    backward run first, so cuBLAS's workspace (kept by the caching allocator from the first product on, not
    modelled by the estimator) is allocated before the meter starts. The estimate is taken first; the model is
    then trained.
    """
    from .estimator import estimate_training_memory

    est = estimate_training_memory(
        model, example_input, optimizer, precision, checkpointing, target=target, foreach=foreach
    )
    device = _check_model(model)[0].device
    if device.type == "cuda":  # pragma: no cover - needs a CUDA GPU
        lin = nn.Linear(64, 64, device=device)  # addmm forward, mm backward: the cuBLAS(Lt) handles and workspaces
        with autocast(precision, device.type):
            out = lin(torch.ones(8, 64, device=device))
        out.float().sum().backward()
        del lin, out
    allocated = measure_allocator_peak(model, example_input, target, optimizer, precision, steps, foreach)
    return est, allocated


def memtracker_peak(
    model: nn.Module,
    example_input: torch.Tensor,
    target: torch.Tensor | None = None,
    optimizer: str = "adam",
    precision: str = "fp32",
    steps: int = 3,
) -> int | None:
    """A second, independent meter: PyTorch's own ``MemTracker`` over the same training steps.

    Returns the peak tracked bytes (parameters,
    gradients, optimizer state, activations, temporaries), or ``None`` where this PyTorch has no
    ``torch.distributed._tools.mem_tracker`` (it is a private, CPU-capable tool).
    """
    tracker_class = ti.mem_tracker_class()
    if tracker_class is None:
        return None
    params = _check_model(model)
    steps = arguments.positive_int("steps", steps)
    precision = names.precision(precision)
    inputs = _as_inputs("example_input", example_input)
    opt = make_optimizer(optimizer, params)
    device = params[0].device
    tracker = tracker_class()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(steps):
            train_step(model, (*inputs, target), opt, None, device, precision=precision)
            tracker.reset_mod_stats()  # MemTracker follows one iteration at a time
    peak = tracker.get_tracker_snapshot("peak")
    return int(sum(v.get("Total", 0) for v in peak.values()))


def measure_activation_bytes_per_example(
    model: nn.Module,
    make_batch: Callable[[int], tuple],
    batch_sizes: tuple[int, int] = (2, 4),
    precision: str = "fp32",
    loss_fn: Callable | None = None,
    meter: str = "live",
) -> float:
    """Measured bytes the forward pass keeps alive per example (the memory lesson's mixed precision section, through
    ``demos.activation_bytes_per_example``).

    Runs one forward pass and loss (under ``torch.autocast`` for the mixed precisions) at each of
    two batch sizes and reads what is still alive afterwards: everything autograd keeps for the
    backward pass, the output and the loss. Live tensor bytes on a CPU (``LiveTensorTracker``),
    ``torch.cuda.memory_allocated`` on a GPU. The difference between the two sizes, divided by
    the difference in examples, is the cost of one more example; what does not grow with the batch
    (autocast's 16-bit weight copies) cancels. Small batches are enough, which keeps bf16 cheap on
    a CPU that emulates it. ``make_batch(n)`` returns ``(inputs, target)`` with ``n`` examples.
    ``meter="allocator"`` counts on a CPU what the allocator handed out and still holds after the forward
    (:func:`allocator_kept`) instead: it follows no tensors, so it shares no code with the estimator.
    """
    if meter not in ("live", "allocator"):
        raise ValueError(f"meter must be 'live' or 'allocator', got {meter!r}")
    _check_model(model)
    precision = names.precision(precision)
    if not callable(make_batch):
        raise TypeError(f"make_batch must be a function of the batch size, got {type(make_batch).__name__}")
    sizes = arguments.int_list("batch_sizes", batch_sizes)
    if len(sizes) != 2 or sizes[0] >= sizes[1]:
        raise ValueError(f"batch_sizes must be two increasing batch sizes, e.g. (2, 4); got {batch_sizes!r}")
    b0, b1 = sizes
    device = next(model.parameters()).device
    loss_fn = loss_fn or default_loss
    kept = []
    for b in (b0, b1):
        x, y = make_batch(b)
        x, y = x.to(device), y.to(device)
        with torch.enable_grad():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                start = torch.cuda.memory_allocated(device)
                with autocast(precision, device):
                    loss = loss_fn(model(x), y)
                kept.append(torch.cuda.memory_allocated(device) - start)
            elif meter == "allocator":

                def forward(x=x, y=y):
                    with autocast(precision, device):
                        return loss_fn(model(x), y)

                net = allocator_kept(forward)
                if net is None:
                    raise RuntimeError("this PyTorch's profiler reports no allocation events; use meter='live'")
                kept.append(net)
                loss = None
            else:
                with LiveTensorTracker() as tracker:
                    with autocast(precision, device):
                        loss = loss_fn(model(x), y)
                kept.append(tracker.live)
        del loss
    return (kept[1] - kept[0]) / (b1 - b0)


def estimator_misses(pairs, bound: float | None = None) -> tuple[float, str, float, dict[str, float]]:
    """How far estimates land from the allocator's peaks: ``pairs`` is ``[(MemoryEstimate, allocated bytes)]``.
    Returns the worst miss of the estimates in percent, the name of the closest wrong estimate
    (``estimator.plausible_bugs``), its worst miss in percent, and every wrong estimate's worst miss. With
    ``bound`` (percent), the closest wrong estimate is the closest that misses by more than the bound: the one a
    claim with that bound rejects (where none does, the closest of all, which such a claim then refuses)."""
    from .estimator import plausible_bugs

    pairs = list(pairs)
    if not pairs:
        raise ValueError("pairs is empty: give at least one (estimate, allocated bytes) pair")
    if any(not isinstance(a, (int, float)) or isinstance(a, bool) or a <= 0 for _, a in pairs):
        raise ValueError("every allocated byte count must be a positive number")
    if bound is not None:
        bound = arguments.positive("bound", bound)
    worst = 100 * max(abs(e.total / a - 1) for e, a in pairs)
    names = plausible_bugs(pairs[0][0])
    bugs = {b: 100 * max(abs(plausible_bugs(e)[b] / a - 1) for e, a in pairs) for b in names}
    rejected = [b for b in bugs if bound is None or bugs[b] > bound] or list(bugs)
    closest = min(rejected, key=bugs.get)
    return worst, closest, bugs[closest], bugs


def _training_steps(model, example_input, target, optimizer, precision, steps, foreach, loss_fn, micro_batches=1):
    """``steps`` real training steps as a function to meter (``train.train_step``; optimizer state made in step one),
    what counts as live before them, and the device."""
    params = _check_model(model)
    precision = names.precision(precision)
    inputs = _as_inputs("example_input", example_input)
    steps = arguments.positive_int("steps", steps)
    micro_batches = arguments.positive_int("micro_batches", micro_batches)
    device = params[0].device
    opt = make_optimizer(optimizer, params, foreach=foreach)
    scaler = grad_scaler(precision, device)
    model.train()

    def run() -> None:
        for _ in range(steps):
            train_step(
                model, (*inputs, target), opt, loss_fn, device, micro_batches, precision=precision, scaler=scaler
            )

    return run, [model, *inputs, target], device
