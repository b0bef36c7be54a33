"""Counting what a rank hands to the collectives: :class:`CollectiveCounter`, the measurement that
``comm.aggregation`` sets beside the formulas of ``comm.aggregation_bytes``."""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist


class CollectiveCounter:
    """Count the bytes this process hands to ``dist.all_reduce`` and ``dist.all_gather`` while active.
    The measurement set next to :func:`bytes_per_step`.

    A context manager that wraps ``torch.distributed.all_reduce``, ``all_gather`` and
    ``all_gather_into_tensor`` (torch's DDP hooks and the model averager call them through the
    ``torch.distributed`` module, so they are seen, also from the callbacks PowerSGD chains on its
    futures) and restores them on exit. For each call it adds ``numel * element_size`` of the tensor
    this rank contributes (the all-gather's input, not its gathered output) to ``bytes`` and to
    ``by_op[op]``, and counts the call in ``calls``. Payload per rank, not wire bytes (see
    :func:`wire_factor`). DDP's one-time broadcast of the initial weights is not counted.
    """

    _OPS = {"all_reduce": 0, "all_gather": 1, "all_gather_into_tensor": 1}  # which argument is the payload

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0
        self.by_op: dict[str, int] = {}
        self._lock = threading.Lock()
        self._saved: dict[str, Any] = {}

    def _add(self, op: str, tensor: torch.Tensor) -> None:
        n = tensor.numel() * tensor.element_size()
        with self._lock:
            self.bytes += n
            self.calls += 1
            self.by_op[op] = self.by_op.get(op, 0) + n

    def _wrap(self, op: str, original: Any, position: int) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            tensor = args[position] if len(args) > position else kwargs.get("tensor", kwargs.get("input_tensor"))
            if isinstance(tensor, torch.Tensor):
                self._add(op, tensor)
            return original(*args, **kwargs)

        counted.__wrapped__ = original  # type: ignore[attr-defined]
        return counted

    def __enter__(self) -> CollectiveCounter:
        for op, position in self._OPS.items():
            self._saved[op] = getattr(dist, op)
            setattr(dist, op, self._wrap(op, self._saved[op], position))
        return self

    def __exit__(self, *exc: Any) -> None:
        for op, original in self._saved.items():
            setattr(dist, op, original)
        self._saved.clear()
