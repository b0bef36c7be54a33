"""The instructors' slide decks: built from the executed notebooks (tools/build_slides.py) and checked deck by deck in
a headless Chromium (tools/check_slides.py). The unit tests split a small executed notebook made here into slides
and need neither npm nor a browser; the build and the browser check skip, with the install command, where those are
missing, except in CI, which installs them."""

from __future__ import annotations

import base64
import os
import re
import struct
import sys
import zlib
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import browser  # noqa: E402
import build_site  # noqa: E402
import build_slides  # noqa: E402
import check_slides  # noqa: E402

import nbrun  # noqa: E402

RUN = {
    "cpu": "AMD EPYC",
    "cores": 2,
    "accelerator": "none",
    "torch": "2.13.0+cpu",
    "date": "2026-12-01",
    "seconds": 26.1,
    "claims": 1,
    "claims_held": 1,
}


def _png(width: int = 4, height: int = 3) -> bytes:
    """A small valid PNG (grey pixels), as a plot's output holds one."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _ran(source: str, outputs: list | None = None):
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = outputs or []
    return cell


def _claim(text: str, held: bool = True):
    verdict = "held" if held else "DID NOT HOLD"
    line = f"Claim {verdict}: {text}. Measured 3x, bound above 2x; with no effect it would be 1x."
    data = {"text/plain": line, nbrun.CLAIM_MIME: {"text": text, "held": held, "measured": 3.0}}
    return nbformat.v4.new_output("display_data", data=data)


PLOT = _png()


def _lesson() -> nbformat.NotebookNode:
    """A small executed lesson in the course's shape: title and outcomes, two sections with a guess, a plot and a
    claim, the takeaways and the run file's section."""
    md = nbformat.v4.new_markdown_cell
    plot = nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(PLOT).decode()})
    cells = [
        md(
            "# 09 · A lesson\n\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            "(https://colab.research.google.com/x.ipynb)\n\nIntro.\n\n**What you will learn**\n- how fast zeros are;\n"
            "- why bytes matter.\n\n**Expected run time:** 10 s."
        ),
        _ran("# @title Set-up: installs the course helpers\nimport course_lib"),
        md(
            "## 1. Zeros\n\n**Idea.** A dense kernel multiplies every entry. It never looks at the values. "
            "So a zero costs what any number costs, and this third sentence stays off the slide.\n\n"
            "**Your prediction.** How many times faster is a model with 50 % zeros?"
        ),
        _ran("guess_zeros_speedup = None  # your prediction: dense time / time with zeros"),
        _ran("checks.guess_first(guess_zeros_speedup=guess_zeros_speedup)\nmeasure()"),
        _ran("fig, ax = plots.new_figure(...)", [plot]),
        _ran("claim(...)", [_claim("zeros gain nothing")]),
        md(
            "## 2. Bytes <script>alert(1)</script>\n\n**Your predictions**, before the counts. How large is the "
            "file? See [notebook 02](02_memory.ipynb) and <b>think</b>."
        ),
        _ran("guess_file_mb = None  # your prediction: MB\nguess_zip_mb = None  # your prediction: MB, zipped"),
        md("**Idea.** A file stores every entry: a zero takes 4 bytes."),
        _ran("claim(...)", [_claim("the zipped file is smaller & <smaller>")]),
        md(
            "## Key takeaways\n\n- Zeros alone make nothing faster.\n- Only a smaller shape saves bytes.\n\n"
            "**Exercise:** `exercises/09_lesson.ipynb`."
        ),
        md("## Save your run\n\nThe cell below writes this run."),
        _ran("runs.save('09')"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["course_run"] = dict(RUN)
    return nb


def _kinds(deck) -> list[str]:
    return [s.kind for s in deck.slides]


def _text(slide) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", slide.html))


def test_a_lesson_becomes_title_idea_guess_plot_claims_then_the_takeaways_last():
    deck = build_slides.deck(_lesson(), "09_lesson")
    assert _kinds(deck) == ["title", "idea", "guess", "plot", "claims", "guess", "idea", "claims", "takeaways"]
    title = deck.slides[0].html
    assert "<h1>09 · A lesson</h1>" in title and "how fast zeros are;" in title and "why bytes matter." in title
    assert "AMD EPYC, 2 cores, torch 2.13.0+cpu (accelerator: none), on 2026-12-01" in title, "where it ran"
    guess = deck.slides[2].html
    assert "How many times faster is a model with 50 % zeros?" in guess
    assert "guess_zeros_speedup = None  # your prediction: dense time / time with zeros" in guess
    assert "Write your guess down now" in guess and "<code>guess_zeros_speedup</code>" in guess
    plot = deck.slides[3]
    assert plot.image == PLOT and f'src="{plot.image_name}"' in plot.html
    assert "Claim held: zeros gain nothing. Measured 3x" in _text(deck.slides[4])
    last = deck.slides[-1].html
    assert "Zeros alone make nothing faster." in last and "exercises/09_lesson.ipynb" in last
    assert not any("writes this run" in s.html or "runs.save" in s.html for s in deck.slides)


def test_the_idea_is_its_first_sentences_and_a_guess_asked_before_it_stays_before_it():
    deck = build_slides.deck(_lesson(), "09_lesson")
    idea = _text(deck.slides[1])
    assert "A dense kernel multiplies every entry." in idea and "It never looks at the values." in idea
    assert "third sentence" not in idea and "Idea." not in idea
    assert build_slides.idea_points("**Idea.** One thing, e.g. this. Two things. Three.") == [
        "One thing, e.g. this.",
        "Two things.",
    ]
    # section 2 asks for two guesses on one slide before its idea paragraph, which would give the answer away
    assert _kinds(deck)[5:7] == ["guess", "idea"]
    both = deck.slides[5].html
    assert "guess_file_mb = None" in both and "guess_zip_mb = None" in both
    assert both.count("<h3>Your prediction</h3>") == 1 and "Before the counts. How large" in both


def test_markdown_and_outputs_are_escaped_and_nothing_is_loaded_from_elsewhere():
    deck = build_slides.deck(_lesson(), "09_lesson")
    page = build_slides.deck_html(deck)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>think</b>" not in page and "&lt;b&gt;think&lt;/b&gt;" in page
    assert "the zipped file is smaller &amp; &lt;smaller&gt;" in page
    assert "colab-badge.svg" not in page, "an image in the markdown is shown as its alt text"
    assert "02_memory.ipynb" not in page and "notebook 02" in page, "a link to another notebook is its text"
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert loaded and not [u for u in loaded if "://" in u or u.startswith("//")], loaded
    assert "../reveal/reveal.js" in loaded and "../reveal/theme/white.css" in loaded


def test_a_deck_is_written_with_its_plots_next_to_it(tmp_path):
    deck = build_slides.deck(_lesson(), "09_lesson")
    page = build_slides.write_deck(deck, tmp_path)
    assert page == tmp_path / "09_lesson" / "index.html"
    assert (tmp_path / "09_lesson" / "plot-01.png").read_bytes() == PLOT
    assert page.read_text().count("<section data-kind=") == len(deck.slides)
    index = build_slides.index_html([deck])
    assert 'href="09_lesson/index.html"' in index and "(9 slides)" in index


def test_only_lessons_are_decks_and_an_unknown_name_says_which_exist():
    assert [p.stem for p in build_slides.lessons(["00"])] == ["00_setup"]
    with pytest.raises(build_slides.SlidesError, match="no lesson named 99_nothing; the lessons: 00_setup"):
        build_slides.lessons(["99_nothing"])


def test_without_npm_the_slides_build_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no npm on it
    with pytest.raises(
        build_site.SiteError, match=r"reveal\.js is fetched from the npm registry.*apt-get install -y npm"
    ):
        build_slides.fetch_reveal(tmp_path / "cache")


def test_the_screenshots_show_the_first_slides_then_a_plot_claims_and_the_last():
    kinds = ["title", "idea", "guess", "idea", "guess", "idea", "plot", "claims", "takeaways"]
    assert check_slides.shown(kinds) == [0, 1, 2, 3, 4, 6, 7, 8]


# --- the real decks: built from build/executed, then checked in Chromium (after the notebook tests) -------------


def _skip_or_fail(why: str) -> None:
    """Skip with the install command on a learner's machine; in CI (which installs Chromium and npm) fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI installs it: `python3 bootstrap.py test` runs apt-get there)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def slides(tmp_path_factory) -> dict:
    why = build_site.npm_missing()
    cached = all(
        (build_slides.OUT / "npm" / f"{name}-{version}.tgz").is_file() for name, version in build_slides.REVEAL.items()
    )
    if why and not cached:
        _skip_or_fail(f"The slides build fetches reveal.js with npm, and {why}")
    return build_slides.build()


@pytest.mark.browser
def test_every_deck_loads_in_a_browser_and_fits_its_slides(slides):
    why = browser.missing()
    if why:
        _skip_or_fail(f"The slides check needs a browser: {why}")
    report = check_slides.check(slides["index"].parent)
    print(check_slides.summary(report))
    assert not report["failures"], check_slides.summary(report)
    assert set(report["decks"]) == {d.name for d in slides["decks"]} == {p.stem for p in build_slides.lessons()}
    assert all(n > check_slides.MIN_SLIDES - 1 for n in report["decks"].values())
    assert report["outside"] == [], "a deck loads everything from its own folder"
    assert len(report["slide_shots"]) >= check_slides.FIRST_SLIDES


@pytest.mark.browser
def test_the_slides_check_catches_a_broken_deck(slides, tmp_path, monkeypatch):
    """The check can fail: a plot that does not load, a script from another server, reveal.js missing."""
    why = browser.missing()
    if why:
        _skip_or_fail(f"The slides check needs a browser: {why}")
    import shutil

    root = tmp_path / "slides"
    shutil.copytree(slides["index"].parent, root, ignore=shutil.ignore_patterns("npm", "screenshots"))
    with_plot = next(d for d in slides["decks"] if any(s.kind == "plot" for s in d.slides))
    (root / with_plot.name / "plot-01.png").unlink()
    page = root / with_plot.name / "index.html"
    page.write_text(page.read_text().replace("</body>", '<script src="https://cdn.example.org/x.js"></script></body>'))
    other = next(d for d in slides["decks"] if d is not with_plot)
    broken = root / other.name / "index.html"
    broken.write_text(broken.read_text().replace('<script src="../reveal/reveal.js"></script>', ""))
    monkeypatch.setattr(check_slides, "READY_TIMEOUT_MS", 5_000)  # reveal.js never comes: do not wait long
    report = check_slides.check(root, only=["index.html", f"{with_plot.name}/index.html", f"{other.name}/index.html"])
    problems = "\n".join(p for f in report["failures"] for p in f["problems"])
    assert "plot-01.png" in problems, "the deleted plot should be reported as not loading"
    assert "request left the site: https://cdn.example.org/x.js" in problems
    assert "reveal.js did not initialise" in problems
