"""Lesson runs as files: what a learner's run measured, the atlas of recorded runs, and where this run falls.

===============  ==============================================================================================
``runfile``      ``save`` (the last cell of every lesson), ``load_run`` (a file from another machine, never
                 trusted), ``run_from_notebook`` (``course run-file``), ``machine``, ``kind_of``
``atlas``        ``compare``: this run's values among the recorded runs, per machine kind; ``records``
===============  ==============================================================================================

Every number a lesson discusses has a key (:mod:`course_lib.record`); claims and scored guesses log theirs, and
:func:`compare` logs the other values it shows.
"""

from __future__ import annotations

from .atlas import ATLAS, Comparison, atlas_runs, claim_keys, compare, groups, records
from .runfile import (
    LESSONS,
    RUN_MIME,
    RunFileError,
    build_run,
    check_run,
    kind_of,
    load_run,
    machine,
    run_from_notebook,
    runs_folder,
    save,
    state_of,
)

__all__ = [
    "ATLAS",
    "Comparison",
    "atlas_runs",
    "claim_keys",
    "compare",
    "groups",
    "records",
    "LESSONS",
    "RUN_MIME",
    "RunFileError",
    "build_run",
    "check_run",
    "kind_of",
    "load_run",
    "machine",
    "run_from_notebook",
    "runs_folder",
    "save",
    "state_of",
]
