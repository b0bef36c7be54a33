"""What glibc's ``malloc`` takes from the OS during a training step (notebook 02, memory, section 5).

glibc (the GNU C library, whose ``malloc`` PyTorch's CPU allocator calls on most Linux systems)
keeps its own books: ``malloc_info(3)`` (glibc >= 2.10) writes, as XML, how many bytes its heaps
hold now and held at most (``system current`` / ``max``), how many of those are free blocks kept for
reuse (bins and fast bins), and how many bytes live in separate mappings (``mmap``).
:func:`malloc_counts` reads them through ``ctypes``; :func:`mlp_steps_with_heap` runs Adam steps of
the section's MLP and returns the counts before and after, with the kernel's resident bytes and torch's live
tensor bytes; :func:`held_after_steps` puts the three meters side by side: resident growth against the live
tensors plus the free bytes glibc reports keeping (meters that do not read each other).
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import tempfile
import time
import dataclasses
from dataclasses import dataclass

from .. import arguments

__all__ = [
    "HeldAfterSteps",
    "cap_arenas",
    "MallocCounts",
    "glibc_malloc_in_use",
    "held_after_steps",
    "malloc_counts",
    "mlp_steps_with_heap",
    "parse_malloc_info",
]


def cap_arenas(n: int = 2) -> bool:
    """Ask glibc for at most ``n`` malloc arenas from now on (``mallopt(M_ARENA_MAX)``, as ``MALLOC_ARENA_MAX``
    does at start-up; each extra arena reserves 64 MiB of address space, mallopt(3)), so a step under an
    address-space cap does not need more room on a machine with more cores (``limit.mlp_training_step``). False where
    the C library is not glibc."""
    n = arguments.positive_int("n", n)
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(-8, n))  # -8: M_ARENA_MAX in glibc's malloc.h
    except (OSError, AttributeError, TypeError):
        return False


@dataclass(frozen=True)
class MallocCounts:
    """glibc's own counts (``malloc_info``), in bytes, summed over its arenas: ``heap`` (held now), ``heap_max``
    (held at most so far), ``free_kept`` (free blocks kept in the heaps), ``mmapped`` (blocks in their own
    mappings now) and ``mmapped_max`` (at most so far, from ``malloc_stats``; 0 where unreadable)."""

    heap: int
    heap_max: int
    free_kept: int
    mmapped: int
    mmapped_max: int = 0

    def footprint_growth_since(self, before: MallocCounts) -> int:
        """Bytes glibc took from the OS at most since ``before`` (an upper bound: its heaps at their largest plus its
        mappings at their largest, which need not coincide)."""
        return self.heap_max - before.heap + max(self.mmapped_max, self.mmapped) - before.mmapped


def glibc_malloc_in_use() -> bool:
    """Whether this process's ``malloc`` is glibc's own (notebook 02, section 5). ``platform.libc_ver()`` says only
    which C library is linked: an allocator loaded with ``LD_PRELOAD`` (jemalloc, tcmalloc) replaces ``malloc`` and
    glibc's books then miss what it holds. Compares the ``malloc`` the process resolves with libc.so.6's own."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        used, own = ctypes.CDLL(None).malloc, ctypes.CDLL("libc.so.6").malloc
    except (OSError, AttributeError):  # pragma: no cover - no loadable C library
        return False
    address = ctypes.cast(used, ctypes.c_void_p).value
    return address is not None and address == ctypes.cast(own, ctypes.c_void_p).value


def _libc():
    if not glibc_malloc_in_use():
        return None
    try:
        libc = ctypes.CDLL(None)  # the C library this process runs on (find_library would start ldconfig)
    except OSError:  # pragma: no cover - no loadable C library
        return None
    if not hasattr(libc, "malloc_info"):  # pragma: no cover - glibc < 2.10
        return None
    libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes, libc.fclose.argtypes = [ctypes.c_int, ctypes.c_void_p], [ctypes.c_void_p]
    return libc


def parse_malloc_info(xml: str) -> MallocCounts:
    """The totals of a ``malloc_info`` XML text (the part after the last ``</heap>``)."""
    arguments.instance("xml", xml, str, "the text malloc_info wrote")
    tail = xml[xml.rfind("</heap>") :]

    def size(pattern: str) -> int:
        found = re.search(pattern, tail)
        return int(found.group(1)) if found else 0

    return MallocCounts(
        heap=size(r'<system type="current" size="(\d+)"'),
        heap_max=size(r'<system type="max" size="(\d+)"'),
        free_kept=size(r'<total type="fast" count="\d+" size="(\d+)"')
        + size(r'<total type="rest" count="\d+" size="(\d+)"'),
        mmapped=size(r'<total type="mmap" count="\d+" size="(\d+)"'),
    )


def malloc_counts() -> MallocCounts | None:
    """glibc's counts of this process's heap now (what :func:`mlp_steps_with_heap` records); None where the C
    library is not glibc (musl, macOS, Windows: their allocators keep other books)."""
    libc = _libc()
    if libc is None:
        return None
    fd, path = tempfile.mkstemp(suffix=".xml")
    os.close(fd)
    try:
        f = libc.fopen(path.encode(), b"w")
        if not f:  # pragma: no cover - fopen failed
            return None
        libc.malloc_info(0, f)
        libc.fclose(f)
        with open(path) as fh:
            counts = parse_malloc_info(fh.read())
    finally:
        os.unlink(path)
    return dataclasses.replace(counts, mmapped_max=_max_mmapped() or 0)


def mlp_steps_with_heap(
    batch_size: int,
    steps: int = 3,
    in_features: int = 512,
    hidden: int = 1024,
    depth: int = 3,
    threads: int | None = None,
) -> dict:
    """Run ``steps`` Adam steps of ``MLP(in_features, [hidden] * depth, 10)`` at ``batch_size`` and return glibc's
    counts before the model exists and after each step (notebook 02,
    section 5; ``heap_max`` after the last: the heap at its largest): ``{"before": MallocCounts | None,
    "after": [MallocCounts | None, ...], "loss": float, "seconds": [float, ...]}`` (each step's wall time),
    ``"faults"``: each step's minor page faults (pages the kernel mapped, zeroed, for the first time; None
    without ``resource.getrusage``), plus three independent meters for :func:`held_after_steps`:
    ``"rss_before"`` / ``"rss_after"`` (the kernel's
    resident bytes, ``VmRSS``; None off Linux) and ``"live_after"`` (bytes of the tensors alive after the last
    step: weights, Adam's state, the batch; counted from torch's tensors, not from glibc).
    Importable, so it runs in a capped child process (``limit.run_with_memory_limit``)."""
    for name, v in (
        ("batch_size", batch_size),
        ("steps", steps),
        ("in_features", in_features),
        ("hidden", hidden),
        ("depth", depth),
    ):
        arguments.positive_int(name, v)
    arguments.optional(arguments.positive_int, "threads", threads)
    import torch

    from ..hardware.process_memory import minor_faults, proc_status_bytes
    from ..train import train_step
    from .limit import _mlp_adam
    from .meters import storage_bytes

    if threads is not None:
        torch.set_num_threads(threads)
    rss_before, file_before = proc_status_bytes("VmRSS"), proc_status_bytes("RssFile")
    before = malloc_counts()  # before the model exists
    model, opt, batch = _mlp_adam(batch_size, in_features, hidden, depth, 10, None)
    after, loss, seconds, faults = [], 0.0, [], []
    for _ in range(steps):
        faults_before = minor_faults()
        start = time.perf_counter()
        loss = train_step(model, batch, opt).loss
        seconds.append(time.perf_counter() - start)
        faults.append(None if faults_before is None else minor_faults() - faults_before)
        after.append(malloc_counts())
    rss_after, file_after = proc_status_bytes("VmRSS"), proc_status_bytes("RssFile")
    state = [s for st in opt.state.values() for s in st.values() if torch.is_tensor(s)]
    live = storage_bytes(list(model.parameters()) + [p.grad for p in model.parameters() if p.grad is not None] + state)
    return {
        "before": before,
        "after": after,
        "loss": float(loss),
        "seconds": seconds,
        "faults": faults,
        "rss_before": rss_before,
        "rss_after": rss_after,
        "file_growth": None if None in (file_before, file_after) else file_after - file_before,
        "live_after": live + storage_bytes(list(batch)),
    }


def _max_mmapped() -> int | None:
    """glibc's ``max mmap bytes`` (``malloc_stats`` writes it to standard error, caught here)."""
    libc = _libc()
    if libc is None:
        return None
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            libc.malloc_stats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        found = re.search(rb"max mmap bytes\s*=\s*(\d+)", tmp.read())
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class HeldAfterSteps:
    """What a process holds after :func:`mlp_steps_with_heap`, by three meters that do not read each other (notebook
    02, section 5): ``resident_growth`` (the kernel: VmRSS after minus before), ``live`` (torch: bytes of the
    tensors still alive) and ``free_kept`` (glibc: growth of the free bytes ``malloc_info`` reports, its bins plus
    the top of each heap); and ``file_backed``, the part of the resident growth mapped from files (``RssFile``:
    libraries' code and data pages the steps touched first; None where the kernel does not say)."""

    resident_growth: int
    live: int
    free_kept: int
    file_backed: int | None = None

    @property
    def rest(self) -> int:
        """Resident growth that neither live tensors nor glibc's free blocks account for."""
        return self.resident_growth - self.live - max(0, self.free_kept)

    @property
    def over_model(self) -> float:
        """Resident growth / (live tensors + free blocks glibc keeps): about 1 when the model holds."""
        return self.resident_growth / (self.live + self.free_kept)

    @property
    def over_live(self) -> float:
        """Resident growth / live tensors: the model that says glibc keeps nothing."""
        return self.resident_growth / self.live


def held_after_steps(value: dict | None) -> HeldAfterSteps | None:
    """The three meters of one :func:`mlp_steps_with_heap` result; None where one is missing (not Linux, not glibc,
    the child failed)."""
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"value must be the dict mlp_steps_with_heap returned, or None; got {type(value).__name__}")
    if not value:
        return None
    before, after = value.get("before"), (value.get("after") or [None])[-1]
    rss = value.get("rss_before"), value.get("rss_after")
    if before is None or after is None or None in rss or not value.get("live_after"):
        return None
    return HeldAfterSteps(
        rss[1] - rss[0], value["live_after"], after.free_kept - before.free_kept, value.get("file_growth")
    )
