#!/usr/bin/env python3
"""Set up the course in a local virtual environment and run one task in it.

    python3 bootstrap.py lab        # set up, then open JupyterLab on the course
    python3 bootstrap.py test       # set up, then run the whole test suite
    python3 bootstrap.py timings    # execute every notebook, store outputs and run times
    python3 bootstrap.py exercises  # regenerate exercises/ from solutions/
    python3 bootstrap.py doctor     # print the hardware report

Needs only Python 3.10+ (standard library). The environment lives in .venv/ next to this file;
the second run reuses it and installs nothing unless pyproject.toml changed.

PyTorch: the pinned release TORCH_PIN is installed first, so pip never picks a different torch
to satisfy the other packages. Set TORCH_INDEX_URL to choose the build, e.g. the CPU-only wheels
(https://download.pytorch.org/whl/cpu) on a Linux machine without a GPU, or a CUDA index.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

TORCH_PIN = "torch==2.13.0"
ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".course-installed"


def _venv_python() -> Path:
    if os.name == "nt":
        return VENV / "Scripts" / "python.exe"
    return VENV / "bin" / "python"


def _run(cmd: list[str], **kwargs) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def _has_torch(python: Path) -> bool:
    probe = subprocess.run([str(python), "-c", "import torch"], capture_output=True)
    return probe.returncode == 0


def setup() -> Path:
    """Create .venv (once) and install the course into it (when pyproject.toml changed)."""
    if sys.version_info < (3, 10):
        sys.exit(f"The course needs Python 3.10 or newer; this is {sys.version.split()[0]}.")
    python = _venv_python()
    if not python.exists():
        print(f"Creating a virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + TORCH_PIN.encode()).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == wanted and _has_torch(python):
        return python
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    if not _has_torch(python):
        index = os.environ.get("TORCH_INDEX_URL")
        _run(pip + [TORCH_PIN] + (["--index-url", index] if index else []))
    _run(pip + ["-e", f"{ROOT}[lab,test]"])
    STAMP.write_text(wanted)
    return python


def main(argv: list[str]) -> int:
    tasks = ("lab", "test", "timings", "exercises", "doctor", "setup")
    if not argv or argv[0] not in tasks:
        print(__doc__)
        return 2
    task, rest = argv[0], argv[1:]
    python = setup()
    os.chdir(ROOT)
    if task == "setup":
        return 0
    if task == "lab":
        first = ROOT / "notebooks" / "00_setup.ipynb"
        cmd = [python, "-m", "jupyterlab", str(first.relative_to(ROOT))] + rest
        if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in rest:
            cmd.append("--allow-root")  # containers and cloud VMs often run as root
    elif task == "test":
        cmd = [python, "-m", "pytest"] + rest
    elif task == "timings":
        cmd = [python, str(ROOT / "tools" / "run_notebooks.py")] + rest
    elif task == "exercises":
        cmd = [python, str(ROOT / "tools" / "make_exercises.py")] + rest
    else:
        cmd = [python, "-m", "course_lib.cli", "doctor"] + rest
    print("+", " ".join(str(c) for c in cmd), flush=True)
    try:
        return subprocess.call([str(c) for c in cmd])
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
