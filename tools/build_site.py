#!/usr/bin/env python3
"""Build the course website from executed copies of the notebooks.

    python3 bootstrap.py site              # or: make site
    python tools/build_site.py [--out DIR] [--no-execute]

The notebooks are stored clean; the pages show executed copies from build/executed/ (tools/nbrun.py), the
ones the last test run or `bootstrap.py timings` wrote. A notebook with no executed copy made from its current
code is executed first (a fresh clone runs every notebook once, about ten minutes on two cores), unless
--no-execute is given. Each page says where its outputs were made and how many of its claims held there.

The landing page is the README (with the syllabus), then one page per module (notebooks/), one per
exercise solution (solutions/) and the guides (docs/). Plots are the stored images; widgets render
from the state saved in each notebook. Jupyter Book 1 (Sphinx + MyST-NB) does the rendering with
execution switched off. The widget front end (require.js and @jupyter-widgets/html-manager) is
fetched from the npm registry with `npm pack` at build time and served from the site itself, so a
page loads nothing from another server except the "Open in Colab" badge.

Output: build/site/html (open index.html, or serve it: python3 -m http.server -d build/site/html).
An executed copy with an error output (or a cell never run) stops the build with its name and cell.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nbrun  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "site"
TITLE = "Training ML models on the hardware you have"
REPOSITORY = "https://github.com/hardware-aware-ml/train-on-your-hardware"
# The widget front end the pages load, pinned; html-manager 1.x renders ipywidgets 8 state (and 7's).
NPM_PACKAGES = {"requirejs": "2.3.8", "@jupyter-widgets/html-manager": "1.0.15"}
NPM_INSTALL_HINT = "install Node.js with npm: `sudo apt-get install -y npm` (Debian/Ubuntu) or https://nodejs.org"
NPM_TIMEOUT_S = 180
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = (
    ":::{note}\nThe calculator above is drawn from the state saved when this notebook ran, with the "
    "default values. Moving its controls recomputes nothing here: that needs a running Python kernel. "
    "Open the notebook in JupyterLab (`python3 bootstrap.py lab`) or with the *Open in Colab* badge "
    "at the top, run the cells, and the result follows the controls.\n:::"
)


# The widget manager finds its fonts next to its own module, which require.js would look for next to the page.
WIDGETS_PATH_JS = """// Tell require.js that the widget manager's files are in _static/html-manager/,
// next to this script.
(function () {
  var here = document.currentScript.src.replace(/[^/]*$/, "");
  require.config({paths: {"@jupyter-widgets/html-manager/dist": here + "html-manager"}});
})();
"""


def _fonts_next_to_pages(html: Path) -> None:
    """Some widget controls' style sheets ask for the manager's fonts at ``@jupyter-widgets/<file>`` next to the
    page, whatever the manager's own path: put a copy of them there for every folder of pages with widgets."""
    fonts = [
        f
        for f in (html / "_static" / "html-manager").iterdir()
        if f.suffix in (".woff", ".woff2", ".ttf", ".eot", ".svg")
    ]
    for folder in {
        p.parent
        for p in html.rglob("*.html")
        if "_static" not in p.relative_to(html).parts and "jupyter-widgets" in p.read_text(errors="ignore")
    }:
        target = folder / "@jupyter-widgets"
        target.mkdir(exist_ok=True)
        for f in fonts:
            shutil.copy(f, target / f.name)


class SiteError(ValueError):
    """The site cannot be built from what is stored (a message says which notebook, which cell, what to do)."""


def stored_problems(path: Path) -> list[str]:
    """Why a notebook cannot be published as stored: code cells never run, or error outputs (empty if fine)."""
    nb = nbformat.read(path, as_version=4)
    name = _rel(path)
    problems = []
    code = [(i, c) for i, c in enumerate(nb.cells, 1) if c.cell_type == "code" and c.source.strip()]
    for i, cell in code:
        first = cell.source.strip().splitlines()[0][:60]
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            problems.append(
                f"{name}, cell {i} ({first!r}) has an error output: "
                f"{errors[0].get('ename', '?')}: {errors[0].get('evalue', '')}"
            )
        elif cell.get("execution_count") is None:
            problems.append(f"{name}, cell {i} ({first!r}) was never run: it has no stored outputs")
    return problems


def check_stored(paths: list[Path], what: str = "The site is built") -> None:
    """Raise SiteError naming every executed copy and cell that was not run or failed (``what``: the product
    made from them, for the message)."""
    problems = [p for path in paths for p in stored_problems(path)]
    if problems:
        raise SiteError(
            f"{what} from executed copies of the notebooks, and these are missing or "
            "failed:\n  " + "\n  ".join(problems) + "\nRun the notebooks again "
            "(`python3 bootstrap.py timings <notebook>`), fix any error, then build again."
        )


def executed_copies(sources: list[Path], execute: bool = True, out_root: Path | None = None) -> list[Path]:
    """The executed copy of each source notebook, made from its current code; a missing or stale one is made
    now (``execute``) or reported (SiteError)."""
    out_root = out_root or nbrun.EXECUTED
    stale = [s for s in sources if nbrun.load_executed(s, out_root) is None]
    if stale and not execute:
        raise SiteError(
            "no executed copy made from the current code of: "
            + ", ".join(_rel(s) for s in stale)
            + ". Run `python3 bootstrap.py timings` (or the tests), or build without --no-execute."
        )
    for i, source in enumerate(stale, 1):
        print(
            f"executing {_rel(source)} ({i} of {len(stale)}): it has no executed copy from its current code", flush=True
        )
        nbrun.execute(source, out_root, allow_errors=True)
    return [nbrun.executed_path(s, out_root) for s in sources]


def provenance_note(nb: nbformat.NotebookNode) -> str:
    """The note under a page's title: where its outputs were made, and how many of its claims held there."""
    run = nb.metadata.get("course_run")
    if not run:
        return ""
    return (
        f":::{{note}}\nThe outputs on this page were made on {nbrun.provenance(run)}. Run it yourself: "
        "your machine's numbers will differ, and its claims are judged again there. Each answer here is shown "
        "without a guess (the pages are made with `COURSE_REVEAL=1`); in your own session a measurement cell waits "
        "for your guess first.\n:::"
    )


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def npm_missing() -> str | None:
    """Why the widget front end cannot be fetched here (with the install command), or None."""
    return None if shutil.which("npm") else f"npm was not found: {NPM_INSTALL_HINT}"


def fetch_frontend(
    cache: Path, packages: dict[str, str] | None = None, what: str = "The widget front end"
) -> dict[str, Path]:
    """Unpack each pinned npm package (``packages``, name to version; by default the widget front end, NPM_PACKAGES),
    fetched once with `npm pack`, then kept in `cache`; ``what`` names them in the message when npm is missing."""
    cache.mkdir(parents=True, exist_ok=True)
    unpacked = {}
    for name, version in (NPM_PACKAGES if packages is None else packages).items():
        tarball = cache / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
        if not tarball.exists():
            why = npm_missing()
            if why:
                raise SiteError(f"{what} is fetched from the npm registry, but {why}")
            try:
                subprocess.run(
                    ["npm", "pack", f"{name}@{version}", "--pack-destination", str(cache)],
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=NPM_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired as exc:
                raise SiteError(
                    f"`npm pack {name}@{version}` did not finish in {NPM_TIMEOUT_S} s: is the npm "
                    "registry reachable from here?"
                ) from exc
            except subprocess.CalledProcessError as exc:
                raise SiteError(f"`npm pack {name}@{version}` failed:\n{exc.stderr.strip()}") from exc
        target = cache / tarball.stem
        if not target.exists():
            with tarfile.open(tarball) as tar:
                for member in tar.getmembers():  # a package is plain files under package/
                    if not (member.isfile() or member.isdir()) or member.name.startswith("/") or ".." in member.name:
                        raise SiteError(f"{tarball.name} holds an unexpected entry {member.name!r}")
                tar.extractall(target)
        unpacked[name] = target / "package"
    return unpacked


def stage_notebook(src: Path, dst: Path) -> int:
    """Copy an executed notebook for the site, with where it ran under its title and a note under every widget;
    returns the number of widgets."""
    nb = nbformat.read(src, as_version=4)
    cells, widgets = [], 0
    note = provenance_note(nb)
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):  # records are for the tests and run files; the page shows their text
            for mime in (nbrun.CLAIM_MIME, nbrun.VALUE_MIME, nbrun.RUN_MIME):
                out.get("data", {}).pop(mime, None)
        cells.append(cell)
        if i == 0 and note:
            cells.append(nbformat.v4.new_markdown_cell(note))
        if cell.cell_type == "code" and any(WIDGET_VIEW in o.get("data", {}) for o in cell.get("outputs", [])):
            cells.append(nbformat.v4.new_markdown_cell(WIDGET_NOTE))
            widgets += 1
    nb.cells = cells
    dst.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dst)
    return widgets


def _title(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            return cell.source.splitlines()[0][2:].strip()
    return path.stem


def toc(notebooks: list[Path], solutions: list[Path], guides: list[Path]) -> str:
    """Jupyter Book's table of contents: the README, then modules, solutions and guides."""

    def part(caption: str, paths: list[Path]) -> list[str]:
        return [f"  - caption: {caption}", "    chapters:"] + [
            f"      - file: {_rel(p).rsplit('.', 1)[0]}" for p in paths
        ]

    return (
        "\n".join(
            [
                "format: jb-book",
                "root: index",
                "parts:",
                *part("Modules", notebooks),
                *part("Exercise solutions", solutions),
                *part("Guides", guides),
            ]
        )
        + "\n"
    )


def config(widget_files: dict[str, dict[str, str]]) -> str:
    """Jupyter Book's _config.yml: no execution, widget scripts from the site, no outside servers."""
    cfg = {
        "title": TITLE,
        "author": "the course authors",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},
        # no dollarmath: "$2.50/h" is a price, not an equation
        "parse": {"myst_enable_extensions": ["colon_fence"]},
        "repository": {"url": REPOSITORY, "branch": "main", "path_to_book": ""},
        "launch_buttons": {"colab_url": "https://colab.research.google.com", "notebook_interface": "jupyterlab"},
        "html": {"use_repository_button": True, "home_page_in_navbar": True},
        "sphinx": {
            "config": {
                "html_static_path": ["_site_static"],
                "nb_ipywidgets_js": widget_files,
                "html_show_copyright": False,
                "html_context": {"default_mode": "light"},
            }
        },  # plots are drawn on white
    }
    return json.dumps(cfg, indent=1)  # YAML is a superset of JSON


def _run(step: str, cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SiteError(f"{step} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


def _render(src: Path, html: Path, quiet: bool) -> None:
    """Jupyter Book's Sphinx configuration, less thebe (live code from a public server, unused here), then Sphinx
    with warnings as errors, so a broken cross-reference fails the build."""
    _run(
        "jupyter-book config",
        [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "config", "sphinx", str(src)],
    )
    with (src / "conf.py").open("a") as conf:
        conf.write("\nextensions = [e for e in extensions if e not in ('sphinx_thebe', 'sphinx_comments')]\n")
    _run(
        "sphinx-build",
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "-n", "--keep-going"]
        + (["-q"] if quiet else [])
        + [str(src), str(html)],
    )


def build(out: Path = OUT, quiet: bool = True, execute: bool = True) -> dict:
    """Stage, check and render the site into out/html; returns what was built (pages, images, size, seconds)."""
    start = time.perf_counter()
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    solutions = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    guides = sorted((ROOT / "docs").glob("*.md"))
    copies = dict(zip(notebooks + solutions, executed_copies(notebooks + solutions, execute)))
    check_stored(list(copies.values()))
    packages = fetch_frontend(out / "npm")
    src, html = out / "src", out / "html"
    for stale in (src, html):
        shutil.rmtree(stale, ignore_errors=True)
    static = src / "_site_static"
    static.mkdir(parents=True)
    shutil.copy(packages["requirejs"] / "require.js", static / "require.js")
    shutil.copytree(
        packages["@jupyter-widgets/html-manager"] / "dist",
        static / "html-manager",
        ignore=shutil.ignore_patterns("*.map", "embed.js", "libembed-amd.js", "*.LICENSE.txt", "*.eot", "*.svg"),
    )  # old browsers' font formats
    (static / "widgets-path.js").write_text(WIDGETS_PATH_JS)
    widget_files = {"require.js": {}, "widgets-path.js": {}, "html-manager/embed-amd.js": {}}
    widgets = sum(stage_notebook(copy, src / _rel(p)) for p, copy in copies.items())
    for guide in guides:
        (src / "docs").mkdir(exist_ok=True)
        shutil.copy(guide, src / "docs" / guide.name)
    shutil.copy(ROOT / "README.md", src / "index.md")
    (src / "_toc.yml").write_text(toc(notebooks, solutions, guides))
    (src / "_config.yml").write_text(config(widget_files))
    _render(src, html, quiet)
    _fonts_next_to_pages(html)
    pages = [p for p in html.rglob("*.html") if "_static" not in p.relative_to(html).parts]
    size = sum(f.stat().st_size for f in html.rglob("*") if f.is_file())
    return {
        "html": html,
        "pages": len(pages),
        "modules": len(notebooks),
        "solutions": len(solutions),
        "widgets": widgets,
        "images": len(list((html / "_images").glob("*"))),
        "bytes": size,
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"build folder (default {_rel(OUT)})")
    parser.add_argument("--verbose", action="store_true", help="show Sphinx's output")
    parser.add_argument(
        "--no-execute", action="store_true", help="stop instead of executing a notebook that has no fresh executed copy"
    )
    args = parser.parse_args(argv)
    try:
        site = build(args.out.resolve(), quiet=not args.verbose, execute=not args.no_execute)
    except SiteError as exc:
        print(f"Site build failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"Built {site['pages']} pages ({site['modules']} modules, {site['solutions']} solutions, "
        f"{site['widgets']} widgets, {site['images']} images, {site['bytes'] / 2**20:.1f} MiB) "
        f"in {site['seconds']:.1f} s: {site['html'] / 'index.html'}"
    )
    print(f"Serve it with: python3 -m http.server --bind 127.0.0.1 --directory {_rel(site['html'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
