"""This process's memory as the operating system sees it: resident memory now and at its peak."""

from __future__ import annotations

import sys


def proc_status_bytes(key: str) -> int | None:
    """A ``kB`` field of /proc/self/status (e.g. 'VmRSS', 'VmHWM', 'VmSize') in bytes; None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def minor_faults() -> int | None:
    """This process's minor page faults so far (``resource.getrusage``): pages the OS mapped on first touch,
    zeroed. None where the operating system does not count them (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def reset_peak_rss() -> bool:
    """Reset the resident high-water mark (VmHWM) to the current RSS: Linux >= 4.0 only.

    Returns False where that is not possible; ``peak_rss_bytes`` then reports the lifetime peak.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes(since_reset: bool = True) -> int | None:
    """Peak resident memory: VmHWM (since ``reset_peak_rss``) where available and ``since_reset``,
    else the process's lifetime peak from ``getrusage``; None where neither exists (Windows)."""
    if since_reset:
        hwm = proc_status_bytes("VmHWM")
        if hwm is not None:
            return hwm
    try:
        import resource
    except ImportError:  # Windows
        return None
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)  # kB on Linux, bytes on macOS


def current_rss_bytes() -> int:
    """Resident memory right now (VmRSS, or psutil elsewhere)."""
    rss = proc_status_bytes("VmRSS")
    if rss is not None:
        return rss
    import psutil

    return int(psutil.Process().memory_info().rss)
