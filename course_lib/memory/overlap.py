"""Reading the next chunk while the step computes (notebook 02, section 9): does an epoch from the disk take the
longer of the read and the compute, or their sum?

``prefetched_epochs(path)`` trains nothing; each batch of the data set goes through one hidden layer whose width
is sized on this machine so that the compute of an epoch takes about as long as reading the file from the disk.
Then the two models of an evicted epoch differ by about 2x: the longer of the two (a loader that reads ahead in a
background thread, as a ``DataLoader`` with workers does) and their sum (read, then compute).

Read-ahead happens at several layers: this loader's thread, the kernel's read-ahead window (``read_ahead_kb``; Wu et
al., 2007), and below the OS the disk's own cache or, on a virtual machine, the host's page cache. There the read
timed apart (the whole file, nothing to overlap) varies by tens of percent from read to read, so an epoch can beat
one timed read: the model uses their median.
"""

from __future__ import annotations

import os
import queue
import statistics
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from .. import arguments
from .page_cache import _cached_fraction, _nocache, cache_control, disk_read_throughput, drop_file_cache
from .streaming import _readinto, dataset_info

__all__ = ["PrefetchedEpochs", "prefetched_epochs"]

MiB = 2**20


@dataclass(frozen=True)
class PrefetchedEpochs:
    """Result of :func:`prefetched_epochs` (seconds: the fastest round of each kind; reads: every cold read;
    ``cached_rounds``/``evicted_rounds``: every round, whose medians the models and the check compare)."""

    nbytes: int
    width: int  # the hidden layer's width, sized so the compute takes about as long as the disk read
    cached_seconds: float  # an epoch with the file in the page cache: about the compute alone
    evicted_seconds: float  # an epoch with the file dropped from the cache first
    read_seconds: tuple[float, ...]  # whole-file reads from the disk, timed apart (one per round, then three)
    evicted: bool  # verified: every evicted epoch began with under 5 % of the file cached (mincore measured it)
    cached_rounds: tuple[float, ...] = ()
    evicted_rounds: tuple[float, ...] = ()
    cached_fraction_before: float | None = None  # the largest share cached when an evicted epoch began; None: unknown

    @property
    def read_median(self) -> float:
        """The median of the separately timed disk reads."""
        return statistics.median(self.read_seconds)

    @property
    def cached_median(self) -> float:
        """The median cached epoch (the fastest where the rounds were not kept)."""
        return statistics.median(self.cached_rounds) if self.cached_rounds else self.cached_seconds

    @property
    def evicted_median(self) -> float:
        """The median evicted epoch (the fastest where the rounds were not kept): like with like, as the reads."""
        return statistics.median(self.evicted_rounds) if self.evicted_rounds else self.evicted_seconds

    @property
    def max_model(self) -> float:
        """Reading ahead: the longer of the disk read and the compute (the cached epoch), medians."""
        return max(self.read_median, self.cached_median)

    @property
    def sum_model(self) -> float:
        """No overlap: the disk read plus the compute (the cached epoch), medians."""
        return self.read_median + self.cached_median

    @property
    def over_max(self) -> float:
        """Median evicted epoch / the read-ahead model: about 1 when the read hides behind the compute."""
        return self.evicted_median / self.max_model

    def why_not_judged(self) -> str:
        """Why section 9 cannot judge the overlap here; "" where it can. An eviction that silently failed would
        give an epoch about as long as the cached one, near the read-ahead model: unverified, nothing is judged."""
        if cache_control() is None:
            return "this OS (Windows) gives Python no way to keep a file out of its page cache."
        if not self.evicted:
            share = self.cached_fraction_before
            seen = f"{share:.0%} of the file" if share is not None else "an unknown share (no mincore here)"
            return f"the eviction was not verified: {seen} cached when an evicted epoch began (tmpfs keeps it all)."
        if self.sum_model / self.max_model < 1.6:  # the claim's band ends halfway to the sum: keep it clear of 1.3
            return "the compute could not be sized to the disk read here, so the two models lie too close to tell."
        return ""


def _epoch(path, width: int, batch_size: int, evict: bool, depth: int = 3) -> float:
    """One pass: a background thread reads up to ``depth`` chunks (4 MiB each) ahead of the compute; its seconds."""
    info = dataset_info(path)
    rows = max(batch_size, (4 * MiB) // info.row_bytes // batch_size * batch_size)
    w = torch.randn(info.n_features, width) / info.n_features**0.5
    free, full = queue.Queue(), queue.Queue()
    for _ in range(depth + 1):
        free.put(np.empty((rows, info.n_features), dtype=np.dtype(info.dtype)))
    starts = list(range(0, info.n_samples, rows))
    t0 = time.perf_counter()
    with open(info.path / "x.npy", "rb", buffering=0) as fx:
        if evict and cache_control() == "F_NOCACHE":
            _nocache(fx.fileno())

        def reader() -> None:  # the loader: a DataLoader worker does the same in another process
            fx.seek(info.x_offset)
            for start in starts:
                buf, n = free.get(), min(rows, info.n_samples - start)
                _readinto(fx, memoryview(buf.reshape(-1).view(np.uint8))[: n * info.row_bytes])
                full.put((buf, n))

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        for _ in starts:
            buf, n = full.get()
            x = torch.from_numpy(buf[:n])
            for b in range(0, n, batch_size):
                torch.relu(x[b : b + batch_size] @ w).sum()
            free.put(buf)
        thread.join()
    return time.perf_counter() - t0


def prefetched_epochs(
    path: str | os.PathLike, rounds: int = 3, batch_size: int = 16384, most_seconds: float = 1.5
) -> PrefetchedEpochs:
    """Epochs that read ahead, with the file cached and evicted (notebook 02, section 9).

    First the disk read is timed (the file dropped from the page cache, three times) and the hidden layer's
    width sized so that the compute of an epoch takes about as long (at most ``most_seconds``). Then ``rounds``
    times, in turn: a cached epoch, an evicted epoch, one more timed disk read. One torch thread computes while
    another thread reads: the overlap needs no spare core for compute, only a disk that works while the CPU does.
    """
    rounds = arguments.positive_int("rounds", rounds)
    batch_size = arguments.positive_int("batch_size", batch_size)
    info = dataset_info(path)
    x_file = info.path / "x.npy"
    reads = [disk_read_throughput(x_file, drop_cache=True).seconds for _ in range(3)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        disk_read_throughput(x_file, drop_cache=False)  # cached: the two sizing epochs time the compute
        low, high = (_epoch(path, w, batch_size, evict=False) for w in (16, 256))  # a straight line through both
        target = min(statistics.median(reads), most_seconds)
        width = int(min(max(8, 16 + (target - low) * (256 - 16) / max(high - low, 1e-9)), 16384))
        cached, evicted, fracs, ok = [], [], [], all(r > 0 for r in reads)
        for _ in range(rounds):
            disk_read_throughput(x_file, drop_cache=False)  # the cached epoch finds the whole file in RAM
            cached.append(_epoch(path, width, batch_size, evict=False))
            dropped = drop_file_cache(x_file)
            fracs.append(_cached_fraction(x_file))  # verified, not assumed: None (unknown) fails the check
            ok = ok and dropped and fracs[-1] is not None and fracs[-1] < 0.05
            evicted.append(_epoch(path, width, batch_size, evict=True))
            reads.append(disk_read_throughput(x_file, drop_cache=True).seconds)
    finally:
        torch.set_num_threads(threads)
    known = [f for f in fracs if f is not None]
    return PrefetchedEpochs(
        info.nbytes,
        width,
        min(cached),
        min(evicted),
        tuple(reads),
        bool(ok) and cache_control() is not None,
        tuple(cached),
        tuple(evicted),
        max(known) if len(known) == len(fracs) else None,
    )
