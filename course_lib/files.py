"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file the course writes that another process may read while it is written (checkpoints, benchmark results,
pipeline records, a prepared data set, a worker's pid file) goes through :func:`write_atomic`: the bytes go to a
temporary file in the same folder, which is flushed and fsynced, then renamed over the target (``os.replace``,
atomic on one file system), and the folder is fsynced so that the rename itself survives a power cut (POSIX; on
Windows a folder cannot be opened, and the rename needs nothing more). An error or Ctrl-C while writing leaves
the old file as it was and no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Callable

__all__ = ["write_atomic"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, write: Callable[[IO], object] | bytes | str) -> Path:
    """Write ``path`` atomically and return it as a Path. ``write`` is the content (``bytes``, or ``str`` written
    as UTF-8) or a function that writes to the open binary file it is given (``lambda f: torch.save(obj, f)``).

    The file gets the mode a plain ``open()`` would give it (0o666 less the umask), so others in a shared
    workshop folder can read it. Raises ValueError when ``path`` is a folder or its folder does not exist."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
    if not (callable(write) or isinstance(write, (bytes, str))):
        raise TypeError(f"write must be bytes, a str or a function of the open file, got {type(write).__name__}")
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"path {str(target)!r} is a folder; give a file name")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise ValueError(f"the folder of {str(target)!r} does not exist: create it first")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            if callable(write):
                write(f)
            else:
                f.write(write.encode() if isinstance(write, str) else write)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)
    return target
