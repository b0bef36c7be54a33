"""The class page's small pieces of markup: every text from a file escaped, numbers and units written one way.

Shared by the page (:mod:`.page`) and its sections on claims and the atlas (:mod:`.checks_sections`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from .figures import fmt
from .reading import printable

__all__ = ["escape"]


def escape(text: str) -> str:
    """Text from a file made safe for the page: non-printing characters written as escapes, then
    ``html.escape(..., quote=True)`` (``<``, ``>``, ``&`` and both quotes)."""
    return html.escape(printable(text), quote=True)


def _e(value: object) -> str:
    return escape(str(value))


def _num(x: float | None) -> str:
    return f'<td class="num">{_e(fmt(x))}</td>'


def _with_unit(x: float | None, unit: str) -> str:
    """``1.8x``, ``12 %``, ``150 GFLOP/s``: a unit that is a word gets a space (a file's own spaces are dropped)."""
    unit = unit.strip()
    if x is None or not unit:
        return fmt(x)
    return f"{fmt(x)}{unit}" if unit in ("x", "%") or not unit[0].isalnum() else f"{fmt(x)} {unit}"


def _counts(pairs: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{_e(v)} ({n})" for v, n in pairs)
