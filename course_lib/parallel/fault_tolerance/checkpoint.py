"""Checkpoint files: what a checkpoint holds, atomic writes, digest-checked loads, falling back past
corrupt files, the data position (notebook 06.3; notebook 06.4's training script uses them)."""

from __future__ import annotations

import hashlib
import os
import random
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ... import arguments, seeds
from ...files import write_atomic

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "capture_state",
    "restore_state",
    "rng_state",
    "set_rng_state",
    "save_checkpoint",
    "load_checkpoint",
    "load_latest",
    "checkpoint_path",
    "list_checkpoints",
    "ShuffledBatches",
]

_FORMAT = "course_lib.checkpoint/1"
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used (truncated, corrupted, not a checkpoint). The message and
    ``path`` name the file."""

    def __init__(self, message: str, path: str | os.PathLike):
        super().__init__(message)
        self.path = str(path)


class CheckpointWarning(UserWarning):
    """:func:`load_latest` skipped a checkpoint it could not load (the message names the file)."""


# ----------------------------------------------------------------------------------------------
# random number generators, as weights_only-loadable values


def rng_state() -> dict[str, Any]:
    """Every random number generator's state, as tensors and plain numbers (loadable with
    ``weights_only=True``): torch's CPU generator, CUDA's (one per GPU, where present), numpy's legacy
    global generator and Python's ``random``."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(gauss),
        },
        "python": {
            "version": int(version),
            "internal": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": None if gauss_next is None else float(gauss_next),
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what :func:`rng_state` returned (CUDA's only where it was saved and GPUs are present)."""
    if not isinstance(state, Mapping) or not {"torch", "numpy", "python"} <= set(state):
        raise TypeError(
            f"state must be the dict rng_state() returned (keys 'torch', 'numpy', 'python'), got {type(state).__name__}"
        )
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (
            n["kind"],
            n["keys"].numpy().astype(np.uint32),
            int(n["pos"]),
            int(n["has_gauss"]),
            float(n["cached_gaussian"]),
        )
    )
    p = state["python"]
    random.setstate((int(p["version"]), tuple(int(v) for v in p["internal"].tolist()), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----------------------------------------------------------------------------------------------
# what a checkpoint holds


def _check_pair(model: Any, optimizer: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    return value


def capture_state(model: nn.Module, optimizer: torch.optim.Optimizer, position: Mapping[str, Any]) -> dict:
    """A snapshot of everything the next training step depends on. The torchrun training script
    (``parallel.train_script``) saves it.

    Returns ``{"format", "model", "optimizer", "rng", "position"}``: copies of the model's and the
    optimizer's state dicts (later training does not change the snapshot), :func:`rng_state`, and
    ``position``, your record of where the data stream stands, e.g. ``{"epoch": 2, "batch": 17,
    "seed": 0}`` (plain ints, floats, strings, lists, dicts or tensors, so it loads with
    ``weights_only=True``).
    """
    _check_pair(model, optimizer)
    if not isinstance(position, Mapping):
        raise TypeError(f"position must be a dict such as {{'epoch': 0, 'batch': 0}}, got {type(position).__name__}")
    return {
        "format": _FORMAT,
        "model": _copy(model.state_dict()),
        "optimizer": _copy(optimizer.state_dict()),
        "rng": rng_state(),
        "position": _copy(dict(position)),
    }


def restore_state(state: Mapping[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Load a :func:`capture_state` snapshot into ``model`` and ``optimizer`` in place, put back every
    random generator, and return the data position."""
    _check_pair(model, optimizer)
    if not isinstance(state, Mapping) or not {"model", "optimizer", "rng", "position"} <= set(state):
        raise TypeError(
            "state must be what capture_state() or load_checkpoint() returned (keys 'model', "
            f"'optimizer', 'rng', 'position'), got {type(state).__name__}"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    return dict(state["position"])


# ----------------------------------------------------------------------------------------------
# files


def _digest(value: Any, h: Any = None) -> str:
    """SHA-256 over a state's structure and every tensor's bytes (the integrity check of a file)."""
    h = h or hashlib.sha256()
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    elif isinstance(value, Mapping):
        h.update(f"D{len(value)}".encode())
        for k, v in value.items():
            h.update(repr(k).encode())
            _digest(v, h)
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}".encode())
        for v in value:
            _digest(v, h)
    else:
        h.update(f"V{type(value).__name__}:{value!r}".encode())
    return h.hexdigest()


def _as_path(name: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or pathlib.Path), got {type(value).__name__}")
    return Path(value)


def _directory(value: Any) -> Path:
    directory = _as_path("directory", value)
    if not directory.is_dir():
        raise ValueError(
            f"directory {str(directory)!r} does not exist (or is not a directory): create it first "
            "(Path(directory).mkdir(parents=True, exist_ok=True))"
        )
    return directory


def checkpoint_path(directory: str | os.PathLike, step: int) -> Path:
    """``directory/ckpt-00000042.pt``: the name :func:`load_latest` and ``keep`` recognise (the step
    number orders them). Notebook 06.3."""
    step = arguments.nonnegative_int("step", step)
    return _as_path("directory", directory) / f"ckpt-{step:08d}.pt"


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """The ``ckpt-<step>.pt`` files in ``directory``, oldest step first. Notebook 06.3."""
    directory = _directory(directory)
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def _prune_checkpoints(directory: str | os.PathLike, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints in ``directory``; return the deleted paths."""
    keep = arguments.positive_int("keep", keep)
    old = list_checkpoints(directory)[:-keep]
    for p in old:
        p.unlink(missing_ok=True)
    return old


def _blob(state: Mapping[str, Any]) -> dict:
    """What a checkpoint file stores: the state with its format and SHA-256 digest."""
    return {"format": _FORMAT, "sha256": _digest(state), "state": state}


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any], *, keep: int | None = None) -> Path:
    """Write ``state`` to ``path`` atomically; return the path. Notebook 06.3 (atomic checkpoints).

    The bytes go to a temporary file in the same directory (same file system, so the rename is
    atomic), which is flushed and fsynced before ``os.replace`` puts it in place (and the directory is
    fsynced so the rename survives a power cut): ``files.write_atomic``. A process killed at any moment leaves either
    the old
    file or the new one, never half of one. The file stores ``state`` with a SHA-256 digest that
    :func:`load_checkpoint` checks. ``keep``: afterwards delete all but the newest ``keep``
    ``ckpt-<step>.pt`` files of the directory (name files with :func:`checkpoint_path`).
    """
    path = _as_path("path", path)
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict (capture_state's result), got {type(state).__name__}")
    arguments.optional(arguments.positive_int, "keep", keep)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ValueError(f"the directory of path {str(path)!r} does not exist: create it first")
    blob = _blob(state)
    write_atomic(path, lambda f: torch.save(blob, f))
    if keep is not None:
        _prune_checkpoints(directory, keep)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device | None = "cpu") -> dict:
    """Load and verify a file written by :func:`save_checkpoint` (``weights_only=True``). Notebook 06.3.

    Raises :class:`CheckpointError` (a ValueError) naming the file when it is truncated, corrupted
    (its digest does not match), or not such a checkpoint; ``FileNotFoundError`` when it is missing.
    """
    path = _as_path("path", path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        blob = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - every failure to read means the same: this file is unusable
        # torch's own message (kept as __cause__, shown in the traceback) varies with the torch version
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read: it is truncated or corrupted", path) from exc
    if not isinstance(blob, dict) or blob.get("format") != _FORMAT or "state" not in blob:
        raise CheckpointError(
            f"{str(path)!r} is not a checkpoint written by save_checkpoint (format {_FORMAT!r})", path
        )
    if _digest(blob["state"]) != blob.get("sha256"):
        raise CheckpointError(
            f"checkpoint {str(path)!r} is corrupted: its content does not match the SHA-256 "
            "digest stored when it was written (bits changed on disk or in transfer)",
            path,
        )
    return blob["state"]


def load_latest(
    directory: str | os.PathLike,
    *,
    report: Callable[[str], Any] | None = None,
    map_location: str | torch.device | None = "cpu",
) -> dict | None:
    """The newest checkpoint of ``directory`` that loads, or None when there is none. The torchrun
    training script (``parallel.train_script``) resumes with it.

    Files that cannot be loaded are skipped, newest first, each with a message naming the file and
    why, passed to ``report`` (e.g. ``print``) or, by default, issued as a :class:`CheckpointWarning`.
    The returned state also says where it came from: ``state["loaded_from"]`` (the path, a str) and
    ``state["skipped"]`` (the messages). ``directory`` must exist (ValueError otherwise).
    """
    if report is not None:
        arguments.function("report", report)
    skipped: list[str] = []
    for path in reversed(list_checkpoints(directory)):
        try:
            state = load_checkpoint(path, map_location)
        except (CheckpointError, OSError) as exc:
            message = f"skipped {str(path)!r}: {exc}; falling back to the previous checkpoint"
            skipped.append(message)
            if report is not None:
                report(message)
            else:
                warnings.warn(message, CheckpointWarning, stacklevel=2)
            continue
        state["loaded_from"] = str(path)
        state["skipped"] = skipped
        return state
    return None


# ----------------------------------------------------------------------------------------------
# the data position


class ShuffledBatches:
    """Shuffled mini-batches whose order depends only on ``(seed, epoch)``, so a resumed run can
    start in the middle of an epoch and see the very batches the interrupted run would have seen.
    ``batches(epoch, start)`` yields ``(index, (x, y))`` from batch
    ``start`` on; the position to store is ``{"epoch", "batch", "seed"}``.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int = 0):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            raise TypeError("x and y must be tensors")
        if len(x) != len(y) or len(x) == 0:
            raise ValueError(f"x and y must have the same non-zero length, got {len(x)} and {len(y)}")
        self.x, self.y = x, y
        self.batch_size = arguments.positive_int("batch_size", batch_size)
        self.seed = arguments.nonnegative_int("seed", seed)

    def __len__(self) -> int:
        return -(-len(self.x) // self.batch_size)

    def order(self, epoch: int) -> torch.Tensor:
        """The permutation of epoch ``epoch`` (its own generator: the global RNG is untouched)."""
        epoch = arguments.nonnegative_int("epoch", epoch)
        return torch.randperm(
            len(self.x), generator=torch.Generator().manual_seed(seeds.derive(self.seed, "epoch", epoch))
        )

    def batches(self, epoch: int, start: int = 0) -> Iterator[tuple[int, tuple[torch.Tensor, torch.Tensor]]]:
        start = arguments.integer("start", start, minimum=0, maximum=len(self))
        idx = self.order(epoch)
        for b in range(start, len(self)):
            sel = idx[b * self.batch_size : (b + 1) * self.batch_size]
            yield b, (self.x[sel], self.y[sel])
