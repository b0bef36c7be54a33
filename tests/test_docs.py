"""The guides in docs/: their Python examples run, and what they say they print is what they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
EXAMPLES = [
    pytest.param(doc, i, code, id=f"{doc.stem}-{i}")
    for doc in sorted((ROOT / "docs").glob("*.md"))
    for i, code in enumerate(BLOCK.findall(doc.read_text()))
]


def test_the_guides_have_examples():
    docs = [p.values[0].name for p in EXAMPLES]
    assert docs.count("scaling-out.md") >= 2, docs


@pytest.mark.parametrize("doc, i, code", EXAMPLES)
def test_example_runs_and_prints_what_it_says(doc, i, code, tmp_path, monkeypatch):
    """Each ```python block runs in an empty folder; a comment line right after the block's last
    print call is the output the guide promises."""
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{doc.name} example {i}", "exec"), {"__name__": "__docs__"})
    lines = code.rstrip().splitlines()
    promised = [ln[2:] for ln in lines[1:] if ln.startswith("# ") and "print(" in lines[lines.index(ln) - 1]]
    if doc.name == "scaling-out.md" and i == 0:
        assert promised, "the first example of scaling-out.md shows what it prints"
    for text in promised:
        assert text in out.getvalue(), f"{doc.name} example {i} promises {text!r}, printed {out.getvalue()!r}"


def test_the_library_map_and_the_guide_are_generated_from_the_notebooks():
    """docs/library-map.md and CONTRIBUTING.md's layer list and notebook table are what tools/library_map.py
    makes from the notebooks and course_lib/layout.py now: neither can go stale."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import library_map

    assert library_map.main(["--check"]) == 0, "run .venv/bin/python tools/library_map.py --write"


def test_the_library_map_sees_every_form_of_use(tmp_path):
    import json
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import library_map

    code = (
        "import course_lib\nfrom course_lib import timing, memory\nfrom course_lib.comm import aggregation as agg\n"
        "%time timing.time_fn(f)\nmemory.StreamingDataset\nagg.bytes_per_step(1)\ncourse_lib.pick_device()\n"
    )
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": code}]}))
    found = library_map.uses(nb)
    assert ("course_lib.timing", "time_fn") not in found  # a magic line is not Python
    assert {
        ("course_lib.memory.streaming", "StreamingDataset"),
        ("course_lib.comm.aggregation_bytes", "bytes_per_step"),
        ("course_lib.hardware", "pick_device"),
        ("course_lib.comm.aggregation", ""),
    } <= found


def test_a_docstring_that_names_a_notebook_names_one_that_uses_it():
    """A function's or class's docstring may say "notebook NN" only where notebook NN's code uses it; a module's
    only where the notebook uses its package. docs/library-map.md is the full, generated list."""
    import ast
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import library_map

    uses = {nb: library_map.uses(nb) for nb in library_map.notebooks() if nb.parent.name == "notebooks"}
    num = r"\d\d(?:\.\d)?"
    mention = re.compile(rf"[Nn]otebooks? ({num}(?:(?:,| and| or|,? and) {num})*)")

    def used(module: str, name: str, number: str) -> bool:
        key = number.replace(".", "_")
        books = [nb for nb in uses if nb.stem.startswith(key + "_")]
        package = ".".join(module.split(".")[:2])
        return any(
            u[0] == module and (u[1] == name or u[1].startswith(name + "."))
            if name
            else (u[0] == package or u[0].startswith(package + "."))
            for nb in books
            for u in uses[nb]
        )

    false, checked = [], 0
    for path in sorted((ROOT / "course_lib").rglob("*.py")):
        rel = path.relative_to(ROOT / "course_lib").with_suffix("")
        module = ".".join(("course_lib", *[p for p in rel.parts if p != "__init__"]))
        tree = ast.parse(path.read_text())
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        for node in nodes:
            for found in mention.findall(ast.get_docstring(node) or ""):
                for number in re.findall(num, found):
                    checked += 1
                    if not used(module, getattr(node, "name", ""), number):
                        false.append(
                            f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)} "
                            f"{getattr(node, 'name', '<module>')} says notebook {number}"
                        )
    assert checked > 100
    assert not false, "\n".join(false)
