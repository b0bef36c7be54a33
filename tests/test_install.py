"""The notebooks' set-up cell and pyproject.toml agree, and the cell keeps a hosted runtime's torch.

Fast and offline: the cell's `%pip` line is expanded as IPython would expand it, but not run.
tools/check_hosted_install.py runs it for real, in a stand-in hosted runtime.
"""
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

import course_lib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d).glob("*.ipynb"))
DEFAULT_SOURCE = "git+https://github.com/hardware-aware-ml/train-on-your-hardware"
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


def run_setup_cell(source: str, monkeypatch) -> list[str]:
    """Run the cell as IPython would where course_lib is missing; return the expanded `%pip` lines."""
    pytest.importorskip("IPython")
    from IPython.core.inputtransformer2 import TransformerManager
    from IPython.utils.text import DollarFormatter

    ns: dict = {}
    pip_lines = []

    class Shell:  # the part of IPython the cell uses: a line magic, expanded like IPython's var_expand
        def run_line_magic(self, name, line, _stack_depth=1):
            assert name == "pip"
            pip_lines.append(DollarFormatter().vformat(line, args=[], kwargs=ns))
            monkeypatch.setitem(sys.modules, "course_lib", course_lib)  # "installed"

    ns["get_ipython"] = lambda: Shell()
    monkeypatch.setitem(sys.modules, "course_lib", None)  # not installed: `import course_lib` fails
    exec(TransformerManager().transform_cell(source), ns)
    return pip_lines


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


def test_every_notebook_has_a_setup_cell():
    assert len(NOTEBOOKS) >= 4 and any(p.parent.name == "exercises" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_setup_cell_installs_this_release_and_keeps_torch(path, monkeypatch, capsys):
    version = pyproject()[0]
    source = setup_cell(path)
    declared = re.search(r'^COURSE_VERSION\s*=\s*"([^"]+)"', source, re.M)
    assert declared, f"{path.name}: the first code cell does not set COURSE_VERSION"
    assert declared.group(1) == version == course_lib.__version__
    assert "@v{COURSE_VERSION}" in source

    import importlib.metadata

    monkeypatch.delenv("COURSE_SOURCE", raising=False)
    [line] = run_setup_cell(source, monkeypatch)
    torch_pin = f"torch=={importlib.metadata.version('torch')}"  # the installed torch, exactly
    assert shlex.split(line) == ["install", "-q", f"course-lib @ {DEFAULT_SOURCE}@v{version}", torch_pin]
    assert "Note:" not in capsys.readouterr().out  # the installed course_lib is the release asked for

    monkeypatch.setenv("COURSE_SOURCE", "git+file:///tmp/clone")
    [line] = run_setup_cell(source, monkeypatch)
    assert f'"course-lib @ git+file:///tmp/clone@v{version}"' in line


def test_setup_cell_without_torch_installs_any_torch(monkeypatch):
    import importlib.metadata

    real = importlib.metadata.version

    def version(name):
        if name == "torch":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    [line] = run_setup_cell(setup_cell(ROOT / "notebooks" / "00_setup.ipynb"), monkeypatch)
    assert shlex.split(line)[-1] == "torch"
