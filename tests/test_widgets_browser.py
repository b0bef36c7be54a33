"""Every calculator of the course, used as a learner uses it: in a real JupyterLab, in a headless Chromium.

A widget is found wherever a notebook cell calls ``widgets.<name>_widget(...)``. For each one the test
opens the notebook, runs its setup and import cells and the widget cell with Shift+Enter, checks the
result line shows ``widgets.<name>_text`` of the values in the call (or the defaults), then changes
every control in turn and checks, after each change, that the result line shows ``<name>_text`` of
the values all controls now display. Controls and the result line are found by the DOM classes that
``course_lib.widgets._calculator`` adds (``course-param-<parameter>``, ``course-result``).

Run it alone with ``python -m pytest tests/test_widgets_browser.py -s`` (``-s`` prints where the
screenshots are). It needs Playwright and a Chromium (tools/browser.py says how to get them).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import psutil
import pytest

from course_lib import widgets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import browser  # noqa: E402

pytestmark = pytest.mark.browser

SHOTS = ROOT / "build" / "browser"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
START_S = 120  # JupyterLab answering its API (usually 5-15 s here)
KERNEL_MS = 120_000  # a notebook open with its kernel idle
CELL_MS = 240_000  # one cell run (the import cell imports torch and profiles the CPU: ~10 s)
UPDATE_MS = 30_000  # a control change reaching the kernel and the result line coming back
SETTINGS = {  # user settings of the JupyterLab under test
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},  # every cell stays in the DOM
}


# ---- finding the widgets ------------------------------------------------------------------------


@dataclass
class Case:
    notebook: Path
    cells: list[int]  # indices in nb.cells to run: the setup cells up to the import of widgets, then the widget cell
    name: str  # the widget is widgets.<name>_widget, its pure twin widgets.<name>_text
    call: ast.Call
    problem: str | None = None  # why the notebook breaks the convention

    @property
    def id(self) -> str:
        return f"{self.notebook.parent.name}-{self.notebook.stem}-{self.name}"


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # a cell with IPython magics
        return None


def _nodes(tree: ast.Module | None):
    return ast.walk(tree) if tree is not None else []


def _widget_calls(tree: ast.Module | None) -> list[ast.Call]:
    return [
        node
        for node in _nodes(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "widgets"
        and node.func.attr.endswith("_widget")
    ]


def _imports_widgets(tree: ast.Module | None) -> bool:
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "course_lib"
        and any(alias.name == "widgets" for alias in node.names)
        for node in _nodes(tree)
    )


def find_cases() -> list[Case]:
    """One case per widget call in a code cell of notebooks/ or solutions/."""
    cases = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        trees = {i: _parse(cell.source) for i, cell in enumerate(cells) if cell.cell_type == "code"}
        importing = next((i for i, tree in trees.items() if _imports_widgets(tree)), None)
        setup = [i for i in trees if importing is not None and i <= importing]
        for i, tree in trees.items():
            for call in _widget_calls(tree):
                problem = (
                    None
                    if importing is not None and importing < i
                    else "no code cell before the widget cell runs `from course_lib import ..., widgets`"
                )
                cases.append(Case(path, setup + [i], call.func.attr.removesuffix("_widget"), call, problem))
    return cases


CASES = find_cases()


def test_every_widget_shown_in_a_notebook_is_found():
    """A cell whose stored output shows a widget must call widgets.<name>_widget(...), or it goes untested."""
    assert CASES, "no notebook cell calls widgets.<name>_widget(...)"
    found = {(c.notebook, c.cells[-1]) for c in CASES}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            shows = any(WIDGET_MIME in out.get("data", {}) for out in cell.get("outputs", []))
            assert not shows or (path, i) in found, (
                f"{path.name} cell {i} shows a widget but does not call widgets.<name>_widget(...)"
            )


def call_values(case: Case) -> dict:
    """The values the widget starts with: the call's literal arguments over the function's defaults."""
    widget = getattr(widgets, f"{case.name}_widget", None)
    assert widget is not None, f"{case.notebook.name} calls widgets.{case.name}_widget, which does not exist"
    try:
        args = [ast.literal_eval(a) for a in case.call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in case.call.keywords}
    except ValueError as exc:
        raise AssertionError(f"{case.notebook.name}: pass widgets.{case.name}_widget literal values only") from exc
    bound = inspect.signature(widget).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def expected_text(name: str, values: dict) -> str:
    """What the result line must show: <name>_text of the values, or its error (the widget shows it in red)."""
    try:
        return getattr(widgets, f"{name}_text")(**values)
    except ValueError as exc:
        return str(exc)


# ---- JupyterLab and Chromium --------------------------------------------------------------------


class Lab:
    """A JupyterLab server started for this module, serving a copy of the notebooks."""

    def __init__(self, tmp: Path):
        self.root, self.log_path = tmp / "root", tmp / "jupyterlab.log"
        for folder in ("notebooks", "solutions"):  # a copy: nothing the browser does can touch the course's files
            if (ROOT / folder).is_dir():
                shutil.copytree(ROOT / folder, self.root / folder)
        settings = tmp / "settings"
        for plugin, values in SETTINGS.items():
            package, name = plugin.rsplit("/", 1)
            (settings / package).mkdir(parents=True, exist_ok=True)
            (settings / package / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "JUPYTER_DATA_DIR": str(tmp / "data"),
            "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "IPYTHONDIR": str(tmp / "ipython"),
        }
        self.token, port = secrets.token_hex(16), browser.free_port()
        self.url = f"http://127.0.0.1:{port}"
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
            "--LabApp.expose_app_in_browser=True",
        ]
        if os.geteuid() == 0:
            command.append("--allow-root")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            command, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(
            f"{self.url}/api/{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"JupyterLab exited with code {self.process.returncode}:\n{self.log_tail()}")
            try:
                self.api("status")
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"JupyterLab did not answer on {self.url} within {START_S} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def page_url(self, workspace: str, path: Path) -> str:
        where = path.relative_to(ROOT).as_posix()
        return f"{self.url}/lab/workspaces/{workspace}/tree/{where}?reset&token={self.token}"

    def shut_down_kernels(self) -> None:
        try:
            for session in self.api("sessions"):
                self.api(f"sessions/{session['id']}", method="DELETE")
        except OSError:
            pass  # the server is gone; stop() kills what is left

    def stop(self) -> None:
        """Stop the server and every process it started (kernels run in sessions of their own)."""
        try:
            started = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            started = []
        try:
            self.api("shutdown", method="POST")  # shuts its kernels down, then exits
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the fallback; nothing left after a clean exit
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        for child in started:
            try:
                child.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(started, timeout=30)
        self.log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = browser.missing()
    if reason:
        pytest.skip(reason)
    server = Lab(tmp_path_factory.mktemp("jupyterlab"))
    try:
        server.wait_until_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chromium(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chrome = browser.launch(playwright)
        try:
            yield chrome
        finally:
            chrome.close()


# ---- what a learner does ------------------------------------------------------------------------


def poll(read, done, timeout_ms: int, what: str):
    """read() until done(value) holds; on timeout an AssertionError says what was awaited and what was seen."""
    deadline, value = time.monotonic() + timeout_ms / 1000, None
    while time.monotonic() < deadline:
        value = read()
        if done(value):
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout_ms / 1000:.0f} s for {what}; last seen: {value!r}")


def run_cell(page, index: int, count: int) -> None:
    """Select cell `index`, press Shift+Enter, wait for its prompt to say [count] and check it shows no error."""
    page.evaluate(
        """async (i) => {
        const notebook = window.jupyterapp.shell.currentWidget.content;
        notebook.activeCellIndex = i; notebook.mode = 'command';
        await notebook.scrollToItem(i); notebook.node.focus(); }""",
        index,
    )
    page.keyboard.press("Shift+Enter")
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    # the cell's model, not its prompt: a folded cell (the set-up cell) shows no prompt
    read_count = """(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.executionCount"""
    poll(
        lambda: page.evaluate(read_count, index),
        lambda value: value == count,
        CELL_MS,
        f"cell {index} to finish as [{count}]",
    )
    errors = cell.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').all_inner_texts()
    assert not errors, f"cell {index} shows an error or a warning:\n" + "\n".join(errors)[-3000:]


READ_CONTROLS = """box => Array.from(box.children).map(el => {
    const param = Array.from(el.classList).find(c => c.startsWith('course-param-'));
    const select = el.querySelector('select'), readout = el.querySelector('.widget-readout');
    const input = el.querySelector('input'), box = input && input.type === 'checkbox';
    const kind = select ? 'dropdown' : readout ? 'slider' : box ? 'checkbox' : input ? 'text' : 'other';
    const shown = select ? select.options[select.selectedIndex].text : readout ? readout.textContent
                : box ? String(input.checked) : input ? input.value : el.innerText;
    return {param: param ? param.slice('course-param-'.length) : null, kind, shown: shown.trim(),
            result: el.classList.contains('course-result'), classes: el.className,
            options: select ? Array.from(select.options).map(o => o.text) : []};
})"""


def read_controls(box) -> dict[str, dict]:
    """Each control's kind and shown text, by parameter; every child must be a marked control or the result."""
    found = box.evaluate(READ_CONTROLS)
    strays = [c["classes"] for c in found if c["param"] is None and not c["result"]]
    assert not strays, f"controls without a course-param-<parameter> class (build widgets with _calculator): {strays}"
    return {c["param"]: c for c in found if c["param"]}


def shown_values(controls: dict[str, dict], like: dict) -> dict:
    """The values the controls display, typed like the call's values.

    A log slider's readout shows 3 significant digits, so the test only gives it values it shows exactly
    (ipywidgets 8 still sends the kernel 10**log10(value), which may differ in the 16th digit). A check box
    shows "true" or "false" (``bool("false")`` would be True).
    """

    def typed(c: dict, value):
        if isinstance(value, bool):
            assert c["kind"] == "checkbox", f"a {c['kind']} holds the flag {value!r}"
            return c["shown"] == "true"
        return c["shown"] if isinstance(value, str) else type(value)(c["shown"])

    return {p: typed(c, like[p]) for p, c in controls.items()}


def result_text(box) -> str:
    return " ".join(box.locator(".course-result").inner_text().split())


def shows_an_error(name: str, values: dict) -> bool:
    try:
        getattr(widgets, f"{name}_text")(**values)
        return False
    except ValueError:
        return True


def type_into(page, field, text: str) -> None:
    field.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def change(page, box, param: str, control: dict, values: dict, name: str) -> None:
    """Change one control as a learner would (another option, an arrow key, a typed number) and wait until it shows."""
    element, value, before = box.locator(f".course-param-{param}"), values[param], control["shown"]

    def shown() -> str:
        return read_controls(box)[param]["shown"]

    if control["kind"] == "checkbox":
        element.locator("input").click()
    elif control["kind"] == "dropdown":
        others = [o for o in control["options"] if o != before]
        assert others, f"{param}: a dropdown with one option cannot be changed"
        valid = [o for o in others if not shows_an_error(name, {**values, param: o})]
        element.locator("select").select_option(label=(valid or others)[0])
    elif control["kind"] == "slider" and isinstance(value, int):
        handle = element.locator(".noUi-handle")
        at_max = float(handle.get_attribute("aria-valuenow")) >= float(handle.get_attribute("aria-valuemax"))
        handle.focus()
        handle.press("ArrowLeft" if at_max else "ArrowRight")
    elif control["kind"] in ("slider", "text") and isinstance(value, float):
        # a readout shows 3 significant digits: typing such a number makes the shown value the real one
        field = element.locator(".widget-readout" if control["kind"] == "slider" else "input")
        tries = [f"{value * 2:.3g}", f"{value / 2:.3g}"]  # the second if the first was out of range
        if control["kind"] == "slider":
            handle = element.locator(".noUi-handle")
            if float(handle.get_attribute("aria-valuenow")) >= float(handle.get_attribute("aria-valuemax")):
                tries.reverse()  # at its top a doubled value is clamped back to where it was: nothing changes
        for typed in tries:
            type_into(page, field, typed)
            if float(poll(shown, lambda text: text != before, UPDATE_MS, f"{param} to change")) == float(typed):
                return
        raise AssertionError(f"{param}: typed {value * 2:.3g} and {value / 2:.3g}, the readout shows {shown()}")
    else:
        raise AssertionError(f"{param}: no way to change a {control['kind']} holding {value!r}")
    poll(shown, lambda text: text != before, UPDATE_MS, f"{param} to change from {before}")


def check_result(box, name: str, values: dict, when: str) -> None:
    expected = " ".join(expected_text(name, values).split())
    poll(
        lambda: result_text(box),
        lambda text: text == expected,
        UPDATE_MS,
        f"the result {when} to equal widgets.{name}_text(**{values}) = {expected!r}",
    )


def exercise(page, lab: Lab, case: Case) -> int:
    """Open the notebook, run the widget's cells, check the first result, change every control. Returns the count."""
    assert case.problem is None, f"{case.notebook.name}: {case.problem}"
    values = call_values(case)
    page.goto(lab.page_url(case.id, case.notebook))
    status = page.locator("#jp-main-statusbar")
    poll(status.inner_text, lambda text: "| Idle" in text, KERNEL_MS, "the status bar to say '| Idle'")
    page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    for count, index in enumerate(case.cells, start=1):
        run_cell(page, index, count)
    box = page.locator(".jp-Notebook .jp-Cell").nth(case.cells[-1]).locator(f".course-calculator-{case.name}")
    box.wait_for(timeout=UPDATE_MS)

    controls = read_controls(box)
    assert set(controls) == set(values), (
        f"controls for {sorted(controls)}, but {case.name}_widget takes {sorted(values)}"
    )
    assert shown_values(controls, values) == values, f"the controls show {shown_values(controls, values)}, not {values}"
    check_result(box, case.name, values, "at first")
    for param in controls:
        change(page, box, param, read_controls(box)[param], values, case.name)
        values = shown_values(read_controls(box), values)
        check_result(box, case.name, values, f"after changing {param}")
    SHOTS.mkdir(parents=True, exist_ok=True)
    box.screenshot(path=SHOTS / f"{case.id}.png")
    return len(controls)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_widget_in_jupyterlab(lab, chromium, case):
    """What the widget shows equals its pure function, at first and after a change of each control."""
    from playwright.sync_api import Error as PlaywrightError

    page = chromium.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(UPDATE_MS)
    started = time.monotonic()
    try:
        exercised = exercise(page, lab, case)
    except (AssertionError, PlaywrightError) as exc:
        SHOTS.mkdir(parents=True, exist_ok=True)
        shot = SHOTS / f"{case.id}-failure.png"
        try:
            page.screenshot(path=shot, full_page=True)
        except PlaywrightError:
            shot = "(none: the page did not answer)"
        raise AssertionError(f"{case.id}: {exc}\nscreenshot: {shot}\nJupyterLab log: {lab.log_path}") from exc
    finally:
        page.close()
        lab.shut_down_kernels()
    print(
        f"\n{case.name}_widget in {case.notebook.relative_to(ROOT)}: {exercised} controls changed, each checked "
        f"against {case.name}_text ({time.monotonic() - started:.0f} s); screenshot {SHOTS / (case.id + '.png')}"
    )
