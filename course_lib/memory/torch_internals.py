"""The private PyTorch APIs the course relies on, behind one adapter (notebook 02).

The estimator follows tensors and the autograd graph more closely than PyTorch's public API
allows, so it uses a few internals; a few other parts of the course need one where PyTorch has no
public way. They all go through this module; nothing else in ``course_lib`` touches them:

=========================================  ===================================================
``torch.utils._python_dispatch``            ``TorchDispatchMode``: see every op's outputs
``torch.utils._pytree.tree_flatten``        the tensors inside an op's nested arguments
``UntypedStorage._cdata``                   one identity per storage (views share it)
``Node._sequence_nr()``                     the order autograd's engine runs backward nodes in
``Node._input_metadata``                    shape and dtype of the gradients a node receives
``Node._saved_*``                           the tensors a node saved for backward
``torch.distributed._tools.mem_tracker``    PyTorch's own memory tracker (a second meter)
``kineto_results.experimental_event_tree``  the allocator's own allocation events under ``torch.profiler``
``GradScaler`` state ``_growth_tracker``    its count of clean steps (``checks.gradscaler_step``)
=========================================  ===================================================

The course supports torch ``SUPPORTED_TORCH`` (the README says which releases the tests ran on). :func:`missing` lists
the internals this PyTorch lacks; :func:`require` raises a ``RuntimeError`` naming them, the torch
version and the supported range, so a new PyTorch release that moves one breaks with a clear
message instead of a confusing traceback deep in the estimator.
"""

from __future__ import annotations

import math
from typing import Any

import torch

SUPPORTED_TORCH = ">=2.6"

try:
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # pragma: no cover - a torch that moved it: the estimator reports it via require()

    class TorchDispatchMode:  # type: ignore[no-redef]
        def __enter__(self):
            require()

        def __exit__(self, *exc):
            return False


try:
    from torch.utils._pytree import tree_flatten as _tree_flatten
except ImportError:  # pragma: no cover
    _tree_flatten = None


def flatten(tree: Any) -> list:
    """Every leaf of a nested structure of lists, tuples and dicts (an op's arguments)."""
    return _tree_flatten(tree)[0]


def storage(t: torch.Tensor):
    """The storage behind a tensor, or None for meta and sparse tensors."""
    try:
        if t.device.type == "meta" or t.is_sparse:
            return None
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def storage_key(t: torch.Tensor) -> int | None:
    """An identity shared by all views of one storage (None where there is no storage)."""
    st = storage(t)
    return None if st is None else st._cdata


def storage_id(st) -> int:
    """The identity of a storage object (as ``storage_key`` of its tensors)."""
    return st._cdata


def sequence_nr(node) -> int:
    """The order number autograd gave a backward node (higher runs earlier in backward)."""
    return node._sequence_nr()


def next_sequence_nr() -> int:
    """The sequence number the next autograd node will get (a throw-away node reads it)."""
    with torch.enable_grad():
        return sequence_nr((torch.zeros((), requires_grad=True) * 1).grad_fn)


def input_bytes(node, nr: int) -> int:
    """Bytes of the gradient that input ``nr`` of a backward node receives (0 if unknown)."""
    meta = node._input_metadata
    if nr >= len(meta):
        return 0
    try:
        return math.prod(meta[nr].shape) * torch.empty((), dtype=meta[nr].dtype).element_size()
    except (TypeError, RuntimeError):
        return 0


def saved_tensors(node) -> list[torch.Tensor]:
    """The tensors a backward node saved (unpacking them: only safe without checkpoint hooks)."""
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


def allocation_events(prof) -> list[tuple[int, int, str]] | None:
    """Every allocation and free a finished ``torch.profiler.profile(profile_memory=True)`` saw, in time order:
    ``(time ns, bytes: + allocated / - freed, device type)``, as the allocator reported them (the CPU allocator
    and CUDA's caching allocator report each block). None where this PyTorch does not expose them."""
    try:
        from torch._C._profiler import _EventType

        stack = list(prof.profiler.kineto_results.experimental_event_tree())
    except (ImportError, AttributeError, RuntimeError):
        return None
    out = []
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            out.append((int(e.start_time_ns), int(f.alloc_size), str(f.device.type)))
    out.sort(key=lambda ev: ev[0])
    return out


def mem_tracker_class():
    """PyTorch's ``MemTracker`` class, or None where this PyTorch has none."""
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError:
        return None
    return MemTracker


def fsdp_mem_tracker_class():
    """PyTorch's ``FSDPMemTracker`` class (``MemTracker`` for ``fully_shard`` models), or None where this PyTorch
    has none."""
    try:
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    except ImportError:
        return None
    return FSDPMemTracker


#: The key of ``torch.amp.GradScaler.state_dict()`` holding the clean steps since the scale last changed: the
#: scaler has no public getter or setter for that count.
_GROWTH_TRACKER = "_growth_tracker"


def _scaler_with_growth_tracker(scaler) -> dict:
    """``scaler.state_dict()``; RuntimeError naming the internal where this torch's has no clean-step count."""
    state = scaler.state_dict()
    if _GROWTH_TRACKER not in state:
        raise RuntimeError(
            f"torch {torch.__version__}'s GradScaler.state_dict() has no {_GROWTH_TRACKER!r} entry "
            f"(its count of clean steps). The course supports torch {SUPPORTED_TORCH}: update "
            "course_lib/memory/torch_internals.py"
        )
    return state


def growth_tracker(scaler) -> int:
    """How many clean steps in a row a ``torch.amp.GradScaler`` has counted since its scale last changed."""
    return int(_scaler_with_growth_tracker(scaler)[_GROWTH_TRACKER])


def load_scaler_state(
    scaler, *, scale: float, growth_factor: float, backoff_factor: float, growth_interval: int, growth_tracker: int
) -> None:
    """Set a ``torch.amp.GradScaler``'s whole state, its count of clean steps (``growth_tracker``) included."""
    _scaler_with_growth_tracker(scaler)
    scaler.load_state_dict(
        {
            "scale": scale,
            "growth_factor": growth_factor,
            "backoff_factor": backoff_factor,
            "growth_interval": growth_interval,
            _GROWTH_TRACKER: growth_tracker,
        }
    )


def missing() -> list[str]:
    """The internals this PyTorch lacks, by name ([] when every one is there)."""
    out = []
    if not hasattr(TorchDispatchMode, "__torch_dispatch__") and "_python_dispatch" not in getattr(
        TorchDispatchMode, "__module__", ""
    ):
        out.append("torch.utils._python_dispatch.TorchDispatchMode")
    if _tree_flatten is None:
        out.append("torch.utils._pytree.tree_flatten")
    probe = torch.zeros(2, requires_grad=True)
    if not hasattr(probe.untyped_storage(), "_cdata"):
        out.append("UntypedStorage._cdata")
    node = (probe * 2).sum().grad_fn
    for attr in ("_sequence_nr", "_input_metadata", "next_functions", "name"):
        if not hasattr(node, attr):
            out.append(f"autograd Node.{attr}")
    mul = (probe * probe).grad_fn
    if not any(a.startswith("_saved_") for a in dir(mul)):
        out.append("autograd Node._saved_* attributes")
    if mem_tracker_class() is None:
        out.append("torch.distributed._tools.mem_tracker.MemTracker")
    if fsdp_mem_tracker_class() is None:
        out.append("torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker")
    return out


def require(allow_missing_memtracker: bool = True) -> None:
    """Raise a clear RuntimeError if this PyTorch lacks an internal the estimator needs."""
    gone = [m for m in missing() if not (allow_missing_memtracker and "mem_tracker" in m)]
    if gone:
        raise RuntimeError(
            f"course_lib.memory needs PyTorch internals that torch {torch.__version__} does not have: "
            f"{', '.join(gone)}. The course supports torch {SUPPORTED_TORCH} (the README says which releases are "
            "tested); install one of those, or report this with your torch version."
        )


#: Distributed paths that went wrong in the course's tests on a CPU (gloo) with some torch releases (the README's
#: "Tested PyTorch releases"): path -> (releases, what happened there).
_BROKEN_ON_CPU = {
    "fully_shard": (("2.6",), "fully_shard's CPU streams lack record_event"),
    "fully_shard training": (
        ("2.6", "2.7", "2.8"),
        "fully_shard's CPU streams lack record_event (2.6), or two ranks trained to other weights than one process "
        "(2.7, 2.8)",
    ),
    "pipelining": (("2.6", "2.7", "2.9"), "the schedule hung (2.6, 2.7) or gloo aborted on a message size (2.9)"),
}


def require_distributed(path: str, device: torch.device | str = "cpu") -> None:
    """Raise a RuntimeError that says what to install where ``path`` (a key of ``_BROKEN_ON_CPU``) failed in the
    course's tests with this torch release on a CPU. Other devices are not checked (not tested on GPUs)."""
    if path not in _BROKEN_ON_CPU:
        raise ValueError(f"path must be one of {sorted(_BROKEN_ON_CPU)}, got {path!r}")
    if torch.device(device).type != "cpu":
        return
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    releases, what = _BROKEN_ON_CPU[path]
    if release in releases:
        raise RuntimeError(
            f"{path} on a CPU (gloo) does not work with torch {torch.__version__} in this course's tests: {what}. "
            "Install torch 2.10 or newer (pip install -U torch, then restart the kernel) to run this demo."
        )
