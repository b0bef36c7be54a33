"""Data sets larger than your memory: write them in chunks, stream them back.

* ``write_synthetic_dataset(path, n_samples, n_features)`` writes a synthetic classification set
  (``x.npy``, ``y.npy``, ``meta.json`` in the directory ``path``) chunk by chunk: the whole array
  is never in RAM.
* ``StreamingDataset(path, batch_size)``: a torch ``IterableDataset`` that reads contiguous chunks
  with plain file reads into one reusable buffer, so resident memory stays at about one chunk
  whatever the file size. ``shuffle=True`` shuffles the chunk order and the rows inside each chunk
  (the chunk is the shuffle buffer).
* ``MemmapDataset(path)``: a map-style ``Dataset`` over a memory map of ``x.npy``, for random
  access. Pages it touches stay resident (they count in the process's RSS) until ``release()``
  drops them with ``madvise(MADV_DONTNEED)``.
* ``stream_once(path, budget_bytes, method)``: one pass over the whole set (per-class means and a
  linear classifier trained by SGD) that reports the process's resident peak. Run it in a fresh
  process (``course_lib.memory.limit.run_with_memory_limit``) to compare ``"stream"`` with a naive
  ``"load"`` of the whole file.
* ``disk_read_throughput(path)``: sequential read speed, with the page cache dropped first where
  the OS allows (a just-written file is otherwise read from RAM, not from disk).
* ``epochs_cached_vs_evicted(path)``: epochs over the data set with the file in the page cache and
  with it evicted before every epoch (what happens when RAM cannot hold it), next to the disk model.
* ``demo_dataset_bytes(wanted, directory)``: a data set size this machine's free RAM and disk allow.

Why not write through ``np.lib.format.open_memmap``? Pages written through a shared mapping count
as the writer's resident memory until they are flushed and unmapped, so a 4 GB write would look
like a 4 GB process. We write the ``.npy`` header with ``np.lib.format`` and the data with
ordinary file writes, which go through the page cache without growing RSS.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from torch.utils.data import Dataset, IterableDataset, get_worker_info

from .. import arguments, names, seeds
from ..hardware import current_rss_bytes, peak_rss_bytes
from .meters import _resident_peak
from .page_cache import (  # re-exported: the data sets below are read through the page cache
    EpochTimes,
    ReadThroughput,
    _cached_fraction,
    _drop_file_cache,
    _fadvise_dontneed,
    _nocache,
    cache_control,
    disk_read_throughput,
)

__all__ = [
    "DatasetInfo",
    "write_synthetic_dataset",
    "dataset_info",
    "StreamingDataset",
    "MemmapDataset",
    "StreamReport",
    "stream_once",
    "stream_passes",
    "ReadThroughput",
    "disk_read_throughput",
    "cache_control",
    "demo_dataset_bytes",
    "EpochTimes",
    "epochs_cached_vs_evicted",
]

MiB = 2**20
DTYPES = ("fp32", "fp64", "fp16")  # the course's names (names.dtype); "float32" etc. work too
METHODS = ("stream", "memmap", "memmap_keep", "load")
_NUMPY = {"fp32": "float32", "fp64": "float64", "fp16": "float16"}

_pos_int = arguments.positive_int


def _dtype(dtype: str | np.dtype) -> np.dtype:
    name = np.dtype(dtype).name if isinstance(dtype, np.dtype) else dtype
    return np.dtype(_NUMPY[names.dtype(name, accepted=DTYPES)])


# ----------------------------------------------------------------------------------------------
# writing


@dataclass(frozen=True)
class DatasetInfo:
    """Shape and layout of a data set written by :func:`write_synthetic_dataset`."""

    path: Path
    n_samples: int
    n_features: int
    n_classes: int
    dtype: str
    x_offset: int  # byte offset of the first row in x.npy
    y_offset: int

    @property
    def row_bytes(self) -> int:
        return self.n_features * np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the feature array (what a naive ``np.load`` would allocate)."""
        return self.n_samples * self.row_bytes


def _write_header(f, shape: tuple[int, ...], dtype: np.dtype) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_2_0(f, header)


def _header_offset(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(f)
        if fortran:
            raise ValueError(f"{path} is Fortran-ordered; only C-ordered arrays can be streamed by rows")
        return shape, dtype, f.tell()


def write_synthetic_dataset(
    path: str | os.PathLike,
    n_samples: int,
    n_features: int,
    dtype: str = "float32",
    seed: int = 0,
    n_classes: int = 2,
    chunk_rows: int | None = None,
    separation: float = 1.0,
) -> Path:
    """Write a synthetic classification set to the directory ``path``, chunk by chunk.

    Each class has a random centre; a sample is its class centre plus unit Gaussian noise, so a
    linear model can learn it. Files: ``x.npy`` (``n_samples x n_features``, ``dtype``),
    ``y.npy`` (int64 labels), ``meta.json``. Only ``chunk_rows`` rows (default: ~16 MiB worth) are
    in memory at a time. The output is deterministic for a given ``seed`` and ``chunk_rows``.
    Returns the directory.
    """
    n_samples = _pos_int("n_samples", n_samples)
    n_features = _pos_int("n_features", n_features)
    arguments.integer("n_classes", n_classes, minimum=2)
    dt = _dtype(dtype)
    arguments.nonnegative_int("seed", seed)
    if chunk_rows is None:
        chunk_rows = max(1, (16 * MiB) // (n_features * dt.itemsize))
    chunk_rows = _pos_int("chunk_rows", chunk_rows)
    separation = arguments.positive("separation", separation)
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"path must be a directory (it will hold x.npy, y.npy, meta.json), got a file: {out}")
    out.mkdir(parents=True, exist_ok=True)
    centres = np.random.default_rng(seeds.derive(seed, "centres")).standard_normal((n_classes, n_features)) * (
        separation * 2 / math.sqrt(n_features)
    )
    with open(out / "x.npy", "wb") as fx, open(out / "y.npy", "wb") as fy:
        _write_header(fx, (n_samples, n_features), dt)
        _write_header(fy, (n_samples,), np.dtype(np.int64))
        for i, start in enumerate(range(0, n_samples, chunk_rows)):
            rows = min(chunk_rows, n_samples - start)
            rng = np.random.default_rng(seeds.derive(seed, "chunk", i))
            y = rng.integers(0, n_classes, rows, dtype=np.int64)
            x = rng.standard_normal((rows, n_features), dtype=np.float32)
            x += centres[y].astype(np.float32)
            fx.write(x.astype(dt, copy=False).tobytes())
            fy.write(y.tobytes())
    (out / "meta.json").write_text(
        json.dumps(
            {"n_samples": n_samples, "n_features": n_features, "n_classes": n_classes, "dtype": dt.name, "seed": seed}
        )
    )
    return out


def dataset_info(path: str | os.PathLike) -> DatasetInfo:
    """Read the headers of a data set written by :func:`write_synthetic_dataset`."""
    p = Path(path)
    if not (p / "x.npy").is_file() or not (p / "y.npy").is_file():
        raise ValueError(f"path must be a directory written by write_synthetic_dataset (with x.npy and y.npy), got {p}")
    (n, f), dt, xo = _header_offset(p / "x.npy")
    (ny,), _, yo = _header_offset(p / "y.npy")
    if ny != n:
        raise ValueError(f"x.npy has {n} rows but y.npy has {ny} labels in {p}")
    meta = json.loads((p / "meta.json").read_text()) if (p / "meta.json").is_file() else {}
    return DatasetInfo(p, int(n), int(f), int(meta.get("n_classes", 2)), dt.name, xo, yo)


# ----------------------------------------------------------------------------------------------
# reading


def _readinto(f, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise EOFError("unexpected end of file while streaming")
        got += n


class StreamingDataset(IterableDataset):
    """Yield ``(x, y)`` batches by reading contiguous chunks of the file.

    Resident memory is about one chunk (``chunk_rows`` rows; default: a quarter of
    ``budget_bytes`` if given, else 8 MiB) plus the batches you keep, whatever the file size: rows
    are read with plain file reads into one reusable buffer, never memory-mapped. ``shuffle=True``
    visits the chunks in a random order and shuffles the rows inside each chunk (a shuffle buffer
    of one chunk; call ``set_epoch`` for a new order each epoch). ``drop_cache=True`` also asks
    the OS to drop each chunk from the page cache after reading it. With a ``DataLoader``
    (``batch_size=None``) and several workers, chunks are split between the workers.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        batch_size: int,
        *,
        chunk_rows: int | None = None,
        budget_bytes: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        drop_cache: bool = False,
    ) -> None:
        super().__init__()
        self.info = dataset_info(path)
        self.batch_size = _pos_int("batch_size", batch_size)
        if chunk_rows is None:
            chunk_bytes = 8 * MiB if budget_bytes is None else _pos_int("budget_bytes", budget_bytes) // 4
            chunk_rows = max(1, chunk_bytes // self.info.row_bytes)
        self.chunk_rows = max(_pos_int("chunk_rows", chunk_rows), 1)
        for name, flag in (("shuffle", shuffle), ("drop_last", drop_last), ("drop_cache", drop_cache)):
            if not isinstance(flag, bool):  # bool("no") would be True
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        seed = arguments.nonnegative_int("seed", seed)
        self.shuffle, self.seed, self.drop_last, self.drop_cache = shuffle, seed, drop_last, drop_cache
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use a different (seeded) shuffle order for this epoch."""
        self.epoch = int(epoch)

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_rows * self.info.row_bytes

    def __len__(self) -> int:
        n = self.info.n_samples
        per_chunk = [min(self.chunk_rows, n - s) for s in range(0, n, self.chunk_rows)]
        if self.drop_last:
            return sum(r // self.batch_size for r in per_chunk)
        return sum(-(-r // self.batch_size) for r in per_chunk)

    def _chunks(self) -> list[int]:
        starts = list(range(0, self.info.n_samples, self.chunk_rows))
        if self.shuffle:
            np.random.default_rng(seeds.derive(self.seed, "chunk order", self.epoch)).shuffle(starts)
        w = get_worker_info()
        if w is not None:
            starts = starts[w.id :: w.num_workers]
        return starts

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = self.info
        dt = np.dtype(info.dtype)
        xbuf = np.empty((self.chunk_rows, info.n_features), dtype=dt)
        ybuf = np.empty(self.chunk_rows, dtype=np.int64)
        rng = np.random.default_rng(seeds.derive(self.seed, "rows", self.epoch))
        with open(info.path / "x.npy", "rb", buffering=0) as fx, open(info.path / "y.npy", "rb", buffering=0) as fy:
            for start in self._chunks():
                rows = min(self.chunk_rows, info.n_samples - start)
                xo, nbytes = info.x_offset + start * info.row_bytes, rows * info.row_bytes
                fx.seek(xo)
                _readinto(fx, memoryview(xbuf.reshape(-1).view(np.uint8))[:nbytes])
                fy.seek(info.y_offset + start * 8)
                _readinto(fy, memoryview(ybuf.view(np.uint8))[: rows * 8])
                if self.drop_cache:
                    _fadvise_dontneed(fx.fileno(), xo, nbytes)
                order = rng.permutation(rows) if self.shuffle else None
                for b in range(0, rows, self.batch_size):
                    e = min(rows, b + self.batch_size)
                    if self.drop_last and e - b < self.batch_size:
                        break
                    if order is None:  # copy: the buffer is reused for the next chunk
                        xb, yb = xbuf[b:e].copy(), ybuf[b:e].copy()
                    else:
                        xb, yb = xbuf[order[b:e]], ybuf[order[b:e]]
                    yield torch.from_numpy(xb), torch.from_numpy(yb)


class MemmapDataset(Dataset):
    """Map-style dataset over a read-only memory map of ``x.npy``.

    ``ds[i]`` returns ``(x_i, y_i)`` tensors (copies); ``ds.x`` / ``ds.y`` are the mapped arrays
    for slicing. Every page read stays mapped and counts in the process's RSS (it is reclaimable
    page cache, but it shows up in RSS and VmHWM) until ``release()`` drops it with
    ``madvise(MADV_DONTNEED)``; call it every chunk when iterating a file bigger than your budget.
    Picklable (the map is reopened in each DataLoader worker).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.info = dataset_info(path)
        self._open()

    def _open(self) -> None:
        info = self.info
        with open(info.path / "x.npy", "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.x = np.ndarray(
            (info.n_samples, info.n_features), dtype=np.dtype(info.dtype), buffer=self._mm, offset=info.x_offset
        )
        self.y = np.load(info.path / "y.npy", mmap_mode="r")

    def __getstate__(self) -> dict:
        return {"info": self.info}

    def __setstate__(self, state: dict) -> None:
        self.info = state["info"]
        self._open()

    def __len__(self) -> int:
        return self.info.n_samples

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            if not -len(self) <= i < len(self):
                raise IndexError(f"index {i} out of range for {len(self)} samples")
            return torch.from_numpy(np.array(self.x[i])), torch.tensor(int(self.y[i]))
        raise TypeError(f"index must be an int, got {type(i).__name__}")

    def release(self) -> bool:
        """Drop every mapped page from this process's resident set (``MADV_DONTNEED``).

        Returns False where ``madvise`` is not available (the pages then stay until the OS needs
        the memory)."""
        if hasattr(self._mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            self._mm.madvise(mmap.MADV_DONTNEED)
            return True
        return False


# ----------------------------------------------------------------------------------------------
# measuring


@dataclass(frozen=True)
class StreamReport:
    """One pass of :func:`stream_once`: what it computed and how much resident memory it needed."""

    method: str
    n_samples: int
    data_bytes: int
    budget_bytes: int
    rss_before_bytes: int
    peak_rss_bytes: int
    seconds: float
    accuracy: float  # running training accuracy of the linear model over the pass
    class_means_norm: float  # a checksum of the per-class means (same for every method)
    peak_is_exact: bool  # False where VmHWM could not be reset (then psutil's rss, sampled every 1 ms)

    @property
    def peak_increase_bytes(self) -> int:
        """Resident peak during the pass minus the resident size before it."""
        return self.peak_rss_bytes - self.rss_before_bytes

    @property
    def within_budget(self) -> bool:
        return self.peak_increase_bytes < self.budget_bytes

    @property
    def throughput_bytes_per_s(self) -> float:
        return self.data_bytes / self.seconds if self.seconds > 0 else float("inf")


def stream_once(
    path: str | os.PathLike,
    budget_bytes: int,
    method: str = "stream",
    batch_size: int = 1024,
    lr: float = 0.1,
    seed: int = 0,
) -> StreamReport:
    """Iterate the whole data set once and report the resident-memory peak.

    Computes the per-class mean of the features and trains a linear classifier with one SGD step
    per batch. ``method``: ``"stream"`` (:class:`StreamingDataset`, a chunk of ``budget_bytes / 4``),
    ``"memmap"`` (:class:`MemmapDataset` read in chunks, ``release()`` after each), ``"memmap_keep"``
    (the same without ``release()``: every page read stays resident) or ``"load"`` (``np.load`` of
    the whole file, the naive way). The peak is the process's VmHWM, reset just before the pass (elsewhere
    psutil's rss sampled every millisecond), so
    run this in a fresh process (e.g. ``run_with_memory_limit(stream_once, limit, path, budget)``)
    for a clean number. Importable, so it can run in a spawned subprocess.
    """
    budget = _pos_int("budget_bytes", budget_bytes)
    batch_size = _pos_int("batch_size", batch_size)
    method = arguments.choice("method", method, METHODS)
    info = dataset_info(path)
    from ..models import make_optimizer
    from ..train import train_step

    torch.manual_seed(seed)
    model = torch.nn.Linear(info.n_features, info.n_classes)
    opt = make_optimizer("sgd", model.parameters(), lr=lr)
    sums = torch.zeros(info.n_classes, info.n_features, dtype=torch.float64)
    counts = torch.zeros(info.n_classes, dtype=torch.float64)
    correct = 0
    chunk_rows = max(1, (budget // 4) // info.row_bytes)
    # warm up the training step so lazy imports and first-call allocations are not in the peak
    warm_model = torch.nn.Linear(info.n_features, info.n_classes)
    train_step(
        warm_model,
        (torch.zeros(2, info.n_features), torch.zeros(2, dtype=torch.long)),
        make_optimizer("sgd", warm_model.parameters(), lr=lr),
    )

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: one thread avoids OpenMP overhead on a busy 2-core VM
    before = current_rss_bytes()
    t0 = time.perf_counter()

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if method == "stream":
            yield from StreamingDataset(path, batch_size, chunk_rows=chunk_rows)
            return
        if method == "load":
            x = np.load(info.path / "x.npy")
            y = np.load(info.path / "y.npy")
            for b in range(0, info.n_samples, batch_size):
                yield torch.from_numpy(x[b : b + batch_size]), torch.from_numpy(y[b : b + batch_size])
            return
        ds = MemmapDataset(path)
        for c in range(0, info.n_samples, chunk_rows):
            e = min(info.n_samples, c + chunk_rows)
            for b in range(c, e, batch_size):
                be = min(e, b + batch_size)
                yield torch.from_numpy(np.array(ds.x[b:be])), torch.from_numpy(np.array(ds.y[b:be]))
            if method == "memmap":
                ds.release()

    try:
        with _resident_peak() as rss:  # VmHWM reset first (Linux); elsewhere psutil's rss sampled every 1 ms
            for xb, yb in batches():
                xb = xb.float()
                sums.index_add_(0, yb, xb.double())
                counts += torch.bincount(yb, minlength=info.n_classes).double()
                correct += train_step(model, (xb, yb), opt).correct
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - t0
    exact = rss["method"] == "VmHWM"
    peak = rss["bytes"] if rss["bytes"] is not None else peak_rss_bytes(False)
    means = sums / counts.clamp_min(1).unsqueeze(1)
    return StreamReport(
        method,
        info.n_samples,
        info.nbytes,
        budget,
        before,
        peak,
        seconds,
        correct / info.n_samples,
        float(means.norm()),
        exact,
    )


def stream_passes(path: str | os.PathLike, budget_bytes: int, capped: bool = True) -> dict:
    """Section 8's passes of :func:`stream_once`, each in its own child process (notebook 02), keyed (method, cap):
    stream under a cap of the budget; load uncapped and under the budget's cap (out of memory); memmap and
    memmap_keep uncapped (a map reserves the whole file's address space). ``capped=False`` (no ``RLIMIT_AS``:
    macOS, Windows): the passes run uncapped, resident memory metered, and the load meant to fail is left out."""
    from .limit import run_with_memory_limit

    budget = _pos_int("budget_bytes", budget_bytes)
    wanted = [("stream", budget), ("load", 2**31), ("load", budget), ("memmap", 2**31), ("memmap_keep", 2**31)]
    return {
        (m, cap): run_with_memory_limit(stream_once, cap, path, budget, method=m, allow_uncapped=not capped)
        for m, cap in wanted
        if capped or (m, cap) != ("load", budget)
    }


# ----------------------------------------------------------------------------------------------
# disk throughput and the page cache


def demo_dataset_bytes(
    wanted: int,
    directory: str | os.PathLike,
    ram_share: float = 0.125,
    disk_share: float = 0.1,
    minimum: int | None = None,
) -> int:
    """The size of a demo data set this machine can hold safely (notebook 02, sections 8-9).

    ``wanted`` bytes, cut to ``ram_share`` of the RAM available now and ``disk_share`` of the free space in
    ``directory``, so a demo never fills a learner's memory or disk. Returns 0 where even ``minimum`` bytes (default
    a tenth of ``wanted``) do not fit (the notebook then says why it skips): below a few MiB, a streaming pass's
    fixed costs (the interpreter's own allocations) outweigh its budget.
    """
    wanted = _pos_int("wanted", wanted)
    minimum = wanted // 10 if minimum is None else _pos_int("minimum", minimum)
    free_disk = __import__("shutil").disk_usage(os.fspath(directory)).free
    try:
        import psutil

        free_ram = psutil.virtual_memory().available
    except ImportError:  # pragma: no cover - psutil is a course dependency
        free_ram = wanted * 8
    size = int(min(wanted, ram_share * free_ram, disk_share * free_disk))
    size -= size % MiB
    return size if size >= minimum else 0


def _epoch(path: str | os.PathLike, batch_size: int, evict: bool) -> float:
    """One pass computing per-class feature sums (a light model, so reading dominates); its seconds."""
    ds = StreamingDataset(path, batch_size, chunk_rows=max(1, (4 * MiB) // dataset_info(path).row_bytes))
    sums = torch.zeros(ds.info.n_classes, ds.info.n_features)
    t0 = time.perf_counter()
    info = ds.info
    with open(info.path / "x.npy", "rb", buffering=0) as fx:
        if evict and cache_control() == "F_NOCACHE":
            _nocache(fx.fileno())
        buf = np.empty((ds.chunk_rows, info.n_features), dtype=np.dtype(info.dtype))
        y = np.load(info.path / "y.npy", mmap_mode="r")
        for start in range(0, info.n_samples, ds.chunk_rows):
            rows = min(ds.chunk_rows, info.n_samples - start)
            fx.seek(info.x_offset + start * info.row_bytes)
            _readinto(fx, memoryview(buf.reshape(-1).view(np.uint8))[: rows * info.row_bytes])
            sums.index_add_(0, torch.from_numpy(np.array(y[start : start + rows])), torch.from_numpy(buf[:rows]))
    return time.perf_counter() - t0


def epochs_cached_vs_evicted(path: str | os.PathLike, rounds: int = 5, batch_size: int = 1024) -> EpochTimes:
    """Epochs over a data set on disk, with its file in the page cache and evicted first (notebook 02, section 9).

    When RAM cannot hold the data set, the OS evicts its pages before the next epoch needs them, so every epoch
    reads it from the disk again. A machine with plenty of RAM keeps it cached; this function plays the small
    machine by asking the OS to drop the file before each "evicted" epoch (``posix_fadvise(POSIX_FADV_DONTNEED)``
    on Linux, ``F_NOCACHE`` reads on macOS: no root needed, nothing else is touched). The epochs alternate, cached
    then evicted, ``rounds`` times; each time is the fastest round (another program can slow an epoch, never
    speed it up). The two read speeds (the best of three cold reads, each after a drop, and the best of three
    cached reads) give two models: with the OS reading ahead, an evicted epoch takes the longer of the read and
    the cached epoch (``overlapped_seconds``); read-then-compute adds them (``additive_seconds``).
    Raises ``ValueError`` for a path that is not a data set of :func:`write_synthetic_dataset`.
    """
    info = dataset_info(path)
    rounds = _pos_int("rounds", rounds)
    x_file = info.path / "x.npy"
    method = cache_control()
    colds = [disk_read_throughput(x_file, drop_cache=True) for _ in range(3)]
    cold = max(colds, key=lambda r: r.bytes_per_second)  # the best of three: a busy core slows a read, never speeds it
    warm = max((disk_read_throughput(x_file, drop_cache=False) for _ in range(3)), key=lambda r: r.bytes_per_second)
    cached, evicted, fractions = [], [], []
    ok = all(r.cache_dropped for r in colds)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a light model: one thread, so a busy core cannot stall a thread pool
    try:
        for _ in range(rounds):
            disk_read_throughput(x_file, drop_cache=False)  # the cached epoch finds the whole file in RAM
            cached.append(_epoch(path, batch_size, evict=False))
            dropped = _drop_file_cache(x_file)
            frac = _cached_fraction(x_file)
            fractions.append(frac)
            ok = ok and dropped and (frac is None or frac < 0.05)
            evicted.append(_epoch(path, batch_size, evict=True))
    finally:
        torch.set_num_threads(threads)
    known = [f for f in fractions if f is not None]
    return EpochTimes(
        info.nbytes,
        min(cached),
        min(evicted),
        cold.bytes_per_second,
        warm.bytes_per_second,
        method,
        bool(ok) and method is not None,
        max(known) if known else None,
    )
