"""One lesson run as one JSON file: its guesses, values and claims under their keys, and the machine it ran on.

A learner writes it with the last cell of a lesson (:func:`save`), or with ``course run-file NOTEBOOK.ipynb`` from
a notebook saved with its outputs. The atlas of recorded runs (``tables/atlas/``) and the class page are made of
such files. Nothing personal goes in: no user or host name, no path; the label is what the learner types.

Files from other machines are read by :func:`load_run`, which never trusts them: size, encoding, nesting depth,
types, finite numbers, key rules and string lengths are checked, and a file whose claims disagree with their own
bounds (an edited value) is refused with the reason.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from .. import record
from ..files import write_atomic

__all__ = [
    "RUN_MIME",
    "FORMAT",
    "LESSONS",
    "RunFileError",
    "machine",
    "kind_of",
    "build_run",
    "save",
    "load_run",
    "check_run",
    "run_from_notebook",
    "runs_folder",
]

RUN_MIME = "application/vnd.course.run+json"
FORMAT = "course-run"
VERSION = 1

#: Lesson number -> notebook name (the lessons' run files name both).
LESSONS = {
    "00": "00_setup",
    "01": "01_processing_units",
    "02": "02_memory",
    "03": "03_interconnect",
    "04": "04_training_tricks",
    "05.1": "05_1_pruning",
    "05.2": "05_2_quantization",
    "05.3": "05_3_distillation_lowrank_layers",
    "05.4": "05_4_compression_compared",
    "06.1": "06_1_data_parallel",
    "06.2": "06_2_model_pipeline_parallel",
    "06.3": "06_3_fault_tolerance",
    "06.4": "06_4_torchrun_orchestration",
    "06.5": "06_5_federated_and_cloud",
    "07.1": "07_1_benchmarking",
    "07.2": "07_2_monitoring",
    "07.3": "07_3_choosing_hardware",
}

# settings that hold PyTorch's CPU kernels below what the CPU has; a run made under them says so
HOLDS = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "FBGEMM_ENABLE_INSTRUCTIONS",
    "MKL_ENABLE_INSTRUCTIONS",
)

MAX_BYTES = 1_000_000  # a run file is a few kB
MAX_ENTRIES = 400
MAX_TEXT = 400
MAX_LABEL = 60
_KINDS = ("value", "guess", "claim")
_STATUSES = ("held", "not held", "not judged")


#: Why a claim the atlas knows for the lesson is missing from a run: the learner may not have reached it, or (often)
#: this machine takes another branch where the claim does not apply (a GPU-only check, a CPU without VNNI).
NOT_REACHED = (
    "not judged in this session: its cell did not run, or this machine takes another branch where the claim does "
    "not apply"
)


class RunFileError(ValueError):
    """A run file that cannot be used: the message says which file and why."""


# ----------------------------------------------------------------------------------------------
# the machine


def machine() -> dict:
    """This machine as a run file records it: CPU model, ISA level PyTorch's kernels use, bf16 mode, cores, free
    cores, accelerator, torch, platform and OS, and any setting that holds the kernels below the CPU's level."""
    import sys

    import torch

    from ..cpu import profile
    from ..hardware import detect

    info = detect()
    plan = profile().plan
    return {
        "cpu": info.cpu.model,
        "architecture": info.cpu.architecture,
        "isa": info.cpu.torch_capability,
        "bf16": plan.bf16,
        "bf16_units": bool(info.cpu.native_bf16),
        "cores": info.cpu.physical_cores,
        "free_cores": plan.free_cores,
        "busy": bool(plan.busy),
        "accelerator": ", ".join(a.name for a in info.accelerators) or "none",
        "torch": torch.__version__,
        "platform": info.platform,
        "os": info.os,
        "held": {k: os.environ[k] for k in HOLDS if os.environ.get(k)},
        "course": str(getattr(sys.modules.get("course_lib"), "__version__", "")),
    }


def _short_cpu(model: str) -> str:
    text = re.sub(r"\((R|TM|tm|r)\)|\bCPU\b|\bProcessor\b|@.*$|\d+-Core", " ", str(model))
    return " ".join(text.split())[:40] or "unknown CPU"


def kind_of(m: dict) -> str:
    """The machine kind runs are grouped by: CPU, kernel level, bf16 mode, cores, accelerator (not the load, which
    :func:`state_of` says)."""
    if not isinstance(m, dict):
        raise TypeError(f"m must be a run file's machine (a dict), got {type(m).__name__}")
    isa = f"{m.get('isa') or '?'} kernels" + (" (forced, same chip)" if m.get("held") else "")
    cores = m.get("cores")
    # the CPU's fixed facts, not the bf16 speed measured at the start (a busy core can change that reading)
    units = m.get("bf16_units")
    bf16 = f"bf16 {m.get('bf16', '?')}" if units is None else ("native bf16" if units else "no native bf16")
    parts = [_short_cpu(m.get("cpu", "")), isa, bf16, f"{cores} cores"]
    accel = m.get("accelerator") or "none"
    if accel != "none":
        parts.append(str(accel)[:40])
    return " · ".join(parts)


def state_of(m: dict) -> str:
    """'idle' or 'busy (1 of 2 cores free)'."""
    if not isinstance(m, dict):
        raise TypeError(f"m must be a run file's machine (a dict), got {type(m).__name__}")
    if not m.get("busy"):
        return "idle"
    return f"busy ({m.get('free_cores')} of {m.get('cores')} cores free)"


# ----------------------------------------------------------------------------------------------
# writing


def _clean_label(label: Any) -> str:
    if label is None:
        return ""
    if not isinstance(label, str):
        raise TypeError(f"label must be a string or None, got {type(label).__name__}")
    text = "".join(ch for ch in label if ch.isprintable())
    return " ".join(text.split())[:MAX_LABEL]


def build_run(lesson: str, label: str | None = None, *, entries: list[dict] | None = None) -> dict:
    """The run file of ``lesson`` (``"04"``) from this process's log (:mod:`course_lib.record`), or from
    ``entries``. Claims the atlas knows for this lesson but this session never judged are listed as "not judged"
    with why, so a class page sees which cells a learner did not reach."""
    if lesson not in LESSONS:
        raise ValueError(f"lesson must be one of {', '.join(LESSONS)}, got {lesson!r}")
    from ..checks.guesses import revealing

    found = record.entries(lesson) if entries is None else [dict(e) for e in entries]
    judged = {e["key"] for e in found if e["kind"] == "claim"}
    try:
        from .atlas import claim_keys

        expected = claim_keys(lesson)
    except Exception:  # noqa: BLE001 - a damaged atlas must not cost the learner their run file
        expected = {}
    for key, text in sorted(expected.items()):
        if key not in judged:
            found.append(
                {
                    "kind": "claim",
                    "key": key,
                    "text": text,
                    "value": None,
                    "low": None,
                    "high": None,
                    "no_effect": None,
                    "no_effect_is": "",
                    "unit": "",
                    "status": "not judged",
                    "why": NOT_REACHED,
                }
            )
    run = {
        "format": FORMAT,
        "version": VERSION,
        "lesson": lesson,
        "notebook": LESSONS[lesson],
        "label": _clean_label(label),
        "date": _dt.date.today().isoformat(),
        "revealed": revealing(),
        "machine": machine(),
        "entries": found,
    }
    return check_run(run, "this run")


def runs_folder() -> Path:
    """Where :func:`save` writes: ``COURSE_RUNS_DIR`` or ``./course-runs``."""
    return Path(os.environ.get("COURSE_RUNS_DIR") or "course-runs")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "run"


def save(lesson: str, label: str | None = None, folder: str | os.PathLike | None = None) -> Path:
    """Write this session's run of ``lesson`` as one JSON file (the last cell of every lesson) and show a summary:
    how many guesses, values and claims, where the file is, and what to do with it. ``label`` (optional, at most
    60 characters) names the run on a class page; ``folder`` defaults to :func:`runs_folder`. Returns the path."""
    run = build_run(lesson, label)
    target = Path(folder) if folder is not None else runs_folder()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = target / f"{lesson}-{_slug(run['label'] or kind_of(run['machine']))}-{stamp}.json"
    target.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(run, indent=1, sort_keys=True) + "\n")
    _show_saved(run, path)
    return path


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural where ``n`` is not 1: "1 value", "3 values"."""
    return f"{n} {noun}{'s' * (n != 1)}"


def summary(run: dict) -> str:
    """Three lines: what the run holds, on which machine."""
    es = run["entries"]
    guesses = [e for e in es if e["kind"] == "guess"]
    claims = [e for e in es if e["kind"] == "claim"]
    made = sum(e.get("guess") is not None for e in guesses)
    counts = {s: sum(e["status"] == s for e in claims) for s in _STATUSES}
    values = sum(e["kind"] == "value" for e in es)
    return (
        f"Lesson {run['lesson']} on {kind_of(run['machine'])}, {state_of(run['machine'])}, "
        f"torch {run['machine'].get('torch')}\n"
        f"  {made} of {len(guesses)} guesses made; "
        + (f"{_count(values, 'other measured value')}; " if values else "")
        + f"{len(claims)} claims: {counts['held']} held, {counts['not held']} not held, "
        f"{counts['not judged']} not judged"
        + (
            " (not judged: written for another kind of machine or device, or stood down here)"
            if counts["not judged"]
            else ""
        )
    )


def _shown(path: Path) -> str:
    """``path`` as the learner finds it from the notebook's folder: relative to it where at most one folder up."""
    try:
        rel = os.path.relpath(Path(path).resolve(), Path.cwd().resolve())
    except (ValueError, OSError):  # another drive (Windows), or no working folder
        return str(path)
    return rel if not rel.startswith(os.path.join("..", "..")) else str(path)


def _show_saved(run: dict, path: Path) -> None:
    text = (
        f"Saved your run to {_shown(path)}\n{summary(run)}\n"
        "Hand this file to your instructor for the class page (`course class FOLDER --out DIR`); on Colab download it "
        "from the Files panel. It holds your guesses, the measurements and this machine's description, nothing else."
    )
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display({"text/plain": text, RUN_MIME: run}, raw=True)


# ----------------------------------------------------------------------------------------------
# reading, never trusting


def _bad(where: str, why: str) -> RunFileError:
    return RunFileError(f"{where}: {why}")


def _text(where: str, obj: dict, name: str, limit: int = MAX_TEXT, required: bool = True) -> str:
    value = obj.get(name, "" if not required else None)
    if not isinstance(value, str):
        raise _bad(where, f"{name!r} must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise _bad(where, f"{name!r} is longer than {limit} characters")
    return value


def _num(where: str, obj: dict, name: str, allow_none: bool = False) -> float | None:
    value = obj.get(name)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(where, f"{name!r} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise _bad(where, f"{name!r} is {value!r}: not a finite number")
    return float(value)


def _check_entry(where: str, e: Any, lesson: str) -> dict:
    if not isinstance(e, dict):
        raise _bad(where, f"an entry is {type(e).__name__}, not an object")
    kind = e.get("kind")
    if kind not in _KINDS:
        raise _bad(where, f"an entry's kind is {str(kind)[:20]!r}, not one of {', '.join(_KINDS)}")
    key = e.get("key")
    if not isinstance(key, str) or not record.KEY_PATTERN.match(key):
        raise _bad(where, f"an entry's key {str(key)[:70]!r} is not '<lesson>/<name>'")
    if record.lesson_of(key) != lesson:
        raise _bad(where, f"the entry {key} belongs to lesson {record.lesson_of(key)}, not {lesson}")
    out = {"kind": kind, "key": key, "unit": _text(where, e, "unit", 30, required=False)}
    if kind == "value":
        out.update(value=_num(where, e, "value"), what=_text(where, e, "what", required=False))
    elif kind == "guess":
        out.update(
            guess=_num(where, e, "guess", allow_none=True),
            value=_num(where, e, "value"),
            model=_num(where, e, "model", allow_none=True),
            what=_text(where, e, "what", required=False),
        )
    else:
        status = e.get("status")
        if status not in _STATUSES:
            raise _bad(where, f"the claim {key} has status {str(status)[:20]!r}, not one of {', '.join(_STATUSES)}")
        out.update(
            text=_text(where, e, "text"),
            status=status,
            why=_text(where, e, "why", required=False),
            no_effect_is=_text(where, e, "no_effect_is", required=False),
        )
        for name in ("value", "low", "high", "no_effect"):
            out[name] = _num(where, e, name, allow_none=True)
        if status != "not judged" or out["value"] is not None:
            if out["value"] is None or out["no_effect"] is None or (out["low"] is None and out["high"] is None):
                raise _bad(where, f"the claim {key} lacks its measurement, bound or no-effect value")
            inside = (out["low"] is None or out["value"] > out["low"]) and (
                out["high"] is None or out["value"] < out["high"]
            )
            if status != "not judged" and inside != (status == "held"):
                raise _bad(
                    where,
                    f"edited: the claim {key} says {status!r}, but its own measurement {out['value']:.4g} is "
                    f"{'inside' if inside else 'outside'} its bound",
                )
    return out


def _check_machine(where: str, m: Any) -> dict:
    if not isinstance(m, dict):
        raise _bad(where, "'machine' must be an object")
    out = {name: _text(where, m, name, 80) for name in ("cpu", "isa", "bf16", "torch", "accelerator")}
    out.update(
        {name: _text(where, m, name, 40, required=False) for name in ("architecture", "platform", "os", "course")}
    )
    for name in ("cores", "free_cores"):
        n = _num(where, m, name)
        if n != int(n) or not 0 <= n <= 4096:
            raise _bad(where, f"machine {name!r} must be a whole number of cores, got {n}")
        out[name] = int(n)
    if not isinstance(m.get("busy"), bool):
        raise _bad(where, "machine 'busy' must be true or false")
    out["busy"] = m["busy"]
    if "bf16_units" in m:
        if not isinstance(m["bf16_units"], bool):
            raise _bad(where, "machine 'bf16_units' must be true or false")
        out["bf16_units"] = m["bf16_units"]
    held = m.get("held", {})
    if (
        not isinstance(held, dict)
        or len(held) > 8
        or not all(isinstance(k, str) and isinstance(v, str) and len(k) < 40 and len(v) < 40 for k, v in held.items())
    ):
        raise _bad(where, "machine 'held' must map a few setting names to short values")
    out["held"] = dict(held)
    return out


def check_run(obj: Any, where: str = "the run") -> dict:
    """A clean copy of a run file's content, or :class:`RunFileError` naming ``where`` and why."""
    if not isinstance(obj, dict):
        raise _bad(where, f"not a course run file (the JSON is a {type(obj).__name__}, not an object)")
    if obj.get("format") != FORMAT:
        raise _bad(
            where, 'not a course run file (no "format": "course-run"; a benchmark result goes to `course report-card`)'
        )
    version = obj.get("version")
    if version != VERSION:
        raise _bad(where, f"run file version {str(version)[:10]!r}; this course reads version {VERSION}")
    lesson = obj.get("lesson")
    if lesson not in LESSONS:
        raise _bad(where, f"unknown lesson {str(lesson)[:10]!r}")
    label = obj.get("label", "")
    if not isinstance(label, str):
        raise _bad(where, "'label' must be text")
    date = _text(where, obj, "date", 10)
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", date):
        raise _bad(where, f"'date' must be YYYY-MM-DD, got {date!r}")
    entries = obj.get("entries")
    if not isinstance(entries, list):
        raise _bad(where, "'entries' must be a list")
    if len(entries) > MAX_ENTRIES:
        raise _bad(where, f"{len(entries)} entries; a lesson has far fewer than {MAX_ENTRIES}")
    clean = [_check_entry(where, e, lesson) for e in entries]
    seen = set()
    for e in clean:
        if (e["kind"], e["key"]) in seen:
            raise _bad(where, f"the {e['kind']} {e['key']} appears twice")
        seen.add((e["kind"], e["key"]))
    return {
        "format": FORMAT,
        "version": VERSION,
        "lesson": lesson,
        "notebook": LESSONS[lesson],
        "label": _clean_label(label),
        "date": date,
        "revealed": bool(obj.get("revealed", False)),
        "machine": _check_machine(where, obj.get("machine")),
        "entries": clean,
    }


def _depth_ok(text: str, limit: int = 32) -> bool:
    """Whether the JSON nests at most ``limit`` deep (counted on the raw text, outside strings, before parsing)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def load_run(path: str | os.PathLike) -> dict:
    """Read and check a run file (:func:`check_run`); :class:`RunFileError` names the file and why it is refused:
    unreadable, over 1 MB, empty, not UTF-8 text, not JSON (NaN and Infinity included), nested too deeply, not a
    run file, or inconsistent with itself."""
    p = Path(path)
    where = p.name
    try:
        if p.stat().st_size > MAX_BYTES:
            raise _bad(where, f"{p.stat().st_size / 1e6:.1f} MB: too large for a run file (they are a few kB)")
        raw = p.read_bytes()
    except OSError as exc:
        raise _bad(where, f"cannot be read ({exc.strerror or exc})") from None
    if not raw.strip():
        raise _bad(where, "the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(where, "not a text file (binary, not UTF-8)") from None
    if not _depth_ok(text):
        raise _bad(where, "JSON nested too deeply to be a run file")

    def _no_constants(name: str) -> float:
        raise ValueError(f"{name} is not a number a run file may hold")

    try:
        obj = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise _bad(where, f"not valid JSON ({str(exc)[:80]})") from None
    return check_run(obj, where)


def run_from_notebook(path: str | os.PathLike, label: str | None = None) -> dict:
    """The run file of a notebook saved with its outputs (``course run-file``): the run its last cell wrote, or,
    where that cell did not run, the keyed entries its outputs carry, with the machine of the last cell if any."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a notebook file's path, got {type(path).__name__}")
    p = Path(path)
    try:
        nb = json.loads(p.read_text(encoding="utf-8"))
        cells = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RunFileError(f"{p.name}: not a notebook that can be read ({type(exc).__name__})") from None
    saved, entries = None, {}
    for cell in cells:
        for out in cell.get("outputs") or []:
            data = out.get("data", {}) if isinstance(out, dict) else {}
            if RUN_MIME in data:
                saved = data[RUN_MIME]
            if record.VALUE_MIME in data:
                e = data[record.VALUE_MIME]
                entries[(e.get("kind"), e.get("key"))] = e
    if saved is not None:
        run = check_run(saved, Path(path).name)
        if label is not None:
            run["label"] = _clean_label(label)
        return run
    if not entries:
        raise RunFileError(f"{Path(path).name}: holds no course outputs (run its cells and save it first)")
    lessons = {record.lesson_of(k) for _, k in entries if isinstance(k, str) and record.KEY_PATTERN.match(k)}
    if len(lessons) != 1:
        raise RunFileError(f"{Path(path).name}: its outputs name lessons {sorted(lessons)}, not one")
    return build_run(lessons.pop(), label, entries=list(entries.values()))
