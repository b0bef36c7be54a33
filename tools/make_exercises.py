#!/usr/bin/env python3
"""Write exercises/NN_topic.ipynb from solutions/NN_topic.ipynb.

In each code cell, the lines between `# BEGIN SOLUTION` and `# END SOLUTION` are replaced by
`raise NotImplementedError(...)` at the same indentation. Lines in the block that start with
`# HINT:` are kept as comments and their text goes into the error message. Outputs and
execution counts are cleared. Markdown cells are copied, except those tagged `solution-only`.

    python tools/make_exercises.py           # regenerate exercises/
    python tools/make_exercises.py --check   # exit 1 if exercises/ is stale (used by the tests)
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
HINT = re.compile(r"^\s*# HINT:\s*(.*)$")


def stub_source(source: str) -> str:
    """Replace each solution block in one cell's source by a stub."""
    out: list[str] = []
    block: list[str] | None = None
    indent = ""
    for number, line in enumerate(source.splitlines(), 1):
        if block is None:
            m = BEGIN.match(line)
            if m:
                block, indent = [], m.group(1)
            else:
                out.append(line)
        elif END.match(line):
            hints = [HINT.match(b).group(1).strip() for b in block if HINT.match(b)]
            out.extend(f"{indent}# HINT: {h}" for h in hints)
            message = "Exercise: write your code here." + (f" Hint: {' '.join(hints)}" if hints else "")
            out.append(f"{indent}raise NotImplementedError({message!r})")
            block = None
        elif BEGIN.match(line):
            raise ValueError(f"line {number}: BEGIN SOLUTION inside another solution block")
        else:
            block.append(line)
    if block is not None:
        raise ValueError("a BEGIN SOLUTION block has no END SOLUTION")
    return "\n".join(out)


def render(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The exercise notebook made from one solution notebook."""
    nb = copy.deepcopy(solution)
    cells = []
    for cell in nb.cells:
        if "solution-only" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = stub_source(cell.source)
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("widgets", None)
    return nb


def to_text(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale or missing exercises")
    args = parser.parse_args(argv)
    stale = []
    (ROOT / "exercises").mkdir(exist_ok=True)
    for src in sorted((ROOT / "solutions").glob("*.ipynb")):
        dst = ROOT / "exercises" / src.name
        text = to_text(render(nbformat.read(src, as_version=4)))
        if not dst.exists() or dst.read_text() != text:
            stale.append(dst.relative_to(ROOT))
            if not args.check:
                dst.write_text(text)
    extra = {p.name for p in (ROOT / "exercises").glob("*.ipynb")} - {
        p.name for p in (ROOT / "solutions").glob("*.ipynb")
    }
    if args.check:
        if stale or extra:
            print(
                "exercises/ is out of date; run `python3 bootstrap.py exercises`:",
                ", ".join(map(str, stale + sorted(extra))),
            )
            return 1
        print("exercises/ is up to date")
        return 0
    for name in sorted(extra):
        print(f"warning: exercises/{name} has no solution notebook")
    print(f"wrote {len(stale)} exercise notebook(s)" if stale else "exercises/ already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
