#!/usr/bin/env python3
"""Prove that the notebooks' set-up cell leaves a hosted runtime's own packages alone.

Colab and Kaggle ship their own torch and an older Jupyter stack; the first code cell of every notebook
installs the course into that runtime with pip. This builds a stand-in for such a runtime and runs
that very cell in it:

1. a fresh virtual environment in a temporary folder, with torch 2.6.0 (not the course's pin, 2.13.0)
   and an older Jupyter stack: ipykernel 6, IPython 8, jupyter-server 1.24, notebook 6.5, ipywidgets
   7.7.1 (what Colab ships), jupyter_client 7, numpy 1.26, pip 24.1;
2. a temporary `git clone` of this repository at HEAD, tagged v<version in pyproject.toml>;
3. the first code cell of notebooks/00_setup.ipynb (as committed), run from a .ipy file by that
   environment's IPython, so pip really runs, with COURSE_SOURCE=git+file://localhost<the clone>;
4. the course uninstalled, and the same cell run again with COURSE_SOURCE unset and the course's wheel
   (`bootstrap.py wheel`) in the notebook's folder, as a workshop without access to the repository has it.

Each time, it prints torch's and the Jupyter packages' versions before and after, and what the cell added. It exits
non-zero if any package that was there before changed version or went away, if `import course_lib`
fails afterwards, if course_lib.__version__ is not the tag's version, or if a course widget cannot be
built with the runtime's ipywidgets 7.

    python3 tools/check_hosted_install.py          # a few minutes; --keep keeps the temporary folder

It tests the committed state (HEAD): commit first. Needs git and the network to PyPI. torch comes from
the CPU-only index (about 200 MB) when it can be reached, else from PyPI (the CUDA build, about 3 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.6.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
HOSTED_STACK = [
    "pip==24.1.2",
    "numpy==1.26.4",
    "ipykernel==6.17.1",
    "ipython==8.18.1",
    "jupyter-server==1.24.0",
    "notebook==6.5.7",
    "ipywidgets==7.7.1",
    "jupyter-client==7.4.9",
    "traitlets==5.7.1",
    "tornado==6.3.3",
]
WATCHED = re.compile(
    r"torch|numpy|jupyter.*|notebook|ipykernel|ipython|ipywidgets|widgetsnbextension|"
    r"traitlets|tornado|nbformat|nbconvert|nbclient"
)
PROBE = """import json, course_lib, ipywidgets
from course_lib import widgets
box = widgets.time_to_train_widget()
assert "FLOPs" in box.children[-1].value
print(json.dumps({"version": course_lib.__version__, "file": course_lib.__file__,
                  "ipywidgets": ipywidgets.__version__}))
"""


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd).split("\n")[0], flush=True)
    return subprocess.run([str(c) for c in cmd], **kwargs)


def packages(python: Path) -> dict[str, str]:
    out = run([python, "-m", "pip", "list", "--format=json"], check=True, capture_output=True, text=True).stdout
    return {re.sub(r"[-_.]+", "-", p["name"].lower()): p["version"] for p in json.loads(out)}


def reachable(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10):
            return True
    except OSError:
        return False


def setup_cell(repo: Path) -> str:
    nb = json.loads((repo / "notebooks" / "00_setup.ipynb").read_text())
    source = next(c["source"] for c in nb["cells"] if c["cell_type"] == "code")
    return "".join(source) if isinstance(source, list) else source


def check(tmp: Path, torch_req: str = TORCH) -> list[str]:
    env_dir, clone, workdir = tmp / "runtime", tmp / "course", tmp / "run"
    workdir.mkdir()  # the cell runs here, where no course_lib folder can be imported by accident
    python, ipython = env_dir / "bin" / "python", env_dir / "bin" / "ipython"
    print(f"1. A stand-in hosted runtime in {env_dir}", flush=True)
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = [python, "-m", "pip", "install", "-q"]
    if reachable(f"{TORCH_INDEX}/torch/"):
        run(pip + [torch_req, "--index-url", TORCH_INDEX], check=True)
    else:
        print(
            f"   {TORCH_INDEX} cannot be reached: {torch_req} comes from PyPI (the CUDA build) or a local wheel",
            flush=True,
        )
        run(pip + [torch_req], check=True)
    run(pip + HOSTED_STACK, check=True)
    before = packages(python)

    print(f"2. A clone of {ROOT} at HEAD, tagged with pyproject.toml's version", flush=True)
    run(["git", "clone", "-q", ROOT, clone], check=True)
    version = re.search(r'^version\s*=\s*"([^"]+)"', (clone / "pyproject.toml").read_text(), re.M).group(1)
    run(["git", "-C", clone, "tag", "-f", f"v{version}"], check=True, capture_output=True)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # file://localhost/...: pip before 24 rejects a URL without a host (git+file:///...) as invalid
    env.update(
        COURSE_SOURCE=f"git+file://localhost{clone}",
        IPYTHONDIR=str(tmp / "ipython"),
        PYTHONNOUSERSITE="1",
        PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(env_dir),
    )
    if run([python, "-c", "import course_lib"], cwd=workdir, env=env, capture_output=True).returncode == 0:
        return ["course_lib is importable before the cell runs, so the cell would install nothing"]

    cell = tmp / "setup_cell.ipy"
    cell.write_text(setup_cell(clone))
    print("3. The set-up cell of notebooks/00_setup.ipynb, run by the runtime's IPython, from the tag:", flush=True)
    print("   | " + cell.read_text().rstrip().replace("\n", "\n   | "), flush=True)
    problems = run_cell(ipython, python, cell, workdir, env, before, version, env_dir)

    print(
        "\n4. The same cell in a room without GitHub: the course's wheel (bootstrap.py wheel) in the notebook's "
        "folder, COURSE_SOURCE unset",
        flush=True,
    )
    run([python, "-m", "pip", "uninstall", "-y", "-q", "course-lib"], check=True)
    run([sys.executable, clone / "bootstrap.py", "wheel"], check=True, capture_output=True)
    [wheel] = (clone / "dist").glob(f"course_lib-{version}-*.whl")
    shutil.copy(wheel, workdir)
    env.pop("COURSE_SOURCE")
    problems += [
        f"from the wheel: {p}" for p in run_cell(ipython, python, cell, workdir, env, before, version, env_dir)
    ]
    origin = run([python, "-m", "pip", "show", "-f", "course-lib"], capture_output=True, text=True, cwd=workdir).stdout
    direct = next(env_dir.glob("lib/python*/site-packages/course_lib-*.dist-info/direct_url.json"), None)
    if direct is None or wheel.name not in direct.read_text():
        problems.append(f"course-lib was not installed from {wheel.name}:\n{origin[:500]}")
    return problems


def run_cell(
    ipython: Path, python: Path, cell: Path, workdir: Path, env: dict, before: dict, version: str, env_dir: Path
) -> list[str]:
    """Run the set-up cell in the runtime; what changed that should not have, or what does not work after it."""
    ran = run([ipython, "--no-banner", "--colors=NoColor", cell], cwd=workdir, env=env)
    after = packages(python)
    probe = run([python, "-c", PROBE], cwd=workdir, env=env, capture_output=True, text=True)

    problems = [] if ran.returncode == 0 else [f"IPython exited with {ran.returncode} running the cell"]
    changed = sorted(n for n in before if after.get(n) != before[n] and n != "course-lib")
    problems += [f"{n} changed: {before[n]} -> {after.get(n, 'removed')}" for n in changed]
    print(f"\n{'package':28} {'before':16} after")
    for name in sorted(n for n in before if WATCHED.fullmatch(n) or n in changed):
        mark = "   <- CHANGED" if name in changed else ""
        print(f"{name:28} {before[name]:16} {after.get(name, '(removed)')}{mark}")
    added = sorted(set(after) - set(before))
    print("added by the cell:", ", ".join(f"{n} {after[n]}" for n in added) or "nothing")

    if probe.returncode != 0:
        problems.append("afterwards, `import course_lib` or building a widget fails:\n" + probe.stderr[-2000:])
    else:
        got = json.loads(probe.stdout.strip().splitlines()[-1])
        print(f"course_lib {got['version']} from {got['file']}; a widget builds with ipywidgets {got['ipywidgets']}")
        if got["version"] != version:
            problems.append(f"course_lib.__version__ is {got['version']}, the tag is v{version}")
        if not Path(got["file"]).resolve().is_relative_to(env_dir.resolve()):
            problems.append(f"course_lib was imported from {got['file']}, outside the runtime")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (runtime, clone)")
    parser.add_argument("--torch", default=TORCH, help=f"the runtime's torch (default {TORCH}, not the course's pin)")
    args = parser.parse_args()
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="hosted-install-"))
    try:
        problems = check(tmp, args.torch)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\ntook {time.monotonic() - start:.0f} s")
    for p in problems:
        print("FAIL:", p)
    print("FAILED" if problems else "OK: the set-up cell left torch and the Jupyter stack as they were")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
