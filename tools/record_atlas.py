"""Record lesson runs into the atlas (course_lib/tables/atlas/<lesson>/), from executed notebooks, never by typing.

Every executed lesson ends with its run file (the last cell, ``runs.save``, shows it as
``application/vnd.course.run+json``): the keyed values, guesses and claims of that run and the machine it ran on,
described from inside the kernel (CPU, the kernel level PyTorch used, bf16 mode, cores, free cores, accelerator,
torch, idle or busy, any setting that held the kernels below the CPU's level). This tool copies that run file into
the atlas, one file per run (lesson, machine kind, load and day, and a letter for a second run of the day):

    python tools/record_atlas.py                       # every executed copy under build/executed/notebooks/
    python tools/record_atlas.py build/executed/notebooks/04_training_tricks.ipynb  course-runs/04-laptop.json

It refuses an executed copy that is stale (its code differs from the notebook's now), that stopped with an error,
or whose last cell did not run, and a run file that ``runs.load_run`` refuses. It also refuses a run with a value
outside its own kind and load's recorded range, widened by the noise allowance, where three or more runs recorded
it: a program that woke up mid-run slows some cells and not others, which the load measured at the start cannot
see. ``--force`` records it anyway (a real change: a new torch release, a new session of a drifting host). A
learner's run file (``course-runs/``) can be recorded the same way: that is how a new machine kind joins the atlas.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import nbrun  # noqa: E402

from course_lib.runs import ATLAS, RunFileError, check_run, kind_of, load_run  # noqa: E402
from course_lib.runs.atlas import _widened, atlas_runs  # noqa: E402
from course_lib.runs.runfile import NOT_REACHED  # noqa: E402


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80]


def run_of_executed(path: Path) -> dict:
    """The run file an executed lesson's last cell wrote; RunFileError where the copy cannot be trusted."""
    nb = nbformat.read(path, as_version=4)
    source = ROOT / "notebooks" / path.name
    meta = nb.metadata.get("course_run") or {}
    if meta.get("errors"):
        raise RunFileError(f"{path.name}: the run stopped with errors: {meta['errors'][:1]}")
    if source.exists() and meta.get("code_hash") != nbrun.code_hash(nbformat.read(source, as_version=4)):
        raise RunFileError(f"{path.name}: stale (the notebook's code changed since): run it again")
    saved = [o["data"][nbrun.RUN_MIME] for o in nb.cells[-1].get("outputs", []) if nbrun.RUN_MIME in o.get("data", {})]
    if not saved:
        raise RunFileError(f"{path.name}: its last cell (runs.save) did not run")
    run = check_run(saved[-1], path.name)
    if source.exists():  # a claim the atlas knew but the lesson no longer makes is not carried on as "not reached"
        code = "\n".join(c.source for c in nbformat.read(source, as_version=4).cells if c.cell_type == "code")
        kept = [e for e in run["entries"] if e.get("why") != NOT_REACHED or f'"{e["key"]}"' in code]
        run = dict(run, entries=kept)
    return run


def record(run: dict, atlas: Path = ATLAS) -> Path:
    """Write ``run`` into the atlas: ``<lesson>/<date>-<machine kind>-<idle|busy>.json``. A second run of the same
    lesson, kind, load and day is kept beside the first (``-b``, ``-c``, ...), never over it: an executed copy printed
    its comparison against the runs recorded before it, and that comparison must stay reproducible from the files."""
    state = "busy" if run["machine"]["busy"] else "idle"
    stem = atlas / run["lesson"] / f"{run['date']}-{_slug(kind_of(run['machine']))}-{state}"
    run = dict(run, label="")  # the atlas names machines, not people
    text = json.dumps(run, indent=1, sort_keys=True) + "\n"
    names = [stem.with_name(stem.name + (f"-{c}" if c else "") + ".json") for c in ("", *"bcdefghijklmnopqrstuvwxyz")]
    target = next((t for t in names if not t.exists() or t.read_text() == text), None)
    if target is None:
        raise RunFileError(f"{stem.name}: 26 runs of one kind, load and day are recorded already")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def outliers(run: dict, runs: tuple[dict, ...]) -> list[str]:
    """``run``'s values outside the range that three or more runs of its lesson, machine kind and load recorded,
    widened by the noise allowance: "key: value (lo to hi recorded)"."""
    same = [
        r
        for r in runs
        if r["lesson"] == run["lesson"]
        and kind_of(r["machine"]) == kind_of(run["machine"])
        and r["machine"]["busy"] == run["machine"]["busy"]
    ]
    found = []
    for e in run["entries"]:
        v = e.get("value")
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        seen = [
            x["value"]
            for r in same
            for x in r["entries"]
            if x["key"] == e["key"] and isinstance(x.get("value"), (int, float))
        ]
        if len(seen) >= 3:
            lo, hi = _widened(min(seen), max(seen), sorted(seen)[len(seen) // 2])
            if not lo <= v <= hi:
                found.append(f"{e['key']}: {v:.3g} ({min(seen):.3g} to {max(seen):.3g} recorded)")
    return found


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    force = "--force" in args
    args = [a for a in args if a != "--force"]
    paths = [Path(a) for a in args] or sorted((nbrun.EXECUTED / "notebooks").glob("[0-9]*.ipynb"))
    failed = 0
    for path in paths:
        try:
            run = run_of_executed(path) if path.suffix == ".ipynb" else load_run(path)
        except (RunFileError, OSError, ValueError) as exc:
            print(f"not recorded: {exc}")
            failed += 1
            continue
        odd = [] if force else outliers(run, atlas_runs())
        if odd:
            print(
                f"not recorded: {path.name} has {len(odd)} value(s) outside its kind's recorded range, e.g. {odd[0]}: "
                "disturbed? Run it again on a quiet machine, or pass --force to record a real change"
            )
            failed += 1
            continue
        try:
            target = record(run)
        except RunFileError as exc:
            print(f"not recorded: {exc}")
            failed += 1
            continue
        print(f"recorded {len(run['entries'])} entries of lesson {run['lesson']}: {target.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
