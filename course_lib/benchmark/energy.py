"""Energy used while code runs, where the machine reports it (notebook 07.1, "Energy to train").

Two sources, tried in this order:

* **nvidia-smi** on a CUDA GPU: the board's power draw (``power.draw``, watts), sampled on a
  background thread every ``interval`` seconds and integrated over the measured windows. It is the
  GPU board only: the CPU, memory and disks of the host are not in it.
* **RAPL** on Linux (Intel, and AMD since Zen): the CPU package's energy counters in
  ``/sys/class/powercap/intel-rapl:N/energy_uj`` (microjoules since some moment). The counter
  wraps around at ``max_energy_range_uj``; a difference across a wrap is corrected. Since 2020
  Linux lets only root read these files (a side channel could leak secrets through them), and
  most virtual machines and containers do not expose them at all.

Everything else (macOS, Windows, a cloud VM, a counter you may not read) gives
``{"available": False, "why": "<the reason>"}``: a benchmark then reports no energy rather than
a guess. :class:`EnergyMeter` measures one or more windows::

    meter = EnergyMeter(device)
    with meter.window():
        train()
    meter.result()   # {"available", "source", "joules", "seconds", "why"}
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from .. import arguments
from ..hardware import as_device

__all__ = [
    "EnergyMeter",
]

#: Where Linux exposes RAPL (tests point it at a fake directory).
_RAPL_ROOT = Path("/sys/class/powercap")


def _not_available(why: str) -> dict:
    """The energy record of a machine that reports none (``why`` says which reason)."""
    why = arguments.text("why", why)
    return {"available": False, "source": None, "joules": None, "seconds": None, "why": why}


def _rapl_domains(root: Path | str | None = None) -> list[Path]:
    """The top-level RAPL package domains (``intel-rapl:0``, ``intel-rapl:1``, ...) under ``root``.

    Sub-domains (``intel-rapl:0:0``: cores, uncore, DRAM) are parts of a package and are left out,
    and so is a top-level ``psys`` domain (the whole platform, package included, on many Intel
    laptops): only domains named ``package-N`` count (or unnamed ones), so adding them up never
    counts a joule twice.
    """
    base = Path(root) if root is not None else _RAPL_ROOT
    if not base.is_dir():
        return []

    def is_package(p: Path) -> bool:
        try:
            name = (p / "name").read_text().strip()
        except OSError:
            return True  # no name file: an old kernel's package domain
        return name.startswith("package")

    return sorted(
        (
            p
            for p in base.iterdir()
            if p.name.startswith("intel-rapl:")
            and p.name.count(":") == 1
            and (p / "energy_uj").exists()
            and is_package(p)
        ),
        key=lambda p: p.name,
    )


def _read_rapl(root: Path | str | None = None) -> dict[str, tuple[int, int]]:
    """``{domain: (energy_uj, max_energy_range_uj)}`` for every package domain.

    Raises ``PermissionError`` when a counter exists but may not be read (Linux >= 5.10 as a normal
    user) and ``OSError``/``ValueError`` for an unreadable or garbled file.
    """
    out = {}
    for domain in _rapl_domains(root):
        energy = int((domain / "energy_uj").read_text().strip())
        limit_file = domain / "max_energy_range_uj"
        limit = int(limit_file.read_text().strip()) if limit_file.exists() else 0
        out[domain.name] = (energy, limit)
    return out


def _counter_delta(before: int, after: int, max_range: int) -> int:
    """Microjoules between two readings of a counter that wraps to 0 after ``max_range``.

    ``_counter_delta(max_range - 10, 5, max_range)`` is 16 (10 to the top, 1 to wrap, 5 after). A
    counter that went backwards without a known range is reported as 0 rather than negative.
    """
    if after >= before:
        return after - before
    return (max_range - before + after + 1) if max_range > 0 else 0


def _rapl_status(root: Path | str | None) -> tuple[bool, str]:
    base = Path(root) if root is not None else _RAPL_ROOT
    if not base.is_dir():
        return False, (
            f"no RAPL energy counters ({base} does not exist: not Linux, or a virtual machine or "
            "container that does not expose them)"
        )
    if not _rapl_domains(base):
        return False, f"no RAPL package domain (intel-rapl:N/energy_uj) under {base}"
    try:
        _read_rapl(base)
    except PermissionError:
        return False, (
            f"RAPL counters exist under {base} but this user may not read them (Linux allows only root "
            "since 2020); run as root or `sudo chmod o+r .../energy_uj` on your own machine"
        )
    except (OSError, ValueError) as exc:
        return False, f"RAPL counters under {base} could not be read: {type(exc).__name__}: {exc}"
    return True, (
        "RAPL: CPU package energy counters (the processor and its memory controller; not the whole "
        "machine, not the disks or fans)"
    )


def _nvidia_smi_id(index: int) -> str:
    """The GPU's UUID for ``nvidia-smi --id``: torch's index follows ``CUDA_VISIBLE_DEVICES`` and CUDA's
    own order, nvidia-smi's index the PCI order, so the index alone can name another GPU."""
    index = arguments.nonnegative_int("index", index)
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # an older torch without the uuid property: the index is right without CUDA_VISIBLE_DEVICES
        return str(index)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


class _PowerSampler:
    """``nvidia-smi ... --loop-ms=N`` running in the background; keeps (time, watts) samples.

    ``power.draw`` is the board's power as the driver reports it (averaged over up to a second on recent
    drivers), so windows much shorter than a second are estimates."""

    def __init__(self, index: int, interval: float) -> None:
        cmd = [
            "nvidia-smi",
            "--query-gpu=power.draw",
            "--format=csv,noheader,nounits",
            f"--id={_nvidia_smi_id(index)}",
            f"--loop-ms={max(20, int(interval * 1000))}",
        ]
        self.samples: list[tuple[float, float]] = []
        self.bad_line: str | None = None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.samples.append((time.perf_counter(), float(line.strip())))
            except ValueError:  # "[N/A]" or "[Not Supported]"
                self.bad_line = line.strip()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=2)
        self.thread.join(timeout=2)

    def joules(self, t0: float, t1: float) -> float | None:
        inside = [w for t, w in self.samples if t0 <= t <= t1]
        if not inside:  # a window shorter than the sampling interval: the nearest sample before its end
            before = [w for t, w in self.samples if t <= t1]
            inside = before[-1:]
        return sum(inside) / len(inside) * (t1 - t0) if inside else None


class EnergyMeter:
    """Energy over one or more windows of a run.

    ``device``: a CUDA device uses nvidia-smi (GPU board power), anything else RAPL (CPU package).
    ``rapl_root`` overrides where RAPL is read (tests use a fake directory). Use :meth:`window` as a
    context manager around the work to measure, as often as you like; :meth:`result` adds them up.
    Call :meth:`close` (or use the meter itself as a context manager) to stop a power sampler.
    """

    def __init__(
        self, device: torch.device | str | None = None, *, rapl_root: Path | str | None = None, interval: float = 0.1
    ) -> None:
        self.device = as_device(device)
        self.rapl_root = rapl_root
        self.joules = 0.0
        self.seconds = 0.0
        self.windows = 0
        self._sampler: _PowerSampler | None = None
        self.source: str | None = None
        if self.device.type == "cuda":
            if shutil.which("nvidia-smi") is None:
                self.available, self.why = False, "a CUDA GPU without the nvidia-smi tool on PATH: no power reading"
            else:
                index = self.device.index if self.device.index is not None else torch.cuda.current_device()
                self._sampler = _PowerSampler(index, interval)
                self.available, self.source = True, "nvidia-smi"
                self.why = (
                    "nvidia-smi power.draw: the GPU board's power, sampled every "
                    f"{interval:g} s and integrated; the host CPU and memory are not included"
                )
        else:
            self.available, self.why = _rapl_status(rapl_root)
            if self.available:
                self.source = "rapl"

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        """Measure the energy of the ``with`` block (added to the meter's total)."""
        if not self.available:
            yield
            return
        before = _read_rapl(self.rapl_root) if self.source == "rapl" else None
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t1 = time.perf_counter()
            self._add(before, t0, t1)

    def _add(self, before: dict | None, t0: float, t1: float) -> None:
        if self.source == "rapl":
            try:
                after = _read_rapl(self.rapl_root)
            except (OSError, ValueError) as exc:
                self.available, self.why = False, f"RAPL counters stopped being readable: {exc}"
                return
            uj = sum(_counter_delta(before[d][0], after[d][0], after[d][1]) for d in after if d in before)
            self.joules += uj / 1e6
        else:
            assert self._sampler is not None
            time.sleep(0)  # let the reader thread take a line that is already waiting
            j = self._sampler.joules(t0, t1)
            if j is None:
                return
            self.joules += j
        self.seconds += t1 - t0
        self.windows += 1

    def result(self) -> dict:
        """``{"available", "source", "joules", "seconds", "why"}`` over every window so far."""
        if self._sampler is not None and self._sampler.bad_line is not None and not self._sampler.samples:
            self.available, self.why = False, f"nvidia-smi reports no power draw here ({self._sampler.bad_line})"
        if not self.available:
            return _not_available(self.why)
        if self.windows == 0:
            return {
                "available": True,
                "source": self.source,
                "joules": None,
                "seconds": 0.0,
                "why": self.why + "; nothing was measured yet",
            }
        return {
            "available": True,
            "source": self.source,
            "joules": self.joules,
            "seconds": self.seconds,
            "why": self.why,
        }

    def close(self) -> None:
        """Stop the power sampler, if one runs."""
        if self._sampler is not None:
            self._sampler.close()

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
