#!/usr/bin/env python3
"""Check the slide decks in a headless browser, deck by deck.

    python tools/check_slides.py [--slides build/slides] [--deck 05_1_pruning]

Serves build/slides on 127.0.0.1 and opens the index and every deck in Chromium at 1280 x 720, with the website
check's machinery (tools/check_site.py, tools/browser.py): a page passes when it loads, every image on it loads,
no JavaScript error is reported and no request leaves 127.0.0.1. A deck also passes only when reveal.js
initialises (``Reveal.isReady()``), it has more than 3 slides, and no slide is taller or wider than the
1280 x 720 canvas once its text is fitted. Screenshots of the first slides of one deck (the first with a plot,
or --deck), and of its first plot, its first claims and its last slide, go to build/slides/screenshots.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import browser  # noqa: E402
import build_slides  # noqa: E402
import check_site  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SLIDES = build_slides.OUT
VIEWPORT = (build_slides.WIDTH, build_slides.HEIGHT)
MIN_SLIDES = 4
FIRST_SLIDES = 5  # screenshots of this many slides from the start of the chosen deck
READY_TIMEOUT_MS = 30_000

# what the browser reports about a deck once reveal.js has laid it out
DECK_STATE = """() => {
  const config = Reveal.getConfig();
  const slides = Reveal.getSlides();
  return {
    total: Reveal.getTotalSlides(),
    kinds: slides.map(s => s.dataset.kind || ""),
    overflow: slides.map((s, i) => [i + 1, s.scrollHeight, s.scrollWidth])
                    .filter(([i, h, w]) => h > config.height + 1 || w > config.width + 1),
  };
}"""


def decks(root: Path) -> list[str]:
    """The decks' pages, relative to ``root``: <lesson>/index.html."""
    return sorted(p.relative_to(root).as_posix() for p in root.glob("[0-9][0-9]_*/index.html"))


def shown(kinds: list[str], first: int = FIRST_SLIDES) -> list[int]:
    """Which slides (0-based) to photograph: the first few, then the first plot, the first claims and the last."""
    picks = list(range(min(first, len(kinds))))
    for kind in ("plot", "claims"):
        if kind in kinds:
            picks.append(kinds.index(kind))
    picks.append(len(kinds) - 1)
    return sorted(set(picks))


def deck_checker(shots: Path, photographed: str | None):
    """The per-page check check_site.check runs on each deck: reveal.js ready, slide count, no overflow; slides of
    the deck ``photographed`` saved as screenshots."""

    def check(page, result: dict) -> None:
        rel = result["page"]
        if rel == "index.html":
            return
        problems = result["problems"]
        try:
            page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=READY_TIMEOUT_MS)
        except Exception:
            problems.append("reveal.js did not initialise: Reveal.isReady() stayed false")
            return
        try:
            page.wait_for_function("() => document.body.dataset.fitted === 'yes'", timeout=READY_TIMEOUT_MS)
        except Exception:
            problems.append("the deck's script never finished fitting the slides (deck.js)")
        state = page.evaluate(DECK_STATE)
        result["slides"], result["kinds"] = state["total"], state["kinds"]
        if state["total"] < MIN_SLIDES:
            problems.append(f"only {state['total']} slides: a deck has a title, its sections and its takeaways")
        for number, height, width in state["overflow"]:
            problems.append(
                f"slide {number} does not fit the {VIEWPORT[0]} x {VIEWPORT[1]} canvas even with its text shrunk "
                f"({width} x {height} px)"
            )
        result["shots"] = []
        if rel.split("/")[0] == photographed:
            for index in shown(state["kinds"]):
                page.evaluate("i => Reveal.slide(i)", index)
                page.wait_for_function("i => Reveal.getIndices().h === i", arg=index)
                page.wait_for_timeout(150)  # the slide's images and the progress bar settle
                shot = shots / f"{photographed}-slide-{index + 1:02d}-{state['kinds'][index]}.png"
                page.screenshot(path=str(shot))
                result["shots"].append(shot)

    return check


def check(root: Path = SLIDES, deck: str | None = None, only: list[str] | None = None) -> dict:
    """Check the index and every deck in ``root`` (or the pages in ``only``); returns check_site's report plus the
    decks' slide counts and the screenshots of the slides of ``deck`` (default: the first deck with a plot)."""
    if not (root / "index.html").is_file():
        raise FileNotFoundError(f"No slides in {root}: build them first with `python3 bootstrap.py slides`.")
    pages = ["index.html", *decks(root)] if only is None else only
    if deck is None:
        with_plot = [p.split("/")[0] for p in pages if p != "index.html" and any((root / p).parent.glob("*.png"))]
        deck = (with_plot or [p.split("/")[0] for p in pages if p != "index.html"] or [None])[0]
    shots = root / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    for old in shots.glob("*.png"):
        old.unlink()
    report = check_site.check(root, shots, only=pages, viewport=VIEWPORT, extra=deck_checker(shots, deck))
    report["decks"] = {r["page"].split("/")[0]: r.get("slides", 0) for r in report["results"] if "slides" in r}
    report["photographed"] = deck
    report["slide_shots"] = sorted(shots.glob(f"{deck}-slide-*.png")) if deck else []
    return report


def summary(report: dict) -> str:
    """The website check's summary, then the screenshots of the photographed deck's slides."""
    lines = [check_site.summary(report)]
    lines.append("Slides per deck: " + ", ".join(f"{name} {n}" for name, n in report["decks"].items()))
    if report["slide_shots"]:
        lines.append(
            f"Slides of {report['photographed']} photographed at {VIEWPORT[0]} x {VIEWPORT[1]}: "
            + ", ".join(p.name for p in report["slide_shots"])
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slides", type=Path, default=SLIDES, help="the built decks (default build/slides)")
    parser.add_argument("--deck", help="the deck whose first slides are photographed (default: the first with a plot)")
    args = parser.parse_args(argv)
    why = browser.missing()
    if why:
        print(f"Slides check skipped: {why}")
        return 0
    report = check(args.slides.resolve(), args.deck)
    print(summary(report))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
