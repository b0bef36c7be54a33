#!/usr/bin/env python3
"""Check the built website in a headless browser, page by page.

    python tools/check_site.py [--html build/site/html]

Serves the site on 127.0.0.1 and opens every page in Chromium (through Playwright, see
tools/browser.py). A page passes when it loads, every image on it loads, every local link resolves
(to a file, and to the anchor when it names one), no JavaScript error is reported, every stored
widget renders its saved result, and no request leaves the site except the "Open in Colab" badge
image (requests to other servers are blocked and reported). A screenshot of each page is saved in
build/site/screenshots; a failure names the page, what failed and its screenshot.
"""

from __future__ import annotations

import argparse
import functools
import html as html_lib
import http.server
import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urldefrag, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))
import browser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "build" / "site" / "html"
ALLOWED_OUTSIDE = ("https://colab.research.google.com/assets/colab-badge.svg",)
PAGE_TIMEOUT_MS = 60_000
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # one line per request would bury the report
        pass


class SiteServer:
    """The site served on 127.0.0.1 from a background thread (a context manager that stops it)."""

    def __init__(self, root: Path):
        handler = functools.partial(_Quiet, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", browser.free_port()), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> SiteServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def pages(root: Path) -> list[Path]:
    """Every HTML page of the site (not the theme's template fragments under _static/)."""
    return sorted(p for p in root.rglob("*.html") if "_static" not in p.relative_to(root).parts)


@functools.lru_cache(maxsize=None)
def _ids(path: Path) -> frozenset[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(html_lib.unescape(m) for m in re.findall(r'\bid="([^"]+)"', text))


def broken_link(root: Path, base: str, href: str) -> str | None:
    """Why a local link does not resolve (missing file or missing anchor), or None when it does."""
    url, fragment = urldefrag(href)
    rel = unquote(urlparse(url).path)[len(urlparse(base).path) :]
    target = root / rel
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"{href}: no such file"
    routed = fragment.startswith("/")  # "#/3": a place the page's script shows (a slide of reveal.js), not an element
    if fragment and not routed and target.suffix == ".html" and unquote(fragment) not in _ids(target):
        return f"{href}: no element with id {fragment!r} on that page"
    return None


def stored_widget_results(text: str) -> list[str]:
    """The result text each stored calculator shows: the HTML children of every displayed view, from the state."""
    state_match = re.search(rf'<script type="{re.escape(WIDGET_STATE)}">(.*?)</script>', text, re.S)
    if not state_match:
        return []
    state = json.loads(html_lib.unescape(state_match.group(1)))["state"]
    results = []
    for view in re.findall(rf'<script type="{re.escape(WIDGET_VIEW)}">(.*?)</script>', text, re.S):
        model = state[json.loads(html_lib.unescape(view))["model_id"]]
        for child in model["state"].get("children", []):
            child_model = state[child.removeprefix("IPY_MODEL_")]
            if child_model["model_name"] == "HTMLModel":
                results.append(re.sub(r"<[^>]+>", "", child_model["state"]["value"]))
    return results


def check_page(page, server: SiteServer, root: Path, path: Path, shots: Path) -> dict:
    """Open one page and return what was checked and what failed on it."""
    errors, failed_requests = [], []
    page.on("pageerror", lambda exc: errors.append(f"JavaScript error: {exc}"))
    page.on(
        "console",
        lambda msg: (
            errors.append(f"console error: {msg.text}")
            if msg.type == "error" and not msg.location.get("url", "").startswith(ALLOWED_OUTSIDE)
            else None
        ),
    )  # the blocked badge
    page.on("requestfailed", lambda req: failed_requests.append(req.url) if req.url.startswith(server.url) else None)
    page.on(
        "response",
        lambda res: (
            failed_requests.append(f"{res.url} ({res.status})")
            if res.url.startswith(server.url) and res.status >= 400
            else None
        ),
    )
    rel = path.relative_to(root).as_posix()
    page.goto(server.url + rel, wait_until="load", timeout=PAGE_TIMEOUT_MS)
    page.wait_for_load_state("networkidle", timeout=PAGE_TIMEOUT_MS)
    problems = [f"could not load {url}" for url in failed_requests] + errors
    images = page.evaluate("Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth])")
    local_images = [img for img in images if not img[0].startswith(ALLOWED_OUTSIDE)]
    problems += [f"image did not load: {src}" for src, complete, width in local_images if not (complete and width)]
    links = set(page.evaluate("Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"))
    local_links = sorted(h for h in links if h.startswith(server.url))
    problems += [why for why in (broken_link(root, server.url, h) for h in local_links) if why]
    expected = stored_widget_results(path.read_text(encoding="utf-8"))
    if expected:
        try:
            page.wait_for_selector(".widget-html-content", timeout=PAGE_TIMEOUT_MS)
        except Exception:  # reported below as a missing result
            pass
        shown = [re.sub(r"\s+", " ", t).strip() for t in page.locator(".widget-html-content").all_inner_texts()]
        problems += [
            f"stored widget result not shown: {want!r}"
            for want in expected
            if re.sub(r"\s+", " ", want).strip() not in shown
        ]
        page.locator(".widget-html-content").first.scroll_into_view_if_needed()
    shot = shots / (rel.replace("/", "__").removesuffix(".html") + ".png")
    page.screenshot(path=str(shot))
    return {
        "page": rel,
        "images": len(local_images),
        "links": len(local_links),
        "widgets": len(expected),
        "problems": problems,
        "screenshot": shot,
    }


def check(
    root: Path = HTML,
    shots: Path | None = None,
    only: list[str] | None = None,
    viewport: tuple[int, int] = (1280, 900),
    extra: Callable[[Any, dict], None] | None = None,
) -> dict:
    """Check every page of the site in `root` (or the pages named in `only`, paths relative to it) in a window of
    `viewport` pixels; returns totals, outside requests and the failures. ``extra(page, result)``, if given, checks
    more on each loaded page (the slide decks: tools/check_slides.py) and appends to ``result["problems"]``."""
    from playwright.sync_api import sync_playwright

    if not (root / "index.html").is_file():
        raise FileNotFoundError(f"No site in {root}: build it first with `python3 bootstrap.py site`.")
    shots = shots or root.parent / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    outside: list[tuple[str, str]] = []
    results = []
    start = time.perf_counter()
    with SiteServer(root) as server, sync_playwright() as p:
        chromium = browser.launch(p)
        try:
            context = chromium.new_context(viewport={"width": viewport[0], "height": viewport[1]})
            current = {"page": ""}

            def guard(route) -> None:
                url = route.request.url
                if url.startswith(server.url):
                    route.continue_()
                else:  # nothing leaves the site: an outside request is recorded and blocked
                    outside.append((current["page"], url))
                    route.abort()

            context.route("**/*", guard)
            for path in pages(root) if only is None else [root / rel for rel in only]:
                current["page"] = path.relative_to(root).as_posix()
                page = context.new_page()
                try:
                    result = check_page(page, server, root, path, shots)
                    if extra is not None:
                        extra(page, result)
                    results.append(result)
                except Exception as exc:  # a page that never loads is a failure, not a crash
                    shot = shots / (current["page"].replace("/", "__").removesuffix(".html") + ".png")
                    page.screenshot(path=str(shot))
                    results.append(
                        {
                            "page": current["page"],
                            "images": 0,
                            "links": 0,
                            "widgets": 0,
                            "problems": [f"{type(exc).__name__}: {exc}"],
                            "screenshot": shot,
                        }
                    )
                finally:
                    page.close()
        finally:
            chromium.close()
    for page_rel, url in outside:
        if not url.startswith(ALLOWED_OUTSIDE):
            entry = next(r for r in results if r["page"] == page_rel)
            entry["problems"].append(f"request left the site: {url}")
    failures = [r for r in results if r["problems"]]
    return {
        "pages": len(results),
        "images": sum(r["images"] for r in results),
        "links": sum(r["links"] for r in results),
        "widgets": sum(r["widgets"] for r in results),
        "outside": sorted({u for _, u in outside}),
        "failures": failures,
        "results": results,
        "screenshots": shots,
        "seconds": time.perf_counter() - start,
    }


def summary(report: dict) -> str:
    """The report as text: totals, then each failing page with its problems and screenshot."""
    lines = [
        f"Checked {report['pages']} pages in {report['seconds']:.1f} s: {report['images']} images, "
        f"{report['links']} local links, {report['widgets']} widgets; requests to other servers: "
        f"{', '.join(report['outside']) or 'none'}; {len(report['failures'])} failures. "
        f"Screenshots: {report['screenshots']}"
    ]
    for failure in report["failures"]:
        lines.append(f"FAILED {failure['page']} (screenshot {failure['screenshot']}):")
        lines += [f"    {problem}" for problem in failure["problems"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, default=HTML, help="the built site (default build/site/html)")
    args = parser.parse_args(argv)
    why = browser.missing()
    if why:
        print(f"Site check skipped: {why}")
        return 0
    report = check(args.html.resolve())
    print(summary(report))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
