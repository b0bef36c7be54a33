#!/usr/bin/env python3
"""Set up the course in a local virtual environment and run one task in it.

    python3 bootstrap.py lab        # set up, then open JupyterLab on the course
    python3 bootstrap.py test       # set up, then `ruff format --check`, `ruff check` and the whole test suite
    python3 bootstrap.py test --fast  # the same checks, then only the unit tests that start no notebook, browser
                                      # or process
    python3 bootstrap.py test notebooks --plain  # the notebooks in a kernel of a plain `pip install .` (no extras)
    python3 bootstrap.py timings    # execute every notebook into build/executed/, record run times
    python3 bootstrap.py exercises  # regenerate exercises/ from solutions/
    python3 bootstrap.py doctor     # print the hardware report
    python3 bootstrap.py site       # build the course website into build/site/html, then check it in a browser
    python3 bootstrap.py slides     # build a reveal.js slide deck per lesson into build/slides, then check them in a
                                    # browser (lessons by name, e.g. `slides 05_1`; --no-execute: only the lessons
                                    # already executed)
    python3 bootstrap.py wheel      # build dist/course_lib-<version>-py3-none-any.whl to hand a workshop

Needs only Python 3.10+ (standard library). The environment lives in .venv/ next to this file;
the second run reuses it and installs nothing unless pyproject.toml changed. `test`, `site` and `slides`
also install the website tools (the `site` extra); the browser checks use the system's Chromium, and the
site and slides builds fetch their front end (the widget manager, reveal.js) with npm: where either is
missing those checks skip and say how to install it. In CI (the CI variable set) `test` installs them
with apt-get.

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
FULL = "lab,test,site"  # the extras `test` and `site` need; `lab` and the rest need only lab,test
#: what `test` runs `ruff format --check` and `ruff check` on before pytest (pyproject.toml [tool.ruff])
LINTED = ("course_lib", "tools", "tests", "conftest.py", "bootstrap.py")


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


def _installed(wanted: str) -> bool:
    return STAMP.exists() and wanted in STAMP.read_text().split()


def setup(extras: str = "lab,test") -> Path:
    """Create .venv (once) and install the course with `extras` into it (when pyproject.toml changed)."""
    if sys.version_info < (3, 10):
        sys.exit(f"The course needs Python 3.10 or newer; this is {sys.version.split()[0]}.")
    python = _venv_python()
    if not python.exists():
        print(f"Creating a virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + TORCH_PIN.encode()).hexdigest()
    wanted = f"{digest}:{extras}"
    if (_installed(wanted) or _installed(f"{digest}:{FULL}")) and _has_torch(python):
        return python
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    if not _has_torch(python):
        index = os.environ.get("TORCH_INDEX_URL")
        _run(pip + [TORCH_PIN] + (["--index-url", index] if index else []))
    _run(pip + ["-e", f"{ROOT}[{extras}]"])
    STAMP.write_text(wanted)
    return python


def ci_system_packages() -> None:
    """In CI only: install what the browser checks need from the system's packages when it is missing."""
    import shutil

    need = [pkg for pkg, exe in (("chromium", "chromium"), ("npm", "npm")) if not shutil.which(exe)]
    if not os.environ.get("CI") or not need or not shutil.which("apt-get"):
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _run(sudo + ["apt-get", "update", "-qq"], env=env)
    _run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + need, env=env)


def plain_env(where: Path = ROOT / "build" / "plain-env") -> dict:
    """A virtual environment with only the pinned torch, `pip install .` and a kernel, as VS Code or a hand-made
    environment has it (no `lab` extra: no ipywidgets, no JupyterLab); the settings that make the test run's
    notebooks use its kernel."""
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        print(f"Creating a plain environment in {where}", flush=True)
        venv.EnvBuilder(with_pip=True).create(where)
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if not _has_torch(python):
        index = os.environ.get("TORCH_INDEX_URL")
        _run(pip + [TORCH_PIN] + (["--index-url", index] if index else []))
    _run(pip + [ROOT, "ipykernel"])
    _run(pip + ["--no-deps", "--force-reinstall", ROOT])  # this checkout's course_lib, even at the same version
    _run(
        [
            python,
            "-m",
            "ipykernel",
            "install",
            "--prefix",
            where,
            "--name",
            "course-plain",
            "--display-name",
            "Python (plain course install)",
        ],
        stdout=subprocess.DEVNULL,
    )
    return {
        "JUPYTER_PATH": str(where / "share" / "jupyter"),
        "COURSE_KERNEL": "course-plain",
        "COURSE_KERNEL_ENV": str(where),
    }


def wheel(out: Path = ROOT / "dist") -> int:
    """Build the course's wheel into ``out``: a file a notebook's set-up cell installs where GitHub cannot be
    reached."""
    version = _version()
    for old in out.glob("course_lib-*.whl"):
        old.unlink()
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "--wheel-dir",
            out,
            ROOT,
        ]
    )
    [built] = out.glob(f"course_lib-{version}-*.whl")
    print(f"""Built {built}
Hand it to a workshop without access to the course's repository: the first cell of every notebook installs it,
without being told, when it lies in the notebook's folder (on Colab, upload it to the Files panel, /content) or
in a Kaggle dataset (/kaggle/input/<dataset>/); elsewhere set COURSE_SOURCE to its path before the first cell
runs. It replaces the repository, not PyPI: what the runtime lacks (torchao, say) still comes from there.""")
    return 0


def _version() -> str:
    import re

    return re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def main(argv: list[str]) -> int:
    tasks = ("lab", "test", "timings", "exercises", "doctor", "setup", "site", "slides", "wheel")
    if not argv or argv[0] not in tasks:
        print(__doc__)
        return 2
    task, rest = argv[0], argv[1:]
    if task == "wheel":
        return wheel()
    python = setup(FULL if task in ("test", "site", "slides", "setup") else "lab,test")
    os.chdir(ROOT)
    if task == "test":
        ci_system_packages()
    if task == "setup":
        return 0
    if task == "lab":
        first = ROOT / "notebooks" / "00_setup.ipynb"
        cmd = [python, "-m", "jupyterlab", str(first.relative_to(ROOT))] + rest
        if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in rest:
            cmd.append("--allow-root")  # containers and cloud VMs often run as root
    elif task == "test":
        if "--plain" in rest:
            rest = [r for r in rest if r != "--plain"]
            os.environ.update(plain_env())
        else:  # the code's own checks first: seconds, and they name the line
            for check, fix in (
                (["format", "--check"], "run `ruff format` on them"),
                (["check"], "fix the lines it names (or run `ruff check --fix`)"),
            ):
                lint = [str(python), "-m", "ruff", *check, *LINTED]
                print("+", " ".join(lint), flush=True)
                if subprocess.call(lint) != 0:
                    print(f"ruff {check[0]} failed: {fix}, then test again")
                    return 1
        cmd = [python, "-m", "pytest"] + rest
    elif task == "timings":
        cmd = [python, str(ROOT / "tools" / "run_notebooks.py")] + rest
    elif task == "site":
        built = subprocess.call([str(python), str(ROOT / "tools" / "build_site.py")] + rest)
        if built != 0:
            return built
        cmd = [python, str(ROOT / "tools" / "check_site.py")]
    elif task == "slides":
        built = subprocess.call([str(python), str(ROOT / "tools" / "build_slides.py")] + rest)
        if built != 0:
            return built
        cmd = [python, str(ROOT / "tools" / "check_slides.py")]
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
