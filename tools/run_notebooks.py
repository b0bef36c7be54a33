#!/usr/bin/env python3
"""Execute every notebook in notebooks/ and solutions/, store its outputs, record its run time.

    python tools/run_notebooks.py                 # all notebooks
    python tools/run_notebooks.py notebooks/01*   # some
    python tools/run_notebooks.py --measure-only  # time them here (e.g. a GPU runtime), change no file

Writes the outputs back into each notebook (so a code host shows them) and the measured
durations into notebooks/timings.json, then prints the table. Fails if a notebook raises or
takes more than the budget.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ROOT / "notebooks" / "timings.json"
BUDGET_S = 90.0


def code_hash(nb: nbformat.NotebookNode) -> str:
    """Hash of the code cells: timings.json entries go stale when the code changes."""
    code = "\n# ---\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return hashlib.sha256(code.encode()).hexdigest()[:16]


# a tqdm bar in a notebook is a widget; its stored text is the bar as first drawn ("0/12"), which a
# code host would show forever. The bar is only feedback while the cell runs, so it is not stored.
PROGRESS_BAR = re.compile(r"\|\s*\d+/\d+ \[")


def is_progress_bar(output: dict) -> bool:
    """A tqdm progress bar (widget or text) among a cell's outputs."""
    data = output.get("data", {})
    text = data.get("text/plain", "") if output.get("output_type") == "display_data" else ""
    return bool(PROGRESS_BAR.search(text if isinstance(text, str) else "".join(text)))


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def keep_shown_widgets(nb: nbformat.NotebookNode) -> None:
    """Keep only the saved state of widgets an output still shows (and the models they refer to): the
    website draws widgets from it, and the progress bars' state would only bloat the notebook."""
    saved = nb.metadata.get("widgets", {}).get(WIDGET_STATE)
    if not saved:
        return
    state = saved.get("state", {})
    todo = [o["data"][WIDGET_VIEW]["model_id"] for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if WIDGET_VIEW in o.get("data", {})]
    keep: set[str] = set()
    while todo:
        model_id = todo.pop()
        if model_id in keep or model_id not in state:
            continue
        keep.add(model_id)
        refs = json.dumps(state[model_id].get("state", {}))
        todo += re.findall(r"IPY_MODEL_([0-9a-f]+)", refs)
    if keep:
        saved["state"] = {k: v for k, v in state.items() if k in keep}
    else:
        del nb.metadata["widgets"]


def run(path: Path, store: bool = True) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if not is_progress_bar(o)]
    keep_shown_widgets(nb)
    if store:
        nbformat.write(nb, path)
    return seconds


def machine() -> str:
    import psutil

    from course_lib.hardware import detect

    info = detect()
    gpus = "".join(f", {a.name}" for a in info.accelerators)
    return f"{info.cpu.model}, {psutil.cpu_count(logical=False)} cores{gpus}, torch {info.torch_version}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="notebooks to run (default: notebooks/ and solutions/)")
    parser.add_argument("--measure-only", action="store_true",
                        help="print this run's times and change no file (an instructor timing a GPU runtime)")
    args = parser.parse_args(argv)
    paths = [Path(p).resolve() for p in args.paths] or sorted(
        list((ROOT / "notebooks").glob("*.ipynb")) + list((ROOT / "solutions").glob("*.ipynb")))
    table = json.loads(TIMINGS.read_text()) if TIMINGS.exists() and not args.measure_only else {}
    where = machine()
    over = []
    for path in paths:
        rel = str(path.relative_to(ROOT))
        print(f"running {rel} ...", flush=True)
        seconds = run(path, store=not args.measure_only)
        nb = nbformat.read(path, as_version=4)
        table[rel] = {"seconds": round(seconds, 1), "code_hash": code_hash(nb), "machine": where,
                      "date": dt.date.today().isoformat()}
        if seconds > BUDGET_S:
            over.append(rel)
    if not args.measure_only:
        TIMINGS.write_text(json.dumps(dict(sorted(table.items())), indent=2) + "\n")
    print(f"\n{where}\n{'notebook':<45}{'seconds':>9}")
    for rel, row in sorted(table.items()):
        print(f"{rel:<45}{row['seconds']:>9.1f}")
    if over:
        print(f"over the {BUDGET_S:.0f} s budget: {', '.join(over)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
