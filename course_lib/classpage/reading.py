"""Reading a folder of learners' run files for the class page: each file merged or skipped with the reason.

Nothing in the folder is trusted. Every file goes through :func:`course_lib.runs.load_run` (size, encoding, depth,
types, finite numbers, claims consistent with their own bounds); a notebook saved with its outputs gives the run its
last cell wrote. Only regular files are opened (a link to a device or a pipe is skipped unread), hidden files and
folders are left alone, and a copy of a file already read is flagged by name and merged once: the same bytes, the
same run saved again, or the same measurements under another label (one learner's run, not two learners).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import arguments
from ..runs import RUN_MIME, RunFileError, check_run, load_run
from ..runs.runfile import MAX_BYTES, VERSION

__all__ = ["MAX_FILES", "MAX_NOTEBOOK_BYTES", "Loaded", "Reading", "printable", "read_folder"]

#: At most this many files are read from one folder (a workshop hands in a few hundred).
MAX_FILES = 5000
#: A notebook saved with its outputs (plots included) is larger than a run file, but not this large.
MAX_NOTEBOOK_BYTES = 20_000_000


def printable(text: str) -> str:
    """``text`` with every character that does not print (control characters, direction overrides, lone
    surrogates from a broken file name or a ``"\\ud800"`` in JSON) written as its escape, so that a line on a
    terminal or a page shows what the file holds and nothing else."""
    s = arguments.text("text", text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in s)


@dataclass(frozen=True)
class Loaded:
    """One run merged into the class page: the file's name (relative to the folder) and the checked run
    (:func:`course_lib.runs.check_run`'s clean copy)."""

    name: str
    run: dict

    @property
    def who(self) -> str:
        """The run's label where the learner typed one, else its file's name."""
        return self.run.get("label") or self.name


@dataclass(frozen=True)
class Reading:
    """A folder read: the runs merged, in file-name order, and every file skipped or flagged as ``(name, why)``."""

    folder: Path
    runs: tuple[Loaded, ...]
    skipped: tuple[tuple[str, str], ...]


def _why(exc: RunFileError, path: Path) -> str:
    """The reason without the file name that starts a RunFileError's message (the page names the file already); a
    file of a newer format says what to do about it."""
    text = str(exc)
    text = text[len(path.name) + 2 :] if text.startswith(f"{path.name}: ") else text
    newer = re.match(r"run file version '(\d{1,6})'", text)
    if newer and int(newer.group(1)) > VERSION:
        return f"{text}: written by a newer course version; update course_lib to merge it"
    return text


def _candidates(folder: Path, exclude: Path | None) -> tuple[list[Path], int]:
    """The files to read, sorted, and how many more there were past :data:`MAX_FILES` (hidden files and folders,
    and ``exclude`` (the page's own folder), are left out; linked folders are not followed)."""
    found, more = [], 0
    skip = exclude.resolve() if exclude is not None else None
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and (skip is None or (here / d).resolve() != skip))
        for name in sorted(files):
            if name.startswith("."):
                continue
            if len(found) < MAX_FILES:
                found.append(here / name)
            else:
                more += 1
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix()), more


def _notebook_run(path: Path, raw: bytes) -> dict:
    """The run a notebook's last cell wrote (the run file's MIME output), checked; RunFileError where there is none.
    Never describes this machine in place of the learner's (a notebook without its run file is refused)."""
    where = path.name
    try:
        nb = json.loads(raw.decode("utf-8"), parse_constant=lambda name: float("nan"))
        cells = [c for c in nb["cells"] if isinstance(c, dict) and c.get("cell_type") == "code"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RunFileError(f"{where}: not a notebook that can be read ({type(exc).__name__})") from None
    saved = None
    for cell in cells:
        outputs = cell.get("outputs")
        for out in outputs if isinstance(outputs, list) else []:
            data = out.get("data") if isinstance(out, dict) else None
            if isinstance(data, dict) and RUN_MIME in data:
                saved = data[RUN_MIME]
    if saved is None:
        raise RunFileError(
            f"{where}: a notebook without its run file (its last cell did not run): run it to the end and save it, "
            "or hand in the run file that cell wrote"
        )
    return check_run(saved, where)  # a NaN read above fails here as "not a finite number"


def _read_one(path: Path) -> tuple[dict | None, str | None, bytes]:
    """(run, None, bytes) or (None, why, b"") for one file; the bytes are kept for the duplicate check."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})", b""
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file (a link to a device, a pipe or a socket): not read", b""
    notebook = path.suffix.lower() == ".ipynb"
    limit = MAX_NOTEBOOK_BYTES if notebook else MAX_BYTES
    if info.st_size > limit:
        return None, f"{info.st_size / 1e6:.1f} MB: too large for a {'notebook' if notebook else 'run file'}", b""
    try:
        raw = path.read_bytes()
        run = _notebook_run(path, raw) if notebook else load_run(path)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})", b""
    except RunFileError as exc:
        return None, _why(exc, path), b""
    return run, None, raw


def _digest(obj: Any) -> str:
    return hashlib.sha256(obj if isinstance(obj, bytes) else json.dumps(obj, sort_keys=True).encode()).hexdigest()


def read_folder(folder: str | os.PathLike, *, exclude: str | os.PathLike | None = None) -> Reading:
    """Read every file under ``folder`` (``course class``): the runs that merge and the files skipped or flagged, each
    by name with the reason. ``exclude`` is a folder inside it to leave out (the page's own). Raises ``TypeError``
    for a ``folder`` that is not a path and ``ValueError`` when it does not exist or is a file."""
    arguments.path("folder", folder)
    arguments.optional(arguments.path, "exclude", exclude)
    root = Path(folder)
    if not root.exists():
        raise ValueError(f"folder {printable(str(root))!r}: no such folder (give the folder that holds the run files)")
    if not root.is_dir():
        raise ValueError(f"folder {printable(str(root))!r} is a file; give the folder that holds the run files")
    paths, more = _candidates(root, Path(exclude) if exclude is not None else None)
    runs: list[Loaded] = []
    skipped: list[tuple[str, str]] = []
    seen: dict[str, str] = {}  # digest -> the name of the file merged with it
    for path in paths:
        name = printable(path.relative_to(root).as_posix())
        run, why, raw = _read_one(path)
        if run is None:
            skipped.append((name, why))
            continue
        same = _digest(raw)
        resaved = _digest(run)
        measured = _digest({**run, "label": ""})
        if same in seen:
            skipped.append((name, f"duplicate: the same content as {seen[same]}, merged once"))
        elif resaved in seen:
            skipped.append((name, f"duplicate: the same run as {seen[resaved]} (saved again), merged once"))
        elif measured in seen:
            skipped.append(
                (
                    name,
                    f"duplicate: the same run as {seen[measured]} under another label (the same machine, date, "
                    "measurements and guesses), merged once",
                )
            )
        else:
            seen.update({same: name, resaved: name, measured: name})
            runs.append(Loaded(name, run))
    if more:
        skipped.append((f"{more} more files", f"not read: the page reads at most {MAX_FILES} files from a folder"))
    return Reading(root, tuple(runs), tuple(skipped))
