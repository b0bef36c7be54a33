"""The page cache, from an unprivileged program: keep a file out of it, ask how much of a file it holds, and time
a read from the disk beside a read from memory (:func:`disk_read_throughput`). ``memory.streaming`` re-exports
these; its epochs with the data set cached and evicted are built on them."""

from __future__ import annotations

import mmap
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import arguments

__all__ = ["EpochTimes", "ReadThroughput", "cache_control", "disk_read_throughput", "drop_file_cache"]

MiB = 2**20


def cache_control() -> str | None:
    """How this OS lets an unprivileged program keep a file out of its page cache:
    ``"posix_fadvise"`` (Linux: drop a file's cached pages), ``"F_NOCACHE"`` (macOS: reads through a file
    descriptor bypass the cache), or None (Windows: no such call from Python; nothing is dropped)."""
    if hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED"):
        return "posix_fadvise"
    try:
        import fcntl
    except ImportError:
        return None
    return "F_NOCACHE" if hasattr(fcntl, "F_NOCACHE") else None


def _nocache(fd: int) -> bool:
    """macOS: turn the page cache off for reads through ``fd`` (``fcntl(F_NOCACHE)``)."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_NOCACHE, 1)
        return True
    except (ImportError, AttributeError, OSError):
        return False


def _fadvise_dontneed(fd: int, offset: int = 0, length: int = 0) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return _nocache(fd)
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False


def drop_file_cache(path: str | os.PathLike) -> bool:
    """Ask the OS to drop ``path`` from the page cache (flushes it first). False where unsupported.

    Call it before timing a "cold" read. It is a request: check the result with
    :func:`_cached_fraction`.
    """
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
        except OSError:
            pass
        return _fadvise_dontneed(fd)
    finally:
        os.close(fd)


def _cached_fraction(path: str | os.PathLike) -> float | None:
    """Fraction of ``path``'s pages now in the page cache (Linux ``mincore``), or None if unknown.

    Shows whether the next read will come from RAM or from the disk.
    """
    if not sys.platform.startswith(("linux", "darwin")):
        return None
    import ctypes

    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            n_pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * n_pages)()
            if libc.mincore(addr, size, vec) != 0:
                return None
            return float(np.frombuffer(vec, dtype=np.uint8).__and__(1).sum()) / n_pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ReadThroughput:
    """Result of :func:`disk_read_throughput`."""

    bytes_per_second: float
    nbytes: int
    seconds: float
    cache_dropped: bool  # the drop request succeeded and (where measurable) < 5% stayed cached
    cached_fraction_before: float | None  # share of the file in the page cache when the read began


def disk_read_throughput(path: str | os.PathLike, block_size: int = 8 * MiB, drop_cache: bool = True) -> ReadThroughput:
    """Read ``path`` sequentially once and return the speed.

    Page-cache caveat: a file you just wrote (or read) is still in RAM, and reading it again
    measures memory, not the disk. With ``drop_cache=True`` the function first flushes the file and
    asks the OS to drop it from the cache (``posix_fadvise(POSIX_FADV_DONTNEED)``, Linux);
    ``cache_dropped`` says whether that worked and ``cached_fraction_before`` how much of the file
    was still cached when the read began. Use ``drop_cache=False`` right after a first read to see
    the cached (RAM) speed.
    """
    block_size = arguments.positive_int("block_size", block_size)
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path must be an existing file, got {p}")
    dropped = drop_file_cache(p) if drop_cache else False
    frac = _cached_fraction(p)
    if dropped and frac is not None:
        dropped = frac < 0.05
    buf = bytearray(block_size)
    view = memoryview(buf)
    total = 0
    t0 = time.perf_counter()
    with open(p, "rb", buffering=0) as f:
        while True:
            n = f.readinto(view)
            if not n:
                break
            total += n
    seconds = time.perf_counter() - t0
    return ReadThroughput(total / seconds if seconds > 0 else float("inf"), total, seconds, dropped, frac)


_drop_file_cache = drop_file_cache  # the name the streaming module and its tests use


@dataclass(frozen=True)
class EpochTimes:
    """Result of ``streaming.epochs_cached_vs_evicted``: seconds per epoch (the fastest round) with the file in
    the page cache and evicted before each epoch, and the two sequential read speeds of the file."""

    nbytes: int
    cached_seconds: float
    evicted_seconds: float
    disk_bytes_per_second: float
    cache_bytes_per_second: float
    method: str | None  # cache_control() on this OS
    evicted: bool  # every evicted epoch started with under 5 % of the file cached (where that can be measured)
    cached_fraction_before: float | None  # the largest share of the file cached when an evicted epoch began

    @property
    def slowdown(self) -> float:
        """Evicted epoch time / cached epoch time."""
        return self.evicted_seconds / self.cached_seconds

    @property
    def predicted_extra_seconds(self) -> float:
        """The disk model: the bytes re-read at the disk's speed instead of the cache's."""
        return self.nbytes / self.disk_bytes_per_second - self.nbytes / self.cache_bytes_per_second

    @property
    def extra_over_predicted(self) -> float:
        """(evicted - cached) epoch time / the disk model's extra time."""
        return (self.evicted_seconds - self.cached_seconds) / self.predicted_extra_seconds

    @property
    def read_seconds(self) -> float:
        """The file read once at the disk's speed."""
        return self.nbytes / self.disk_bytes_per_second

    @property
    def overlapped_seconds(self) -> float:
        """The read-ahead model of an evicted epoch: the longer of the disk read and the cached epoch (the OS reads
        the next chunk while the step computes on this one)."""
        return max(self.read_seconds, self.cached_seconds)

    @property
    def additive_seconds(self) -> float:
        """The no-overlap model: the cached epoch plus the disk model's extra time (read, then compute)."""
        return self.cached_seconds + self.predicted_extra_seconds

    @property
    def predicted_slowdown(self) -> float:
        """The read-ahead model's evicted / cached epoch time."""
        return self.overlapped_seconds / self.cached_seconds

    @property
    def over_overlapped(self) -> float:
        """Measured evicted epoch / the read-ahead model's: about 1 when the model holds."""
        return self.evicted_seconds / self.overlapped_seconds

    def why_not_judged(self, least_slowdown: float = 1.5) -> str:
        """Why the memory lesson (section 9) cannot judge these epochs here; "" where it can."""
        if self.method is None:
            return (
                "this OS (Windows) gives Python no way to keep a file out of its page cache, so both epochs read RAM."
            )
        if not self.evicted:
            share = f"{self.cached_fraction_before:.0%}" if self.cached_fraction_before is not None else "part"
            return (
                f"the OS kept the file cached ({share} when an evicted epoch began; a folder in RAM, tmpfs, does that)."
            )
        if self.predicted_slowdown < least_slowdown:
            return (
                "this disk reads the file about as fast as the step computes (a fast SSD, or a virtual disk cached "
                "by its host): eviction costs little here."
            )
        return ""
