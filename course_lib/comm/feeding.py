"""Feeding a trainer: starved by bytes (a file read from disk or from the page cache) and by compute
(a loader that prepares every batch on a processor), each against its model (notebook 03, section 4).

* ``drop_from_page_cache``: ask the operating system to forget a file's cached pages (Linux, unprivileged).
* ``read_starvation``: a trainer that reads each batch from a file on disk, then from the page cache,
  next to the bandwidth of a plain read of the same file: time = bytes / measured bandwidth.
* ``worker_epochs``: epochs of a ``DataLoader`` with 0 and 1 worker processes, interleaved: time = work /
  rate, where preparing and training overlap once a worker prepares the next batch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from .. import arguments
from ..memory.page_cache import cache_control, drop_file_cache
from ..train import measure_input_pipeline

__all__ = [
    "CAN_DROP_PAGE_CACHE",
    "describe_epochs",
    "describe_reads",
    "drop_from_page_cache",
    "read_starvation",
    "worker_epochs",
    "worker_parts",
]

#: Whether this operating system lets an unprivileged process drop a file's pages from its cache
#: (``posix_fadvise`` with ``POSIX_FADV_DONTNEED``: Linux; macOS and Windows have no such call).
CAN_DROP_PAGE_CACHE: bool = cache_control() == "posix_fadvise"


def drop_from_page_cache(path: str | os.PathLike) -> bool:
    """Drop the cached pages of ``path`` (fsynced first: clean pages only) so the next read comes from
    the disk. Needs no privileges. Returns False where the operating system has no ``posix_fadvise``
    (macOS, Windows): there the next read may come from memory."""
    return CAN_DROP_PAGE_CACHE and drop_file_cache(path)


def _write_file(path: str, max_bytes: int, target_s: float, chunk: int) -> int:
    """Write random chunks until ``target_s`` has passed or ``max_bytes`` are written; fsync; return the size."""
    block = torch.randint(0, 256, (chunk,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)).numpy()
    written, start = 0, time.perf_counter()
    with open(path, "wb") as f:
        while written + chunk <= max_bytes and (written < 4 * chunk or time.perf_counter() - start < target_s):
            block[:8] = torch.tensor([written], dtype=torch.int64).view(torch.uint8).numpy()  # no two chunks alike
            f.write(block.tobytes())
            written += chunk
        f.flush()
        os.fsync(f.fileno())
    return written


def _read_all(path: str, buf: bytearray) -> float:
    """Seconds to read the whole file into ``buf``-sized pieces, sequentially, unbuffered (the bandwidth
    alone reads 1-MiB pieces, not a batch at a time as the trainer does: another access pattern)."""
    view = memoryview(buf)
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(view):
            pass
    return time.perf_counter() - start


def _epoch(path: str, buf: bytearray, step: Callable, to_batch: Callable) -> dict[str, float]:
    """Read the file batch by batch, training on each batch after it is read; time the two apart."""
    view, wait, compute, batches = memoryview(buf), 0.0, 0.0, 0
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            t0 = time.perf_counter()
            got = f.readinto(view)
            t1 = time.perf_counter()
            if not got:
                break
            step(*to_batch(buf))
            wait, compute, batches = wait + t1 - t0, compute + time.perf_counter() - t1, batches + 1
    total = time.perf_counter() - start
    return {"wait_s": wait, "compute_s": compute, "total_s": total, "batches": batches, "idle_fraction": wait / total}


def read_starvation(
    step: Callable[[torch.Tensor, torch.Tensor], object],
    x_shape: Sequence[int] = (32, 1, 32, 32),
    *,
    batches: int = 4,
    target_s: float = 0.1,
    max_bytes: int = 128 * 2**20,
    rounds: int = 2,
    directory: str | None = None,
    read_block: int | None = 2**20,
) -> dict[str, Any]:
    """A trainer starved by bytes: every batch is read from a file, then ``step(x, y)`` trains on it.
    Notebook 03, section 4.

    The file is sized from the machine: random bytes are written (in ``batches`` equal pieces of at least 1 MiB)
    for about ``target_s`` seconds, at most ``max_bytes``, a tenth of the free disk and an eighth of the memory,
    then fsynced. Each batch is one piece: the trainer reads all of it (a stored example is much larger than
    what the model sees, as a high-resolution original is) and trains on its first bytes, shaped ``x_shape``
    and scaled to [0, 1]. The bandwidths are measured apart, by plain sequential reads of the whole file: from
    the disk (its pages dropped from the page cache first) and from the page cache, in pieces of ``read_block``
    bytes (1 MiB; ``None``: one batch, the trainer's own piece, which notebook 03 uses: a 1-MiB piece stays in
    the CPU's caches between reads, a batch of tens of MiB does not, so from the page cache the small pieces
    read several times faster than the epoch does). Then epochs from the disk and from the cache alternate
    ``rounds`` times; each kind keeps its faster epoch. The file is deleted at the end, also on error.

    Returns ``{"file_bytes", "batch_bytes", "used_bytes" (what the model sees of a batch), "read_block",
    "batches", "dropped" (the page cache could be dropped here), "disk_Bps", "cache_Bps", "disk": epoch,
    "cache": epoch}``, an epoch being ``{"wait_s", "compute_s", "total_s", "batches", "idle_fraction"}`` as
    :func:`course_lib.train.measure_input_pipeline` returns.
    """
    if not callable(step):
        raise TypeError(f"step must be callable, got {type(step).__name__}")
    shape = tuple(arguments.positive_int("x_shape", int(s)) for s in x_shape)
    batches = arguments.positive_int("batches", batches)
    rounds = arguments.positive_int("rounds", rounds)
    read_block = None if read_block is None else arguments.positive_int("read_block", read_block)
    if not target_s > 0:
        raise ValueError(f"target_s must be > 0 seconds, got {target_s!r}")
    folder = directory or tempfile.gettempdir()
    numel = 1
    for s in shape:
        numel *= s
    chunk = max(2**20, -(-numel // 2**20) * 2**20)  # whole MiB, at least one image batch
    avail = shutil.disk_usage(folder).free // 10
    try:
        avail = min(avail, os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8)
    except (AttributeError, ValueError, OSError):
        pass  # no sysconf (Windows): the disk bound and max_bytes still hold
    limit = max(batches * chunk, min(arguments.positive_int("max_bytes", max_bytes), avail))
    fd, path = tempfile.mkstemp(prefix="course-feed-", suffix=".bin", dir=folder)
    os.close(fd)
    try:
        size = _write_file(path, limit, target_s, chunk)
        batch_bytes = size // batches // chunk * chunk
        with open(path, "r+b") as f:  # a whole number of batches
            f.truncate(batch_bytes * batches)
        size = batch_bytes * batches
        buf = bytearray(batch_bytes)
        block = bytearray(batch_bytes if read_block is None else min(read_block, batch_bytes))
        y = torch.arange(shape[0]) % 10

        def to_batch(b: bytearray) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.frombuffer(b, dtype=torch.uint8, count=numel).view(shape).float() / 255, y

        disk_s, cache_s = [], []
        epochs: dict[str, list[dict]] = {"disk": [], "cache": []}
        dropped = True
        for _ in range(rounds):  # interleaved: a slow spell of the machine hits both kinds
            dropped = drop_from_page_cache(path) and dropped
            disk_s.append(_read_all(path, block))
            cache_s.append(_read_all(path, block))
            dropped = drop_from_page_cache(path) and dropped
            epochs["disk"].append(_epoch(path, buf, step, to_batch))
            epochs["cache"].append(_epoch(path, buf, step, to_batch))
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return {
        "file_bytes": size,
        "batch_bytes": batch_bytes,
        "used_bytes": numel,
        "read_block": len(block),
        "batches": batches,
        "dropped": dropped,
        "disk_Bps": size / min(disk_s),
        "cache_Bps": size / min(cache_s),
        **{k: min(v, key=lambda e: e["total_s"]) for k, v in epochs.items()},
    }


def worker_epochs(
    dataset: Dataset,
    step: Callable[[torch.Tensor, torch.Tensor], object],
    *,
    batch_size: int = 32,
    workers: Sequence[int] = (0, 1),
    rounds: int = 2,
    prefetch_factor: int = 4,
) -> dict[int, dict]:
    """A trainer starved by compute: epochs of ``DataLoader(dataset, num_workers=w)`` for each ``w`` in
    ``workers``, timed by :func:`course_lib.train.measure_input_pipeline`. Notebook 03, section 4.

    The loaders keep their workers between epochs (started and warmed up first, so starting processes is
    not timed); epochs alternate between the settings ``rounds`` times (0 1 0 1), and each setting keeps its
    faster epoch, since others on a shared machine can only slow one down. Returns ``{w: epoch}``.
    """
    batch_size = arguments.positive_int("batch_size", batch_size)
    rounds = arguments.positive_int("rounds", rounds)
    ws = [arguments.nonnegative_int("workers", w) for w in workers]
    loaders = {
        w: DataLoader(
            dataset,
            batch_size=batch_size,
            num_workers=w,
            persistent_workers=w > 0,
            prefetch_factor=prefetch_factor if w else None,
        )
        for w in ws
    }
    for w in ws:
        measure_input_pipeline(loaders[w], step, max_batches=2)  # start the workers, warm up
    runs: dict[int, list[dict]] = {w: [] for w in ws}
    for _ in range(rounds):
        for w in ws:
            runs[w].append(measure_input_pipeline(loaders[w], step))
    del loaders  # persistent workers end with their loader
    return {w: min(r, key=lambda e: e["total_s"]) for w, r in runs.items()}


class _Blank(Dataset):
    """``n`` examples shaped like ``like``'s, made at no cost: a loader over it times the hand-over alone."""

    def __init__(self, n: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.n, self.x, self.y = n, x, y

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.x, self.y


def worker_parts(dataset: Dataset, *, batch_size: int = 32, rounds: int = 2) -> dict[str, float]:
    """The parts of a one-worker epoch, measured apart. Notebook 03, section 4.

    A ``DataLoader`` with one worker process and a trainer that does nothing times, per batch, what the
    worker needs to prepare a batch and hand it over (``worker_s``); the same over examples that cost
    nothing to make, shaped like ``dataset``'s, times the hand-over alone (``handover_s``: collating, the
    shared-memory copy and the queue); ``prepare_s`` is the difference, the preparing as the worker does it.
    ``first_s`` is the wait for an epoch's first batch (the pipeline fill: nothing overlaps it).
    ``receive_s`` is the trainer's own share of a hand-over: the time ``next()`` takes when the batch is
    already waiting in the queue (the trainer sleeps between batches, so the worker is always ahead). Each
    setting keeps its fastest of ``rounds`` epochs. Returns ``{"worker_s", "handover_s", "prepare_s",
    "first_s", "receive_s", "batches"}``.
    """
    batch_size = arguments.positive_int("batch_size", batch_size)
    rounds = arguments.positive_int("rounds", rounds)
    x, y = dataset[0]
    loaders = {
        name: DataLoader(ds, batch_size=batch_size, num_workers=1, persistent_workers=True, prefetch_factor=4)
        for name, ds in (("worker", dataset), ("handover", _Blank(len(dataset), x, y)))
    }
    nothing = lambda x, y: None  # noqa: E731
    for loader in loaders.values():
        measure_input_pipeline(loader, nothing, max_batches=2)  # start the worker, warm up
    best: dict[str, dict] = {}
    first: list[float] = []
    receive: list[float] = []
    for _ in range(rounds):
        for name, loader in loaders.items():
            epoch = measure_input_pipeline(loader, nothing)
            if name not in best or epoch["total_s"] < best[name]["total_s"]:
                best[name] = epoch
        t = time.perf_counter()
        next(iter(loaders["worker"]))
        first.append(time.perf_counter() - t)
        receive.append(
            _receive_time(loaders["handover"], 2 * best["handover"]["total_s"] / best["handover"]["batches"])
        )
    del loaders
    per = {name: e["total_s"] / e["batches"] for name, e in best.items()}
    return {
        "worker_s": per["worker"],
        "handover_s": per["handover"],
        "prepare_s": max(0.0, per["worker"] - per["handover"]),
        "first_s": min(first),
        "receive_s": min(receive),
        "batches": best["worker"]["batches"],
    }


def _receive_time(loader: DataLoader, gap_s: float) -> float:
    """Mean seconds ``next()`` takes for a batch already waiting: the trainer sleeps ``gap_s`` (longer than
    the worker needs a batch) before each request after the first."""
    it, spent, n = iter(loader), 0.0, 0
    next(it)
    while True:
        time.sleep(gap_s + 1e-3)
        t = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            return spent / max(n, 1)
        spent, n = spent + time.perf_counter() - t, n + 1


def worker_epoch_model(parts: dict, step_s: float, batches: int) -> dict[str, float]:
    """The one-worker epoch predicted from its parts (:func:`worker_parts`) and a training step of ``step_s``
    seconds. Notebook 03, section 4.

    The fill (first batch), then ``batches - 1`` times the slower of the worker (``worker_s``) and the
    trainer's loop (receive + step), then the last batch's step, which nothing overlaps. Returns
    ``{"total_s", "wait_s"}``: the epoch, and the trainer's time in ``next()`` (the total less its steps).
    """
    step_s = arguments.nonnegative("step_s", step_s)
    batches = arguments.positive_int("batches", batches)
    cycle = max(parts["worker_s"], step_s + parts["receive_s"])
    total = parts["first_s"] + (batches - 1) * cycle + step_s
    return {"total_s": total, "wait_s": max(0.0, total - batches * step_s)}


def describe_reads(feed: dict) -> str:
    """What :func:`read_starvation` measured, as text: the batches, the read bandwidths, and for each source
    (disk, page cache) the wait beside its bytes / bandwidth model. Notebook 03, section 4."""
    lines = [
        f"{feed['batches']} batches, each a {feed['batch_bytes'] / 2**20:.0f}-MiB read of which the step uses "
        f"{feed['used_bytes'] / 2**10:.0f} KiB; read alone in {feed['read_block'] / 2**20:.0f}-MiB pieces: "
        f"disk {feed['disk_Bps'] / 1e9:.2f} GB/s, page cache {feed['cache_Bps'] / 1e9:.2f} GB/s"
    ]
    for src in ("disk", "cache"):
        e, model_s = feed[src], feed["file_bytes"] / feed[f"{src}_Bps"]
        lines.append(
            f"from {src:5s}: waited {e['wait_s'] * 1e3:4.0f} ms (bytes / bandwidth: {model_s * 1e3:4.0f} ms), "
            f"trained {e['compute_s'] * 1e3:4.0f} ms, idle {e['idle_fraction']:.0%}"
        )
    return "\n".join(lines)


def describe_epochs(pipeline: dict, idle_predicted: dict | None = None) -> str:
    """What :func:`worker_epochs` measured, as text: one line per worker count (time, idle share beside
    ``idle_predicted[workers]`` where given, training time a batch). Notebook 03, section 4."""
    if not isinstance(pipeline, dict) or (idle_predicted is not None and not isinstance(idle_predicted, dict)):
        raise TypeError("pipeline (and idle_predicted) must be dicts keyed by worker count, as worker_epochs returns")
    lines = []
    for w, p in pipeline.items():
        pred = f" (predicted {idle_predicted[w]:.0%})" if idle_predicted and w in idle_predicted else ""
        lines.append(
            f"{w} worker(s): {p['total_s']:.2f} s for {p['batches']} batches, idle {p['idle_fraction']:.0%}{pred}, "
            f"training {p['compute_s'] / p['batches'] * 1e3:.0f} ms a batch"
        )
    return "\n".join(lines)
