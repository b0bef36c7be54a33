"""The guides in docs/: their Python examples run, and what they say they print is what they print."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
EXAMPLES = [pytest.param(doc, i, code, id=f"{doc.stem}-{i}") for doc in sorted((ROOT / "docs").glob("*.md"))
            for i, code in enumerate(BLOCK.findall(doc.read_text()))]


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
