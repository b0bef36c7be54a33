"""The class page: a folder of learners' run files merged into one offline HTML page for the room
(``course class FOLDER --out DIR``).

An instructor collects the run files the last cell of each lesson wrote (laptops, Colab, Kaggle, GPUs; any lessons)
in one folder. The page shows the room's hardware (runs and learners per machine kind, load, torch builds,
platforms) and who ran which lesson, each guess key's guesses against the room's measurements and the analytic
model, the claims that did not hold or were not judged (where, and grouped by why), each machine set against the
atlas of recorded runs (its range widened by a noise band; only the values outside it listed, the atlas's own runs
left out), and every file skipped or flagged, by name, with the reason.

Each part has its own file: ``reading`` (the files, each merged or skipped, copies found by content), ``summary``
(the tables, pure), ``figures`` (inline SVG strip plots) and ``page`` (the HTML and :func:`write_class_page`).
"""

from __future__ import annotations

from .figures import strip_svg
from .page import PAGE_NAME, ClassPage, class_page_html, escape, write_class_page
from .reading import MAX_FILES, Loaded, Reading, printable, read_folder
from .summary import (
    MIN_RECORDED,
    NOISE_SHARE,
    VERDICTS,
    AtlasCell,
    ClaimCase,
    ClaimRow,
    GridCell,
    GridRow,
    GuessPoint,
    GuessRow,
    KindRow,
    Landscape,
    LessonGrid,
    MachineAtlas,
    atlas_copies,
    atlas_rows,
    claim_rows,
    factor,
    guess_rows,
    landscape,
    lesson_grid,
    noise_band,
)

__all__ = [
    "write_class_page",
    "ClassPage",
    "class_page_html",
    "read_folder",
    "Reading",
    "Loaded",
    "landscape",
    "lesson_grid",
    "guess_rows",
    "claim_rows",
    "atlas_rows",
    "atlas_copies",
    "noise_band",
    "factor",
    "strip_svg",
    "escape",
    "printable",
    "Landscape",
    "KindRow",
    "LessonGrid",
    "GridRow",
    "GridCell",
    "GuessRow",
    "GuessPoint",
    "ClaimRow",
    "ClaimCase",
    "MachineAtlas",
    "AtlasCell",
    "VERDICTS",
    "NOISE_SHARE",
    "MIN_RECORDED",
    "PAGE_NAME",
    "MAX_FILES",
]
