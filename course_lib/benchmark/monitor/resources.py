"""Resource use sampled during a run: CPU, memory, and GPU where present (notebook 07.2)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch

from ... import arguments, models, train
from ...cpu import limit_threads
from ...hardware import as_device, synchronize
from ...seeds import seed_everything

MIB = 2**20


def data_dir(name: str = "monitor") -> Path:
    """A folder under the system's temporary directory for the monitoring lesson's traces and logs."""
    path = Path(tempfile.gettempdir()) / "course-07-2" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Sample:
    """One reading: ``t`` seconds after the sampler started."""

    t: float
    process_cpu_percent: float  # this process, % of one core (2 busy threads: ~200)
    core_percent: tuple[float, ...]  # every core of the machine, % busy (any program)
    rss_bytes: int  # this process's resident memory
    system_used_bytes: int  # the whole machine's used memory
    gpu_allocated_bytes: int | None = None  # torch.cuda.memory_allocated (CUDA only)
    gpu_util_percent: float | None = None  # torch.cuda.utilization / nvidia-smi (CUDA only)


def _gpu_utilization_reader(device: torch.device) -> Callable[[], float] | None:
    """A function that returns ``device``'s utilisation in %, or None.

    First ``torch.cuda.utilization(device)`` (NVML through nvidia-ml-py; it maps the torch index to
    the physical GPU under ``CUDA_VISIBLE_DEVICES``); without it, ``nvidia-smi`` asked about the
    device by its UUID, which names the same physical GPU whatever ``CUDA_VISIBLE_DEVICES`` says.
    """
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device, got {type(device).__name__}")
    try:
        torch.cuda.utilization(device)
        return lambda: torch.cuda.utilization(device)
    except Exception:  # no nvidia-ml-py (ModuleNotFoundError), no NVML driver, a ROCm build without amdsmi
        pass
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
    except Exception:
        return None
    gpu_id = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"

    def read() -> float:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", f"--id={gpu_id}"],
            capture_output=True,
            text=True,
            timeout=2,
        ).stdout
        return float(out.strip().splitlines()[0])

    return read


class ResourceSampler:
    """Sample CPU, memory and GPU use in a background thread while the ``with`` block runs.

    For example::

        with ResourceSampler(interval=0.1) as rs:
            train.fit(...)
        rs.summary()          # means, peaks, the RSS growth; GPU fields say why they are absent

    CPU percentages are CPU time between two samples over the wall time between them: averages over each
    interval, unaffected by other callers of ``psutil.cpu_percent``. This process's CPU time comes from
    ``time.process_time()`` (on Linux the kernel's count of every thread's run time, to the nanosecond), so
    even the last, short interval reads true there: at most 100 % per core. The per-core figures come from the
    system's counters
    (``psutil.cpu_times``), which advance in 10 ms ticks: a 0.1 s sample can read 10-20 % off, a shorter
    one more; ``summary()``'s means are over the whole run.
    """

    def __init__(self, interval: float = 0.1, device: torch.device | str | None = None) -> None:
        self.interval = arguments.number("interval", interval, minimum=0.01, maximum=60)
        self.device = as_device(device) if device is not None else torch.device("cpu")
        self.samples: list[Sample] = []
        self.gpu_why = self._gpu_why()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process()
        self._start: tuple = ()
        self._end: tuple | None = None
        self.held: tuple[int, bool] | None = None  # measure_held's (bytes, allocator trimmed)

    def _gpu_why(self) -> str | None:
        """None when GPU utilisation can be read; otherwise why not (and ``self._util`` is unset)."""
        self._util = None
        if self.device.type != "cuda":
            return f"no GPU readings: the device is {self.device.type}, not CUDA"
        self._util = _gpu_utilization_reader(self.device)
        if self._util is None:
            return (
                "GPU memory from torch.cuda; no utilisation: torch.cuda.utilization needs nvidia-ml-py "
                "(pip install nvidia-ml-py) and nvidia-smi is not on PATH"
            )
        return None

    def _gpu_util(self) -> float | None:
        if self._util is None:
            return None
        try:
            return float(self._util())
        except Exception:  # a failed reading is a missing sample, never a crash of the sampling thread
            return None

    def _counters(self) -> tuple[float, float, list[tuple[float, float]]]:
        """(wall clock, this process's CPU seconds, [(busy, total) CPU seconds of every core])."""
        # time.process_time: every thread of this process, to the nanosecond on Linux (psutil's process counters,
        # read from /proc, advance in 10 ms ticks: over a 20 ms interval one tick more reads 50 % high); read
        # right beside the wall clock, before anything that may hand the interpreter to another thread
        wall, cpu = time.perf_counter(), time.process_time()
        cores = [
            (c.user + c.system + getattr(c, "nice", 0) + getattr(c, "irq", 0) + getattr(c, "softirq", 0), sum(c))
            for c in psutil.cpu_times(percpu=True)
        ]
        return wall, cpu, cores

    def _sample(self, prev: tuple, now: tuple) -> Sample:
        core_pct = tuple(
            100.0 * max(0.0, b - b0) / max(tot - tot0, 1e-9) for (b, tot), (b0, tot0) in zip(now[2], prev[2])
        )
        gpu_alloc = torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else None
        return Sample(
            now[0] - self._start[0],
            100.0 * (now[1] - prev[1]) / max(now[0] - prev[0], 1e-9),
            core_pct,
            self._proc.memory_info().rss,
            psutil.virtual_memory().used,
            gpu_alloc,
            self._gpu_util(),
        )

    def _run(self) -> None:
        prev = self._start
        while not self._stop.wait(self.interval):
            now = self._counters()
            self.samples.append(self._sample(prev, now))
            prev = now
        self._end = self._counters()
        self.samples.append(self._sample(prev, self._end))  # the last, partial interval

    def __enter__(self) -> ResourceSampler:
        self._start, self._end = self._counters(), None  # the baseline is read before the measured work starts
        self.samples = [
            Sample(
                0.0,
                0.0,
                tuple(0.0 for _ in self._start[2]),
                self._proc.memory_info().rss,
                psutil.virtual_memory().used,
                torch.cuda.memory_allocated(self.device) if self.device.type == "cuda" else None,
            )
        ]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="course-resource-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def measure_held(self) -> int:
        """After the run: this process's RSS now, once the C allocator has handed back the memory it caches
        (``release_free_memory``), minus the RSS at the start. What the objects still alive hold (a model and
        its optimizer state, say), without the temporaries the peak also counts. Recorded in ``summary()`` as
        ``rss_held_bytes``, with ``allocator_trimmed``: False where the allocator cannot be asked (not Linux
        with glibc), and then the figure also holds whatever it keeps cached."""
        if len(self.samples) < 2 or self._end is None:
            raise ValueError("measure_held comes after the run: use it after `with ResourceSampler() as rs: ...`")
        trimmed = release_free_memory()
        self.held = (self._proc.memory_info().rss - self.samples[0].rss_bytes, trimmed)
        return self.held[0]

    def series(self, field_name: str) -> list:
        """One field of every sample, e.g. ``series("rss_bytes")``."""
        names = [f for f in Sample.__dataclass_fields__]
        arguments.choice("field_name", field_name, names)
        return [getattr(s, field_name) for s in self.samples]

    def summary(self) -> dict[str, Any]:
        """Duration, mean and peak CPU use of this process (% of one core), the machine's mean CPU use
        (% of all its cores) and the cores other programs kept busy, RSS at start, peak and end (and its
        growth), what ``measure_held`` found held after the run (None until it is called), system memory;
        GPU memory and utilisation, or ``gpu`` saying why they are absent."""
        if len(self.samples) < 2 or self._end is None:
            raise ValueError("no samples yet: use the sampler as `with ResourceSampler() as rs: ...` around a run")
        s = self.samples[1:]  # the first reading is the baseline, with no CPU interval behind it
        wall = self._end[0] - self._start[0]
        rss = [x.rss_bytes for x in self.samples]
        out = {
            "seconds": wall,
            "samples": len(self.samples),
            "process_cpu_mean_percent": 100.0 * (self._end[1] - self._start[1]) / max(wall, 1e-9),
            "process_cpu_max_percent": max(x.process_cpu_percent for x in s),
            "machine_cpu_mean_percent": 100.0
            * sum(b - b0 for (b, _), (b0, _) in zip(self._end[2], self._start[2]))
            / max(sum(t - t0 for (_, t), (_, t0) in zip(self._end[2], self._start[2])), 1e-9),
            "rss_start_bytes": rss[0],
            "rss_peak_bytes": max(rss),
            "rss_end_bytes": rss[-1],
            "rss_growth_bytes": max(rss) - rss[0],
            "rss_held_bytes": self.held[0] if self.held else None,
            "allocator_trimmed": self.held[1] if self.held else None,
            "system_used_peak_bytes": max(x.system_used_bytes for x in self.samples),
            "cores": len(self._start[2]),
            "gpu": self.gpu_why or "GPU memory from torch.cuda, utilisation from NVML (nvidia-smi's counter)",
        }
        # cores kept busy by other programs: the machine's busy core-seconds minus this process's
        out["other_programs_cores"] = max(
            0.0, out["machine_cpu_mean_percent"] * out["cores"] / 100 - out["process_cpu_mean_percent"] / 100
        )
        if self.device.type == "cuda":
            out["gpu_allocated_peak_bytes"] = max(x.gpu_allocated_bytes or 0 for x in self.samples)
            utils = [x.gpu_util_percent for x in s if x.gpu_util_percent is not None]
            out["gpu_util_mean_percent"] = sum(utils) / len(utils) if utils else None
        return out


def release_free_memory() -> bool:
    """Collect garbage and hand memory the C allocator keeps cached back to the system (glibc's
    ``malloc_trim``), so that an RSS measurement starts from what is really in use. Returns whether
    the allocator could be asked (Linux with glibc); elsewhere only the garbage is collected."""
    import ctypes
    import gc
    import sys

    gc.collect()
    if not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def sample_training(
    threads: int,
    *,
    width: int = 2048,
    steps: int = 8,
    batch: int = 256,
    interval: float = 0.1,
    seed: int = 0,
    device: torch.device | str | None = None,
    optimizer: str = "adam",
) -> tuple[ResourceSampler, int]:
    """Build an MLP 1024 -> width -> width -> 10 and train it ``steps`` steps with Adam (or, with
    ``optimizer="sgd"``, plain SGD, which keeps no state) on random data, on ``threads`` threads, inside a
    ``ResourceSampler`` (notebook 07.2, "Resource use during a run").

    The model and its optimizer are created inside the sampled block, after ``release_free_memory``,
    so the resident memory's growth holds the weights, gradients, Adam's two moments and whatever
    the steps need on top. A tiny model is trained once first, so one-time set-up (kernels, thread
    pools) is not counted. After the run, with the model and optimizer still alive, ``measure_held``
    records what they hold (``summary()["rss_held_bytes"]``): the gradients are released after each
    step, so that is the weights and, with Adam, its two moments. Returns the sampler and the model's
    parameter count.
    """
    threads = arguments.positive_int("threads", threads)
    width = arguments.positive_int("width", width)
    steps = arguments.positive_int("steps", steps)
    batch = arguments.positive_int("batch", batch)
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    device = as_device(device) if device is not None else torch.device("cpu")
    seed_everything(seed)
    x, y = torch.randn(batch, 1024, device=device), torch.randint(0, 10, (batch,), device=device)
    with limit_threads(threads):
        tiny = models.MLP(1024, [8, 8], 10).to(device)
        train.train_step(tiny, (x, y), torch.optim.Adam(tiny.parameters()))
        del tiny
        release_free_memory()
        with ResourceSampler(interval, device) as rs:
            model = models.MLP(1024, [width, width], 10).to(device)
            opt = (
                torch.optim.Adam(model.parameters(), lr=1e-4)
                if optimizer == "adam"
                else torch.optim.SGD(model.parameters(), lr=1e-4)
            )
            for _ in range(steps):
                train.train_step(model, (x, y), opt)
            synchronize(device)
        rs.measure_held()  # the model and its optimizer still alive: weights and state, no temporaries
    n = models.count_parameters(model)
    del model, opt
    release_free_memory()
    return rs, n
