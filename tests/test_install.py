"""The notebooks' set-up cell and pyproject.toml agree, the cell keeps a hosted runtime's torch, and a failed
install says what happened and what to do.

The fast tests run the cell with pip faked; test_setup_cell_explains_real_failures runs pip and git for real in a
bare environment, and tools/check_hosted_install.py installs the course for real in a stand-in hosted runtime.
"""

import ast
import http.server
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import threading
import venv
from pathlib import Path

import pytest

import course_lib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import course_address  # noqa: E402

NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d).glob("*.ipynb"))
DEFAULT_REPO = "https://github.com/hardware-aware-ml/train-on-your-hardware"
NOT_RUNTIME = {"jupyterlab", "jupyter-server", "notebook", "ipykernel", "ipywidgets"}


def _parse_pyproject_by_regex(text: str) -> tuple[str, list[str]]:
    """The project's version and runtime dependencies, for Python 3.10 (no tomllib)."""
    version = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)
    block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.M | re.S).group(1)
    return version, re.findall(r'"([^"]+)"', re.sub(r"#.*", "", block))


def pyproject() -> tuple[str, list[str]]:
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return _parse_pyproject_by_regex(text)
    project = tomllib.loads(text)["project"]
    return project["version"], project["dependencies"]


def setup_cell(path: Path) -> str:
    nb = json.loads(path.read_text())
    source = next(c["source"] for c in nb["cells"] if c["cell_type"] == "code")
    return "".join(source) if isinstance(source, list) else source


def run_setup_cell(source: str, monkeypatch, returncode: int = 0, said: str = "") -> list[list[str]]:
    """Run the cell where course_lib is missing, pip faked (it answers ``returncode`` and ``said``); return pip's
    command lines. A zero return "installs" course_lib."""
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(list(cmd))
        assert kwargs["stdin"] == subprocess.DEVNULL and kwargs["env"]["GIT_TERMINAL_PROMPT"] == "0"
        if returncode == 0:
            monkeypatch.setitem(sys.modules, "course_lib", course_lib)  # "installed"
        return subprocess.CompletedProcess(cmd, returncode, "", said)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setitem(sys.modules, "course_lib", None)  # not installed: `import course_lib` fails
    exec(compile(source, "set-up cell", "exec"), {})
    return calls


def test_the_address_is_written_from_one_place():
    """pyproject.toml names the repository and version; every set-up cell, badge and install step follows it."""
    repo, version = course_address.address()
    assert version == course_lib.__version__ and repo == DEFAULT_REPO
    assert course_address.stale() == [], "run python3 tools/course_address.py"
    for path in NOTEBOOKS:
        assert setup_cell(path) == course_address.setup_cell(), path
        first = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        folded = first["metadata"]  # folded in JupyterLab, a form on Colab, a toggle on the website
        assert folded.get("jupyter") == {"source_hidden": True} and folded.get("cellView") == "form", path
        assert "hide-input" in folded.get("tags", []), path
        badges = [m.group(0) for m in course_address.BADGE.finditer(path.read_text())]
        assert badges and all(f"{repo.removeprefix('https://github.com/')}/blob/v{version}/" in b for b in badges), path
    readme = (ROOT / "README.md").read_text()
    assert f"git clone --branch v{version} {repo}.git" in readme and f"/blob/v{version}/notebooks/00_setup" in readme


def test_rewrite_moves_every_place_to_a_new_address():
    old = (
        "[badge](https://colab.research.google.com/github/a/b/blob/main/notebooks/x.ipynb) "
        'pip install "course-lib @ git+https://github.com/a/b@v0.1.0" the git tag `v0.1.0`; '
        "git clone https://github.com/a/b.git; FROM x; docker build -t r/course/train:0.1.0 ."
    )
    new = course_address.rewrite_text(old, "https://github.com/c/d", "1.2.3")
    assert new == (
        "[badge](https://colab.research.google.com/github/c/d/blob/v1.2.3/notebooks/x.ipynb) "
        'pip install "course-lib @ git+https://github.com/c/d@v1.2.3" the git tag `v1.2.3`; '
        "git clone --branch v1.2.3 https://github.com/c/d.git; FROM x; docker build -t r/course/train:1.2.3 ."
    )
    with pytest.raises(ValueError, match="not a GitHub repository"):
        course_address.rewrite_text(old, "https://gitlab.com/c", "1.2.3")


def test_pyproject_parsers_agree():
    """The Python 3.10 fallback reads what tomllib reads."""
    text = (ROOT / "pyproject.toml").read_text()
    version, deps = _parse_pyproject_by_regex(text)
    assert version == course_lib.__version__ and "torch>=2.6" in deps
    if sys.version_info >= (3, 11):
        assert (version, deps) == pyproject()


def test_runtime_dependencies_leave_the_jupyter_stack_alone():
    """A hosted runtime brings its own Jupyter: the install must not pull in (and so upgrade) any of it."""
    names = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower().replace("_", "-") for d in pyproject()[1]}
    assert "torch" in names and not names & NOT_RUNTIME
    assert not [n for n in names if n.startswith("jupyter")]


# imported only where present, each behind a check that says what is missing (tests name each case)
OPTIONAL_IMPORTS = {
    "torch_xla": "TPU runtimes bring it",
    "ipywidgets": "the sliders fall back to their text",
    "IPython": "only inside a notebook",
    "google": "only on Colab",
    "torchao": "imported by name, checked",
}
DISTRIBUTION = {"sklearn": "scikit-learn", "yaml": "pyyaml"}


def test_every_import_is_declared_or_optional():
    """A plain `pip install .` must bring everything course_lib imports (PyYAML once was imported, not declared)."""
    found = set()
    for path in (ROOT / "course_lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
    third_party = {
        name for name in found if name not in sys.stdlib_module_names and name not in ("course_lib", "__future__")
    }
    declared = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in pyproject()[1]}
    missing = sorted(n for n in third_party - set(OPTIONAL_IMPORTS) if DISTRIBUTION.get(n, n).lower() not in declared)
    assert not missing, f"course_lib imports {missing}, which pyproject.toml does not declare"
    assert {"torch", "yaml", "numpy"} <= third_party  # the scan sees imports inside functions too


def test_the_readme_lists_what_the_set_up_cell_installs():
    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = re.search(r"runtime dependencies are only what a hosted runtime may lack \(([^)]*)\)", readme)
    assert listed, "the README's 'Running in the cloud' names the runtime dependencies"
    declared = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in pyproject()[1]} - {"torch"}
    assert {n.strip().lower() for n in listed.group(1).split(",")} == declared


def test_every_notebook_has_a_setup_cell():
    assert len(NOTEBOOKS) >= 4 and any(p.parent.name == "exercises" for p in NOTEBOOKS)


def _pip_args(call: list[str]) -> list[str]:
    assert call[:5] == [sys.executable, "-m", "pip", "install", "-q"]
    return call[5:]


def test_setup_cell_installs_this_release_and_keeps_torch(monkeypatch, capsys, tmp_path):
    version = pyproject()[0]
    source = setup_cell(ROOT / "notebooks" / "00_setup.ipynb")
    declared = re.search(r'^COURSE_VERSION\s*=\s*"([^"]+)"', source, re.M)
    assert declared and declared.group(1) == version == course_lib.__version__
    monkeypatch.chdir(tmp_path)  # no wheel lies here
    monkeypatch.delenv("COURSE_SOURCE", raising=False)
    [call] = run_setup_cell(source, monkeypatch)
    torch_pin = f"torch=={importlib.metadata.version('torch')}"  # the installed torch, exactly
    assert _pip_args(call) == [f"course-lib @ git+{DEFAULT_REPO}@v{version}", torch_pin]
    assert "Note:" not in capsys.readouterr().out  # the installed course_lib is the release asked for

    monkeypatch.setenv("COURSE_SOURCE", "git+file:///tmp/clone")
    [call] = run_setup_cell(source, monkeypatch)
    assert _pip_args(call)[0] == f"course-lib @ git+file:///tmp/clone@v{version}"

    monkeypatch.setenv("COURSE_SOURCE", "/data/course_lib-0.0.0-py3-none-any.whl")  # a wheel: as named
    [call] = run_setup_cell(source, monkeypatch)
    assert _pip_args(call) == ["/data/course_lib-0.0.0-py3-none-any.whl", torch_pin]

    monkeypatch.setenv("COURSE_SOURCE", "https://example.org/fork")  # a plain URL is a git URL
    [call] = run_setup_cell(source, monkeypatch)
    assert _pip_args(call)[0] == f"course-lib @ git+https://example.org/fork@v{version}"

    monkeypatch.delenv("COURSE_SOURCE")
    (tmp_path / "course_lib-0.0.1-py3-none-any.whl").write_bytes(b"")  # another release's wheel: said, not used
    [call] = run_setup_cell(source, monkeypatch)
    assert _pip_args(call)[0].startswith("course-lib @ git+") and "Ignored course_lib-0.0.1" in capsys.readouterr().out
    wheel = tmp_path / f"course_lib-{version}-py3-none-any.whl"
    wheel.write_bytes(b"")  # a workshop's wheel in the notebook's folder is found without being named
    [call] = run_setup_cell(source, monkeypatch)
    assert _pip_args(call)[0] == wheel.name


def _without_torch(monkeypatch, version: str | None = None):
    real = importlib.metadata.version

    def fake(name):
        if name != "torch":
            return real(name)
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(importlib.metadata, "version", fake)


def test_setup_cell_without_torch_installs_any_torch(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    _without_torch(monkeypatch)
    [call] = run_setup_cell(setup_cell(ROOT / "notebooks" / "00_setup.ipynb"), monkeypatch)
    assert _pip_args(call)[-1] == "torch"


def test_setup_cell_refuses_a_torch_older_than_the_course_supports(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    _without_torch(monkeypatch, "2.5.1+cu121")
    with pytest.raises(RuntimeError, match=r"torch 2\.5\.1\+cu121; the course needs torch 2\.6 or newer"):
        run_setup_cell(setup_cell(ROOT / "notebooks" / "00_setup.ipynb"), monkeypatch)
    _without_torch(monkeypatch, "2.6.0+cu124")
    assert run_setup_cell(setup_cell(ROOT / "notebooks" / "00_setup.ipynb"), monkeypatch)


# What pip printed in each case, taken from real runs (test_setup_cell_explains_real_failures repeats them).
PIP_SAID = {
    "no network": (
        "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com",
        "no network",
    ),
    "missing tag": ("error: pathspec 'v9.9.9' did not match any file(s) known to git", "no release v"),
    "password": (
        "fatal: could not read Username for 'https://github.com': terminal prompts disabled",
        "asked for a password",
    ),
    "missing wheel": (
        "ERROR: Could not install packages due to an OSError: [Errno 2] No such file or directory",
        "wheel file is not there",
    ),
    "anything else": ("ERROR: something new", "read pip's message below"),
}


def test_a_wheel_without_network_is_told_that_pypi_is_missing(monkeypatch, tmp_path):
    """The wheel replaces GitHub, not PyPI: offline, the message must not send the learner back for the wheel."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COURSE_SOURCE", str(tmp_path / "course_lib-0.5.0-py3-none-any.whl"))
    with pytest.raises(RuntimeError, match="the wheel is here, but .* PyPI, which cannot be reached"):
        run_setup_cell(
            setup_cell(ROOT / "notebooks" / "00_setup.ipynb"),
            monkeypatch,
            returncode=1,
            said="NewConnectionError: Failed to establish a new connection",
        )


@pytest.mark.parametrize("case", PIP_SAID)
def test_setup_cell_says_what_went_wrong(case, monkeypatch, tmp_path):
    """%pip never raises, so the old cell ended in a bare ModuleNotFoundError: now it stops with the reason."""
    monkeypatch.chdir(tmp_path)
    said, reason = PIP_SAID[case]
    with pytest.raises(RuntimeError, match="Installing the course helpers failed") as failed:
        run_setup_cell(setup_cell(ROOT / "notebooks" / "00_setup.ipynb"), monkeypatch, returncode=1, said=said)
    assert reason in str(failed.value) and said in str(failed.value)


class _AsksForPassword(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the handler's name is http.server's)
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="private"')
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_setup_cell_explains_real_failures(tmp_path):
    """The failures above, for real: the cell run by a bare environment's Python (no course_lib, no torch), with
    pip and git really failing: no network, a repository without the tag, git asking for a password, no wheel,
    and a torch older than 2.6."""
    bare, run_dir, repo = tmp_path / "bare", tmp_path / "run", tmp_path / "repo"
    venv.EnvBuilder(with_pip=True).create(bare)
    python = bare / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    run_dir.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    repo.mkdir()
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "README").write_text("no tag here\n")
    subprocess.run(git + ["add", "README"], check=True)
    subprocess.run(git + ["commit", "-qm", "untagged"], check=True)
    server = http.server.HTTPServer(("127.0.0.1", 0), _AsksForPassword)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cell = setup_cell(ROOT / "notebooks" / "00_setup.ipynb")

    def run(source: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COURSE_SOURCE")}
        env.update({"PYTHONNOUSERSITE": "1"} | ({"COURSE_SOURCE": source} if source else {}))
        done = subprocess.run(
            [str(python), "-c", cell], cwd=run_dir, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode != 0, f"the cell installed something from {source}:\n{done.stdout}"
        return done.stderr

    try:
        cases = {
            "no network": ("git+https://course.invalid/no/repo", "no network"),
            "missing tag": (f"git+file://localhost{repo}", "no release v"),
            "password": (f"git+http://127.0.0.1:{server.server_port}/private/repo.git", "asked for a password"),
            "missing wheel": (str(tmp_path / "gone" / "course_lib-0.5.0-py3-none-any.whl"), "wheel file is not there"),
        }
        for case, (source, reason) in cases.items():
            said = run(source)
            error = next((line for line in said.splitlines() if line.startswith("RuntimeError: ")), said[-3000:])
            assert error.startswith("RuntimeError: Installing the course helpers failed: ") and reason in error, (
                case,
                said[-3000:],
            )
    finally:
        server.shutdown()
    site = next((bare / "lib").glob("python*/site-packages")) if os.name != "nt" else bare / "Lib" / "site-packages"
    info = site / "torch-2.5.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.5.1\n")
    said = run(None)
    assert "the course needs torch 2.6 or newer" in said and "Installing the course helpers from" not in said


@pytest.mark.slow
def test_the_release_check_fails_until_the_tag_is_pushed(tmp_path):
    """`course_address.py --release-check` asks the repository for the tag every set-up cell installs."""
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    ok, message = course_address.release_check(str(remote), "9.9.9")
    assert not ok and "has no tag v9.9.9" in message and "git push origin v9.9.9" in message
    work = tmp_path / "work"
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True, capture_output=True)
    (work / "f").write_text("x\n")
    subprocess.run(git + ["add", "f"], check=True)
    subprocess.run(git + ["commit", "-qm", "release"], check=True)
    subprocess.run(git + ["tag", "v9.9.9"], check=True)
    subprocess.run(git + ["push", "-q", "origin", "HEAD", "v9.9.9"], check=True, capture_output=True)
    ok, message = course_address.release_check(str(remote), "9.9.9")
    assert ok, message
    ok, message = course_address.release_check("https://course.invalid/none.git", "9.9.9")
    assert not ok and "could not read" in message
