"""Layer 4: checks, plots, widgets, report, cli; and the layering rule itself."""

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib import checks, cli, compute, doctor, layout, plots, widgets


def good(m, n, k):
    return 2 * m * n * k


def wrong(m, n, k):
    return m * n * k


def stub(m, n, k):
    raise NotImplementedError("Exercise: write your code here.")


def test_check_function_passes_good_code(capsys):
    n = checks.check_function(
        good,
        [((1, 2, 3), 12)],
        reference=lambda m, n, k: 2 * m * n * k,
        random_inputs=lambda rng: (rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)),
    )
    assert n == 26 and "all 26 checks passed" in capsys.readouterr().out


def test_check_function_explains_wrong_answer():
    with pytest.raises(checks.CheckFailed, match=r"expected 12, got 6\nHint: count the adds"):
        checks.check_function(wrong, [((1, 2, 3), 12)], hint="count the adds")


def test_check_function_catches_wrong_on_random_inputs():
    with pytest.raises(checks.CheckFailed, match="from the reference"):
        checks.check_function(wrong, reference=good, random_inputs=lambda rng: (rng.randint(1, 9), 2, 3))


def test_unfinished_exercise_message():
    with pytest.raises(checks.ExerciseNotDone, match="not written yet"):
        checks.check_function(stub, [((1, 1, 1), 2)])
    with pytest.raises(checks.ExerciseNotDone):
        checks.check_value("answer", None, 3)


def test_check_function_reports_crash_and_bad_setup():
    with pytest.raises(checks.CheckFailed, match="ZeroDivisionError"):
        checks.check_function(lambda x: 1 / x, [((0,), 1)])
    with pytest.raises(ValueError):
        checks.check_function(good)
    with pytest.raises(ValueError):
        checks.check_function(good, [((1, 1, 1), 2)], reference=good)
    with pytest.raises(TypeError):
        checks.check_function(3, [((1,), 1)])


def test_check_value_tolerance_and_structures(capsys):
    checks.check_value("x", 1.0000001, 1.0)
    checks.check_value("pair", (1.0, "memory"), (1.0, "memory"))
    with pytest.raises(checks.CheckFailed):
        checks.check_value("x", 1.1, 1.0)
    with pytest.raises(checks.CheckFailed):
        checks.check_value("d", {"a": 1}, {"a": 1, "b": 2})


@pytest.mark.slow
def test_plots_have_labels():
    import matplotlib

    matplotlib.use("Agg")
    fig, ax = plots.measured_vs_predicted(
        [1, 2], {"a": [1, 2]}, {"a": [1, 2.1]}, title="t", xlabel="x (s)", ylabel="y (B)"
    )
    assert ax.get_xlabel() == "x (s)" and ax.get_title() == "t"
    fig, ax = plots.roofline_plot(1e11, 1e10, {"add": (1 / 12, 1e9)})
    assert "FLOP / byte" in ax.get_xlabel()
    fig, ax = plots.bar_chart(["a", "b"], [1, 2], title="bars", xlabel="kind", ylabel="s")
    assert [b.get_height() for b in ax.patches] == [1, 2] and [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    with pytest.raises(ValueError, match="title"):
        plots.new_figure("", "x", "y")
    with pytest.raises(TypeError, match="xlabel must be a string"):
        plots.new_figure("t", None, "y")
    with pytest.raises(ValueError):
        plots.measured_vs_predicted([1, 2], {"a": [1]}, title="t", xlabel="x", ylabel="y")
    with pytest.raises(ValueError):
        plots.roofline_plot(-1, 1, {})
    matplotlib.pyplot.close("all")


def test_time_to_train_widget_text_matches_formula():
    text = widgets.time_to_train_text(124e6, 2.5e9, "a100-40gb", "bf16", 0.4, 1)
    expected = compute.format_duration(compute.time_to_train(124e6, 2.5e9, 312e12, 0.4, 1))
    assert expected in text and "A100" in text
    with pytest.raises(ValueError):
        widgets.time_to_train_text(124e6, 2.5e9, "t4", "bf16", 0.4, 1)  # T4 has no bf16
    box = widgets.time_to_train_widget()
    assert "FLOPs" in box.children[-1].value


@pytest.mark.parametrize("name", sorted(n.removesuffix("_widget") for n in dir(widgets) if n.endswith("_widget")))
def test_widget_without_ipywidgets_falls_back_to_its_text(monkeypatch, capsys, name):
    """ipywidgets is not a course dependency: without it, a widget returns None and says what it left out, what gives
    the same numbers and how to get the sliders, so a plain install runs every lesson to the end."""
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # `import ipywidgets` now raises ImportError
    assert getattr(widgets, f"{name}_widget")() is None
    said = capsys.readouterr().out
    assert f"course_lib.widgets.{name}_text(" in said and "same numbers" in said and "pip install ipywidgets" in said


WIDGETS = sorted(name.removesuffix("_widget") for name in dir(widgets) if name.endswith("_widget"))


@pytest.mark.parametrize("name", WIDGETS)
def test_every_widget_shows_its_text_twin(name):
    """<name>_widget shows <name>_text: same parameters, and each control marked with the one it sets
    (tests/test_widgets_browser.py finds them by these classes in a real browser)."""
    widget, text = getattr(widgets, f"{name}_widget"), getattr(widgets, f"{name}_text", None)
    assert text is not None, f"widgets.{name}_widget needs a pure twin widgets.{name}_text"
    params = list(inspect.signature(widget).parameters)
    assert params == list(inspect.signature(text).parameters), f"{name}_widget and {name}_text differ in parameters"
    box = widget()
    assert {"course-calculator", f"course-calculator-{name}"} <= set(box._dom_classes), "build it with _calculator"
    *controls, result = box.children
    marks = sorted(c for control in controls for c in control._dom_classes)
    assert marks == sorted(f"course-param-{p}" for p in params), "each control marked with its parameter"
    assert list(result._dom_classes) == ["course-result"]
    defaults = {p: v.default for p, v in inspect.signature(widget).parameters.items()}
    assert result.value == text(**defaults)


def test_plan_mentions_every_topic():
    rows = dict(doctor.adaptations())
    assert any("CPU demos" in k for k in rows) and "Want an accelerator?" in rows
    assert "Distributed demos" in rows


def test_cli_doctor_and_catalog(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "CPU" in out and "What the course does here" in out
    assert cli.main(["doctor", "--json"]) == 0
    assert '"cpu"' in capsys.readouterr().out
    assert cli.main(["catalog", "--dtype", "fp16"]) == 0
    assert "T4" in capsys.readouterr().out
    assert cli.main(["catalog", "--dtype", "fp99"]) == 2


ORDER = layout.order()
ROOT = Path(__file__).resolve().parents[1] / "course_lib"


def _modules() -> dict[str, Path]:
    """Every module of course_lib as 'name' or 'package.name' -> path (packages count as their name)."""
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if parts:
            out[".".join(parts)] = path
    return out


@pytest.mark.slow
def test_import_stays_light():
    """`import course_lib` and every module below layer 4 never pull in matplotlib or ipywidgets."""
    light = sorted(
        f"course_lib.{name}" for name in _modules() if layout.layer_of(name.split(".")[0]) < layout.PRESENTING
    )
    assert len(light) >= 20
    code = (
        f"import sys, course_lib, {', '.join(light)};"
        "bad=[m for m in ('matplotlib', 'ipywidgets') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _imported_course_modules(path: Path, module: str) -> set[str]:
    """The top-level course_lib modules a file imports, in any form: `from .x import y`,
    `from . import x`, `from ..x import y` (in a package), `import course_lib.x`, `from course_lib import x`."""
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = base + (node.module.split(".") if node.module else [])
                if target:
                    found.add(target[0])
                else:  # from . import x (at the top of course_lib)
                    found |= {a.name for a in node.names}
            elif node.module and node.module.split(".")[0] == "course_lib":
                rest = node.module.split(".")[1:]
                found |= {rest[0]} if rest else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "course_lib" and len(parts) > 1:
                    found.add(parts[1])
    return found


def _imports_of_drawing_packages(path: Path) -> set[str]:
    """matplotlib or ipywidgets imported anywhere in a file, inside a function too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )
        found |= {n.split(".")[0] for n in names} & {"matplotlib", "ipywidgets"}
    return found


def test_imports_go_down_the_layout_list_only():
    """A module imports only modules listed before it in course_lib.layout (any import form, inside functions
    too), and nothing below the presenting layer imports matplotlib or ipywidgets."""
    checked = 0
    for module, path in _modules().items():
        top = module.split(".")[0]
        assert top in ORDER, f"add {top} to course_lib/layout.py's LAYERS"
        for target in _imported_course_modules(path, module):
            if target == top:
                continue
            assert target in ORDER, f"{module} imports unknown course_lib.{target}"
            assert ORDER.index(target) < ORDER.index(top), (
                f"{module} imports {target}, listed after it in course_lib/layout.py: move one of them"
            )
            checked += 1
        if layout.layer_of(top) < layout.PRESENTING:
            assert not _imports_of_drawing_packages(path), f"{module} draws below the presenting layer: use plots"
    assert checked > 30
    assert set(ORDER) == {m.split(".")[0] for m in _modules()}, "a module in course_lib/layout.py does not exist"


def test_the_layout_check_sees_drawing_inside_functions(tmp_path):
    f = tmp_path / "mod.py"
    f.write_text("def draw():\n    import matplotlib.pyplot as plt\n    from ipywidgets import Button\n")
    assert _imports_of_drawing_packages(f) == {"matplotlib", "ipywidgets"}
    with pytest.raises(ValueError, match="layout"):
        layout.layer_of("nonexistent")


def test_the_package_docstring_and_the_guide_render_the_layout():
    import course_lib

    assert layout.text() in course_lib.__doc__
    guide = (Path(__file__).resolve().parents[1] / "CONTRIBUTING.md").read_text()
    assert layout.text(markdown=True) in guide, "run tools/library_map.py --write"


#: Functions allowed past 80 lines of code, each with its reason.
LONG_FUNCTIONS = {
    "report_card/page.py:_html": "the report card's HTML page as one template, read top to bottom like the page",
}


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines without its docstring (as ``ruff format`` lays it out)."""
    body = node.body
    first = body[0]
    if len(body) > 1 and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        if isinstance(first.value.value, str):
            first = body[1]
    return node.end_lineno - first.lineno + 1 + 1  # the body and the def line


def test_no_library_file_over_600_lines_and_no_function_over_80():
    """Each file does one job and each function one step a reader can hold: a longer file is split along its
    seams, a longer function (80 lines of code, its docstring aside) into named steps, or given a reason."""
    root = Path(layout.__file__).parent
    lengths = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    over = {f: n for f, n in lengths.items() if n > 600}
    assert not over, f"over 600 lines: {over}: split the file along its seams, or move code into a module of its own"
    long, seen = [], set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > 80:
                key = f"{path.relative_to(root)}:{node.name}"
                seen.add(key)
                if key not in LONG_FUNCTIONS:
                    long.append(f"{key} ({_code_lines(node)} lines)")
    assert not long, f"functions over 80 lines of code: {long}: split them into named steps"
    assert set(LONG_FUNCTIONS) <= seen, "a listed long function is gone or short now: remove it from LONG_FUNCTIONS"


def test_the_layer_check_sees_every_import_form(tmp_path):
    src = (
        "from . import plots\nfrom ..widgets import x\nimport course_lib.cli\nfrom course_lib import report\n"
        "from course_lib.checks import y\nfrom .meters import z\n"
    )
    f = tmp_path / "mod.py"
    f.write_text(src)
    # inside the memory package, `from . import plots` and `.meters` are memory's own modules
    assert _imported_course_modules(f, "memory.estimator") == {"memory", "widgets", "cli", "report", "checks"}
    # at the top of course_lib, `from . import plots` is the plots module (`..widgets` would leave the package)
    f.write_text("from . import plots, bench\nimport course_lib.cli\n")
    assert _imported_course_modules(f, "compute") == {"plots", "bench", "cli"}


def test_memory_calculator_text_matches_the_estimator():
    from course_lib import memory

    text = widgets.memory_calculator_text(1e9, "bf16-mixed", "adam", 0, 1, 2048, 1, 4096, 32, 32)
    m = memory.large_model_memory(1e9)
    assert f"{m['total'] / 1e9:.1f} GB" in text and "a100-80gb" in text and "t4" not in text
    assert "none" in widgets.memory_calculator_text(13e9, "bf16-mixed", "adam", 0, 1, 2048, 1, 4096, 32, 32)
    sharded = memory.large_model_memory(7e9, zero_stage=3, data_parallel=8)
    assert sharded["model_states"] == memory.model_states_bytes(int(7e9), "bf16-mixed", "adam", 3, 8)
    box = widgets.memory_calculator_widget()
    assert "GB per device" in box.children[-1].value
    with pytest.raises(ValueError):
        widgets.memory_calculator_text(7e9, "fp8", "adam", 0, 1, 2048, 1, 4096, 32, 32)


def test_score_guess_with_a_guess():
    s = checks.score_guess(
        10, 20, model=25, unit="GB/s", what="Copy bandwidth", model_name="STREAM model", name="guess_bw"
    )
    assert s.factor == pytest.approx(2.0) and s.direction == "low" and s.verdict == "close (within 2x)"
    assert s.model_factor == pytest.approx(1.25)
    text = repr(s)
    assert "your guess (guess_bw)   10 GB/s  (2.00x below the measurement)" in text
    assert "STREAM model" in text and "1.25x above" in text and "closer than your guess" in text
    assert checks.score_guess(21, 20).verdict == "spot on"
    assert checks.score_guess(300, 20).verdict == "off by more than 10x"
    assert checks.score_guess(100, 20).direction == "high"
    assert "beat the model" in str(checks.score_guess(20, 20, model=40))


def test_score_guess_without_a_guess_still_gives_the_answer():
    s = checks.score_guess(None, 0.8, model=1.0, unit="s", name="guess_seconds")
    assert s.factor is None and s.direction is None and s.verdict == "no guess"
    text = str(s)
    assert "No guess yet" in text and "`guess_seconds`" in text and "0.8 s" in text and "1 s" in text


def test_score_guess_signs_and_bad_input():
    assert checks.score_guess(-1, 0.5).verdict == "off by 1.5"
    with pytest.raises(TypeError, match="without quotes"):
        checks.score_guess("20", 20)
    with pytest.raises(TypeError, match="guess must be a number"):
        checks.score_guess(True, 20)
    with pytest.raises(ValueError, match="finite"):
        checks.score_guess(float("nan"), 20)
    with pytest.raises(TypeError, match="measured must be a number"):
        checks.score_guess(1, None)
    with pytest.raises(TypeError, match="unit must be a string"):
        checks.score_guess(1, 2, unit=3)


def test_check_function_explains_plausible_wrong_answers():
    def weights_only(a, b):
        return a * b

    with pytest.raises(checks.CheckFailed, match=r"expected 9, got 6\nthe biases are missing\nHint: count"):
        checks.check_function(
            weights_only, [((2, 3), 9, {6: "the biases are missing", 5: "a sum, not a product"})], hint="count"
        )
    with pytest.raises(checks.CheckFailed, match=r"got 6\nalways shown"):
        checks.check_function(weights_only, [((2, 3), 9, "always shown")])
    with pytest.raises(checks.CheckFailed, match=r"expected 9, got 6$"):  # no matching wrong answer: no text
        checks.check_function(weights_only, [((2, 3), 9, {5: "a sum"})])
    with pytest.raises(ValueError, match="each case"):
        checks.check_function(weights_only, [((2, 3),)])


def _largest_by_halving(fits):
    """The largest whole number that ``fits``: double until one does not, then halve the gap."""
    lo, hi = 0, 1
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def test_check_largest():
    fits = lambda n: n * 3 <= 10  # noqa: E731
    assert checks.check_largest(lambda: 3, fits, quiet=True) == 3
    assert checks.check_largest(lambda limit: limit // 3, fits, 10, quiet=True) == 3
    with pytest.raises(checks.CheckFailed, match="does not fit"):
        checks.check_largest(lambda: 4, fits)
    with pytest.raises(checks.CheckFailed, match="so does 3"):
        checks.check_largest(lambda: 2, fits)
    with pytest.raises(checks.CheckFailed, match="whole number"):
        checks.check_largest(lambda: 3.0, fits)

    def stub():
        raise NotImplementedError("Exercise: write your code here.")

    with pytest.raises(checks.ExerciseNotDone, match="not written yet"):
        checks.check_largest(stub, fits, hint="search")

    asked = []  # the costly function a search calls appends what it is asked

    def costly_fits(n):
        asked.append(n)
        return fits(n)

    def linear(limit):  # right answer, one ask per number: fine for 3, far too many for 3000
        n = 0
        while costly_fits(n + 1):
            n += 1
        return n

    def bisect(limit):
        return _largest_by_halving(costly_fits)

    big = lambda n: n <= 3000  # noqa: E731
    fits = big
    assert checks.check_largest(bisect, big, 0, quiet=True, asked=asked) == 3000
    assert len(asked) <= checks.core.search_budget(3000)
    with pytest.raises(checks.CheckFailed, match="asked about 3001 numbers"):
        checks.check_largest(linear, big, 0, asked=asked)
    with pytest.raises(TypeError, match="asked"):
        checks.check_largest(bisect, big, 0, asked=(1, 2))
    with pytest.raises(ValueError, match="answer"):
        checks.core.search_budget(-1)
    with pytest.raises(checks.CheckFailed, match="asked about 0"):
        checks.check_largest(lambda limit: 3000, big, 0, asked=asked)  # the answer typed in: no search
    with pytest.raises(TypeError, match="behind"):
        checks.check_largest(bisect, big, 0, behind=print)  # behind needs the probe's list


def test_check_largest_counts_a_library_search_around_the_probe():
    from course_lib import compute

    asked = []

    def probe(n):
        asked.append(n)
        return compute.training_step_intensity(n) <= 100  # n / 4: fits up to 400

    def around(limit):  # the same library function, called directly: uncounted asks
        lo = _largest_by_halving(lambda n: compute.training_step_intensity(n) <= limit)
        probe(lo), probe(lo + 1)
        return lo

    def through(limit):
        return _largest_by_halving(probe)

    fits = lambda n: n / 4 <= 100  # noqa: E731
    assert (
        checks.check_largest(through, fits, 100, quiet=True, asked=asked, behind=compute.training_step_intensity) == 400
    )
    with pytest.raises(checks.CheckFailed, match="ask through the probe"):
        checks.check_largest(around, fits, 100, asked=asked, behind=compute.training_step_intensity)


def _checkpoint(model, optimizer, step):
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "step": step,
    }


def _resume(checkpoint, model, optimizer):
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def test_check_resume_passes_a_full_resume_and_leaves_the_callers_generator_alone():
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    assert checks.check_resume(_checkpoint, _resume, quiet=True) == 2
    assert torch.equal(torch.rand(3), expected)


def test_check_resume_names_what_is_missing_and_rejects_bad_setup():
    def no_rng(checkpoint, model, optimizer):
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        return checkpoint["step"]

    with pytest.raises(checks.CheckFailed, match="random number generator"):
        checks.check_resume(_checkpoint, no_rng, hint="h")
    with pytest.raises(checks.ExerciseNotDone, match="not written yet"):
        checks.check_resume(_checkpoint, lambda c, m, o: (_ for _ in ()).throw(NotImplementedError()))
    with pytest.raises(TypeError, match="functions you wrote"):
        checks.check_resume(_checkpoint, None)
    with pytest.raises(ValueError, match="stops"):
        checks.check_resume(_checkpoint, _resume, stops=(0,))


def test_check_function_refuses_code_that_calls_its_reference():
    def lazy(n_params, n_tokens):
        return compute.training_flops(n_params, n_tokens)

    with pytest.raises(checks.CheckFailed, match="calls training_flops"):
        checks.check_function(
            lazy, [((1, 2), 12)], reference=compute.training_flops, random_inputs=lambda rng: (rng.randint(1, 9), 2)
        )
    with pytest.raises(checks.CheckFailed, match="calls training_flops"):  # `my_flops = compute.training_flops`
        checks.check_function(
            compute.training_flops,
            [((1, 2), 12)],
            reference=compute.training_flops,
            random_inputs=lambda rng: (rng.randint(1, 9), 2),
        )
    namespace = {"flops": compute.training_flops}  # the reference under another name, as in `flops = compute...`
    exec("def renamed(n_params, n_tokens):\n    return flops(n_params, n_tokens)", namespace)
    with pytest.raises(checks.CheckFailed, match="calls training_flops"):
        checks.check_function(
            namespace["renamed"],
            [((1, 2), 12)],
            reference=compute.training_flops,
            random_inputs=lambda rng: (rng.randint(1, 9), 2),
        )


def test_the_checks_package_shows_every_name_the_notebooks_use():
    """course_lib.checks is a package of parts; a notebook still reaches every check through ``checks.``."""
    for name in (
        "check_function",
        "check_value",
        "check_largest",
        "score_guess",
        "GuessScore",
        "CheckFailed",
        "ExerciseNotDone",
        "Checked",
        "gradscaler_step",
        "topk_step",
        "check_resume",
        "check_option_numbers",
        "check_hardware_choice",
        "pick_dtype",
        "PICK_DEVICE_COUNTS",
        "PICK_STATES_FRACTION",
        "PICK_UTILIZATION",
        "_fewest_micro_batches",
        "_hardware_option",
        "_hardware_options",
    ):
        assert hasattr(checks, name), name
    assert checks._fewest_micro_batches(4, 0.2) == 12 and issubclass(checks.ExerciseNotDone, checks.CheckFailed)


def test_a_passing_check_is_not_echoed_by_the_notebook(capsys):
    n = checks.check_function(good, [((1, 2, 3), 12)], quiet=True)
    assert n == 1 and isinstance(n, int) and n._ipython_display_() is None


def test_a_check_can_keep_its_expected_answer_out_of_the_message():
    with pytest.raises(checks.CheckFailed) as err:
        checks.check_function(lambda: {"add"}, [((), {"add", "matmul 256"})], reveal=False)
    assert "matmul 256" not in str(err.value) and "which is not it" in str(err.value)
