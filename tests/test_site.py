"""The course website: built from the stored notebooks (tools/build_site.py) and checked page by page in a
headless Chromium (tools/check_site.py). The unit tests need neither npm nor a browser; the build and the
browser check skip, with the install command, where those are missing."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import browser  # noqa: E402
import build_site  # noqa: E402
import check_site  # noqa: E402

import nbrun  # noqa: E402

PUBLISHED = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))


def _copies() -> list[Path]:
    """The executed copies the site is built from (the site fixture makes any that are missing)."""
    return [nbrun.executed_path(p) for p in PUBLISHED]


def _notebook(path: Path, cells: list) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A module")] + cells)
    nbformat.write(nb, path)
    return path


def _ran(source: str, outputs: list | None = None):
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = outputs or []
    return cell


@pytest.mark.executed
def test_every_executed_copy_is_fresh_and_error_free():
    fresh = [p for p in PUBLISHED if nbrun.load_executed(p) is not None]
    if not fresh:
        pytest.skip("no executed copies yet: run the notebooks (`python3 bootstrap.py test notebooks`)")
    build_site.check_stored([nbrun.executed_path(p) for p in fresh])


def test_a_notebook_stored_without_outputs_stops_the_build_naming_it_and_the_cell(tmp_path):
    path = _notebook(tmp_path / "05_compression.ipynb", [_ran("x = 1"), nbformat.v4.new_code_cell("print(x)")])
    with pytest.raises(build_site.SiteError) as err:
        build_site.check_stored([path])
    assert "05_compression.ipynb, cell 3 ('print(x)') was never run" in str(err.value)
    assert "bootstrap.py timings" in str(err.value)


def test_an_error_output_stops_the_build_naming_the_notebook_and_cell(tmp_path):
    error = nbformat.v4.new_output("error", ename="ValueError", evalue="bad size", traceback=[])
    path = _notebook(tmp_path / "06_distributed.ipynb", [_ran("import torch"), _ran("train(-1)", [error])])
    problems = build_site.stored_problems(path)
    assert problems == [f"{path}, cell 3 ('train(-1)') has an error output: ValueError: bad size"]


def test_the_build_checks_the_notebooks_before_fetching_anything(tmp_path, monkeypatch):
    (tmp_path / "notebooks").mkdir()
    _notebook(tmp_path / "notebooks" / "04_mixed_precision.ipynb", [nbformat.v4.new_code_cell("1 + 1")])
    monkeypatch.setattr(build_site, "ROOT", tmp_path)
    monkeypatch.setattr(build_site, "fetch_frontend", lambda cache: pytest.fail("fetched before checking"))
    assert build_site.main(["--out", str(tmp_path / "site"), "--no-execute"]) == 1


def test_without_npm_the_build_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no npm on it
    with pytest.raises(build_site.SiteError, match="apt-get install -y npm"):
        build_site.fetch_frontend(tmp_path / "cache")


def test_without_a_browser_the_checks_skip_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_CHROMIUM", str(tmp_path / "no-such-chromium"))
    assert "apt-get install -y chromium" in browser.missing()


def test_a_page_says_where_it_ran_and_a_widget_cell_that_the_controls_need_a_kernel(tmp_path):
    view = nbformat.v4.new_output(
        "display_data", data={build_site.WIDGET_VIEW: {"model_id": "ab12"}, "text/plain": "VBox()"}
    )
    path = _notebook(tmp_path / "01_processing_units.ipynb", [_ran("widget", [view]), _ran("x = 1")])
    nb = nbformat.read(path, as_version=4)
    nb.metadata["course_run"] = {
        "cpu": "AMD EPYC",
        "cores": 2,
        "accelerator": "none",
        "torch": "2.13.0+cpu",
        "date": "2026-12-01",
        "seconds": 26.1,
        "claims": 5,
        "claims_held": 5,
    }
    nbformat.write(nb, path)
    assert build_site.stage_notebook(path, tmp_path / "staged.ipynb") == 1
    staged = nbformat.read(tmp_path / "staged.ipynb", as_version=4)
    assert staged.cells[1].source.startswith(
        ":::{note}\nThe outputs on this page were made on AMD EPYC, 2 cores, "
        "torch 2.13.0+cpu (accelerator: none), on 2026-12-01, in 26 s; "
        "5 of its 5 claims held there."
    )
    notes = [c for c in staged.cells if c.source == build_site.WIDGET_NOTE]
    assert len(notes) == 1 and "running Python kernel" in notes[0].source


def test_notebook_kernels_draw_inline_figures_even_under_the_test_runs_agg_backend(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert "MPLBACKEND" not in nbrun.kernel_env()


def test_a_claims_record_is_not_published_its_line_is(tmp_path):
    from course_lib import claims

    bundle = claims.judge("x", 3.0, above=2, no_effect=1.0)._repr_mimebundle_()
    out = nbformat.v4.new_output("display_data", data=bundle)
    path = _notebook(tmp_path / "07_1_benchmarking.ipynb", [_ran("claim(...)", [out])])
    build_site.stage_notebook(path, tmp_path / "staged.ipynb")
    data = nbformat.read(tmp_path / "staged.ipynb", as_version=4).cells[1].outputs[0].data
    assert claims._MIME not in data and data["text/plain"].startswith("Claim held: x.")


def test_a_missing_executed_copy_is_made_or_reported(tmp_path):
    (tmp_path / "notebooks").mkdir()
    source = _notebook(tmp_path / "notebooks" / "03_interconnect.ipynb", [nbformat.v4.new_code_cell("print(6 * 7)")])
    out = tmp_path / "executed"
    with pytest.raises(build_site.SiteError, match="no executed copy made from the current code of"):
        build_site.executed_copies([source], execute=False, out_root=out)


def test_a_link_resolves_only_to_an_existing_page_and_anchor(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01.html").write_text('<h2 id="roofline">Roofline</h2>')
    base = "http://127.0.0.1:8000/"
    assert check_site.broken_link(tmp_path, base, base + "notebooks/01.html#roofline") is None
    assert "no such file" in check_site.broken_link(tmp_path, base, base + "notebooks/02.html")
    assert "no element with id 'peak'" in check_site.broken_link(tmp_path, base, base + "notebooks/01.html#peak")


# --- the real site: built once, then checked in Chromium (after the notebook tests; see conftest.py) ---


@pytest.fixture(scope="module")
def site() -> dict:
    why = build_site.npm_missing()
    cached = (build_site.OUT / "npm").is_dir() and all(
        any((build_site.OUT / "npm").glob(f"*{v}.tgz")) for v in build_site.NPM_PACKAGES.values()
    )
    if why and not cached:
        pytest.skip(f"The site build fetches the widget front end with npm, and {why}")
    return build_site.build()


def _stored(mime: str) -> int:
    return sum(
        mime in o.get("data", {})
        for path in _copies()
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
    )


@pytest.mark.browser
def test_the_site_has_a_page_per_module_solution_and_guide_with_every_plot(site):
    html = site["html"]
    for path in PUBLISHED + sorted((ROOT / "docs").glob("*.md")):
        page = html / path.relative_to(ROOT).with_suffix(".html")
        assert page.is_file(), f"no page for {path.relative_to(ROOT)}"
    assert (html / "index.html").read_text().count("notebooks/01_processing_units.html") >= 1
    assert site["images"] == _stored("image/png"), "every stored plot should be one image of the site"
    assert site["widgets"] == _stored(build_site.WIDGET_VIEW)
    assert not list(html.rglob("*.ipynb_checkpoints")), "stray checkpoint folders in the site"
    for page in html.rglob("*.html"):  # a link to a notebook becomes its page (the download button: its file)
        local = [h for h in re.findall(r'href="([^"]+)"', page.read_text()) if "://" not in h and "_sources/" not in h]
        assert not [h for h in local if ".ipynb" in h], f"{page.name} links to a notebook file, not its page"
    assert 'href="01_processing_units.html"' in (html / "notebooks" / "00_setup.html").read_text()


@pytest.mark.browser
def test_every_page_loads_cleanly_in_a_browser(site):
    why = browser.missing()
    if why:
        pytest.skip(f"The site check needs a browser: {why}")
    report = check_site.check(site["html"])
    print(check_site.summary(report))
    assert not report["failures"], check_site.summary(report)
    assert report["pages"] == len(check_site.pages(site["html"]))
    assert report["widgets"] == site["widgets"], "every stored calculator should render its saved result"
    assert set(report["outside"]) <= set(check_site.ALLOWED_OUTSIDE)
    assert len(list(report["screenshots"].glob("*.png"))) >= report["pages"]


@pytest.mark.browser
def test_the_site_check_catches_a_broken_page(site, tmp_path):
    """The check can fail: a missing image, a dead link, a script from another server and a JavaScript error."""
    why = browser.missing()
    if why:
        pytest.skip(f"The site check needs a browser: {why}")
    copy = tmp_path / "html"
    shutil.copytree(site["html"], copy)
    page = copy / "notebooks" / "02_memory.html"
    text = page.read_text().replace(
        "</body>",
        '<a href="05_compression.html">next</a>'
        '<script src="https://cdn.example.org/x.js"></script>'
        "<script>undefinedFunction()</script></body>",
    )
    page.write_text(text)
    shown = re.search(r"_images/([0-9a-f]+\.png)", text).group(1)  # a plot of the page checked below
    image = copy / "_images" / shown
    image.unlink()
    plotted = [f"notebooks/{p.stem}.html" for p in _copies()[:4] if "image/png" in p.read_text()]
    report = check_site.check(copy, tmp_path / "shots", only=plotted)
    problems = "\n".join(p for f in report["failures"] for p in f["problems"])
    assert "05_compression.html: no such file" in problems
    assert "request left the site: https://cdn.example.org/x.js" in problems
    assert "undefinedFunction" in problems
    assert image.name in problems, "the deleted plot should be reported as not loading"
    assert str(tmp_path / "shots") in check_site.summary(report), "a failure names its screenshot"


@pytest.mark.executed
def test_executed_copies_keep_only_the_state_of_widgets_they_show():
    """The site draws calculators from the saved state; progress bars' state is dropped from the executed copies."""
    for path in [p for p in PUBLISHED if nbrun.load_executed(p) is not None]:
        nb = nbformat.read(nbrun.executed_path(path), as_version=4)
        before = dict(nb.metadata.get("widgets", {}).get(nbrun.WIDGET_STATE, {}).get("state", {}))
        nbrun.keep_shown_widgets(nb)
        after = nb.metadata.get("widgets", {}).get(nbrun.WIDGET_STATE, {}).get("state", {})
        assert before == after, f"the executed copy of {path.name} keeps state of widgets no output shows"


def test_only_ci_installs_the_browser_and_npm_with_apt_get(monkeypatch):
    """A learner's machine never gets system packages installed; CI gets what is missing."""
    sys.path.insert(0, str(ROOT))
    import bootstrap

    calls = []
    monkeypatch.setattr(bootstrap, "_run", lambda cmd, **kwargs: calls.append(cmd))
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None)
    monkeypatch.delenv("CI", raising=False)
    bootstrap.ci_system_packages()
    assert calls == []
    monkeypatch.setenv("CI", "true")
    bootstrap.ci_system_packages()
    assert calls[-1][-2:] == ["chromium", "npm"] and "apt-get" in calls[-1]
