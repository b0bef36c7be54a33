"""Reading the results to compare: the files the paths name, each one read or skipped with the reason, the
results' labels (made unique), and how many kinds of hardware they come from."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ..benchmark.results import ResultError, load_result


def _files(paths) -> list[Path]:
    """Files and folders (a folder: its ``*.json``, sorted), each file once, in the order given."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not isinstance(paths, Iterable):
        raise TypeError(f"paths must be a file or folder (str or Path) or a list of them, got {type(paths).__name__}")
    out, seen = [], set()
    for p in paths:
        if not isinstance(p, (str, Path)):
            raise TypeError(f"paths must hold str or Path entries, got {type(p).__name__} {p!r}")
        p = Path(p)
        inside = [f for f in sorted(p.glob("*.json")) if not f.is_dir()] if p.is_dir() else []
        for f in inside or [p]:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def _read(path: Path) -> tuple[dict | None, str | None]:
    """(result, None) or (None, why it was skipped). ``load_result`` does the checking; its message starts
    with the file's name, which the "skipped <file>: <reason>" line already shows."""
    if path.is_dir():
        return None, "the folder holds no .json files"
    if not path.exists():
        return None, "no such file or folder"
    try:
        return load_result(path), None
    except ResultError as exc:
        why = str(exc)
        return None, why[len(f"{path}: ") :] if why.startswith(f"{path}: ") else why


def _labels(results: Sequence[dict]) -> list[str]:
    """Each result's label, made unique: a second 'laptop' becomes 'laptop (2)'; a missing one is 'machine <i>'."""
    raw = []
    for i, r in enumerate(results, 1):
        label = " ".join(str(r.get("label") or "").split())
        raw.append(label or f"machine {i}")
    taken, out = set(raw), []
    counts: dict[str, int] = {}
    for label in raw:
        counts[label] = counts.get(label, 0) + 1
        if counts[label] == 1:
            out.append(label)
            continue
        n = counts[label]
        while f"{label} ({n})" in taken:
            n += 1
        counts[label] = n
        out.append(f"{label} ({n})")
        taken.add(out[-1])
    return out


def _hardware_key(result: dict) -> tuple:
    """What stays the same between two runs on one machine: platform, CPU, cores, RAM and accelerators (not the
    thread count, the usable cores or the free memory, which a run's settings or other programs change)."""
    hw = result.get("hardware") if isinstance(result.get("hardware"), dict) else {}
    cpu = hw.get("cpu") if isinstance(hw.get("cpu"), dict) else {}
    accs = hw.get("accelerators") if isinstance(hw.get("accelerators"), list) else []
    return (
        str(hw.get("platform")),
        str(cpu.get("model")),
        str(cpu.get("architecture")),
        str(cpu.get("physical_cores")),
        str(cpu.get("logical_cores")),
        str(hw.get("ram_bytes")),
        tuple(sorted(str(a.get("name")) for a in accs if isinstance(a, dict))),
    )


def hardware_count(results: Sequence[dict]) -> int:
    """How many different hardware descriptions the results hold (platform, CPU model, cores, RAM and
    accelerators): 1 when every result comes from one machine, e.g. at different settings or with another
    program running. Two machines of the same model count as one."""
    return len({_hardware_key(r) for r in results})


def _compared(n_results: int, n_hardware: int) -> str:
    """'2 results on the same hardware', '3 machines', or '3 results from 2 kinds of hardware'."""
    if n_results == 1:
        return "1 result"
    if n_hardware == 1:
        return f"{n_results} results on the same hardware"
    if n_hardware == n_results:
        return f"{n_results} machines"
    return f"{n_results} results from {n_hardware} kinds of hardware"
