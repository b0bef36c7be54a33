#!/usr/bin/env python3
"""The course's address in one place: its repository and release, read from pyproject.toml.

Every notebook's set-up cell, every "Open in Colab" badge, the README's install steps and the container in
docs/scaling-out.md are written from it, so they all name the same repository and release tag.

    python3 tools/course_address.py                  # rewrite every place from pyproject.toml
    python3 tools/course_address.py --check          # exit 1 and list the places that differ (the tests run it)
    python3 tools/course_address.py --release-check  # exit 1 unless the repository has the release tag

To move the course or cut a release, change `version` or `[project.urls] Repository` in pyproject.toml,
run this script, commit, tag the commit `v<version>` and push the tag; `--release-check` then confirms
that a learner's set-up cell will find it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")


def address(root: Path = ROOT) -> tuple[str, str]:
    """(repository URL, version) from pyproject.toml: the one place the course's address is written."""
    text = (root / "pyproject.toml").read_text()
    version = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)
    repo = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.M).group(1).rstrip("/")
    return repo, version


SETUP_CELL = r"""# @title Set-up: installs the course helpers where they are missing, keeping the runtime's own torch
COURSE_VERSION = "{version}"  # the course release this notebook was written for
COURSE_REPO = "{repo}"
try:
    import course_lib
except ImportError:
    import glob, importlib, importlib.metadata as md, os, re, subprocess, sys
    # COURSE_SOURCE may name another git URL or a wheel file (`python3 bootstrap.py wheel`); a wheel of this
    # release lying in the current folder or in a Kaggle dataset is used without asking
    found = glob.glob("course_lib-*.whl") + glob.glob("/kaggle/input/**/course_lib-*.whl", recursive=True)
    wheels = [w for w in found if os.path.basename(w).startswith(f"course_lib-{{COURSE_VERSION}}-")]
    if found and not wheels:
        print(f"Ignored {{', '.join(found)}}: this notebook needs the wheel of release {{COURSE_VERSION}}.")
    source = os.environ.get("COURSE_SOURCE") or (wheels[0] if wheels else f"git+{{COURSE_REPO}}")
    source = f"git+{{source}}" if source.startswith(("http://", "https://")) and not source.endswith(".whl") else source
    wanted = source if source.endswith(".whl") else f"course-lib @ {{source}}@v{{COURSE_VERSION}}"
    try:  # pin the torch that is already installed, so pip never replaces it
        torch_version = md.version("torch")
    except md.PackageNotFoundError:
        torch_version = None
    if torch_version and tuple(int(n) for n in re.findall(r"\d+", torch_version)[:2]) < (2, 6):
        raise RuntimeError(f"This runtime has torch {{torch_version}}; the course needs torch 2.6 or newer. Choose a "
                           "newer runtime image; on your own machine, upgrade torch together with torchvision, "
                           "torchaudio and torch_xla where you have them.") from None
    print(f"Installing the course helpers from {{source}} ...", flush=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", wanted, f"torch=={{torch_version}}" if torch_version
                          else "torch"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         env={{**os.environ, "GIT_TERMINAL_PROMPT": "0"}})  # git fails instead of asking for a password
    if pip.returncode != 0:
        said = pip.stdout + pip.stderr
        offline = ("the wheel is here, but what it needs and this runtime lacks comes from PyPI, which cannot be "
                   "reached: turn the network on (on Kaggle, Internet in the session options)"
                   if source.endswith(".whl") else "this runtime has no network (on Kaggle, turn on Internet in the "
                   "session options); without GitHub, ask your instructor for the course's wheel file")
        why = next((why for signs, why in [
            (("resolve host", "Name or service not known", "name resolution", "unreachable", "NewConnectionError"),
             offline),
            (("did not match any file", "not found in upstream", "Could not find remote"),
             f"the source has no release v{{COURSE_VERSION}}: check COURSE_SOURCE, or ask your instructor"),
            (("Username", "terminal prompts disabled", "Authentication failed"),
             "git asked for a password: the repository is private or its address is misspelt; check COURSE_SOURCE"),
            (("does not exist", "No such file"), "the wheel file is not there: check the path in COURSE_SOURCE"),
            (("Cannot find command 'git'",), "git is not installed here: install it, or use the course's wheel file"),
        ] if any(sign in said for sign in signs)), "read pip's message below; if it does not help, show it to your "
           "instructor or open an issue on the course's repository")
        raise RuntimeError(f"Installing the course helpers failed: {{why}}.\n--- pip said:\n{{said[-3000:]}}") from None
    importlib.invalidate_caches()
    import course_lib
if course_lib.__version__ != COURSE_VERSION:
    print(f"Note: course_lib {{course_lib.__version__}} is installed; this notebook was written for {{COURSE_VERSION}}. "
          "If a cell fails, open this notebook from that release's tag, or install its release.")"""


def setup_cell(root: Path = ROOT) -> str:
    repo, version = address(root)
    return SETUP_CELL.format(repo=repo, version=version)


def _github_path(repo: str) -> str:
    m = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)(?:\.git)?", repo)
    if not m:
        raise ValueError(f"the Colab badges open notebooks from GitHub; {repo} is not a GitHub repository URL")
    return m.group(1)


BADGE = re.compile(r"https://colab\.research\.google\.com/github/[^/\s)]+/[^/\s)]+/blob/[^/\s)]+/(?P<path>[^\s)]+)")
GIT_URL = re.compile(r"git\+https://github\.com/[^/\s\"']+/[^@\s\"']+@v[0-9][0-9A-Za-z.+-]*")
CLONE = re.compile(r"git clone (?:--branch \S+ )?https://github\.com/\S+?\.git")
TAG_PROSE = re.compile(r"the git tag `v[^`]+`")
IMAGE = re.compile(r"(course/train:)[0-9][0-9A-Za-z.+-]*")


def rewrite_text(text: str, repo: str, version: str) -> str:
    """``text`` with every badge, pip requirement, clone command, tag and image tag naming ``repo`` at ``version``."""
    github = _github_path(repo)
    text = BADGE.sub(lambda m: f"https://colab.research.google.com/github/{github}/blob/v{version}/{m['path']}", text)
    text = GIT_URL.sub(f"git+{repo}@v{version}", text)
    text = CLONE.sub(f"git clone --branch v{version} {repo}.git", text)
    text = TAG_PROSE.sub(f"the git tag `v{version}`", text)
    return IMAGE.sub(lambda m: f"{m[1]}{version}", text)


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in NOTEBOOK_FOLDERS for p in (root / d).glob("*.ipynb"))


def _render_notebook(path: Path, root: Path) -> str:
    repo, version = address(root)
    nb = nbformat.read(path, as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source = setup_cell(root)
    # folded: a bar in JupyterLab (click it to read the cell), a form on Colab, a "show" toggle on the website;
    # what it prints (the install, or why it failed and what to do) stays in view
    code.metadata["jupyter"] = {"source_hidden": True}
    code.metadata["cellView"] = "form"
    code.metadata["tags"] = sorted(set(code.metadata.get("tags", [])) | {"hide-input"})
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = rewrite_text(cell.source, repo, version)
    return nbformat.writes(nb) + "\n"


TEXT_FILES = ("README.md", "docs/scaling-out.md", "docs/gpu-and-tpu.md")


def planned(root: Path = ROOT) -> dict[Path, str]:
    """Every file that names the course's address, with the text it should have."""
    repo, version = address(root)
    out = {path: _render_notebook(path, root) for path in notebooks(root)}
    for name in TEXT_FILES:
        path = root / name
        if path.exists():
            out[path] = rewrite_text(path.read_text(), repo, version)
    return out


def stale(root: Path = ROOT) -> list[Path]:
    return [path for path, text in planned(root).items() if path.read_text() != text]


def release_check(repo: str, version: str) -> tuple[bool, str]:
    """Whether ``repo`` has the tag ``v<version>`` that every set-up cell installs (git ls-remote, no password)."""
    ref = f"refs/tags/v{version}"
    run = subprocess.run(
        ["git", "ls-remote", "--exit-code", "--tags", repo, ref],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        timeout=60,
    )
    if run.returncode == 0:
        return True, f"{repo} has {ref}: the set-up cells will install it"
    if run.returncode == 2:
        return False, (
            f"{repo} has no tag v{version}: every set-up cell would fail. Tag the release commit "
            f"(`git tag v{version}`) and push the tag (`git push origin v{version}`)."
        )
    return False, f"could not read {repo}'s tags: {run.stderr.strip()[-500:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="list the places that differ, change nothing")
    group.add_argument("--release-check", action="store_true", help="check that the repository has the release tag")
    parser.add_argument("--remote", help="with --release-check: the repository to ask (default: pyproject's)")
    args = parser.parse_args(argv)
    repo, version = address()
    if args.release_check:
        ok, message = release_check(args.remote or repo, version)
        print(message)
        return 0 if ok else 1
    if args.check:
        differ = stale()
        for path in differ:
            print(f"{path.relative_to(ROOT)} does not name {repo} at v{version}: run python3 tools/course_address.py")
        return 1 if differ else 0
    for path, text in planned().items():
        if path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
