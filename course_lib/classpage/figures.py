"""The class page's figures as inline SVG (no image files, no script, no network): a strip plot per guess key.

Every text that comes from a run file (a label, a unit) is escaped by the caller's ``escape`` before it is placed
inside the SVG; numbers are formatted here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from .summary import GuessRow

__all__ = ["fmt", "strip_svg"]

WIDTH, LEFT, RIGHT, LANE, TOP, AXIS = 720, 112, 16, 24, 8, 30
COLOURS = {"guesses": "#d95f02", "measured": "#555555", "model": "#1f5fbf"}


def fmt(x: float | None) -> str:
    """A number in 3 significant figures, without a long tail of digits (``n/a`` for None)."""
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def _scale(values: list[float]) -> tuple[Callable[[float], float], list[float], bool]:
    """(value -> x pixel, tick values, log scale?) over the values: logarithmic where all are above zero and they
    span more than a factor of 20, else linear."""
    lo, hi = min(values), max(values)
    log = lo > 0 and hi / lo > 20
    span = WIDTH - LEFT - RIGHT
    if log:
        a, b = math.log10(lo) - 0.05, math.log10(hi) + 0.05
        ticks = [10.0**k for k in range(math.ceil(a), math.floor(b) + 1)]
        return (lambda v: LEFT + (math.log10(v) - a) / (b - a) * span), ticks, True
    if hi == lo:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    else:
        pad = (hi - lo) * 0.05
        lo, hi = lo - pad, hi + pad
    step = 10 ** math.floor(math.log10((hi - lo) / 4))
    for mult in (1, 2, 5, 10):
        if (hi - lo) / (step * mult) <= 6:
            step *= mult
            break
    first = math.ceil(lo / step) * step
    ticks = [first + i * step for i in range(int((hi - first) / step) + 1)]
    if step < 1 and max(abs(lo), abs(hi)) < 1e5:  # enough decimals to tell neighbouring ticks apart
        digits = -math.floor(math.log10(step))
        ticks = [round(t, digits) for t in ticks]
    return (lambda v: LEFT + (v - lo) / (hi - lo) * span), ticks, False


def _tick(t: float, ticks: list[float]) -> str:
    """A tick's label: 3 significant figures, more where neighbouring ticks would otherwise read the same."""
    if len({fmt(x) for x in ticks}) == len(ticks):
        return fmt(t)
    return f"{t:.10g}"


def _mark(lane: str, x: float, y: float, tip: str) -> str:
    colour = COLOURS[lane]
    if lane == "guesses":
        shape = f'<path d="M{x:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 4:.1f} L{x - 5:.1f},{y + 4:.1f} Z"'
    elif lane == "model":
        shape = f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" transform="rotate(45 {x:.1f} {y:.1f})"'
    else:
        shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4"'
    return f'{shape} fill="{colour}" fill-opacity="0.6" stroke="{colour}"><title>{tip}</title>' + (
        "</path>" if lane == "guesses" else "</rect>" if lane == "model" else "</circle>"
    )


def strip_svg(row: GuessRow, escape: Callable[[str], str]) -> str:
    """An inline SVG strip plot of one guess key: each learner's guess, each run's measurement and model value on
    one axis (logarithmic where they span more than 20x), each mark titled with whose it is and its value. A lane
    with no marks (no guesses in a room that ran with the answers revealed) is left out."""
    if not isinstance(row, GuessRow):
        raise TypeError(f"row must be a GuessRow (guess_rows), got {type(row).__name__}")
    if not callable(escape):
        raise TypeError(f"escape must be a function of a string (html.escape), got {type(escape).__name__}")
    lanes = {
        "guesses": [(p.who, p.guess) for p in row.points if p.guess is not None],
        "measured": [(p.who, p.measured) for p in row.points],
        "model": [(p.who, p.model) for p in row.points if p.model is not None],
    }
    lanes = {lane: marks for lane, marks in lanes.items() if marks or lane == "measured"}  # no empty lane
    values = [v for marks in lanes.values() for _, v in marks]
    x_of, ticks, log = _scale(values)
    height = TOP + LANE * len(lanes) + AXIS
    unit = f" {row.unit.strip()}" if row.unit.strip() else ""
    label = f"{row.key}: guesses, measurements and model values{' (log scale)' if log else ''}"
    out = [
        f'<svg class="strip" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}">'
    ]
    bottom = TOP + LANE * len(lanes)
    middle = statistics.median(p.measured for p in row.points)
    if middle > 0:  # the band a guess of the typical run's value had to land in to count as within 2x
        x0, x1 = (min(max(x_of(v), LEFT), WIDTH - RIGHT) for v in (middle / 2, middle * 2))
        out.append(
            f'<rect x="{x0:.1f}" y="{TOP}" width="{x1 - x0:.1f}" height="{bottom - TOP}" fill="#2a9d2a" '
            'fill-opacity="0.08"><title>within 2x of the median measurement</title></rect>'
        )
    for t in ticks:
        x = x_of(t)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}" stroke="#e4e4e4"/>')
        out.append(
            f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" font-size="11">{escape(_tick(t, ticks))}</text>'
        )
    out.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{bottom + 27}" text-anchor="middle" font-size="11" '
        f'fill="#555">{escape((row.unit.strip() or "value") + (" (log scale)" if log else ""))}</text>'
    )
    for i, (lane, marks) in enumerate(lanes.items()):
        y = TOP + LANE * i + LANE / 2
        out.append(
            f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="12" fill="{COLOURS[lane]}">'
            f"{lane} ({len(marks)})</text>"
        )
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#f0f0f0"/>')
        for j, (who, v) in enumerate(marks):
            jitter = ((j * 7) % 5 - 2) * 2.0 if len(marks) > 1 else 0.0
            out.append(_mark(lane, x_of(v), y + jitter, escape(f"{who}: {fmt(v)}{unit}")))
    out.append("</svg>")
    return "".join(out)
