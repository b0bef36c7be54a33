"""Measured numbers typed into a lesson's markdown: the rule, and a report per notebook.

A lesson's prose explains; the numbers it discusses come from this run (printed) or from the atlas of recorded
runs (``runs.compare``), each with its machine. This tool finds numbers typed into markdown cells that read as
measurements, so a test can fail on them. The rule, applied to each sentence of a markdown cell:

* A sentence that reports the course's own runs ("over our runs", "we measured", "in every seed") counts every
  number in it, whatever the rest of the rule says.
* A range of decimals counts with or without a unit ("r was 0.96-1.02").
* A **candidate** is a number with a unit of measurement (``ms``, ``s``, ``GB/s``, ``GFLOP/s``, ``MiB``, ``%``,
  ``x``/``×`` as a ratio, ``points``) or a tally of runs ("9 of 10 seeds"), alone or as a range ("0.70-0.99x").
* **Kept** (not measurements): numbers inside inline code, math or links; **formulas and worked arithmetic**
  (a number next to ``=``, ``≈``, ``×``, ``/``, ``+`` or ``−`` used as operators, or inside parentheses that
  compute); **bounds** a claim states ("at least 1.5x", "more than 1 %", "below 5 %", "within 25 %");
  whole factors and shares of the set-up ("8× larger", "a 256 × 256 product", "removing 50 % of the units") unless
  hedged or read off ("about 2×", "reached 84 %"); a decimal or a range always counts; **data-sheet and
  literature figures**: a sentence that cites (a link, "et al.", a year in parentheses,
  "data sheet", "catalog", "cited", "spec"); and the title cell's expected run time, which the test of run times
  checks against the recorded timings.

Everything else is reported: move it to a printed value or to ``runs.compare``.

    python tools/typed_numbers.py            # per notebook: how many, and each with its sentence
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

UNIT = (
    r"(?:\s?%|\s?(?:ms|µs|us|ns|s|sec|seconds?|min|minutes|h|hours|GB/s|MB/s|GiB/s|MiB/s|TB/s|Gb/s|GFLOP/s|TFLOP/s|"
    r"FLOP/s|GFLOPS|TFLOPS|images/s|tokens/s|samples/s|steps/s|it/s|MiB|GiB|KiB|kB|KB|MB|GB|TB|points?|pts|W|J|kWh)\b|\s?[x×](?![\w])|x\b)"
)
NUM = r"[-−+]?\d[\d,]*(?:\.\d+)?"
CANDIDATE = re.compile(
    rf"(?<![\w.^/])(?P<num>{NUM}(?:\s?(?:-|–|to)\s?{NUM})?){UNIT}|(?<![\w.])(?P<tally>\d+ (?:of|out of) \d+) "
    r"(?:seeds?|runs?|trials?|machines?|times)"
)
CITES = re.compile(
    r"\]\(|et al\.|\(\d{4}\b|\b[A-Z][\w-]+(?: and [A-Z][\w-]+)?,? (?:19[5-9]\d|20[0-2]\d)\b|\bdata ?sheet|\bcatalog|"
    r"\bcited\b|\bspec\b|\bspecification|\bwhite ?paper|\blist price"
)
#: A sentence that reports the course's own runs: every number in it counts, whatever else the sentence holds.
OURS = re.compile(
    r"\bour (?:runs?|machines?|tests?|measurements?)\b|\bwe (?:measured|tried|ran|saw|found|recorded)\b|"
    r"\bover (?:\d+|several|many|five|ten|three) (?:runs|seeds)\b|\bin (?:every|all|each) (?:run|seed)s?\b",
    re.I,
)
#: A range of decimals, with or without a unit ("0.70-0.99", "r was 0.96-1.02"): a spread someone read off.
DECIMAL_RANGE = re.compile(r"(?<![\w.^/$])\d*\.\d+\s?(?:-|–|to)\s?\d*\.\d+(?![\w.])")
BOUND = re.compile(
    r"(?:at least|at most|more than|less than|fewer than|no more than|above|below|under|over|within|up to|exceeds?|"
    r"beyond|bound|threshold|greater than|smaller than|>=?|<=?|≥|≤|must|needs?|required?|target|tolerance|"
    r"margin|limit|budget|cap)\s*(?:(?!our\b|runs?\b|seeds?\b|machines?\b)\S+\s){0,2}$",
    re.I,
)
ARITH_BEFORE = re.compile(r"(?:=|≈|~|×|\*|/|\+|−|÷|\bof\b \d)\s*$")
APPROX = re.compile(
    r"(?:about|roughly|around|nearly|almost|some|up to|ran|was|were|came out|measured|reached|reaches|ended|ends|"
    r"lost|loses|stayed|scored|got|achieved|typically|usually)\s*$",
    re.I,
)
ARITH_AFTER = re.compile(r"^\s*(?:=|≈|×|\*|/|\+|−|÷)")


def _strip(md: str) -> str:
    md = re.sub(r"```.*?```", " ", md, flags=re.S)
    md = re.sub(r"`[^`]*`", " CODE ", md)
    md = re.sub(r"\$[^$]+\$", " MATH ", md)
    md = re.sub(r"<[^>]+>", "", md)  # HTML tags (sub/sup): their text stays
    md = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"[\1](link)", md)
    return md


def _sentences(md: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z*(])|\n\s*\n|\n\s*[-*] ", md) if s.strip()]


def typed_numbers(md: str) -> list[tuple[str, str]]:
    """(the number with its unit, its sentence) for every measured-looking number in one markdown cell."""
    found = []
    for sentence in _sentences(_strip(md)):
        if sentence.startswith("**Expected run time"):
            continue
        if OURS.search(sentence):  # the course's own runs: no exemption applies
            found += [(m.group(0).strip(), sentence) for m in CANDIDATE.finditer(sentence)]
            found += [(m.group(0).strip(), sentence) for m in DECIMAL_RANGE.finditer(sentence)]
            continue
        if CITES.search(sentence):
            continue
        for m in DECIMAL_RANGE.finditer(sentence):
            before, after = sentence[: m.start()], sentence[m.end() :]
            if re.search(r"\b(?:notebooks?|lessons?|modules?|sections?)\s*$", before, re.I):
                continue  # "notebooks 06.1-06.3": names, not numbers
            if BOUND.search(before) or ARITH_BEFORE.search(before) or ARITH_AFTER.match(after):
                continue
            if not CANDIDATE.match(sentence, m.start()):
                found.append((m.group(0).strip(), sentence))
        for m in CANDIDATE.finditer(sentence):
            before, after = sentence[: m.start()], sentence[m.end() :]
            if BOUND.search(before) or ARITH_BEFORE.search(before) or ARITH_AFTER.match(after):
                continue
            text = m.group(0).strip()
            if re.fullmatch(r"\d+\s?[x×%]", text) and not APPROX.search(before):
                continue  # a whole factor or share of the set-up ("8× larger", "50 % of the units"), not a reading
            if re.match(r"\s*\d", after) and text.endswith(("x", "×")):
                continue  # a shape or a product: "256 × 256"
            found.append((m.group(0).strip(), sentence))
    return found


def notebook_numbers(path: Path) -> list[tuple[int, str, str]]:
    """(cell index, number, sentence) for a notebook's markdown cells."""
    nb = json.loads(Path(path).read_text())
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            out += [(i, n, s) for n, s in typed_numbers("".join(cell["source"]))]
    return out


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    verbose = "-q" not in args
    paths = [Path(a) for a in args if not a.startswith("-")] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    total = 0
    for path in paths:
        found = notebook_numbers(path)
        total += len(found)
        print(f"{path.name:48s}{len(found):4d}")
        if verbose:
            for i, n, s in found:
                print(f"    cell {i}: {n!r}  in: {s[:160]}")
    print(f"{'total':48s}{total:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
