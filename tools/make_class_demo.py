#!/usr/bin/env python3
"""Build a demo class page from real lesson runs, plus one file of each hostile kind.

    .venv/bin/python tools/make_class_demo.py [--out build/class-demo] [--no-screenshot]

The runs are real: the run files the lessons' last cells wrote under build/runs/, and the runs carried by the
executed notebooks under build/executed/notebooks/ (the last cell's output, read with
``course_lib.runs.run_from_notebook``) where they are not already among those files. Run a lesson or two first
where build/runs is thin (``.venv/bin/python -m pytest -q notebooks/00_setup.ipynb``). Nothing is relabelled or
copied to pass for another learner: the one variant of a real run (its label replaced by markup, to show that a
label is shown as text) replaces that run, and its file name says so.

Next to them go the hostile files, named ``hostile-*``: markup in a file name, NaN, Infinity, JSON nested 100,000
deep, a binary file, an empty file, a file over the size limit, a byte-for-byte duplicate, an edited file (a claim
marked held whose own measurement is outside its bound), a file of a newer format version, and a benchmark result
(JSON that is not a run file). The page (``course class``) must skip or flag each by name, with the reason, and
merge the rest. Writes OUT/runs/, OUT/page/index.html and, where Chromium and Playwright are installed,
OUT/class-demo.png. Runs that are the atlas's own recorded runs (build/runs holds them after a recording) are left
out of the page's comparison with the atlas, and the page says how many.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from course_lib import classpage  # noqa: E402
from course_lib.runs import RUN_MIME, RunFileError, load_run, run_from_notebook  # noqa: E402

RUNS = ROOT / "build" / "runs"
EXECUTED = ROOT / "build" / "executed" / "notebooks"
OUT = ROOT / "build" / "class-demo"
HOSTILE_LABEL = '<script>alert("label")</script> Ana\'s "laptop" <img src=x onerror=alert(1)>'


def real_runs(folder: Path) -> list[str]:
    """Copy the real run files into ``folder``; returns the names written (notebooks' runs not already there)."""
    written, seen = [], set()
    for path in sorted(RUNS.glob("*.json")):
        try:
            run = load_run(path)
        except RunFileError as exc:
            print(f"not copied: {exc}")
            continue
        seen.add(json.dumps(run, sort_keys=True))
        shutil.copyfile(path, folder / path.name)
        written.append(path.name)
    for path in sorted(EXECUTED.glob("*.ipynb")):
        if RUN_MIME not in path.read_text(encoding="utf-8", errors="replace"):
            continue  # its last cell did not run: no run of its own to show
        run = run_from_notebook(path)
        if json.dumps(run, sort_keys=True) in seen:
            continue
        name = f"{run['lesson']}-from-executed-{path.stem}.json"
        (folder / name).write_text(json.dumps(run, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        written.append(name)
    return written


def hostile_files(folder: Path, real: list[str]) -> dict[str, str]:
    """One file of each hostile kind, made from the first real run; returns name -> what it is."""
    base_path = folder / real[0]
    base = json.loads(base_path.read_text(encoding="utf-8"))
    text = json.dumps(base, indent=1)
    number = next(e["value"] for e in base["entries"] if e.get("value") is not None)
    edited = copy.deepcopy(base)
    edited["entries"].append(
        {"kind": "claim", "key": f"{base['lesson']}/edited_claim", "text": "an edited claim", "value": 0.5,
         "low": 1.0, "high": None, "no_effect": 1.0, "no_effect_is": "no effect", "unit": "x", "status": "held",
         "why": ""}
    )  # fmt: skip
    files = {
        "hostile-<img src=x onerror=alert(2)>.json": ("a file name with markup", b"<b>not json</b>"),
        "hostile-nan.json": ("NaN in place of a measurement", text.replace(repr(number), "NaN", 1)),
        "hostile-infinity.json": ("Infinity in place of a measurement", text.replace(repr(number), "Infinity", 1)),
        "hostile-deep.json": ("JSON nested 100,000 deep", "[" * 100_000 + "]" * 100_000),
        "hostile-binary.json": ("a binary file", bytes(range(256)) * 8),
        "hostile-empty.json": ("an empty file", b""),
        "hostile-huge.json": ("a file over the 1 MB limit", text[:-2] + " " * 1_100_000 + "}\n"),
        "hostile-duplicate.json": ("a byte-for-byte copy of a real run", base_path.read_bytes()),
        "hostile-edited.json": ("a claim marked held outside its own bound", json.dumps(edited, indent=1)),
        "hostile-newer.json": ("a newer format version", json.dumps({**base, "version": 2}, indent=1)),
        "hostile-benchmark.json": (
            "a benchmark result, not a run file",
            json.dumps({"schema": "course-benchmark/3", "label": "laptop", "headline": {"matmul_gflops": 120.0}}),
        ),
    }
    for name, (_, content) in files.items():
        target = folder / name
        target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content, encoding="utf-8")
    return {name: what for name, (what, _) in files.items()}


def label_variant(folder: Path, real: list[str]) -> str | None:
    """Replace the last real run by itself under a label full of markup (a variant of a real run, not another
    learner: the original is removed). Returns the variant's name."""
    if len(real) < 2:
        return None
    original = folder / real[-1]
    run = json.loads(original.read_text(encoding="utf-8"))
    run["label"] = HOSTILE_LABEL[:60]
    name = f"variant-of-real-run-hostile-label-{original.name}"
    (folder / name).write_text(json.dumps(run, indent=1), encoding="utf-8")
    original.unlink()
    return name


def screenshot(page: Path, shot: Path) -> str:
    """A full-page screenshot of the page in headless Chromium; returns what happened."""
    import browser

    why = browser.missing()
    if why:
        return f"no screenshot: {why}"
    from playwright.sync_api import sync_playwright

    errors, outside = [], []
    with sync_playwright() as p:
        chromium = browser.launch(p)
        try:
            tab = chromium.new_page(viewport={"width": 1280, "height": 900})
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda exc: errors.append(str(exc)))
            tab.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
            tab.goto(page.as_uri(), wait_until="load")
            tab.screenshot(path=str(shot), full_page=True)
        finally:
            chromium.close()
    return f"screenshot {shot}; console errors: {len(errors)}; requests outside file://: {len(outside)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder for runs/, page/ and the screenshot")
    parser.add_argument("--no-screenshot", action="store_true", help="do not open the page in Chromium")
    args = parser.parse_args(argv)
    folder = args.out / "runs"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    real = real_runs(folder)
    if not real:
        print(f"no real run files in {RUNS} or {EXECUTED}: run a lesson first (pytest notebooks/00_setup.ipynb)")
        return 1
    hostile = hostile_files(folder, real)
    variant = label_variant(folder, real)
    print(f"{len(real)} real runs copied; {len(hostile)} hostile files" + (f"; variant: {variant}" if variant else ""))
    page = classpage.write_class_page(folder, args.out / "page")
    print(page.text())
    if not args.no_screenshot:
        print(screenshot(page.path, args.out / "class-demo.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
