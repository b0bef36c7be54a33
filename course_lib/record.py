"""What a lesson run measured, under stable keys: the values its prose discusses, its guesses and its claims.

Every number a lesson discusses has a key, ``"<lesson>/<name>"`` (``"04/topk_momentum_gap"``, ``"05.3/distill_wins"``).
A claim (:func:`course_lib.claims.claim`), a scored guess (:func:`course_lib.checks.score_guess`) and a value a
lesson compares with the atlas of recorded runs (:func:`course_lib.runs.compare`) each add one entry to this
process's log and publish it next to the cell's output as JSON (:data:`VALUE_MIME`), so an executed notebook
carries a machine-readable list of what it measured. The last cell of every lesson writes the log as one file
(:func:`course_lib.runs.save`); the atlas and the class page are made of such files.

This module holds only the log and the key rule (no hardware, no files), so that every layer can record.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["VALUE_MIME", "KEY_PATTERN", "check_key", "lesson_of", "value", "entries", "clear"]

#: The MIME type of an entry published beside a cell's output (an executed notebook carries them).
VALUE_MIME = "application/vnd.course.value+json"

#: A key: the lesson's number (``00``-``07``, with a part such as ``05.3``), a slash, a lower-case name.
KEY_PATTERN = re.compile(r"^(0[0-9](?:\.[1-9])?)/([a-z][a-z0-9_]{0,63})$")

_LOG: list[dict] = []


def check_key(key: Any) -> str:
    """``key`` if it is a valid key, else ``TypeError``/``ValueError`` naming the rule."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a string such as '04/topk_gap', got {type(key).__name__}")
    if not KEY_PATTERN.match(key):
        raise ValueError(
            f"key must be '<lesson>/<name>' (a lesson number such as 04 or 05.3, a slash, then lower-case letters, "
            f"digits and underscores, at most 64), got {key!r}"
        )
    return key


def lesson_of(key: str) -> str:
    """The lesson part of a key: ``"05.3/distill_wins"`` -> ``"05.3"``."""
    return KEY_PATTERN.match(check_key(key)).group(1)


def _finite(name: str, x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) and not hasattr(x, "__float__"):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    number = float(x)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {number!r}")
    return number


def log(entry: dict) -> dict:
    """Add one entry (a dict with ``kind`` and ``key``) to this process's log, replacing an earlier entry of the
    same kind and key (a cell run twice counts once, with its latest result). Returns the entry."""
    check_key(entry.get("key"))
    _LOG[:] = [e for e in _LOG if not (e["kind"] == entry["kind"] and e["key"] == entry["key"])]
    _LOG.append(entry)
    return entry


def value(key: str, measured: float, *, unit: str = "", what: str = "") -> dict:
    """Log a number the lesson discusses (``measured``, in ``unit``) under ``key``; ``what`` says what it is in a
    few words. Returns the entry. :func:`course_lib.runs.compare` calls this for each value it shows."""
    if not isinstance(unit, str) or not isinstance(what, str):
        raise TypeError("unit and what must be strings")
    return log(
        {"kind": "value", "key": check_key(key), "value": _finite("measured", measured), "unit": unit, "what": what}
    )


def entries(lesson: str | None = None) -> list[dict]:
    """The logged entries (copies), in the order logged; only those of ``lesson`` (``"04"``) where given."""
    return [dict(e) for e in _LOG if lesson is None or lesson_of(e["key"]) == lesson]


def clear() -> None:
    """Forget every entry (tests; a learner never needs it: a rerun replaces an entry of the same key)."""
    _LOG.clear()
