"""Size and shape of course_lib: lines, public names, long files, long functions.

    .venv/bin/python tools/library_stats.py [ROOT]

ROOT is a checkout of the course (default: this one). "Public" is a top-level name of a module that does not start
with an underscore; "used only inside" is a public name that no notebook, solution, exercise, test, tool, doc or CLI
entry point mentions outside the library.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path


def _public_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_") and n not in {"annotations"}]


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def stats(root: Path) -> dict:
    lib = root / "course_lib"
    files = sorted(lib.rglob("*.py"))
    lengths = {str(p.relative_to(lib)): len(p.read_text().splitlines()) for p in files}
    public = {(str(p.relative_to(lib)), n) for p in files for n in _public_names(p)}
    outside = ""
    for folder in ("notebooks", "solutions", "exercises", "tests", "tools", "docs"):
        for p in (root / folder).rglob("*"):
            if p.suffix in {".py", ".ipynb", ".md"} and p.is_file():
                outside += p.read_text(errors="replace")
    outside += (root / "README.md").read_text() + (root / "course_lib" / "cli.py").read_text()
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", outside))
    functions = [(f"{p.relative_to(lib)}:{name}", n) for p in files for name, n in _functions(p)]
    longest = max(functions, key=lambda f: f[1])
    return {
        "lines": sum(lengths.values()),
        "files": len(files),
        "public names": len(public),
        "public names used only inside": sum(1 for _, n in public if n not in words),
        "files over 500 lines": sorted(f for f, n in lengths.items() if n > 500),
        "files over 600 lines": sorted(f for f, n in lengths.items() if n > 600),
        "longest function": f"{longest[0]} ({longest[1]} lines)",
        "functions over 80 lines": sorted(f"{f} ({n})" for f, n in functions if n > 80),
        "longest line": max(len(line) for p in files for line in p.read_text().splitlines()),
    }


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    for key, value in stats(root).items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for v in value:
                print(f"    {v}")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
